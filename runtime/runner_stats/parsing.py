"""Turns one Kinesis record of a Lambda event into a message or a rejection. Pure."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from runtime.runner_stats.models import (
    DeviceMessage,
    PositionedMessage,
    Rejection,
    RejectReason,
    RunKey,
    StreamPosition,
    TimestampWindow,
)
from runtime.shared.json_depth import JsonTooDeep, check_depth

REQUIRED_FIELDS = ("user_id", "run_id", "sequence_id", "timestamp_utc", "distance_meters")
_INTEGER_FIELDS = ("user_id", "run_id", "sequence_id", "timestamp_utc")
# A device moving faster than this is a broken sensor, not a runner (1 km in 30 s).
MAX_DISTANCE_PER_MESSAGE = Decimal(1000)
# Millimetres are the finest distance kept, so sums stay exact and DynamoDB can store them. A finer
# value (a JSON double such as 83.41562937271542, a float artefact such as 110.00000000000001) is
# rounded to millimetres, half to even, from the decimal digits as written (never through a float).
DISTANCE_QUANTUM = Decimal("0.001")
DISTANCE_ROUNDING = ROUND_HALF_EVEN
# Ids and timestamps must fit a signed 64-bit integer (and so DynamoDB's 38-digit numbers).
MAX_INTEGER = 2**63 - 1
# A run of a year at one message per 30 s; a larger number is a broken device, and accepting
# it would close every real gap of the run below it.
MAX_SEQUENCE_ID = 1_000_000


def position_of(record: Mapping[str, Any]) -> StreamPosition:
    kinesis = record.get("kinesis", {})
    sequence_number = str(kinesis.get("sequenceNumber", ""))
    return StreamPosition(
        record_id=str(record.get("eventID") or sequence_number),
        sequence_number=sequence_number,
        partition_key=str(kinesis.get("partitionKey", "")),
    )


def arrival_ms_of(record: Mapping[str, Any]) -> int | None:
    """The record's `approximateArrivalTimestamp` (epoch seconds, as Lambda sends it) in milliseconds,
    or None when the record has none (Lambda always sets it; hand-built events may not)."""
    value = record.get("kinesis", {}).get("approximateArrivalTimestamp")
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
        return None
    try:
        milliseconds = int(Decimal(str(value)) * 1000)
    except (InvalidOperation, ValueError, OverflowError):
        return None
    return milliseconds if milliseconds > 0 else None


def parse_record(record: Mapping[str, Any], *, max_bytes: int, window: TimestampWindow | None = None) -> PositionedMessage | Rejection:
    """One record to a message or a rejection. With `window`, `timestamp_utc` must lie within it
    around the record's arrival time in the stream."""
    position = position_of(record)
    encoded = record.get("kinesis", {}).get("data", "")
    try:
        payload = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raw = encoded.encode("utf-8", "replace") if isinstance(encoded, str) else b""
        return Rejection(position, RejectReason.NOT_BASE64, "record data is not valid base64", raw)
    if len(payload) > max_bytes:
        return Rejection(position, RejectReason.TOO_LARGE, f"record is {len(payload)} bytes; the limit is {max_bytes}", payload)
    try:
        # A leading byte-order mark is not part of the JSON text; devices that write one are valid.
        text = payload.decode("utf-8-sig")
    except UnicodeDecodeError:
        return Rejection(position, RejectReason.NOT_UTF8, "record data is not UTF-8 text", payload)
    try:
        # Before the parser, whose own limit is the interpreter's (3.11 recurses to about 1,000 levels, 3.13 far deeper).
        check_depth(text)
    except JsonTooDeep as err:
        return Rejection(position, RejectReason.TOO_DEEP, f"record data is {err}", payload)
    try:
        document = json.loads(text, parse_float=Decimal, parse_constant=_reject_constant)
    except ValueError as err:
        return Rejection(position, RejectReason.NOT_JSON, f"record data is not JSON: {err}", payload)
    if not isinstance(document, dict):
        return Rejection(position, RejectReason.NOT_OBJECT, f"expected a JSON object, got {_json_type(document)}", payload)
    parsed = _message_from_document(document, position, payload)
    if window is not None and isinstance(parsed, PositionedMessage):
        arrival_ms = arrival_ms_of(record)
        problem = window.problem(parsed.message.timestamp_utc, arrival_ms) if arrival_ms is not None else None
        if problem:
            return Rejection(position, RejectReason.BAD_TIMESTAMP, problem, payload, parsed.message.key)
    return parsed


