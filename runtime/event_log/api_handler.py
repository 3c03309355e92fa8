"""Lambda entry point of the event-log HTTP API (IAM-authorized). Thin: parse, call, map.

POST /logs/{log_id}/entries            append one cell event at a position (idempotent per request_id)
POST /logs/{log_id}/payloads           a presigned upload URL for a large value (object starts tagged pending; create-only)
POST /logs/{log_id}/payloads/complete  the log entry that makes an uploaded value part of the log
GET  /logs/{log_id}/snapshot           the latest built snapshot and the entries after it
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime.event_log import contract, wiring
from runtime.event_log.errors import AppendConflict
from runtime.event_log.parsing import (
    parse_after,
    parse_append,
    parse_cell,
    parse_json_object,
    parse_log_id,
    parse_position,
    parse_request_id,
)
from runtime.event_log.settings import ApiSettings
from runtime.event_log.wiring import ApiDeps
from runtime.shared import snapstart
from runtime.shared.aws import Clients
from runtime.shared.http import JSON, InvalidRequest, Refusal, answer_refusals, body_text, header, json_response, require_media_type
from runtime.shared.observability import MetricUnit, instrumented, logger, metrics

app = APIGatewayHttpResolver()


@functools.cache
def settings() -> ApiSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return ApiSettings.from_env(os.environ)


@functools.cache
def deps() -> ApiDeps:
    """Built on the first invocation (cold start), never at import time."""
    return wiring.build(settings(), Clients())


# With SnapStart, after each restore: fresh random seeds, and the clients built again (runtime/shared/snapstart.py).
after_restore = snapstart.after_restore(deps)


def current() -> ApiDeps:
    """The dependencies of the request being resolved (handle() appends them to the resolver's context)."""
    return app.context["deps"]  # type: ignore[no-any-return]


def request_body() -> dict[str, Any]:
    """The JSON object a POST sends: refused with 415 unless labelled application/json (UTF-8), with
    400 unless strict UTF-8 (no BOM) and a JSON object, before anything is read or written."""
    event = app.current_event
    require_media_type(header(event.headers, "content-type"), event.body, (JSON,))
    max_bytes = current().settings.max_body_bytes
    # Over the limit stays a 400 here, as the event log has always answered it (its README's "400 bad input").
    text = body_text(
        event.body, is_base64=bool(event.is_base64_encoded), max_bytes=max_bytes, too_large=InvalidRequest, hint="send a JSON object"
    )
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


answer_refusals(app, count_refusal)


@app.post("/logs/<log_id>/entries")
def append_entry(log_id: str) -> Response[str]:
    request = parse_append(log_id, request_body(), max_value_bytes=current().settings.max_value_bytes)
    result = current().service.append(request)
    metrics.add_metric(
        name=contract.METRIC_DUPLICATE_APPENDS if result.duplicate else contract.METRIC_APPENDS, unit=MetricUnit.Count, value=1
    )
    return json_response(200 if result.duplicate else 201, asdict(result))


@app.post("/logs/<log_id>/payloads")
def create_payload(log_id: str) -> Response[str]:
    body = request_body()
    upload = current().service.create_upload(parse_log_id(log_id), parse_request_id(body.get("request_id")))
    return json_response(200, upload)


@app.post("/logs/<log_id>/payloads/complete")
def complete_payload(log_id: str) -> Response[str]:
    body = request_body()
    result = current().service.complete_upload(
        parse_log_id(log_id), parse_request_id(body.get("request_id")), parse_position(body.get("position")), parse_cell(body.get("cell"))
    )
    metrics.add_metric(
        name=contract.METRIC_DUPLICATE_APPENDS if result.duplicate else contract.METRIC_APPENDS, unit=MetricUnit.Count, value=1
    )
    return json_response(200 if result.duplicate else 201, asdict(result))


@app.get("/logs/<log_id>/snapshot")
def latest_snapshot(log_id: str) -> Response[str]:
    after = parse_after(app.current_event.get_query_string_value("after"))
    page = current().service.read_latest(parse_log_id(log_id), current().objects, current().settings.read_page_limit, after)
    if page is None:
        return json_response(404, {"error": f"log {log_id} has no entries"})
    return json_response(200, page)


def handle(event: dict[str, Any], context: LambdaContext, deps: ApiDeps) -> dict[str, Any]:
    logger.debug("request", extra={"route": event.get("routeKey")})
    app.append_context(deps=deps)  # type: ignore[no-untyped-call]  # Powertools leaves it untyped
    return app.resolve(event, context)


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
