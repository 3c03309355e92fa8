"""From an HTTP body to a submission (runtime/taxi_etl/requests.py): decoding, keys, rows, ids and execution names.

Pure: no AWS. The rows are real NYC TLC lines from tests/data/taxi_etl/yellow_2019-10_sample.csv.
"""

from __future__ import annotations

import base64
import json
import re
from functools import cache
from pathlib import Path

import pytest

from runtime.shared.refusals import InvalidRequest, PayloadTooLarge
from runtime.taxi_etl.models import Row
from runtime.taxi_etl.requests import Submission, content_id, decode_body, parse_batch, parse_idempotency_key, parse_single

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "taxi_etl" / "yellow_2019-10_sample.csv"
# Step Functions execution names: 1-80 of these characters (also the StoreRequestId rule of models.py).
EXECUTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
CONTENT_ID = re.compile(r"c-[0-9a-f]{32}")
BATCH_CONTENT_NAME = re.compile(r"cb-[0-9a-f]{32}")
MAX_LINE_BYTES = 4096
MAX_LINES = 100


@cache
def sample_lines() -> tuple[str, ...]:
    return tuple(SAMPLE.read_text(encoding="utf-8").splitlines())


def sample_line(number: int) -> str:
    """Line `number` of the sample file as an editor numbers it (1 is the header)."""
    return sample_lines()[number - 1]


HEADER = sample_line(1)
GOOD = sample_line(2)
OTHER = sample_line(3)
THIRD = sample_line(4)


def single(text: str, key: str | None = None, *, max_line_bytes: int = MAX_LINE_BYTES) -> Submission:
    return parse_single(text, key, max_line_bytes=max_line_bytes)


def batch(text: str, key: str | None = None, *, max_lines: int = MAX_LINES, max_line_bytes: int = MAX_LINE_BYTES) -> Submission:
    return parse_batch(text, key, max_lines=max_lines, max_line_bytes=max_line_bytes)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# --- decode_body ----------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [None, ""])
def test_an_empty_body_is_refused(body: str | None) -> None:
    # Given a request without a body
    # When it is decoded
    with pytest.raises(InvalidRequest, match="empty") as raised:
        decode_body(body, is_base64=False, max_bytes=1000)
    # Then it is a plain 400, not a size refusal
    assert not isinstance(raised.value, PayloadTooLarge)


def test_plain_text_is_returned_as_sent() -> None:
    # Given a CSV line with its CRLF, sent as text
    body = GOOD + "\r\n"
    # When it is decoded
    text = decode_body(body, is_base64=False, max_bytes=1000)
    # Then the text is unchanged (line endings are the parser's business)
    assert text == body


def test_base64_text_is_decoded() -> None:
    # Given a CSV line that API Gateway base64-encoded
    body = b64((GOOD + "\n").encode("utf-8"))
    # When it is decoded
    text = decode_body(body, is_base64=True, max_bytes=1000)
    # Then the CSV text comes back
    assert text == GOOD + "\n"


@pytest.mark.parametrize("body", ["not base64!", "abc", "YWJj\x00"])
def test_invalid_base64_is_refused(body: str) -> None:
    # Given a body flagged base64 that is not base64
    # When it is decoded
    with pytest.raises(InvalidRequest, match="not valid base64") as raised:
        decode_body(body, is_base64=True, max_bytes=1000)
    # Then the refusal says so and is not a size refusal
    assert not isinstance(raised.value, PayloadTooLarge)


