"""Turns what arrives (API bodies, stream records, SQS messages) into typed requests. Pure.

Every rejection names the field and what was wrong with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from runtime.event_log.cells import canonical_cell
from runtime.event_log.errors import InvalidCell, PoisonMessage
from runtime.event_log.models import (
    HALF,
    MAX_POSITION,
    AppendRequest,
    CellEvent,
    EntryKind,
    SideEffect,
    SideEffectMessage,
)
from runtime.shared.consistency import deterministic_id
from runtime.shared.json_depth import JsonTooDeep, check_depth
from runtime.shared.refusals import InvalidRequest

LOG_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{8,128}")
# A log seq as text: an event's position, or a Snapshot entry's cut + 0.5. Matching the text first
# keeps NaN, Infinity, 1E+400 and 40-digit numbers away from Decimal arithmetic and DynamoDB.
SEQ_TEXT = re.compile(rf"[0-9]{{1,{len(str(MAX_POSITION))}}}(?:\.[05])?")
# The fields each JSON body takes; any other is refused by name.
APPEND_FIELDS = ("request_id", "position", "event")
EVENT_FIELDS = ("kind", "cell", "value")
PAYLOAD_FIELDS = ("request_id",)
COMPLETE_FIELDS = ("request_id", "position", "cell")
# A chunk index as text: at most 10 digits, so no arithmetic meets a huge number.
MAX_CHUNK = 10**10 - 1
CHUNK_TEXT = re.compile(r"0|[1-9][0-9]{0,9}")
# What a client may append directly; LargePayload entries are written by the complete call.
CLIENT_KINDS = {EntryKind.SET_CELL.value: EntryKind.SET_CELL, EntryKind.CLEAR_CELL.value: EntryKind.CLEAR_CELL}


def parse_json_object(body: str | bytes | None, *, max_bytes: int) -> dict[str, Any]:
    if body is None or body == "" or body == b"":
        raise InvalidRequest("the request body is empty; send a JSON object")
    try:
        raw = body.encode("utf-8") if isinstance(body, str) else body
    except UnicodeEncodeError as err:
        raise InvalidRequest("the request body is not valid UTF-8 text") from err
    if len(raw) > max_bytes:
        raise InvalidRequest(f"the request body is {len(raw)} bytes; the limit is {max_bytes}")
    try:
        check_depth(raw)
    except JsonTooDeep as err:
        raise InvalidRequest(f"the request body is {err}") from err
    try:
        document = json.loads(raw, parse_float=Decimal)
    except ValueError as err:
        raise InvalidRequest("the request body is not valid JSON") from err
    if not isinstance(document, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return document


def refuse_unknown_fields(document: Mapping[str, Any], known: tuple[str, ...], where: str = "the request body") -> None:
    """A 400 naming every field of `document` outside `known`: a misspelt field is never silently ignored."""
    unknown = [name for name in document if name not in known]
    if unknown:
        shown = (json.dumps(name if len(name) <= 64 else f"{name[:64]}...", ensure_ascii=False) for name in unknown[:5])
        names = ", ".join(shown) + (" and more" if len(unknown) > 5 else "")
        raise InvalidRequest(f"{where} has unknown field(s) {names}; it takes {', '.join(known)}")


def parse_log_id(value: Any) -> str:
    if not isinstance(value, str) or not LOG_ID.fullmatch(value):
        raise InvalidRequest("log id must be 1-64 letters, digits, '_' or '-'")
    return value


def parse_request_id(value: Any) -> str:
    if not isinstance(value, str) or not REQUEST_ID.fullmatch(value):
        raise InvalidRequest("request_id must be 8-128 letters, digits, '.', '_', ':' or '-' (the same on every retry)")
    return value


def parse_position(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_POSITION:
        raise InvalidRequest(f"position must be an integer from 1 to {MAX_POSITION}: the next position of the log as you last read it")
    return value


def parse_cell(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidRequest("cell must be a string in A1 notation, such as B12")
    try:
        return canonical_cell(value)
    except InvalidCell as err:
        raise InvalidRequest(f"cell: {err}") from err


def parse_append(log_id: str, document: Mapping[str, Any], *, max_value_bytes: int) -> AppendRequest:
    refuse_unknown_fields(document, APPEND_FIELDS)
    event = document.get("event")
    if not isinstance(event, dict):
        raise InvalidRequest('event must be an object such as {"kind": "SetCell", "cell": "B12", "value": "42"}')
    raw_kind = event.get("kind")
    kind = CLIENT_KINDS.get(raw_kind) if isinstance(raw_kind, str) else None
    if kind is None:
        raise InvalidRequest(f"event.kind must be one of {', '.join(CLIENT_KINDS)} (large values go through /payloads)")
    refuse_unknown_fields(event, EVENT_FIELDS, "event")
    cell = parse_cell(event.get("cell"))
    value: str | None = None
    if kind == EntryKind.SET_CELL:
        value = event.get("value")
        if not isinstance(value, str):
            raise InvalidRequest("event.value must be a string for SetCell")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as err:
            raise InvalidRequest("event.value is not valid Unicode text") from err
        if size > max_value_bytes:
            raise InvalidRequest(f"event.value is {size} bytes; values over {max_value_bytes} bytes go through /payloads")
    elif "value" in event:
        raise InvalidRequest("a ClearCell event has no value")
    return AppendRequest(
        log_id=parse_log_id(log_id),
        request_id=parse_request_id(document.get("request_id")),
        position=parse_position(document.get("position")),
        event=CellEvent(kind, cell, value),
    )


def parse_seq(value: Any) -> Decimal | None:
    """A log seq from text or a JSON number, from 0 to MAX_POSITION in steps of 0.5; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = str(value)
    if not SEQ_TEXT.fullmatch(text):
        return None
    seq = Decimal(text)
    return seq if seq <= MAX_POSITION else None


