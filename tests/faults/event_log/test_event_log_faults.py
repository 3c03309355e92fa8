"""Fault schedules for the snapshot worker (and the router in front of it).

Every case ends with `EventLogWorld.verify`: each snapshot equals a from-scratch replay of the
log up to its Snapshot entry, the last-snapshot pointer is on the newest, nothing is pending,
and no object is left in S3 that no root names. Small settings (a snapshot every 20 events,
256-byte chunks) make every snapshot several chunks.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import pytest

from devtools.aws.faults import LostResponse, SimulatedCrash, WriteBoundaryCrasher
from devtools.aws.lambda_context import ClockedLambdaContext
from devtools.aws.moto_patches import VirtualClock, atomic_moto_dynamodb
from devtools.event_log_world import Clients, EventLogWorld, embedded_event_log_cloud
from devtools.sheet_workload import sheet_edits
from runtime.event_log import worker_handler
from runtime.event_log.errors import PoisonMessage
from runtime.event_log.messages import SideEffect, parse_message
from runtime.event_log.models import BuildState
from runtime.event_log.objects import S3Objects
from runtime.event_log.snapshots import Outcome, SnapshotWorker
from runtime.event_log.sqs_batch import POISON_RETRY_CAP_SECONDS
from runtime.event_log.store import DynamoPendingStore
from runtime.shared.observability import metrics
from tests.conftest import EVENT_LOG_STACK, SMALL_LOG, templates_for

LOG = "sheet-f"
EVENTS = 60  # three snapshots of the small configuration
TINY_CHUNK = 100  # two or three cells: a 20-event snapshot has several chunks
SWEEP_EVENTS = 40  # two snapshots, delivered in reverse: claims, deferrals, chunks, finishes
# The sweeps' chunks: snapshot 1 in two (a first and a last chunk), snapshot 2 in three (and one
# between), so every kind of chunk boundary is met once per snapshot without repeating the middle.
SWEEP_LOG = {**SMALL_LOG, "runtime.event_log.worker_handler.handler": {"CHUNK_BYTES": "512"}}
SWEEP_CHUNKS = {1: 2, 2: 3}


# --- helpers ----------------------------------------------------------------------------------


def filled(world: EventLogWorld, events: int = EVENTS, seed: int = 5) -> EventLogWorld:
    """`events` edits (mostly of distinct cells, so snapshots grow), routed to the queues."""
    world.append_edits(LOG, sheet_edits(seed=seed, count=events))
    world.route()
    return world


def receive_all(world: EventLogWorld) -> list[dict[str, Any]]:
    """Take every visible snapshot message off the queue (as concurrent invocations would hold them)."""
    messages: list[dict[str, Any]] = []
    while True:
        batch = world.clients.sqs.receive_message(
            QueueUrl=world.worker.options.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"]
        ).get("Messages", [])
        if not batch:
            return sorted(messages, key=lambda message: Decimal(parse(message).seq))
        messages.extend(batch)


def parse(message: dict[str, Any]) -> Any:
    return parse_message(message["Body"], message.get("MessageAttributes", {}), SideEffect.BUILD_SNAPSHOT)


def handle(world: EventLogWorld, message: dict[str, Any], worker: SnapshotWorker | None = None, **context: Any) -> Outcome:
    """One worker handling one message; the message is deleted unless the worker kept it."""
    used = worker or world.snapshot_worker()
    remaining = context.get("remaining_ms", lambda: 10**6)
    outcome = used.handle(parse(message), message["ReceiptHandle"], remaining, context.get("token", "worker-token"))
    if not outcome.keeps_message:
        world.clients.sqs.delete_message(QueueUrl=world.worker.options.queue_url, ReceiptHandle=message["ReceiptHandle"])
    return outcome


def chunks_in_roots(world: EventLogWorld) -> int:
    total = 0
    for item in world.entries(LOG):
        if item["kind"] == "Snapshot" and item.get("root"):
            root, _, _ = world.snapshot_cells(item["root"])
            total += len(root["chunks"])
    return total


def pending_state(world: EventLogWorld, seq: Decimal) -> Any:
    return DynamoPendingStore(world.worker.pending_table, client=world.clients.dynamodb).get(LOG, seq)


class HookedObjects(S3Objects):
    """The bucket, with a callback after every chunk write (to stage overlaps and slow chunks)."""

    def __init__(self, bucket: str, *, client: Any, after_chunk: Callable[[int], None]) -> None:
        super().__init__(bucket, client=client)
        self.after_chunk = after_chunk
        self.chunks = 0

    def put(self, key: str, body: bytes) -> None:
        super().put(key, body)
        if key.endswith(".ndjson"):
            self.chunks += 1
            self.after_chunk(self.chunks)


def hooked_worker(world: EventLogWorld, after_chunk: Callable[[int], None]) -> tuple[SnapshotWorker, HookedObjects]:
    worker = world.snapshot_worker(options=replace(world.worker.options, chunk_bytes=TINY_CHUNK))
    objects = HookedObjects(world.worker.bucket, client=world.clients.s3, after_chunk=after_chunk)
    worker._objects = objects  # the seam under test: what happens between two chunk writes
    return worker, objects


# --- duplicates, order, overlap ----------------------------------------------------------------


def test_duplicate_messages_build_each_snapshot_once(log_world: EventLogWorld) -> None:
    # Given three Snapshot entries, and every side-effect message delivered twice
    filled(log_world)
    for message in receive_all(log_world):
        for _ in range(2):
            log_world.clients.sqs.send_message(
                QueueUrl=log_world.worker.options.queue_url, MessageBody=message["Body"], MessageAttributes=message["MessageAttributes"]
            )
    workers: list[SnapshotWorker] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        workers.append(log_world.snapshot_worker())
        return log_world.invoke_worker(event, worker=workers[-1])

    # When the queue is drained
    log_world.drain([log_world.snapshot_source(invoke), log_world.payload_source()])
    # Then every snapshot equals the replay, and no chunk was written twice
    assert log_world.verify(LOG) == []
    assert sum(worker.progress.chunks_written for worker in workers) == chunks_in_roots(log_world) > 3
    assert log_world.log_store().read_head(LOG).built == 3


def test_snapshot_k_plus_1_before_k_is_deferred_then_built_in_order(log_world: EventLogWorld) -> None:
    # Given the messages of snapshots 1, 2 and 3, delivered as 3, 2, 1
    filled(log_world)
    first, second, third = receive_all(log_world)
    # When 3 and 2 arrive first
    outcomes = [handle(log_world, third), handle(log_world, second)]
    # Then both are deferred: their claim released, Retries counted, their message kept
    assert outcomes == [Outcome.DEFERRED, Outcome.DEFERRED]
    for message in (second, third):
        pending = pending_state(log_world, parse(message).seq)
        assert (pending.active, pending.retries, pending.state) == (None, 1, BuildState())
    assert log_world.log_store().read_head(LOG).built == 0
    # When 1 arrives, and then the queue is drained (2 and 3 come back after their backoff)
    assert handle(log_world, first) == Outcome.BUILT
    log_world.drain()
    # Then all three are built, in order, each from its predecessor
    assert log_world.verify(LOG) == []
    assert log_world.log_store().read_head(LOG).built == 3


def test_a_deferral_backs_off_with_full_jitter_within_the_cap(log_world: EventLogWorld) -> None:
    # Given snapshot 2's message, repeatedly arriving before snapshot 1 is built
    filled(log_world, events=40)
    _, second = receive_all(log_world)
    url = log_world.worker.options.queue_url
    # (never re-enqueueing snapshot 1, whose message this test holds, so the queue holds one message)
    patient = log_world.snapshot_worker(options=replace(log_world.worker.options, redrive_after_retries=100))
    delays = []
    # When it is deferred six times
    for retries in range(1, 7):
        before = log_world.clock()
        assert handle(log_world, second, patient) == Outcome.DEFERRED
        from devtools.aws.sqs_esm import next_visible_at

        visible_at = next_visible_at(url)
        assert visible_at is not None
        delays.append(visible_at - before)
        assert pending_state(log_world, parse(second).seq).retries == retries
        log_world.clock.advance(visible_at - before + 0.01)
        [second] = [m for m in receive_all(log_world) if parse(m).seq == Decimal("40.5")]
    # Then each delay is within [1, base * 2**(retries-1)] seconds and never above 12 hours
    base = log_world.worker.options.backoff_base_seconds
    for attempt, delay in enumerate(delays):
        assert 1 <= round(delay) <= min(base * 2**attempt, 12 * 3600)


def test_overlapping_workers_one_builds_and_the_other_steps_aside(log_world: EventLogWorld) -> None:
    # Given snapshot 1's message delivered twice, the copy arriving while the first worker builds
    filled(log_world, events=20)
    [message] = receive_all(log_world)
    log_world.clients.sqs.send_message(QueueUrl=log_world.worker.options.queue_url, MessageBody=message["Body"])
    [copy] = receive_all(log_world)
    seen: list[Outcome] = []

    def second_worker_arrives(chunk: int) -> None:
        if chunk == 1:
            seen.append(handle(log_world, copy, token="second-worker"))

    first, objects = hooked_worker(log_world, second_worker_arrives)
    # When the first worker builds, and the second handles the copy after the first chunk
    outcome = handle(log_world, message, first, token="first-worker")
    # Then the copy lost the claim and was dropped as a duplicate; the first worker finished
    assert seen == [Outcome.DUPLICATE]
    assert outcome == Outcome.BUILT
    assert objects.chunks == chunks_in_roots(log_world) > 1
    assert log_world.verify(LOG) == []


def test_two_workers_racing_on_threads_build_the_snapshot_once(log_world: EventLogWorld) -> None:
    # Given snapshot 1's message and a duplicate of it, each held by its own worker
    filled(log_world, events=20)
    [message] = receive_all(log_world)
    log_world.clients.sqs.send_message(QueueUrl=log_world.worker.options.queue_url, MessageBody=message["Body"])
    [copy] = receive_all(log_world)
    outcomes: list[Outcome] = []
    errors: list[BaseException] = []

    def run(held: dict[str, Any], token: str) -> None:
        try:
            outcomes.append(handle(log_world, held, log_world.snapshot_worker(Clients.new()), token=token))
        except BaseException as err:
            errors.append(err)

    # When both run at the same time (DynamoDB's conditional writes are atomic)
    with atomic_moto_dynamodb():
        threads = [threading.Thread(target=run, args=(held, f"t{index}")) for index, held in enumerate((message, copy))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    # Then one built it and the other found it claimed or built
    assert errors == []
    assert outcomes.count(Outcome.BUILT) == 1
    assert set(outcomes) <= {Outcome.BUILT, Outcome.DUPLICATE, Outcome.ALREADY_BUILT}
    assert log_world.verify(LOG) == []


# --- crashes, leases, stale workers, hand-off -------------------------------------------------


def test_a_crashed_worker_is_taken_over_after_its_lease_and_resumes_from_the_checkpoint(log_world: EventLogWorld) -> None:
    # Given a worker that dies right after its second chunk was checkpointed
    filled(log_world, events=20)
    [message] = receive_all(log_world)
    seq = parse(message).seq

    def die(chunk: int) -> None:
        if chunk == 3:  # the third chunk is written; the process dies before its checkpoint
            raise SimulatedCrash("worker died")

    dying, _ = hooked_worker(log_world, die)
    with pytest.raises(SimulatedCrash):
        handle(log_world, message, dying, token="dying")
    held = pending_state(log_world, seq)
    assert (held.active, held.increment, held.state.chunks) == ("dying", 1, 2)
    # When the message comes back before the lease ran out, the claim is still held
    assert handle(log_world, message, token="too-early") == Outcome.DUPLICATE
    # When it comes back after the lease (the visibility timeout is longer than the lease)
    log_world.clock.advance(log_world.worker.options.lease_seconds + 1)
    log_world.clients.sqs.send_message(QueueUrl=log_world.worker.options.queue_url, MessageBody=message["Body"])
    [redelivered] = receive_all(log_world)
    successor = log_world.snapshot_worker(options=replace(log_world.worker.options, chunk_bytes=TINY_CHUNK))
    assert handle(log_world, redelivered, successor, token="successor") == Outcome.BUILT
    # Then the successor bumped Increment, kept the two checkpointed chunks and redid at most one
    total = chunks_in_roots(log_world)
    assert total > 3
    assert successor.progress.chunks_written == total - 2
    assert log_world.verify(LOG) == []


def test_a_stale_worker_cannot_move_the_checkpoint_backwards(log_world: EventLogWorld) -> None:
    # Given worker A paused after its first chunk, while its lease runs out and worker B takes
    # over, writes two more chunks and hands off (its time is up)
    filled(log_world, events=20)
    [message] = receive_all(log_world)
    seq = parse(message).seq
    state_after_b: list[BuildState] = []

    def pause_a(chunk: int) -> None:
        if chunk != 1:
            return
        log_world.clock.advance(log_world.worker.options.lease_seconds + 1)
        calls = iter(range(100))
        b_remaining = lambda: 10**6 if next(calls) < 1 else 0  # noqa: E731 - B runs out after two chunks
        worker_b = log_world.snapshot_worker(options=replace(log_world.worker.options, chunk_bytes=TINY_CHUNK))
        assert handle(log_world, message_copy(log_world, message), worker_b, token="B", remaining_ms=b_remaining) == Outcome.HANDED_OFF
        state_after_b.append(pending_state(log_world, seq).state)

    worker_a, _ = hooked_worker(log_world, pause_a)
    # When A wakes up and tries to checkpoint its first chunk
    outcome = handle(log_world, message, worker_a, token="A")
    # Then A is told it was superseded, and B's checkpoint stands
    assert outcome == Outcome.SUPERSEDED
    assert state_after_b[0].chunks == 2
    assert pending_state(log_world, seq).state == state_after_b[0]
    # and the next delivery finishes the snapshot correctly
    log_world.drain(
        [log_world.snapshot_source(lambda event: log_world.invoke_worker(event, worker=hooked_worker(log_world, lambda _: None)[0]))]
    )
    assert log_world.verify(LOG) == []


def message_copy(world: EventLogWorld, message: dict[str, Any]) -> dict[str, Any]:
    world.clients.sqs.send_message(QueueUrl=world.worker.options.queue_url, MessageBody=message["Body"])
    [copy] = receive_all(world)
    return copy


def test_a_worker_near_its_time_limit_hands_off_and_the_next_delivery_resumes(log_world: EventLogWorld) -> None:
    # Given chunks that take 100 s each in a 300 s function with a 30 s hand-off margin
    filled(log_world, events=20)
    timeout = log_world.function_timeout("runtime.event_log.worker_handler.handler")
    margin_ms = log_world.worker.options.handoff_margin_ms
    assert (timeout, margin_ms) == (300, 30_000)
    written: list[int] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        worker, objects = hooked_worker(log_world, lambda chunk: log_world.clock.advance(100))
        result = log_world.invoke_worker(event, worker=worker, context=ClockedLambdaContext(clock=log_world.clock, timeout_seconds=timeout))
        written.append(objects.chunks)
        return result

    source = log_world.snapshot_source(invoke)
    # When the snapshot's message is delivered
    source.poll_once()
    # Then the worker stopped after the chunk that left it under the margin, released its claim,
    # and made the message visible again at once
    pending = pending_state(log_world, Decimal("20.5"))
    assert written == [3]
    assert (pending.active, pending.state.chunks) == (None, 3)
    log_world.clock.advance(0.01)
    assert source.poll_once() == 1  # delivered again without waiting for a visibility timeout
    # and the deliveries together built it once, redoing nothing
    log_world.drain([source])
    assert sum(written) == chunks_in_roots(log_world)
    assert log_world.verify(LOG) == []


# --- crash at every write boundary --------------------------------------------------------------


@contextmanager
def fresh_world(clock: VirtualClock) -> Iterator[EventLogWorld]:
    with embedded_event_log_cloud(clock):
        world = EventLogWorld.create(templates_for("dev")[EVENT_LOG_STACK], clock, overrides=SWEEP_LOG, seed=3)
        yield world


@dataclass
class SweepRun:
    writes: list[str]
    chunks_written: int
    chunks_in_roots: int
    problems: list[str]
    crashed: bool  # the fault happened (a crash, or a lost response retried by botocore)
    cells: dict[str, Any] = field(default_factory=dict)
    outcomes: list[str] = field(default_factory=list)
    second_answer: str | None = None  # with when="lost": what botocore's retry got


class RecordingWorker(SnapshotWorker):
    """The worker, keeping the outcome of each message it handled."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcomes: list[Outcome] = []

    def handle(self, *args: Any, **kwargs: Any) -> Outcome:
        outcome = super().handle(*args, **kwargs)
        self.outcomes.append(outcome)
        return outcome