def test_binary_data_that_is_not_utf8_is_refused_with_a_clear_message() -> None:
    # Given a PNG file's first bytes, base64-encoded as API Gateway passes binary bodies
    body = b64(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    # When it is decoded
    with pytest.raises(InvalidRequest) as raised:
        decode_body(body, is_base64=True, max_bytes=1000)
    # Then the message tells the client to send CSV text
    assert str(raised.value) == "the request body is not UTF-8 text; send CSV lines"


@pytest.mark.parametrize(
    ("body", "is_base64"),
    [
        (b64(b"2,2019-10-23\x00,x"), True),  # valid UTF-8 with a NUL byte
        ("2,2019\x00-10-23", False),
        ("\x07" + GOOD, False),  # BEL
        (GOOD + "\x1b[0m", False),  # an escape sequence
        (GOOD + "\x7f", False),  # DEL
    ],
)
def test_utf8_with_control_characters_is_refused_as_binary(body: str, is_base64: bool) -> None:
    # Given a body that decodes as UTF-8 but carries control characters CSV never has
    # When it is decoded
    with pytest.raises(InvalidRequest) as raised:
        decode_body(body, is_base64=is_base64, max_bytes=1000)
    # Then the message names the problem
    assert str(raised.value) == "the request body contains control characters; send CSV text, not binary data"


@pytest.mark.parametrize(
    ("body", "is_base64", "message"),
    [
        (b64(b"\xef\xbb\xbf" + GOOD.encode()), True, "starts with a byte-order mark"),
        ("\ufeff" + GOOD, False, "starts with a byte-order mark"),
        (b64("\ufeff".encode("utf-16-le") + GOOD.encode("utf-16-le")), True, "UTF-16 byte-order mark"),
        (b64(GOOD.encode("utf-16-be")), True, "looks like UTF-16"),
        (GOOD.encode("utf-16-le").decode("utf-8"), False, "looks like UTF-16"),  # NULs are valid UTF-8: it can come as text
        (b64(GOOD.encode() + b",caf\xe9"), True, "the request body is not UTF-8 text; send CSV lines"),
    ],
    ids=["utf8-bom-base64", "utf8-bom-text", "utf16-bom", "utf16-be", "utf16-le-text", "latin-1"],
)
def test_a_body_that_is_not_strict_utf8_is_refused_naming_the_encoding(body: str, is_base64: bool, message: str) -> None:
    # Given a CSV line behind a UTF-8 BOM, in UTF-16 (with and without a BOM) or in Latin-1, as API
    # Gateway hands it over: base64, or as text when the bytes are valid UTF-8
    # When it is decoded
    with pytest.raises(InvalidRequest, match=message) as raised:
        decode_body(body, is_base64=is_base64, max_bytes=1000)
    # Then it is a 400 that names the encoding, not a size refusal
    assert raised.value.status == 400


def test_tab_cr_and_lf_are_not_control_characters_for_the_check() -> None:
    # Given text with a tab, CR and LF
    body = "a\tb\r\nc\n"
    # When it is decoded
    # Then it is accepted as text
    assert decode_body(body, is_base64=False, max_bytes=1000) == body


def test_a_lone_surrogate_in_a_text_body_is_refused_as_not_utf8() -> None:
    # Given a text body holding a lone surrogate (no UTF-8 encoding exists for it)
    body = GOOD + "\ud800"
    # When it is decoded
    # Then it is refused as not UTF-8, not as a server error
    with pytest.raises(InvalidRequest, match="not UTF-8"):
        decode_body(body, is_base64=False, max_bytes=1000)


def test_a_body_over_the_limit_is_too_large_and_the_size_is_in_bytes() -> None:
    # Given 6 characters that are 12 UTF-8 bytes, and a 10-byte limit
    body = "é" * 6
    # When it is decoded
    with pytest.raises(PayloadTooLarge) as raised:
        decode_body(body, is_base64=False, max_bytes=10)
    # Then the refusal counts bytes, not characters
    assert str(raised.value) == "the request body is 12 bytes; the limit is 10"


def test_a_base64_body_is_measured_after_decoding() -> None:
    # Given 9 bytes whose base64 is 12 characters, and a 10-byte limit
    body = b64(b"123456789")
    # When it is decoded
    # Then it fits: the limit applies to the decoded bytes
    assert decode_body(body, is_base64=True, max_bytes=10) == "123456789"
    # And one byte more is over
    with pytest.raises(PayloadTooLarge, match="11 bytes; the limit is 10"):
        decode_body(b64(b"12345678901"), is_base64=True, max_bytes=10)


def test_a_body_of_exactly_the_limit_is_accepted() -> None:
    # Given a 10-byte body and a 10-byte limit
    # When it is decoded
    # Then it is accepted
    assert decode_body("0123456789", is_base64=False, max_bytes=10) == "0123456789"


# --- parse_idempotency_key ------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["order-42_A", "a", "a" * 64, "0123456789", "__--"])
def test_a_valid_idempotency_key_is_returned(key: str) -> None:
    # Given a key of 1-64 letters, digits, '_' or '-'
    # When it is parsed
    # Then it is kept as sent
    assert parse_idempotency_key(key) == key


def test_no_idempotency_key_is_none() -> None:
    # Given no header
    # When it is parsed
    # Then there is no key
    assert parse_idempotency_key(None) is None


@pytest.mark.parametrize("key", ["a" * 65, "", "has space", "a.b", "a/b", "ключ", "key\n", "k:1"])
def test_an_invalid_idempotency_key_is_refused(key: str) -> None:
    # Given a key too long, empty, or with a character outside the allowed set
    # When it is parsed
    # Then it is refused with the rule
    with pytest.raises(InvalidRequest, match="1-64 letters, digits"):
        parse_idempotency_key(key)


# --- parse_single ---------------------------------------------------------------------------------


def test_a_single_good_line_gets_its_content_id() -> None:
    # Given one real trip line, no key
    # When it is parsed
    submission = single(GOOD)
    # Then its id is c-<32 hex> from the line, and it is also the execution name
    (store_request_id,) = submission.store_request_ids
    assert CONTENT_ID.fullmatch(store_request_id)
    assert store_request_id == content_id(GOOD)
    assert submission.execution_name == store_request_id
    assert submission.rows == (Row(store_request_id, GOOD),)
    assert submission.skipped_header is False


@pytest.mark.parametrize("body", [GOOD + "\n", GOOD + "\r\n", "\r\n" + GOOD + "\r\n\r\n", "\n  \n" + GOOD, GOOD + "\n\n\n"])
def test_the_content_id_does_not_depend_on_line_endings_or_blank_lines(body: str) -> None:
    # Given the same line with other line endings or blank lines around it
    # When it is parsed
    submission = single(body)
    # Then it has the id of the bare line, and its row carries the bare line
    assert submission.store_request_ids == (content_id(GOOD),)
    assert submission.rows == (Row(content_id(GOOD), GOOD),)


def test_different_lines_have_different_content_ids() -> None:
    # Given two different trips
    # When each is parsed
    # Then their ids differ
    assert single(GOOD).store_request_ids != single(OTHER).store_request_ids


def test_the_idempotency_key_names_the_single_row() -> None:
    # Given a line sent with Idempotency-Key order-42
    # When it is parsed
    submission = single(GOOD, "order-42")
    # Then the row id and the execution name are k-order-42
    assert submission.store_request_ids == ("k-order-42",)
    assert submission.execution_name == "k-order-42"
    assert submission.rows == (Row("k-order-42", GOOD),)


def test_two_lines_on_the_single_route_point_to_the_batch_route() -> None:
    # Given two lines sent to /trips
    # When they are parsed
    with pytest.raises(InvalidRequest) as raised:
        single(GOOD + "\n" + OTHER + "\n")
    # Then the refusal counts them and names /trips/batch
    assert "got 2" in str(raised.value) and "/trips/batch" in str(raised.value)


@pytest.mark.parametrize("body", ["\n", "  \r\n \n"])
def test_a_body_without_a_line_is_refused(body: str) -> None:
    # Given a body of blank lines
    # When it is parsed
    # Then there is no CSV line to serve
    with pytest.raises(InvalidRequest, match="no CSV line"):
        single(body)


@pytest.mark.parametrize("header", [HEADER, HEADER.replace("vendorid", "VendorID"), '"VendorID",' + HEADER.split(",", 1)[1]])
def test_a_header_line_on_the_single_route_is_refused(header: str) -> None:
    # Given a CSV header (any case, quoted or not) sent as the one line
    # When it is parsed
    # Then it is refused as a header
    with pytest.raises(InvalidRequest, match="header"):
        single(header)


def test_a_line_with_5_columns_is_refused_with_its_count() -> None:
    # Given a line with 5 columns
    # When it is parsed
    with pytest.raises(InvalidRequest) as raised:
        single("2,2019-10-23T16:39:42.000,2019-10-23T17:14:10.000,1,7.93")
    # Then the message gives the count, and it is not a size refusal
    assert "has 5 columns" in str(raised.value)
    assert not isinstance(raised.value, PayloadTooLarge)


def test_a_line_over_max_line_bytes_is_too_large() -> None:
    # Given a real line and a line limit below its size
    size = len(GOOD.encode("utf-8"))
    # When it is parsed
    with pytest.raises(PayloadTooLarge) as raised:
        single(GOOD, max_line_bytes=size - 1)
    # Then the refusal gives the size and the limit
    assert f"is {size} bytes; the limit is {size - 1}" in str(raised.value)
    # And at exactly the limit the line is accepted
    assert single(GOOD, max_line_bytes=size).rows == (Row(content_id(GOOD), GOOD),)


def test_a_line_that_is_not_well_formed_csv_is_a_bad_request_not_a_crash() -> None:
    # Given a real line with an unbalanced quote (the csv module cannot split it)
    line = GOOD.replace(",N,", ',"N,', 1)
    # When it is parsed
    # Then it is refused as a bad request (HTTP 400), not a bare ValueError the API turns into a 500
    with pytest.raises(InvalidRequest):
        single(line)


def test_a_header_with_a_byte_order_mark_is_still_a_header_on_the_single_route() -> None:
    # Given the header of a file saved as "CSV UTF-8" by a spreadsheet: it starts with a BOM
    # When it is sent to /trips
    # Then it is refused as a header, as it is without the BOM
    with pytest.raises(InvalidRequest, match="header"):
        single("\ufeff" + HEADER + "\r\n")


# --- parse_batch ----------------------------------------------------------------------------------


def test_a_batch_has_one_id_per_line_in_order() -> None:
    # Given three different trips
    # When they are parsed as a batch
    submission = batch("\n".join([GOOD, OTHER, THIRD]) + "\n")
    # Then each line has its content id, in the order sent, and the rows follow that order
    ids = (content_id(GOOD), content_id(OTHER), content_id(THIRD))
    assert submission.store_request_ids == ids
    assert submission.rows == (Row(ids[0], GOOD), Row(ids[1], OTHER), Row(ids[2], THIRD))
    assert submission.skipped_header is False


def test_a_line_has_the_same_id_on_both_routes() -> None:
    # Given a trip sent alone, then in a batch
    # When both are parsed
    # Then it is the same transaction: one id
    assert single(GOOD).store_request_ids[0] == batch(OTHER + "\n" + GOOD).store_request_ids[1]


def test_duplicate_lines_in_a_batch_share_an_id_and_one_row() -> None:
    # Given a batch sending GOOD twice (once with CRLF) around another line
    # When it is parsed
    submission = batch(GOOD + "\r\n" + OTHER + "\n" + GOOD + "\n")
    # Then the ids answer every line, the repeated line with the same id
    assert submission.store_request_ids == (content_id(GOOD), content_id(OTHER), content_id(GOOD))
    # And the rows are unique, in first-seen order
    assert submission.rows == (Row(content_id(GOOD), GOOD), Row(content_id(OTHER), OTHER))


def test_a_header_first_line_is_skipped_and_reported() -> None:
    # Given a file pasted whole: header, then two trips
    # When it is parsed as a batch
    submission = batch("\r\n".join([HEADER, GOOD, OTHER]) + "\r\n")
    # Then the header is no row, and the submission says it was skipped
    assert submission.skipped_header is True
    assert submission.store_request_ids == (content_id(GOOD), content_id(OTHER))
    assert [row.tuple for row in submission.rows] == [GOOD, OTHER]


def test_a_header_with_a_byte_order_mark_is_skipped_too() -> None:
    # Given two files saved as "CSV UTF-8" by a spreadsheet and concatenated: the second one's header,
    # inside the body, starts with a BOM (a body that starts with one is refused by decode_body, issue 22)
    # When it is parsed as a batch
    submission = batch(GOOD + "\r\n" + "\ufeff" + HEADER + "\r\n" + OTHER + "\r\n")
    # Then the header is skipped as it is without the BOM, and only the trips are rows
    assert submission.skipped_header is True
    assert submission.store_request_ids == (content_id(GOOD), content_id(OTHER))


def test_a_batch_of_only_a_header_is_refused() -> None:
    # Given a header and nothing else
    # When it is parsed as a batch
    # Then there is no line to serve
    with pytest.raises(InvalidRequest, match="no CSV line"):
        batch(HEADER + "\n")


def test_blank_lines_in_a_batch_are_ignored() -> None:
    # Given two trips with blank and whitespace-only lines between them
    # When they are parsed
    submission = batch(GOOD + "\n\n   \r\n" + OTHER + "\n\n")
    # Then there are two ids
    assert submission.store_request_ids == (content_id(GOOD), content_id(OTHER))


def test_a_batch_over_max_lines_is_too_large() -> None:
    # Given three lines and a limit of two
    # When they are parsed
    with pytest.raises(PayloadTooLarge) as raised:
        batch("\n".join([GOOD, OTHER, THIRD]), max_lines=2)
    # Then the refusal counts the lines against the limit
    assert str(raised.value) == "the batch has 3 lines; the limit is 2"


def test_a_skipped_header_does_not_count_against_max_lines() -> None:
    # Given a header and two lines, and a limit of two
    # When they are parsed
    submission = batch("\n".join([HEADER, GOOD, OTHER]), max_lines=2)
    # Then the batch fits
    assert len(submission.store_request_ids) == 2


def test_a_bad_line_refuses_the_whole_batch_listing_the_line_numbers() -> None:
    # Given four lines, the 2nd with 3 columns and the 4th with 2
    text = "\n".join([GOOD, "1,2,3", OTHER, "a,b"])
    # When they are parsed
    with pytest.raises(InvalidRequest) as raised:
        batch(text)
    # Then the refusal counts and lists the bad lines and says nothing was accepted
    message = str(raised.value)
    assert message.startswith("2 of 4 lines cannot be trips, nothing was accepted: ")
    assert "line 2 has 3 columns" in message and "line 4 has 2 columns" in message
    assert "line 1 " not in message and "line 3 " not in message
    assert not isinstance(raised.value, PayloadTooLarge)


def test_many_bad_lines_show_five_and_count_the_rest() -> None:
    # Given eight bad lines
    # When they are parsed
    with pytest.raises(InvalidRequest) as raised:
        batch("\n".join(["x,y"] * 8))
    # Then five are shown and three counted
    message = str(raised.value)
    assert message.startswith("8 of 8 lines cannot be trips")
    assert "line 5 has 2 columns" in message and "line 6 " not in message
    assert message.endswith("; and 3 more")


def test_a_line_over_max_line_bytes_refuses_the_batch() -> None:
    # Given two real lines, the second longer, and a line limit below the second's size
    short, long = sorted([GOOD, OTHER], key=len)
    size = len(long.encode("utf-8"))
    assert len(short.encode("utf-8")) < size
    # When they are parsed
    with pytest.raises(InvalidRequest) as raised:
        batch(short + "\n" + long, max_line_bytes=size - 1)
    # Then the second line is named with its size
    assert f"line 2 is {size} bytes; the limit is {size - 1}" in str(raised.value)
    assert "nothing was accepted" in str(raised.value)


def test_a_malformed_csv_line_refuses_the_batch_instead_of_crashing() -> None:
    # Given a batch whose second line has an unbalanced quote
    text = GOOD + "\n" + OTHER.replace(",N,", ',"N,', 1) + "\n"
    # When it is parsed
    with pytest.raises(InvalidRequest) as raised:
        batch(text)
    # Then the batch is refused as a bad request naming line 2 (not a bare ValueError, an HTTP 500)
    assert "line 2" in str(raised.value) and "nothing was accepted" in str(raised.value)


def test_a_keyed_batch_numbers_its_rows_and_names_its_execution_after_the_key() -> None:
    # Given three lines sent with Idempotency-Key run-7
    # When they are parsed
    submission = batch("\n".join([GOOD, OTHER, THIRD]), "run-7")
    # Then each line is k-run-7-<n> and the execution kb-run-7
    assert submission.store_request_ids == ("kb-run-7-1", "kb-run-7-2", "kb-run-7-3")
    assert submission.execution_name == "kb-run-7"
    assert submission.rows == (Row("kb-run-7-1", GOOD), Row("kb-run-7-2", OTHER), Row("kb-run-7-3", THIRD))


def test_a_keyed_batch_numbers_data_lines_after_a_skipped_header() -> None:
    # Given a header and two lines with a key
    # When they are parsed
    submission = batch("\n".join([HEADER, GOOD, OTHER]), "k1")
    # Then the first trip is row 1
    assert submission.store_request_ids == ("kb-k1-1", "kb-k1-2")


def test_an_unkeyed_batch_name_is_stable_for_the_same_lines() -> None:
    # Given the same two lines sent twice, once with LF and once with CRLF and a header
    first = batch(GOOD + "\n" + OTHER + "\n")
    again = batch(HEADER + "\r\n" + GOOD + "\r\n" + OTHER + "\r\n")
    # When their execution names are compared
    # Then both are the same cb-<32 hex>
    assert BATCH_CONTENT_NAME.fullmatch(first.execution_name)
    assert again.execution_name == first.execution_name


def test_an_unkeyed_batch_name_depends_on_the_lines_and_their_order() -> None:
    # Given batches that differ by a line, or by order
    base = batch(GOOD + "\n" + OTHER).execution_name
    # When their names are compared
    # Then they differ
    assert batch(GOOD + "\n" + THIRD).execution_name != base
    assert batch(OTHER + "\n" + GOOD).execution_name != base
    # And a one-line batch is not named like the single request of that line
    assert batch(GOOD).execution_name != single(GOOD).execution_name


def test_a_single_key_never_names_a_row_of_a_keyed_batch() -> None:
    # Given a batch sent with key "abc", and later one line sent alone with the different key "abc-1"
    batch_ids = batch(GOOD + "\n" + OTHER, "abc").store_request_ids
    single_id = single(THIRD, "abc-1").store_request_ids[0]
    # When their StoreRequestIds are compared
    # Then two different keys give two different transactions (else the second overwrites the first's statuses)
    assert single_id not in batch_ids


# --- the execution input --------------------------------------------------------------------------


def test_equal_submissions_have_the_same_canonical_execution_input() -> None:
    # Given the same batch sent twice with other line endings
    first = batch(GOOD + "\n" + OTHER + "\n")
    again = batch(GOOD + "\r\n" + OTHER + "\r\n\r\n")
    # When their execution inputs are built
    text = first.execution_input()
    # Then they are the same text, compact JSON of the rows as the phases read them
    assert again.execution_input() == text
    assert json.loads(text) == {
        "rows": [{"StoreRequestId": content_id(GOOD), "tuple": GOOD}, {"StoreRequestId": content_id(OTHER), "tuple": OTHER}]
    }
    assert text == json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)


