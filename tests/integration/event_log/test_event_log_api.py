"""The deployed API entry point, runtime.event_log.api_handler.handler, on the embedded cloud.

Settings come from the synthesized function's environment; the handler builds its own store
and clients like at a cold start. Requests are API Gateway HTTP API (v2) events.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from devtools.aws.lambda_context import FakeLambdaContext
from devtools.event_log_world import EventLogWorld
from devtools.sheet_workload import sheet_edits
from runtime.event_log import api_handler
from tests.events.loader import load_event

LOG = "sheet-api"
GOOD_EVENT = {"kind": "SetCell", "cell": "A1", "value": "1"}


def request(method: str, path: str, body: Any = None, *, raw: bytes | None = None, query: str = "") -> dict[str, Any]:
    event = copy.deepcopy(load_event("event_log/api_request.json"))
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    event["routeKey"] = event["requestContext"]["routeKey"] = f"{method} {path}"
    event["rawQueryString"] = query
    if query:
        event["queryStringParameters"] = {key: values[0] for key, values in parse_qs(query).items()}
    if raw is not None:
        event["body"], event["isBase64Encoded"] = base64.b64encode(raw).decode(), True
    elif body is None:
        event.pop("body")
    else:
        event["body"] = body if isinstance(body, str) else json.dumps(body)
    return event


def call(event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = api_handler.handler(event, FakeLambdaContext())
    return int(response["statusCode"]), json.loads(response["body"])


def append(position: int, cell: str = "B2", value: str | None = "42", request_id: str | None = None) -> tuple[int, dict[str, Any]]:
    event: dict[str, Any] = {"kind": "SetCell", "cell": cell, "value": value} if value is not None else {"kind": "ClearCell", "cell": cell}
    body = {"request_id": request_id or f"client-{position:04d}", "position": position, "event": event}
    return call(request("POST", f"/logs/{LOG}/entries", body))


def test_append_is_idempotent_per_request_and_conflicts_per_position(api: EventLogWorld) -> None:
    # Given the sample append request
    # When it is sent, sent again, and another request is sent for the same position
    first = call(load_event("event_log/api_request.json"))
    again = call(load_event("event_log/api_request.json"))
    other = append(1, value="other", request_id="client-other-1")
    # Then: 201 created, 200 for the repeat (same result), 409 naming the next position
    assert first == (201, {"log_id": LOG, "position": 1, "request_id": "client-0001", "duplicate": False})
    assert again == (200, {"log_id": LOG, "position": 1, "request_id": "client-0001", "duplicate": True})
    assert other[0] == 409 and other[1]["next_position"] == 2 and "another request" in other[1]["error"]
    assert [item["value"] for item in api.entries(LOG)] == ["42"]


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (request("POST", f"/logs/{LOG}/entries"), "body is empty"),
        (request("POST", f"/logs/{LOG}/entries", raw=b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe"), "not UTF-8 text"),
        (request("POST", f"/logs/{LOG}/entries", "a,b,c,d,e"), "not valid JSON"),
        (request("POST", f"/logs/{LOG}/entries", "[1, 2]"), "must be a JSON object"),
        (request("POST", f"/logs/{LOG}/entries", "x" * 1_048_576), "limit is 16384"),
        (request("POST", f"/logs/{LOG}/entries", {"request_id": "client-0001", "position": 0, "event": GOOD_EVENT}), "position must be"),
        (request("POST", f"/logs/{LOG}/entries", {"request_id": "short", "position": 1, "event": GOOD_EVENT}), "request_id must be"),
        (
            request("POST", f"/logs/{LOG}/entries", {"request_id": "client-0001", "position": 1, "event": {"kind": "Drop", "cell": "A1"}}),
            "event.kind must be one of SetCell, ClearCell",
        ),
        (
            request(
                "POST",
                f"/logs/{LOG}/entries",
                {"request_id": "client-0001", "position": 1, "event": {"kind": "SetCell", "cell": "1A", "value": "x"}},
            ),
            "cell",
        ),
        (
            request(
                "POST",
                f"/logs/{LOG}/entries",
                {"request_id": "client-0001", "position": 1, "event": {"kind": "SetCell", "cell": "A1", "value": "v" * 5000}},
            ),
            "go through /payloads",
        ),
        (request("POST", "/logs/bad%20id!/entries", {"request_id": "client-0001", "position": 1, "event": {}}), ""),
    ],
    ids=["empty", "binary", "csv", "array", "1MB", "position", "request-id", "kind", "cell", "large-value", "bad-log-id"],
)
def test_bad_requests_get_a_4xx_with_a_clear_message_and_store_nothing(api: EventLogWorld, event: dict[str, Any], message: str) -> None:
    # Given a request that cannot be appended
    # When it is sent
    status, body = call(event)
    # Then it is refused with a 4xx that says why, and the log stays empty
    assert 400 <= status < 500
    assert message in body.get("error", body.get("message", ""))
    assert api.entries(LOG) == []


def test_a_large_payload_is_uploaded_tagged_completed_and_then_untagged(api: EventLogWorld) -> None:
    # Given an upload URL for a large value
    status, upload = call(request("POST", f"/logs/{LOG}/payloads", {"request_id": "upload-req-0001"}))
    assert status == 200
    key = upload["object_key"]
    assert key.startswith(f"payloads/{LOG}/") and upload["method"] == "PUT"
    signed = parse_qs(urlparse(upload["upload_url"]).query)["X-Amz-SignedHeaders"][0].split(";")
    assert {"x-amz-tagging", "if-none-match"} <= set(signed)  # an upload without the tag, or one that replaces, is refused by S3
    # When the client uploads with the tag, and completes at position 1
    tag_name, tag_value = upload["headers"]["x-amz-tagging"].split("=")
    api.clients.s3.put_object(Bucket=api.api.bucket, Key=key, Body=b"x" * 70_000, Tagging=upload["headers"]["x-amz-tagging"])
    assert api.clients.s3.get_object_tagging(Bucket=api.api.bucket, Key=key)["TagSet"] == [{"Key": tag_name, "Value": tag_value}]
    completed = call(request("POST", f"/logs/{LOG}/payloads/complete", {"request_id": "upload-req-0001", "position": 1, "cell": "c3"}))
    # Then the log holds a LargePayload entry naming the object and its size
    assert completed[0] == 201
    [entry] = api.entries(LOG)
    assert (entry["kind"], entry["cell"], entry["payload_key"], entry["payload_bytes"]) == ("LargePayload", "C3", key, 70_000)
    # and once the stream-driven side effect ran, the object is no longer tagged (so it is kept)
    api.drain()
    assert api.clients.s3.get_object_tagging(Bucket=api.api.bucket, Key=key)["TagSet"] == []
    assert api.verify(LOG) == []
    # and completing again is a harmless repeat
    assert call(request("POST", f"/logs/{LOG}/payloads/complete", {"request_id": "upload-req-0001", "position": 1, "cell": "C3"}))[0] == 200


def test_completing_before_uploading_is_a_conflict_and_writes_nothing(api: EventLogWorld) -> None:
    # Given an upload URL whose object was never uploaded
    call(request("POST", f"/logs/{LOG}/payloads", {"request_id": "upload-req-0002"}))
    # When the client completes it
    status, body = call(request("POST", f"/logs/{LOG}/payloads/complete", {"request_id": "upload-req-0002", "position": 1, "cell": "A1"}))
    # Then it is told to upload first, and the log is untouched
    assert status == 409 and "upload the payload" in body["error"]
    assert api.entries(LOG) == []


def test_an_abandoned_upload_keeps_its_pending_tag_for_the_lifecycle_rule(api: EventLogWorld) -> None:
    # Given an upload that was never completed
    _, upload = call(request("POST", f"/logs/{LOG}/payloads", {"request_id": "upload-req-0003"}))
    api.clients.s3.put_object(
        Bucket=api.api.bucket, Key=upload["object_key"], Body=b"abandoned", Tagging=upload["headers"]["x-amz-tagging"]
    )
    # When the pipeline has run
    api.drain()
    # Then the object still carries the tag the bucket's lifecycle rule expires
    assert api.clients.s3.get_object_tagging(Bucket=api.api.bucket, Key=upload["object_key"])["TagSet"] != []
    assert api.verify(LOG) == []


def test_reading_gives_the_latest_built_snapshot_and_the_entries_after_it(api: EventLogWorld) -> None:
    # Given 45 events (two Snapshot entries at 20 and 40), built by the worker
    for edit in sheet_edits(seed=9, count=45):
        assert append(edit.position, edit.cell, edit.value, edit.request_id)[0] == 201
    api.drain()
    # When a reader asks for the latest snapshot
    status, page = call(request("GET", f"/logs/{LOG}/snapshot"))
    # Then it gets snapshot 2 with a download URL per chunk, and the five events after its cut
    assert status == 200
    root, cells, _ = api.snapshot_cells(f"snapshots/{LOG}/0000000002/root.json")
    assert (page["snapshot"]["number"], page["snapshot"]["cut"], page["snapshot"]["cells"]) == (2, 40, len(cells))
    assert len(page["snapshot"]["chunk_urls"]) == len(root["chunks"]) > 0
    assert (page["snapshot"]["chunks"], page["snapshot"]["first_chunk"], page["snapshot"]["next_chunk"]) == (len(root["chunks"]), 0, None)
    assert [entry["position"] for entry in page["entries"]] == [41, 42, 43, 44, 45]
    assert page["next_position"] == 46 and page["next_after"] is None


def test_reading_an_unknown_log_is_404(api: EventLogWorld) -> None:
    # Given no log called nobody
    # When it is read
    status, body = call(request("GET", "/logs/nobody/snapshot"))
    # Then the reader is told it has no entries
    assert status == 404 and "no entries" in body["error"]


@pytest.mark.parametrize(
    "after",
    ["NaN", "sNaN", "Infinity", "-Infinity", "1E+400", "1234567890123456789012345678901234567890", "-1", "20.25", "soon", "1e3"],
)
def test_reading_with_an_after_that_is_no_seq_is_a_400_naming_the_field(api: EventLogWorld, after: str) -> None:
    # Given a log with entries
    assert append(1)[0] == 201
    # When a reader pages with an `after` that no page ever gave out
    status, body = call(request("GET", f"/logs/{LOG}/snapshot", query=urlencode({"after": after})))
    # Then it is told which parameter is wrong, not answered with a server error
    assert status == 400
    assert body["error"].startswith("after must be a seq")


def test_reading_with_a_chunk_that_is_no_index_is_a_400_naming_the_field(api: EventLogWorld) -> None:
    # Given a log with entries
    assert append(1)[0] == 201
    # When a reader asks for chunk URLs from an index no page gives out (negative, padded, fractional, 11 digits, a word)
    answers = [
        call(request("GET", f"/logs/{LOG}/snapshot", query=urlencode({"chunk": chunk})))
        for chunk in ("-1", "01", "1.5", "12345678901", "next", "NaN")
    ]
    # Then each is told which parameter is wrong, and an index of 10 digits is read (no URL past the last chunk)
    assert all(status == 400 and body["error"].startswith("chunk must be a chunk index") for status, body in answers)
    status, page = call(request("GET", f"/logs/{LOG}/snapshot", query=urlencode({"chunk": "9999999999"})))
    assert status == 200 and [entry["position"] for entry in page["entries"]] == [1]


def test_reading_after_a_seq_gives_the_entries_after_it(api: EventLogWorld) -> None:
    # Given 25 events (a Snapshot entry at 20.5, not built yet)
    for edit in sheet_edits(seed=9, count=25):
        assert append(edit.position, edit.cell, edit.value, edit.request_id)[0] == 201
    # When a reader asks for what follows the Snapshot entry, and for what follows the start
    status, page = call(request("GET", f"/logs/{LOG}/snapshot", query="after=20.5"))
    from_start = call(request("GET", f"/logs/{LOG}/snapshot", query="after=0"))[1]
    # Then it gets the five events after the cut, and every entry from the start
    assert status == 200
    assert [entry["position"] for entry in page["entries"]] == [21, 22, 23, 24, 25]
    assert [entry["seq"] for entry in from_start["entries"]][19:22] == ["20", "20.5", "21"]


def upload(url: str, headers: dict[str, str], body: bytes) -> int:
    """The client's PUT to a presigned URL, with the headers the API told it to send."""
    import requests

    return int(requests.put(url, data=body, headers=headers, timeout=5).status_code)


