"""`make bench`, snapshot section: memory, reads and redone work of the snapshot worker.

1. Peak memory of building one snapshot over 10,000 and over 1,000,000 events (every event a
   different cell, so the sheet grows with the log). The worker runs against in-memory ports
   whose segment index yields generated events one at a time and whose bucket keeps only each
   chunk's hash: what is measured is the worker's own memory, not a store's. Baseline in the
   same run: a from-scratch replay into a dict, the obvious way to build a snapshot.
2. Log entries read per snapshot, on the embedded cloud: against the events since the previous
   snapshot (the target) and against the whole log (what a replay reads).
3. Work redone after a crash, on the embedded cloud: the worker dies right after each chunk it
   writes; the successor resumes from the checkpoint. Baseline: rebuilding from scratch.
"""

from __future__ import annotations

import gc
import hashlib
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from devtools.event_log_replay import replay
from runtime.event_log import contract as event_log_contract
from runtime.event_log.cells import cell_name, order_key
from runtime.event_log.entries import EntryKind, marker_seq
from runtime.event_log.messages import SideEffect, SideEffectMessage
from runtime.event_log.models import BuildState, CellEvent, Head, LogEntry, PendingSnapshot, SnapshotMarker
from runtime.event_log.snapshots import Outcome, SnapshotWorker, WorkerOptions

LOG = "bench-sheet"
CHUNK_BYTES = 256 * 1024  # the shipped default


# --- in-memory ports: the worker's memory alone ---------------------------------------------------


