"""Request hygiene over real HTTP on `make serve`'s local server (issue 22): each API refuses a body
that is not its media type in UTF-8 with 415, and one that is not strict UTF-8 with 400, and nothing
is stored (no log entry; no execution, status row or trip). (The loader's file that starts with a byte-order
mark: tests/integration/local/test_bulk_loader.py.)"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from devtools.local.stack import LocalStack
from devtools.taxi_rows import sample_lines
from runtime.event_log import contract as event_log_contract
from runtime.taxi_etl import contract as taxi_etl_contract
from tests.integration.local import raw_http

TRIP = sample_lines()[0]
APPEND = {"request_id": "hygiene-0001", "position": 1, "event": {"kind": "SetCell", "cell": "B2", "value": "42"}}


def send(url: str, method: str, body: bytes | None, headers: list[tuple[str, str]]) -> tuple[int, Any]:
    """One request with exactly these headers (http.client adds no Content-Type of its own); status and JSON answer."""
    status, _, answer = raw_http.request(url, method, body, headers)
    return status, json.loads(answer or b"null")


def signed_post(stack: LocalStack, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    """A POST signed with SigV4 for execute-api, as a deployed client signs it, with these headers as they are."""
    aws_request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    SigV4Auth(Credentials(stack.access_key_id, stack.secret_access_key), "execute-api", stack.region).add_auth(aws_request)
    return send(url, "POST", body, list(aws_request.headers.items()))


def log_items(stack: LocalStack, log_id: str) -> list[dict[str, Any]]:
    table = stack.outputs["Onceflow-local-EventLog"][event_log_contract.OUTPUT_LOG_TABLE]
    return list(
        stack.client("dynamodb").query(
            TableName=table,
            KeyConditionExpression="#log = :log",
            ExpressionAttributeNames={"#log": event_log_contract.KEY_LOG_ID},
            ExpressionAttributeValues={":log": {"S": log_id}},
        )["Items"]
    )


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# --- the event-log API ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body", "status", "named"),
    [
        ({"Content-Type": "text/plain"}, json.dumps(APPEND).encode(), 415, "the request body is text/plain"),
        ({"Content-Type": "application/x-www-form-urlencoded"}, json.dumps(APPEND).encode(), 415, "application/x-www-form-urlencoded"),
        ({"Content-Type": "application/octet-stream"}, json.dumps(APPEND).encode(), 415, "application/octet-stream"),
        ({}, json.dumps(APPEND).encode(), 415, "no Content-Type"),
        ({"Content-Type": "application/json; charset=iso-8859-1"}, json.dumps(APPEND).encode("latin-1"), 415, "charset is iso-8859-1"),
        ({"Content-Type": "application/json"}, b"\xef\xbb\xbf" + json.dumps(APPEND).encode(), 400, "byte-order mark"),
        ({"Content-Type": "application/json; charset=utf-8"}, json.dumps(APPEND).encode("utf-16"), 400, "UTF-16"),
        ({"Content-Type": "application/json"}, json.dumps(APPEND).encode("utf-16-le"), 400, "looks like UTF-16"),
        (
            {"Content-Type": "application/json"},
            json.dumps({**APPEND, "event": {**APPEND["event"], "value": "caf\xe9"}}, ensure_ascii=False).encode("latin-1"),
            400,
            "not UTF-8",
        ),
    ],
    ids=["text-plain", "form", "octet-stream", "no-content-type", "latin-1-charset", "utf8-bom", "utf16-bom", "utf16", "invalid-utf8"],
)
def test_the_event_log_refuses_a_body_that_is_not_json_in_strict_utf8_and_stores_nothing(
    local_stack: LocalStack, headers: dict[str, str], body: bytes, status: int, named: str
) -> None:
    # Given a fresh log and a valid append document, sent signed under another label or in another encoding
    log_id = fresh("hygiene")
    url = f"{local_stack.event_log_url}/logs/{log_id}/entries"
    # When it is posted over HTTP
    got, answer = signed_post(local_stack, url, body, headers)
    # Then the API answers 415 or 400 with a JSON error that names the problem (and for 415, what is taken)
    assert got == status and named in answer["error"]
    if status == 415:
        assert answer["accepted"] == ["application/json"]
    # and the log holds nothing
    assert log_items(local_stack, log_id) == []


def test_the_event_log_takes_json_with_a_utf8_charset(local_stack: LocalStack) -> None:
    # Given a fresh log and the same document labelled application/json; charset=UTF-8 (header name in any case)
    log_id = fresh("hygiene")
    url = f"{local_stack.event_log_url}/logs/{log_id}/entries"
    # When it is posted
    status, answer = signed_post(local_stack, url, json.dumps(APPEND).encode(), {"CONTENT-TYPE": "application/json; charset=UTF-8"})
    # Then it is appended
    assert (status, answer["duplicate"]) == (201, False)
    assert len(log_items(local_stack, log_id)) >= 1


# --- the taxi API --------------------------------------------------------------------------------


def assert_nothing_started(stack: LocalStack, key: str) -> None:
    """No execution of the request's name, no row of its id in any status table or the trips table, and GET says 404."""
    outputs = stack.outputs["Onceflow-local-TaxiEtl"]
    row_id = f"k-{key}"
    stepfunctions = stack.client("stepfunctions")
    pages = stepfunctions.get_paginator("list_executions").paginate(stateMachineArn=outputs[taxi_etl_contract.OUTPUT_STATE_MACHINE_ARN])
    assert row_id not in {execution["name"] for page in pages for execution in page["executions"]}
    dynamodb = stack.client("dynamodb")
    for output in [taxi_etl_contract.OUTPUT_TRIPS_TABLE, *taxi_etl_contract.OUTPUT_STATUS_TABLES.values()]:
        item = dynamodb.get_item(TableName=outputs[output], Key={taxi_etl_contract.KEY_STORE_REQUEST_ID: {"S": row_id}})
        assert "Item" not in item, output
    status, _ = send(f"{stack.taxi_url}/trips/{row_id}", "GET", None, [("Authorization", stack.api_key)])
    assert status == 404