def sweep_start(world: EventLogWorld) -> EventLogWorld:
    """The scenario's start: two snapshots' messages queued in reverse order (snapshot 3's first)."""
    filled(world, events=SWEEP_EVENTS)
    for message in reversed(receive_all(world)):
        world.clients.sqs.send_message(QueueUrl=world.worker.options.queue_url, MessageBody=message["Body"])
        world.clients.sqs.delete_message(QueueUrl=world.worker.options.queue_url, ReceiptHandle=message["ReceiptHandle"])
    return world


@contextmanager
def sweep() -> Iterator[Callable[[int | None, str], SweepRun]]:
    """Runs of the scenario, each from the same start: built once, captured, and restored before
    every run (building it through the API would cost about a third of each run)."""
    with fresh_world(VirtualClock()) as world:
        start = sweep_start(world).capture()

        def run(at: int | None, when: str) -> SweepRun:
            with world.restored(start) as restored:
                return run_scenario(restored, at, when)

        yield run


def chunk_puts(writes: list[str]) -> dict[int, int]:
    """The chunk objects put per snapshot, from write names (PutObject:/snapshots/<log>/<snapshot>/<chunk>.ndjson)."""
    return Counter(int(write.split("/")[3]) for write in writes if write.startswith("PutObject:") and write.endswith(".ndjson"))


