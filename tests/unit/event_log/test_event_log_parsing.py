"""Parsing of the event log (runtime/event_log/parsing.py): API bodies, stream records, SQS messages.

Every API rejection is an InvalidRequest (HTTP 400) naming the field; every stream record or SQS
message no retry can make valid is a PoisonMessage. Sample events are JSON files under
tests/events/event_log/.
"""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from typing import Any

import pytest

from runtime.event_log.entries import MAX_POSITION, EntryKind
from runtime.event_log.errors import PoisonMessage
from runtime.event_log.messages import SideEffect, SideEffectMessage, parse_message, side_effect_of_record, side_effect_request_id
from runtime.event_log.models import AppendRequest, CellEvent
from runtime.event_log.parsing import parse_append, parse_json_object
from runtime.shared.json_depth import MAX_JSON_DEPTH
from runtime.shared.refusals import InvalidRequest
from tests.events.loader import load_event

MAX_BODY = 16_384
MAX_VALUE = 4096
LOG = "sheet-1"
PAYLOAD_KEY = "payloads/sheet-1/30d6519c7d0d930685b41035b3dc682a"
SNAPSHOT_REQUEST_ID = "9263b6e8a26a81310e9953f13ee87c48"  # what the router put on the sample message
PAYLOAD_REQUEST_ID = "3312698884679012090f56ba76943a29"

_DROP = object()


def body(**changes: Any) -> dict[str, Any]:
    """A good append body with `changes` (a value of _DROP removes the field)."""
    document: dict[str, Any] = {"request_id": "req-00000001", "position": 1, "event": {"kind": "SetCell", "cell": "B12", "value": "42"}}
    document.update(changes)
    return {name: value for name, value in document.items() if value is not _DROP}


