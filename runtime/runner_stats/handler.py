"""Lambda entry point for the runner-stats Kinesis consumer. Thin: parse, call, map."""

from __future__ import annotations

import functools
import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime.runner_stats import contract, wiring
from runtime.runner_stats.service import BatchReport
from runtime.runner_stats.settings import RunnerStatsSettings
from runtime.runner_stats.wiring import CountSink, RunnerStatsDeps
from runtime.shared.observability import instrumented, logger

_METRIC_NAMES = {
    "accepted": contract.METRIC_ACCEPTED_MESSAGES,
    "duplicate": contract.METRIC_DUPLICATE_MESSAGES,
    "stale": contract.METRIC_STALE_MESSAGES,
    "suspect": contract.METRIC_SUSPECT_JUMPS,
    "rejected": contract.METRIC_REJECTED_RECORDS,
    "retried": contract.METRIC_COMMIT_RETRIES,
    "gaps_closed": contract.METRIC_GAPS_CLOSED,
}


@functools.cache
def settings() -> RunnerStatsSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return RunnerStatsSettings.from_env(os.environ)


@functools.cache
def deps() -> RunnerStatsDeps:
    """Built on the first invocation (cold start), never at import time."""
    return wiring.build(settings(), wiring.clients_for(settings()))


def publish(report: BatchReport, count: CountSink) -> None:
    for count_name, metric_name in _METRIC_NAMES.items():
        count(metric_name, report.counts[count_name])


def handle(event: dict[str, Any], context: LambdaContext, deps: RunnerStatsDeps) -> dict[str, Any]:
    """The entry point's work, with its dependencies injected (the world, the demo and the tests call this)."""
    records = event.get("Records", [])
    report = deps.service.process(records)
    publish(report, deps.count)
    if report.failures:
        logger.warning("reporting batch item failures", extra={"failures": len(report.failures), "records": len(records)})
    return {"batchItemFailures": report.batch_item_failures()}


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
