"""Storage port of runner stats, and its DynamoDB adapter (client injected, built lazily).

Item layout (documented in docs/runner-stats.md, "Data model and readers"):
- run stats table, key (user_id, run_id): the combined item. User-facing attributes are
  RUN_STATS_PROJECTION; the rest is the dedup record (version, high_water, gaps, closed,
  forgotten, held, gaps_closed, pending, chunks, tendency) and is not for readers.
- messages table, key (run_key "user#run", chunk): immutable archive chunks.
- tendency table, key user_id: the latest and previous run's tendency.
- rejects table, key record_id (the Kinesis eventID): poison, bad-timestamp, too-late and suspect-jump records.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol, cast

from botocore.exceptions import ClientError

from runtime.runner_stats.contract import KEY_RUN_ID, KEY_USER_ID
from runtime.runner_stats.models import (
    ArchiveChunk,
    ArchivedMessage,
    Rejection,
    RunContext,
    RunKey,
    SeqRange,
    TendencySlot,
    UserTendency,
)
from runtime.shared.aws import batch_get_all
from runtime.shared.consistency import VersionConflict, VersionGuard
from runtime.shared.dynamo import (
    ItemAttributes,
    cancellation_codes,
    cancelled_item,
    from_attributes,
    is_conditional_check_failed,
    item_when_condition_failed,
    to_attributes,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import PutTypeDef

RUN_STATS_PROJECTION = ("user_id", "run_id", "total_meters", "total_seconds", "first_ts", "last_ts", "message_count")


class RunStatsStore(Protocol):
    def load_contexts(self, keys: Sequence[RunKey]) -> dict[RunKey, RunContext]: ...
    def load_context(self, key: RunKey) -> RunContext: ...
    def load_tendency(self, user_id: int) -> UserTendency: ...
    def load_tendencies(self, user_ids: Sequence[int]) -> dict[int, UserTendency]: ...
    def save_tendency(self, record: UserTendency) -> None: ...
    def commit(self, context: RunContext, chunk: ArchiveChunk | None) -> None: ...
    def save_rejections(self, rejections: Sequence[Rejection]) -> None: ...
    def archived_sequences(self, context: RunContext) -> frozenset[int]: ...


@dataclass(frozen=True, slots=True)
class RunStatsTables:
    run_stats: str
    tendency: str
    messages: str
    rejects: str


# --- compact encodings (keep the combined item under 1 KB, i.e. 1 WRU per write) ---------------


def encode_ranges(ranges: Sequence[SeqRange]) -> str:
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges)


def decode_ranges(text: str) -> tuple[SeqRange, ...]:
    result: list[SeqRange] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        result.append((int(low), int(high or low)))
    return tuple(result)


def encode_messages(messages: Iterable[ArchivedMessage]) -> str:
    return ";".join(f"{m.sequence_id}:{m.timestamp_utc}:{m.distance_meters}" for m in messages)


def decode_messages(text: str) -> tuple[ArchivedMessage, ...]:
    result: list[ArchivedMessage] = []
    for part in filter(None, text.split(";")):
        seq, ts, distance = part.split(":")
        result.append(ArchivedMessage(int(seq), int(ts), Decimal(distance)))
    return tuple(result)


def context_to_item(context: RunContext) -> dict[str, Any]:
    item: dict[str, Any] = {
        "user_id": context.key.user_id,
        "run_id": context.key.run_id,
        "total_meters": context.total_meters,
        "total_seconds": context.total_seconds,
        "message_count": context.message_count,
        "version": context.version,
        "high_water": context.high_water,
        "gaps_closed": context.gaps_closed,
        "chunks": context.archive_chunks,
    }
    optional = {
        "first_ts": context.first_ts,
        "last_ts": context.last_ts,
        "gaps": encode_ranges(context.gaps),
        "closed": encode_ranges(context.closed),
        "pending": encode_messages(context.pending),
        "held": encode_messages(context.held),
        "forgotten": context.forgotten or None,
        "tendency": context.tendency,
    }
    item.update({name: value for name, value in optional.items() if value not in (None, "")})
    return item


def context_from_item(item: dict[str, Any]) -> RunContext:
    return RunContext(
        key=RunKey(int(item["user_id"]), int(item["run_id"])),
        version=int(item["version"]),
        high_water=int(item["high_water"]),
        gaps=decode_ranges(item.get("gaps", "")),
        closed=decode_ranges(item.get("closed", "")),
        forgotten=int(item.get("forgotten", 0)),
        held=decode_messages(item.get("held", "")),
        gaps_closed=int(item.get("gaps_closed", 0)),
        total_meters=Decimal(item["total_meters"]),
        first_ts=int(item["first_ts"]) if "first_ts" in item else None,
        last_ts=int(item["last_ts"]) if "last_ts" in item else None,
        message_count=int(item["message_count"]),
        pending=decode_messages(item.get("pending", "")),
        archive_chunks=int(item.get("chunks", 0)),
        tendency=item.get("tendency"),
    )


def _slot_to_item(slot: TendencySlot | None) -> dict[str, Any] | None:
    if slot is None:
        return None
    return {"run_id": slot.run_id, "started_at": slot.started_at, "label": slot.label}


def _slot_from_item(item: dict[str, Any] | None) -> TendencySlot | None:
    if not item:
        return None
    return TendencySlot(int(item["run_id"]), int(item["started_at"]), str(item["label"]))


def tendency_from_item(user_id: int, item: dict[str, Any] | None) -> UserTendency:
    if not item:
        return UserTendency(user_id)
    return UserTendency(
        user_id=user_id,
        version=int(item["version"]),
        current=_slot_from_item(item.get("current_run")),
        previous=_slot_from_item(item.get("previous_run")),
    )


class DynamoRunStatsStore:
    """DynamoDB adapter. Every write is conditional on the version that was read."""

    def __init__(
        self,
        tables: RunStatsTables,
        *,
        client: DynamoDBClient,
        reject_payload_max_bytes: int = 4096,
        sleep: Callable[[float], None] = time.sleep,
        read_concurrency: int = 1,
    ) -> None:
        self._tables = tables
        self._client = client
        self._reject_payload_max_bytes = reject_payload_max_bytes
        self._sleep = sleep
        self._read_concurrency = read_concurrency

    @property
    def client(self) -> DynamoDBClient:
        return self._client

    # --- reads ---------------------------------------------------------------------------------

    def load_contexts(self, keys: Sequence[RunKey]) -> dict[RunKey, RunContext]:
        contexts = {key: RunContext(key) for key in keys}
        wanted = [to_attributes({KEY_USER_ID: key.user_id, KEY_RUN_ID: key.run_id}) for key in keys]
        found = batch_get_all(self.client, {self._tables.run_stats: wanted}, sleep=self._sleep, concurrency=self._read_concurrency)
        for item in found[self._tables.run_stats]:
            context = context_from_item(item)
            contexts[context.key] = context
        return contexts

    def load_context(self, key: RunKey) -> RunContext:
        response = self.client.get_item(
            TableName=self._tables.run_stats,
            Key=to_attributes({"user_id": key.user_id, "run_id": key.run_id}),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return context_from_item(from_attributes(item)) if item else RunContext(key)

    def load_tendency(self, user_id: int) -> UserTendency:
        response = self.client.get_item(TableName=self._tables.tendency, Key=to_attributes({"user_id": user_id}), ConsistentRead=True)
        item = response.get("Item")
        return tendency_from_item(user_id, from_attributes(item) if item else None)

    def load_tendencies(self, user_ids: Sequence[int]) -> dict[int, UserTendency]:
        """Many users' tendency records in consistent BatchGetItem calls (a user without one gets version 0)."""
        wanted = [to_attributes({KEY_USER_ID: user_id}) for user_id in user_ids]
        found = batch_get_all(self.client, {self._tables.tendency: wanted}, sleep=self._sleep, concurrency=self._read_concurrency)
        stored = {int(item[KEY_USER_ID]): item for item in found[self._tables.tendency]}
        return {user_id: tendency_from_item(user_id, stored.get(user_id)) for user_id in user_ids}

    # --- writes --------------------------------------------------------------------------------

    def save_tendency(self, record: UserTendency) -> None:
        """Write `record` as version+1, only over the version it was computed from."""
        guard = VersionGuard("user_id", "version", record.version)
        condition, names, values = guard.condition()
        item: dict[str, Any] = {"user_id": record.user_id, "version": record.version + 1}
        for name, slot in (("current_run", record.current), ("previous_run", record.previous)):
            encoded = _slot_to_item(slot)
            if encoded is not None:
                item[name] = encoded
        request: dict[str, Any] = {
            "TableName": self._tables.tendency,
            "Item": to_attributes(item),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if values:
            request["ExpressionAttributeValues"] = values
        try:
            self.client.put_item(**request)
        except ClientError as err:
            if is_conditional_check_failed(err):
                if _is_written(item_when_condition_failed(err), item):
                    return  # our own put, applied before its response was lost and the SDK retried it
                raise VersionConflict(f"tendency of user {record.user_id} moved past version {record.version}") from err
            raise

    def commit(self, context: RunContext, chunk: ArchiveChunk | None) -> None:
        """Write the combined item (as context.version) over version context.version - 1.

        With a flushed chunk, the chunk and the item go in one transaction: the chunk only
        exists if the item that stops carrying its messages exists too.
        """
        guard = VersionGuard("user_id", "version", context.version - 1)
        condition, names, values = guard.condition()
        item = context_to_item(context)
        put: dict[str, Any] = {
            "TableName": self._tables.run_stats,
            "Item": to_attributes(item),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if values:
            put["ExpressionAttributeValues"] = values
        try:
            if chunk is None:
                self.client.put_item(**put)
                return
            chunk_item = {
                "run_key": chunk.key.archive_key,
                "chunk": chunk.index,
                "messages": encode_messages(chunk.messages),
                "message_count": len(chunk.messages),
            }
            self.client.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": self._tables.messages, "Item": to_attributes(chunk_item)}},
                    {"Put": cast("PutTypeDef", put)},
                ]
            )
        except ClientError as err:
            # A retry of our own applied write fails the version condition against it (a retried
            # transaction too, unless DynamoDB still honours its ClientRequestToken); the stored
            # item then is exactly the one this commit wrote. The run item is the transaction's item 1.
            if _is_written(item_when_condition_failed(err) or cancelled_item(err, 1), item):
                return
            codes = cancellation_codes(err)
            if is_conditional_check_failed(err) or "ConditionalCheckFailed" in codes or "TransactionConflict" in codes:
                raise VersionConflict(f"run {context.key} moved past version {context.version - 1}") from err
            raise

    def save_rejections(self, rejections: Sequence[Rejection]) -> None:
        for rejection in rejections:
            self.client.put_item(TableName=self._tables.rejects, Item=to_attributes(self._rejection_item(rejection)))

    def _rejection_item(self, rejection: Rejection) -> dict[str, Any]:
        payload = rejection.payload
        item: dict[str, Any] = {
            "record_id": rejection.position.record_id,
            "sequence_number": rejection.position.sequence_number,
            "partition_key": rejection.position.partition_key,
            "reason": rejection.reason.value,
            "detail": rejection.detail,
            "payload": payload[: self._reject_payload_max_bytes],
            "payload_bytes": len(payload),
            "payload_sha256": hashlib.sha256(payload).hexdigest(),
            "payload_truncated": len(payload) > self._reject_payload_max_bytes,
        }
        if rejection.key is not None:
            item["user_id"] = rejection.key.user_id
            item["run_id"] = rejection.key.run_id
        return item

    # --- readers (documented projection; used by tools, the demo and tests) --------------------

    def archived_sequences(self, context: RunContext) -> frozenset[int]:
        """The sequences the run's archive holds (read on the rare path below its forgotten closed ranges)."""
        return frozenset(message.sequence_id for message in self.read_archive(context))

    def read_archive(self, context: RunContext) -> list[ArchivedMessage]:
        """All archived messages of a run: its flushed chunks, then the pending tail."""
        messages: list[ArchivedMessage] = []
        paginator = self.client.get_paginator("query")
        pages = paginator.paginate(
            TableName=self._tables.messages,
            KeyConditionExpression="run_key = :run_key",
            ExpressionAttributeValues={":run_key": {"S": context.key.archive_key}},
            ConsistentRead=True,
        )
        for page in pages:
            for raw in page.get("Items", []):
                messages.extend(decode_messages(from_attributes(raw)["messages"]))
        messages.extend(context.pending)
        return messages

    # --- operator reads and repairs (ops.runner_stats_reprocess) -------------------------------


def _is_written(found: ItemAttributes | None, intended: dict[str, Any]) -> bool:
    """The item a failed condition found is the one we meant to write, version and all: a write of
    ours that landed before its response was lost. Another writer's item could only match by
    writing the same content over the same version, which leaves the same state."""
    return found is not None and found == intended


def run_key_from_archive_key(text: str) -> RunKey:
    user_id, _, run_id = text.partition("#")
    return RunKey(int(user_id), int(run_id))
