"""RunnerStatsService over an in-memory store (no AWS): failures, retries and what gets reported.

The fake store is a real implementation of the RunStatsStore port: its writes are conditional
on the version that was read and raise VersionConflict like DynamoDB's conditional checks do.
Races are staged by a 'rival' worker that writes between our read and our write.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import pytest

from devtools.aws.esm import lambda_event, records_from_payloads
from runtime.runner_stats.logic import fold
from runtime.runner_stats.models import (
    ArchiveChunk,
    DeviceMessage,
    FoldPolicy,
    PositionedMessage,
    Rejection,
    RejectReason,
    RunContext,
    RunKey,
    StreamPosition,
    TendencySlot,
    TimestampWindow,
    UserTendency,
)
from runtime.runner_stats.service import RunnerStatsService, ServiceOptions
from runtime.runner_stats.settings import RunnerStatsSettings
from runtime.runner_stats.store import RunStatsStore, RunStatsTables
from runtime.shared.consistency import VersionConflict
from runtime.shared.settings import SettingsError

BASE_TS = 1_509_547_364_734
RUN_A = RunKey(7, 1)
RUN_B = RunKey(7, 2)  # same user as A
RUN_C = RunKey(8, 1)  # another user
RUN_D = RunKey(8, 2)  # same user as C


class InjectedFailure(RuntimeError):
    """A write or read that failed for a reason other than a lost race (throttling, timeout...)."""


@dataclass
class FakeStore:
    contexts: dict[RunKey, RunContext] = field(default_factory=dict)
    chunks: dict[tuple[RunKey, int], ArchiveChunk] = field(default_factory=dict)
    tendencies: dict[int, UserTendency] = field(default_factory=dict)
    rejections: dict[str, Rejection] = field(default_factory=dict)
    commits: list[RunKey] = field(default_factory=list)  # every commit attempt, won or lost
    # Fault hooks: called before the write is checked, so a rival can write first.
    before_commit: Callable[[FakeStore, RunContext], None] | None = None
    before_save_tendency: Callable[[FakeStore, UserTendency], None] | None = None
    fail_load_contexts: bool = False
    fail_load_tendencies: bool = False
    tendency_reads: list[int] = field(default_factory=list)  # users read one at a time (GetItem)
    tendency_batch_reads: list[list[int]] = field(default_factory=list)  # users read up front (BatchGetItem)
    fail_rejections: bool = False
    archive_reads: int = 0

    # --- reads -----------------------------------------------------------------------------

    def load_contexts(self, keys: Sequence[RunKey]) -> dict[RunKey, RunContext]:
        if self.fail_load_contexts:
            raise InjectedFailure("BatchGetItem failed")
        return {key: self.load_context(key) for key in keys}

    def load_context(self, key: RunKey) -> RunContext:
        return self.contexts.get(key, RunContext(key))

    def load_tendency(self, user_id: int) -> UserTendency:
        self.tendency_reads.append(user_id)
        return self.tendencies.get(user_id, UserTendency(user_id))

    def load_tendencies(self, user_ids: Sequence[int]) -> dict[int, UserTendency]:
        self.tendency_batch_reads.append(list(user_ids))
        if self.fail_load_tendencies:
            raise InjectedFailure("BatchGetItem of tendencies failed")
        return {user_id: self.tendencies.get(user_id, UserTendency(user_id)) for user_id in user_ids}

    # --- conditional writes ----------------------------------------------------------------

    def save_tendency(self, record: UserTendency) -> None:
        if self.before_save_tendency is not None:
            self.before_save_tendency(self, record)
        if self.tendencies.get(record.user_id, UserTendency(record.user_id)).version != record.version:
            raise VersionConflict(f"tendency of user {record.user_id} moved past version {record.version}")
        self.tendencies[record.user_id] = replace(record, version=record.version + 1)

    def commit(self, context: RunContext, chunk: ArchiveChunk | None) -> None:
        self.commits.append(context.key)
        if self.before_commit is not None:
            self.before_commit(self, context)
        if self.load_context(context.key).version != context.version - 1:
            raise VersionConflict(f"run {context.key} moved past version {context.version - 1}")
        if chunk is not None:
            # Chunks are immutable: a rewrite must be identical (two workers flush the same one).
            assert self.chunks.get((chunk.key, chunk.index), chunk) == chunk
            self.chunks[(chunk.key, chunk.index)] = chunk
        self.contexts[context.key] = context

    def archived_sequences(self, context: RunContext) -> frozenset[int]:
        self.archive_reads += 1
        chunked = {m.sequence_id for (key, _), chunk in self.chunks.items() if key == context.key for m in chunk.messages}
        return frozenset(chunked | {m.sequence_id for m in context.pending})

    def save_rejections(self, rejections: Sequence[Rejection]) -> None:
        if self.fail_rejections:
            raise InjectedFailure("PutItem on the rejects table failed")
        for rejection in rejections:
            self.rejections[rejection.position.record_id] = rejection


_port_check: RunStatsStore = FakeStore()  # the fake implements the whole port (checked by type checkers)


# --- building batches -------------------------------------------------------------------------


def device(key: RunKey, seq: int, meters: int) -> dict[str, Any]:
    return {
        "user_id": key.user_id,
        "run_id": key.run_id,
        "sequence_id": seq,
        "timestamp_utc": BASE_TS + seq * 30_000,
        "distance_meters": meters,
    }


def batch(*payloads: dict[str, Any] | bytes) -> list[dict[str, Any]]:
    """Lambda's Kinesis records for the payloads, in shard order (JSON objects are encoded)."""
    encoded = [(str(p["user_id"]), json.dumps(p).encode()) if isinstance(p, dict) else ("0", p) for p in payloads]
    return lambda_event(records_from_payloads(encoded))["Records"]


