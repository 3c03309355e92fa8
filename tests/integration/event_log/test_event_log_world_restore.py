"""A captured event-log world, restored (devtools/aws/moto_state.py, EventLogWorld.capture): the
fault sweeps build their starting point once and restore it before every run, so a restored world
must be exactly the world as captured, and a run on it exactly a run on a fresh build.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends
from moto.sqs.models import sqs_backends

from devtools.aws.faults import WriteBoundaryCrasher
from devtools.aws.moto_patches import VirtualClock
from devtools.aws.table_stream import TableStream
from devtools.event_log_world import Clients, EventLogWorld, WorldState, embedded_event_log_cloud
from devtools.sheet_workload import sheet_edits
from tests.conftest import EVENT_LOG_STACK, SMALL_LOG, templates_for

LOG = "sheet-restore"
EDITS = sheet_edits(seed=5, count=65)  # 20 to build snapshot 1, 20 more for snapshot 2, 25 after the capture


@contextmanager
def started_world() -> Iterator[EventLogWorld]:
    """40 edits routed, snapshot 1 built and its message deleted, snapshot 2's message in flight."""
    clock = VirtualClock()
    with embedded_event_log_cloud(clock):
        world = EventLogWorld.create(templates_for("dev")[EVENT_LOG_STACK], clock, overrides=SMALL_LOG, seed=5)
        world.append_edits(LOG, EDITS[:20])
        world.drain()
        world.append_edits(LOG, EDITS[20:40])
        world.route()
        world.clients.sqs.receive_message(QueueUrl=world.worker.options.queue_url)
        yield world


def state_of(world: EventLogWorld) -> dict[str, Any]:
    """Everything a later step reads: every table's items, each table's stream records and the
    sequence number it numbers the next from, every queue's messages with all their attributes,
    every object with its tags, and the world's clock, random draws and stream position."""
    dynamodb, s3 = world.clients.dynamodb, world.clients.s3
    tables = {}
    for name in dynamodb.list_tables()["TableNames"]:
        items = dynamodb.scan(TableName=name, ConsistentRead=True)["Items"]
        shard = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(name).stream_shard
        stream = TableStream(name, "")
        records = [record.record for record in stream.poll()] if shard is not None else []
        tables[name] = (items, records, shard.starting_sequence_number if shard is not None else None)
    queues = {
        queue.name: [copy.deepcopy(vars(message)) for message in queue._messages]  # moto appends to their lists in place
        for queue in sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].queues.values()
    }
    objects = {
        (bucket["Name"], entry["Key"]): (
            s3.get_object(Bucket=bucket["Name"], Key=entry["Key"])["Body"].read(),
            s3.get_object_tagging(Bucket=bucket["Name"], Key=entry["Key"])["TagSet"],
        )
        for bucket in s3.list_buckets()["Buckets"]
        for entry in s3.list_objects_v2(Bucket=bucket["Name"]).get("Contents", [])
    }
    probe = world.rng.getstate()
    draws = [world.rng.random() for _ in range(3)]
    world.rng.setstate(probe)
    stream_position = (world.stream.seen, world.stream.dropped, world.stream._next)
    return {"tables": tables, "queues": queues, "objects": objects, "clock": world.clock(), "draws": draws, "stream": stream_position}


def test_a_restored_world_is_the_world_as_captured_after_a_run_changed_everything() -> None:
    with started_world() as world:
        # Given a world captured with snapshot 1 built and snapshot 2's message in flight
        captured = state_of(world)
        start = world.capture()
        # When a run builds snapshot 2 and more edits come in, after a new queue and bucket were made
        world.clock.advance(world.worker.options.lease_seconds + 1)
        world.clients.sqs.create_queue(QueueName="made-after-the-capture")
        world.clients.s3.create_bucket(Bucket="made-after-the-capture")
        world.append_edits(LOG, EDITS[40:])
        world.drain()
        world.rng.random()
        changed = state_of(world)
        assert changed != captured
        # Then a restore brings every table, stream, queue, object, the clock, the draws and the stream position back
        with world.restored(start) as again:
            assert state_of(again) == captured
            # and a second restore after a run on the restored world does so again
            again.drain()
        with world.restored(start) as again:
            assert state_of(again) == captured


@contextmanager
def captured_start() -> Iterator[tuple[EventLogWorld, WorldState]]:
    with started_world() as world:
        yield world, world.capture()


def items_of(world: EventLogWorld) -> dict[str, list[dict[str, Any]]]:
    return {name: items for name, (items, _, _) in state_of(world)["tables"].items()}


def without_write_token(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in item.items() if key != "write_token"}


def outcome_of_a_run(world: EventLogWorld, crash_at: int | None) -> tuple[Any, ...]:
    """The run the sweeps make: snapshot 2 delivered (after the lease) to workers on clients that
    crash at write `crash_at`, redelivered until done; its writes and the state it leaves."""
    crasher = WriteBoundaryCrasher(at=crash_at, when="before")
    clients = Clients.new()
    crasher.attach(clients.dynamodb, clients.s3, clients.sqs)
    world.clock.advance(world.worker.options.lease_seconds + 1)
    world.drain([world.snapshot_source(lambda event: world.invoke_worker(event, worker=world.snapshot_worker(clients)))])
    end = state_of(world)
    # Compared across builds, so without the write token each append stores (uuid4), and without
    # the stream records (moto gives each a random event id).
    items = {name: [without_write_token(item) for item in items] for name, (items, _, _) in end["tables"].items()}
    return crasher.operations, crasher.crashed, world.verify(LOG), items, end["objects"], end["clock"]


def test_a_run_on_a_restored_world_is_the_run_on_a_fresh_build() -> None:
    # Given a clean run and a crashing run, each on a freshly built world
    with started_world() as fresh:
        fresh_clean = outcome_of_a_run(fresh, None)
    with started_world() as fresh:
        fresh_crashed = outcome_of_a_run(fresh, 3)
    assert fresh_crashed[1] and not fresh_clean[1] and fresh_clean[2] == []
    with captured_start() as (world, start):
        # When the same runs are made on one world restored before each, in both orders
        runs = []
        for crash_at in (None, 3, None, 3):
            with world.restored(start) as again:
                runs.append((outcome_of_a_run(again, crash_at), items_of(again)))
    # Then each is the run on the fresh build: what one run changed does not leak into the next
    assert [outcome for outcome, _ in runs] == [fresh_clean, fresh_crashed, fresh_clean, fresh_crashed]
    # and the same run from the same restored start leaves exactly the same items, write tokens included
    assert runs[0][1] == runs[2][1] and runs[1][1] == runs[3][1]
