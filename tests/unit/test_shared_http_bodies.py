"""runtime/shared/http.py, the request body both HTTP APIs read (issue 22): its media type (415 unless
the route takes it, in UTF-8), base64, the size limit, and strict UTF-8 (400 for a BOM, UTF-16 or
invalid bytes). Pure functions; the handlers' own tests show nothing is written on a refusal."""

from __future__ import annotations

import base64
import json

import pytest

from runtime.shared.http import CSV, JSON, HttpRequest, HttpResponse, HttpRouter, body_text, header, require_media_type, strict_utf8
from runtime.shared.refusals import InvalidRequest, PayloadTooLarge, Refusal, UnsupportedMediaType
from tests.unit.test_shared_http import http_event

DOCUMENT = '{"request_id": "client-0001", "position": 1}'


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# --- header --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["content-type", "Content-Type", "CONTENT-TYPE"])
def test_a_header_is_found_whatever_the_case_of_its_name(name: str) -> None:
    # Given headers as API Gateway v2 sends them (lower case) and as another proxy or a test might
    for headers in ({"content-type": JSON}, {"Content-Type": JSON}, {"CONTENT-TYPE": JSON}):
        # When the header is looked up under any spelling
        # Then it is found
        assert header(headers, name) == JSON


@pytest.mark.parametrize("headers", [None, {}, {"host": "example.com"}])
def test_a_missing_header_is_none(headers: dict[str, str] | None) -> None:
    # Given no headers, or none of that name
    # When it is looked up
    # Then there is none
    assert header(headers, "content-type") is None


# --- require_media_type --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        'application/json; charset="utf-8"',
        "application/json ; charset = utf-8 ",
        "application/json; foo=bar",
    ],
)
def test_json_is_taken_with_a_utf8_charset_or_none_and_other_parameters_ignored(content_type: str) -> None:
    # Given a JSON body labelled as JSON, with or without charset=utf-8, in any case and spacing
    # When its media type is checked
    # Then it passes
    require_media_type(content_type, DOCUMENT, (JSON,))


@pytest.mark.parametrize("content_type", ["text/csv", "text/csv; charset=utf-8", "TEXT/CSV; header=present"])
def test_csv_is_taken_where_the_route_takes_csv(content_type: str) -> None:
    # Given CSV labelled as CSV (text/csv's own header parameter included)
    # When it is checked against a route that takes CSV
    # Then it passes
    require_media_type(content_type, "1,2,3", (CSV,))


@pytest.mark.parametrize(
    ("content_type", "accepted", "named"),
    [
        ("text/plain", (JSON,), "the request body is text/plain"),
        ("text/plain; charset=utf-8", (CSV,), "the request body is text/plain"),
        ("application/octet-stream", (JSON,), "the request body is application/octet-stream"),
        ("application/x-www-form-urlencoded", (CSV,), "the request body is application/x-www-form-urlencoded"),
        ("application/json", (CSV,), "the request body is application/json"),
        ("text/csv", (JSON,), "the request body is text/csv"),
        ("application/json-patch+json", (JSON,), "the request body is application/json-patch+json"),
        (None, (JSON,), "no Content-Type"),
        ("", (CSV,), "no Content-Type"),
        ("   ", (JSON,), "no Content-Type"),
        ("; charset=utf-8", (JSON,), "the request body is untyped"),
        ("application/json; charset=iso-8859-1", (JSON,), "charset is iso-8859-1"),
        ("text/csv; charset=utf-16", (CSV,), "charset is utf-16"),
        ("text/csv; charset=windows-1252", (CSV,), "charset is windows-1252"),
        ("application/json; charset=", (JSON,), "charset is empty"),
    ],
)
def test_a_body_in_another_media_type_or_charset_or_unlabelled_is_a_415_naming_what_is_taken(
    content_type: str | None, accepted: tuple[str, ...], named: str
) -> None:
    # Given a body whose Content-Type is not one the route takes, not in UTF-8, or missing
    # When its media type is checked
    with pytest.raises(UnsupportedMediaType) as raised:
        require_media_type(content_type, "x", accepted)
    # Then it is a 415 whose message says what was sent and what is taken, and whose body lists the types taken
    refusal = raised.value
    assert refusal.status == 415
    assert named in str(refusal)
    assert f"send it as {accepted[0]} (charset=utf-8, or no charset)" in str(refusal)
    assert refusal.body() == {"error": str(refusal), "accepted": list(accepted)}
    # and it is an invalid request, so the APIs count it with the others
    assert isinstance(refusal, InvalidRequest)


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/octet-stream"])
@pytest.mark.parametrize("body", [None, ""])
def test_a_request_without_a_body_is_not_judged(content_type: str | None, body: str | None) -> None:
    # Given a request with no body (a GET, or a POST the route refuses as empty itself)
    # When its media type is checked
    # Then there is nothing to label, so nothing is refused
    require_media_type(content_type, body, (JSON,))


