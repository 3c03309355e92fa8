"""parse_record: one Kinesis record of a Lambda event -> a message, or a rejection with a reason."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from runtime.runner_stats.models import DeviceMessage, PositionedMessage, Rejection, RejectReason, RunKey, StreamPosition, TimestampWindow
from runtime.runner_stats.parsing import parse_record, position_of
from runtime.runner_stats.service import ServiceOptions
from runtime.shared.json_depth import MAX_JSON_DEPTH
from tests.events.loader import load_event

ONE_MB = 1024 * 1024
SEQUENCE_NUMBER = "49590338271490256608559692538361571095921575989136588898"
EVENT_ID = f"shardId-000000000000:{SEQUENCE_NUMBER}"
POSITION = StreamPosition(EVENT_ID, SEQUENCE_NUMBER, "3000")
GOOD = {"user_id": 3000, "run_id": 3091019, "sequence_id": 5, "timestamp_utc": 1509547964734, "distance_meters": 120}


def record_with_data(data: Any) -> dict[str, Any]:
    """A Lambda Kinesis record whose `kinesis.data` is exactly `data` (normally base64 text)."""
    return {
        "eventSource": "aws:kinesis",
        "eventID": EVENT_ID,
        "kinesis": {"partitionKey": "3000", "sequenceNumber": SEQUENCE_NUMBER, "data": data},
    }


def record_of(payload: bytes | str) -> dict[str, Any]:
    raw = payload.encode("utf-8") if isinstance(payload, str) else payload
    return record_with_data(base64.b64encode(raw).decode("ascii"))


def document(**changes: Any) -> str:
    body = {**GOOD, **changes}
    return json.dumps({name: value for name, value in body.items() if value is not _DROP})


_DROP = object()


def parse(payload: bytes | str, max_bytes: int = 4096) -> PositionedMessage | Rejection:
    return parse_record(record_of(payload), max_bytes=max_bytes)


def rejected(payload: bytes | str, max_bytes: int = 4096) -> Rejection:
    result = parse(payload, max_bytes)
    assert isinstance(result, Rejection), f"expected a rejection, got {result!r}"
    assert result.position == POSITION
    return result


# --- good records -------------------------------------------------------------------------------


def test_a_good_record_becomes_a_positioned_message() -> None:
    raw = json.dumps(GOOD)
    result = parse(raw)
    assert result == PositionedMessage(POSITION, DeviceMessage(3000, 3091019, 5, 1509547964734, Decimal(120)), raw.encode())
    assert result.message.key == RunKey(3000, 3091019)


def test_fractional_distance_is_kept_exactly_and_extra_fields_are_ignored() -> None:
    result = parse('{"user_id":1,"run_id":2,"sequence_id":3,"timestamp_utc":4,"distance_meters":12.30,"battery":0.5}')
    assert isinstance(result, PositionedMessage)
    assert result.message.distance_meters == Decimal("12.30")
    assert str(result.message.distance_meters) == "12.30"  # parsed as Decimal, never through float


def test_the_seed_sample_message_parses() -> None:
    seed = load_event("runner_stats/seed_message_5.json")["Records"][0]
    result = parse_record(seed, max_bytes=4096)
    assert isinstance(result, PositionedMessage) and result.message.sequence_id == 5


def test_position_falls_back_to_the_sequence_number_without_an_event_id() -> None:
    record = record_of(json.dumps(GOOD))
    del record["eventID"]
    assert position_of(record) == StreamPosition(SEQUENCE_NUMBER, SEQUENCE_NUMBER, "3000")


def test_a_record_of_exactly_max_bytes_is_accepted() -> None:
    body = json.dumps({**GOOD, "padding": ""})
    padded = body.replace('"padding": ""', '"padding": "' + "x" * (ONE_MB - len(body)) + '"')
    assert len(padded.encode()) == ONE_MB
    assert isinstance(parse(padded, max_bytes=ONE_MB), PositionedMessage)


# --- bad records --------------------------------------------------------------------------------


@pytest.mark.parametrize("data", ["%%% not base64 %%%", "eyJ1c2VyX2lkIjo", "ab=c", 12345, None])
def test_data_that_is_not_base64(data: Any) -> None:
    result = parse_record(record_with_data(data), max_bytes=4096)
    assert isinstance(result, Rejection) and result.position == POSITION
    assert result.reason is RejectReason.NOT_BASE64
    assert result.detail == "record data is not valid base64"
    assert result.payload == (data.encode() if isinstance(data, str) else b"")
    assert result.key is None


def test_data_that_is_not_utf8() -> None:
    result = rejected(b"\xff\xfe{\x00")
    assert result.reason is RejectReason.NOT_UTF8
    assert result.detail == "record data is not UTF-8 text"
    assert result.payload == b"\xff\xfe{\x00"


@pytest.mark.parametrize("payload", ['{"user_id": 3000, ', "hello", "", "{'user_id': 1}"])
def test_data_that_is_not_json(payload: str) -> None:
    result = rejected(payload)
    assert result.reason is RejectReason.NOT_JSON
    assert result.detail.startswith("record data is not JSON: ")
    assert result.payload == payload.encode()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(constant: str) -> None:
    result = rejected(document().replace('"distance_meters": 120', f'"distance_meters": {constant}'))
    assert result.reason is RejectReason.NOT_JSON
    assert result.detail == f"record data is not JSON: {constant} is not a JSON number"


@pytest.mark.parametrize(("payload", "kind"), [("[1, 2, 3]", "array"), ('"a string"', "string"), ("42", "number")])
def test_json_that_is_not_an_object(payload: str, kind: str) -> None:
    result = rejected(payload)
    assert result.reason is RejectReason.NOT_OBJECT
    assert result.detail == f"expected a JSON object, got {kind}"


def test_json_that_is_not_an_object_is_described_in_json_terms() -> None:
    assert rejected("null").detail == "expected a JSON object, got null"
    assert rejected("[1]").detail == "expected a JSON object, got array"


def test_missing_fields_are_all_named() -> None:
    result = rejected(document(run_id=_DROP, timestamp_utc=_DROP))
    assert result.reason is RejectReason.MISSING_FIELD
    assert result.detail == "missing field(s): run_id, timestamp_utc"
    assert rejected("{}").detail == "missing field(s): user_id, run_id, sequence_id, timestamp_utc, distance_meters"


@pytest.mark.parametrize(
    ("payload", "detail"),
    [
        (document(user_id="3000"), "user_id must be an integer, got string"),
        (document(run_id=True), "run_id must be an integer, got boolean"),
        (document(run_id=None), "run_id must be an integer, got null"),
        (document().replace('"sequence_id": 5', '"sequence_id": 2.5'), "sequence_id must be an integer, got number"),
        (document().replace('"sequence_id": 5', '"sequence_id": 2.0'), "sequence_id must be an integer, got number"),
        (document(timestamp_utc=[1]), "timestamp_utc must be an integer, got array"),
        (document(distance_meters="120"), "distance_meters must be a number, got string"),
        (document(distance_meters=False), "distance_meters must be a number, got boolean"),
        (document(distance_meters={"m": 1}), "distance_meters must be a number, got object"),
    ],
    ids=["string-user", "bool-run", "null-run", "seq-2.5", "seq-2.0", "array-ts", "string-distance", "bool-distance", "object-distance"],
)
def test_wrong_types(payload: str, detail: str) -> None:
    result = rejected(payload)
    assert result.reason is RejectReason.WRONG_TYPE
    assert result.detail == detail
    assert result.payload == payload.encode()


@pytest.mark.parametrize(
    ("changes", "detail"),
    [
        ({"distance_meters": -5}, "distance_meters must be a finite number >= 0, got -5"),
        ({"sequence_id": 0}, "sequence_id must be 1..1000000, got 0"),
        ({"sequence_id": 1_000_001}, "sequence_id must be 1..1000000, got 1000001"),
        ({"sequence_id": -1}, "sequence_id must be 1..1000000, got -1"),
        ({"user_id": -1}, "user_id and run_id must be >= 0"),
        ({"timestamp_utc": 0}, "timestamp_utc must be a positive epoch-milliseconds value, got 0"),
        ({"distance_meters": 1001}, "distance_meters 1001 exceeds the plausible 1000 m per message"),
    ],
    ids=["negative-distance", "seq-0", "seq-too-large", "seq-minus-1", "negative-user", "zero-ts", "implausible-distance"],
)
def test_out_of_range_values(changes: dict[str, int], detail: str) -> None:
    result = rejected(document(**changes))
    assert result.reason is RejectReason.OUT_OF_RANGE
    assert result.detail == detail
    # The message was readable, so the rejection names its run
    assert result.key == RunKey(changes.get("user_id", GOOD["user_id"]), GOOD["run_id"])


def test_negative_fractional_distance() -> None:
    result = rejected(document().replace('"distance_meters": 120', '"distance_meters": -0.5'))
    assert result.reason is RejectReason.OUT_OF_RANGE
    assert result.detail == "distance_meters must be a finite number >= 0, got -0.5"


def test_a_record_over_max_bytes_is_too_large() -> None:
    # Given a well-formed message padded one byte past 1 MB
    body = json.dumps({**GOOD, "padding": ""})
    payload = body.replace('"padding": ""', '"padding": "' + "x" * (ONE_MB + 1 - len(body)) + '"').encode()
    assert len(payload) == ONE_MB + 1
    # Then it is rejected for its size, before anything reads it
    result = rejected(payload, max_bytes=ONE_MB)
    assert result.reason is RejectReason.TOO_LARGE
    assert result.detail == f"record is {ONE_MB + 1} bytes; the limit is {ONE_MB}"
    assert result.payload == payload
    assert result.key is None


def test_size_is_checked_before_encoding() -> None:
    assert rejected(b"\xff" * 5000).reason is RejectReason.TOO_LARGE


@pytest.mark.parametrize(
    "payload",
    [
        document(user_id=10**39),
        document(run_id=10**40),
        document(timestamp_utc=10**39),
    ],
    ids=["huge-user", "huge-run", "huge-ts"],
)
def test_numbers_dynamodb_cannot_store_are_out_of_range(payload: str) -> None:
    assert rejected(payload).reason is RejectReason.OUT_OF_RANGE


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 900, 1500, 5000])
def test_deeply_nested_json_is_rejected_as_too_deep_on_every_interpreter(depth: int) -> None:
    # Given a valid message but for an extra field nested `depth` levels in all, well under the size limit: before, 1,500
    # levels was `not_json` on 3.11 (a RecursionError) and `not_object` or a stored message on 3.13, 900 was stored
    payload = document()[:-1] + ', "extra": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    # When it is parsed, Then it is a clear rejection naming the limit, the same on any interpreter, never an exception
    result = rejected(payload, max_bytes=ONE_MB)
    assert result.reason is RejectReason.TOO_DEEP
    assert result.detail == "record data is nested deeper than 32 levels of arrays and objects (the limit is 32)"


def test_json_nested_32_levels_is_parsed_and_brackets_in_strings_do_not_count() -> None:
    # Given a message whose extra field nests 32 levels in all, and one whose strings hold a thousand brackets
    at_the_limit = document()[:-1] + ', "extra": ' + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + "}"
    in_strings = document()[:-1] + ', "extra": ' + json.dumps(["[" * 1000, '\\"{{{', "]" * 7]) + "}"
    # When each is parsed, Then both are messages
    assert isinstance(parse(at_the_limit), PositionedMessage)
    assert isinstance(parse(in_strings), PositionedMessage)


@pytest.mark.parametrize(
    ("text", "stored"), [("0E-200", "0.000"), ("1E-200", "0.000"), ("1.50000000000000000000000000000000000000000", "1.500")]
)
def test_distances_with_needless_digits_are_stored_in_millimetres(text: str, stored: str) -> None:
    # Given a distance DynamoDB could not store as written (exponent or digits out of its range)
    result = parse(document().replace('"distance_meters": 120', f'"distance_meters": {text}'))
    # Then it is kept as the same value in millimetres
    assert isinstance(result, PositionedMessage)
    assert str(result.message.distance_meters) == stored


# --- what real devices send (issue 12, findings 7 and 11; tests/data/runner_stats/valid_variants.json) ---

VARIANTS_FILE = Path(__file__).resolve().parents[2] / "data" / "runner_stats" / "valid_variants.json"
VARIANTS = json.loads(VARIANTS_FILE.read_text())


def variant_payload(variant: dict[str, Any]) -> bytes:
    """The variant's bytes as a device sends them: a BOM in front, or a `device` object of extra fields."""
    text = str(variant["text"])
    size = int(variant.get("metadata_bytes", 0))
    if size:
        body = json.loads(text)
        filler = "m" * size
        text = json.dumps({**body, "device": {"model": "watch", "firmware": "1.2.3", "sensors": filler}})
    return ("\ufeff" if variant.get("bom") else "").encode() + text.encode()


