"""Lambda entry point of the taxi ETL API (behind the key authorizer). Thin: parse, call, map.

POST /trips        one CSV line          -> 202 {"StoreRequestId", "execution", "duplicate": false}
                                            (200 with "duplicate": true when it was already processed;
                                            an unkeyed row already stored or flagged, by any route,
                                            starts no execution: 200 with its "state" and "execution": null)
POST /trips/batch  up to N CSV lines     -> 202 {"StoreRequestIds": [one per line], "execution", ...}
Optional header Idempotency-Key: the client's own id for the request (see requests.py).
Bodies are text/csv (charset=utf-8 or none; anything else 415) in strict UTF-8 (a BOM, UTF-16 or invalid bytes: 400).
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
from runtime.taxi_etl import api_wiring, contract
from runtime.taxi_etl.api_wiring import ApiDeps, ApiSettings
from runtime.taxi_etl.requests import (
    Submission,
    check_media_type,
    decode_body,
    parse_batch,
    parse_idempotency_key,
    parse_single,
)
from runtime.taxi_etl.row_state import State, row_state
from runtime.taxi_etl.workflow import StartOutcome


@functools.cache
def settings() -> ApiSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return ApiSettings.from_env(os.environ)


@functools.cache
def deps() -> ApiDeps:
    """Built on the first invocation (cold start), never at import time."""
    return api_wiring.build(settings(), Clients())


# With SnapStart, after each restore: fresh random seeds, and the clients built again (runtime/shared/snapstart.py).
after_restore = snapstart.after_restore(deps)


def count_refusal(refusal: Refusal) -> None:
    """Every refusal (400 invalid, 413 too large, 422 a reused Idempotency-Key) counts as one."""
    metrics.add_metric(name=contract.METRIC_REQUESTS_REFUSED, unit=MetricUnit.Count, value=1)


router: HttpRouter[ApiDeps] = HttpRouter(count_refusal)


def request_text(request: HttpRequest, max_bytes: int) -> tuple[str, str | None]:
    check_media_type(request.header("content-type"), request.body)
    key = parse_idempotency_key(request.header("idempotency-key"))
    return decode_body(request.body, is_base64=request.is_base64, max_bytes=max_bytes), key


def already_done(store_request_id: str, deps: ApiDeps) -> State | None:
    """The row's state when a transaction under its id has ended (stored or flagged): one read of its four items."""
    state = row_state(store_request_id, *deps.rows.read(store_request_id))
    return state.state if state is not None and state.state is not State.PENDING else None


def start(submission: Submission, deps: ApiDeps) -> tuple[int, dict[str, Any]]:
    started = deps.workflow.start(submission.execution_name, submission.execution_input())
    duplicate = started.outcome == StartOutcome.DUPLICATE
    metrics.add_metric(
        name=contract.METRIC_DUPLICATE_REQUESTS if duplicate else contract.METRIC_EXECUTIONS_STARTED, unit=MetricUnit.Count, value=1
    )
    metrics.add_metric(name=contract.METRIC_ROWS_SUBMITTED, unit=MetricUnit.Count, value=len(submission.rows))
    logger.info("submitted", extra={"execution": submission.execution_name, "rows": len(submission.rows), "duplicate": duplicate})
    return (200 if duplicate else 202), {"execution": submission.execution_name, "duplicate": duplicate}


@router.post("/trips")
def submit_trip(request: HttpRequest, deps: ApiDeps) -> HttpResponse:
    config = deps.settings
    text, key = request_text(request, config.max_line_bytes + 2)  # one line and its CRLF
    submission = parse_single(text, key, max_line_bytes=config.max_line_bytes)
    store_request_id = submission.store_request_ids[0]
    # A keyed request is its own execution (a reused key with other content must still meet the 422);
    # an unkeyed row may have been stored already by a batch, under the same content id.
    if not key and (done := already_done(store_request_id, deps)) is not None:
        metrics.add_metric(name=contract.METRIC_DUPLICATE_REQUESTS, unit=MetricUnit.Count, value=1)
        logger.info("already processed", extra={"StoreRequestId": store_request_id, "state": done.value})
        return json_response(200, {"StoreRequestId": store_request_id, "execution": None, "duplicate": True, "state": done.value})
    status, body = start(submission, deps)
    return json_response(status, {"StoreRequestId": store_request_id, **body})


@router.post("/trips/batch")
def submit_batch(request: HttpRequest, deps: ApiDeps) -> HttpResponse:
    config = deps.settings
    text, key = request_text(request, config.batch_max_bytes)
    submission = parse_batch(text, key, max_lines=config.batch_max_lines, max_line_bytes=config.max_line_bytes)
    status, body = start(submission, deps)
    ids = list(submission.store_request_ids)
    return json_response(status, {"StoreRequestIds": ids, "skippedHeader": submission.skipped_header, **body})


def handle(event: dict[str, Any], context: LambdaContext, deps: ApiDeps) -> dict[str, Any]:
    return router.resolve(event, deps)


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