def test_a_415_is_answered_with_its_status_and_the_types_taken() -> None:
    # Given an API whose route checks its body's media type
    counted: list[Refusal] = []
    router: HttpRouter[None] = HttpRouter(counted.append)

    @router.get("/thing")
    def thing(request: HttpRequest, deps: None) -> HttpResponse:
        require_media_type("text/plain", "x", (CSV,))
        raise AssertionError("refused above")

    # When it is called
    response = router.resolve(http_event("/thing"), None)
    # Then the answer is a JSON 415 that names the media types taken, counted as a refusal
    assert response["statusCode"] == 415
    assert response["headers"]["Content-Type"] == JSON
    assert json.loads(response["body"])["accepted"] == [CSV]
    assert len(counted) == 1


# --- body_text and strict_utf8 -------------------------------------------------------------------


@pytest.mark.parametrize("is_base64", [True, False])
def test_utf8_text_comes_back_from_text_or_base64(is_base64: bool) -> None:
    # Given a UTF-8 body with non-ASCII text, as text or base64
    text = '{"value": "café ☕"}'
    body = b64(text.encode()) if is_base64 else text
    # When it is read
    # Then it is the same text
    assert body_text(body, is_base64=is_base64, max_bytes=100) == text


@pytest.mark.parametrize("body", [None, ""])
def test_no_body_is_empty_text(body: str | None) -> None:
    # Given no body
    # When it is read
    # Then it is empty (the route's own refusal names what to send)
    assert body_text(body, is_base64=True, max_bytes=100) == ""


@pytest.mark.parametrize("body", ["not base64!", "abc", "YWJj\x00"])
def test_a_base64_flagged_body_that_is_not_base64_is_a_400(body: str) -> None:
    # Given a body flagged base64 that is not
    # When it is read
    # Then it is a 400 that says so
    with pytest.raises(InvalidRequest, match="not valid base64") as raised:
        body_text(body, is_base64=True, max_bytes=100)
    assert raised.value.status == 400


