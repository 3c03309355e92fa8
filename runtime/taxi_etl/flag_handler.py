"""Lambda entry point of the three flag steps (one module, the phase comes in the input).

Input: `{"phase": "validation" | "transformation" | "store", "state": <the state at the flag step>}`.
Output: `{"error": "<Phase>Failed", "cause": "...", "flagged": n}`; the Fail state after a
failed phase carries that error and cause.

With `"flagMode"` (contract.FLAG_MODE_KEY) the state machine asks for the automatic redrive's steps:
`retryable` flags the rows of a phase AWS failed as `retryable:<error>`, `clear` clears those flags
before the phase runs again (output `{"cleared": n}`), and `redriven` flags them retryable for good
when AWS failed that second pass too (counted in RowsStillRetryable, which is alarmed).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtime.shared.aws import Clients
from runtime.shared.observability import add_dimensioned_metric, instrumented, logger
from runtime.taxi_etl import contract, flag_wiring
from runtime.taxi_etl.final_table import FinalTable
from runtime.taxi_etl.flag_step import FlagMode, clear_retryable, flag, parse_flag_request
from runtime.taxi_etl.flag_wiring import FlagDeps, FlagSettings
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.store import StatusTable
from runtime.taxi_etl.transient import transient_errors

if TYPE_CHECKING:  # an annotation only: the handler does not import Powertools' typing module
    from aws_lambda_powertools.utilities.typing import LambdaContext


@functools.cache
def settings() -> FlagSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return FlagSettings.from_env(os.environ)


@functools.cache
def deps() -> FlagDeps:
    """Built on the first invocation (cold start), never at import time; one pooled connection per update made at once."""
    return flag_wiring.build(settings(), Clients(pool_connections=flag_wiring.FLAG_UPDATE_CONCURRENCY))


def handle_flag(event: Mapping[str, Any], status: Mapping[Phase, StatusTable], final: FinalTable, concurrency: int = 1) -> dict[str, Any]:
    request = parse_flag_request(event)
    phase = request.phase.value
    if request.mode is FlagMode.CLEAR:
        cleared = clear_retryable(request, status, concurrency=concurrency)
        logger.info("retryable flags cleared for the redrive", extra={"phase": phase, "rows": len(request.rows), "cleared": cleared})
        return {"cleared": cleared}
    outcome = flag(request, status, final, concurrency=concurrency)
    if request.mode is FlagMode.RETRYABLE:
        # Not an outcome yet: the rows are redriven after a wait. Only the redrive's own failure is alarmed.
        add_dimensioned_metric(contract.METRIC_ROWS_AWAITING_REDRIVE, outcome.flagged, phase=phase)
    else:
        # Alarms watch executions per phase; the dashboard splits rows by phase and reason.
        if outcome.flagged:
            add_dimensioned_metric(contract.METRIC_EXECUTIONS_FLAGGED, 1, phase=phase)
        for detail, rows in outcome.by_detail:
            add_dimensioned_metric(contract.METRIC_ROWS_FLAGGED, rows, phase=phase, reason=detail)
        if request.mode is FlagMode.REDRIVEN:
            # Zero too: a redrive that flagged nothing (its rows were stored meanwhile) is a data point of its own.
            add_dimensioned_metric(contract.METRIC_ROWS_STILL_RETRYABLE, outcome.flagged, phase=phase)
    logger.info(
        "rows flagged",
        extra={
            "phase": phase,
            "flagged": outcome.flagged,
            "caught": request.error.name if request.error else None,
            "mode": request.mode.value,
        },
    )
    return outcome.to_json()


def handle(event: dict[str, Any], context: LambdaContext, deps: FlagDeps) -> dict[str, Any]:
    with transient_errors():  # AWS failing the flag step is retried longer, like a phase's
        return handle_flag(event, deps.status, deps.final, deps.concurrency)


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