def seq_number(record: dict[str, Any]) -> str:
    return str(record["kinesis"]["sequenceNumber"])


def failures_of(records: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"itemIdentifier": seq_number(record)} for record in records]


def rival_applies(store: FakeStore, key: RunKey, *payloads: dict[str, Any]) -> None:
    """Another worker reads the run, applies messages and commits, between our read and our write."""
    messages = [
        PositionedMessage(
            StreamPosition(f"rival:{i}", f"rival:{i}", str(key.user_id)),
            DeviceMessage(**{**p, "distance_meters": Decimal(p["distance_meters"])}),
        )
        for i, p in enumerate(payloads)
    ]
    stored = store.load_context(key)
    result = fold(stored, messages, FoldPolicy())
    store.contexts[key] = replace(result.context, version=stored.version + 1)


def fail_commits_of(key: RunKey) -> Callable[[FakeStore, RunContext], None]:
    def hook(_: FakeStore, context: RunContext) -> None:
        if context.key == key:
            raise InjectedFailure(f"PutItem of run {key} throttled")

    return hook


def service(store: FakeStore, **options: Any) -> RunnerStatsService:
    return RunnerStatsService(store, ServiceOptions(**options))


def pending_seqs(context: RunContext) -> list[int]:
    return [m.sequence_id for m in context.pending]


# --- the happy path ---------------------------------------------------------------------------


def test_a_clean_batch_commits_every_key_and_reports_nothing() -> None:
    store = FakeStore()
    records = batch(device(RUN_A, 1, 100), device(RUN_C, 1, 300), device(RUN_A, 2, 150), device(RUN_A, 2, 150))
    report = service(store).process(records)
    assert report.batch_item_failures() == []
    assert store.contexts[RUN_A].total_meters == Decimal(250) and store.contexts[RUN_A].version == 1
    assert store.contexts[RUN_C].total_meters == Decimal(300)
    assert report.counts["accepted"] == 3 and report.counts["duplicate"] == 1 and report.counts["retried"] == 0
    assert store.tendencies[7].current == TendencySlot(1, BASE_TS + 30_000, "good job")
    assert store.tendencies[8].current == TendencySlot(1, BASE_TS + 30_000, "good job")


# --- per key stop-at-first-failure ------------------------------------------------------------


