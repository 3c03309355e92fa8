"""Fault schedules for the runner-stats write path.

Every case is compared with one clean pass: the same deliveries without faults, and the
independent in-memory recomputation over the unique messages (devtools.reference).
"""

from __future__ import annotations

import functools
import random
import threading
from collections import Counter
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import pytest

from devtools.aws.clients import new_client
from devtools.aws.esm import EventSourceMapping, ListShard, ShardRecord
from devtools.aws.faults import LostResponse, ThrottledWrites, WriteBoundaryCrasher
from devtools.aws.moto_patches import embedded_aws
from devtools.runner_world import RunnerStatsWorld
from devtools.state import PipelineView
from devtools.workload import Workload, generate
from devtools.workload import shard_records as workload_records
from runtime.runner_stats.models import ArchiveChunk, ArchivedMessage, RunContext, RunKey, TendencySlot, UserTendency
from runtime.runner_stats.store import DynamoRunStatsStore
from runtime.shared.consistency import VersionConflict
from tests.conftest import templates_for
from tests.faults.runner_stats.reference_checks import assert_matches_reference as matches_reference


@dataclass(frozen=True)
class Scenario:
    """A workload and the handler settings it runs under."""

    name: str
    users: int
    runs_per_user: int
    messages_per_run: int
    late_rate: float
    batch_size: int
    settings: tuple[tuple[str, str], ...] = ()


# The sweeps below number the writes of a clean pass and fault the n-th one, which needs the
# writes in one order: users one at a time (IO_CONCURRENCY 1). The handler's pool of users is
# raced in test_runner_stats_pool_races.py.
ONE_AT_A_TIME = (("IO_CONCURRENCY", "1"),)
# Small but complete: several users and runs, re-sends, late messages and poison records.
MIXED = Scenario("mixed", users=3, runs_per_user=2, messages_per_run=12, late_rate=0.15, batch_size=20, settings=ONE_AT_A_TIME)
# Tight bounds so every write kind happens: archive chunks flushed in transactions every 3
# messages, gaps closed after 3 sequence numbers (too-late rejects), runs past 5 km ("well done").
TIGHT = Scenario(
    "tight",
    users=1,
    runs_per_user=2,
    messages_per_run=60,
    late_rate=0.2,
    batch_size=10,
    settings=(("ARCHIVE_CHUNK_SIZE", "3"), ("GAP_MAX_LAG", "3"), ("GAP_MAX_OPEN", "4"), *ONE_AT_A_TIME),
)
SCENARIOS = {scenario.name: scenario for scenario in (MIXED, TIGHT)}
# The tables' logical ids, which start their names on the embedded cloud.
RUN_STATS, TENDENCY, MESSAGES, REJECTS = (
    "RunnerStatsRunStatsTable",
    "RunnerStatsTendencyTable",
    "RunnerStatsMessagesTable",
    "RunnerStatsRejectsTable",
)


@functools.cache
def workload(name: str = "mixed") -> Workload:
    scenario = SCENARIOS[name]
    return generate(
        seed=11,
        users=scenario.users,
        runs_per_user=scenario.runs_per_user,
        messages_per_run=scenario.messages_per_run,
        resend_rate=0.3,
        late_rate=scenario.late_rate,
        malformed=4,
        # Records a device bug makes: a sequence far beyond its run (held as a suspect jump, the rest
        # of the run still applied) and a timestamp in the year 3000 (rejected against its arrival).
        wrong_sequences=2,
        bad_clocks=2,
    )


def shard_records(order: list[int] | None = None, name: str = "mixed") -> list[ShardRecord]:
    deliveries = workload(name).deliveries
    chosen = [deliveries[i] for i in order] if order is not None else list(deliveries)
    return workload_records(chosen)  # each with its arrival time, which the timestamp window checks


def new_world(name: str = "mixed") -> RunnerStatsWorld:
    template = templates_for("dev")["Onceflow-dev-RunnerStats"]
    return RunnerStatsWorld.create(template, settings_overrides=dict(SCENARIOS[name].settings))


