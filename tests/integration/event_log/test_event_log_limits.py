"""The largest entries the event-log API accepts, through every stage on the embedded cloud with AWS's
limits enforced (devtools/aws/service_limits.py): the API's event and answer within Lambda's 6 MB,
the log entry within DynamoDB's 400 KB item and its transaction within 4 MB, the router's messages
within SQS's 1 MiB, the snapshot built from it, and every read page back within Lambda's 6 MB; one
byte more is refused at the edge with a 400 that names the limit, and nothing is written.

The deployment here takes the largest values its config allows (EventLogConfig: max_value_bytes at
most 300 KiB, which keeps an entry under DynamoDB's 400 KB; max_body_bytes at most 1 MiB); larger
values go through /payloads, where the entry holds only the object's key.

What a read answers grows most with control characters: 1 stored byte, `\u0001` (6) in the body, 7
once Lambda serializes the result around the body's string. A page DynamoDB ends at 1 MB can be 7 MB
as Lambda counts it, so the API cuts every page by the size of its answer (runtime/event_log/service.py).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest

from devtools.aws import service_limits as limits
from devtools.aws.lambda_context import FakeLambdaContext
from devtools.aws.moto_patches import VirtualClock
from devtools.aws.template_resources import Template
from devtools.event_log_world import EventLogWorld, embedded_event_log_cloud
from runtime.event_log import api_handler
from runtime.event_log.contract import HANDLER_API, HANDLER_WORKER
from runtime.shared import observability
from runtime.shared.dynamo import to_attributes
from runtime.shared.http import HttpResponse
from tests.events.loader import load_event

LOG = "limits"
MAX_VALUE_BYTES = 300 * 1024  # EventLogConfig's largest max_value_bytes
MAX_BODY_BYTES = 1024 * 1024  # and max_body_bytes
LARGEST = {
    HANDLER_API: {"SNAPSHOT_EVERY": "20", "MAX_VALUE_BYTES": str(MAX_VALUE_BYTES), "MAX_BODY_BYTES": str(MAX_BODY_BYTES)},
    HANDLER_WORKER: {"CHUNK_BYTES": str(1024 * 1024)},
}


@pytest.fixture
def api(event_log_template: Template, monkeypatch: pytest.MonkeyPatch) -> Iterator[EventLogWorld]:
    """The dev event log with the largest values its config allows, the API function's environment set."""
    clock = VirtualClock()
    with embedded_event_log_cloud(clock):
        world = EventLogWorld.create(event_log_template, clock, overrides=LARGEST)
        environment = {**world.cloud.function_environment(HANDLER_API), **LARGEST[HANDLER_API]}
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(observability.metrics, "namespace", environment["POWERTOOLS_METRICS_NAMESPACE"])
        for cached in (api_handler.settings, api_handler.deps):
            cached.cache_clear()
        yield world
        for cached in (api_handler.settings, api_handler.deps):
            cached.cache_clear()
        observability.metrics.clear_metrics()


def request(method: str, path: str, body: str | None = None, query: str = "") -> dict[str, Any]:
    event = copy.deepcopy(load_event("event_log/api_request.json"))
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    event["routeKey"] = event["requestContext"]["routeKey"] = f"{method} {path}"
    event["rawQueryString"] = query
    if query:
        event["queryStringParameters"] = {key: values[0] for key, values in parse_qs(query).items()}
    if body is None:
        event.pop("body")
    else:
        event["body"] = body
    return event