def test_a_key_whose_commit_fails_is_reported_at_its_first_record_only() -> None:
    # Given a store whose writes of run B fail (throttled, say)
    store = FakeStore(before_commit=fail_commits_of(RUN_B))
    # When a batch interleaves runs A and B of one user, and run C of another
    records = batch(device(RUN_A, 1, 10), device(RUN_B, 1, 20), device(RUN_A, 2, 30), device(RUN_B, 2, 40), device(RUN_C, 1, 50))
    report = service(store).process(records)
    # Then exactly B's first record in the batch is reported (Lambda re-reads from there) ...
    assert report.batch_item_failures() == failures_of([records[1]])
    # ... and the other keys, including the one of the same user, are committed
    assert RUN_B not in store.contexts
    assert pending_seqs(store.contexts[RUN_A]) == [1, 2] and store.contexts[RUN_A].total_meters == Decimal(40)
    assert store.contexts[RUN_C].total_meters == Decimal(50)
    assert report.counts["accepted"] == 3  # B's messages were not applied, so not counted


def test_redelivery_after_a_failed_key_ends_as_one_clean_pass() -> None:
    # Given a batch whose run B failed to commit
    store = FakeStore(before_commit=fail_commits_of(RUN_B))
    records = batch(device(RUN_A, 1, 10), device(RUN_B, 1, 20), device(RUN_A, 2, 30), device(RUN_B, 2, 40))
    first = service(store).process(records)
    assert first.batch_item_failures() == failures_of([records[1]])
    # When Lambda redelivers from the reported record, and the store has recovered
    store.before_commit = None
    second = service(store).process(records[1:])
    assert second.batch_item_failures() == []
    assert second.counts["accepted"] == 2 and second.counts["duplicate"] == 1  # A2 comes again and is dropped
    assert store.contexts[RUN_A].total_meters == Decimal(40) and store.contexts[RUN_B].total_meters == Decimal(60)


def test_a_failing_tendency_write_reports_only_that_users_keys() -> None:
    store = FakeStore()

    def fail_user_8(_: FakeStore, record: UserTendency) -> None:
        if record.user_id == 8:
            raise InjectedFailure("tendency PutItem failed")

    store.before_save_tendency = fail_user_8
    records = batch(device(RUN_C, 1, 10), device(RUN_A, 1, 20), device(RUN_C, 2, 30), device(RUN_D, 1, 5))
    # When user 8's tendency push fails after its runs were committed
    report = service(store).process(records)
    # Then only user 8's keys are reported; their totals are committed, the push is still owed
    assert report.batch_item_failures() == failures_of([records[0], records[3]])
    assert store.contexts[RUN_C].total_meters == Decimal(40) and store.contexts[RUN_C].tendency is None
    assert store.contexts[RUN_D].total_meters == Decimal(5) and 8 not in store.tendencies
    assert store.contexts[RUN_A].total_meters == Decimal(20)
    # When the reported records are redelivered and the tendency table works again
    store.before_save_tendency = None
    again = service(store).process(records)
    # Then nothing is counted twice, the owed push is settled and recorded on the run items
    assert again.batch_item_failures() == [] and again.counts["accepted"] == 0
    assert store.contexts[RUN_C].total_meters == Decimal(40) and store.contexts[RUN_C].tendency == "fine"
    assert store.tendencies[8].current is not None


# --- optimistic retries -----------------------------------------------------------------------


def test_a_lost_race_is_retried_on_the_fresh_context() -> None:
    # Given a rival worker that commits message 1 of run A just before our first commit
    store = FakeStore()

    def rival_once(s: FakeStore, context: RunContext) -> None:
        if context.key == RUN_A and s.commits.count(RUN_A) == 1:
            rival_applies(s, RUN_A, device(RUN_A, 1, 150))

    store.before_commit = rival_once
    # When our batch carries messages 1 and 2
    report = service(store).process(batch(device(RUN_A, 1, 150), device(RUN_A, 2, 100)))
    # Then our first commit loses, the retry folds over the rival's item, and 1 is not counted twice
    assert report.batch_item_failures() == []
    assert report.counts["retried"] == 1
    assert store.commits == [RUN_A, RUN_A]
    context = store.contexts[RUN_A]
    assert context.version == 2 and context.total_meters == Decimal(250) and context.message_count == 2
    # The run item records the label confirmed before its write ("fine", the rival's); "good job"
    # is pushed right after the write and recorded on the run's next write.
    assert pending_seqs(context) == [1, 2] and context.tendency == "fine"
    assert report.counts["accepted"] == 1 and report.counts["duplicate"] == 1  # what the committed fold did
    assert store.tendencies[7].current is not None and store.tendencies[7].current.label == "good job"