def run_scenario(world: EventLogWorld, at: int | None, when: str) -> SweepRun:
    """The scenario, from `sweep_start`: two snapshots delivered in reverse order (so deferrals
    happen too); at one write, the worker's process dies (when "before" or "after") or the write's
    response is lost and botocore sends it again ("lost"); everything is redelivered until done."""
    fault: WriteBoundaryCrasher | LostResponse = LostResponse(at=at) if when == "lost" else WriteBoundaryCrasher(at=at, when=when)
    clients = Clients.new()  # clients hold no state a crash could lose; sharing them saves time
    fault.attach(clients.dynamodb, clients.s3, clients.sqs)
    workers: list[RecordingWorker] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        workers.append(world.snapshot_worker(clients, kind=RecordingWorker))
        return world.invoke_worker(event, worker=workers[-1])

    world.drain([world.snapshot_source(invoke)])
    cells = {}
    for item in world.entries(LOG):
        if item["kind"] == "Snapshot" and item.get("root"):
            _, stored, _ = world.snapshot_cells(item["root"])
            cells[str(item["snapshot"])] = [(cell.cell, cell.value) for cell in stored]
    return SweepRun(
        writes=fault.operations,
        chunks_written=sum(worker.progress.chunks_written for worker in workers),
        chunks_in_roots=chunks_in_roots(world),
        problems=world.verify(LOG) + [f"{len(world.dead_letters())} messages in the DLQ"] * bool(world.dead_letters()),
        crashed=fault.retried if isinstance(fault, LostResponse) else fault.crashed,
        cells=cells,
        outcomes=[outcome.value for worker in workers for outcome in worker.outcomes],
        second_answer=fault.second_answer if isinstance(fault, LostResponse) else None,
    )


