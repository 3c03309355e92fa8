"""Idempotent append on the embedded cloud (tables from the synthesized template).

The entry key is the client's position, so a retried request meets its own entry; another
request at a taken position is a clear conflict; the head advances in the same transaction.
"""

from __future__ import annotations

import threading
from collections import Counter
from decimal import Decimal

import pytest

from devtools.aws.faults import SimulatedCrash, WriteBoundaryCrasher
from devtools.aws.moto_patches import atomic_moto_dynamodb
from devtools.event_log_world import EventLogWorld, edit_request
from devtools.sheet_workload import Edit, sheet_edits
from runtime.event_log.entries import EntryKind
from runtime.event_log.errors import AppendConflict, HeadMoved, RequestMismatch
from runtime.event_log.logic import next_marker
from runtime.event_log.models import AppendRequest, CellEvent, Head, LogEntry
from runtime.event_log.objects import S3Objects
from runtime.event_log.service import EventLogService
from runtime.event_log.store import DynamoLogStore

LOG = "sheet-a"


def kinds(world: EventLogWorld, log_id: str = LOG) -> Counter[str]:
    return Counter(item["kind"] for item in world.entries(log_id))


def test_the_same_append_twice_writes_once_and_returns_the_original_result(log_world: EventLogWorld) -> None:
    # Given an appended event
    first = log_world.append(LOG, 1, "B2", "42")
    # When the client retries the very same request (same request id, position and event)
    again = log_world.append(LOG, 1, "B2", "42")
    # Then it is reported as a duplicate of the original, and the log holds one entry
    assert (first.duplicate, again.duplicate) == (False, True)
    assert (again.position, again.request_id) == (first.position, first.request_id)
    assert [item["seq"] for item in log_world.entries(LOG)] == [Decimal(1)]
    assert log_world.log_store().read_head(LOG).next_position == 2


def test_a_retry_after_later_appends_is_still_a_duplicate(log_world: EventLogWorld) -> None:
    # Given an append whose response was lost, and more appends after it
    log_world.append(LOG, 1, "A1", "x")
    log_world.append(LOG, 2, "A2", "y", request_id="other-writer-2")
    # When the first request is retried
    result = log_world.append(LOG, 1, "A1", "x")
    # Then nothing is written again
    assert result.duplicate
    assert len(log_world.entries(LOG)) == 2


def test_a_reused_request_id_with_another_event_is_refused(log_world: EventLogWorld) -> None:
    # Given an appended event
    log_world.append(LOG, 1, "A1", "x")
    # When the same request id comes back with another value
    # Then it is refused instead of silently answered with the old result
    with pytest.raises(RequestMismatch, match="different event"):
        log_world.append(LOG, 1, "A1", "changed")


def test_a_taken_position_is_a_conflict_that_names_the_next_position(log_world: EventLogWorld) -> None:
    # Given position 1 taken by one writer
    log_world.append(LOG, 1, "A1", "mine", request_id="writer-one-1")
    # When another writer appends at the same position
    with pytest.raises(AppendConflict) as conflict:
        log_world.append(LOG, 1, "A1", "theirs", request_id="writer-two-1")
    # Then it learns where to append instead, and the first write stands
    assert conflict.value.next_position == 2
    assert [item["value"] for item in log_world.entries(LOG)] == ["mine"]


def test_a_position_ahead_of_the_log_is_a_conflict(log_world: EventLogWorld) -> None:
    # Given an empty log
    # When a client appends at position 5
    with pytest.raises(AppendConflict, match="ahead of the log") as conflict:
        log_world.append(LOG, 5, "A1", "x")
    # Then nothing is written and the next position is 1
    assert conflict.value.next_position == 1
    assert log_world.entries(LOG) == []


