"""Lambda entry point of the event-log HTTP API (IAM-authorized). Thin: parse, call, map.

POST /logs/{log_id}/entries            append one cell event at a position (idempotent per request_id)
POST /logs/{log_id}/payloads           a presigned upload URL for a large value (object starts tagged pending; create-only)
POST /logs/{log_id}/payloads/complete  the log entry that makes an uploaded value part of the log
GET  /logs/{log_id}/snapshot           the latest built snapshot and the entries after it, a page within
                                       Lambda's 6 MB response (?after=<next_after>, ?chunk=<next_chunk>)
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime.event_log import api_wiring, contract
from runtime.event_log.api_wiring import ApiDeps, ApiSettings
from runtime.event_log.errors import AppendConflict
from runtime.event_log.parsing import (
    COMPLETE_FIELDS,
    PAYLOAD_FIELDS,
    parse_after,
    parse_append,
    parse_cell,
    parse_chunk,
    parse_json_object,
    parse_log_id,
    parse_position,
    parse_request_id,
    refuse_unknown_fields,
)
from runtime.shared import snapstart
from runtime.shared.aws import Clients
from runtime.shared.http import JSON, HttpRequest, HttpResponse, HttpRouter, body_text, json_response, require_media_type
from runtime.shared.observability import MetricUnit, instrumented, logger, metrics
from runtime.shared.refusals import InvalidRequest, Refusal


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


def request_body(request: HttpRequest, settings: ApiSettings) -> dict[str, Any]:
    """The JSON object a POST sends: refused with 415 unless labelled application/json (UTF-8), with
    400 unless strict UTF-8 (no BOM) and a JSON object at most 32 levels deep, before anything is read
    or written. Each route then refuses any field it does not take, by name."""
    require_media_type(request.header("content-type"), request.body, (JSON,))
    max_bytes = settings.max_body_bytes
    # Over the limit stays a 400 here, as the event log has always answered it (docs/event-log.md, "400 bad input").
    text = body_text(request.body, is_base64=request.is_base64, max_bytes=max_bytes, too_large=InvalidRequest, hint="send a JSON object")
    return parse_json_object(text, max_bytes=max_bytes)


# The refusals counted by a metric of their own; each refusal's status comes with its class (runtime/shared/http.py).
REFUSAL_METRICS: dict[type[Refusal], str] = {
    InvalidRequest: contract.METRIC_INVALID_REQUESTS,
    AppendConflict: contract.METRIC_APPEND_CONFLICTS,
}


def count_refusal(refusal: Refusal) -> None:
    for kind, metric in REFUSAL_METRICS.items():
        if isinstance(refusal, kind):
            metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)


router: HttpRouter[ApiDeps] = HttpRouter(count_refusal)


@router.post("/logs/<log_id>/entries")
def append_entry(request: HttpRequest, deps: ApiDeps, log_id: str) -> HttpResponse:
    append = parse_append(log_id, request_body(request, deps.settings), max_value_bytes=deps.settings.max_value_bytes)
    result = deps.service.append(append)
    metrics.add_metric(
        name=contract.METRIC_DUPLICATE_APPENDS if result.duplicate else contract.METRIC_APPENDS, unit=MetricUnit.Count, value=1
    )
    return json_response(200 if result.duplicate else 201, asdict(result))


@router.post("/logs/<log_id>/payloads")
def create_payload(request: HttpRequest, deps: ApiDeps, log_id: str) -> HttpResponse:
    body = request_body(request, deps.settings)
    refuse_unknown_fields(body, PAYLOAD_FIELDS)
    upload = deps.service.create_upload(parse_log_id(log_id), parse_request_id(body.get("request_id")))
    return json_response(200, upload)


@router.post("/logs/<log_id>/payloads/complete")
def complete_payload(request: HttpRequest, deps: ApiDeps, log_id: str) -> HttpResponse:
    body = request_body(request, deps.settings)
    refuse_unknown_fields(body, COMPLETE_FIELDS)
    result = deps.service.complete_upload(
        parse_log_id(log_id), parse_request_id(body.get("request_id")), parse_position(body.get("position")), parse_cell(body.get("cell"))
    )
    metrics.add_metric(
        name=contract.METRIC_DUPLICATE_APPENDS if result.duplicate else contract.METRIC_APPENDS, unit=MetricUnit.Count, value=1
    )
    return json_response(200 if result.duplicate else 201, asdict(result))


@router.get("/logs/<log_id>/snapshot")
def latest_snapshot(request: HttpRequest, deps: ApiDeps, log_id: str) -> HttpResponse:
    after = parse_after(request.query.get("after"))
    first_chunk = parse_chunk(request.query.get("chunk"))
    page = deps.service.read_latest(parse_log_id(log_id), deps.objects, deps.settings.read_page_limit, after, first_chunk=first_chunk)
    if page is None:
        return json_response(404, {"error": f"log {log_id} has no entries"})
    return json_response(200, page)


def handle(event: dict[str, Any], context: LambdaContext, deps: ApiDeps) -> dict[str, Any]:
    logger.debug("request", extra={"route": event.get("routeKey")})
    return router.resolve(event, deps)


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