def test_a_key_that_loses_every_race_is_reported_after_commit_attempts() -> None:
    # Given a rival that always commits run A just before we do
    store = FakeStore()

    def rival_always(s: FakeStore, context: RunContext) -> None:
        if context.key == RUN_A:
            stored = s.load_context(RUN_A)
            s.contexts[RUN_A] = replace(stored, version=stored.version + 1)

    store.before_commit = rival_always
    records = batch(device(RUN_A, 1, 10), device(RUN_B, 1, 20), device(RUN_A, 2, 30), device(RUN_C, 1, 40))
    report = service(store, commit_attempts=3).process(records)
    # Then A is tried exactly commit_attempts times and reported at its first record
    assert store.commits.count(RUN_A) == 3
    assert report.batch_item_failures() == failures_of([records[0]])
    assert report.counts["retried"] == 2
    assert store.contexts[RUN_A].message_count == 0  # only the rival's empty bumps
    # And the other keys, of the same user or not, are committed once
    assert store.commits.count(RUN_B) == 1 and store.contexts[RUN_B].total_meters == Decimal(20)
    assert store.contexts[RUN_C].total_meters == Decimal(40)


def test_a_lost_tendency_race_is_retried_and_merges_the_rivals_run() -> None:
    # Given a rival that records a later run of user 7 just before our first tendency write
    store = FakeStore()
    rival_run = TendencySlot(99, BASE_TS + 10**8, "well done")

    def rival_once(s: FakeStore, record: UserTendency) -> None:
        if not s.tendencies:
            s.tendencies[7] = UserTendency(7, version=1, current=rival_run)

    store.before_save_tendency = rival_once
    report = service(store).process(batch(device(RUN_A, 1, 10)))
    # Then the push is retried on the fresh record (run-item retries are not involved)
    assert report.batch_item_failures() == [] and report.counts["retried"] == 0
    tendency = store.tendencies[7]
    assert tendency.version == 2
    assert tendency.current == rival_run and tendency.previous == TendencySlot(1, BASE_TS + 30_000, "fine")
    assert store.contexts[RUN_A].total_meters == Decimal(10)


# --- reads that fail, poison records, too-late records -----------------------------------------


def test_when_contexts_cannot_be_read_every_key_is_reported_at_its_first_record() -> None:
    store = FakeStore(fail_load_contexts=True)
    records = batch(b"not json", device(RUN_A, 1, 10), device(RUN_B, 1, 20), device(RUN_A, 2, 30), device(RUN_C, 1, 40))
    report = service(store).process(records)
    assert report.batch_item_failures() == failures_of([records[1], records[2], records[4]])
    assert store.commits == []
    # The poison record was handled before the read and is not redelivered for nothing
    assert [r.reason for r in store.rejections.values()] == [RejectReason.NOT_JSON]
    assert report.counts["rejected"] == 1


def test_a_poison_record_whose_reject_write_fails_is_reported() -> None:
    store = FakeStore(fail_rejections=True)
    records = batch(device(RUN_A, 1, 10), b"\xff not utf-8", device(RUN_A, 2, 30))
    report = service(store).process(records)
    assert report.batch_item_failures() == failures_of([records[1]])
    assert report.counts["rejected"] == 0
    # The good records around it are applied (a redelivery will drop them as duplicates)
    assert store.contexts[RUN_A].total_meters == Decimal(40)


def test_poison_records_are_stored_and_not_reported() -> None:
    store = FakeStore()
    records = batch(b"[1, 2]", device(RUN_A, 1, 10), json.dumps({"user_id": 7}).encode())
    report = service(store).process(records)
    assert report.batch_item_failures() == []
    assert {rid: r.reason for rid, r in store.rejections.items()} == {
        records[0]["eventID"]: RejectReason.NOT_OBJECT,
        records[2]["eventID"]: RejectReason.MISSING_FIELD,
    }
    assert report.counts["rejected"] == 2 and report.counts["accepted"] == 1