@dataclass
class Observed:
    """What the handler reported over a whole delivery (BatchReport.counts, the metrics), and every
    DynamoDB call it made, reads included (one per call: botocore's own retries are not calls)."""

    counts: Counter[str] = field(default_factory=Counter)
    calls: list[str] = field(default_factory=list)

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-call.dynamodb.*", self._call)

    def _call(self, model: Any, **_: Any) -> None:
        self.calls.append(model.name)


def run_pipeline(
    records: list[ShardRecord],
    *,
    name: str = "mixed",
    batch_size: int | None = None,
    client_hook: object = None,
    bisect: bool = False,
    observed: Observed | None = None,
) -> PipelineView:
    """A fresh embedded cloud, the records delivered through a replayed event source mapping."""
    with embedded_aws():
        world = new_world(name)
        client = new_client()
        if client_hook is not None:
            client_hook.attach(client)  # type: ignore[attr-defined]
        seen = observed or Observed()
        seen.attach(client)

        def invoke(event: dict[str, Any]) -> dict[str, Any]:
            report = world.service(client).process(event.get("Records", []))
            seen.counts.update(report.counts)
            return {"batchItemFailures": report.batch_item_failures()}

        esm = EventSourceMapping(invoke, batch_size=batch_size or SCENARIOS[name].batch_size, bisect_on_error=bisect)
        esm.drain(ListShard(records))
        assert esm.stats.sent_to_on_failure == 0
        return world.view()


@functools.cache
def clean_pass(name: str = "mixed") -> tuple[PipelineView, Observed]:
    observed = Observed()
    return run_pipeline(shard_records(name=name), name=name, observed=observed), observed


def clean_view(name: str = "mixed") -> PipelineView:
    return clean_pass(name)[0]


def assert_matches_reference(view: PipelineView) -> None:
    matches_reference(view, workload().unique)


@functools.cache
def write_operations(name: str) -> tuple[str, ...]:
    """Every DynamoDB write of a clean pass, as 'Operation:table'."""
    counter = WriteBoundaryCrasher()
    run_pipeline(shard_records(name=name), name=name, client_hook=counter)
    return tuple(counter.operations)


def write_numbers() -> list[tuple[str, int]]:
    """Each write of a clean pass, for every scenario."""
    return [(name, number) for name in SCENARIOS for number in range(1, len(write_operations(name)) + 1)]


def write_boundaries() -> list[tuple[str, str, int]]:
    """Before and after each write of a clean pass, for every scenario."""
    return [(name, when, number) for name, number in write_numbers() for when in ("before", "after")]


def test_clean_pass_equals_the_independent_recomputation() -> None:
    # Given the workload with duplicates, late messages and poison records, When it is delivered once
    view = clean_view()
    # Then every run equals the in-memory recomputation over the unique messages
    assert_matches_reference(view)
    # And each poison record is kept with a reason, the wrong sequences as suspect jumps and the
    # year-3000 timestamps as bad timestamps; nothing is too late
    kinds = Counter(d.kind for d in workload().deliveries)
    reasons = Counter(view.rejects.values())
    assert reasons["too_late"] == 0
    assert reasons["suspect_jump"] == kinds["wrong_sequence"] == 2
    assert reasons["bad_timestamp"] == kinds["bad_clock"] == 2
    assert len(view.rejects) == kinds["malformed"] + kinds["wrong_sequence"] + kinds["bad_clock"]