def test_a_different_line_under_the_same_key_changes_the_input_not_the_name() -> None:
    # Given two different lines sent with the same key
    first, second = single(GOOD, "same"), single(OTHER, "same")
    # When their submissions are compared
    # Then the name is the same and the input differs (Step Functions reports the reuse)
    assert first.execution_name == second.execution_name
    assert first.execution_input() != second.execution_input()


def test_the_execution_input_keeps_non_ascii_text() -> None:
    # Given a submission whose tuple has a non-ASCII character
    submission = Submission("c-x", (Row("c-x", "é,1"),), ("c-x",))
    # When its input is built
    # Then the character is written as is, not escaped
    assert submission.execution_input() == '{"rows":[{"StoreRequestId":"c-x","tuple":"é,1"}]}'


# --- names and ids are Step Functions names -------------------------------------------------------


def all_submissions() -> list[Submission]:
    data = sample_lines()[1 : MAX_LINES + 1]
    longest_key = "K" * 64
    return [
        single(GOOD),
        single(GOOD, longest_key),
        single(GOOD, "a"),
        batch("\n".join(data)),
        batch("\n".join(data), longest_key),
        batch("\n".join(data[:3]), "x_-1"),
        batch(HEADER + "\n" + GOOD),
    ]


def test_every_execution_name_and_row_id_is_a_step_functions_name() -> None:
    # Given single and batch submissions, keyed with the longest key and unkeyed, up to the batch limit
    submissions = all_submissions()
    # When their names and ids are collected
    names = [submission.execution_name for submission in submissions]
    ids = [store_request_id for submission in submissions for store_request_id in submission.store_request_ids]
    # Then every one matches [A-Za-z0-9_-]{1,80}
    assert len(ids) == 1 + 1 + 1 + MAX_LINES + MAX_LINES + 3 + 1
    bad = [name for name in names + ids if not EXECUTION_NAME.fullmatch(name)]
    assert bad == []
    # And the rows' ids are exactly the ids of the lines, each once
    for submission in submissions:
        assert [row.store_request_id for row in submission.rows] == list(dict.fromkeys(submission.store_request_ids))