def test_a_too_late_message_is_stored_as_a_rejection_with_its_run() -> None:
    # Given run A whose gap 2..5 was given up
    store = FakeStore()
    store.contexts[RUN_A] = RunContext(
        RUN_A, version=3, high_water=60, closed=((2, 5),), gaps_closed=4, total_meters=Decimal(500), message_count=56
    )
    records = batch(device(RUN_A, 3, 80))
    report = service(store).process(records)
    assert report.batch_item_failures() == []
    rejection = store.rejections[records[0]["eventID"]]
    assert rejection.reason is RejectReason.TOO_LATE and rejection.key == RUN_A
    assert rejection.detail == "sequence 3 was given up as a gap"
    assert report.counts["stale"] == 1 and report.counts["accepted"] == 0
    assert store.contexts[RUN_A].total_meters == Decimal(500)


def test_a_late_message_for_a_forgotten_closed_range_is_a_too_late_reject_not_a_silent_duplicate() -> None:
    # Given run A after every other sequence 1..41 with a lag of 1: 20 gaps closed, only 16 listed
    store = FakeStore()
    options = {"policy": FoldPolicy(gap_max_lag=1, gap_max_open=64)}
    service(store, **options).process(batch(*(device(RUN_A, seq, 10) for seq in range(1, 42, 2))))
    stored = store.contexts[RUN_A]
    assert stored.gaps_closed == 19 and len(stored.closed) == 16 and stored.forgotten == 6
    # When 4 (a forgotten closed gap) and 3 (applied long ago) arrive again
    records = batch(device(RUN_A, 4, 500), device(RUN_A, 3, 10))
    report = service(store, **options).process(records)
    # Then 4 is a too-late reject with its run, 3 a duplicate; the archive was read once to tell them apart
    assert report.batch_item_failures() == []
    assert store.rejections[records[0]["eventID"]].reason is RejectReason.TOO_LATE
    assert records[1]["eventID"] not in store.rejections
    assert report.counts["stale"] == 1 and report.counts["duplicate"] == 1
    assert store.archive_reads == 1
    after = store.contexts[RUN_A]
    assert (after.total_meters, after.message_count, after.closed, after.forgotten) == (
        stored.total_meters,
        stored.message_count,
        stored.closed,
        stored.forgotten,
    )


def test_a_copy_of_a_message_applied_earlier_in_the_batch_below_forgotten_is_a_duplicate_not_too_late() -> None:
    """Issue 24 item 4: the forgotten-range lookup must see what the same fold applied earlier."""
    # Given run A after batch 1: sequences 1-4 and every even one from 6 to 44, so the odd ones
    # 5..43 are open gaps (high water 44, none closed yet under the default policy)
    first = [1, 2, 3, 4, *range(6, 45, 2)]
    dirty, clean = FakeStore(), FakeStore()
    for store in (dirty, clean):
        service(store).process(batch(*(device(RUN_A, seq, 10) for seq in first)))
        assert store.contexts[RUN_A].gaps_closed == 0 and store.contexts[RUN_A].forgotten == 0
    # When batch 2 carries 5 (fills its gap), then 46..100 (which close 7..45: 20 ranges, 16 listed,
    # so `forgotten` reaches 13, above 5), then 5 again; the clean pass gets the batch without the copy
    second = [device(RUN_A, 5, 500), *(device(RUN_A, seq, 10) for seq in range(46, 101))]
    records = batch(*second, device(RUN_A, 5, 500))
    report = service(dirty).process(records)
    clean_report = service(clean).process(batch(*second))
    # Then seq 5 was applied once and its second copy is a duplicate, not a too-late reject
    after = dirty.contexts[RUN_A]
    assert after.forgotten == 13 and not any(low <= 5 <= high for low, high in after.closed)
    assert report.batch_item_failures() == []
    assert dirty.rejections == {}
    assert report.counts["duplicate"] == 1 and report.counts["stale"] == 0
    # And the run, its archive and every other count equal the clean pass
    assert after == clean.contexts[RUN_A] and dirty.chunks == clean.chunks
    assert after.total_meters == Decimal(500 + 10 * (len(first) + 55)) and after.message_count == len(first) + 56
    assert report.counts - clean_report.counts == {"duplicate": 1} and clean_report.counts - report.counts == {}


