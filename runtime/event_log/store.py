"""Storage ports of the event log, and their DynamoDB adapters (client injected, built lazily).

Log table, key (log_id, seq):
- seq 0: the head (next position, Snapshot entries so far, last cut, last-snapshot pointer);
- seq n (1, 2, ...): cell events; they also carry segment_key/cell_order, the keys of the
  sparse SegmentEvents index, which lists one segment's events in cell order;
- seq cut + 0.5: Snapshot entries.
Pending-snapshots table, key (log_id, seq of the Snapshot entry): the seed's Created, Modified,
Retries, Active, Increment and State of a snapshot being built.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol, cast

from botocore.exceptions import ClientError

from runtime.event_log import contract
from runtime.event_log.cells import order_key
from runtime.event_log.entries import EntryKind
from runtime.event_log.errors import EntryExists, HeadMoved, RootConflict, TransientConflict
from runtime.event_log.models import BuildState, CellEvent, Head, LogEntry, PayloadRef, PendingSnapshot, SnapshotMarker
from runtime.shared.concurrency import ReadAhead
from runtime.shared.dynamo import (
    cancellation_codes,
    cancelled_item,
    from_attributes,
    is_conditional_check_failed,
    item_when_condition_failed,
    to_attributes,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import PutTypeDef, UpdateTypeDef

HEAD_SEQ = 0
SEGMENT_INDEX = contract.INDEX_SEGMENT_EVENTS
SEGMENT_INDEX_PARTITION = contract.KEY_SEGMENT
SEGMENT_INDEX_SORT = contract.KEY_CELL_ORDER
# Items per segment-index page (was 500). A build holds the page it folds and the next one, read
# meanwhile: 2,000 events of short values are a few hundred KB, and DynamoDB ends a page at 1 MB
# whatever the Limit. A segment's pages are read one after another (each starts at the one
# before's LastEvaluatedKey), so fewer, larger pages keep the index read off a build's critical
# path; they cost the same read units.
_PAGE_LIMIT = 2000
# What the fold reads of an indexed event (the index keys and the segment are known from the query).
_FOLD_ATTRIBUTES = ("seq", "kind", "cell", "value", "payload_key", "payload_bytes", "request_id")
WRITE_TOKEN = "write_token"  # on log entries: the ClientRequestToken of the transaction that wrote it


# The seed's attribute names; several are DynamoDB reserved words, so expressions use these.
SEED_NAMES = {
    "#active": "Active",
    "#modified": "Modified",
    "#created": "Created",
    "#retries": "Retries",
    "#increment": "Increment",
    "#state": "State",
    "#due": "Due",
}


def _written_by(item: dict[str, Any] | None, token: str) -> bool:
    return item is not None and item.get(WRITE_TOKEN) == token


def segment_key(log_id: str, segment: int) -> str:
    return f"{log_id}#{segment:010d}"


def timestamp(now: float) -> Decimal:
    return Decimal(f"{now:.3f}")


class LogStore(Protocol):
    def read_head(self, log_id: str) -> Head: ...
    def append(self, entry: LogEntry, head: Head, created_at: str) -> None: ...
    def read_entry(self, log_id: str, position: int) -> LogEntry | None: ...
    def append_marker(self, marker: SnapshotMarker, head: Head, created_at: str) -> bool: ...
    def read_marker(self, log_id: str, seq: Decimal) -> SnapshotMarker | None: ...
    def segment_events(self, log_id: str, segment: int, after_order: str) -> Iterator[LogEntry]: ...
    def set_root(self, marker: SnapshotMarker, root: str, built_at: str) -> None: ...
    def advance_pointer(self, marker: SnapshotMarker, root: str) -> None: ...
    def entries_after(self, log_id: str, after: Decimal, limit: int | None) -> tuple[list[dict[str, Any]], Decimal | None]: ...


class PendingStore(Protocol):
    def claim(self, log_id: str, seq: Decimal, token: str, now: float, lease_seconds: float) -> PendingSnapshot | None: ...
    def checkpoint(self, pending: PendingSnapshot, state: BuildState, now: float) -> bool: ...
    def defer(self, pending: PendingSnapshot, now: float, due: float) -> bool: ...
    def release(self, pending: PendingSnapshot, now: float) -> bool: ...
    def delete(self, log_id: str, seq: Decimal, increment: int | None = None) -> bool: ...
    def get(self, log_id: str, seq: Decimal) -> PendingSnapshot | None: ...


# --- item mapping -----------------------------------------------------------------------------


def head_from_item(log_id: str, item: dict[str, Any] | None) -> Head:
    if not item:
        return Head(log_id)
    return Head(
        log_id=log_id,
        next_position=int(item["next"]),
        snapshots=int(item["snapshots"]),
        last_cut=int(item["last_cut"]),
        built=int(item.get("built", 0)),
        built_seq=Decimal(item["built_seq"]) if "built_seq" in item else None,
        built_root=item.get("built_root"),
        exists=True,
    )


def entry_to_item(entry: LogEntry, created_at: str) -> dict[str, Any]:
    event = entry.event
    item: dict[str, Any] = {
        "log_id": entry.log_id,
        "seq": entry.position,
        "kind": event.kind.value,
        "cell": event.cell,
        "request_id": entry.request_id,
        "segment": entry.segment,
        "created_at": created_at,
        SEGMENT_INDEX_PARTITION: segment_key(entry.log_id, entry.segment),
        SEGMENT_INDEX_SORT: f"{order_key(event.cell)}#{entry.position:013d}",
    }
    if event.value is not None:
        item["value"] = event.value
    if event.payload is not None:
        item["payload_key"] = event.payload.key
        item["payload_bytes"] = event.payload.size
    return item


def entry_from_item(item: dict[str, Any]) -> LogEntry:
    kind = EntryKind(item["kind"])
    payload = PayloadRef(str(item["payload_key"]), int(item["payload_bytes"])) if kind == EntryKind.LARGE_PAYLOAD else None
    return LogEntry(
        log_id=str(item["log_id"]),
        position=int(item["seq"]),
        request_id=str(item["request_id"]),
        event=CellEvent(kind, str(item["cell"]), item.get("value"), payload),
        segment=int(item["segment"]),
    )


def indexed_entry(log_id: str, segment: int, item: dict[str, Any]) -> LogEntry:
    """An event as the segment index lists it, with the fold's attributes only (`_FOLD_ATTRIBUTES`)."""
    return entry_from_item({**item, "log_id": log_id, "segment": segment})