SCHEMA_ROWS = json.loads((SAMPLE.parent / "schema_rows.json").read_text(encoding="utf-8"))


def test_a_header_anywhere_in_a_batch_is_skipped_not_made_a_row() -> None:
    # Given two files pasted one after the other: header, trip, header, trip
    # When it is parsed as a batch
    submission = batch("\n".join([HEADER, GOOD, HEADER.replace("vendorid", "VendorID"), OTHER]))
    # Then neither header is a row (no id, no status row later), and the trips are numbered as data lines
    assert submission.skipped_header is True
    assert submission.store_request_ids == (content_id(GOOD), content_id(OTHER))


@pytest.mark.parametrize("layout", ["yellow_2009", "yellow_2015"])
def test_a_layout_with_coordinates_is_refused_naming_it_by_header_or_by_row(layout: str) -> None:
    # Given the header, and a data row, of a 2009-2014 or 2015-2016 file (coordinates, no zone ids)
    header, row = SCHEMA_ROWS[layout]["header"], SCHEMA_ROWS[layout]["row"]
    year = layout.removeprefix("yellow_")
    # When they are sent to either route
    # Then each is refused with a 400 that names the layout (not a 202 and a flag per cell)
    for send in (lambda: single(header), lambda: single(row), lambda: batch(header + "\n" + GOOD), lambda: batch(GOOD + "\n" + row)):
        with pytest.raises(InvalidRequest, match=f"yellow {year}-") as refused:
            send()
        assert not isinstance(refused.value, PayloadTooLarge)


@pytest.mark.parametrize("layout", ["yellow_2017", "yellow_2020_empty_codes", "yellow_2025"])
def test_a_mapped_layout_is_taken_with_its_header_skipped(layout: str) -> None:
    # Given a file of 2017, 2020 (with empty codes) or 2025, header first
    header, row = SCHEMA_ROWS[layout]["header"], SCHEMA_ROWS[layout]["row"]
    # When it is sent as a batch
    submission = batch(header + "\n" + row)
    # Then the header is skipped and the row is taken under its content id
    assert submission.store_request_ids == (content_id(row),)


def test_every_spelling_of_a_trip_gets_the_same_content_id() -> None:
    # Given a real row as the portal exports it, and the spellings other clients send
    cells = GOOD.split(",")
    tlc_dates = ",".join([cells[0], *(cell.replace("T", " ").removesuffix(".000") for cell in cells[1:3]), *cells[3:]])
    variants = [GOOD + "  ", ",".join(f'"{cell}"' for cell in cells), GOOD + ",", "\ufeff" + GOOD, tlc_dates]
    # When each is parsed on the single route
    ids = {single(variant).store_request_ids[0] for variant in variants}
    # Then they are one trip: the id of the row as exported
    assert ids == {content_id(GOOD)}