@pytest.mark.parametrize("variant", VARIANTS["variants"], ids=lambda variant: variant["name"])
def test_valid_device_variants_are_kept(variant: dict[str, Any]) -> None:
    # Given a valid message as a real device sends it (a JSON double, a BOM, 5 KB of metadata)
    payload = variant_payload(variant)
    # When it is parsed with the service's default limit (Kinesis's record limit)
    result = parse_record(record_of(payload), max_bytes=ServiceOptions().max_message_bytes)
    # Then it is a message whose distance is kept at millimetres, half to even, and whose payload is the record
    assert isinstance(result, PositionedMessage), result
    assert str(result.message.distance_meters) == variant["stored_meters"]
    assert result.payload == payload


def test_a_distance_is_rounded_from_its_digits_never_through_a_float() -> None:
    # 2.0005 as a binary double is 2.000499999...; from its digits it is a tie, which rounds to even
    result = parse(document().replace('"distance_meters": 120', '"distance_meters": 2.0005'))
    assert isinstance(result, PositionedMessage) and str(result.message.distance_meters) == "2.000"
    result = parse(document().replace('"distance_meters": 120', '"distance_meters": 2.0015'))
    assert isinstance(result, PositionedMessage) and str(result.message.distance_meters) == "2.002"


def test_a_tiny_negative_distance_rounds_to_zero_not_minus_zero() -> None:
    result = parse(document().replace('"distance_meters": 120', '"distance_meters": -0.0004'))
    assert isinstance(result, PositionedMessage) and str(result.message.distance_meters) == "0.000"


