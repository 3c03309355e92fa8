"""Faults that race the snapshot worker's overlapped I/O.

The worker reads ahead (the segment index page after page, the previous snapshot chunk after
chunk) while it writes and checkpoints a chunk, and its claim runs alongside the reads of the
previous snapshot. Here the index is read in pages of three events, so a read is in flight at
nearly every write; snapshot 2 (20 events over snapshot 1's cells, both in 100-byte chunks) is
the build under test. Each case ends with every snapshot equal to a from-scratch replay
(`EventLogWorld.verify`) and at most one chunk written again.

Faults are named by the write they hit (operation, what it writes, its occurrence), not by a
count of writes, so a case means the same write whatever the threads did.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import pytest
from botocore.exceptions import ClientError

from devtools.aws.faults import S3_WRITES, WRITE_OPERATIONS, LostResponse, SimulatedCrash
from devtools.aws.moto_patches import VirtualClock
from devtools.event_log_world import Clients, EventLogWorld, embedded_event_log_cloud
from devtools.sheet_workload import sheet_edits
from runtime.event_log import store as store_module
from runtime.event_log.logic import snapshot_prefix
from runtime.event_log.messages import SideEffect, parse_message
from runtime.event_log.snapshots import Outcome, SnapshotWorker
from runtime.event_log.store import DynamoPendingStore
from tests.conftest import EVENT_LOG_STACK, SMALL_LOG, templates_for

LOG = "sheet-o"
EVENTS = 40  # snapshots 1 and 2 of the small configuration (a snapshot every 20 events)
PAGE = 3  # events per index page: a 20-event segment is seven pages
TINY_CHUNK = 100  # two or three cells per chunk
BUILT_SEQ = Decimal("40.5")  # snapshot 2's entry
WAIT = 10.0  # seconds a staged fault waits for the other thread before giving up


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "_PAGE_LIMIT", PAGE)


# --- the scenario -------------------------------------------------------------------------------


@contextmanager
def fresh_world() -> Iterator[EventLogWorld]:
    clock = VirtualClock()
    with embedded_event_log_cloud(clock):
        yield EventLogWorld.create(templates_for("dev")[EVENT_LOG_STACK], clock, overrides=SMALL_LOG, seed=11)


def receive_all(world: EventLogWorld) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := world.clients.sqs.receive_message(
        QueueUrl=world.worker.options.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"]
    ).get("Messages", []):
        messages.extend(dict(message) for message in batch)
    return sorted(messages, key=lambda message: Decimal(json.loads(message["Body"])["seq"]))


def worker(world: EventLogWorld, clients: Clients | None = None) -> SnapshotWorker:
    return world.snapshot_worker(clients, options=replace(world.worker.options, chunk_bytes=TINY_CHUNK))


def handle(world: EventLogWorld, message: dict[str, Any], used: SnapshotWorker, token: str) -> Outcome:
    """One handling; the message is deleted unless the worker kept it (or raised)."""
    parsed = parse_message(message["Body"], message.get("MessageAttributes", {}), SideEffect.BUILD_SNAPSHOT)
    outcome = used.handle(parsed, message["ReceiptHandle"], lambda: 10**6, token)
    if not outcome.keeps_message:
        world.clients.sqs.delete_message(QueueUrl=world.worker.options.queue_url, ReceiptHandle=message["ReceiptHandle"])
    return outcome


def snapshot_2_message(world: EventLogWorld) -> dict[str, Any]:
    """Snapshot 1 built (in 100-byte chunks, so its chunks are read ahead too); snapshot 2's message."""
    world.append_edits(LOG, sheet_edits(seed=11, count=EVENTS))
    world.route()
    first, second = receive_all(world)
    assert handle(world, first, worker(world), "first-builder") == Outcome.BUILT
    return second


def redeliver_after_the_lease(world: EventLogWorld, message: dict[str, Any]) -> tuple[Outcome, SnapshotWorker]:
    """The message back after the crashed worker's lease ran out, handled by a healthy worker."""
    world.clock.advance(world.worker.options.lease_seconds + 1)
    world.clients.sqs.send_message(QueueUrl=world.worker.options.queue_url, MessageBody=message["Body"])
    [again] = receive_all(world)
    successor = worker(world)
    return handle(world, again, successor, "successor"), successor


def chunks_of_snapshot_2(world: EventLogWorld) -> int:
    marker = world.log_store().read_marker(LOG, BUILT_SEQ)
    assert marker is not None and marker.root
    root, _, _ = world.snapshot_cells(marker.root)
    return len(root["chunks"])


