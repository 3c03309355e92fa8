"""`make demo`, event-log section: a 50,000-event sheet with several snapshots, built through
random duplicate and out-of-order deliveries, hand-offs and worker crashes, then every snapshot
checked against a from-scratch replay of the log.

Tables, bucket and queues come from the synthesized dev template; appends go through the API's
service; the table stream is filtered and routed as the event source mapping would; SQS
visibility timeouts, backoffs and leases run on a virtual clock.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from devtools.aws.call_audit import acting_as
from devtools.aws.faults import WriteBoundaryCrasher
from devtools.aws.lambda_context import ClockedLambdaContext
from devtools.aws.moto_patches import VirtualClock
from devtools.demo_progress import Progress, progress
from devtools.event_log_world import Clients, EventLogWorld, edit_request, embedded_event_log_cloud
from devtools.sheet_workload import sheet_edits
from runtime.event_log import contract as event_log_contract
from runtime.event_log.entries import EntryKind
from runtime.event_log.messages import SideEffectMessage
from runtime.event_log.objects import S3Objects
from runtime.event_log.snapshots import Outcome, SnapshotWorker

LOG = "demo-sheet"
# Demo settings over the dev template's: five snapshots whatever the size (10,000 events each
# at the default 50,000), and chunks small enough that each snapshot is several chunks (so
# crashes and hand-offs land between checkpoints).
SNAPSHOTS = 5
CHUNK_BYTES = 16_384


class CountingWorker(SnapshotWorker):
    """The worker, counting what happened to each message it handled (in the class's counter)."""

    outcomes: ClassVar[Counter[str]] = Counter()

    def handle(self, message: SideEffectMessage, receipt_handle: str, remaining_ms: Callable[[], int], token: str) -> Outcome:
        outcome = super().handle(message, receipt_handle, remaining_ms, token)
        self.outcomes[outcome.value] += 1
        return outcome


class SlowChunks(S3Objects):
    """The bucket, where writing a chunk takes `seconds` of the (virtual) clock."""

    def __init__(self, bucket: str, *, client: Any, clock: VirtualClock, seconds: float) -> None:
        super().__init__(bucket, client=client)
        self._clock = clock
        self._seconds = seconds

    def put(self, key: str, body: bytes) -> None:
        super().put(key, body)
        if key.endswith(".ndjson"):
            self._clock.advance(self._seconds)


@dataclass
class Chaos:
    """What the demo does to deliveries: duplicates, reordering, crashes, short time limits."""

    rng: random.Random
    duplicate_rate: float = 0.4
    max_delay_seconds: int = 900  # SQS's longest delay
    crash_rate: float = 0.25
    slow_rate: float = 0.5
    counts: Counter[str] = field(default_factory=Counter)
    chunks_written: int = 0

    @property
    def outcomes(self) -> Counter[str]:
        return CountingWorker.outcomes

    def scramble(self, world: EventLogWorld) -> None:
        """Take the router's snapshot messages off the queue and put them back late, out of order, some twice."""
        url = world.worker.options.queue_url
        while batch := world.clients.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get(
            "Messages"
        ):
            for message in batch:
                copies = 2 if self.rng.random() < self.duplicate_rate else 1
                self.counts["duplicated"] += copies - 1
                for _ in range(copies):
                    world.clients.sqs.send_message(
                        QueueUrl=url,
                        MessageBody=message["Body"],
                        MessageAttributes=message.get("MessageAttributes", {}),
                        DelaySeconds=self.rng.randint(0, self.max_delay_seconds),
                    )
                world.clients.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    def invoker(self, world: EventLogWorld) -> Callable[[dict[str, Any]], dict[str, Any]]:
        timeout = world.function_timeout(event_log_contract.HANDLER_WORKER)

        def invoke(event: dict[str, Any]) -> dict[str, Any]:
            clients = Clients.new()
            if self.rng.random() < self.crash_rate:
                # The process dies at a random write of this invocation (if it gets that far).
                self.counts["crash planned"] += 1
                WriteBoundaryCrasher(at=self.rng.randint(1, 24), when=self.rng.choice(["before", "after"])).attach(
                    clients.dynamodb, clients.s3, clients.sqs
                )
            worker = world.snapshot_worker(clients, kind=CountingWorker)
            if self.rng.random() < self.slow_rate:
                # A slow invocation: every chunk takes a third of the function's time, so it
                # hands off before the time limit and the next delivery resumes.
                worker._objects = SlowChunks(world.worker.bucket, client=clients.s3, clock=world.clock, seconds=timeout / 3)
            try:
                return world.invoke_worker(event, worker=worker, context=ClockedLambdaContext(clock=world.clock, timeout_seconds=timeout))
            finally:
                self.chunks_written += worker.progress.chunks_written

        return invoke


def run_event_log_demo(template: dict[str, Any], *, events: int = 50_000, seed: int = 2026, rounds: int = 10) -> int:
    started = time.perf_counter()
    clock = VirtualClock()
    rng = random.Random(seed)
    chaos = Chaos(rng)
    CountingWorker.outcomes.clear()
    edits = sheet_edits(seed=seed, count=events)
    settings = {
        event_log_contract.HANDLER_API: {event_log_contract.ENV_SNAPSHOT_EVERY: str(max(10, events // SNAPSHOTS))},
        event_log_contract.HANDLER_WORKER: {event_log_contract.ENV_CHUNK_BYTES: str(CHUNK_BYTES)},
    }
    with embedded_event_log_cloud(clock):
        world = EventLogWorld.create(template, clock, overrides=settings, seed=seed)
        service = world.service()
        worker = chaos.invoker(world)
        building: list[Progress] = []  # the counter of the phase that delivers the snapshot messages

        def counted(event: dict[str, Any]) -> dict[str, Any]:
            for counter in building:
                counter.update()
            return worker(event)

        snapshot_source = world.snapshot_source(counted)
        sources = [snapshot_source, world.payload_source()]
        per_round = -(-events // rounds)
        retried_appends = 0
        with progress("event log: appending", events, "events") as appended:
            for start in range(0, events, per_round):
                # The API function's service, called directly: its calls are checked against that function's role.
                with acting_as(event_log_contract.HANDLER_API):
                    for edit in edits[start : start + per_round]:
                        service.append(edit_request(LOG, edit))
                        if rng.random() < 0.01:  # a client retry after a lost response
                            retried_appends += int(service.append(edit_request(LOG, edit)).duplicate)
                        appended.update()
                clock.advance(60)
                world.route()
                chaos.scramble(world)
        # The messages of all snapshots are now queued with random delays (and some twice), so
        # later snapshots often arrive before earlier ones.
        with progress("event log: building snapshots", 0, "deliveries to the worker") as delivered:
            building.append(delivered)
            world.drain(sources)
        print("  event log: checking every snapshot against a from-scratch replay", flush=True)
        problems = world.verify(LOG)
        markers = [item for item in world.entries(LOG) if item["kind"] == EntryKind.SNAPSHOT]
        chunk_total = sum(len(world.snapshot_cells(item["root"])[0]["chunks"]) for item in markers if item.get("root"))
        crashes = snapshot_source.stats.function_errors
        head = world.log_store().read_head(LOG)
    snapshot_every = settings[event_log_contract.HANDLER_API][event_log_contract.ENV_SNAPSHOT_EVERY]
    lines = [
        "",
        "onceflow demo: event log + snapshots on an embedded AWS (moto), resources from the synthesized dev template",
        f"  settings              a Snapshot entry every {snapshot_every} events, chunks of {CHUNK_BYTES // 1024} KiB",
        f"  cell events appended  {head.next_position - 1:>7}  (client retries answered as duplicates: {retried_appends})",
        f"  snapshots             {len(markers):>7}  built {head.built}, {chunk_total} chunks in their roots",
        f"  snapshot deliveries   {snapshot_source.stats.delivered:>7}  (duplicates injected {chaos.counts['duplicated']}, "
        f"delays up to {chaos.max_delay_seconds} s)",
        "  outcomes              " + ", ".join(f"{name} {count}" for name, count in sorted(chaos.outcomes.items())),
        f"  injected crashes      {crashes:>7}  (planned {chaos.counts['crash planned']}; some invocations ended before their crash point)",
        f"  chunks written        {chaos.chunks_written:>7}  ({chaos.chunks_written - chunk_total} redone after crashes)",
        f"  checked               every snapshot against a from-scratch replay, the pointer, pending items, stray objects "
        f"({time.perf_counter() - started:.0f} s)",
    ]
    print("\n".join(lines))
    if problems:
        print("MISMATCH")
        for problem in problems[:20]:
            print(f"  - {problem}")
        return 1
    print("OK")
    return 0