def test_a_distance_over_the_limit_before_rounding_is_still_out_of_range() -> None:
    assert rejected(document().replace('"distance_meters": 120', '"distance_meters": 1000.0004')).reason is RejectReason.OUT_OF_RANGE


def test_a_byte_order_mark_alone_is_still_not_json() -> None:
    assert rejected("\ufeff").reason is RejectReason.NOT_JSON


# --- the timestamp window around the record's arrival (finding 9) ---------------------------------


def record_arriving(payload: str, arrival: Any) -> dict[str, Any]:
    record = record_of(payload)
    record["kinesis"]["approximateArrivalTimestamp"] = arrival
    return record


WINDOW = TimestampWindow(max_age_ms=3_600_000, max_ahead_ms=60_000)
ARRIVAL_S = GOOD["timestamp_utc"] / 1000


@pytest.mark.parametrize(
    ("offset_ms", "accepted"),
    [(0, True), (60_000, True), (60_001, False), (-3_600_000, True), (-3_600_001, False)],
)
def test_the_window_is_inclusive_at_both_ends(offset_ms: int, accepted: bool) -> None:
    payload = document(timestamp_utc=GOOD["timestamp_utc"] + offset_ms)
    result = parse_record(record_arriving(payload, Decimal(GOOD["timestamp_utc"]) / 1000), max_bytes=4096, window=WINDOW)
    assert isinstance(result, PositionedMessage) is accepted
    if not accepted:
        assert isinstance(result, Rejection) and result.reason is RejectReason.BAD_TIMESTAMP
        assert result.key == RunKey(GOOD["user_id"], GOOD["run_id"])