def test_a_crash_at_every_write_boundary_of_the_worker_is_repaired_by_redelivery() -> None:
    with sweep() as sweep_run:
        # Given one clean pass of the scenario, and the writes the worker made in it
        clean = sweep_run(None, "before")
        assert clean.problems == []
        assert clean.chunks_written == clean.chunks_in_roots
        kinds = {operation.split(":")[0] for operation in clean.writes}
        assert {"UpdateItem", "PutObject", "DeleteItem", "ChangeMessageVisibility"} <= kinds
        assert chunk_puts(clean.writes) == SWEEP_CHUNKS
        failures = []
        # When the worker's process dies before, and after, each of those writes
        for at in range(1, len(clean.writes) + 1):
            for when in ("before", "after"):
                run = sweep_run(at, when)
                # Then redelivery repairs it: same snapshots as the clean pass, nothing stray or
                # pending, and at most one chunk written again
                if not run.crashed:
                    failures.append(f"{when} write {at}: no crash happened")
                if run.problems or run.cells != clean.cells:
                    failures.append(f"{when} write {at} ({clean.writes[at - 1]}): {run.problems or 'snapshots differ from the clean pass'}")
                if run.chunks_written - run.chunks_in_roots > 1:
                    failures.append(f"{when} write {at}: {run.chunks_written - run.chunks_in_roots} chunks redone")
    assert failures == []