def call(event: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Status, body and the whole Lambda response, after checking the event against Lambda's 6 MB."""
    limits.check_lambda_request(event)
    response = api_handler.handler(event, FakeLambdaContext())  # type: ignore[arg-type]
    return int(response["statusCode"]), json.loads(response["body"]), response


def widest_value(value_bytes: int, body_bytes: int) -> str:
    """The value of exactly `value_bytes` UTF-8 bytes whose entry takes the most room in a read's answer, within a body
    of `body_bytes`: as many control characters (7 bytes each in the answer, 6 in the body) as the body holds, the rest
    quotes (4 in the answer, 2 in the body). Past the body's room, a control character would cost four quotes' worth of
    body for three bytes more of answer: this mix is the largest answer the two limits allow for one entry."""
    room = body_bytes - len(append_body(999_999, "").encode())
    controls = (room - 2 * value_bytes) // 4  # 6c + 2q <= room, c + q = value_bytes
    return "\x01" * controls + '"' * (value_bytes - controls)


def control_value(size: int) -> str:
    return "\x01" * size


def largest_control_value(body_bytes: int) -> str:
    """The longest value of control characters alone that a body of `body_bytes` carries."""
    return control_value((body_bytes - len(append_body(999_999, "").encode())) // 6)


def append_body(position: int, value: str) -> str:
    body = {
        "request_id": f"limits-{position:06d}",
        "position": position,
        "event": {"kind": "SetCell", "cell": f"A{position}", "value": value},
    }
    return json.dumps(body, ensure_ascii=False)


def stored_item_bytes(world: EventLogWorld, position: int) -> int:
    key = to_attributes({"log_id": LOG, "seq": position})
    item = world.clients.dynamodb.get_item(TableName=world.api.log_table, Key=key, ConsistentRead=True)["Item"]
    return limits.dynamodb_item_bytes(item)


def read_pages(log_id: str = LOG) -> list[tuple[dict[str, Any], int]]:
    """Every page of GET /logs/{id}/snapshot through the entry point, following next_after and next_chunk as the client
    does, each with the size of its whole Lambda result (checked against Lambda's 6 MB)."""
    pages: list[tuple[dict[str, Any], int]] = []
    query: dict[str, str] = {}
    while True:
        status, page, response = call(request("GET", f"/logs/{log_id}/snapshot", query=urlencode(query)))
        assert status == 200, page
        pages.append((page, limits.check_lambda_response(response)))
        next_chunk = page["snapshot"]["next_chunk"] if page["snapshot"] else None
        if page["next_after"] is None and next_chunk is None:
            return pages
        assert page["entries"] or next_chunk is not None, "a page that gives neither entries nor chunk URLs does not move on"
        if page["next_after"] is not None:
            query["after"] = page["next_after"]
        if page["snapshot"]:
            query["chunk"] = str(next_chunk if next_chunk is not None else page["snapshot"]["chunks"])


def cell_values(pages: list[tuple[dict[str, Any], int]]) -> list[tuple[int, str]]:
    return [(entry["position"], entry["value"]) for page, _ in pages for entry in page["entries"] if entry["kind"] == "SetCell"]


def test_the_widest_value_goes_through_every_stage_within_the_limits(api: EventLogWorld) -> None:
    # Given 23 values of exactly the largest inline size, in the characters that take most room in a read's answer within
    # the largest body (a snapshot is due after 20 events; 3 come after it)
    value = widest_value(MAX_VALUE_BYTES, MAX_BODY_BYTES)
    assert len(value.encode()) == MAX_VALUE_BYTES and value.count("\x01") > 100_000
    positions = range(1, 24)
    # When each is appended through the API entry point
    answers = [call(request("POST", f"/logs/{LOG}/entries", append_body(position, value))) for position in positions]
    # Then every body fit (the limit to a few bytes) and every append was written, each answer within
    # Lambda's 6 MB
    sizes = [len(append_body(position, value).encode()) for position in positions]
    assert max(sizes) <= MAX_BODY_BYTES < max(sizes) + 16
    assert [status for status, _, _ in answers] == [201] * len(positions)
    for _, _, response in answers:
        limits.check_lambda_response(response)
    # and each entry, with everything stored beside the value, is within DynamoDB's 400 KB item (the transaction that
    # wrote it, within 4 MB, went through the embedded cloud's checks)
    items = [stored_item_bytes(api, position) for position in positions]
    assert max(items) <= limits.DYNAMODB_ITEM_BYTES, items
    # When the log is read before any snapshot is built: each entry is over 1.5 MB of the answer
    unbuilt = read_pages()
    # Then every page fits Lambda's 6 MB and together they give every value once, in order
    assert cell_values(unbuilt) == [(position, value) for position in positions]
    assert max(size for _, size in unbuilt) <= limits.LAMBDA_SYNC_PAYLOAD_BYTES
    # When the stream, the router's messages (SQS, within 1 MiB) and the snapshot worker have all run
    api.drain()
    # Then the snapshot holds the first 20 values and matches a replay; nothing was left pending
    assert api.verify(LOG) == []
    # and the read's answer, the snapshot and the entries after it, fits Lambda's 6 MB
    built = read_pages()
    assert built[0][0]["snapshot"]["cells"] == 20
    assert cell_values(built) == [(position, value) for position in positions[20:]]
    assert max(size for _, size in built) <= limits.LAMBDA_SYNC_PAYLOAD_BYTES


def test_pages_of_control_characters_stay_within_lambdas_limit_and_return_every_entry(api: EventLogWorld) -> None:
    # Given values of control characters only: 40 of 30,000 (34 of their entries fill a DynamoDB page of 1 MB, 7 MB as
    # Lambda counts the answer) and 6 of the longest a 1 MiB body carries (175,000 of them, about 1.2 MB of answer each)
    values = [control_value(30_000)] * 40 + [largest_control_value(MAX_BODY_BYTES)] * 6
    for position, value in enumerate(values, start=1):
        assert call(request("POST", f"/logs/{LOG}/entries", append_body(position, value)))[0] == 201
    # When the first page is taken as DynamoDB ends it, with no budget of the answer's size (what the API answered before)
    deps = api_handler.deps()
    uncut = deps.service.read_latest(LOG, deps.objects, deps.settings.read_page_limit, None, budget=10**10)
    assert uncut is not None
    # Then its answer would be past Lambda's 6 MB: the 500 the issue saw
    with pytest.raises(limits.LambdaResponseTooLarge):
        limits.check_lambda_response(HttpResponse(200, uncut).to_result())
    # When the log is read through the API, page by page
    pages = read_pages()
    # Then every page's whole answer fits Lambda's 6 MB, the first one cut before DynamoDB's page ended, and together the
    # pages give every value once, in order
    assert max(size for _, size in pages) <= limits.LAMBDA_SYNC_PAYLOAD_BYTES
    assert 0 < len(pages[0][0]["entries"]) < len(uncut["entries"])
    assert cell_values(pages) == list(enumerate(values, start=1))


def test_a_value_one_byte_over_is_refused_at_the_edge_naming_the_limit_and_nothing_is_written(api: EventLogWorld) -> None:
    # Given a value one byte over the largest inline size, and a body one byte over the body limit
    over = widest_value(MAX_VALUE_BYTES + 1, MAX_BODY_BYTES)
    too_long_body = append_body(1, "x") + " " * (MAX_BODY_BYTES - len(append_body(1, "x").encode()) + 1)
    # When each is posted
    value_status, value_refusal, _ = call(request("POST", f"/logs/{LOG}/entries", append_body(1, over)))
    body_status, body_refusal, _ = call(request("POST", f"/logs/{LOG}/entries", too_long_body))
    # Then both are 400s naming their limit (a larger value goes through /payloads), and the log has no entry, no head
    assert value_status == 400 and f"values over {MAX_VALUE_BYTES} bytes go through /payloads" in value_refusal["error"]
    assert body_status == 400 and str(MAX_BODY_BYTES) in body_refusal["error"]
    assert api.entries(LOG) == [] and not api.log_store().read_head(LOG).exists


def test_a_value_past_the_inline_limit_is_an_object_and_its_entry_stays_small(api: EventLogWorld) -> None:
    # Given a value of 2 MiB (over every inline limit) uploaded through the large-payload flow
    status, upload = call(request("POST", f"/logs/{LOG}/payloads", json.dumps({"request_id": "limits-upload-01"})))[:2]
    assert status == 200
    payload = b'"' * (2 * 1024 * 1024)
    api.clients.s3.put_object(Bucket=api.api.bucket, Key=upload["object_key"], Body=payload, Tagging=upload["headers"]["x-amz-tagging"])
    # When it is completed into the log and the side effects run
    body = json.dumps({"request_id": "limits-upload-01", "position": 1, "cell": "B2"})
    assert call(request("POST", f"/logs/{LOG}/payloads/complete", body))[0] == 201
    api.drain()
    # Then the entry names the object and is a few hundred bytes, whatever the payload's size; the finalizer's message fit SQS
    assert stored_item_bytes(api, 1) < 1024
    assert api.verify(LOG) == []