def event(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {"kind": "SetCell", "cell": "B12", "value": "42"}
    document.update(changes)
    return {name: value for name, value in document.items() if value is not _DROP}


def append(document: dict[str, Any], log_id: str = LOG) -> AppendRequest:
    return parse_append(log_id, document, max_value_bytes=MAX_VALUE)


def rejection(document: dict[str, Any], log_id: str = LOG) -> str:
    with pytest.raises(InvalidRequest) as raised:
        append(document, log_id)
    return str(raised.value)


def from_wire(text: str) -> dict[str, Any]:
    """A body as the API handler sees it: through parse_json_object (numbers as Decimal)."""
    return parse_json_object(text, max_bytes=MAX_BODY)


# --- parse_json_object --------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ['{"a": 1}', b'{"a": 1}', '  {"a": 1}\n'], ids=["str", "bytes", "whitespace"])
def test_a_json_object_is_parsed_from_text_or_bytes(raw: str | bytes) -> None:
    # Given a JSON object body as text or bytes
    # When it is parsed
    # Then the object comes back
    assert parse_json_object(raw, max_bytes=MAX_BODY) == {"a": 1}


def test_fractions_are_parsed_as_decimals() -> None:
    # Given a body with a fractional number
    # When it is parsed
    document = parse_json_object('{"position": 1.5, "n": 0.1}', max_bytes=MAX_BODY)
    # Then it is an exact Decimal, never a float
    assert document == {"position": Decimal("1.5"), "n": Decimal("0.1")}
    assert isinstance(document["n"], Decimal)


@pytest.mark.parametrize("raw", [None, "", b""], ids=["none", "empty-str", "empty-bytes"])
def test_an_empty_body_is_refused(raw: str | bytes | None) -> None:
    # Given no body
    # When it is parsed
    # Then the client is told to send a JSON object
    with pytest.raises(InvalidRequest, match="the request body is empty; send a JSON object"):
        parse_json_object(raw, max_bytes=MAX_BODY)


@pytest.mark.parametrize("raw", ["{", "not json", "{'a': 1}", '{"a": 1} trailing', b"\xff\xfe{", '{"a": NaN'], ids=repr)
def test_a_body_that_is_not_json_is_refused(raw: str | bytes) -> None:
    # Given a body that is not valid JSON (or not UTF-8)
    # When it is parsed
    # Then InvalidRequest says so
    with pytest.raises(InvalidRequest, match="the request body is not valid JSON"):
        parse_json_object(raw, max_bytes=MAX_BODY)


@pytest.mark.parametrize("raw", ["[1, 2]", '"text"', "42", "null", "true"])
def test_a_body_that_is_not_an_object_is_refused(raw: str) -> None:
    # Given JSON that is not an object
    # When it is parsed
    # Then InvalidRequest says an object is required
    with pytest.raises(InvalidRequest, match="the request body must be a JSON object"):
        parse_json_object(raw, max_bytes=MAX_BODY)


def test_the_size_limit_counts_utf8_bytes() -> None:
    # Given a body of exactly the limit in UTF-8 bytes (fewer characters: "é" is two bytes)
    padding = "é" * ((MAX_BODY - len('{"v":""}')) // 2)
    exact = '{"v":"' + padding + '"}'
    assert len(exact.encode()) == MAX_BODY and len(exact) < MAX_BODY
    # When it, and the same body one byte longer, are parsed
    # Then the first is accepted and the second refused, naming both sizes
    assert parse_json_object(exact, max_bytes=MAX_BODY) == {"v": padding}
    with pytest.raises(InvalidRequest, match=f"the request body is {MAX_BODY + 1} bytes; the limit is {MAX_BODY}"):
        parse_json_object(exact.replace('"v"', '"vv"'), max_bytes=MAX_BODY)


def nested(depth: int, opener: str = "[") -> str:
    """A JSON object whose field `x` holds arrays (or objects) nested so that the body is `depth` levels deep."""
    closer = "]" if opener == "[" else "}"
    inner = "[]" if opener == "[" else "{}"
    return '{"x": ' + opener * (depth - 2) + inner + closer * (depth - 2) + "}"


@pytest.mark.parametrize("opener", ["[", '{"a":'], ids=["arrays", "objects"])
def test_a_body_32_levels_deep_is_parsed(opener: str) -> None:
    # Given a valid body whose arrays or objects nest exactly 32 levels (the outer object is level 1)
    raw = nested(MAX_JSON_DEPTH, opener)
    # When it is parsed, Then it is a JSON object like any other
    assert isinstance(parse_json_object(raw, max_bytes=MAX_BODY)["x"], list if opener == "[" else dict)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 900, 5000])
@pytest.mark.parametrize("opener", ["[", '{"a":'], ids=["arrays", "objects"])
def test_a_body_nested_deeper_than_32_levels_is_refused_naming_the_limit(opener: str, depth: int) -> None:
    # Given a valid JSON body nested 33, 900 (stored with a 201 before, on every interpreter) or 5,000 levels (a
    # RecursionError's 400 "not valid JSON" on 3.11, parsed on 3.13)
    raw = nested(depth, opener)
    # When it is parsed, Then it is refused before the parser runs, naming the limit: the same answer on any interpreter
    with pytest.raises(
        InvalidRequest, match=r"^the request body is nested deeper than 32 levels of arrays and objects \(the limit is 32\)$"
    ):
        parse_json_object(raw, max_bytes=10**6)


def test_brackets_inside_strings_are_not_nesting() -> None:
    # Given a shallow body whose strings hold a thousand brackets, escaped quotes and backslashes among them
    value = "[{" * 500 + '\\"[[' + "\\" + "]"
    raw = json.dumps({"x": [value, {"y": value}]})
    # When it is parsed, Then it is accepted with its strings as sent
    assert parse_json_object(raw, max_bytes=MAX_BODY) == {"x": [value, {"y": value}]}


def test_an_unclosed_body_deeper_than_the_limit_is_refused_for_its_depth() -> None:
    # Given a small body that opens 100,000 arrays and closes none
    # When it is parsed, Then it is a 400 naming the depth limit, never a RecursionError (HTTP 500)
    with pytest.raises(InvalidRequest, match="nested deeper than 32 levels"):
        parse_json_object("[" * 100_000, max_bytes=10**6)