def pending(world: EventLogWorld) -> Any:
    return DynamoPendingStore(world.worker.pending_table, client=world.clients.dynamodb).get(LOG, BUILT_SEQ)


def write_name(operation: str, params: dict[str, Any]) -> str:
    """What a serialized write request writes: the object's path, or the table (or queue)."""
    if operation in S3_WRITES:
        return f"{operation}:{params['url_path'].split('?')[0]}"
    body = json.loads(params["body"]) if params.get("body") else {}
    return f"{operation}:{body.get('TableName') or str(body.get('QueueUrl', '')).rsplit('/', 1)[-1]}"


def object_key(params: dict[str, Any]) -> str:
    """The object key of a serialized S3 request (its path, bucket first)."""
    path = str(params["url_path"]).split("?")[0]
    return path[path.index("snapshots/") :] if "snapshots/" in path else path


@dataclass
class ChunkPuts:
    """Counts the chunk PutObjects of snapshot 2 that landed (answered 2xx), on the clients it is attached to."""

    prefix: str
    landed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, s3: Any) -> ChunkPuts:
        s3.meta.events.register_first("after-call.s3.PutObject", self._after)
        return self

    def _after(self, http_response: Any, context: dict[str, Any], **_: Any) -> None:
        if context.get("chunk_key", "").startswith(self.prefix) and 200 <= http_response.status_code < 300:
            with self._lock:
                self.landed += 1


