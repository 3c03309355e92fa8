"""Lambda entry point of the Store task. Thin: parse, call, map.

A row that cannot be written raises (StoreConflict, or DynamoDB's own error): the workflow
retries the task, then its Catch flags the rows that are not stored.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtime.shared.aws import Clients
from runtime.shared.observability import MetricUnit, add_dimensioned_metric, instrumented, metrics
from runtime.taxi_etl import contract, phase_wiring, store_wiring
from runtime.taxi_etl.final_table import FinalTable
from runtime.taxi_etl.models import parse_rows
from runtime.taxi_etl.store import StatusTable
from runtime.taxi_etl.store_phase import run_store
from runtime.taxi_etl.store_wiring import StoreDeps, StoreSettings
from runtime.taxi_etl.transient import transient_errors

if TYPE_CHECKING:  # an annotation only: the handler does not import Powertools' typing module
    from aws_lambda_powertools.utilities.typing import LambdaContext


@functools.cache
def settings() -> StoreSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return StoreSettings.from_env(os.environ)


@functools.cache
def deps() -> StoreDeps:
    """Built on the first invocation (cold start), never at import time; one pooled connection per row written at once."""
    return store_wiring.build(settings(), Clients(pool_connections=phase_wiring.PHASE_ROW_CONCURRENCY))


def handle_store(event: Mapping[str, Any], status: StatusTable, final: FinalTable, concurrency: int = 1) -> dict[str, Any]:
    report = run_store(parse_rows(event), status, final, concurrency=concurrency)
    metrics.add_metric(name=contract.METRIC_ROWS_STORED, unit=MetricUnit.Count, value=report.stored)
    metrics.add_metric(name=contract.METRIC_ROWS_ALREADY_STORED, unit=MetricUnit.Count, value=report.already_stored)
    # Real trips stored with something odd about them, by finding: the dashboard's data-quality graph.
    for finding, rows in report.findings:
        add_dimensioned_metric(contract.METRIC_ROWS_STORED_WITH_FINDING, rows, finding=finding.value)
    return report.result.to_json()


def handle(event: dict[str, Any], context: LambdaContext, deps: StoreDeps) -> dict[str, Any]:
    with transient_errors():  # AWS failing a call is no verdict on the rows: retried longer, then redriven
        return handle_store(event, deps.status, deps.final, deps.concurrency)


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
