"""The snapshot worker: claim, order, build with checkpoints, hand off, finish.

Per message (one Snapshot entry):
1. The log is the source of truth. A Snapshot entry that already has a root is built: only
   the tail of "finish" is (re)done, and the message is deleted.
2. Claim: a conditional write on the pending item sets Active and bumps Increment. It fails
   while another worker holds a live lease: this message is a duplicate and is deleted. A lease
   whose Modified is older than the lease timeout is taken over (the lease is longer than the
   function timeout, so the old holder is dead).
3. Order: snapshot k is built from snapshot k-1. If k-1 has no root yet, this message is out of
   order: release the claim, count Retries, and hide the message for a full-jitter backoff.
4. Build: merge the previous snapshot's chunks with the segment's events (both in cell order)
   into chunks of bounded size with deterministic keys; after each chunk, checkpoint State on
   the condition that Increment and Active are still ours. A worker that finds it moved bails.
5. Hand-off: when the remaining time drops under the margin, release the claim and make the
   message visible at once; the next delivery resumes from the checkpoint.
6. Finish: write the root object, the root id to the Snapshot entry, move the last-snapshot
   pointer forward, delete objects of failed attempts, delete the pending item; the message is
   deleted last (by the event source mapping, when the handler returns).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from runtime.event_log.errors import PoisonMessage
from runtime.event_log.logic import chain_digest, chunk_key, decode_chunk, encode_cell, merge_segment, root_key, snapshot_prefix
from runtime.event_log.models import BuildState, CellValue, PendingSnapshot, SideEffect, SideEffectMessage, SnapshotMarker, SnapshotRoot
from runtime.event_log.objects import MessageQueue, ObjectStore
from runtime.event_log.parsing import side_effect_request_id
from runtime.event_log.service import iso_utc
from runtime.event_log.store import LogStore, PendingStore
from runtime.shared.consistency import full_jitter_backoff
from runtime.shared.observability import logger


class Outcome(StrEnum):
    BUILT = "built"
    ALREADY_BUILT = "already_built"
    DUPLICATE = "duplicate"  # another worker holds a live claim
    DEFERRED = "deferred"  # the previous snapshot is not built yet
    HANDED_OFF = "handed_off"  # out of time; resumes from the checkpoint
    SUPERSEDED = "superseded"  # another worker took the claim over mid-build

    @property
    def keeps_message(self) -> bool:
        """The message must come back (reported as a batch item failure, visibility set by us)."""
        return self in {Outcome.DEFERRED, Outcome.HANDED_OFF}


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    queue_url: str
    chunk_bytes: int = 256 * 1024
    lease_seconds: float = 600
    handoff_margin_ms: int = 30_000
    backoff_base_seconds: float = 2
    backoff_cap_seconds: float = 12 * 3600
    redrive_after_retries: int = 5  # about a minute of waiting with the default backoff


@dataclass
class BuildProgress:
    """Counters of one handling, for metrics, the benchmark and the fault tests."""

    chunks_written: int = 0
    events_read: int = 0
    # Per build finished in this handling: completion time minus the pending row's Created
    # (its first claim), so the whole build across deferrals, hand-offs and takeovers.
    build_seconds: list[float] = field(default_factory=list)


class SnapshotWorker:
    def __init__(
        self,
        log: LogStore,
        pending: PendingStore,
        objects: ObjectStore,
        queue: MessageQueue,
        options: WorkerOptions,
        *,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self._log = log
        self._pending = pending
        self._objects = objects
        self._queue = queue
        self._options = options
        self._clock = clock
        self._rng = rng or random.Random()
        self.progress = BuildProgress()

    def handle(self, message: SideEffectMessage, receipt_handle: str, remaining_ms: Callable[[], int], token: str) -> Outcome:
        if message.effect != SideEffect.BUILD_SNAPSHOT:
            raise PoisonMessage(f"the snapshot worker cannot {message.effect.value}")
        marker = self._log.read_marker(message.log_id, message.seq)
        if marker is None:
            if not self._log.read_head(message.log_id).exists:
                raise PoisonMessage(f"log {message.log_id!r} does not exist")
            raise PoisonMessage(f"log {message.log_id!r} has no Snapshot entry at {message.seq}")
        if marker.root:
            self._finish(marker, json.loads(self._objects.get(marker.root)), marker.root)
            return Outcome.ALREADY_BUILT
        pending = self._pending.claim(marker.log_id, marker.seq, token, self._clock(), self._options.lease_seconds)
        if pending is None:
            return Outcome.DUPLICATE
        previous_root: dict[str, Any] | None = None
        if marker.previous_seq is not None:
            previous = self._log.read_marker(marker.log_id, marker.previous_seq)
            if previous is None:
                raise RuntimeError(f"log {marker.log_id} lost Snapshot entry {marker.number - 1}; the log is damaged")
            if not previous.root:
                self._redrive_if_stuck(previous, pending)
                return self._defer(pending, marker, receipt_handle)
            previous_root = json.loads(self._objects.get(previous.root))
        return self._build(marker, pending, previous_root, receipt_handle, remaining_ms)

    # --- build ----------------------------------------------------------------------------------

    def _previous_cells(self, previous_root: dict[str, Any] | None, state: BuildState) -> Iterator[tuple[int, CellValue]]:
        """The previous snapshot's cells after the cursor, one chunk in memory at a time."""
        if previous_root is None:
            return
        keys: list[str] = previous_root["chunks"]
        for index in range(state.previous_chunk, len(keys)):
            for cell in decode_chunk(self._objects.get(keys[index])):
                if cell.order > state.cursor:
                    yield index, cell

    def _build(
        self,
        marker: SnapshotMarker,
        pending: PendingSnapshot,
        previous_root: dict[str, Any] | None,
        receipt_handle: str,
        remaining_ms: Callable[[], int],
    ) -> Outcome:
        state = pending.state
        events = self._counted(self._log.segment_events(marker.log_id, marker.number, state.cursor))
        buffer = bytearray()
        cursor, consumed, cells, previous_chunk = state.cursor, state.consumed, state.cells, state.previous_chunk
        for merged in merge_segment(self._previous_cells(previous_root, state), events):
            cursor = merged.order
            consumed += merged.events
            if merged.previous_chunk is not None:
                previous_chunk = merged.previous_chunk
            if merged.value is not None:
                buffer += encode_cell(merged.value)
                cells += 1
            if len(buffer) >= self._options.chunk_bytes:
                state = self._write_chunk(marker, state, bytes(buffer), cursor, previous_chunk, consumed, cells)
                buffer.clear()
                if not self._pending.checkpoint(pending, state, self._clock()):
                    return Outcome.SUPERSEDED
                pending = replace(pending, state=state)
                if remaining_ms() < self._options.handoff_margin_ms:
                    return self._hand_off(pending, marker, receipt_handle)
        if buffer or consumed != state.consumed:
            state = (
                self._write_chunk(marker, state, bytes(buffer), cursor, previous_chunk, consumed, cells)
                if buffer
                else replace(state, cursor=cursor, consumed=consumed, cells=cells, previous_chunk=previous_chunk)
            )
            if not self._pending.checkpoint(pending, state, self._clock()):
                return Outcome.SUPERSEDED
            pending = replace(pending, state=state)
        if state.consumed != marker.expected_events:
            # The segment index is eventually consistent: it did not list every event yet.
            logger.warning(
                "segment index incomplete; restarting the build later",
                extra={"log_id": marker.log_id, "snapshot": marker.number, "read": state.consumed, "expected": marker.expected_events},
            )
            if not self._pending.checkpoint(pending, BuildState(), self._clock()):
                return Outcome.SUPERSEDED
            return self._defer(replace(pending, state=BuildState()), marker, receipt_handle)
        root = SnapshotRoot(
            marker.log_id,
            marker.number,
            marker.cut,
            tuple(chunk_key(marker.log_id, marker.number, index) for index in range(state.chunks)),
            state.cells,
            state.digest,
        )
        document = root.to_document()
        key = root_key(marker.log_id, marker.number)
        self._objects.put(key, json.dumps(document, indent=1).encode("utf-8"))
        self._log.set_root(marker, key, iso_utc(self._clock()))
        self._finish(marker, document, key, pending.increment)
        seconds = max(0.0, self._clock() - pending.created)
        self.progress.build_seconds.append(seconds)
        logger.info(
            "snapshot built",
            extra={
                "log_id": marker.log_id,
                "snapshot": marker.number,
                "chunks": state.chunks,
                "cells": state.cells,
                "build_seconds": seconds,
            },
        )
        return Outcome.BUILT

    def _counted(self, events: Iterator[Any]) -> Iterator[Any]:
        for event in events:
            self.progress.events_read += 1
            yield event

    def _write_chunk(
        self, marker: SnapshotMarker, state: BuildState, body: bytes, cursor: str, previous_chunk: int, consumed: int, cells: int
    ) -> BuildState:
        self._objects.put(chunk_key(marker.log_id, marker.number, state.chunks), body)
        self.progress.chunks_written += 1
        return BuildState(
            chunks=state.chunks + 1,
            cursor=cursor,
            previous_chunk=previous_chunk,
            consumed=consumed,
            cells=cells,
            digest=chain_digest(state.digest, body),
        )

    # --- finish, defer, hand off ----------------------------------------------------------------

    def _finish(self, marker: SnapshotMarker, root: dict[str, Any], key: str, increment: int | None = None) -> None:
        """Idempotent tail of a build whose root is written: pointer, stray objects, pending item."""
        self._log.advance_pointer(marker, key)
        keep = {*root["chunks"], key}
        for stray in [k for k in self._objects.keys(snapshot_prefix(marker.log_id, marker.number)) if k not in keep]:
            # Written by an attempt that started over (its segment read was incomplete).
            self._objects.delete(stray)
        self._pending.delete(marker.log_id, marker.seq, increment)

    def _defer(self, pending: PendingSnapshot, marker: SnapshotMarker, receipt_handle: str) -> Outcome:
        delay = full_jitter_backoff(
            pending.retries, base_seconds=self._options.backoff_base_seconds, cap_seconds=self._options.backoff_cap_seconds, rng=self._rng
        )
        now = self._clock()
        if not self._pending.defer(pending, now, now + delay):
            return Outcome.SUPERSEDED
        self._make_visible(marker, receipt_handle, delay)
        logger.info(
            "snapshot deferred", extra={"log_id": marker.log_id, "snapshot": marker.number, "retries": pending.retries + 1, "delay": delay}
        )
        return Outcome.DEFERRED

    def _hand_off(self, pending: PendingSnapshot, marker: SnapshotMarker, receipt_handle: str) -> Outcome:
        if not self._pending.release(pending, self._clock()):
            return Outcome.SUPERSEDED
        self._make_visible(marker, receipt_handle, 0)
        logger.info("snapshot handed off", extra={"log_id": marker.log_id, "snapshot": marker.number, "chunks": pending.state.chunks})
        return Outcome.HANDED_OFF

    def _make_visible(self, marker: SnapshotMarker, receipt_handle: str, delay: int) -> None:
        if not self._queue.change_visibility(self._options.queue_url, receipt_handle, delay):
            # The message is gone (deleted through a duplicate's receipt): put the work back.
            self._enqueue(marker, min(delay, 900))

    def _enqueue(self, marker: SnapshotMarker, delay_seconds: int = 0) -> None:
        message = SideEffectMessage(
            SideEffect.BUILD_SNAPSHOT,
            marker.log_id,
            marker.seq,
            side_effect_request_id(SideEffect.BUILD_SNAPSHOT, marker.log_id, marker.seq),
        )
        failed = self._queue.send(self._options.queue_url, [message], delay_seconds)
        if failed:
            raise RuntimeError(f"could not enqueue snapshot {marker.number} of log {marker.log_id}")

    def _redrive_if_stuck(self, previous: SnapshotMarker, waiting: PendingSnapshot) -> None:
        """Re-enqueue the previous snapshot if nothing will ever build it: its holder died with no
        message left, or it has no pending item while this one keeps waiting for it."""
        holder = self._pending.get(previous.log_id, previous.seq)
        dead = holder is not None and holder.active is not None and holder.modified < self._clock() - self._options.lease_seconds
        missing = holder is None and waiting.retries >= self._options.redrive_after_retries
        if dead or missing:
            logger.warning(
                "re-enqueueing a stuck snapshot", extra={"log_id": previous.log_id, "snapshot": previous.number, "dead_holder": dead}
            )
            self._enqueue(previous)
