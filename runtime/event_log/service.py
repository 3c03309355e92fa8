"""The log's API operations: idempotent append, large payloads, reading the latest snapshot.

Append is one transaction: put the entry at the client's position (which must be free) and
advance the head. Its key is deterministic, so a retried request meets its own entry: the
entry's ConditionalCheckFailed, read from CancellationReasons, returns the original result.
After every append the snapshot decision runs; a crash before it only delays the Snapshot
entry until the next append.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from runtime.event_log.entries import MAX_POSITION, EntryKind
from runtime.event_log.errors import (
    AppendConflict,
    EntryExists,
    HeadMoved,
    ObjectMissing,
    PayloadAlreadyUploaded,
    PayloadNotUploaded,
    RequestMismatch,
    TransientConflict,
)
from runtime.event_log.logic import iso_utc, next_marker, snapshot_due
from runtime.event_log.models import AppendRequest, AppendResult, CellEvent, Head, LogEntry, PayloadRef
from runtime.event_log.objects import ObjectStore, PayloadObjects
from runtime.event_log.store import LogStore
from runtime.shared.consistency import deterministic_id
from runtime.shared.observability import logger
from runtime.shared.responses import RESPONSE_BUDGET_BYTES, result_bytes, take_fitting

# A read's answer gives the chunk URLs of its snapshot at most this much of its budget (about 700
# presigned URLs with a session token), and the entries the rest: a snapshot of any size is read in
# pages of its chunk URLs (`chunk`), as the log is in pages of its entries (`after`).
CHUNK_URLS_BUDGET_BYTES = 1024 * 1024
WIDEST_SEQ = f"{MAX_POSITION}.5"  # the longest next_after a page can give


@dataclass(frozen=True, slots=True)
class LogOptions:
    snapshot_every: int = 1000
    append_attempts: int = 4
    payload_max_bytes: int = 100 * 1024 * 1024
    pending_tag: str = "onceflow-pending=true"
    url_expiry_seconds: int = 900


def payload_key(log_id: str, request_id: str) -> str:
    """Where the large payload of a request lives: derived, so a client cannot name another object."""
    return f"payloads/{log_id}/{deterministic_id('payload', log_id, request_id)}"


class EventLogService:
    def __init__(
        self,
        log: LogStore,
        objects: PayloadObjects,
        options: LogOptions = LogOptions(),
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._log = log
        self._objects = objects
        self._options = options
        self._clock = clock
        self._sleep = sleep

    # --- append ---------------------------------------------------------------------------------

    def append(self, request: AppendRequest) -> AppendResult:
        result, head_after = self._append(request)
        self.decide_snapshot(head_after or self._log.read_head(request.log_id))
        return result

    def _append(self, request: AppendRequest) -> tuple[AppendResult, Head | None]:
        """The result, and the head as this append left it (None for a repeated request)."""
        for attempt in range(self._options.append_attempts):
            head = self._log.read_head(request.log_id)
            if head.exists and request.position < head.next_position:
                return self._already_there(request, head), None
            if request.position != head.next_position:
                raise AppendConflict(
                    f"position {request.position} is ahead of the log; the next position is {head.next_position}", head.next_position
                )
            entry = LogEntry(request.log_id, request.position, request.request_id, request.event, head.open_segment)
            try:
                self._log.append(entry, head, iso_utc(self._clock()))
            except EntryExists:
                return self._already_there(request, self._log.read_head(request.log_id)), None
            except (HeadMoved, TransientConflict):
                # A concurrent append or Snapshot entry moved the head between our read and write.
                self._sleep(0.01 * 2**attempt)
                continue
            after = replace(head, next_position=request.position + 1, exists=True)
            return AppendResult(request.log_id, request.position, request.request_id, duplicate=False), after
        head = self._log.read_head(request.log_id)
        raise AppendConflict(f"the log kept moving; retry at position {head.next_position}", head.next_position)

    def _already_there(self, request: AppendRequest, head: Head) -> AppendResult:
        existing = self._log.read_entry(request.log_id, request.position)
        if existing is None or existing.request_id != request.request_id:
            raise AppendConflict(
                f"position {request.position} holds another request; the next position is {head.next_position}", head.next_position
            )
        if existing.event != request.event:
            raise RequestMismatch(f"request_id {request.request_id} was used for a different event at position {request.position}")
        return AppendResult(request.log_id, request.position, request.request_id, duplicate=True)

    def decide_snapshot(self, head: Head) -> bool:
        """Append the Snapshot entry when `snapshot_every` events passed since the last one.

        One attempt, against the head as this request saw it: if another append moved the head
        meanwhile, the Snapshot entry is not written now, and that append's decision catches up.
        """
        if not snapshot_due(head, self._options.snapshot_every):
            return False
        marker = next_marker(head)
        appended = self._log.append_marker(marker, head, iso_utc(self._clock()))
        if appended:
            logger.info("snapshot entry appended", extra={"log_id": head.log_id, "snapshot": marker.number, "cut": marker.cut})
        return appended

    # --- large payloads -------------------------------------------------------------------------

    def create_upload(self, log_id: str, request_id: str) -> dict[str, Any]:
        """A presigned PUT for the request's payload key, unless that payload is already uploaded.

        The URL only creates the object (If-None-Match: *), so a URL handed out earlier cannot
        replace it either, not even within its expiry."""
        key = payload_key(log_id, request_id)
        try:
            size = self._objects.size(key)
        except ObjectMissing:
            return {
                "object_key": key,
                "upload_url": self._objects.upload_url(key, self._options.pending_tag, self._options.url_expiry_seconds),
                "method": "PUT",
                "headers": {"x-amz-tagging": self._options.pending_tag, "If-None-Match": "*"},
                "expires_in": self._options.url_expiry_seconds,
            }
        raise PayloadAlreadyUploaded(
            f"the payload of request_id {request_id} is already uploaded ({size} bytes) and never changes:"
            f" complete it with POST /logs/{log_id}/payloads/complete, or upload other bytes under a new request_id"
        )

    def complete_upload(self, log_id: str, request_id: str, position: int, cell: str) -> AppendResult:
        """The linchpin write: the log entry that makes the uploaded object part of the log."""
        key = payload_key(log_id, request_id)
        try:
            size = self._objects.size(key)
        except ObjectMissing as err:
            raise PayloadNotUploaded(f"upload the payload to the URL from POST /logs/{log_id}/payloads first (or it expired)") from err
        if size > self._options.payload_max_bytes:
            raise PayloadNotUploaded(f"the payload is {size} bytes; the limit is {self._options.payload_max_bytes}")
        event = CellEvent(EntryKind.LARGE_PAYLOAD, cell, payload=PayloadRef(key, size))
        return self.append(AppendRequest(log_id, request_id, position, event))

    # --- reading --------------------------------------------------------------------------------

    def read_latest(
        self,
        log_id: str,
        snapshots: ObjectStore,
        limit: int,
        after: Decimal | None,
        *,
        first_chunk: int = 0,
        budget: int = RESPONSE_BUDGET_BYTES,
    ) -> dict[str, Any] | None:
        """The latest built snapshot (with download URLs of its chunks from `first_chunk` on) and a page
        of the entries after it (after `after`), the whole answer within `budget` bytes as Lambda
        serializes it (runtime/shared/responses.py).

        The chunk URLs take at most CHUNK_URLS_BUDGET_BYTES, then the entries the rest; each list is
        cut where the next element would not fit, and says where to go on (`next_chunk`, `next_after`).
        Each list keeps at least one element, so every page moves on: the widest entry DynamoDB can
        hold (a 400 KB item, 7 bytes per byte at most once escaped twice) and a full list of URLs fit
        the budget together (tests/unit/event_log/test_event_log_read_budget.py)."""
        head = self._log.read_head(log_id)
        if not head.exists:
            return None
        snapshot: dict[str, Any] | None = None
        start = Decimal(0)
        if head.built and head.built_root and head.built_seq is not None:
            root = json.loads(snapshots.get(head.built_root))
            start = head.built_seq
            snapshot = self._snapshot_part(head.built, head.built_root, root, first_chunk)
        items, next_after = self._log.entries_after(log_id, max(start, after or start), limit)
        page: dict[str, Any] = {
            "log_id": log_id,
            "next_position": head.next_position,
            "snapshot": snapshot,
            "entries": [],
            "next_after": WIDEST_SEQ,  # measured at its widest: it is set once the entries are cut
        }
        entries = take_fitting((public_entry(item) for item in items), budget - result_bytes(200, page))
        if len(entries) < len(items):
            next_after = Decimal(entries[-1]["seq"])
        page["entries"] = entries
        page["next_after"] = str(next_after) if next_after is not None else None
        return page

    def _snapshot_part(self, number: int, root_key: str, root: dict[str, Any], first_chunk: int) -> dict[str, Any]:
        """What a read says of the snapshot: its root, and the download URLs of as many of its chunks
        from `first_chunk` on as CHUNK_URLS_BUDGET_BYTES holds (none past its last chunk)."""
        expiry = self._options.url_expiry_seconds
        keys: list[str] = root["chunks"]
        wanted = (self._objects.download_url(key, expiry) for key in keys[first_chunk:])
        urls = take_fitting(wanted, CHUNK_URLS_BUDGET_BYTES)
        after_these = first_chunk + len(urls)
        return {
            "number": number,
            "cut": root["cut"],
            "cells": root["cells"],
            "digest": root["digest"],
            "root_url": self._objects.download_url(root_key, expiry),
            "chunks": len(keys),
            "first_chunk": first_chunk,
            "chunk_urls": urls,
            "next_chunk": after_these if after_these < len(keys) else None,
        }


def public_entry(item: dict[str, Any]) -> dict[str, Any]:
    seq = Decimal(item["seq"])
    entry: dict[str, Any] = {"seq": str(seq), "kind": item["kind"]}
    if item["kind"] == EntryKind.SNAPSHOT.value:
        entry.update(snapshot=int(item["snapshot"]), cut=int(item["cut"]), built=bool(item.get("root")))
        return entry
    entry.update(position=int(seq), cell=item["cell"], request_id=item["request_id"])
    if "value" in item:
        entry["value"] = item["value"]
    if "payload_key" in item:
        entry.update(payload_key=item["payload_key"], payload_bytes=int(item["payload_bytes"]))
    return entry