def test_the_limit_counts_decoded_bytes_and_the_route_chooses_its_status() -> None:
    # Given 6 characters that are 12 UTF-8 bytes, and a 10-byte limit
    # When they are read as text and as base64, by a route answering 413 and by one answering 400
    # Then both count bytes, and each route gets its own status
    with pytest.raises(PayloadTooLarge, match="is 12 bytes; the limit is 10"):
        body_text("é" * 6, is_base64=False, max_bytes=10)
    with pytest.raises(InvalidRequest, match="is 12 bytes; the limit is 10") as raised:
        body_text(b64("é".encode() * 6), is_base64=True, max_bytes=10, too_large=InvalidRequest)
    assert raised.value.status == 400
    # and exactly the limit is taken
    assert body_text("é" * 5, is_base64=False, max_bytes=10) == "é" * 5


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\xef\xbb\xbf" + DOCUMENT.encode(), "starts with a byte-order mark (BOM, EF BB BF); send UTF-8 without one"),
        (b"\xef\xbb\xbf", "starts with a byte-order mark"),
        (DOCUMENT.encode("utf-16"), "starts with a UTF-16 byte-order mark"),
        ("\ufeff".encode("utf-16-be") + DOCUMENT.encode("utf-16-be"), "starts with a UTF-16 byte-order mark"),
        (DOCUMENT.encode("utf-32"), "starts with a UTF-16 byte-order mark"),
        (DOCUMENT.encode("utf-16-le"), "looks like UTF-16 text"),
        (DOCUMENT.encode("utf-16-be"), "looks like UTF-16 text"),
        ("{}".encode("utf-16-le"), "looks like UTF-16 text"),
        (DOCUMENT.encode("latin-1") + b"caf\xe9", "the request body is not UTF-8 text; send a JSON object"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "the request body is not UTF-8 text; send a JSON object"),
        (b"\xc0\xaf", "not UTF-8 text"),  # an overlong '/'
        (b"\xed\xa0\x80", "not UTF-8 text"),  # an encoded surrogate
        (b"\xf4\x90\x80\x80", "not UTF-8 text"),  # past U+10FFFF
        (b'{"a": "\xe2\x82"}', "not UTF-8 text"),  # a truncated sequence
    ],
    ids=[
        "utf8-bom",
        "only-a-bom",
        "utf16-bom-le",
        "utf16-bom-be",
        "utf32-bom",
        "utf16-le",
        "utf16-be",
        "utf16-short",
        "latin-1",
        "png",
        "overlong",
        "surrogate",
        "too-high",
        "truncated",
    ],
)
@pytest.mark.parametrize("is_base64", [True, False], ids=["base64", "text"])
def test_a_body_that_is_not_strict_utf8_is_a_400_naming_what_it_is(raw: bytes, message: str, is_base64: bool) -> None:
    # Given bytes behind a BOM, in UTF-16 or UTF-32, or not UTF-8 at all; base64 (how API Gateway passes
    # bytes it does not deem text) or as text (a str holds bytes that are not UTF-8 as surrogate escapes)
    body = b64(raw) if is_base64 else raw.decode("utf-8", "surrogateescape")
    # When the body is read
    with pytest.raises(InvalidRequest) as raised:
        body_text(body, is_base64=is_base64, max_bytes=10_000, hint="send a JSON object")
    # Then it is a 400 (not a 413, not a 500) whose message names the problem, the same either way
    assert raised.value.status == 400
    assert message in str(raised.value)


@pytest.mark.parametrize("surrogate", ["\ud800", "\udfff", "\udc00"])
def test_a_lone_surrogate_in_a_text_body_is_not_utf8(surrogate: str) -> None:
    # Given a text body holding a lone surrogate that escapes no byte (no UTF-8 encoding exists for it)
    # When it is read
    # Then it is a 400, not a 500
    with pytest.raises(InvalidRequest, match="not UTF-8 text"):
        body_text(DOCUMENT + surrogate, is_base64=False, max_bytes=10_000)


def test_a_stray_nul_in_utf8_text_is_not_taken_for_utf16() -> None:
    # Given UTF-8 text with one NUL byte (binary junk the route judges itself)
    raw = b"2,2019-10-23\x00,x"
    # When it is decoded
    # Then it comes back as text: only a zero in every other byte looks like UTF-16
    assert strict_utf8(raw) == "2,2019-10-23\x00,x"


def test_a_bom_inside_the_text_is_a_character_not_an_encoding() -> None:
    # Given UTF-8 text with U+FEFF after its start (where two files were concatenated, say)
    raw = "a,b\n\ufeffc,d\n".encode()
    # When it is decoded
    # Then it is text: a byte-order mark is only one in front of the body
    assert strict_utf8(raw) == "a,b\n\ufeffc,d\n"
