"""The event log on the embedded cloud: tables, bucket and queues from the synthesized template,
every handler's settings from its synthesized environment, a virtual clock, and the three
deliveries Lambda would make (table stream -> router, snapshot queue -> worker, payload queue
-> finalizer). Plus an independent check of the end state: every snapshot against a replay.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from devtools.aws.call_audit import acting_as
from devtools.aws.clients import new_client
from devtools.aws.esm import EventSourceMapping, ListShard
from devtools.aws.lambda_context import ClockedLambdaContext, FakeLambdaContext, as_lambda_context
from devtools.aws.moto_patches import VirtualClock, embedded_aws, fast_transactions
from devtools.aws.moto_state import MotoState
from devtools.aws.sqs_esm import SqsEventSource, next_visible_at, queue_depth
from devtools.aws.table_stream import TableStream, dynamodb_stream_event, filter_patterns
from devtools.aws.template_resources import EmbeddedCloud, Template, find_function, resources_of_type
from devtools.event_log_replay import replay
from devtools.sheet_workload import Edit
from ops.event_log_store import LogRepairStore
from runtime.event_log import contract as event_log_contract
from runtime.event_log import finalizer_handler, finalizer_wiring, router_handler, router_wiring, worker_handler, worker_wiring
from runtime.event_log.api_wiring import ApiSettings
from runtime.event_log.entries import CELL_KINDS, EntryKind
from runtime.event_log.finalizer_wiring import FinalizerSettings
from runtime.event_log.logic import chain_digest, decode_chunk
from runtime.event_log.models import AppendRequest, AppendResult, CellEvent, LogEntry
from runtime.event_log.objects import S3Objects, SqsQueue
from runtime.event_log.router_wiring import RouterSettings
from runtime.event_log.service import EventLogService
from runtime.event_log.snapshots import SnapshotWorker, WorkerOptions
from runtime.event_log.store import DynamoLogStore, DynamoPendingStore, entry_from_item, marker_from_item
from runtime.event_log.worker_wiring import WorkerSettings
from runtime.shared import aws
from runtime.shared.observability import metrics

REGION = "us-east-1"


def edit_request(log_id: str, edit: Edit, request_id: str | None = None) -> AppendRequest:
    kind = EntryKind.SET_CELL if edit.value is not None else EntryKind.CLEAR_CELL
    return AppendRequest(log_id, request_id or edit.request_id, edit.position, CellEvent(kind, edit.cell, edit.value))


def client(service: str) -> Any:
    return new_client(service)


@contextmanager
def embedded_event_log_cloud(clock: VirtualClock) -> Iterator[None]:
    """moto with DynamoDB's transaction semantics (fast) and SQS on the virtual clock."""
    with embedded_aws(), fast_transactions(), clock.driving_sqs():
        yield


class Clients(aws.Clients):
    """The embedded cloud's clients: the type the wiring builds with, region pinned."""

    @classmethod
    def new(cls) -> Clients:
        return cls(dynamodb=client("dynamodb"), s3=client("s3"), sqs=client("sqs"))


@dataclass(frozen=True)
class WorldState:
    """An `EventLogWorld` at one moment (see `EventLogWorld.capture`)."""

    moto: MotoState
    now: float
    rng: tuple[Any, ...]
    stream: TableStream