def test_the_tight_scenario_reaches_every_kind_of_write() -> None:
    # Given the tight scenario's clean pass, Then its writes include every write path
    operations = set(write_operations("tight"))
    assert any(op.startswith("PutItem:" + RUN_STATS) for op in operations)
    assert any(op.startswith("PutItem:" + TENDENCY) for op in operations)
    assert any(op.startswith("PutItem:" + REJECTS) for op in operations)
    assert any(op.startswith("TransactWriteItems:" + MESSAGES) and RUN_STATS in op for op in operations)
    view = clean_view("tight")
    assert {"too_late", "suspect_jump", "bad_timestamp"} <= set(view.rejects.values())
    assert any(t[1] == "well done" for t in view.tendencies.values())


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_device_bugs_in_the_workload_change_no_run(name: str) -> None:
    # Given the workload without its wrong-sequence and year-3000 records
    deliveries = workload(name).deliveries
    bugs = [i for i, d in enumerate(deliveries) if d.kind in ("wrong_sequence", "bad_clock")]
    assert len(bugs) == 4
    without = run_pipeline(shard_records([i for i in range(len(deliveries)) if i not in bugs], name=name), name=name)
    # When the clean pass has them
    clean = clean_view(name)
    # Then every run's totals, archive, gaps and closed ranges are the same: the jumps are held
    # (and only held), the bad timestamps never reach a run
    held = {key: [m.sequence_id for m in run.held] for key, run in clean.runs.items() if run.held}
    assert sorted(seq for seqs in held.values() for seq in seqs) == [900_000, 900_001]
    assert {key: replace(run, held=()) for key, run in clean.runs.items()} == without.runs
    assert clean.tendencies == without.tendencies
    # And each is a reject with its own reason, on top of the others
    reasons, reasons_without = Counter(clean.rejects.values()), Counter(without.rejects.values())
    assert reasons - reasons_without == Counter({"bad_timestamp": 2, "suspect_jump": 2})
    assert len(clean.rejects) == len(without.rejects) + 4


@pytest.mark.parametrize(("name", "when", "write_number"), write_boundaries())
def test_crash_at_every_write_boundary_then_redelivery(name: str, when: str, write_number: int) -> None:
    # Given a process that dies at one write boundary, When Lambda redelivers the whole batch
    crasher = WriteBoundaryCrasher(at=write_number, when=when)
    view = run_pipeline(shard_records(name=name), name=name, client_hook=crasher)
    # Then the crash really happened, and the final state equals one clean pass
    assert crasher.crashed
    assert view == clean_view(name)


@pytest.mark.parametrize(("name", "when", "write_number"), write_boundaries())
def test_failed_write_is_reported_per_key_and_redelivered(name: str, when: str, write_number: int) -> None:
    # Given one write that fails with a throttling error: before it landed, or after (a lost response)
    throttle = ThrottledWrites(frozenset({write_number}), when=when)
    # When the failed key is reported and Lambda re-reads from its first record
    view = run_pipeline(shard_records(name=name), name=name, client_hook=throttle)
    # Then nothing is lost or double counted
    assert view == clean_view(name)


@pytest.mark.parametrize(("name", "write_number"), write_numbers())
def test_lost_response_at_every_write(name: str, write_number: int) -> None:
    # Given one write that is applied but whose response is lost, so that botocore's own retry sends it again
    lost = LostResponse(at=write_number)
    observed = Observed()
    # When the deliveries go through
    view = run_pipeline(shard_records(name=name), name=name, client_hook=lost, observed=observed)
    # Then the response really was lost, the final state equals one clean pass, nothing went to the
    # on-failure destination (run_pipeline checks it), and the writer took the retry's answer for
    # its own success: the same counts and the same calls as the clean pass
    assert lost.retried
    assert view == clean_view(name)
    assert observed == clean_pass(name)[1]


@pytest.mark.parametrize(
    ("write", "second_answer"),
    [
        ("PutItem:" + RUN_STATS, "ConditionalCheckFailedException"),  # the run item's commit
        # moto ignores the transaction's ClientRequestToken (DynamoDB would answer success)
        ("TransactWriteItems:" + MESSAGES, "TransactionCanceledException"),  # archive chunk + run item
        ("PutItem:" + TENDENCY, "ConditionalCheckFailedException"),
        ("PutItem:" + REJECTS, "ok"),  # unconditional, keyed by the eventID
    ],
)
def test_a_lost_response_is_recognised_as_the_writers_own_success(write: str, second_answer: str) -> None:
    # Given the tight scenario, and the first write of one kind applied with its response lost
    at = next(number for number, operation in enumerate(write_operations("tight"), 1) if operation.startswith(write))
    lost = LostResponse(at=at)
    observed = Observed()
    # When botocore's retry sends it again
    view = run_pipeline(shard_records(name="tight"), name="tight", client_hook=lost, observed=observed)
    # Then the retry met the write's own success (a conditional write fails its condition against it)
    assert (lost.chosen.startswith(write), lost.retried, lost.second_answer) == (True, True, second_answer)
    # and the writer recognised it: no message counted as a duplicate of itself, no commit retried,
    # no re-read, and the state of a clean pass
    clean, clean_observed = clean_pass("tight")
    assert observed.counts == clean_observed.counts
    assert observed.calls == clean_observed.calls
    assert view == clean


