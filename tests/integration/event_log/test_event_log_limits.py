"""The largest entry the event-log API accepts, through every stage on the embedded cloud with AWS's
limits enforced (devtools/aws/service_limits.py): the API's event and answer within Lambda's 6 MB,
the log entry within DynamoDB's 400 KB item and its transaction within 4 MB, the router's messages
within SQS's 1 MiB, the snapshot built from it, and the read page back within Lambda's 6 MB; one
byte more is refused at the edge with a 400 that names the limit, and nothing is written.

The deployment here takes the largest values its config allows (EventLogConfig: max_value_bytes at
most 300 KiB, which keeps an entry under DynamoDB's 400 KB; max_body_bytes at most 1 MiB); larger
values go through /payloads, where the entry holds only the object's key.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

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


def widest_value(size: int) -> str:
    """`size` UTF-8 bytes that take the most room once JSON-escaped: quotes, with a few 4-byte characters."""
    emoji = "\U0001f600" * 64
    return emoji + '"' * (size - len(emoji.encode()))


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


def test_the_largest_value_goes_through_every_stage_within_the_limits(api: EventLogWorld) -> None:
    # Given 23 values of exactly the largest inline size, in the characters that take most room in JSON (a snapshot is due
    # after 20 events; 3 come after it)
    value = widest_value(MAX_VALUE_BYTES)
    assert len(value.encode()) == MAX_VALUE_BYTES
    positions = range(1, 24)
    # When each is appended through the API entry point
    answers = [call(request("POST", f"/logs/{LOG}/entries", append_body(position, value))) for position in positions]
    # Then every body fit (under 1 MiB) and every append was written, each answer within Lambda's 6 MB
    assert all(len(append_body(position, value).encode()) <= MAX_BODY_BYTES for position in positions)
    assert [status for status, _, _ in answers] == [201] * len(positions)
    for _, _, response in answers:
        limits.check_lambda_response(response)
    # and each entry, with everything stored beside the value, is within DynamoDB's 400 KB item (the transaction that
    # wrote it, within 4 MB, went through the embedded cloud's checks)
    sizes = [stored_item_bytes(api, position) for position in positions]
    assert max(sizes) <= limits.DYNAMODB_ITEM_BYTES, sizes
    # When the stream, the router's messages (SQS, within 1 MiB) and the snapshot worker have all run
    api.drain()
    # Then the snapshot holds the first 20 values and matches a replay; nothing was left pending
    assert api.verify(LOG) == []
    # and the read API's answer, the snapshot and a page of the entries after it (as many as DynamoDB's 1 MB page
    # holds), fits Lambda's 6 MB
    status, page, response = call(request("GET", f"/logs/{LOG}/snapshot"))
    assert status == 200 and page["snapshot"]["cells"] == 20
    assert [entry["value"] == value for entry in page["entries"]] == [True] * len(page["entries"]) and page["entries"]
    limits.check_lambda_response(response)


def test_a_value_one_byte_over_is_refused_at_the_edge_naming_the_limit_and_nothing_is_written(api: EventLogWorld) -> None:
    # Given a value one byte over the largest inline size, and a body one byte over the body limit
    over = widest_value(MAX_VALUE_BYTES + 1)
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