@dataclass
class EventLogWorld:
    template: Template
    cloud: EmbeddedCloud
    clock: VirtualClock
    clients: Clients
    api: ApiSettings
    router: RouterSettings
    worker: WorkerSettings
    finalizer: FinalizerSettings
    stream: TableStream
    rng: random.Random = field(default_factory=lambda: random.Random(7))

    @classmethod
    def create(
        cls, template: Template, clock: VirtualClock, *, overrides: Mapping[str, Mapping[str, str]] | None = None, seed: int = 7
    ) -> EventLogWorld:
        """Call inside `embedded_event_log_cloud(clock)`. `overrides` maps a handler path to
        environment variables that replace the synthesized ones (smaller chunks, say)."""
        clients = Clients.new()
        cloud = EmbeddedCloud(template).create(dynamodb=clients.dynamodb, sqs=clients.sqs, s3=clients.s3)

        def environment(handler: str) -> dict[str, str]:
            return {**cloud.function_environment(handler), **(overrides or {}).get(handler, {})}

        api = ApiSettings.from_env(environment(event_log_contract.HANDLER_API))
        mapping = cloud.event_source_mapping(event_log_contract.HANDLER_ROUTER)
        stream_arn = clients.dynamodb.describe_table(TableName=api.log_table)["Table"]["LatestStreamArn"]
        return cls(
            template=template,
            cloud=cloud,
            clock=clock,
            clients=clients,
            api=api,
            router=RouterSettings.from_env(environment(event_log_contract.HANDLER_ROUTER)),
            worker=WorkerSettings.from_env(environment(event_log_contract.HANDLER_WORKER)),
            finalizer=FinalizerSettings.from_env(environment(event_log_contract.HANDLER_FINALIZER)),
            stream=TableStream(api.log_table, stream_arn, filter_patterns(mapping)),
            rng=random.Random(seed),
        )

    def capture(self) -> WorldState:
        """This world as it is now: moto's state, the clock's time, the random draws, the stream's position."""
        return WorldState(MotoState.capture(), self.clock(), self.rng.getstate(), replace(self.stream))

    @contextmanager
    def restored(self, state: WorldState) -> Iterator[EventLogWorld]:
        """This world put back to `state`, on a new clock at `state.now` that drives SQS while the
        block runs: a run in it starts where a run on the world as captured started, and nothing
        it changes survives the next restore."""
        clock = VirtualClock(state.now)
        with clock.driving_sqs():
            state.moto.restore()
            rng = random.Random()
            rng.setstate(state.rng)
            yield replace(self, clock=clock, rng=rng, stream=replace(state.stream))

    # --- the API ------------------------------------------------------------------------------

    def log_store(self, dynamodb: Any = None) -> DynamoLogStore:
        return DynamoLogStore(self.api.log_table, client=dynamodb or self.clients.dynamodb)

    def service(self, dynamodb: Any = None) -> EventLogService:
        return EventLogService(
            self.log_store(dynamodb),
            S3Objects(self.api.bucket, client=self.clients.s3),
            self.api.options,
            clock=self.clock,
            sleep=lambda _: None,
        )

    # Appends run the API function's service directly (no HTTP event): its calls are that function's.
    def append(self, log_id: str, position: int, cell: str, value: str | None = None, *, request_id: str | None = None) -> AppendResult:
        with acting_as(event_log_contract.HANDLER_API):
            return self.service().append(edit_request(log_id, Edit(position, cell, value), request_id))

    def append_edits(self, log_id: str, edits: Iterable[Edit], dynamodb: Any = None) -> list[AppendResult]:
        service = self.service(dynamodb)
        with acting_as(event_log_contract.HANDLER_API):
            return [service.append(edit_request(log_id, edit)) for edit in edits]

    # --- the functions, as their event sources invoke them -------------------------------------

    def function_timeout(self, handler: str) -> int:
        return int(self.template["Resources"][find_function(self.template, handler)]["Properties"]["Timeout"])

    def snapshot_worker(
        self, clients: Clients | None = None, options: WorkerOptions | None = None, *, kind: type[SnapshotWorker] = SnapshotWorker
    ) -> SnapshotWorker:
        used = clients or self.clients
        return kind(
            DynamoLogStore(self.worker.log_table, client=used.dynamodb),
            DynamoPendingStore(self.worker.pending_table, client=used.dynamodb),
            S3Objects(self.worker.bucket, client=used.s3),
            SqsQueue(client=used.sqs),
            options or self.worker.options,
            clock=self.clock,
            rng=self.rng,
        )

    def worker_deps(self, snapshot_worker: SnapshotWorker) -> worker_wiring.WorkerDeps:
        """The worker function's deps as its handler builds them, with this world's worker in them."""
        return replace(worker_wiring.build(self.worker, self.clients), new_worker=lambda: snapshot_worker)

    def invoke_worker(
        self, event: Mapping[str, Any], *, worker: SnapshotWorker | None = None, context: ClockedLambdaContext | None = None
    ) -> dict[str, Any]:
        snapshot_worker = worker or self.snapshot_worker()
        used_context = context or ClockedLambdaContext(
            clock=self.clock, timeout_seconds=self.function_timeout(event_log_contract.HANDLER_WORKER)
        )
        try:
            return worker_handler.handle(dict(event), as_lambda_context(used_context), self.worker_deps(snapshot_worker))
        finally:
            metrics.clear_metrics()  # no Lambda runtime flushes them here

    def invoke_finalizer(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """The finalizer's entry point, built through the wiring on this world's clients."""
        try:
            return finalizer_handler.handle(
                dict(event), as_lambda_context(FakeLambdaContext()), finalizer_wiring.build(self.finalizer, self.clients)
            )
        finally:
            metrics.clear_metrics()  # no Lambda runtime flushes them here

    def invoke_router(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """The router's entry point, built through the wiring on this world's clients."""
        try:
            return router_handler.handle(
                dict(event), as_lambda_context(FakeLambdaContext()), router_wiring.build(self.router, self.clients)
            )
        finally:
            metrics.clear_metrics()

    def route(self) -> int:
        """Deliver the stream records written since the last call to the router, as its mapping would."""
        records = self.stream.poll()
        if not records:
            return 0
        mapping = self.cloud.event_source_mapping(event_log_contract.HANDLER_ROUTER)
        esm = EventSourceMapping(
            self.invoke_router,
            batch_size=int(mapping["BatchSize"]),
            retry_attempts=int(mapping["MaximumRetryAttempts"]),
            bisect_on_error=bool(mapping["BisectBatchOnFunctionError"]),
            to_event=dynamodb_stream_event,
        )
        esm.drain(ListShard(records))
        return len(records)

    def queue_arn(self, url: str) -> str:
        return str(self.clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])

    def snapshot_source(self, invoke: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> SqsEventSource:
        url = self.worker.options.queue_url
        return SqsEventSource(self.clients.sqs, url, self.queue_arn(url), invoke or self.invoke_worker, batch_size=1)

    def payload_source(self) -> SqsEventSource:
        url = self.finalizer.queue_url
        return SqsEventSource(self.clients.sqs, url, self.queue_arn(url), self.invoke_finalizer, batch_size=10)

    def drain(self, sources: list[SqsEventSource] | None = None, *, max_rounds: int = 100_000) -> int:
        """Route the stream and run the queues until both are empty, jumping the virtual clock
        over visibility timeouts and backoffs. Returns the rounds it took."""
        used = sources or [self.snapshot_source(), self.payload_source()]
        for rounds in range(max_rounds):
            self.route()
            if sum(source.poll_once() for source in used):
                continue
            waiting = [at for at in (next_visible_at(source.queue_url) for source in used) if at is not None]
            if not waiting:
                return rounds
            self.clock.advance(max(0.001, min(waiting) - self.clock()) + 0.001)
        raise RuntimeError(f"queues did not drain in {max_rounds} rounds")

    def dead_letters(self, queue_logical_prefix: str = "EventLogSnapshotDeadLetterQueue") -> list[dict[str, Any]]:
        url = next(
            self.cloud.names[lid] for lid in resources_of_type(self.template, "AWS::SQS::Queue") if lid.startswith(queue_logical_prefix)
        )
        messages: list[Any] = []
        while True:
            batch = self.clients.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get(
                "Messages", []
            )
            if not batch:
                return messages
            messages.extend(batch)

    def depth(self, url: str) -> int:
        return queue_depth(self.clients.sqs, url)

    # --- the end state --------------------------------------------------------------------------

    def entries(self, log_id: str) -> list[dict[str, Any]]:
        return list(LogRepairStore(self.api.log_table, client=self.clients.dynamodb).scan_log(log_id, Decimal(0)))

    def events(self, log_id: str) -> list[LogEntry]:
        return [entry_from_item(item) for item in self.entries(log_id) if EntryKind(item["kind"]) in CELL_KINDS]

    def snapshot_cells(self, root_key: str) -> tuple[dict[str, Any], list[Any], str]:
        """A built snapshot: its root document, its cells in stored order, the recomputed digest."""
        objects = S3Objects(self.worker.bucket, client=self.clients.s3)
        root = json.loads(objects.get(root_key))
        cells: list[Any] = []
        digest = ""
        for key in root["chunks"]:
            body = objects.get(key)
            digest = chain_digest(digest, body)
            cells.extend(decode_chunk(body))
        return root, cells, digest

    def verify(self, log_id: str) -> list[str]:
        """Every snapshot equals a from-scratch replay of the log up to its entry; the pointer is
        on the newest; nothing is pending; no object is left that no snapshot or entry names."""
        problems: list[str] = []
        items = self.entries(log_id)
        events = [entry_from_item(item) for item in items if EntryKind(item["kind"]) in CELL_KINDS]
        markers = [marker_from_item(item) for item in items if item["kind"] == EntryKind.SNAPSHOT.value]
        referenced: set[str] = set()
        for marker in markers:
            if not marker.root:
                problems.append(f"snapshot {marker.number} (cut {marker.cut}) was never built")
                continue
            root, cells, digest = self.snapshot_cells(marker.root)
            referenced.update([marker.root, *root["chunks"]])
            orders = [cell.order for cell in cells]
            if orders != sorted(set(orders)):
                problems.append(f"snapshot {marker.number}: cells are not in strictly increasing cell order")
            if digest != root["digest"]:
                problems.append(f"snapshot {marker.number}: digest {root['digest']} does not match its chunks ({digest})")
            expected = replay(event for event in events if event.position <= marker.cut)
            stored = {cell.cell: cell for cell in cells}
            if stored != expected:
                wrong = sorted(set(stored.items()) ^ set(expected.items()), key=lambda pair: pair[0])[:3]
                problems.append(f"snapshot {marker.number}: {len(stored)} cells differ from the replay's {len(expected)}, e.g. {wrong}")
            if root["cells"] != len(expected) or root["cut"] != marker.cut:
                problems.append(f"snapshot {marker.number}: root says {root['cells']} cells at cut {root['cut']}")
        head = self.log_store().read_head(log_id)
        built = [marker for marker in markers if marker.root]
        if built and (head.built != built[-1].number or head.built_root != built[-1].root):
            problems.append(f"the last-snapshot pointer is at {head.built}, the newest built snapshot is {built[-1].number}")
        objects = S3Objects(self.worker.bucket, client=self.clients.s3)
        strays = sorted(set(objects.keys(f"{event_log_contract.SNAPSHOTS_PREFIX}{log_id}/")) - referenced)
        if strays:
            problems.append(f"{len(strays)} snapshot objects no root names, e.g. {strays[:3]}")
        pending = [p for p in DynamoPendingStore(self.worker.pending_table, client=self.clients.dynamodb).scan() if p.log_id == log_id]
        if pending:
            problems.append(f"{len(pending)} pending snapshots left: {[str(p.seq) for p in pending]}")
        problems.extend(self._verify_payloads(log_id, events))
        return problems

    def _verify_payloads(self, log_id: str, events: list[LogEntry]) -> list[str]:
        problems: list[str] = []
        s3 = self.clients.s3
        in_log = {event.event.payload.key for event in events if event.event.payload is not None}
        for key in S3Objects(self.worker.bucket, client=s3).keys(f"{event_log_contract.PAYLOADS_PREFIX}{log_id}/"):
            tags = s3.get_object_tagging(Bucket=self.worker.bucket, Key=key)["TagSet"]
            if key in in_log and tags:
                problems.append(f"payload {key} is in the log but still tagged {tags}")
            if key not in in_log and not tags:
                problems.append(f"payload {key} is in no entry and untagged: the lifecycle rule would never delete it")
        return problems