def test_a_lost_response_at_every_write_of_the_worker_is_recognised_as_its_own() -> None:
    with sweep() as sweep_run:
        # Given one clean pass of the scenario, and the writes the worker made in it
        clean = sweep_run(None, "lost")
        assert clean.problems == []
        assert chunk_puts(clean.writes) == SWEEP_CHUNKS
        failures = []
        conditional_failed_against_itself = set()
        # When each write is applied, its response lost, and botocore's retry sends it again
        for at in range(1, len(clean.writes) + 1):
            run = sweep_run(at, "lost")
            operation = clean.writes[at - 1]
            # Then the worker recognises its own write: the same snapshots as the clean pass,
            # nothing pending or dead-lettered, no extra deliveries or chunks, and the same outcomes
            if not run.crashed:
                failures.append(f"write {at} ({operation}): no response was lost")
            if run.problems or run.cells != clean.cells:
                failures.append(f"write {at} ({operation}): {run.problems or 'snapshots differ from the clean pass'}")
            if run.outcomes != clean.outcomes or run.chunks_written != clean.chunks_written:
                failures.append(f"write {at} ({operation}): outcomes {run.outcomes}, {run.chunks_written} chunks; clean {clean.outcomes}")
            if run.second_answer == "ConditionalCheckFailedException":
                conditional_failed_against_itself.add(operation.split(":")[0])
    assert failures == []
    # and the sweep did meet writes whose retry failed its condition against the first attempt
    # (the claim, the defer, the pointer), which the worker recognised
    assert "UpdateItem" in conditional_failed_against_itself