def test_concurrent_writers_append_every_event_exactly_once(log_world: EventLogWorld) -> None:
    # Given four writers, each with 15 events of its own, racing for the next position
    from devtools.event_log_world import client

    appended: list[str] = []
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        service = log_world.service(client("dynamodb"))
        store = DynamoLogStore(log_world.api.log_table, client=client("dynamodb"))
        try:
            for index in range(15):
                request_id = f"{name}-event-{index:03d}"
                while True:  # a client's loop: append at the head it read, rebase on conflict
                    position = store.read_head(LOG).next_position
                    try:
                        service.append(AppendRequest(LOG, request_id, position, CellEvent(EntryKind.SET_CELL, "C3", request_id)))
                        appended.append(request_id)
                        break
                    except AppendConflict:
                        continue
        except BaseException as err:
            errors.append(err)

    # When they run at the same time (DynamoDB's conditional writes are atomic)
    with atomic_moto_dynamodb():
        threads = [threading.Thread(target=writer, args=(f"w{number}",)) for number in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    # Then every event is in the log exactly once, at positions 1..60 with no gap
    assert errors == []
    events = log_world.events(LOG)
    assert sorted(event.request_id for event in events) == sorted(appended)
    assert len(set(appended)) == 60
    assert [event.position for event in events] == list(range(1, 61))
    assert log_world.log_store().read_head(LOG).next_position == 61


def test_a_snapshot_entry_is_appended_every_n_events(log_world: EventLogWorld) -> None:
    # Given the small test configuration (a Snapshot entry every 20 events)
    every = log_world.api.options.snapshot_every
    # When 3 x 20 + 5 events are appended
    log_world.append_edits(LOG, sheet_edits(seed=1, count=3 * every + 5))
    # Then three Snapshot entries sit right after events 20, 40 and 60, each pointing at the previous cut
    markers = [item for item in log_world.entries(LOG) if item["kind"] == "Snapshot"]
    assert [(item["seq"], item["snapshot"], item["cut"], item["previous_cut"]) for item in markers] == [
        (Decimal("20.5"), 1, 20, 0),
        (Decimal("40.5"), 2, 40, 20),
        (Decimal("60.5"), 3, 60, 40),
    ]
    head = log_world.log_store().read_head(LOG)
    assert (head.next_position, head.snapshots, head.last_cut) == (66, 3, 60)
    # and every event is filed under the segment that its snapshot builds from
    assert [event.segment for event in log_world.events(LOG)] == [1] * 20 + [2] * 20 + [3] * 20 + [4] * 5


def test_a_missed_snapshot_decision_is_caught_up_by_the_next_append(log_world: EventLogWorld) -> None:
    # Given appends where the process dies right after the 20th event committed (before its decision)
    every = log_world.api.options.snapshot_every
    edits = sheet_edits(seed=2, count=every + 1)
    log_world.append_edits(LOG, edits[: every - 1])
    crash = WriteBoundaryCrasher(at=1, when="after").attach(log_world.clients.dynamodb)
    with pytest.raises(SimulatedCrash):
        log_world.append_edits(LOG, [edits[every - 1]])
    crash.detach(log_world.clients.dynamodb)
    assert kinds(log_world)["Snapshot"] == 0
    # When the next event is appended
    log_world.append_edits(LOG, [edits[every]])
    # Then the Snapshot entry is appended, covering both events
    markers = [item for item in log_world.entries(LOG) if item["kind"] == "Snapshot"]
    assert [(item["snapshot"], item["cut"]) for item in markers] == [(1, every + 1)]


def test_the_retried_request_after_a_crash_catches_up_the_decision_too(log_world: EventLogWorld) -> None:
    # Given the 20th event committed but its response and decision lost to a crash
    every = log_world.api.options.snapshot_every
    edits = sheet_edits(seed=3, count=every)
    log_world.append_edits(LOG, edits[:-1])
    crash = WriteBoundaryCrasher(at=1, when="after").attach(log_world.clients.dynamodb)
    with pytest.raises(SimulatedCrash):
        log_world.append_edits(LOG, edits[-1:])
    crash.detach(log_world.clients.dynamodb)
    # When the client retries the same request
    [result] = log_world.append_edits(LOG, edits[-1:])
    # Then it is a duplicate, and the Snapshot entry is there
    assert result.duplicate
    assert kinds(log_world) == Counter(
        {"SetCell": sum(e.value is not None for e in edits), "ClearCell": sum(e.value is None for e in edits), "Snapshot": 1}
    )


def test_a_snapshot_entry_between_head_read_and_write_makes_the_append_retry(log_world: EventLogWorld) -> None:
    # Given 10 events, and a rival whose Snapshot entry lands between our head read and our write
    log_world.append_edits(LOG, sheet_edits(seed=4, count=10))

    class RivalCutsFirst(DynamoLogStore):
        attempts = 0

        def append(self, entry: LogEntry, head: Head, created_at: str) -> None:
            self.attempts += 1
            if self.attempts == 1:
                fresh = self.read_head(entry.log_id)
                assert self.append_marker(next_marker(fresh), fresh, created_at)
            super().append(entry, head, created_at)

    store = RivalCutsFirst(log_world.api.log_table, client=log_world.clients.dynamodb)
    service = EventLogService(
        store, S3Objects(log_world.api.bucket, client=log_world.clients.s3), clock=log_world.clock, sleep=lambda _: None
    )
    # When event 11 is appended
    result = service.append(edit_request(LOG, Edit(11, "Z9", "after the cut")))
    # Then the first transaction met the moved head, the retry filed the event under segment 2,
    # and the rival's Snapshot entry covers exactly events 1..10
    assert store.attempts == 2
    assert not result.duplicate
    assert [(event.position, event.segment) for event in log_world.events(LOG)][-2:] == [(10, 1), (11, 2)]
    markers = [item for item in log_world.entries(LOG) if item["kind"] == "Snapshot"]
    assert [(item["cut"], item["seq"]) for item in markers] == [(10, Decimal("10.5"))]


def test_a_stale_head_is_refused_by_the_transaction(log_world: EventLogWorld) -> None:
    # Given a log whose head moved on (a Snapshot entry) after a writer read it
    log_world.append_edits(LOG, sheet_edits(seed=5, count=3))
    store = log_world.log_store()
    head = store.read_head(LOG)
    assert store.append_marker(next_marker(head), head, "now")
    # When the writer appends with the stale head
    entry = LogEntry(LOG, 4, "stale-writer-4", CellEvent(EntryKind.SET_CELL, "Z9", "stale"), head.open_segment)
    # Then the transaction fails on the head's condition and writes nothing
    with pytest.raises(HeadMoved):
        store.append(entry, head, "now")
    assert store.read_entry(LOG, 4) is None