def parse_after(value: str | None) -> Decimal | None:
    """The `after` query parameter of a read: a seq from a previous page's next_after, or absent."""
    if value is None or value == "":
        return None
    seq = parse_seq(value)
    if seq is None:
        raise InvalidRequest(f"after must be a seq from a previous page's next_after: a number from 0 to {MAX_POSITION}, such as 40.5")
    return seq


def parse_chunk(value: str | None) -> int:
    """The `chunk` query parameter of a read: the first chunk URL wanted, from a previous page's
    snapshot.next_chunk; 0 when absent. One past the snapshot's last chunk answers no URL."""
    if value is None or value == "":
        return 0
    if not CHUNK_TEXT.fullmatch(value):
        raise InvalidRequest(
            f"chunk must be a chunk index from a previous page's snapshot.next_chunk: a whole number from 0 to {MAX_CHUNK}"
        )
    return int(value)


# --- stream records and SQS messages ----------------------------------------------------------


def side_effect_request_id(effect: SideEffect, log_id: str, seq: Decimal) -> str:
    """The same for every delivery of the same stream record, so workers can recognise repeats."""
    return deterministic_id(effect.value, log_id, seq)


def side_effect_of_record(record: Mapping[str, Any]) -> SideEffectMessage:
    """The side effect of one inserted log entry (a DynamoDB stream record, NEW_IMAGE)."""
    image = record.get("dynamodb", {}).get("NewImage")
    if not isinstance(image, dict):
        raise PoisonMessage("stream record has no NewImage")
    try:
        kind = image["kind"]["S"]
        log_id = image["log_id"]["S"]
        seq = Decimal(image["seq"]["N"])
    except (KeyError, TypeError, InvalidOperation) as err:
        raise PoisonMessage(f"stream record is missing kind, log_id or seq: {err}") from err
    if not seq.is_finite() or not 0 < seq <= MAX_POSITION:
        raise PoisonMessage(f"stream record seq {seq} is not a log position")
    if kind == EntryKind.SNAPSHOT.value:
        if seq % 1 != HALF:
            raise PoisonMessage(f"Snapshot entry at {seq} is not at a half position")
        return SideEffectMessage(SideEffect.BUILD_SNAPSHOT, log_id, seq, side_effect_request_id(SideEffect.BUILD_SNAPSHOT, log_id, seq))
    if kind == EntryKind.LARGE_PAYLOAD.value:
        key = image.get("payload_key", {}).get("S")
        if not key:
            raise PoisonMessage(f"LargePayload entry {log_id}/{seq} has no payload_key")
        return SideEffectMessage(
            SideEffect.FINALIZE_PAYLOAD, log_id, seq, side_effect_request_id(SideEffect.FINALIZE_PAYLOAD, log_id, seq), key
        )
    raise PoisonMessage(f"entry kind {kind!r} has no side effect (the router's filter should not let it through)")


def parse_message(body: str, attributes: Mapping[str, Any], expected: SideEffect) -> SideEffectMessage:
    """An SQS message of the router, checked against the queue it arrived on."""
    try:
        check_depth(body)
    except JsonTooDeep as err:
        raise PoisonMessage(f"message body is {err}") from err
    try:
        document = json.loads(body)
    except ValueError as err:
        raise PoisonMessage("message body is not JSON") from err
    if not isinstance(document, dict):
        raise PoisonMessage("message body is not a JSON object")
    if document.get("effect") != expected.value:
        raise PoisonMessage(f"message effect {document.get('effect')!r} does not belong on the {expected.value} queue")
    log_id = document.get("log_id")
    if not isinstance(log_id, str) or not LOG_ID.fullmatch(log_id):
        raise PoisonMessage(f"message log_id {log_id!r} is not a log id")
    if "seq" not in document:
        raise PoisonMessage("message seq is missing")
    seq = parse_seq(document["seq"])
    if seq is None or seq == 0:
        raise PoisonMessage(f"message seq {str(document['seq'])[:60]!r} is not a log position (1 to {MAX_POSITION})")
    # Snapshot entries sit at half positions, events (large payloads among them) at whole ones.
    if (seq % 1 == HALF) != (expected == SideEffect.BUILD_SNAPSHOT):
        raise PoisonMessage(f"message seq {seq} is not the position of a {expected.value} entry")
    payload_key = document.get("payload_key")
    if expected == SideEffect.FINALIZE_PAYLOAD and not (isinstance(payload_key, str) and payload_key.startswith(f"payloads/{log_id}/")):
        raise PoisonMessage(f"message payload_key {payload_key!r} is not a payload of log {log_id}")
    request = attributes.get("RequestId", {})
    request_id = request.get("stringValue") or request.get("StringValue") or side_effect_request_id(expected, log_id, seq)
    return SideEffectMessage(expected, log_id, seq, str(request_id), payload_key if expected == SideEffect.FINALIZE_PAYLOAD else None)
