"""Lambda entry point of the Validate task. Thin: parse, call, map."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtime.shared.aws import Clients
from runtime.shared.observability import MetricUnit, instrumented, metrics
from runtime.taxi_etl import contract, phase_wiring
from runtime.taxi_etl.models import parse_rows
from runtime.taxi_etl.phase_wiring import PhaseDeps, PhaseSettings
from runtime.taxi_etl.phases import run_validation
from runtime.taxi_etl.store import StatusTable
from runtime.taxi_etl.transient import transient_errors

if TYPE_CHECKING:  # an annotation only: the handler does not import Powertools' typing module
    from aws_lambda_powertools.utilities.typing import LambdaContext


@functools.cache
def settings() -> PhaseSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return PhaseSettings.from_env(os.environ)


@functools.cache
def deps() -> PhaseDeps:
    """Built on the first invocation (cold start), never at import time; one pooled connection per row written at once."""
    return phase_wiring.build(settings(), Clients(pool_connections=phase_wiring.PHASE_ROW_CONCURRENCY))


def handle_validation(event: Mapping[str, Any], status: StatusTable, concurrency: int = 1) -> dict[str, Any]:
    result = run_validation(parse_rows(event), status, concurrency=concurrency)
    metrics.add_metric(name=contract.METRIC_ROWS_VALIDATED, unit=MetricUnit.Count, value=len(result.passed))
    metrics.add_metric(name=contract.METRIC_ROWS_REJECTED_BY_VALIDATION, unit=MetricUnit.Count, value=len(result.rejected))
    return result.to_json()


def handle(event: dict[str, Any], context: LambdaContext, deps: PhaseDeps) -> dict[str, Any]:
    with transient_errors():  # AWS failing a call is no verdict on the rows: retried longer, then redriven
        return handle_validation(event, deps.status, deps.concurrency)


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
