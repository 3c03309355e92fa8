"""Crash at every write boundary of the event log's other write paths: the append (with its
snapshot decision), the router's sends and the payload finalizer's untagging. After each crash
the delivery is repeated (a client retry, a stream redelivery, an SQS redelivery) and the end
state must equal one clean pass."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from devtools.event_log_world import Clients, EventLogWorld, edit_request, embedded_event_log_cloud
from devtools.faults import SimulatedCrash, WriteBoundaryCrasher
from devtools.moto_patches import VirtualClock
from devtools.sheet_workload import sheet_edits
from devtools.table_stream import dynamodb_stream_event
from runtime.event_log.finalizer_handler import handle_payload_event
from runtime.event_log.models import AppendRequest, CellEvent, EntryKind, PayloadRef
from runtime.event_log.objects import S3Objects, SqsQueue
from runtime.event_log.service import EventLogService, payload_key
from runtime.event_log.side_effects import StreamRouter
from tests.conftest import EVENT_LOG_STACK, SMALL_LOG, templates_for

LOG = "sheet-w"
EDITS = sheet_edits(seed=41, count=25)  # one Snapshot entry (every 20) and five events after it


@contextmanager
def fresh_world() -> Iterator[EventLogWorld]:
    clock = VirtualClock()
    with embedded_event_log_cloud(clock):
        yield EventLogWorld.create(templates_for("dev")[EVENT_LOG_STACK], clock, overrides=SMALL_LOG)


def log_state(world: EventLogWorld) -> list[tuple[Any, ...]]:
    head = world.log_store().read_head(LOG)
    entries = [
        (item["seq"], item["kind"], item.get("cell"), item.get("value"), item.get("request_id"), item.get("segment"))
        for item in world.entries(LOG)
    ]
    return [*entries, ("head", head.next_position, head.snapshots, head.last_cut)]


def append_all(world: EventLogWorld, crasher: WriteBoundaryCrasher | None) -> None:
    """A client appending EDITS, retrying a request whose process died (same request)."""
    clients = Clients.new()
    if crasher:
        crasher.attach(clients.dynamodb)
    service = EventLogService(
        world.log_store(clients.dynamodb),
        S3Objects(world.api.bucket, client=clients.s3),
        world.api.options,
        clock=world.clock,
        sleep=lambda _: None,
    )
    for edit in EDITS:
        try:
            service.append(edit_request(LOG, edit))
        except SimulatedCrash:
            service.append(edit_request(LOG, edit))  # the client's retry, in a new process


def test_a_crash_at_every_write_of_the_append_path_is_repaired_by_the_clients_retry() -> None:
    # Given one clean pass of 25 appends, and the writes it made (appends and the Snapshot entry)
    with fresh_world() as world:
        counter = WriteBoundaryCrasher()
        append_all(world, counter)
        clean = log_state(world)
    assert sum(1 for operation in counter.operations if operation.startswith("TransactWriteItems")) == len(EDITS) + 1
    failures = []
    # When the process dies before, and after, each of those writes
    for at in range(1, len(counter.operations) + 1):
        for when in ("before", "after"):
            with fresh_world() as world:
                crasher = WriteBoundaryCrasher(at=at, when=when)
                append_all(world, crasher)
                # Then the retried request leaves exactly the log of the clean pass
                if not crasher.crashed or log_state(world) != clean:
                    failures.append(f"{when} write {at} ({counter.operations[at - 1]})")
    assert failures == []


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_router_crash_before_or_after_its_send_is_repaired_by_redelivery(when: str) -> None:
    with fresh_world() as world:
        # Given the stream records of one Snapshot entry, and a router that dies at its send
        world.append_edits(LOG, EDITS)
        records = world.stream.poll()
        clients = Clients.new()
        WriteBoundaryCrasher(at=1, when=when).attach(clients.sqs)
        router = StreamRouter(SqsQueue(client=clients.sqs), world.router.queues)
        with pytest.raises(SimulatedCrash):
            router.route(dynamodb_stream_event(records)["Records"])
        # When Lambda redelivers the batch to a new invocation
        assert (
            StreamRouter(SqsQueue(client=world.clients.sqs), world.router.queues).route(dynamodb_stream_event(records)["Records"]).failures
            == []
        )
        # Then the snapshot is built once, whether the first send got through or not
        world.drain()
        assert world.verify(LOG) == [], when


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_finalizer_crash_before_or_after_untagging_is_repaired_by_redelivery(when: str) -> None:
    with fresh_world() as world:
        # Given a completed large payload, and a finalizer that dies at its one write
        key = payload_key(LOG, "upload-req-0042")
        world.clients.s3.put_object(Bucket=world.worker.bucket, Key=key, Body=b"big", Tagging=world.api.options.pending_tag)
        world.service().append(
            AppendRequest(LOG, "upload-req-0042", 1, CellEvent(EntryKind.LARGE_PAYLOAD, "A1", payload=PayloadRef(key, 3)))
        )
        world.route()
        crasher = WriteBoundaryCrasher(at=1, when=when)

        def invoke(event: dict[str, Any]) -> dict[str, Any]:
            clients = Clients.new()
            crasher.attach(clients.s3)
            return handle_payload_event(
                event, S3Objects(world.finalizer.bucket, client=clients.s3), SqsQueue(client=clients.sqs), world.finalizer.queue_url
            )

        source = world.payload_source()
        source.invoke = invoke
        # When the queue redelivers after the visibility timeout
        world.drain([source])
        # Then the object ends untagged, and the message was delivered twice
        assert crasher.crashed and source.stats.delivered == 2
        assert world.clients.s3.get_object_tagging(Bucket=world.worker.bucket, Key=key)["TagSet"] == []
        assert world.verify(LOG) == [], when