def hand_off_with(clock: VirtualClock, fault: LostResponse) -> tuple[Outcome, EventLogWorld, Any]:
    """Snapshot 1 handled by a worker whose chunks take 100 s each in a 300 s function, so it
    hands off after three chunks; `fault` is on the worker's DynamoDB client."""
    world = EventLogWorld.create(templates_for("dev")[EVENT_LOG_STACK], clock, overrides=SMALL_LOG)
    filled(world, events=20)
    [message] = receive_all(world)
    clients = Clients.new()
    fault.attach(clients.dynamodb)
    worker = world.snapshot_worker(clients, options=replace(world.worker.options, chunk_bytes=TINY_CHUNK))
    worker._objects = HookedObjects(world.worker.bucket, client=clients.s3, after_chunk=lambda _: world.clock.advance(100))
    context = ClockedLambdaContext(clock=world.clock, timeout_seconds=world.function_timeout("runtime.event_log.worker_handler.handler"))
    outcome = handle(world, message, worker, remaining_ms=context.get_remaining_time_in_millis)
    return outcome, world, pending_state(world, parse(message).seq)


def test_a_lost_response_on_the_hand_off_release_is_recognised_and_the_build_resumes() -> None:
    # Given the writes of a handling that hands off: the claim, three checkpoints, the release
    clock = VirtualClock()
    with embedded_event_log_cloud(clock):
        counter = LostResponse()
        assert hand_off_with(clock, counter)[0] == Outcome.HANDED_OFF
    release = len(counter.operations)
    assert counter.operations[release - 1].startswith("UpdateItem:EventLogPendingSnapshots")
    clock = VirtualClock()
    with embedded_event_log_cloud(clock):
        # When the release is applied, its response lost, and botocore's retry sends it again
        lost = LostResponse(at=release)
        outcome, world, pending = hand_off_with(clock, lost)
        # Then the retry failed its condition against the release itself, and the worker knew it
        # as its own: handed off (message kept), not superseded (message deleted)
        assert (lost.retried, lost.second_answer) == (True, "ConditionalCheckFailedException")
        assert outcome == Outcome.HANDED_OFF
        assert (pending.active, pending.state.chunks, pending.due) == (None, 3, world.clock())
        # and the next deliveries resume from the checkpoint and build it
        world.drain()
        assert world.verify(LOG) == []


# --- the segment index lagging, strays, stuck predecessors ----------------------------------------


def test_an_incomplete_segment_read_restarts_the_build_and_leaves_no_strays(log_world: EventLogWorld) -> None:
    # Given a segment index that misses one event on the first read (it is eventually consistent)
    filled(log_world, events=20)
    [message] = receive_all(log_world)
    worker = log_world.snapshot_worker()
    store = worker._log
    original = store.segment_events
    reads = []

    def lagging(log_id: str, segment: int, after_order: str) -> Iterator[Any]:
        reads.append(segment)
        events = original(log_id, segment, after_order)
        if len(reads) == 1:
            next(events)  # the first event is not in the index yet
        return events

    store.segment_events = lagging  # type: ignore[method-assign]
    # When the worker builds from it
    outcome = handle(log_world, message, worker)
    # Then it notices the count is short, starts over from an empty checkpoint, and waits
    assert outcome == Outcome.DEFERRED
    assert pending_state(log_world, Decimal("20.5")).state == BuildState()
    # and a stray chunk of that attempt (planted: a longer attempt would leave one) is removed
    bucket = S3Objects(log_world.worker.bucket, client=log_world.clients.s3)
    bucket.put("snapshots/sheet-f/0000000001/left-by-an-earlier-attempt.ndjson", b"{}\n")
    log_world.drain()
    assert log_world.verify(LOG) == []