def marker_from_item(item: dict[str, Any]) -> SnapshotMarker:
    return SnapshotMarker(
        log_id=str(item["log_id"]),
        number=int(item["snapshot"]),
        cut=int(item["cut"]),
        previous_cut=int(item["previous_cut"]),
        root=item.get("root"),
    )


def state_to_item(state: BuildState) -> dict[str, Any]:
    return {
        "chunks": state.chunks,
        "cursor": state.cursor,
        "previous_chunk": state.previous_chunk,
        "consumed": state.consumed,
        "cells": state.cells,
        "digest": state.digest,
    }


def state_from_item(item: dict[str, Any] | None) -> BuildState:
    if not item:
        return BuildState()
    return BuildState(
        chunks=int(item["chunks"]),
        cursor=str(item["cursor"]),
        previous_chunk=int(item["previous_chunk"]),
        consumed=int(item["consumed"]),
        cells=int(item["cells"]),
        digest=str(item["digest"]),
    )


def pending_from_item(item: dict[str, Any]) -> PendingSnapshot:
    return PendingSnapshot(
        log_id=str(item["log_id"]),
        seq=Decimal(item["seq"]),
        created=float(item["Created"]),
        modified=float(item["Modified"]),
        retries=int(item["Retries"]),
        increment=int(item["Increment"]),
        active=item.get("Active"),
        state=state_from_item(item.get("State")),
        due=float(item["Due"]) if "Due" in item else None,
    )


# --- adapters ---------------------------------------------------------------------------------


class _Dynamo:
    def __init__(self, client: DynamoDBClient) -> None:
        self._client = client

    @property
    def client(self) -> DynamoDBClient:
        return self._client