# --- parse_append: good requests ----------------------------------------------------------------


def test_a_set_cell_request() -> None:
    # Given a SetCell body as sent over the wire
    document = from_wire('{"request_id": "req-00000001", "position": 7, "event": {"kind": "SetCell", "cell": "B12", "value": "42"}}')
    # When it is parsed
    # Then it is an append request of exactly that event
    assert append(document) == AppendRequest(LOG, "req-00000001", 7, CellEvent(EntryKind.SET_CELL, "B12", "42"))


def test_a_clear_cell_request() -> None:
    # Given a ClearCell body without a value
    document = body(event={"kind": "ClearCell", "cell": "C3"}, position=MAX_POSITION)
    # When it is parsed
    # Then it is a ClearCell event at the highest position allowed
    assert append(document) == AppendRequest(LOG, "req-00000001", MAX_POSITION, CellEvent(EntryKind.CLEAR_CELL, "C3"))


@pytest.mark.parametrize(("cell", "canonical"), [("b12", "B12"), (" aa10 ", "AA10"), ("xfd1048576", "XFD1048576")])
def test_the_cell_is_canonicalised(cell: str, canonical: str) -> None:
    # Given a cell reference in lower case
    # When the request is parsed
    # Then the event names the cell in canonical upper case
    assert append(body(event=event(cell=cell))).event.cell == canonical


