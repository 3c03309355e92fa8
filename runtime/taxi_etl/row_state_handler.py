"""Lambda entry point of GET /trips/{StoreRequestId} (behind the key authorizer). Thin: parse, read, map.

200 {"StoreRequestId", "state": "pending" | "stored" | "flagged", "generation", ...}: a flagged row
with its phase, reason code, detail and message; a stored one with its findings, unexplained
amount and trip summary; a pending one with the last phase it reached. 404 when no phase has seen
the id; 400 for a malformed id. A separate function from the POST routes': it may only read.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime.shared import snapstart
from runtime.shared.aws import Clients
from runtime.shared.http import HttpRequest, HttpResponse, HttpRouter, json_response
from runtime.shared.observability import MetricUnit, instrumented, logger, metrics
from runtime.shared.refusals import Refusal
from runtime.taxi_etl import contract, row_state_wiring
from runtime.taxi_etl.final_table import RowReader
from runtime.taxi_etl.row_state import parse_row_id, row_state
from runtime.taxi_etl.row_state_wiring import RowStateDeps, RowStateSettings


@functools.cache
def settings() -> RowStateSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return RowStateSettings.from_env(os.environ)


@functools.cache
def deps() -> RowStateDeps:
    """Built on the first invocation (cold start), never at import time."""
    return row_state_wiring.build(settings(), Clients())


# With SnapStart, after each restore: fresh random seeds, and the clients built again (runtime/shared/snapstart.py).
after_restore = snapstart.after_restore(deps)


def count_refusal(refusal: Refusal) -> None:
    metrics.add_metric(name=contract.METRIC_REQUESTS_REFUSED, unit=MetricUnit.Count, value=1)


router: HttpRouter[RowStateDeps] = HttpRouter(count_refusal)


def lookup(store_request_id: str | None, rows: RowReader) -> tuple[int, dict[str, Any]]:
    """The HTTP status and body for one id."""
    row_id = parse_row_id(store_request_id)
    state = row_state(row_id, *rows.read(row_id))
    if state is None:
        return 404, {
            "StoreRequestId": row_id,
            "error": "no phase has seen this id: it was never accepted, or was accepted moments ago and its execution has not started",
        }
    metrics.add_metric(name=contract.METRIC_ROW_STATES_READ, unit=MetricUnit.Count, value=1)
    logger.info("row state read", extra={"StoreRequestId": row_id, "state": state.state.value})
    return 200, state.to_json()


@router.get("/trips/<store_request_id>")
def get_row_state(request: HttpRequest, deps: RowStateDeps, store_request_id: str) -> HttpResponse:
    return json_response(*lookup(store_request_id, deps.reader))


def handle(event: dict[str, Any], context: LambdaContext, deps: RowStateDeps) -> dict[str, Any]:
    return router.resolve(event, deps)


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