def generated_events(count: int) -> Iterator[LogEntry]:
    """`count` SetCell events of distinct cells, in segment-index order (cell, then position)."""
    for index in range(count):
        cell = cell_name(index // 100 + 1, index % 100 + 1)
        yield LogEntry(LOG, index + 1, f"r{index}", CellEvent(EntryKind.SET_CELL, cell, f"value {index:07d}"), 1)


@dataclass
class GeneratedLog:
    events: int

    def read_marker(self, log_id: str, seq: Decimal) -> SnapshotMarker | None:
        return SnapshotMarker(LOG, 1, self.events, 0)

    def read_head(self, log_id: str) -> Head:
        return Head(LOG, next_position=self.events + 1, snapshots=1, last_cut=self.events, exists=True)

    def segment_events(self, log_id: str, segment: int, after_order: str) -> Iterator[LogEntry]:
        return (event for event in generated_events(self.events) if order_key(event.event.cell) > after_order)

    def set_root(self, marker: SnapshotMarker, root: str, built_at: str) -> None:
        return None

    def advance_pointer(self, marker: SnapshotMarker, root: str) -> None:
        return None


@dataclass
class MemoryPending:
    def claim(self, log_id: str, seq: Decimal, token: str, now: float, lease_seconds: float) -> PendingSnapshot | None:
        return PendingSnapshot(log_id, seq, now, now, 0, 1, token, BuildState())

    def checkpoint(self, pending: PendingSnapshot, state: BuildState, now: float) -> bool:
        return True

    def delete(self, log_id: str, seq: Decimal, increment: int | None = None) -> bool:
        return True


@dataclass
class HashingBucket:
    """Keeps each object's digest and size; the bytes go where S3 would take them: away."""

    objects: dict[str, tuple[str, int]] = field(default_factory=dict)

    def put(self, key: str, body: bytes) -> None:
        self.objects[key] = (hashlib.sha256(body).hexdigest(), len(body))

    def get(self, key: str) -> bytes:
        raise KeyError(key)

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    def keys(self, prefix: str) -> Iterator[str]:
        return iter([key for key in self.objects if key.startswith(prefix)])


class NoQueue:
    def send(self, queue_url: str, messages: Sequence[SideEffectMessage], delay_seconds: int = 0) -> list[str]:
        return []

    def change_visibility(self, queue_url: str, receipt_handle: str, seconds: int) -> bool:
        return True


def peak_bytes(action: Callable[[], Any]) -> tuple[int, Any]:
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        result = action()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


def build_peak(events: int) -> tuple[int, int]:
    """(peak bytes, chunks) of the worker building a snapshot over `events` generated events."""
    bucket = HashingBucket()
    worker = SnapshotWorker(
        GeneratedLog(events),  # type: ignore[arg-type]
        MemoryPending(),  # type: ignore[arg-type]
        bucket,  # type: ignore[arg-type]
        NoQueue(),
        WorkerOptions(queue_url="memory", chunk_bytes=CHUNK_BYTES),
    )
    message = SideEffectMessage(SideEffect.BUILD_SNAPSHOT, LOG, marker_seq(events), "bench")
    peak, outcome = peak_bytes(lambda: worker.handle(message, "receipt", lambda: 10**9, "bench"))
    if outcome != Outcome.BUILT:
        raise RuntimeError(f"the build ended {outcome}")
    return peak, worker.progress.chunks_written


def replay_peak(events: int) -> int:
    peak, _ = peak_bytes(lambda: len(replay(generated_events(events))))
    return peak


# --- on the embedded cloud ------------------------------------------------------------------------


def reads_per_snapshot(template: dict[str, Any], *, snapshots: int = 5, every: int = 2000) -> list[tuple[int, int, int, int]]:
    """(snapshot, events read by its build, events since the previous snapshot, log size at its cut)."""
    from devtools.aws.moto_patches import VirtualClock
    from devtools.event_log_world import EventLogWorld, embedded_event_log_cloud
    from devtools.sheet_workload import sheet_edits

    clock = VirtualClock()
    rows = []
    with embedded_event_log_cloud(clock):
        world = EventLogWorld.create(
            template, clock, overrides={event_log_contract.HANDLER_API: {event_log_contract.ENV_SNAPSHOT_EVERY: str(every)}}
        )
        world.append_edits(LOG, sheet_edits(seed=17, count=snapshots * every))
        reads: list[int] = []

        def invoke(event: dict[str, Any]) -> dict[str, Any]:
            worker = world.snapshot_worker()
            result = world.invoke_worker(event, worker=worker)
            reads.append(worker.progress.events_read)
            return result

        world.drain([world.snapshot_source(invoke)])
        problems = world.verify(LOG)
        if problems:
            raise RuntimeError(f"snapshots differ from the replay: {problems[:3]}")
        markers = [item for item in world.entries(LOG) if item["kind"] == EntryKind.SNAPSHOT]
        for item, read in zip(markers, reads, strict=True):
            rows.append((int(item["snapshot"]), read, int(item["cut"]) - int(item["previous_cut"]), int(item["cut"])))
    return rows


def redone_after_crashes(template: dict[str, Any], *, events: int = 2000, chunk_bytes: int = 4096) -> tuple[int, list[int]]:
    """(chunks of the snapshot, chunks written again after a crash right after chunk k, for each k)."""
    from devtools.aws.faults import SimulatedCrash
    from devtools.aws.moto_patches import VirtualClock
    from devtools.event_log_world import EventLogWorld, embedded_event_log_cloud
    from devtools.sheet_workload import sheet_edits
    from runtime.event_log.objects import S3Objects

    overrides = {
        event_log_contract.HANDLER_API: {event_log_contract.ENV_SNAPSHOT_EVERY: str(events)},
        event_log_contract.HANDLER_WORKER: {event_log_contract.ENV_CHUNK_BYTES: str(chunk_bytes)},
    }

    def run(crash_after: int | None) -> tuple[int, int]:
        clock = VirtualClock()
        with embedded_event_log_cloud(clock):
            world = EventLogWorld.create(template, clock, overrides=overrides)
            world.append_edits(LOG, sheet_edits(seed=19, count=events))
            written = 0

            class Dying(S3Objects):
                chunks = 0

                def put(self, key: str, body: bytes) -> None:
                    super().put(key, body)
                    if key.endswith(".ndjson"):
                        Dying.chunks += 1
                        if Dying.chunks == crash_after:
                            raise SimulatedCrash(f"died after chunk {crash_after}")

            def invoke(event: dict[str, Any]) -> dict[str, Any]:
                nonlocal written
                worker = world.snapshot_worker()
                worker._objects = Dying(world.worker.bucket, client=world.clients.s3)
                try:
                    return world.invoke_worker(event, worker=worker)
                finally:
                    written += worker.progress.chunks_written + (1 if Dying.chunks == crash_after else 0)

            world.drain([world.snapshot_source(invoke)])
            if world.verify(LOG):
                raise RuntimeError(f"crash after chunk {crash_after}: {world.verify(LOG)[:3]}")
            [root_key] = [item["root"] for item in world.entries(LOG) if item["kind"] == EntryKind.SNAPSHOT]
            total = len(world.snapshot_cells(root_key)[0]["chunks"])
            return total, written

    total, clean_written = run(None)
    if clean_written != total:
        raise RuntimeError(f"a clean build wrote {clean_written} chunks for {total}")
    return total, [run(k)[1] - total for k in range(1, total + 1)]


def main(log_template: dict[str, Any]) -> bool:
    """Print the snapshot figures (`log_template`: the synthesized dev EventLog stack); True when every target is met."""
    print("\nsnapshots: peak memory of one build (tracemalloc; generated events, every one a new cell)")
    small_peak, small_chunks = build_peak(10_000)
    large_peak, large_chunks = build_peak(1_000_000)
    small_replay, large_replay = replay_peak(10_000), replay_peak(1_000_000)
    ratio = large_peak / small_peak
    print(f"  {'events':>10} {'chunks':>7} {'worker peak':>12} {'replay peak (baseline)':>24}")
    print(f"  {10_000:>10} {small_chunks:>7} {small_peak / 2**20:>9.1f} MiB {small_replay / 2**20:>21.1f} MiB")
    print(f"  {1_000_000:>10} {large_chunks:>7} {large_peak / 2**20:>9.1f} MiB {large_replay / 2**20:>21.1f} MiB")
    print(
        f"  1M / 10k: worker {ratio:.2f}x (target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT MET'}), "
        f"replay {large_replay / small_replay:.0f}x; the worker holds one {CHUNK_BYTES // 1024} KiB chunk and one index page"
    )

    print("\nsnapshots: log entries read per build (embedded cloud, 5 snapshots of 2,000 events)")
    rows = reads_per_snapshot(log_template)
    print(f"  {'snapshot':>8} {'read':>6} {'since previous':>15} {'whole log':>10} {'read / since prev':>18} {'read / whole log':>17}")
    for number, read, since, whole in rows:
        print(f"  {number:>8} {read:>6} {since:>15} {whole:>10} {read / since:>18.2f} {read / whole:>17.2f}")
    reads_met = all(read == since for _, read, since, _ in rows)
    print(f"  target: only the entries since the previous snapshot: {'met' if reads_met else 'NOT MET'}")

    print("\nsnapshots: work redone after a crash (the worker dies right after chunk k, for every k)")
    total, redone = redone_after_crashes(log_template)
    print(f"  snapshot of {total} chunks; chunks written again: max {max(redone)}, mean {sum(redone) / len(redone):.2f}")
    print(f"  baseline (rebuild from scratch after a crash after chunk k): mean {sum(range(1, total + 1)) / total:.1f} chunks")
    redone_met = max(redone) <= 1
    print(f"  target: at most one chunk: {'met' if redone_met else 'NOT MET'}")
    return ratio <= 1.5 and reads_met and redone_met
