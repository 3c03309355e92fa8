"""Request hygiene at the taxi API (issue 22), through the deployed entry point
runtime.taxi_etl.api_handler.handler on the embedded cloud: /trips and /trips/batch take text/csv
(charset utf-8 or none); any other media type, another charset or no Content-Type is a 415 naming
text/csv, and a body that is not strict UTF-8 (a BOM, UTF-16, invalid bytes) a 400. Neither starts an
execution or writes a table. GET /trips/{id} (no body) is unaffected.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from devtools.taxi_rows import sample_lines
from devtools.taxi_world import TaxiWorld, http_api_event
from runtime.taxi_etl.requests import content_id
from tests.integration.taxi_etl.test_taxi_api import assert_nothing_happened

LINES = sample_lines()
GOOD = LINES[0]
BODIES = {"/trips": GOOD + "\r\n", "/trips/batch": "\r\n".join(LINES[:3]) + "\r\n"}


def posted(path: str, body: str, headers: dict[str, str], *, is_base64: bool = False) -> dict[str, Any]:
    """A POST the key authorizer allowed, with exactly these headers and this body as API Gateway passes it."""
    event = http_api_event(path, None)
    event["headers"] = {"host": event["headers"]["host"], **headers}
    event["body"], event["isBase64Encoded"] = body, is_base64
    return event


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# --- 415 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize(
    ("headers", "encode", "named"),
    [
        ({"content-type": "text/plain"}, None, "the request body is text/plain"),
        ({"content-type": "text/plain; charset=utf-8"}, None, "the request body is text/plain"),
        ({"content-type": "application/octet-stream"}, "utf-8", "the request body is application/octet-stream"),
        ({"content-type": "application/x-www-form-urlencoded"}, "utf-8", "the request body is application/x-www-form-urlencoded"),
        ({"content-type": "application/json"}, None, "the request body is application/json"),
        ({}, None, "no Content-Type"),
        ({"Idempotency-Key": "load-1"}, None, "no Content-Type"),
        ({"content-type": "text/csv; charset=iso-8859-1"}, "latin-1", "charset is iso-8859-1"),
        ({"Content-Type": "text/csv; charset=UTF-16"}, "utf-16", "charset is UTF-16"),
    ],
    ids=["text-plain", "text-plain-utf8", "octet-stream", "form", "json", "missing", "missing-keyed", "latin-1", "utf-16-mixed-case-name"],
)
def test_a_body_that_is_not_csv_in_utf8_is_a_415_naming_text_csv_and_starts_nothing(
    saga: TaxiWorld, path: str, headers: dict[str, str], encode: str | None, named: str
) -> None:
    # Given real trip lines sent under another media type, another charset, or no Content-Type
    # (as text, or base64 where API Gateway would not deem the type text)
    body = b64(BODIES[path].encode(encode)) if encode else BODIES[path]
    # When they are posted
    status, answer = saga.call_api(posted(path, body, headers, is_base64=encode is not None))
    # Then it is a 415 whose JSON body says what was sent and that text/csv is what is taken
    assert status == 415
    assert named in answer["error"] and "text/csv (charset=utf-8, or no charset)" in answer["error"]
    assert answer["accepted"] == ["text/csv"]
    # and no execution was started and no table was written
    assert_nothing_happened(saga)


# --- accepted labels -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "is_base64"),
    [
        ({"content-type": "text/csv"}, False),
        ({"content-type": "text/csv; charset=utf-8"}, False),
        ({"Content-Type": 'TEXT/CSV; charset="UTF-8"; header=absent'}, False),
        ({"CONTENT-TYPE": "text/csv"}, False),
        ({"content-type": "text/csv; charset=utf-8"}, True),
    ],
    ids=["plain", "charset", "cases-quoted-header-param", "upper-name", "base64"],
)
def test_csv_in_utf8_is_taken_whatever_the_spelling_of_its_label(saga: TaxiWorld, headers: dict[str, str], is_base64: bool) -> None:
    # Given a real trip labelled text/csv, with or without charset=utf-8, in any case, as text or base64
    body = b64(GOOD.encode()) if is_base64 else GOOD
    # When it is posted
    status, answer = saga.call_api(posted("/trips", body, headers, is_base64=is_base64))
    # Then it is accepted and stored
    assert (status, answer["StoreRequestId"]) == (202, content_id(GOOD))
    assert list(saga.final_items()) == [content_id(GOOD)]


def test_reading_a_row_back_without_a_body_is_unaffected(saga: TaxiWorld) -> None:
    # Given a stored trip
    assert saga.post("/trips", GOOD)[0] == 202
    # When it is read back (a GET: no body, the test event's text/csv label or none)
    status, state = saga.get_row(content_id(GOOD))
    # Then it is answered as always
    assert (status, state["state"]) == (200, "stored")


def test_a_post_without_a_body_or_a_content_type_is_the_empty_body_400(saga: TaxiWorld) -> None:
    # Given a POST with neither a body nor a Content-Type
    event = http_api_event("/trips", None)
    event["headers"] = {"host": event["headers"]["host"]}
    # When it is sent
    status, answer = saga.call_api(event)
    # Then it is the route's own 400 (there is nothing to label), and nothing starts
    assert (status, answer["error"]) == (400, "the request body is empty; send CSV text")
    assert_nothing_happened(saga)


# --- 400: not strict UTF-8 -----------------------------------------------------------------------


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize(
    ("encoding", "is_base64", "named"),
    [
        ("bom-text", False, "starts with a byte-order mark"),
        ("bom-base64", True, "starts with a byte-order mark"),
        ("utf-16", True, "starts with a UTF-16 byte-order mark"),
        ("utf-16-be", True, "looks like UTF-16 text"),
        ("utf-16-le-text", False, "looks like UTF-16 text"),
        ("latin-1", True, "the request body is not UTF-8 text; send CSV lines"),
        ("lone-surrogate", False, "the request body is not UTF-8 text; send CSV lines"),
        ("bad-base64", True, "not valid base64"),
    ],
)
def test_a_body_that_is_not_strict_utf8_is_a_400_and_starts_nothing(
    saga: TaxiWorld, path: str, encoding: str, is_base64: bool, named: str
) -> None:
    # Given real trip lines labelled text/csv; charset=utf-8, behind a BOM, in UTF-16, in Latin-1 (a
    # "café" added), with a lone surrogate, or flagged base64 when they are not
    text = BODIES[path]
    body = {
        "bom-text": "\ufeff" + text,
        "bom-base64": b64(b"\xef\xbb\xbf" + text.encode()),
        "utf-16": b64(text.encode("utf-16")),
        "utf-16-be": b64(text.encode("utf-16-be")),
        "utf-16-le-text": text.encode("utf-16-le").decode("utf-8"),
        "latin-1": b64((text + "caf\xe9").encode("latin-1")),
        "lone-surrogate": text + "\ud800",
        "bad-base64": text,
    }[encoding]
    # When they are posted
    status, answer = saga.call_api(posted(path, body, {"content-type": "text/csv; charset=utf-8"}, is_base64=is_base64))
    # Then it is a 400 that names the problem
    assert status == 400
    assert named in answer["error"]
    # and no execution was started and no table was written
    assert_nothing_happened(saga)