def tag_chunk_puts(s3: Any) -> None:
    """Put each PutObject's key in its request context, for handlers that run after it."""

    def tag(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        key = object_key(params)
        if key.endswith(".ndjson"):
            context["chunk_key"] = key

    s3.meta.events.register_first("before-call.s3.PutObject", tag)


def is_next_index_page(params: dict[str, Any]) -> bool:
    body = json.loads(params["body"])
    return body.get("IndexName") is not None and "ExclusiveStartKey" in body


# --- a crash in a read ahead while a chunk is being written ----------------------------------------


HOLD = 0.5  # seconds each chunk PutObject is held, waiting for a read ahead to start meanwhile


@dataclass
class ChunkWhileReading:
    """Stages a read ahead during a chunk's PutObject: each chunk PutObject of the worker is held
    (up to HOLD seconds) until a read that `is_read` picks starts; the first such read meets it.
    `at_read` runs in the read's thread, `at_put` in the put's (before it is sent), and
    `at_answer` after the met put was answered; each may raise the fault."""

    is_read: Callable[[dict[str, Any]], bool]
    at_read: Callable[[], None]
    at_put: Callable[[], None]
    at_answer: Callable[[], None]
    chunks: int = 0  # chunk PutObjects seen
    met_chunk: int | None = None  # the chunk (1-based) in flight when the read started
    _holding: threading.Event = field(default_factory=threading.Event)
    _met: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def met(self) -> bool:
        return self._met.is_set()

    def attach(self, clients: Clients, read_event: str) -> ChunkWhileReading:
        tag_chunk_puts(clients.s3)
        clients.s3.meta.events.register("before-call.s3.PutObject", self._put)
        clients.s3.meta.events.register("after-call.s3.PutObject", self._answered)
        (clients.dynamodb if "dynamodb" in read_event else clients.s3).meta.events.register(read_event, self._read)
        return self

    def _put(self, context: dict[str, Any], **_: Any) -> None:
        if not context.get("chunk_key") or self._met.is_set():
            return
        with self._lock:
            self.chunks += 1
            chunk = self.chunks
            self._holding.set()
        self._met.wait(HOLD)
        with self._lock:
            self._holding.clear()
            if self.met_chunk != chunk:
                return
        context["met"] = True
        self.at_put()

    def _answered(self, context: dict[str, Any], **_: Any) -> None:
        if context.get("met"):
            self.at_answer()

    def _read(self, params: dict[str, Any], **_: Any) -> None:
        with self._lock:
            if not self.is_read(params) or not self._holding.is_set() or self._met.is_set():
                return
            self.met_chunk = self.chunks
            self._met.set()
        self.at_read()


def nothing() -> None:
    return None


def crash(where: str) -> Callable[[], None]:
    def die() -> None:
        raise SimulatedCrash(f"the process died {where}")

    return die


@pytest.mark.parametrize("landed", [False, True], ids=["chunk-not-landed", "chunk-landed"])
@pytest.mark.parametrize("read", ["index-page", "previous-chunk"])
def test_a_crash_in_a_read_ahead_while_a_chunk_is_written_redoes_at_most_that_chunk(read: str, landed: bool) -> None:
    with fresh_world() as world:
        # Given snapshot 2's message, handled by a worker whose process dies in a read ahead (of
        # the next index page, or of snapshot 1's next chunk) while a chunk's PutObject is in
        # flight; that PutObject lands ("chunk-landed") or not, and nothing after it is sent
        message = snapshot_2_message(world)
        clients = Clients.new()
        puts = ChunkPuts(snapshot_prefix(LOG, 2)).attach(clients.s3)
        if read == "index-page":
            is_read, read_event = is_next_index_page, "before-call.dynamodb.Query"
        else:
            is_read, read_event = lambda params: object_key(params).startswith(snapshot_prefix(LOG, 1)), "before-call.s3.GetObject"
        stage = ChunkWhileReading(
            is_read,
            at_read=crash(f"reading ahead ({read})"),
            at_put=nothing if landed else crash("before the chunk landed"),
            at_answer=crash("after the chunk landed, before its checkpoint"),
        ).attach(clients, read_event)
        # When it handles the message
        with pytest.raises(SimulatedCrash):
            handle(world, message, worker(world, clients), "dying")
        # Then the read died while a chunk was in flight, and no checkpoint names that chunk
        assert stage.met and stage.met_chunk is not None
        held = pending(world)
        assert (held.active, held.state.chunks) == ("dying", stage.met_chunk - 1)
        assert puts.landed == stage.met_chunk - (0 if landed else 1)
        # When the message comes back after the lease
        outcome, successor = redeliver_after_the_lease(world, message)
        # Then the successor resumes at the checkpoint and builds snapshot 2 equal to the replay,
        # writing the chunk that was in flight again only if it had landed
        assert outcome == Outcome.BUILT
        assert world.verify(LOG) == []
        total = chunks_of_snapshot_2(world)
        assert total > 3
        assert successor.progress.chunks_written == total - held.state.chunks
        assert puts.landed + successor.progress.chunks_written - total == (1 if landed else 0)


# --- a chunk's PutObject fails while the next page is being read -----------------------------------


@pytest.mark.parametrize("landed", [False, True], ids=["refused", "landed-then-failed"])
def test_a_chunk_put_failing_while_the_next_page_is_read_is_retried_by_redelivery(landed: bool) -> None:
    with fresh_world() as world:
        # Given snapshot 2's message, and a worker one of whose chunk PutObjects fails (S3 answers
        # 500 after the SDK's retries; "landed-then-failed": after the object was written) while
        # the next index page is being read: the read starts during the put, and is answered
        # only once the put has failed
        message = snapshot_2_message(world)
        world.clients.sqs.send_message(QueueUrl=world.worker.options.queue_url, MessageBody=message["Body"])
        world.clients.sqs.delete_message(QueueUrl=world.worker.options.queue_url, ReceiptHandle=message["ReceiptHandle"])
        clients = Clients.new()
        puts = ChunkPuts(snapshot_prefix(LOG, 2)).attach(clients.s3)
        failed = threading.Event()

        def fail() -> None:
            failed.set()
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "PutObject")

        def answer_once_the_put_failed() -> None:
            failed.wait(WAIT)

        stage = ChunkWhileReading(
            is_next_index_page,
            at_read=answer_once_the_put_failed,
            at_put=nothing if landed else fail,
            at_answer=fail,
        ).attach(clients, "before-call.dynamodb.Query")
        workers: list[SnapshotWorker] = []
        answers: list[dict[str, Any]] = []
        kept: list[Any] = []

        def invoke(event: dict[str, Any]) -> dict[str, Any]:
            workers.append(worker(world, clients if not workers else None))
            answers.append(world.invoke_worker(event, worker=workers[-1]))
            if len(workers) == 1:
                kept.append(pending(world))
            return answers[-1]

        # When the queue is drained (the failed delivery comes back after its visibility timeout)
        world.drain([world.snapshot_source(invoke)])
        # Then the failure overlapped the read, and the first delivery kept its message, its claim
        # and the checkpoints before the failed chunk (which no checkpoint names)
        assert stage.met and failed.is_set() and stage.met_chunk is not None
        assert len(answers[0]["batchItemFailures"]) == 1
        assert (kept[0].active is not None, kept[0].state.chunks) == (True, stage.met_chunk - 1)
        # and a later delivery took the claim over and built snapshot 2 equal to the replay,
        # writing the failed chunk again only if it had landed
        assert answers[-1] == {"batchItemFailures": []}
        assert world.verify(LOG) == []
        total = chunks_of_snapshot_2(world)
        written = puts.landed + sum(used.progress.chunks_written for used in workers[1:])
        assert written - total == (1 if landed else 0)


