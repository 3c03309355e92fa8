"""The side effects' messages: what the stream router sends for an entry and the snapshot worker and
payload finalizer receive from their queues. Pure, and apart from the value types (models.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from runtime.event_log.entries import HALF, LOG_ID, MAX_POSITION, EntryKind, parse_seq
from runtime.event_log.errors import PoisonMessage
from runtime.shared.consistency import deterministic_id
from runtime.shared.json_depth import JsonTooDeep, check_depth


class SideEffect(StrEnum):
    BUILD_SNAPSHOT = "build_snapshot"
    FINALIZE_PAYLOAD = "finalize_payload"


@dataclass(frozen=True, slots=True)
class SideEffectMessage:
    """One SQS message of the stream router; `request_id` is deterministic per side effect."""

    effect: SideEffect
    log_id: str
    seq: Decimal
    request_id: str
    payload_key: str | None = None


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


def message_body(message: SideEffectMessage) -> str:
    body: dict[str, Any] = {"effect": message.effect.value, "log_id": message.log_id, "seq": str(message.seq)}
    if message.payload_key is not None:
        body["payload_key"] = message.payload_key
    return json.dumps(body, separators=(",", ":"))
