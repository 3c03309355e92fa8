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

Overlapped I/O. Reads never wait for writes they do not depend on, and writes stay one after
another (each guard below orders them; a crash or a fault test meets them in one order):
- the claim runs alongside the reads of snapshot k-1's entry and root (the root's key is
  known, so it is read without waiting for the entry that names it);
- the segment index and the previous snapshot's chunks are read ahead (`runtime.shared.concurrency.ReadAhead`): the
  first page and chunk at once, each next one while the one before is merged;
- chunk n+1 is merged (and read) while chunk n is written and checkpointed. Chunk n+1's
  PutObject starts only after chunk n's checkpoint succeeded, so at most one written chunk is
  ever not checkpointed (at most one is redone after a crash), and a checkpoint only names
  chunks whose PutObject completed;
- the listing of the snapshot's prefix (for objects of failed attempts) runs alongside the last
  checkpoint, after the last chunk's PutObject; strays are deleted in one DeleteObjects.
Every read ahead finishes before the handling returns, and at most two chunks, two index pages
and two chunks of the previous snapshot are held at once.
"""

from __future__ import annotations

import io
import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeVar, cast

from runtime.event_log.contract import DEFAULT_LEASE_SECONDS
from runtime.event_log.errors import ObjectMissing, PoisonMessage
from runtime.event_log.logic import (
    MergedCell,
    chain_digest,
    chunk_key,
    decode_chunk,
    encode_cell,
    iso_utc,
    merge_segment,
    root_key,
    snapshot_prefix,
)
from runtime.event_log.messages import SideEffect, SideEffectMessage, side_effect_request_id
from runtime.event_log.models import BuildState, CellValue, PendingSnapshot, SnapshotMarker, SnapshotRoot
from runtime.event_log.objects import MessageQueue, ObjectStore
from runtime.event_log.store import LogStore, PendingStore
from runtime.shared import snapstart
from runtime.shared.concurrency import ReadAhead, map_bounded
from runtime.shared.consistency import full_jitter_backoff
from runtime.shared.observability import logger

First = TypeVar("First")
Second = TypeVar("Second")


def both(first: Callable[[], First], second: Callable[[], Second]) -> tuple[First, Second]:
    """first() and second() at the same time. Both have finished when it returns or raises (the
    first's error before the second's), so nothing started here outlives the call."""
    results = map_bounded(lambda task: task(), [first, second], 2)
    return cast("First", results[0]), cast("Second", results[1])


def close_reads(reads: Iterator[Any]) -> None:
    """Stop a read ahead (waiting for its read in flight); iterators that read nothing ahead have nothing to stop."""
    close = getattr(reads, "close", None)
    if close is not None:
        close()


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
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    handoff_margin_ms: int = 30_000
    backoff_base_seconds: float = 2
    backoff_cap_seconds: float = 12 * 3600
    redrive_after_retries: int = 5  # about a minute of waiting with the default backoff


@dataclass(frozen=True, slots=True)
class ChunkFill:
    """The next chunk's body and the checkpoint's counters after it."""

    body: bytes
    cursor: str
    consumed: int
    cells: int
    previous_chunk: int
    full: bool  # it reached the chunk size; False: the merge ended (the body may be empty)


class ChunkFiller:
    """Cuts the merged cells into chunk bodies of at least `chunk_bytes` (the last may be shorter),
    counting what the checkpoint records. One chunk's body in memory at a time: it is written
    into a BytesIO, whose bytes are handed over without a copy."""

    def __init__(self, merged: Iterator[MergedCell], state: BuildState, chunk_bytes: int) -> None:
        self._merged = merged
        self._chunk_bytes = chunk_bytes
        self._cursor, self._consumed, self._cells, self._previous_chunk = state.cursor, state.consumed, state.cells, state.previous_chunk

    def fill(self) -> ChunkFill:
        buffer = io.BytesIO()
        for merged in self._merged:
            self._cursor = merged.order
            self._consumed += merged.events
            if merged.previous_chunk is not None:
                self._previous_chunk = merged.previous_chunk
            if merged.value is not None:
                buffer.write(encode_cell(merged.value))
                self._cells += 1
            if buffer.tell() >= self._chunk_bytes:
                return self._made(buffer, full=True)
        return self._made(buffer, full=False)

    def _made(self, buffer: io.BytesIO, *, full: bool) -> ChunkFill:
        return ChunkFill(buffer.getvalue(), self._cursor, self._consumed, self._cells, self._previous_chunk, full)


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
        self._rng = rng or snapstart.new_random()  # reseeded after a SnapStart restore
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
            built = marker.root
            document, present = both(lambda: json.loads(self._objects.get(built)), lambda: self._present(marker))
            self._finish(marker, document, built, present)
            return Outcome.ALREADY_BUILT

        def claim() -> PendingSnapshot | None:
            return self._pending.claim(marker.log_id, marker.seq, token, self._clock(), self._options.lease_seconds)

        previous: SnapshotMarker | None = None
        previous_root: dict[str, Any] | None = None
        if marker.previous_seq is None:
            pending = claim()
        else:
            # Snapshot k-1's entry and root are read while the claim is made (wasted only for a duplicate).
            pending, (previous, previous_root) = both(claim, lambda: self._read_previous(marker))
        if pending is None:
            return Outcome.DUPLICATE
        if marker.previous_seq is not None:
            if previous is None:
                raise RuntimeError(f"log {marker.log_id} lost Snapshot entry {marker.number - 1}; the log is damaged")
            if not previous.root:
                self._redrive_if_stuck(previous, pending)
                return self._defer(pending, marker, receipt_handle)
        return self._build(marker, pending, previous_root, receipt_handle, remaining_ms)

    def _read_previous(self, marker: SnapshotMarker) -> tuple[SnapshotMarker | None, dict[str, Any] | None]:
        """Snapshot k-1's entry, and its root document if the entry names one. The root's key is
        derived (`root_key`), so it is read alongside the entry; until k-1 is built it may be
        missing, or written but not yet named by the entry: then it is not used."""
        seq = marker.previous_seq
        if seq is None:
            return None, None
        expected = root_key(marker.log_id, marker.number - 1)
        previous, document = both(lambda: self._log.read_marker(marker.log_id, seq), lambda: self._document_if_written(expected))
        if previous is None or not previous.root:
            return previous, None
        if previous.root != expected or document is None:  # named otherwise, or written after the read
            document = json.loads(self._objects.get(previous.root))
        return previous, document

    def _document_if_written(self, key: str) -> dict[str, Any] | None:
        try:
            return cast("dict[str, Any]", json.loads(self._objects.get(key)))
        except ObjectMissing:
            return None

    def _present(self, marker: SnapshotMarker) -> list[str]:
        """Every object under the snapshot's prefix (to find the ones no root names)."""
        return list(self._objects.keys(snapshot_prefix(marker.log_id, marker.number)))

    # --- build ----------------------------------------------------------------------------------

    def _previous_cells(self, previous_root: dict[str, Any] | None, state: BuildState) -> Iterator[tuple[int, CellValue]]:
        """The previous snapshot's cells after the cursor, with the index of their chunk; the next
        chunk is read while one is merged (two in memory at most)."""
        keys: list[str] = previous_root["chunks"] if previous_root is not None else []
        if state.previous_chunk >= len(keys):
            return iter(())

        def chunk(index: int) -> tuple[list[tuple[int, CellValue]], int | None]:
            cells = [(index, cell) for cell in decode_chunk(self._objects.get(keys[index])) if cell.order > state.cursor]
            return cells, (index + 1 if index + 1 < len(keys) else None)

        return ReadAhead(chunk, state.previous_chunk, name="previous-read")

    def _build(
        self,
        marker: SnapshotMarker,
        pending: PendingSnapshot,
        previous_root: dict[str, Any] | None,
        receipt_handle: str,
        remaining_ms: Callable[[], int],
    ) -> Outcome:
        state = pending.state
        with ExitStack() as reads:
            # Both streams start reading at once: the segment's first page, the previous snapshot's chunk at the cursor.
            events = self._log.segment_events(marker.log_id, marker.number, state.cursor)
            reads.callback(close_reads, events)
            previous = self._previous_cells(previous_root, state)
            reads.callback(close_reads, previous)
            filler = ChunkFiller(merge_segment(previous, self._counted(events)), state, self._options.chunk_bytes)
            fill = filler.fill()
            while fill.full:
                # Chunk n is written and checkpointed while chunk n+1 is merged; n+1 is written
                # only once n's checkpoint holds, so at most one written chunk is not checkpointed.
                # Only the write holds chunk n's body, until its PutObject is done.
                write = self._write_and_checkpoint(marker, pending, state, fill)
                del fill
                written, fill = both(write, filler.fill)
                del write
                if written is None:
                    return Outcome.SUPERSEDED
                state = written
                pending = replace(pending, state=state)
                if remaining_ms() < self._options.handoff_margin_ms:
                    return self._hand_off(pending, marker, receipt_handle)
        # The merge is over (every read finished). The last chunk, or the counters of a tail that
        # only cleared cells; if the segment was read whole, the prefix is listed meanwhile.
        complete = fill.consumed == marker.expected_events
        present: list[str] | None = None
        if fill.body or fill.consumed != state.consumed:
            last = (
                self._put_chunk(marker, state, fill)
                if fill.body
                else replace(state, cursor=fill.cursor, consumed=fill.consumed, cells=fill.cells, previous_chunk=fill.previous_chunk)
            )
            held, present = both(
                lambda: self._pending.checkpoint(pending, last, self._clock()),
                lambda: self._present(marker) if complete else None,
            )
            if not held:
                return Outcome.SUPERSEDED
            state = last
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
        self._finish(marker, document, key, present if present is not None else self._present(marker), pending.increment)
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

    def _put_chunk(self, marker: SnapshotMarker, state: BuildState, fill: ChunkFill) -> BuildState:
        """Write the chunk after `state`'s; the state that names it (to checkpoint once this returned)."""
        self._objects.put(chunk_key(marker.log_id, marker.number, state.chunks), fill.body)
        self.progress.chunks_written += 1
        return BuildState(
            chunks=state.chunks + 1,
            cursor=fill.cursor,
            previous_chunk=fill.previous_chunk,
            consumed=fill.consumed,
            cells=fill.cells,
            digest=chain_digest(state.digest, fill.body),
        )

    def _write_and_checkpoint(
        self, marker: SnapshotMarker, pending: PendingSnapshot, state: BuildState, fill: ChunkFill
    ) -> Callable[[], BuildState | None]:
        """The chunk's PutObject, then (once it completed) the checkpoint naming it; None when the
        checkpoint found the claim moved (another worker holds it). The call lets go of the
        chunk's body as soon as it is written."""
        held = [fill]

        def write() -> BuildState | None:
            written = self._put_chunk(marker, state, held.pop())
            return written if self._pending.checkpoint(pending, written, self._clock()) else None

        return write

    # --- finish, defer, hand off ----------------------------------------------------------------

    def _finish(self, marker: SnapshotMarker, root: dict[str, Any], key: str, present: list[str], increment: int | None = None) -> None:
        """Idempotent tail of a build whose root is written: pointer, stray objects, pending item.

        `present`: the snapshot's prefix as listed after its last chunk was written."""
        self._log.advance_pointer(marker, key)
        keep = {*root["chunks"], key}
        strays = [k for k in present if k not in keep]
        if strays:
            # Written by an attempt that started over (its segment read was incomplete).
            self._objects.delete_many(strays)
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