# --- a lost response on the overlapped writes -------------------------------------------------------


def handle_snapshot_2_with(fault: LostResponse | None) -> tuple[Outcome, list[str], int, int, list[str], LostResponse | None]:
    """Snapshot 2 handled once by a worker whose clients carry `fault`: its outcome, the
    snapshots' problems, chunks it wrote, chunks of snapshot 2, and the writes it made."""
    with fresh_world() as world:
        message = snapshot_2_message(world)
        clients = Clients.new()
        counter = fault or LostResponse()
        counter.attach(clients.dynamodb, clients.s3, clients.sqs)
        used = worker(world, clients)
        outcome = handle(world, message, used, "builder")
        return outcome, world.verify(LOG), used.progress.chunks_written, chunks_of_snapshot_2(world), counter.operations, fault


OVERLAPPED_WRITES: dict[str, Callable[[list[str]], int]] = {
    # the claim runs alongside the reads of snapshot 1's entry and root
    "claim": lambda operations: operations.index(next(op for op in operations if "PendingSnapshots" in op)),
    # chunk 1's PutObject runs while chunk 2 is merged and its pages read
    "first chunk": lambda operations: operations.index(next(op for op in operations if op.endswith(".ndjson"))),
    # its checkpoint too
    "first checkpoint": lambda operations: operations.index(next(op for op in operations if op.endswith(".ndjson"))) + 1,
    # the last checkpoint runs alongside the listing of the snapshot's prefix
    "last checkpoint": lambda operations: max(i for i, op in enumerate(operations) if op.endswith(".ndjson")) + 1,
}


@pytest.mark.parametrize("write", list(OVERLAPPED_WRITES))
def test_a_lost_response_on_an_overlapped_write_is_recognised_and_nothing_is_redone(write: str) -> None:
    # Given the writes of a clean handling of snapshot 2
    _, _, clean_chunks, clean_total, operations, _ = handle_snapshot_2_with(None)
    assert clean_chunks == clean_total > 3
    at = OVERLAPPED_WRITES[write](operations)
    chosen = operations[at]
    assert ("PendingSnapshots" in chosen) == (write != "first chunk")
    # When that write is applied, its response lost, and botocore's retry sends it again
    outcome, problems, chunks, total, _, fault = handle_snapshot_2_with(LostResponse(at=at + 1))
    # Then the worker goes on as if answered at once: built, equal to the replay, no chunk written twice
    assert fault is not None and fault.retried and fault.chosen == chosen
    assert outcome == Outcome.BUILT
    assert problems == []
    assert chunks == total == clean_total
    # (the claim's retry fails its condition against the claim itself, and is recognised as its own)
    assert fault.second_answer == ("ConditionalCheckFailedException" if write == "claim" else "ok")


# --- a crash at every write of the overlapped build, by name -----------------------------------------