def _message_from_document(document: dict[str, Any], position: StreamPosition, payload: bytes) -> PositionedMessage | Rejection:
    missing = [name for name in REQUIRED_FIELDS if name not in document]
    if missing:
        return Rejection(position, RejectReason.MISSING_FIELD, f"missing field(s): {', '.join(missing)}", payload)
    for name in _INTEGER_FIELDS:
        value = document[name]
        # bool is an int subclass in Python, but `true` is not an id.
        if isinstance(value, bool) or not isinstance(value, int):
            return Rejection(position, RejectReason.WRONG_TYPE, f"{name} must be an integer, got {_json_type(value)}", payload)
    distance = document["distance_meters"]
    if isinstance(distance, bool) or not isinstance(distance, int | Decimal):
        return Rejection(position, RejectReason.WRONG_TYPE, f"distance_meters must be a number, got {_json_type(distance)}", payload)
    distance = Decimal(distance)
    if distance.is_finite() and abs(distance) <= MAX_DISTANCE_PER_MESSAGE:
        # Kept at millimetres: 83.41562937271542 -> 83.416, 110.00000000000001 -> 110.000,
        # 1.50000000 -> 1.500, 0E-200 -> 0.000. Fewer digits stay as written (12.30).
        if distance.as_tuple().exponent < DISTANCE_QUANTUM.as_tuple().exponent:  # type: ignore[operator]
            distance = distance.quantize(DISTANCE_QUANTUM, rounding=DISTANCE_ROUNDING)
        if distance.is_zero():
            distance = distance.copy_abs()  # -0.0001 rounds to -0.000; store 0.000
    problem = _range_problem(document, distance)
    if problem:
        ids_storable = all(abs(document[name]) <= MAX_INTEGER for name in ("user_id", "run_id"))
        key = RunKey(document["user_id"], document["run_id"]) if ids_storable else None
        return Rejection(position, RejectReason.OUT_OF_RANGE, problem, payload, key)
    message = DeviceMessage(
        user_id=document["user_id"],
        run_id=document["run_id"],
        sequence_id=document["sequence_id"],
        timestamp_utc=document["timestamp_utc"],
        distance_meters=distance,
    )
    return PositionedMessage(position, message, payload)


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; Python's parser accepts them unless told otherwise.
    raise ValueError(f"{name} is not a JSON number")


def _range_problem(document: dict[str, Any], distance: Decimal) -> str | None:
    for name in _INTEGER_FIELDS:
        if document[name] > MAX_INTEGER:
            return f"{name} must be at most {MAX_INTEGER}"
    if document["user_id"] < 0 or document["run_id"] < 0:
        return "user_id and run_id must be >= 0"
    if not 1 <= document["sequence_id"] <= MAX_SEQUENCE_ID:
        return f"sequence_id must be 1..{MAX_SEQUENCE_ID}, got {document['sequence_id']}"
    if document["timestamp_utc"] <= 0:
        return f"timestamp_utc must be a positive epoch-milliseconds value, got {document['timestamp_utc']}"
    if not distance.is_finite() or distance < 0:
        return f"distance_meters must be a finite number >= 0, got {distance}"
    if distance > MAX_DISTANCE_PER_MESSAGE:
        return f"distance_meters {distance} exceeds the plausible {MAX_DISTANCE_PER_MESSAGE} m per message"
    return None


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | Decimal):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