@pytest.mark.parametrize("arrival", [ARRIVAL_S, Decimal(str(ARRIVAL_S)), int(ARRIVAL_S), str(ARRIVAL_S)])
def test_arrival_is_read_as_epoch_seconds_in_any_json_number_form(arrival: Any) -> None:
    # Given a message stamped a day ahead of its arrival, however the arrival number is spelled
    payload = document(timestamp_utc=GOOD["timestamp_utc"] + 86_400_000)
    result = parse_record(record_arriving(payload, arrival), max_bytes=4096, window=WINDOW)
    assert isinstance(result, Rejection) and result.reason is RejectReason.BAD_TIMESTAMP
    assert result.detail.startswith(f"timestamp_utc {GOOD['timestamp_utc'] + 86_400_000} is 86400 s after the record's arrival")


@pytest.mark.parametrize("arrival", [None, 0, -5, True, "soon", [1]])
def test_without_a_usable_arrival_time_only_positivity_is_checked(arrival: Any) -> None:
    # Lambda always sets approximateArrivalTimestamp; a hand-built event may not
    payload = document(timestamp_utc=GOOD["timestamp_utc"] + 86_400_000)
    record = record_of(payload) if arrival is None else record_arriving(payload, arrival)
    assert isinstance(parse_record(record, max_bytes=4096, window=WINDOW), PositionedMessage)
