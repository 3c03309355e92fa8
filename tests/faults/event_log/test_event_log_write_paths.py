"""Crash at every write boundary of the event log's other write paths: the append (with its
snapshot decision), the router's sends and the payload finalizer's untagging. After each crash
the delivery is repeated (a client retry, a stream redelivery, an SQS redelivery) and the end
state must equal one clean pass."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import pytest

from devtools.aws.faults import LostResponse, SimulatedCrash, WriteBoundaryCrasher
from devtools.aws.moto_patches import VirtualClock
from devtools.aws.table_stream import dynamodb_stream_event
from devtools.event_log_world import Clients, EventLogWorld, edit_request, embedded_event_log_cloud
from devtools.sheet_workload import sheet_edits
from runtime.event_log.entries import EntryKind
from runtime.event_log.finalizer_handler import handle_payload_event
from runtime.event_log.models import AppendRequest, CellEvent, PayloadRef
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


def append_all(world: EventLogWorld, fault: WriteBoundaryCrasher | LostResponse | None) -> list[bool]:
    """A client appending EDITS, retrying a request whose process died (same request); returns
    each request's `duplicate` flag as the client saw it."""
    clients = Clients.new()
    if fault:
        fault.attach(clients.dynamodb)
    service = EventLogService(
        world.log_store(clients.dynamodb),
        S3Objects(world.api.bucket, client=clients.s3),
        world.api.options,
        clock=world.clock,
        sleep=lambda _: None,
    )
    duplicates = []
    for edit in EDITS:
        try:
            duplicates.append(service.append(edit_request(LOG, edit)).duplicate)
        except SimulatedCrash:
            duplicates.append(service.append(edit_request(LOG, edit)).duplicate)  # the client's retry, in a new process
    return duplicates


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


def test_a_lost_response_at_every_write_of_the_append_path_is_recognised_as_the_appenders_own() -> None:
    # Given one clean pass of 25 appends and its writes (each append's transaction, and the Snapshot entry's)
    with fresh_world() as world:
        counter = LostResponse()
        append_all(world, counter)
        clean = log_state(world)
    failures = []
    # When each transaction is applied, its response lost, and botocore's retry sends it again
    for at in range(1, len(counter.operations) + 1):
        with fresh_world() as world:
            lost = LostResponse(at=at)
            duplicates = append_all(world, lost)
            # Then the retry was cancelled against the first attempt (moto, like DynamoDB after the
            # token's ten minutes, does not deduplicate it), and the appender still knew its own
            # entry: the log of the clean pass, and no request answered as a duplicate
            if (lost.retried, lost.second_answer) != (True, "TransactionCanceledException"):
                failures.append(f"write {at}: the retry answered {lost.second_answer}")
            if log_state(world) != clean or any(duplicates):
                failures.append(f"write {at} ({counter.operations[at - 1]}): duplicates {duplicates}")
            if world.entries(LOG) and not all(item.get("write_token") for item in world.entries(LOG)):
                failures.append(f"write {at}: an entry has no write token")
    assert failures == []


def test_a_lost_snapshot_entry_response_is_the_appenders_own_and_the_entry_is_written_once(caplog: pytest.LogCaptureFixture) -> None:
    with fresh_world() as world:
        # Given a log one event short of its first Snapshot entry
        world.append_edits(LOG, EDITS[:19])
        clients = Clients.new()
        lost = LostResponse(at=2).attach(clients.dynamodb)  # write 1: the 20th event; write 2: the Snapshot entry
        # When the 20th event is appended and the Snapshot entry's transaction loses its response
        caplog.set_level("INFO")
        assert world.append_edits(LOG, EDITS[19:20], clients.dynamodb)[0].duplicate is False
        # Then the retry was cancelled against the first attempt, yet the appender knew the entry as
        # its own (it logs it appended), and the entry is in the log once
        assert (lost.chosen.split(":")[0], lost.retried, lost.second_answer) == ("TransactWriteItems", True, "TransactionCanceledException")
        assert [record.message for record in caplog.records].count("snapshot entry appended") == 1
        assert [item["seq"] for item in world.entries(LOG) if item["kind"] == "Snapshot"] == [Decimal("20.5")]


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


