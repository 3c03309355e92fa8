"""Lambda entry point of the loads API (behind the key authorizer). Thin: parse, call, map.

POST /loads           {"key": "incoming/...", "versionId": optional} -> 202 {"loadId", "execution", "status": "RUNNING"}
                      (started or joined; a re-run after a failed generation), or 200 with "status": "SUCCEEDED"
                      when that version was loaded already. 404 when there is no such object or version, 409 for
                      an object without a version id, or a load that failed MAX_GENERATIONS times.
GET /loads/{LoadId}   200 {"loadId", "execution", "status", "report"} once reported, otherwise
                      {"loadId", "execution", "status", "progress": {"chunks", "chunksDone", "itemCounts"?}}; 404 unknown.
"""

from __future__ import annotations

import functools
import json
import os
from typing import TYPE_CHECKING, Any, Final

from runtime.shared import snapstart
from runtime.shared.aws import Clients
from runtime.shared.http import JSON, HttpRequest, HttpResponse, HttpRouter, body_text, json_response, require_media_type
from runtime.shared.observability import MetricUnit, instrumented, logger, metrics
from runtime.shared.refusals import InvalidRequest, Refusal
from runtime.taxi_etl import bulk_wiring, contract
from runtime.taxi_etl.bulk_wiring import LoadsDeps, LoadsSettings
from runtime.taxi_etl.loads import load_status, parse_load_id, requested_file, start_body, start_load

if TYPE_CHECKING:  # an annotation only: the handler does not import Powertools' typing module
    from aws_lambda_powertools.utilities.typing import LambdaContext

MAX_BODY_BYTES: Final = 4096  # a key (at most 1,024 bytes) and a version id, as JSON


@functools.cache
def settings() -> LoadsSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return LoadsSettings.from_env(os.environ)


@functools.cache
def deps() -> LoadsDeps:
    """Built on the first invocation (cold start), never at import time."""
    return bulk_wiring.build_loads(settings(), Clients())


# With SnapStart, after each restore: fresh random seeds, and the clients built again (runtime/shared/snapstart.py).
after_restore = snapstart.after_restore(deps)


def count_refusal(refusal: Refusal) -> None:
    metrics.add_metric(name=contract.METRIC_REQUESTS_REFUSED, unit=MetricUnit.Count, value=1)


router: HttpRouter[LoadsDeps] = HttpRouter(count_refusal)


def request_document(request: HttpRequest) -> Any:
    """The body as JSON: application/json (UTF-8), at most MAX_BODY_BYTES."""
    require_media_type(request.header("content-type"), request.body, (JSON,))
    text = body_text(request.body, is_base64=request.is_base64, max_bytes=MAX_BODY_BYTES, hint="send a JSON object")
    if not text:
        raise InvalidRequest('the request body is empty; send {"key": "incoming/..."}')
    try:
        return json.loads(text)
    except ValueError as err:
        raise InvalidRequest(f"the request body is not JSON ({err})") from err


@router.post(contract.ROUTE_LOADS)
def post_load(request: HttpRequest, deps: LoadsDeps) -> HttpResponse:
    load = requested_file(request_document(request), deps.bucket)
    started = start_load(load, deps.workflow)
    logger.info("load requested", extra={"loadId": load.load_id, "execution": started.execution, "status": started.status})
    return json_response(*start_body(started))


@router.get(contract.ROUTE_LOAD.replace("{" + contract.KEY_LOAD_ID + "}", "<load_id>"))
def get_load(request: HttpRequest, deps: LoadsDeps, load_id: str) -> HttpResponse:
    return json_response(*load_status(parse_load_id(load_id), deps.bucket, deps.workflow))


def handle(event: dict[str, Any], context: LambdaContext, deps: LoadsDeps) -> dict[str, Any]:
    return router.resolve(event, deps)


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