def test_a_rival_commit_between_our_read_and_our_write_is_reloaded_and_changes_nothing() -> None:
    # Given the workload's records, and a rival invocation that delivers the first two batches (so its run items are
    # not the ones ours would write: ours would take a rival's identical item for its own success) at the moment ours
    # is about to make its first write to the run-stats table, after ours has read the runs
    records = shard_records()
    batch_size = SCENARIOS["mixed"].batch_size
    with embedded_aws():
        world = new_world()
        ours, rivals = new_client(), new_client()
        run_stats = world.settings.tables.run_stats
        rival_ran: list[str] = []

        def rival_first(model: Any, params: dict[str, Any], **_: Any) -> None:
            tables = [params.get("TableName")] + [next(iter(item.values())).get("TableName") for item in params.get("TransactItems", [])]
            if not rival_ran and model.name in ("PutItem", "TransactWriteItems") and run_stats in tables:
                rival_ran.append(model.name)
                rival = EventSourceMapping(
                    lambda event: {"batchItemFailures": world.service(rivals).process(event.get("Records", [])).batch_item_failures()},
                    batch_size=batch_size,
                )
                rival.drain(ListShard(records[: 2 * batch_size]))

        reads: list[str] = []
        ours.meta.events.register("provide-client-params.dynamodb.*", rival_first)
        ours.meta.events.register("provide-client-params.dynamodb.GetItem", lambda params, **_: reads.append(params["TableName"]))
        # When ours commits over the version it read, then the rest of the shard is delivered
        esm = EventSourceMapping(
            lambda event: {"batchItemFailures": world.service(ours).process(event.get("Records", [])).batch_item_failures()},
            batch_size=batch_size,
        )
        esm.drain(ListShard(records))
        assert esm.stats.sent_to_on_failure == 0
        view = world.view()
    # Then the rival did write first, ours met its version and read the run again (the conflict path's GetItem)
    assert rival_ran
    assert run_stats in reads
    # and the end state is one clean pass's: nothing counted twice, nothing lost
    assert view == clean_view()
    assert_matches_reference(view)


@pytest.mark.parametrize("chunked", [False, True], ids=["put", "transaction"])
def test_a_rivals_write_over_the_same_version_is_still_a_conflict(chunked: bool) -> None:
    # Given a run item and a tendency record written as version 1 by a rival
    key = RunKey(7, 70)
    messages = tuple(ArchivedMessage(seq, 1_000 * seq, Decimal(10)) for seq in (1, 2))
    rival = RunContext(key, version=1, high_water=2, total_meters=Decimal(20), first_ts=1_000, last_ts=2_000, message_count=2)
    ours = replace(rival, total_meters=Decimal(25), archive_chunks=1) if chunked else replace(rival, pending=messages)
    rival_tendency = UserTendency(7, current=TendencySlot(70, 1_000, "fine"))
    with embedded_aws():
        world = new_world()
        store = DynamoRunStatsStore(world.settings.tables, client=world.client)
        store.commit(rival, None)
        store.save_tendency(rival_tendency)
        # When our writes over the same version meet the rival's items
        # Then they are conflicts, not our own success: the condition found another writer's item
        with pytest.raises(VersionConflict):
            store.commit(ours, ArchiveChunk(key, 0, messages) if chunked else None)
        with pytest.raises(VersionConflict):
            store.save_tendency(replace(rival_tendency, current=TendencySlot(71, 1_000, "fine")))
        # while the rival sending its own writes again meets its own success
        store.commit(rival, None)
        store.save_tendency(rival_tendency)
        assert world.view().runs[(7, 70)].total_meters == Decimal(20)