def test_a_value_of_exactly_the_limit_and_an_empty_value_are_accepted() -> None:
    # Given values of exactly max_value_bytes UTF-8 bytes, and an empty value
    at_limit = "€" * (MAX_VALUE // 3) + "x" * (MAX_VALUE % 3)
    assert len(at_limit.encode()) == MAX_VALUE
    # When the requests are parsed
    # Then both are SetCell events with the value unchanged
    assert append(body(event=event(value=at_limit))).event.value == at_limit
    assert append(body(event=event(value=""))).event.value == ""


def test_request_ids_of_every_allowed_character_and_length() -> None:
    # Given request ids of 8 and 128 characters using every allowed punctuation
    # When the requests are parsed
    # Then they are kept as sent
    for request_id in ("abcd1234", "A.b_c:d-", "x" * 128, "2026-01-01T00:00:00.000Z"):
        assert append(body(request_id=request_id)).request_id == request_id


def test_log_ids_at_the_limits_are_accepted() -> None:
    # Given log ids of 1 and 64 characters
    # When requests for them are parsed
    # Then they are kept
    for log_id in ("a", "A" * 64, "my_log-2"):
        assert append(body(), log_id=log_id).log_id == log_id


# --- parse_append: every bad input names its field -------------------------------------------------


@pytest.mark.parametrize("log_id", ["", "a" * 65, "sheet/1", "sheet 1", "shéet", "sheet.1", "../x"], ids=repr)
def test_a_bad_log_id(log_id: str) -> None:
    # Given an append to a log id outside [A-Za-z0-9_-]{1,64}
    # When it is parsed
    # Then the rejection names the log id
    assert rejection(body(), log_id=log_id) == "log id must be 1-64 letters, digits, '_' or '-'"


@pytest.mark.parametrize(
    "request_id",
    [_DROP, None, "", "short", "1234567", "x" * 129, "has space", "slash/no", "émoji🙂ok", 12345678, ["req-00000001"]],
    ids=lambda value: "missing" if value is _DROP else repr(value),
)
def test_a_bad_request_id(request_id: Any) -> None:
    # Given a missing, too short, too long or badly spelled request_id
    # When the request is parsed
    # Then the rejection names request_id and the allowed form
    message = rejection(body(request_id=request_id))
    assert message.startswith("request_id must be 8-128 letters, digits, '.', '_', ':' or '-'")


@pytest.mark.parametrize(
    "position",
    [0, -1, True, False, 1.0, Decimal("1.0"), Decimal("2.5"), "1", None, _DROP, MAX_POSITION + 1, 10**30, [1]],
    ids=lambda value: "missing" if value is _DROP else repr(value),
)
def test_a_bad_position(position: Any) -> None:
    # Given a position that is not an integer in 1..MAX_POSITION (zero, negative, a bool, a
    # fraction, a string, missing, or too large)
    # When the request is parsed
    # Then the rejection names position and its range
    assert rejection(body(position=position)) == (
        f"position must be an integer from 1 to {MAX_POSITION}: the next position of the log as you last read it"
    )


@pytest.mark.parametrize("raw_position", ["0", "-3", "1.0", "1e3", "true", '"5"', "1000000000000"])
def test_a_bad_position_from_the_wire(raw_position: str) -> None:
    # Given a body whose position is written as JSON the client might send
    document = from_wire('{"request_id": "req-00000001", "position": ' + raw_position + ', "event": {"kind": "ClearCell", "cell": "A1"}}')
    # When it is parsed
    # Then it is refused for its position
    assert rejection(document).startswith("position must be an integer from 1 to")


@pytest.mark.parametrize("value", [_DROP, None, "SetCell", 42, ["SetCell"]], ids=lambda value: "missing" if value is _DROP else repr(value))
def test_a_missing_or_malformed_event(value: Any) -> None:
    # Given a body without an event object
    # When it is parsed
    # Then the rejection names event and shows its shape
    assert rejection(body(event=value)).startswith('event must be an object such as {"kind": "SetCell"')


@pytest.mark.parametrize(
    "kind",
    [_DROP, None, "setcell", "Snapshot", "DeleteCell", "", 1, ["SetCell"], {"name": "SetCell"}],
    ids=lambda value: "missing" if value is _DROP else repr(value),
)
def test_an_unknown_event_kind(kind: Any) -> None:
    # Given an event whose kind is missing, misspelled, internal, or not even a string
    # When the request is parsed
    # Then the rejection names event.kind and the kinds a client may send
    assert rejection(body(event=event(kind=kind))) == "event.kind must be one of SetCell, ClearCell (large values go through /payloads)"


def test_a_large_payload_event_is_refused() -> None:
    # Given a client trying to append a LargePayload entry itself (naming any object it likes)
    document = body(event={"kind": "LargePayload", "cell": "A1", "payload": "payloads/other-log/secret", "size": 10})
    # When it is parsed
    # Then it is refused: only the complete call writes LargePayload entries
    assert "event.kind must be one of SetCell, ClearCell" in rejection(document)


@pytest.mark.parametrize(
    "cell", [_DROP, None, 12, "A0", "XFE1", "", "B-12"], ids=lambda value: "missing" if value is _DROP else repr(value)
)
def test_a_bad_cell(cell: Any) -> None:
    # Given an event without a valid cell reference
    # When the request is parsed
    # Then the rejection is about the cell
    message = rejection(body(event=event(cell=cell)))
    assert "cell" in message


@pytest.mark.parametrize(
    "value", [_DROP, None, 42, Decimal("4.2"), True, ["42"], {"v": "42"}], ids=lambda value: "missing" if value is _DROP else repr(value)
)
def test_a_set_cell_value_that_is_not_a_string(value: Any) -> None:
    # Given a SetCell event whose value is missing or not a string
    # When the request is parsed
    # Then the rejection names event.value
    assert rejection(body(event=event(value=value))) == "event.value must be a string for SetCell"


def test_a_value_over_the_limit_is_sent_to_payloads() -> None:
    # Given a value one UTF-8 byte over max_value_bytes (the character count is under it)
    value = "€" * (MAX_VALUE // 3) + "x" * (MAX_VALUE % 3 + 1)
    assert len(value.encode()) == MAX_VALUE + 1 and len(value) < MAX_VALUE
    # When the request is parsed
    # Then the rejection names event.value, its size and the way large values go
    assert (
        rejection(body(event=event(value=value)))
        == f"event.value is {MAX_VALUE + 1} bytes; values over {MAX_VALUE} bytes go through /payloads"
    )


def test_a_value_that_is_not_unicode_text_is_refused() -> None:
    # Given a body whose value is a lone surrogate escape (valid JSON, but no UTF-8 text)
    document = from_wire('{"request_id": "req-00000001", "position": 1, "event": {"kind": "SetCell", "cell": "A1", "value": "\\ud800"}}')
    # When the request is parsed
    # Then it is an InvalidRequest about event.value (HTTP 400), not an encoding error (HTTP 500)
    assert "event.value" in rejection(document)


@pytest.mark.parametrize("value", ["", "42", None])
def test_a_clear_cell_with_a_value_is_refused(value: str | None) -> None:
    # Given a ClearCell event carrying a value (even null)
    # When the request is parsed
    # Then the rejection says a ClearCell has no value
    assert rejection(body(event={"kind": "ClearCell", "cell": "A1", "value": value})) == "a ClearCell event has no value"


def test_a_field_an_append_does_not_take_is_refused_by_name() -> None:
    # Given an append with a misspelt field (before, ignored: the append went in without the client's intent)
    # When it is parsed, Then the 400 names it, and what an append takes
    assert rejection(body(positon=2)) == 'the request body has unknown field(s) "positon"; it takes request_id, position, event'
    # and an event with a field beside kind, cell and value is refused the same way
    assert rejection(body(event=event(colour="red"))) == 'event has unknown field(s) "colour"; it takes kind, cell, value'


def test_many_or_long_unknown_fields_are_named_briefly() -> None:
    # Given an append with seven unknown fields, one of them a 10,000-character name
    extra = {"a" * 10_000: 1, **{f"f{index}": index for index in range(6)}}
    # When it is parsed, Then the 400 names the first five, each cut to 64 characters, and says there are more
    message = rejection({**body(), **extra})
    named = f'"{"a" * 64}...", "f0", "f1", "f2", "f3" and more'
    assert message == f"the request body has unknown field(s) {named}; it takes request_id, position, event"


# --- stream records -> side effects -------------------------------------------------------------


def stream_record(name: str) -> dict[str, Any]:
    record: dict[str, Any] = load_event(f"event_log/{name}.json")["Records"][0]
    return record


def test_a_snapshot_entry_becomes_a_build_snapshot_side_effect() -> None:
    # Given the stream record of an inserted Snapshot entry at 1000.5
    record = stream_record("stream_snapshot_insert")
    # When its side effect is computed
    message = side_effect_of_record(record)
    # Then it is a build_snapshot message for that entry, with the deterministic request id
    assert message == SideEffectMessage(SideEffect.BUILD_SNAPSHOT, LOG, Decimal("1000.5"), SNAPSHOT_REQUEST_ID)
    assert message.request_id == side_effect_request_id(SideEffect.BUILD_SNAPSHOT, LOG, Decimal("1000.5"))


def test_a_large_payload_entry_becomes_a_finalize_payload_side_effect() -> None:
    # Given the stream record of an inserted LargePayload entry
    record = stream_record("stream_large_payload_insert")
    # When its side effect is computed
    message = side_effect_of_record(record)
    # Then it is a finalize_payload message naming the payload's object
    assert message == SideEffectMessage(SideEffect.FINALIZE_PAYLOAD, LOG, Decimal("1001"), PAYLOAD_REQUEST_ID, PAYLOAD_KEY)


def test_every_delivery_of_a_record_gets_the_same_request_id() -> None:
    # Given the same stream record delivered twice
    first, second = stream_record("stream_snapshot_insert"), stream_record("stream_snapshot_insert")
    # When their side effects are computed
    # Then the request ids match, so the worker recognises the repeat
    assert side_effect_of_record(first).request_id == side_effect_of_record(second).request_id


@pytest.mark.parametrize("seq", ["1000", "1000.25", "1000.0"])
def test_a_snapshot_entry_not_at_a_half_position_is_poison(seq: str) -> None:
    # Given a Snapshot entry whose seq is not n + 0.5
    record = stream_record("stream_snapshot_insert")
    record["dynamodb"]["NewImage"]["seq"] = {"N": seq}
    # When its side effect is computed
    # Then it is a poison record, naming the half-position rule
    with pytest.raises(PoisonMessage, match="is not at a half position"):
        side_effect_of_record(record)


@pytest.mark.parametrize("seq", ["NaN", "Infinity", "-0.5", "0", "1E+125"])
def test_an_entry_outside_the_log_positions_is_poison(seq: str) -> None:
    # Given a Snapshot entry whose seq is no log position at all
    record = stream_record("stream_snapshot_insert")
    record["dynamodb"]["NewImage"]["seq"] = {"N": seq}
    # When its side effect is computed
    # Then it is a poison record (not a decimal error), naming the seq
    with pytest.raises(PoisonMessage, match="is not a log position"):
        side_effect_of_record(record)


@pytest.mark.parametrize("payload_key", [_DROP, {"S": ""}, {"NULL": True}], ids=["missing", "empty", "null"])
def test_a_large_payload_entry_without_a_payload_key_is_poison(payload_key: Any) -> None:
    # Given a LargePayload entry whose payload_key is missing or empty
    record = stream_record("stream_large_payload_insert")
    if payload_key is _DROP:
        del record["dynamodb"]["NewImage"]["payload_key"]
    else:
        record["dynamodb"]["NewImage"]["payload_key"] = payload_key
    # When its side effect is computed
    # Then it is a poison record naming payload_key
    with pytest.raises(PoisonMessage, match="has no payload_key"):
        side_effect_of_record(record)


@pytest.mark.parametrize("kind", ["SetCell", "ClearCell", "Head", ""])
def test_an_entry_kind_without_a_side_effect_is_poison(kind: str) -> None:
    # Given a record of an entry kind the router's filter should have dropped
    record = stream_record("stream_set_cell_insert")
    record["dynamodb"]["NewImage"]["kind"] = {"S": kind}
    # When its side effect is computed
    # Then it is a poison record naming the kind
    with pytest.raises(PoisonMessage, match=f"entry kind {kind!r} has no side effect"):
        side_effect_of_record(record)


def test_the_sample_set_cell_record_has_no_side_effect() -> None:
    # Given the sample SetCell record as is
    # When its side effect is computed
    # Then it is poison
    with pytest.raises(PoisonMessage, match="'SetCell' has no side effect"):
        side_effect_of_record(stream_record("stream_set_cell_insert"))


@pytest.mark.parametrize(
    "change",
    [
        lambda record: record.pop("dynamodb"),
        lambda record: record["dynamodb"].pop("NewImage"),
        lambda record: record["dynamodb"].update(NewImage=None),
        lambda record: record["dynamodb"].update(NewImage=[]),
    ],
    ids=["no-dynamodb", "no-new-image", "null-new-image", "list-new-image"],
)
def test_a_record_without_a_new_image_is_poison(change: Any) -> None:
    # Given a record without a NewImage (e.g. a KEYS_ONLY or REMOVE record)
    record = stream_record("stream_snapshot_insert")
    change(record)
    # When its side effect is computed
    # Then it is poison
    with pytest.raises(PoisonMessage, match="stream record has no NewImage"):
        side_effect_of_record(record)


@pytest.mark.parametrize(
    ("attribute", "replacement"),
    [("kind", _DROP), ("log_id", _DROP), ("seq", _DROP), ("seq", {"N": "soon"}), ("seq", {"S": "1000.5"}), ("kind", "Snapshot")],
    ids=["no-kind", "no-log-id", "no-seq", "seq-not-a-number", "seq-as-string", "kind-untyped"],
)
def test_a_record_missing_kind_log_id_or_seq_is_poison(attribute: str, replacement: Any) -> None:
    # Given a Snapshot record missing one of its key attributes, or with it malformed
    record = stream_record("stream_snapshot_insert")
    image = record["dynamodb"]["NewImage"]
    if replacement is _DROP:
        del image[attribute]
    else:
        image[attribute] = replacement
    # When its side effect is computed
    # Then it is poison
    with pytest.raises(PoisonMessage, match="stream record is missing kind, log_id or seq"):
        side_effect_of_record(record)


def test_side_effect_request_ids_are_deterministic_and_distinct() -> None:
    # Given side effects of different kinds, logs and positions
    cases = [
        (SideEffect.BUILD_SNAPSHOT, LOG, Decimal("1000.5")),
        (SideEffect.FINALIZE_PAYLOAD, LOG, Decimal("1000.5")),
        (SideEffect.BUILD_SNAPSHOT, "sheet-2", Decimal("1000.5")),
        (SideEffect.BUILD_SNAPSHOT, LOG, Decimal("2000.5")),
    ]
    # When their request ids are computed twice
    ids = [side_effect_request_id(*case) for case in cases]
    # Then each is stable, 32 hex digits, and no two side effects share one
    assert ids == [side_effect_request_id(*case) for case in cases]
    assert ids[0] == SNAPSHOT_REQUEST_ID
    assert all(len(request_id) == 32 and int(request_id, 16) >= 0 for request_id in ids)
    assert len(set(ids)) == len(ids)


# --- SQS messages -------------------------------------------------------------------------------


def sqs_record(name: str) -> dict[str, Any]:
    record: dict[str, Any] = load_event(f"event_log/{name}.json")["Records"][0]
    return record


def test_a_good_snapshot_message() -> None:
    # Given the router's build_snapshot message as Lambda delivers it
    record = sqs_record("sqs_snapshot_message")
    # When it is parsed on the snapshot queue
    message = parse_message(record["body"], record["messageAttributes"], SideEffect.BUILD_SNAPSHOT)
    # Then it is the side effect the stream record produced, request id included
    assert message == SideEffectMessage(SideEffect.BUILD_SNAPSHOT, LOG, Decimal("1000.5"), SNAPSHOT_REQUEST_ID)
    assert message == side_effect_of_record(stream_record("stream_snapshot_insert"))


def test_a_good_payload_message() -> None:
    # Given the router's finalize_payload message as Lambda delivers it
    record = sqs_record("sqs_payload_message")
    # When it is parsed on the payload queue
    message = parse_message(record["body"], record["messageAttributes"], SideEffect.FINALIZE_PAYLOAD)
    # Then it carries the payload key, as the stream record did
    assert message == SideEffectMessage(SideEffect.FINALIZE_PAYLOAD, LOG, Decimal("1001"), PAYLOAD_REQUEST_ID, PAYLOAD_KEY)
    assert message == side_effect_of_record(stream_record("stream_large_payload_insert"))


def test_a_snapshot_message_drops_a_stray_payload_key() -> None:
    # Given a build_snapshot message that also carries a payload_key
    document = {"effect": "build_snapshot", "log_id": LOG, "seq": "1000.5", "payload_key": PAYLOAD_KEY}
    # When it is parsed on the snapshot queue
    message = parse_message(json.dumps(document), {}, SideEffect.BUILD_SNAPSHOT)
    # Then the key is not passed on (only the finalizer acts on payload keys)
    assert message.payload_key is None


def test_the_request_id_attribute_is_read_in_lambda_spelling() -> None:
    # Given a message whose RequestId attribute is spelled as Lambda delivers it (stringValue)
    record = sqs_record("sqs_snapshot_message")
    attributes = {"RequestId": {"stringValue": "operator-chosen-id", "dataType": "String"}}
    # When it is parsed
    # Then the attribute's value is the request id (not a recomputed one)
    assert parse_message(record["body"], attributes, SideEffect.BUILD_SNAPSHOT).request_id == "operator-chosen-id"


def test_the_request_id_attribute_is_read_in_sqs_api_spelling() -> None:
    # Given a message as the SQS API returns it (StringValue, capitalised), e.g. one moved by hand
    received = load_event("event_log/sqs_api_received_message.json")["Messages"][0]
    # When it is parsed
    message = parse_message(received["Body"], received["MessageAttributes"], SideEffect.FINALIZE_PAYLOAD)
    # Then the attribute's value is the request id
    assert message == SideEffectMessage(SideEffect.FINALIZE_PAYLOAD, LOG, Decimal("1001"), "redriven-by-operator-0001", PAYLOAD_KEY)


@pytest.mark.parametrize(
    "attributes", [{}, {"RequestId": {}}, {"RequestId": {"stringValue": ""}}, {"Effect": {"stringValue": "x"}}], ids=repr
)
def test_without_a_request_id_attribute_the_id_is_derived(attributes: dict[str, Any]) -> None:
    # Given a message without a usable RequestId attribute
    record = sqs_record("sqs_snapshot_message")
    # When it is parsed
    message = parse_message(record["body"], attributes, SideEffect.BUILD_SNAPSHOT)
    # Then the request id is the deterministic one of the side effect (the same the router sent)
    assert message.request_id == SNAPSHOT_REQUEST_ID


def test_a_numeric_seq_is_accepted() -> None:
    # Given a message whose seq is a JSON number, not a string
    # When it is parsed
    message = parse_message('{"effect":"build_snapshot","log_id":"sheet-1","seq":1000.5}', {}, SideEffect.BUILD_SNAPSHOT)
    # Then the seq is the same Decimal
    assert message.seq == Decimal("1000.5")


POISON = load_event("event_log/poison_messages.json")["cases"]


@pytest.mark.parametrize("case", POISON, ids=[case["name"] for case in POISON])
def test_poison_messages(case: dict[str, str]) -> None:
    # Given a message no retry can make valid, on the queue it arrived on
    attributes = copy.deepcopy(sqs_record("sqs_snapshot_message")["messageAttributes"])
    # When it is parsed
    # Then it is a PoisonMessage whose reason names what is wrong
    with pytest.raises(PoisonMessage) as raised:
        parse_message(case["body"], attributes, SideEffect(case["effect"]))
    assert case["reason"] in str(raised.value)


def test_the_poison_samples_cover_every_required_shape() -> None:
    # Given the poison samples
    names = {case["name"] for case in POISON}
    # When they are listed
    # Then they include: not JSON, an array, a wrong effect, a bad log id, missing/NaN/negative seq, a foreign payload key
    assert {
        "not_json",
        "json_array",
        "payload_effect_on_snapshot_queue",
        "snapshot_effect_on_payload_queue",
        "log_id_with_slash",
        "seq_missing",
        "seq_nan_string",
        "seq_negative",
        "payload_key_of_another_log",
    } <= names


def test_a_deeply_nested_message_is_poison_not_a_recursion_error() -> None:
    # Given a message body that opens 100,000 arrays
    # When it is parsed
    # Then it is a PoisonMessage naming the depth limit (the batch goes on), not a RecursionError
    with pytest.raises(PoisonMessage, match="nested deeper than 32 levels"):
        parse_message("[" * 100_000, {}, SideEffect.BUILD_SNAPSHOT)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 900, 5000])
def test_a_valid_message_nested_deeper_than_32_levels_is_poison_on_every_interpreter(depth: int) -> None:
    # Given a router message, valid but for an extra field nested `depth` levels in all (parsed on 3.13 at any of them)
    good = '{"effect":"build_snapshot","log_id":"sheet-1","seq":"1000.5"'
    body = good + ',"x":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    # When it is parsed, Then it is a PoisonMessage naming the limit, and the same message 32 levels deep is read
    with pytest.raises(PoisonMessage, match=r"nested deeper than 32 levels of arrays and objects \(the limit is 32\)"):
        parse_message(body, {}, SideEffect.BUILD_SNAPSHOT)
    shallow = good + ',"x":' + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + "}"
    assert parse_message(shallow, {}, SideEffect.BUILD_SNAPSHOT).seq == Decimal("1000.5")