def test_a_run_that_cannot_read_its_archive_is_reported_not_guessed() -> None:
    # Given a run with forgotten closed ranges, and an archive that cannot be read
    store = FakeStore()
    store.contexts[RUN_A] = RunContext(RUN_A, version=2, high_water=50, closed=((40, 40),), forgotten=30, message_count=10)
    store.archived_sequences = _raise_throttled  # type: ignore[method-assign]
    records = batch(device(RUN_A, 7, 10), device(RUN_C, 1, 10))
    # When a message below the forgotten point arrives
    report = service(store).process(records)
    # Then that run is reported for redelivery; the other user's run commits
    assert report.batch_item_failures() == failures_of([records[0]])
    assert store.contexts[RUN_C].message_count == 1


def _raise_throttled(context: RunContext) -> frozenset[int]:
    raise InjectedFailure("Query on the messages table throttled")


def test_a_suspect_jump_is_stored_as_a_rejection_held_and_counted() -> None:
    # Given run A at sequence 10
    store = FakeStore()
    service(store).process(batch(*(device(RUN_A, seq, 100) for seq in range(1, 11))))
    # When sequence 999,999 arrives, then 11
    records = batch(device(RUN_A, 999_999, 100), device(RUN_A, 11, 100))
    report = service(store).process(records)
    # Then the jump is a reject with its own reason and its run, held in the run item, not applied
    rejection = store.rejections[records[0]["eventID"]]
    assert rejection.reason is RejectReason.SUSPECT_JUMP and rejection.key == RUN_A
    assert rejection.detail.startswith("sequence 999999 is more than 41 above the run's highest applied sequence; held")
    context = store.contexts[RUN_A]
    assert [m.sequence_id for m in context.held] == [999_999]
    assert context.total_meters == Decimal(1100) and context.high_water == 11 and context.gaps_closed == 0
    assert report.counts["suspect"] == 1 and report.counts["accepted"] == 1


def test_a_corroborated_jump_counts_the_held_message_as_accepted_when_it_is_applied() -> None:
    store = FakeStore()
    service(store).process(batch(device(RUN_A, 1, 100), device(RUN_A, 500, 100)))
    report = service(store).process(batch(device(RUN_A, 501, 100)))
    assert report.counts["accepted"] == 2 and store.contexts[RUN_A].message_count == 3


def with_arrival(records: list[dict[str, Any]], arrival_ms: int) -> list[dict[str, Any]]:
    for record in records:
        record["kinesis"]["approximateArrivalTimestamp"] = arrival_ms / 1000
    return records


@pytest.mark.parametrize(
    ("timestamp_utc", "reason"),
    [
        (32_503_680_000_000, "after"),  # the year 3000
        (1, "before"),
        (BASE_TS + 30_000 + 5 * 60_000 + 1, "after"),  # 5 min and 1 ms ahead of arrival
        (BASE_TS + 30_000 - 24 * 3_600_000 - 1, "before"),  # a day and 1 ms before arrival
    ],
    ids=["year-3000", "epoch-1ms", "just-too-far-ahead", "just-too-old"],
)
def test_a_timestamp_outside_the_window_around_arrival_is_rejected(timestamp_utc: int, reason: str) -> None:
    # Given a record arriving in the stream at BASE_TS + 30 s, whose timestamp is outside the window
    store = FakeStore()
    good = device(RUN_A, 1, 100)
    records = with_arrival(batch(good, {**device(RUN_A, 2, 100), "timestamp_utc": timestamp_utc}), BASE_TS + 30_000)
    # When it is processed with the default window (a day before, 5 minutes after)
    report = service(store).process(records)
    # Then it is rejected with its own reason and never applied: the run keeps its real duration
    rejection = store.rejections[records[1]["eventID"]]
    assert rejection.reason is RejectReason.BAD_TIMESTAMP and rejection.key == RUN_A
    assert f"s {reason} the record's arrival" in rejection.detail
    context = store.contexts[RUN_A]
    assert context.message_count == 1 and context.total_seconds == 0 and context.high_water == 1
    assert report.counts["rejected"] == 1