def test_a_committed_payload_cannot_be_replaced_or_tagged_pending_again(api: EventLogWorld) -> None:
    # Given a payload uploaded through its presigned URL, completed at position 1 and finalized
    body = {"request_id": "upload-req-0004"}
    status, first = call(request("POST", f"/logs/{LOG}/payloads", body))
    assert status == 200 and first["headers"]["If-None-Match"] == "*"
    assert upload(first["upload_url"], first["headers"], b"the committed bytes") == 200
    assert call(request("POST", f"/logs/{LOG}/payloads/complete", body | {"position": 1, "cell": "A1"}))[0] == 201
    api.drain()
    key = first["object_key"]

    def stored() -> tuple[bytes, list[Any]]:
        s3 = api.clients.s3
        return s3.get_object(Bucket=api.api.bucket, Key=key)["Body"].read(), s3.get_object_tagging(Bucket=api.api.bucket, Key=key)["TagSet"]

    assert stored() == (b"the committed bytes", [])
    # When the same flow is repeated with the same request id
    again_status, again = call(request("POST", f"/logs/{LOG}/payloads", body))
    # Then no new upload is handed out: the payload is uploaded and never changes
    assert again_status == 409 and "already uploaded" in again["error"] and "new request_id" in again["error"]
    # When the first presigned URL is used again within its 15 minutes (a late retry of the PUT)
    late = upload(first["upload_url"], first["headers"], b"other bytes")
    # Then S3 refuses it: the object the log names keeps its bytes and stays untagged
    assert late == 412
    assert stored() == (b"the committed bytes", [])
    # and completing again is still a harmless repeat that names the same object
    repeat = call(request("POST", f"/logs/{LOG}/payloads/complete", body | {"position": 1, "cell": "A1"}))
    assert repeat[0] == 200 and repeat[1]["duplicate"] is True
    assert api.verify(LOG) == []


def test_an_upload_url_asked_for_again_before_the_upload_is_the_same_key(api: EventLogWorld) -> None:
    # Given an upload URL that was never used (the client lost the answer and asks again)
    body = {"request_id": "upload-req-0005"}
    _, first = call(request("POST", f"/logs/{LOG}/payloads", body))
    # When it asks again
    status, second = call(request("POST", f"/logs/{LOG}/payloads", body))
    # Then it gets the same key, and the first of the two uploads wins; the second cannot replace it
    assert status == 200 and second["object_key"] == first["object_key"]
    assert upload(second["upload_url"], second["headers"], b"first upload") == 200
    assert upload(first["upload_url"], first["headers"], b"second upload") == 412
    assert call(request("POST", f"/logs/{LOG}/payloads/complete", body | {"position": 1, "cell": "B1"}))[0] == 201
    [entry] = api.entries(LOG)
    assert entry["payload_bytes"] == len(b"first upload")
