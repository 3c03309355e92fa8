"""Lambda entry point of the stream router (DynamoDB stream, filtered). Thin: parse, call, map."""

from __future__ import annotations

import functools
import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime.event_log import contract, router_wiring
from runtime.event_log.router_wiring import RouterDeps, RouterSettings
from runtime.shared.aws import Clients
from runtime.shared.observability import MetricUnit, instrumented, logger, metrics


@functools.cache
def settings() -> RouterSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return RouterSettings.from_env(os.environ)


@functools.cache
def deps() -> RouterDeps:
    """Built on the first invocation (cold start), never at import time."""
    return router_wiring.build(settings(), Clients())


def handle(event: dict[str, Any], context: LambdaContext, deps: RouterDeps) -> dict[str, Any]:
    records = event.get("Records", [])
    report = deps.router.route(records)
    metrics.add_metric(name=contract.METRIC_SIDE_EFFECTS_SENT, unit=MetricUnit.Count, value=report.sent)
    if report.failures:
        logger.warning("reporting batch item failures", extra={"failures": len(report.failures), "records": len(records)})
    return {"batchItemFailures": report.batch_item_failures()}


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