class DynamoLogStore(_Dynamo):
    """The log table. Every write is a conditional write or a transaction of them."""

    def __init__(self, table: str, *, client: DynamoDBClient) -> None:
        super().__init__(client)
        self._table = table

    def _key(self, log_id: str, seq: int | Decimal) -> dict[str, Any]:
        return to_attributes({"log_id": log_id, "seq": seq})

    def read_head(self, log_id: str) -> Head:
        response = self.client.get_item(TableName=self._table, Key=self._key(log_id, HEAD_SEQ), ConsistentRead=True)
        item = response.get("Item")
        return head_from_item(log_id, from_attributes(item) if item else None)

    def append(self, entry: LogEntry, head: Head, created_at: str) -> None:
        """Put the entry (its position must be free) and advance the head, in one transaction.

        The transaction's ClientRequestToken is also written on the entry: DynamoDB answers a
        retry of the same call with success within ten minutes, and where it does not (a retry
        that arrives later, an emulator), the entry carrying our token is our own success."""
        token = uuid.uuid4().hex
        put = {
            "TableName": self._table,
            "Item": to_attributes({**entry_to_item(entry, created_at), WRITE_TOKEN: token}),
            "ConditionExpression": "attribute_not_exists(seq)",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if head.exists:
            head_update: dict[str, Any] = {
                "UpdateExpression": "SET #next = :after",
                "ConditionExpression": "#next = :position AND snapshots = :snapshots",
                "ExpressionAttributeValues": to_attributes(
                    {":after": entry.position + 1, ":position": entry.position, ":snapshots": head.snapshots}
                ),
            }
        else:
            head_update = {
                "UpdateExpression": "SET #next = :after, snapshots = :zero, last_cut = :zero, built = :zero, kind = :kind",
                "ConditionExpression": "attribute_not_exists(seq)",
                "ExpressionAttributeValues": to_attributes({":after": entry.position + 1, ":zero": 0, ":kind": "Head"}),
            }
        update = {
            "TableName": self._table,
            "Key": self._key(entry.log_id, HEAD_SEQ),
            "ExpressionAttributeNames": {"#next": "next"},
            **head_update,
        }
        try:
            self.client.transact_write_items(
                TransactItems=[{"Put": cast("PutTypeDef", put)}, {"Update": cast("UpdateTypeDef", update)}], ClientRequestToken=token
            )
        except ClientError as err:
            codes = cancellation_codes(err)
            if not codes:
                raise
            if codes[0] == "ConditionalCheckFailed":
                if _written_by(cancelled_item(err, 0), token):
                    return
                raise EntryExists(f"position {entry.position} of log {entry.log_id} is taken") from err
            if codes[1] == "ConditionalCheckFailed":
                raise HeadMoved(f"the head of log {entry.log_id} moved") from err
            if "TransactionConflict" in codes:
                raise TransientConflict(f"a concurrent transaction on log {entry.log_id}") from err
            raise

    def read_entry(self, log_id: str, position: int) -> LogEntry | None:
        response = self.client.get_item(TableName=self._table, Key=self._key(log_id, position), ConsistentRead=True)
        item = response.get("Item")
        return entry_from_item(from_attributes(item)) if item else None

    def append_marker(self, marker: SnapshotMarker, head: Head, created_at: str) -> bool:
        """Append the Snapshot entry closing the open segment; False if the head moved meanwhile.
        The write token works as in `append`."""
        token = uuid.uuid4().hex
        item = {
            "log_id": marker.log_id,
            "seq": marker.seq,
            "kind": EntryKind.SNAPSHOT.value,
            "snapshot": marker.number,
            "cut": marker.cut,
            "previous_cut": marker.previous_cut,
            "created_at": created_at,
            WRITE_TOKEN: token,
        }
        try:
            self.client.transact_write_items(
                ClientRequestToken=token,
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": to_attributes(item),
                            "ConditionExpression": "attribute_not_exists(seq)",
                            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        }
                    },
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": self._key(marker.log_id, HEAD_SEQ),
                            "UpdateExpression": "SET snapshots = :number, last_cut = :cut",
                            "ConditionExpression": "#next = :next AND snapshots = :before",
                            "ExpressionAttributeNames": {"#next": "next"},
                            "ExpressionAttributeValues": to_attributes(
                                {":number": marker.number, ":cut": marker.cut, ":next": head.next_position, ":before": head.snapshots}
                            ),
                        }
                    },
                ],
            )
        except ClientError as err:
            if not cancellation_codes(err):
                raise
            return _written_by(cancelled_item(err, 0), token)  # else another append or Snapshot entry got there first
        return True

    def read_marker(self, log_id: str, seq: Decimal) -> SnapshotMarker | None:
        response = self.client.get_item(TableName=self._table, Key=self._key(log_id, seq), ConsistentRead=True)
        item = response.get("Item")
        if not item:
            return None
        attributes = from_attributes(item)
        return marker_from_item(attributes) if attributes.get("kind") == EntryKind.SNAPSHOT.value else None

    def segment_events(self, log_id: str, segment: int, after_order: str) -> ReadAhead[LogEntry]:
        """A segment's events in (cell, position) order, for cells after `after_order`, page by page.

        The first page is requested at once, and every next page while the one before is folded
        (`ReadAhead`); close the answer when done with it. Only what the fold needs is read
        (ProjectionExpression).

        The index is eventually consistent; the builder counts what it read against the
        segment's size and starts over if an event was not there yet.
        """
        names = {"#segment": SEGMENT_INDEX_PARTITION} | {f"#a{index}": name for index, name in enumerate(_FOLD_ATTRIBUTES)}
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": SEGMENT_INDEX,
            "Limit": _PAGE_LIMIT,
            "ProjectionExpression": ", ".join(f"#a{index}" for index in range(len(_FOLD_ATTRIBUTES))),
        }
        values: dict[str, Any] = {":segment": segment_key(log_id, segment)}
        if after_order:
            # "~" sorts after the "#position" suffix of every event of the cell `after_order`.
            request["KeyConditionExpression"] = "#segment = :segment AND #order > :after"
            names["#order"] = SEGMENT_INDEX_SORT
            values[":after"] = f"{after_order}#~"
        else:
            request["KeyConditionExpression"] = "#segment = :segment"
        request["ExpressionAttributeNames"] = names
        request["ExpressionAttributeValues"] = to_attributes(values)

        def page(start: dict[str, Any] | None) -> tuple[list[LogEntry], dict[str, Any] | None]:
            response = self.client.query(**({**request, "ExclusiveStartKey": start} if start else request))
            entries = [indexed_entry(log_id, segment, from_attributes(raw)) for raw in response.get("Items", [])]
            return entries, response.get("LastEvaluatedKey") or None

        return ReadAhead(page, None, name="segment-read")

    def set_root(self, marker: SnapshotMarker, root: str, built_at: str) -> None:
        """Write the root to the Snapshot entry; rewriting the same root is a no-op."""
        try:
            self.client.update_item(
                TableName=self._table,
                Key=self._key(marker.log_id, marker.seq),
                UpdateExpression="SET #root = :root, built_at = if_not_exists(built_at, :at)",
                ConditionExpression="attribute_exists(seq) AND (attribute_not_exists(#root) OR #root = :root)",
                ExpressionAttributeNames={"#root": "root"},
                ExpressionAttributeValues=to_attributes({":root": root, ":at": built_at}),
            )
        except ClientError as err:
            if is_conditional_check_failed(err):
                raise RootConflict(f"snapshot {marker.number} of log {marker.log_id} already has another root") from err
            raise

    def advance_pointer(self, marker: SnapshotMarker, root: str) -> None:
        """Move the head's last-snapshot pointer forward to `marker`; never backwards."""
        try:
            self.client.update_item(
                TableName=self._table,
                Key=self._key(marker.log_id, HEAD_SEQ),
                UpdateExpression="SET built = :number, built_seq = :seq, built_root = :root",
                ConditionExpression="attribute_exists(seq) AND built < :number",
                ExpressionAttributeValues=to_attributes({":number": marker.number, ":seq": marker.seq, ":root": root}),
            )
        except ClientError as err:
            if not is_conditional_check_failed(err):
                raise

    def entries_after(self, log_id: str, after: Decimal, limit: int | None) -> tuple[list[dict[str, Any]], Decimal | None]:
        """Entries with seq > after (events and Snapshot entries), and where the next page starts.

        `limit` None: as many as fit DynamoDB's 1 MB page."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "log_id = :log AND seq > :after",
            "ExpressionAttributeValues": to_attributes({":log": log_id, ":after": after}),
            "ConsistentRead": True,
        }
        if limit is not None:
            request["Limit"] = limit
        response = self.client.query(**request)
        items = [from_attributes(raw) for raw in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        return items, (Decimal(from_attributes(last)["seq"]) if last else None)


class DynamoPendingStore(_Dynamo):
    """The pending-snapshots table: claims with a lease, forward-only checkpoints."""

    def __init__(self, table: str, *, client: DynamoDBClient) -> None:
        super().__init__(client)
        self._table = table

    def _key(self, log_id: str, seq: Decimal) -> dict[str, Any]:
        return to_attributes({"log_id": log_id, "seq": seq})

    def claim(self, log_id: str, seq: Decimal, token: str, now: float, lease_seconds: float) -> PendingSnapshot | None:
        """Set Active to `token` and bump Increment, if nobody holds a live lease; None if lost.

        `token` is unique to this handling (the invocation's request id): a claim whose condition
        fails against an item already holding it is this claim's own, applied by an attempt whose
        response was lost and retried by the SDK."""
        try:
            response = self.client.update_item(
                TableName=self._table,
                Key=self._key(log_id, seq),
                UpdateExpression=(
                    "SET #active = :token, #modified = :now, #created = if_not_exists(#created, :now), "
                    "#retries = if_not_exists(#retries, :zero), #state = if_not_exists(#state, :initial) "
                    "ADD #increment :one REMOVE #due"
                ),
                ConditionExpression="attribute_not_exists(#active) OR #modified < :expired",
                ExpressionAttributeNames=SEED_NAMES,
                ExpressionAttributeValues=to_attributes(
                    {
                        ":token": token,
                        ":now": timestamp(now),
                        ":zero": 0,
                        ":one": 1,
                        ":initial": state_to_item(BuildState()),
                        ":expired": timestamp(now - lease_seconds),
                    }
                ),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as err:
            if not is_conditional_check_failed(err):
                raise
            held = item_when_condition_failed(err)
            return pending_from_item(held) if held is not None and held.get("Active") == token else None
        return pending_from_item(from_attributes(response["Attributes"]))

    def _held_update(self, pending: PendingSnapshot, expression: str, values: dict[str, Any], *, releases: bool = False) -> bool:
        """An update that only the current holder (same Increment and token) can make.

        A checkpoint sent twice passes its condition twice (the holder still holds the claim).
        A release (defer, hand-off) sent twice fails it against itself: a row with our Increment
        and no Active was released by the holder of that Increment, and that is this worker,
        since every other update changes Increment or needs Active."""
        used = {name: attribute for name, attribute in SEED_NAMES.items() if name in expression} | {
            "#increment": "Increment",
            "#active": "Active",
        }
        try:
            self.client.update_item(
                TableName=self._table,
                Key=self._key(pending.log_id, pending.seq),
                UpdateExpression=expression,
                ConditionExpression="#increment = :increment AND #active = :token",
                ExpressionAttributeNames=used,
                ExpressionAttributeValues=to_attributes({**values, ":increment": pending.increment, ":token": pending.active}),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as err:
            if not is_conditional_check_failed(err):
                raise
            found = item_when_condition_failed(err)
            return releases and found is not None and int(found["Increment"]) == pending.increment and "Active" not in found
        return True

    def checkpoint(self, pending: PendingSnapshot, state: BuildState, now: float) -> bool:
        return self._held_update(pending, "SET #state = :state, #modified = :now", {":state": state_to_item(state), ":now": timestamp(now)})

    def defer(self, pending: PendingSnapshot, now: float, due: float) -> bool:
        """Release the claim and count a retry; the message comes back at `due`."""
        return self._held_update(
            pending,
            "SET #modified = :now, #due = :due, #retries = #retries + :one REMOVE #active",
            {":now": timestamp(now), ":due": timestamp(due), ":one": 1},
            releases=True,
        )

    def release(self, pending: PendingSnapshot, now: float) -> bool:
        """Release the claim (hand-off); the message comes back at once."""
        return self._held_update(pending, "SET #modified = :now, #due = :now REMOVE #active", {":now": timestamp(now)}, releases=True)

    def delete(self, log_id: str, seq: Decimal, increment: int | None = None) -> bool:
        request: dict[str, Any] = {"TableName": self._table, "Key": self._key(log_id, seq)}
        if increment is not None:
            request["ConditionExpression"] = "attribute_not_exists(seq) OR #increment = :increment"
            request["ExpressionAttributeNames"] = {"#increment": "Increment"}
            request["ExpressionAttributeValues"] = to_attributes({":increment": increment})
        try:
            self.client.delete_item(**request)
        except ClientError as err:
            if is_conditional_check_failed(err):
                return False
            raise
        return True

    def get(self, log_id: str, seq: Decimal) -> PendingSnapshot | None:
        response = self.client.get_item(TableName=self._table, Key=self._key(log_id, seq), ConsistentRead=True)
        item = response.get("Item")
        return pending_from_item(from_attributes(item)) if item else None

    def scan(self, *, consistent_read: bool = True, page_size: int | None = None) -> Iterator[PendingSnapshot]:
        """Every pending snapshot of every log, page by page (operator tools, the stuck check).

        The table holds one item per snapshot being built, so a scan is small. The scheduled
        check reads eventually consistent (half the read units): a row a second out of date
        does not change a verdict measured in minutes. `page_size` caps items per request."""
        request: dict[str, Any] = {"TableName": self._table, "ConsistentRead": consistent_read}
        if page_size is not None:
            request["PaginationConfig"] = {"PageSize": page_size}
        for page in self.client.get_paginator("scan").paginate(**request):
            for raw in page.get("Items", []):
                yield pending_from_item(from_attributes(raw))
