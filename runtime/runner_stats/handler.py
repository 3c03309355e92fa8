"""Lambda entry point for the runner-stats Kinesis consumer. Thin: parse, call, map."""

from __future__ import annotations

import functools
import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime.runner_stats import contract
from runtime.runner_stats.service import BatchReport, RunnerStatsService
from runtime.runner_stats.settings import RunnerStatsSettings
from runtime.runner_stats.store import DynamoRunStatsStore
from runtime.shared.observability import MetricUnit, instrumented, logger, metrics

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
def service() -> RunnerStatsService:
    """Built on the first invocation (cold start), never at import time."""
    config = settings()
    store = DynamoRunStatsStore(config.tables, reject_payload_max_bytes=config.reject_payload_max_bytes)
    return RunnerStatsService(store, config.options)


def publish(report: BatchReport) -> None:
    for count_name, metric_name in _METRIC_NAMES.items():
        metrics.add_metric(name=metric_name, unit=MetricUnit.Count, value=report.counts[count_name])


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    records = event.get("Records", [])
    report = service().process(records)
    publish(report)
    if report.failures:
        logger.warning("reporting batch item failures", extra={"failures": len(report.failures), "records": len(records)})
    return {"batchItemFailures": report.batch_item_failures()}