def test_crash_with_bisect_on_error() -> None:
    # Given crashes in several batches, When Lambda bisects the failing batches
    crashers = [WriteBoundaryCrasher(at=n, when="after") for n in (3, 9, 17)]

    class Chain:
        def attach(self, client: object) -> None:
            for crasher in crashers:
                crasher.attach(client)

    view = run_pipeline(shard_records(), client_hook=Chain(), bisect=True)
    # Then the state equals one clean pass
    assert all(c.crashed for c in crashers)
    assert view == clean_view()


@pytest.mark.parametrize("batch_size", [1, 7, 100])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_batch_size_does_not_change_the_result(name: str, batch_size: int) -> None:
    # Given the same deliveries, When they are folded in batches of another size
    view = run_pipeline(shard_records(name=name), name=name, batch_size=batch_size)
    # Then the results are the same (too-late rejects aside: which message misses its gap
    # depends on what arrived before it, not on batching)
    assert view.runs == clean_view(name).runs and view.tendencies == clean_view(name).tendencies


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reordering_across_batches(seed: int) -> None:
    # Given the deliveries in a random order (every gap stays within the configured bound)
    order = list(range(len(workload().deliveries)))
    random.Random(seed).shuffle(order)
    # When they are delivered
    view = run_pipeline(shard_records(order))
    # Then the runs and tendencies equal one clean in-order pass over the unique messages
    assert_matches_reference(view)
    assert view.runs == clean_view().runs and view.tendencies == clean_view().tendencies


def test_redelivering_everything_twice_changes_nothing() -> None:
    # Given every record delivered, then the whole shard delivered again
    records = shard_records()
    again = [replace(r, sequence_number=f"{10_000 + index:056d}") for index, r in enumerate(records)]
    view = run_pipeline(records + again)
    # Then nothing is counted twice
    assert view.runs == clean_view().runs and view.tendencies == clean_view().tendencies


def test_concurrent_invocations_on_the_same_keys() -> None:
    # Given two invocations racing over overlapping slices of the same runs, with archive chunks
    # flushed every 3 messages
    records = shard_records()
    overlap = len(records) // 3
    slices = [records[: 2 * overlap], records[overlap:]]
    with embedded_aws():
        world = RunnerStatsWorld.create(templates_for("dev")["Onceflow-dev-RunnerStats"], settings_overrides={"ARCHIVE_CHUNK_SIZE": "3"})
        totals_seen: dict[tuple[int, int], list[Decimal]] = {}
        stop = threading.Event()

        def watch_totals() -> None:
            watcher = new_client()
            # A breath between scans: a scan holds the table's lock (atomic_moto_dynamodb), and back-to-back scans
            # starved the writers for up to 80 s on a busy machine; a millisecond still reads between their writes.
            while not stop.wait(0.001):
                for item in watcher.scan(TableName=world.settings.tables.run_stats, ConsistentRead=True)["Items"]:
                    key = (int(item["user_id"]["N"]), int(item["run_id"]["N"]))
                    totals_seen.setdefault(key, []).append(Decimal(item["total_meters"]["N"]))

        def deliver(part: list[ShardRecord]) -> None:
            client = new_client()
            EventSourceMapping(lambda event: world.invoke(event, client), batch_size=5).drain(ListShard(part))

        # When both run at once, several times over, with a watcher reading totals throughout
        watcher = threading.Thread(target=watch_totals)
        watcher.start()
        for _ in range(3):
            threads = [threading.Thread(target=deliver, args=(part,)) for part in slices]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        stop.set()
        watcher.join()
        view = world.view()
    # Then nothing is double counted, and no total ever went down
    assert_matches_reference(view)
    assert all(seen == sorted(seen) for seen in totals_seen.values())
    assert totals_seen, "the watcher saw the totals while they were written"