@pytest.mark.parametrize("route", [taxi_etl_contract.ROUTE_TRIP, taxi_etl_contract.ROUTE_TRIP_BATCH])
@pytest.mark.parametrize(
    ("content_type", "body", "status", "named"),
    [
        ("text/plain", TRIP.encode(), 415, "the request body is text/plain"),
        ("application/octet-stream", TRIP.encode(), 415, "the request body is application/octet-stream"),
        ("application/x-www-form-urlencoded", TRIP.encode(), 415, "application/x-www-form-urlencoded"),
        ("application/json", TRIP.encode(), 415, "the request body is application/json"),
        (None, TRIP.encode(), 415, "no Content-Type"),
        ("text/csv; charset=iso-8859-1", TRIP.encode("latin-1"), 415, "charset is iso-8859-1"),
        ("text/csv", b"\xef\xbb\xbf" + TRIP.encode(), 400, "byte-order mark"),
        ("text/csv; charset=utf-8", TRIP.encode("utf-16"), 400, "UTF-16"),
        ("text/csv", TRIP.encode("utf-16-le"), 400, "looks like UTF-16"),
        ("text/csv", TRIP.encode() + b",caf\xe9", 400, "not UTF-8 text"),
    ],
    ids=[
        "text-plain",
        "octet-stream",
        "form",
        "json",
        "no-content-type",
        "latin-1-charset",
        "utf8-bom",
        "utf16-bom",
        "utf16",
        "invalid-utf8",
    ],
)
def test_the_taxi_api_refuses_a_body_that_is_not_csv_in_strict_utf8_and_starts_nothing(
    local_stack: LocalStack, route: str, content_type: str | None, body: bytes, status: int, named: str
) -> None:
    # Given a real trip line under a fresh Idempotency-Key, sent under another label or in another encoding
    key = fresh("hygiene")
    headers = [("Authorization", local_stack.api_key), ("Idempotency-Key", key)]
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    # When it is posted over HTTP
    got, answer = send(f"{local_stack.taxi_url}{route}", "POST", body, headers)
    # Then the API answers 415 or 400 with a JSON error that names the problem (and for 415, what is taken)
    assert got == status and named in answer["error"]
    if status == 415:
        assert answer["accepted"] == ["text/csv"]
    # and nothing started: no execution, no status row, no trip
    assert_nothing_started(local_stack, key)