@dataclass
class CrashAtWrite:
    """Dies before or after the write named `target` (see `write_name`, with its occurrence:
    "UpdateItem:EventLogPendingSnapshots...#3"); `target` None only records the names.

    The name travels in the call's own request context from before to after, so concurrent
    calls cannot shift it."""

    target: str | None = None
    when: str = "before"
    crashed: bool = False
    names: list[str] = field(default_factory=list)
    _seen: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, *clients: Any) -> CrashAtWrite:
        for used in clients:
            service = used.meta.service_model.service_id.hyphenize()
            used.meta.events.register(f"before-call.{service}.*", self._before)
            used.meta.events.register(f"after-call.{service}.*", self._after)
        return self

    def _before(self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if model.name not in WRITE_OPERATIONS:
            return
        base = write_name(model.name, params)
        with self._lock:
            self._seen[base] += 1
            name = f"{base}#{self._seen[base]}"
            self.names.append(name)
        context["write_name"] = name
        if name == self.target and self.when == "before" and not self.crashed:
            self.crashed = True
            raise SimulatedCrash(f"crash before {name}")

    def _after(self, context: dict[str, Any], **_: Any) -> None:
        if context.get("write_name") == self.target and self.when == "after" and not self.crashed:
            self.crashed = True
            raise SimulatedCrash(f"crash after {context['write_name']}")


@dataclass
class CrashRun:
    names: list[str]
    crashed: bool
    problems: list[str]
    cells: list[tuple[str, Any]]
    redone: int


@contextmanager
def crash_runs() -> Iterator[Callable[[str | None, str], CrashRun]]:
    """Runs of `crash_run`, each from the same start (snapshot 1 built, snapshot 2's message
    received): built once, captured, and restored before every run."""
    with fresh_world() as world:
        message = snapshot_2_message(world)
        start = world.capture()

        def run(target: str | None, when: str) -> CrashRun:
            with world.restored(start) as restored:
                return crash_run(restored, message, target, when)

        yield run


def crash_run(world: EventLogWorld, message: dict[str, Any], target: str | None, when: str) -> CrashRun:
    """Snapshot 2's `message` handled by a worker that dies at `target` (or not at all), then
    redelivered after the lease to healthy workers until built."""
    clients = Clients.new()
    tag_chunk_puts(clients.s3)
    puts = ChunkPuts(snapshot_prefix(LOG, 2)).attach(clients.s3)
    crasher = CrashAtWrite(target, when).attach(clients.dynamodb, clients.s3, clients.sqs)
    written = 0
    try:
        outcome = handle(world, message, worker(world, clients), "dying")
    except SimulatedCrash:
        outcome, successor = redeliver_after_the_lease(world, message)
        written = successor.progress.chunks_written
    # (a crash after the root was set leaves only the tail of the finish to the redelivery)
    assert outcome in {Outcome.BUILT, Outcome.ALREADY_BUILT}
    marker = world.log_store().read_marker(LOG, BUILT_SEQ)
    assert marker is not None and marker.root
    _, cells, _ = world.snapshot_cells(marker.root)
    return CrashRun(
        names=crasher.names,
        crashed=crasher.crashed,
        problems=world.verify(LOG),
        cells=[(cell.cell, cell.value) for cell in cells],
        redone=puts.landed + written - chunks_of_snapshot_2(world),
    )


def test_a_crash_before_or_after_each_write_of_an_overlapped_build_redoes_at_most_one_chunk() -> None:
    with crash_runs() as crash_run_at:
        # Given the writes of a clean handling of snapshot 2 (reads ahead in flight at nearly every one), by name
        clean = crash_run_at(None, "before")
        assert clean.problems == [] and clean.redone == 0
        assert len(set(clean.names)) == len(clean.names)
        assert sum(name.startswith("PutObject") and ".ndjson" in name for name in clean.names) > 3
        failures: list[str] = []
        # When the worker's process dies before, and after, each of them
        for name in clean.names:
            for when in ("before", "after"):
                run = crash_run_at(name, when)
                # Then the redelivery builds the same snapshot, equal to the replay, with at most one chunk written again
                if not run.crashed:
                    failures.append(f"{when} {name}: no crash happened")
                if run.problems or run.cells != clean.cells:
                    failures.append(f"{when} {name}: {run.problems or 'cells differ from the clean pass'}")
                if run.redone > 1:
                    failures.append(f"{when} {name}: {run.redone} chunks written again")
    assert failures == []


def test_the_write_names_of_a_build_are_the_same_in_every_run() -> None:
    # Given two clean handlings of snapshot 2, each in a world of its own, with reads ahead racing its writes
    with crash_runs() as first_world:
        first = first_world(None, "before")
    with crash_runs() as second_world:
        second = second_world(None, "before")
    # Then they made the same writes in the same order: a crash named by a write hits the same write
    assert first.names == second.names


def test_identity_helpers_name_writes_by_what_they_write() -> None:
    # Given serialized requests as botocore hands them to its before-call handlers
    put = {"url_path": "/bucket/snapshots/sheet-o/0000000002/abc.ndjson", "body": b"cells"}
    update = {"url_path": "/", "body": json.dumps({"TableName": "Pending", "Key": {}}).encode()}
    send = {"url_path": "/", "body": json.dumps({"QueueUrl": "https://sqs/123/snapshots"}).encode()}
    # Then each is named by its object, its table or its queue
    assert write_name("PutObject", put) == "PutObject:/bucket/snapshots/sheet-o/0000000002/abc.ndjson"
    assert object_key(put) == "snapshots/sheet-o/0000000002/abc.ndjson"
    assert write_name("UpdateItem", update) == "UpdateItem:Pending"
    assert write_name("ChangeMessageVisibility", send) == "ChangeMessageVisibility:snapshots"