def test_timestamps_at_the_edges_of_the_window_are_accepted() -> None:
    store = FakeStore()
    arrival = BASE_TS + 30_000
    records = with_arrival(
        batch(
            {**device(RUN_A, 1, 1), "timestamp_utc": arrival - 24 * 3_600_000}, {**device(RUN_A, 2, 1), "timestamp_utc": arrival + 300_000}
        ),
        arrival,
    )
    report = service(store).process(records)
    assert report.counts["accepted"] == 2 and not store.rejections


# --- settings -----------------------------------------------------------------------------------

FULL_ENV = {
    "RUN_STATS_TABLE": "runs",
    "TENDENCY_TABLE": "tendency",
    "MESSAGES_TABLE": "messages",
    "REJECTS_TABLE": "rejects",
    "GAP_MAX_LAG": "30",
    "GAP_MAX_OPEN": "50",
    "ARCHIVE_CHUNK_SIZE": "10",
    "COMMIT_ATTEMPTS": "5",
    "MAX_MESSAGE_BYTES": "2048",
    "REJECT_PAYLOAD_MAX_BYTES": "1024",
    "TIMESTAMP_MAX_AGE_SECONDS": "7200",
    "TIMESTAMP_MAX_AHEAD_SECONDS": "60",
}


def test_settings_from_a_full_environment() -> None:
    settings = RunnerStatsSettings.from_env(FULL_ENV)
    assert settings.tables == RunStatsTables("runs", "tendency", "messages", "rejects")
    assert settings.options.policy == FoldPolicy(gap_max_lag=30, gap_max_open=50, archive_chunk_size=10)
    assert settings.options.commit_attempts == 5 and settings.options.max_message_bytes == 2048
    assert settings.reject_payload_max_bytes == 1024
    assert settings.options.timestamps == TimestampWindow(max_age_ms=7_200_000, max_ahead_ms=60_000)


def test_settings_defaults_when_only_tables_are_given() -> None:
    tables_only = {name: value for name, value in FULL_ENV.items() if name.endswith("_TABLE")}
    settings = RunnerStatsSettings.from_env(tables_only)
    assert settings.options == ServiceOptions()
    assert settings.reject_payload_max_bytes == 4096