def test_a_predecessor_whose_holder_died_and_whose_message_is_gone_is_re_enqueued(log_world: EventLogWorld) -> None:
    # Given snapshot 1 claimed by a worker that died, and its message deleted (through a
    # duplicate's receipt), so nothing would ever build it
    filled(log_world, events=40)
    first, second = receive_all(log_world)

    def die(chunk: int) -> None:
        raise SimulatedCrash("worker died")

    dying, _ = hooked_worker(log_world, die)
    with pytest.raises(SimulatedCrash):
        handle(log_world, first, dying, token="dying")
    log_world.clients.sqs.delete_message(QueueUrl=log_world.worker.options.queue_url, ReceiptHandle=first["ReceiptHandle"])
    # When snapshot 2 arrives after the dead worker's lease ran out
    log_world.clock.advance(log_world.worker.options.lease_seconds + 1)
    assert handle(log_world, second) == Outcome.DEFERRED
    # Then snapshot 1 was put back on the queue, and draining builds both
    assert any(parse(message).seq == Decimal("20.5") for message in receive_all_peek(log_world))
    log_world.drain()
    assert log_world.verify(LOG) == []


def receive_all_peek(world: EventLogWorld) -> list[dict[str, Any]]:
    """Visible messages, put back at once."""
    messages = receive_all(world)
    for message in messages:
        world.clients.sqs.change_message_visibility(
            QueueUrl=world.worker.options.queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    world.clock.advance(0.01)
    return messages


# --- poison messages ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("this is not json", "not JSON"),
        ('{"effect": "build_snapshot", "log_id": "no-such-log", "seq": "20.5"}', "does not exist"),
        ('{"effect": "build_snapshot", "log_id": "sheet-f", "seq": "7.5"}', "has no Snapshot entry"),
        ('{"effect": "build_snapshot", "log_id": "sheet-f", "seq": "1E+400"}', "not a log position"),
        ('{"effect": "build_snapshot", "log_id": "sheet-f", "seq": "1234567890123456789012345678901234567890.5"}', "not a log position"),
    ],
)
def test_a_poison_message_goes_to_the_dlq_after_bounded_retries(log_world: EventLogWorld, body: str, reason: str) -> None:
    # Given a log, and a message that no retry can make valid
    filled(log_world, events=20)
    log_world.drain()
    url = log_world.worker.options.queue_url
    # (its error says what is wrong with it)
    with pytest.raises(PoisonMessage, match=reason):
        message = parse_message(body, {}, SideEffect.BUILD_SNAPSHOT)
        log_world.snapshot_worker().handle(message, "receipt", lambda: 10**6, "token")
    log_world.clients.sqs.send_message(QueueUrl=url, MessageBody=body)
    poison_counted: list[float] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        worker = log_world.snapshot_worker()
        context = ClockedLambdaContext(
            clock=log_world.clock, timeout_seconds=log_world.function_timeout("runtime.event_log.worker_handler.handler")
        )
        try:
            return worker_handler.handle(event, context, log_world.worker_deps(worker))
        finally:
            poison_counted.extend(metrics.metric_set.get("PoisonMessages", {}).get("Value", []))
            metrics.clear_metrics()

    source = log_world.snapshot_source(invoke)
    started = log_world.clock()
    # When the queue is drained
    log_world.drain([source])
    # Then the message was tried exactly maxReceiveCount times, failed each time with a clear
    # reason (counted as poison), each retry within a minute, and now waits in the dead-letter
    # queue; the queue is empty
    max_receives = int(
        __import__("json").loads(
            log_world.clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"]
        )["maxReceiveCount"]
    )
    assert source.stats.delivered == source.stats.kept == max_receives
    assert poison_counted == [1.0] * max_receives
    assert log_world.clock() - started <= max_receives * (POISON_RETRY_CAP_SECONDS + 1)
    [dead] = log_world.dead_letters()
    assert dead["Body"] == body
    assert log_world.depth(url) == 0
    assert log_world.verify(LOG) == []
