"""Request hygiene at the event-log API (issue 22), through the deployed entry point
runtime.event_log.api_handler.handler on the embedded cloud: a body that is not application/json
(charset utf-8 or none) is a 415 naming what is taken, a body that is not strict UTF-8 (a BOM,
UTF-16, invalid bytes) a 400; neither writes anything. GETs without a body are unaffected.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from devtools.event_log_world import EventLogWorld
from runtime.event_log import contract
from runtime.event_log.contract import HANDLER_API
from runtime.shared.json_depth import MAX_JSON_DEPTH
from tests.integration.event_log.test_event_log_api import LOG, call, request
from tests.stack_depth import deepest_stack

DOCUMENT = {"request_id": "client-0001", "position": 1, "event": {"kind": "SetCell", "cell": "B2", "value": "42"}}
TEXT = json.dumps(DOCUMENT)
ROUTES = [f"/logs/{LOG}/entries", f"/logs/{LOG}/payloads", f"/logs/{LOG}/payloads/complete"]


def posted(path: str, body: str | None, headers: dict[str, str] | None, *, is_base64: bool = False) -> dict[str, Any]:
    """A POST event with exactly these headers (None: the sample's, application/json) and this body as API Gateway passes it."""
    event = request("POST", path)  # no body
    if body is not None:
        event["body"] = body
    event["isBase64Encoded"] = is_base64
    if headers is not None:
        event["headers"] = {"host": event["headers"]["host"], **headers}
    return event


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def assert_nothing_written(world: EventLogWorld) -> None:
    """No log entry, head or pending snapshot: the whole log table and the pending table are empty."""
    dynamodb = world.clients.dynamodb
    assert dynamodb.scan(TableName=world.api.log_table, Select="COUNT")["Count"] == 0
    for name, value in world.cloud.function_environment(HANDLER_API).items():
        if name.endswith("_TABLE"):
            assert dynamodb.scan(TableName=value, Select="COUNT")["Count"] == 0, name


# --- 415 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(
    ("headers", "body", "is_base64", "named"),
    [
        ({"content-type": "text/plain"}, TEXT, False, "the request body is text/plain"),
        ({"content-type": "text/plain; charset=utf-8"}, TEXT, False, "the request body is text/plain"),
        ({"content-type": "application/octet-stream"}, b64(TEXT.encode()), True, "the request body is application/octet-stream"),
        ({"content-type": "application/x-www-form-urlencoded"}, b64(TEXT.encode()), True, "application/x-www-form-urlencoded"),
        ({"content-type": "text/csv"}, TEXT, False, "the request body is text/csv"),
        ({}, TEXT, False, "no Content-Type"),
        ({"content-type": ""}, TEXT, False, "no Content-Type"),
        ({"content-type": "application/json; charset=iso-8859-1"}, b64(TEXT.encode("latin-1")), True, "charset is iso-8859-1"),
        ({"Content-Type": "application/json; charset=utf-16"}, b64(TEXT.encode("utf-16")), True, "charset is utf-16"),
    ],
    ids=["text-plain", "text-plain-utf8", "octet-stream", "form", "csv", "missing", "empty", "latin-1", "utf-16-mixed-case-name"],
)
def test_a_body_that_is_not_json_in_utf8_is_a_415_naming_json_and_writes_nothing(
    api: EventLogWorld, path: str, headers: dict[str, str], body: str, is_base64: bool, named: str
) -> None:
    # Given a valid append document sent under another media type, another charset, or no Content-Type
    # When it is posted to any POST route
    status, answer = call(posted(path, body, headers, is_base64=is_base64))
    # Then it is a 415 whose JSON body says what was sent and that application/json is what is taken
    assert status == 415
    assert named in answer["error"] and "application/json (charset=utf-8, or no charset)" in answer["error"]
    assert answer["accepted"] == ["application/json"]
    # and nothing was written
    assert_nothing_written(api)