@pytest.mark.parametrize("name", ["RUN_STATS_TABLE", "TENDENCY_TABLE", "MESSAGES_TABLE", "REJECTS_TABLE"])
@pytest.mark.parametrize("value", [None, "", "   "])
def test_a_missing_table_variable_is_a_settings_error(name: str, value: str | None) -> None:
    env = {k: v for k, v in FULL_ENV.items() if k != name}
    if value is not None:
        env[name] = value
    with pytest.raises(SettingsError, match=f"{name} is required"):
        RunnerStatsSettings.from_env(env)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("GAP_MAX_LAG", "forty", "GAP_MAX_LAG must be an integer, got 'forty'"),
        ("COMMIT_ATTEMPTS", "2.5", "COMMIT_ATTEMPTS must be an integer"),
        ("MAX_MESSAGE_BYTES", "0", "MAX_MESSAGE_BYTES must be >= 1, got 0"),
        ("GAP_MAX_OPEN", "-3", "GAP_MAX_OPEN must be >= 1, got -3"),
        ("ARCHIVE_CHUNK_SIZE", "41", "ARCHIVE_CHUNK_SIZE must be <= 40"),
        ("TIMESTAMP_MAX_AHEAD_SECONDS", "0", "TIMESTAMP_MAX_AHEAD_SECONDS must be >= 1"),
    ],
)
def test_a_bad_number_is_a_settings_error(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        RunnerStatsSettings.from_env({**FULL_ENV, name: value})


# --- tendency records read up front ------------------------------------------------------------


def test_users_who_will_push_have_their_tendency_read_up_front_and_pushed_without_another_read() -> None:
    # Given user 8 with a stored run whose label is settled, and users 7 and 9 whose runs are new to the batch
    store = FakeStore()
    service(store).process(batch(device(RUN_C, 1, 300)))
    store.tendency_reads.clear()
    store.tendency_batch_reads.clear()
    run_e = RunKey(9, 1)
    # When a batch brings run A's and run E's first messages, and run C's next
    report = service(store).process(batch(device(RUN_A, 1, 100), device(RUN_C, 2, 300), device(run_e, 1, 50)))
    # Then the users with a new run (7, 9), and user 8 whose label the last commit had not confirmed yet,
    # were read in one call, and no push read its record again
    assert store.tendency_batch_reads == [[7, 8, 9]] and store.tendency_reads == []
    assert report.batch_item_failures() == []
    assert store.tendencies[7].current == TendencySlot(1, BASE_TS + 30_000, "fine")
    assert store.tendencies[9].current == TendencySlot(1, BASE_TS + 30_000, "fine")


def test_a_second_push_in_one_invocation_starts_from_the_record_the_first_wrote() -> None:
    # Given run A stored with its tendency settled, and a batch that owes a push before and after its commit
    store = FakeStore()
    service(store).process(batch(device(RUN_A, 1, 100)))
    store.contexts[RUN_A] = replace(store.contexts[RUN_A], tendency=None)  # a crash left its push owed
    store.tendency_reads.clear()
    # When run A's next message takes it past 200 m (a new label), with run B new to the batch
    report = service(store).process(batch(device(RUN_A, 2, 150), device(RUN_B, 1, 10)))
    # Then the record read up front served both pushes (the owed one found itself already there): no GetItem,
    # one write, and the record holds run B as current and run A with its new label as previous
    assert store.tendency_reads == [] and report.batch_item_failures() == []
    assert store.tendencies[7].version == 2
    assert store.tendencies[7].current == TendencySlot(2, BASE_TS + 30_000, "fine")
    assert store.tendencies[7].previous == TendencySlot(1, BASE_TS + 30_000, "good job")


def test_when_tendencies_cannot_be_read_up_front_each_push_reads_its_own() -> None:
    # Given a store whose batch read of tendency records fails
    store = FakeStore(fail_load_tendencies=True)
    # When a batch brings two users' first messages
    report = service(store).process(batch(device(RUN_A, 1, 100), device(RUN_C, 1, 300)))
    # Then nothing is reported: each user's push read its own record, and both are written
    assert report.batch_item_failures() == []
    assert sorted(store.tendency_reads) == [7, 8]
    assert store.tendencies[7].version == 1 and store.tendencies[8].version == 1


# --- a user's backlog of runs -----------------------------------------------------------------


@dataclass
class CountingCommits(FakeStore):
    """Counts the commits in flight at once (each waits a moment, as a DynamoDB call would)."""

    in_flight: int = 0
    peak: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def commit(self, context: RunContext, chunk: ArchiveChunk | None) -> None:
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            time.sleep(0.002)
            with self.lock:
                super().commit(context, chunk)
        finally:
            with self.lock:
                self.in_flight -= 1


def test_one_users_backlog_of_runs_is_committed_on_the_threads_other_users_leave_free() -> None:
    # Given one user's 40 runs in one batch (a device uploading its history), and the same batch for a store used one key at a time
    records = batch(*(device(RunKey(7, run), seq, 10 * run + seq) for run in range(1, 41) for seq in (1, 2)))
    concurrent, serial = CountingCommits(), CountingCommits()
    # When the batch is processed with 8 I/O threads, and with 1
    report = service(concurrent, io_concurrency=8).process(records)
    service(serial, io_concurrency=1).process(records)
    # Then the user's commits went out up to 8 at once, never more
    assert 1 < concurrent.peak <= 8 and serial.peak == 1
    # and the outcome is the serial one: every run, the counts, and the user's tendency
    assert report.batch_item_failures() == []
    assert concurrent.contexts == serial.contexts and concurrent.tendencies == serial.tendencies
    assert report.counts["accepted"] == 80


def test_a_batch_of_more_users_than_threads_commits_each_users_keys_one_at_a_time() -> None:
    # Given 8 users with 5 runs each and 4 I/O threads
    records = batch(*(device(RunKey(user, run), 1, 100) for user in range(1, 9) for run in range(1, 6)))
    store = CountingCommits()
    # When the batch is processed
    service(store, io_concurrency=4).process(records)
    # Then no more than the 4 threads' commits were ever in flight (one per user at a time)
    assert 1 < store.peak <= 4
    assert len(store.contexts) == 40
