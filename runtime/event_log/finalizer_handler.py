"""Lambda entry point of the payload finalizer (SQS): removes the pending tag. Thin."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime.event_log import contract, finalizer_wiring
from runtime.event_log.finalizer_wiring import FinalizerDeps, FinalizerSettings
from runtime.event_log.messages import SideEffect, SideEffectMessage
from runtime.event_log.objects import MessageQueue, PayloadObjects
from runtime.event_log.side_effects import finalize_payload
from runtime.event_log.sqs_batch import process_batch
from runtime.shared.aws import Clients
from runtime.shared.observability import MetricUnit, instrumented, metrics


@functools.cache
def settings() -> FinalizerSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return FinalizerSettings.from_env(os.environ)


@functools.cache
def deps() -> FinalizerDeps:
    """Built on the first invocation (cold start), never at import time."""
    return finalizer_wiring.build(settings(), Clients())


def handle_payload_event(event: Mapping[str, Any], payloads: PayloadObjects, messages: MessageQueue, queue_url: str) -> dict[str, Any]:
    def finalize(message: SideEffectMessage, _: Mapping[str, Any]) -> bool:
        finalize_payload(payloads, message)
        metrics.add_metric(name=contract.METRIC_PAYLOADS_FINALIZED, unit=MetricUnit.Count, value=1)
        return True

    return {"batchItemFailures": process_batch(list(event.get("Records", [])), SideEffect.FINALIZE_PAYLOAD, messages, queue_url, finalize)}


def handle(event: dict[str, Any], context: LambdaContext, deps: FinalizerDeps) -> dict[str, Any]:
    return handle_payload_event(event, deps.objects, deps.queue, deps.settings.queue_url)


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
