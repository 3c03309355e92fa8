"""Lambda entry point of the three flag steps (one module, the phase comes in the input).

Input: `{"phase": "validation" | "transformation" | "store", "state": <the state at the flag step>}`.
Output: `{"error": "<Phase>Failed", "cause": "...", "flagged": n}`; the Fail state after a
failed phase carries that error and cause.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime.shared.aws import Clients
from runtime.shared.observability import add_dimensioned_metric, instrumented, logger
from runtime.taxi_etl import contract, wiring
from runtime.taxi_etl.models import Phase, parse_flag_request
from runtime.taxi_etl.phases import flag
from runtime.taxi_etl.settings import FlagSettings
from runtime.taxi_etl.store import FinalTable, StatusTable
from runtime.taxi_etl.wiring import FlagDeps


@functools.cache
def settings() -> FlagSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return FlagSettings.from_env(os.environ)


@functools.cache
def deps() -> FlagDeps:
    """Built on the first invocation (cold start), never at import time; one pooled connection per update made at once."""
    return wiring.build(settings(), Clients(pool_connections=wiring.FLAG_UPDATE_CONCURRENCY))


def handle_flag(event: Mapping[str, Any], status: Mapping[Phase, StatusTable], final: FinalTable, concurrency: int = 1) -> dict[str, Any]:
    request = parse_flag_request(event)
    outcome = flag(request, status, final, concurrency=concurrency)
    # Alarms watch executions per phase; the dashboard splits rows by phase and reason.
    if outcome.flagged:
        add_dimensioned_metric(contract.METRIC_EXECUTIONS_FLAGGED, 1, phase=request.phase.value)
    for detail, rows in outcome.by_detail:
        add_dimensioned_metric(contract.METRIC_ROWS_FLAGGED, rows, phase=request.phase.value, reason=detail)
    logger.info(
        "rows flagged",
        extra={"phase": request.phase.value, "flagged": outcome.flagged, "caught": request.error.name if request.error else None},
    )
    return outcome.to_json()


def handle(event: dict[str, Any], context: LambdaContext, deps: FlagDeps) -> dict[str, Any]:
    return handle_flag(event, deps.status, deps.final, deps.concurrency)


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
