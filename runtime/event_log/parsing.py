"""Turns what the API receives (bodies, path and query parameters) into typed requests. Pure.

Stream records and SQS messages are messages.py's.

Every rejection names the field and what was wrong with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from runtime.event_log.cells import canonical_cell
from runtime.event_log.entries import LOG_ID, MAX_POSITION, EntryKind, parse_seq
from runtime.event_log.errors import InvalidCell
from runtime.event_log.models import AppendRequest, CellEvent
from runtime.shared.json_depth import JsonTooDeep, check_depth
from runtime.shared.refusals import InvalidRequest

REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{8,128}")
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