def completed_payload(world: EventLogWorld, request_id: str) -> str:
    """A large payload uploaded tagged pending, its entry appended and routed to the payload queue; its key."""
    key = payload_key(LOG, request_id)
    world.clients.s3.put_object(Bucket=world.worker.bucket, Key=key, Body=b"big", Tagging=world.api.options.pending_tag)
    world.service().append(AppendRequest(LOG, request_id, 1, CellEvent(EntryKind.LARGE_PAYLOAD, "A1", payload=PayloadRef(key, 3))))
    world.route()
    return key


def finalizer_source(world: EventLogWorld, fault: WriteBoundaryCrasher | LostResponse) -> Any:
    """The payload queue's source, each delivery handled by a finalizer whose S3 client carries `fault`."""

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        clients = Clients.new()
        fault.attach(clients.s3)
        return handle_payload_event(
            event, S3Objects(world.finalizer.bucket, client=clients.s3), SqsQueue(client=clients.sqs), world.finalizer.queue_url
        )

    source = world.payload_source()
    source.invoke = invoke
    return source


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_finalizer_crash_before_or_after_untagging_is_repaired_by_redelivery(when: str) -> None:
    with fresh_world() as world:
        # Given a completed large payload, and a finalizer that dies at its one write
        key = completed_payload(world, "upload-req-0042")
        crasher = WriteBoundaryCrasher(at=1, when=when)
        source = finalizer_source(world, crasher)
        # When the queue redelivers after the visibility timeout
        world.drain([source])
        # Then the object ends untagged, and the message was delivered twice
        assert crasher.crashed and source.stats.delivered == 2
        assert world.clients.s3.get_object_tagging(Bucket=world.worker.bucket, Key=key)["TagSet"] == []
        assert world.verify(LOG) == [], when


def test_a_lost_response_on_the_routers_send_gives_duplicate_messages_that_build_once() -> None:
    with fresh_world() as world:
        # Given the stream records of one Snapshot entry and one large payload
        key = payload_key(LOG, "upload-req-0043")
        world.clients.s3.put_object(Bucket=world.worker.bucket, Key=key, Body=b"big", Tagging=world.api.options.pending_tag)
        world.append_edits(LOG, EDITS[:20])
        world.service().append(
            AppendRequest(LOG, "upload-req-0043", 21, CellEvent(EntryKind.LARGE_PAYLOAD, "A1", payload=PayloadRef(key, 3)))
        )
        records = world.stream.poll()
        clients = Clients.new()
        lost = [LostResponse(at=1).attach(clients.sqs), LostResponse(at=2).attach(clients.sqs)]
        # When each of the router's two sends (snapshot queue, payload queue) loses its response and is sent again
        report = StreamRouter(SqsQueue(client=clients.sqs), world.router.queues).route(dynamodb_stream_event(records)["Records"])
        # Then SQS holds each message twice, the router reports nothing failed, and the duplicates change nothing
        assert [fault.second_answer for fault in lost] == ["ok", "ok"] and report.failures == []
        assert world.depth(world.worker.options.queue_url) == 2 and world.depth(world.finalizer.queue_url) == 2
        world.drain()
        assert world.verify(LOG) == []
        assert world.clients.s3.get_object_tagging(Bucket=world.worker.bucket, Key=key)["TagSet"] == []


def test_a_lost_response_on_the_finalizers_untagging_is_a_harmless_repeat() -> None:
    with fresh_world() as world:
        # Given a completed large payload, routed to the payload queue
        key = completed_payload(world, "upload-req-0044")
        lost = LostResponse(at=1)
        source = finalizer_source(world, lost)
        # When the untagging is applied, its response lost, and botocore sends it again
        world.drain([source])
        # Then the repeat succeeds, the message is handled once, and the object is untagged
        assert (lost.retried, lost.second_answer) == (True, "ok")
        assert source.stats.delivered == 1
        assert world.clients.s3.get_object_tagging(Bucket=world.worker.bucket, Key=key)["TagSet"] == []
        assert world.verify(LOG) == []