def test_a_415_is_counted_with_the_invalid_requests(api: EventLogWorld, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a body posted as text/plain
    event = posted(ROUTES[0], TEXT, {"content-type": "text/plain"})
    capsys.readouterr()
    # When it is refused
    status, _ = call(event)
    # Then the invocation's metrics count it as one invalid request, as a 400 or 413 is
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{") and '"_aws"' in line]
    assert status == 415
    assert [document.get(contract.METRIC_INVALID_REQUESTS) for document in documents] == [[1.0]]


# --- accepted labels -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body", "is_base64"),
    [
        ({"content-type": "application/json"}, TEXT, False),
        ({"content-type": "application/json; charset=utf-8"}, TEXT, False),
        ({"content-type": "Application/JSON;charset=UTF-8"}, TEXT, False),
        ({"Content-Type": 'application/json; charset="utf-8"'}, TEXT, False),
        ({"CONTENT-TYPE": "application/json"}, TEXT, False),
        ({"content-type": "application/json"}, b64(TEXT.encode()), True),
    ],
    ids=["plain", "charset", "cases", "quoted-charset-mixed-name", "upper-name", "base64"],
)
def test_json_in_utf8_is_appended_whatever_the_spelling_of_its_label(
    api: EventLogWorld, headers: dict[str, str], body: str, is_base64: bool
) -> None:
    # Given an append labelled application/json, with or without charset=utf-8, in any case, text or base64
    # When it is posted
    status, answer = call(posted(ROUTES[0], body, headers, is_base64=is_base64))
    # Then it is appended
    assert (status, answer["position"], answer["duplicate"]) == (201, 1, False)
    assert [item["value"] for item in api.entries(LOG)] == ["42"]


@pytest.mark.parametrize("headers", [{}, {"content-type": "text/plain"}], ids=["no-content-type", "text-plain"])
def test_a_get_without_a_body_is_unaffected(api: EventLogWorld, headers: dict[str, str]) -> None:
    # Given a log with one entry, and a read with no body, with no Content-Type or an odd one
    assert call(posted(ROUTES[0], TEXT, None))[0] == 201
    event = request("GET", f"/logs/{LOG}/snapshot")
    event["headers"] = {"host": event["headers"]["host"], **headers}
    # When it is sent
    status, page = call(event)
    # Then it is answered as always
    assert status == 200 and [entry["position"] for entry in page["entries"]] == [1]


def test_a_post_without_a_body_or_a_content_type_is_the_empty_body_400(api: EventLogWorld) -> None:
    # Given a POST with neither a body nor a Content-Type
    # When it is sent
    status, answer = call(posted(ROUTES[0], None, {}))
    # Then it is the route's own 400 (there is nothing to label), and nothing is written
    assert (status, answer["error"]) == (400, "the request body is empty; send a JSON object")
    assert_nothing_written(api)


# --- 400: not strict UTF-8 -----------------------------------------------------------------------


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(
    ("body", "is_base64", "named"),
    [
        ("\ufeff" + TEXT, False, "starts with a byte-order mark"),
        (b64(b"\xef\xbb\xbf" + TEXT.encode()), True, "starts with a byte-order mark"),
        (b64(TEXT.encode("utf-16")), True, "starts with a UTF-16 byte-order mark"),
        (b64(TEXT.encode("utf-16-be")), True, "looks like UTF-16 text"),
        (TEXT.encode("utf-16-le").decode("utf-8"), False, "looks like UTF-16 text"),
        (b64(TEXT.replace("42", "caf\xe9").encode("latin-1")), True, "is not UTF-8 text; send a JSON object"),
        (b64(TEXT.encode()[:-3] + b"\xe2\x82}"), True, "is not UTF-8 text"),
        (TEXT + "\ud800", False, "is not UTF-8 text"),
        ("eyJhIjogMX0=!", True, "not valid base64"),
    ],
    ids=["bom-text", "bom-base64", "utf16-bom", "utf16-be", "utf16-le-text", "latin-1", "truncated", "lone-surrogate", "bad-base64"],
)
def test_a_body_that_is_not_strict_utf8_is_a_400_and_writes_nothing(
    api: EventLogWorld, path: str, body: str, is_base64: bool, named: str
) -> None:
    # Given a valid append document, labelled application/json, behind a BOM, in UTF-16, in Latin-1, cut
    # inside a character, with a lone surrogate, or flagged base64 when it is not
    event = posted(path, body, {"content-type": "application/json; charset=utf-8"}, is_base64=is_base64)
    # When it is posted
    status, answer = call(event)
    # Then it is a 400 that names the problem
    assert status == 400
    assert named in answer["error"]
    # and nothing was written
    assert_nothing_written(api)


# --- 400: fields a route does not take, and nesting past 32 levels ----------------------------------

GOOD_BODIES = {
    ROUTES[0]: DOCUMENT,
    ROUTES[1]: {"request_id": "client-0001"},
    ROUTES[2]: {"request_id": "client-0001", "position": 1, "cell": "B2"},
}


@pytest.mark.parametrize("path", ROUTES)
def test_a_field_a_route_does_not_take_is_a_400_naming_it_and_writes_nothing(api: EventLogWorld, path: str) -> None:
    # Given a body each route takes as it is (stored or answered before this), with a misspelt field and one nesting more
    body = json.dumps({**GOOD_BODIES[path], "positon": 2, "note": [[["deep"]]]})
    # When it is posted
    status, answer = call(posted(path, body, {"content-type": "application/json"}))
    # Then it is a 400 naming every unknown field and the ones the route takes, and nothing was written
    expected = f'the request body has unknown field(s) "positon", "note"; it takes {", ".join(GOOD_BODIES[path])}'
    assert (status, answer["error"]) == (400, expected)
    assert_nothing_written(api)


def test_a_field_an_append_event_does_not_take_is_a_400_naming_it(api: EventLogWorld) -> None:
    # Given an append whose event carries a field beside kind, cell and value (a ClearCell with a "note")
    body = json.dumps({**DOCUMENT, "event": {"kind": "ClearCell", "cell": "B2", "note": "gone"}})
    # When it is posted, Then it is a 400 naming it, and nothing was written
    status, answer = call(posted(ROUTES[0], body, {"content-type": "application/json"}))
    assert (status, answer["error"]) == (400, 'event has unknown field(s) "note"; it takes kind, cell, value')
    assert_nothing_written(api)


@pytest.mark.parametrize("path", ROUTES)
def test_a_body_nested_deeper_than_32_levels_is_a_400_naming_the_limit_and_writes_nothing(api: EventLogWorld, path: str) -> None:
    # Given valid bodies whose last field nests 33, 900 or 5,000 levels in all: at 900 an append was stored before (201),
    # and at about 980 the answer was the interpreter's (201 in-process, 400 "not valid JSON" through `make serve`)
    def deep(depth: int) -> str:
        return json.dumps(GOOD_BODIES[path])[:-1] + ', "x": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"

    # When each is posted
    answers = [call(posted(path, deep(depth), {"content-type": "application/json"})) for depth in (33, 900, 5000)]
    # Then each is the same 400 naming the limit, and nothing was written
    refusal = (400, {"error": "the request body is nested deeper than 32 levels of arrays and objects (the limit is 32)"})
    assert answers == [refusal] * 3
    assert_nothing_written(api)


@pytest.mark.parametrize("path", ROUTES)
def test_a_body_32_levels_deep_costs_the_handler_no_more_stack_than_a_shallow_one(api: EventLogWorld, path: str) -> None:
    # Given bodies exactly at the depth limit, which the parser takes on every interpreter: an extra field and, on the
    # append route, the event's value nested 32 levels in all; and the same bodies 3 levels deep
    def body(depth: int, where: str) -> str:
        nested = "[" * (depth - 1) + "]" * (depth - 1) if where == "x" else "[" * (depth - 2) + "]" * (depth - 2)
        document = json.dumps(GOOD_BODIES[path])
        if where == "x":
            return document[:-1] + f', "x": {nested}' + "}"
        return document.replace('"value": "42"', f'"value": {nested}')

    for where in ["x", "value"] if path == ROUTES[0] else ["x"]:
        call(posted(path, body(3, where), {"content-type": "application/json"}))  # what a first call imports, imported
        # When each is posted, the stack the handler reaches measured
        answers = {}
        deepest = {}
        for depth in (3, MAX_JSON_DEPTH):
            with deepest_stack() as probe:
                answers[depth] = call(posted(path, body(depth, where), {"content-type": "application/json"}))
            deepest[depth] = probe.deepest
        # Then both get the same 400 for the field, and the deep one stacked no more frames than the shallow one (give or
        # take the odd finalizer): nothing after the parser walks the document level by level, so no interpreter's
        # recursion limit is nearer for it
        assert answers[MAX_JSON_DEPTH] == answers[3] and answers[3][0] == 400, answers
        assert deepest[MAX_JSON_DEPTH] <= deepest[3] + 3, deepest
    assert_nothing_written(api)
