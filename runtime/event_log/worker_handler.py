"""Lambda entry point of the snapshot worker (SQS). Thin: parse, call, map."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime.event_log import contract, worker_wiring
from runtime.event_log.messages import SideEffect, SideEffectMessage
from runtime.event_log.sqs_batch import process_batch
from runtime.event_log.worker_wiring import WorkerDeps, WorkerSettings
from runtime.shared.aws import Clients
from runtime.shared.observability import MetricUnit, instrumented, logger, metrics


@functools.cache
def settings() -> WorkerSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return WorkerSettings.from_env(os.environ)


@functools.cache
def deps() -> WorkerDeps:
    """Built on the first invocation (cold start), never at import time."""
    return worker_wiring.build(settings(), Clients())


def handle(event: dict[str, Any], context: LambdaContext, deps: WorkerDeps) -> dict[str, Any]:
    """One SQS batch: every message built, deferred, handed off or found done; failures reported."""
    snapshot_worker = deps.worker()

    def build(message: SideEffectMessage, record: Mapping[str, Any]) -> bool:
        outcome = snapshot_worker.handle(
            message, str(record["receiptHandle"]), context.get_remaining_time_in_millis, context.aws_request_id
        )
        metrics.add_metric(name=contract.METRIC_SNAPSHOT_OUTCOMES[outcome.value], unit=MetricUnit.Count, value=1)
        logger.info("snapshot message handled", extra={"log_id": message.log_id, "seq": str(message.seq), "outcome": outcome.value})
        return not outcome.keeps_message

    failures = process_batch(list(event.get("Records", [])), SideEffect.BUILD_SNAPSHOT, deps.queue, deps.settings.options.queue_url, build)
    metrics.add_metric(name=contract.METRIC_SNAPSHOT_CHUNKS_WRITTEN, unit=MetricUnit.Count, value=snapshot_worker.progress.chunks_written)
    for seconds in snapshot_worker.progress.build_seconds:
        metrics.add_metric(name=contract.METRIC_SNAPSHOT_BUILD_SECONDS, unit=MetricUnit.Seconds, value=round(seconds, 3))
    return {"batchItemFailures": failures}


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
