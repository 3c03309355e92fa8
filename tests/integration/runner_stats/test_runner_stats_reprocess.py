"""The operator's rebuild of runner-stats aggregates, `python -m ops.runner_stats_reprocess`, on the embedded cloud."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from devtools.aws.clients import new_client
from devtools.aws.esm import lambda_event, records_from_payloads
from devtools.aws.faults import LostResponse
from devtools.aws.moto_patches import embedded_aws
from devtools.aws.template_resources import Template
from devtools.runner_world import RunnerStatsWorld
from devtools.state import PipelineView
from devtools.workload import Workload, batches, generate
from ops import runner_stats_reprocess
from ops.runner_stats_reprocess import format_time, rebuild_run
from ops.runner_stats_store import RunStatsRepairStore
from runtime.runner_stats.models import ArchiveChunk, ArchivedMessage, RunContext, RunKey
from runtime.runner_stats.store import RunStatsTables
from runtime.shared.dynamo import from_attributes, to_attributes

# Small archive chunks, so runs have several flushed chunks as well as a tail in the run item.
SETTINGS = {"ARCHIVE_CHUNK_SIZE": "5"}
# Everything the workload below sends: it starts 2017-11-01T13:20Z and lasts well under a day.
WHOLE_DAY = ("--from", "2017-11-01", "--to", "2017-11-02")


@pytest.fixture
def workload() -> Workload:
    # 3 users x 2 runs x 23 messages, 20 % re-sent, 10 % only late: every run has 3 or 4 chunks and a tail.
    return generate(seed=31, users=3, runs_per_user=2, messages_per_run=23, resend_rate=0.2, late_rate=0.1)


def deliver(template: Template, workload: Workload) -> RunnerStatsWorld:
    """The workload delivered through the pipeline in batches of 15, every batch accepted."""
    world = RunnerStatsWorld.create(template, settings_overrides=SETTINGS)
    first = 1
    for batch in batches(workload.deliveries, 15):
        event = lambda_event(records_from_payloads([(d.partition_key, d.data) for d in batch], first))
        assert world.invoke(event) == {"batchItemFailures": []}
        first += len(batch)
    return world


@pytest.fixture
def piped(moto_aws: None, runner_stats_template: Template, workload: Workload) -> Iterator[RunnerStatsWorld]:
    yield deliver(runner_stats_template, workload)


def arguments(world: RunnerStatsWorld, *extra: str) -> list[str]:
    tables = world.settings.tables
    return ["--run-stats-table", tables.run_stats, "--tendency-table", tables.tendency, "--messages-table", tables.messages, *extra]


def raw_items(world: RunnerStatsWorld) -> dict[str, list[dict[str, Any]]]:
    """Every item of the three tables the tool reads, exactly as stored (versions included)."""
    tables = world.settings.tables
    return {
        name: sorted(
            (from_attributes(raw) for page in world.client.get_paginator("scan").paginate(TableName=name) for raw in page["Items"]),
            key=repr,
        )
        for name in (tables.run_stats, tables.tendency, tables.messages)
    }


def run_item(world: RunnerStatsWorld, key: RunKey) -> dict[str, Any]:
    response = world.client.get_item(
        TableName=world.settings.tables.run_stats, Key=to_attributes({"user_id": key.user_id, "run_id": key.run_id}), ConsistentRead=True
    )
    return from_attributes(response["Item"])


def corrupt_totals(world: RunnerStatsWorld, key: RunKey) -> None:
    """A bug: the run's distance and count are off and its last timestamp is gone (the version is not bumped)."""
    world.client.update_item(
        TableName=world.settings.tables.run_stats,
        Key=to_attributes({"user_id": key.user_id, "run_id": key.run_id}),
        UpdateExpression="SET total_meters = total_meters + :extra, message_count = :count REMOVE last_ts",
        ExpressionAttributeValues=to_attributes({":extra": Decimal(1000), ":count": 7}),
    )


def runs_of(view: PipelineView) -> list[RunKey]:
    return sorted(RunKey(*key) for key in view.runs)


def window_of(view: PipelineView, key: RunKey) -> tuple[int, int]:
    archived = view.runs[(key.user_id, key.run_id)].archived
    return min(m.timestamp_utc for m in archived), max(m.timestamp_utc for m in archived) + 1


def listed_runs(out: str) -> list[str]:
    """The runs the tool printed a diff for."""
    return [line.strip().split(" (version")[0] for line in out.splitlines() if line.startswith("  user ")]


def test_a_clean_pipeline_shows_no_diff(piped: RunnerStatsWorld, capsys: Any) -> None:
    # Given the pipeline's own result for a workload with re-sends and late messages
    before = raw_items(piped)
    # When the tool rebuilds every run of the day as a dry run
    status = runner_stats_reprocess.main(arguments(piped, *WHOLE_DAY))
    out = capsys.readouterr().out
    # Then all 6 runs are rebuilt from their archives, nothing differs, and nothing is written
    assert status == 0, out
    assert "6 runs have archived messages in the window" in out
    assert "0 of 6 rebuilt runs and 0 of 3 tendency records differ; 0 runs skipped" in out
    assert listed_runs(out) == []
    assert raw_items(piped) == before


def test_a_damaged_run_is_shown_by_a_dry_run_and_repaired_once_by_apply(piped: RunnerStatsWorld, capsys: Any) -> None:
    # Given the clean result, then a bug that damages one run's totals and deletes its user's tendency record
    clean_view, clean_items = piped.view(), raw_items(piped)
    damaged = runs_of(clean_view)[3]
    clean_item = run_item(piped, damaged)
    corrupt_totals(piped, damaged)
    piped.client.delete_item(TableName=piped.settings.tables.tendency, Key=to_attributes({"user_id": damaged.user_id}))
    corrupted = raw_items(piped)
    # When the tool runs as a dry run
    status = runner_stats_reprocess.main(arguments(piped, *WHOLE_DAY))
    out = capsys.readouterr().out
    # Then it shows the diff of exactly that run (stored -> rebuilt) and of its user's tendency, and writes nothing
    assert status == 1
    assert listed_runs(out) == [f"user {damaged.user_id} run {damaged.run_id}"]
    meters = Decimal(clean_item["total_meters"])
    assert f"    total_meters: {meters + 1000:f} -> {meters:f}" in out
    assert f"    message_count: 7 -> {clean_item['message_count']}" in out
    assert f"    last_ts: (missing) -> {clean_item['last_ts']}" in out
    assert "total_seconds" not in out and "first_ts" not in out  # those were not damaged
    assert f"  tendency of user {damaged.user_id} (version 0):" in out
    assert "    current_run: (none) -> run " in out
    assert "1 of 6 rebuilt runs and 1 of 3 tendency records differ" in out
    assert "dry run: nothing written" in out
    assert raw_items(piped) == corrupted
    # When it runs with --apply
    assert runner_stats_reprocess.main(arguments(piped, *WHOLE_DAY, "--apply")) == 0
    assert "applied: wrote 1 runs and 1 tendency records" in capsys.readouterr().out
    # Then the stored results equal the clean pass again
    assert piped.view() == clean_view
    # and the dedup record and archive tail are as the pipeline left them; only the version moved on
    assert run_item(piped, damaged) == {**clean_item, "version": clean_item["version"] + 1}
    assert raw_items(piped)[piped.settings.tables.messages] == clean_items[piped.settings.tables.messages]
    # When it runs with --apply again
    repaired = raw_items(piped)
    status = runner_stats_reprocess.main(arguments(piped, *WHOLE_DAY, "--apply"))
    out = capsys.readouterr().out
    # Then it finds no diff and writes nothing
    assert status == 0
    assert "0 of 6 rebuilt runs and 0 of 3 tendency records differ" in out
    assert "applied: wrote 0 runs and 0 tendency records" in out
    assert raw_items(piped) == repaired


@contextmanager
def damaged(template: Template, workload: Workload) -> Iterator[RunnerStatsWorld]:
    """A fresh embedded cloud with the pipeline's result, then one run's totals damaged and its user's tendency record deleted."""
    with embedded_aws():
        world = deliver(template, workload)
        key = runs_of(world.view())[3]
        corrupt_totals(world, key)
        world.client.delete_item(TableName=world.settings.tables.tendency, Key=to_attributes({"user_id": key.user_id}))
        yield world


@pytest.mark.parametrize(("write_number", "operation"), [(1, "UpdateItem"), (2, "PutItem")])
def test_an_apply_write_whose_response_is_lost_is_the_tools_own_success(
    runner_stats_template: Template, workload: Workload, write_number: int, operation: str, capsys: Any
) -> None:
    # Given what a clean --apply makes of a damaged run and its user's deleted tendency record
    with damaged(runner_stats_template, workload) as world:
        assert runner_stats_reprocess.main(arguments(world, *WHOLE_DAY, "--apply")) == 0
        clean_apply = raw_items(world)
    capsys.readouterr()
    with damaged(runner_stats_template, workload) as world:
        # When the same --apply runs, and its totals rewrite (1) or its tendency write (2) is applied,
        # its response lost, and botocore's retry sends it again
        client = new_client()
        lost = LostResponse(at=write_number).attach(client)
        status = runner_stats_reprocess.main(arguments(world, *WHOLE_DAY, "--apply"), dynamodb=client)
        out = capsys.readouterr().out
        # Then the retry failed its condition against the tool's own write, and the tool knew it for its own
        assert (lost.chosen.split(":")[0], lost.retried, lost.second_answer) == (operation, True, "ConditionalCheckFailedException")
        assert status == 0, out
        assert "LOST RACE" not in out
        assert "applied: wrote 1 runs and 1 tendency records" in out
        # and the repaired state is exactly a clean apply's
        assert raw_items(world) == clean_apply
        # When it runs with --apply again
        status = runner_stats_reprocess.main(arguments(world, *WHOLE_DAY, "--apply"))
        out = capsys.readouterr().out
        # Then it finds no diff and writes nothing
        assert status == 0, out
        assert "0 of 6 rebuilt runs and 0 of 3 tendency records differ" in out
        assert "applied: wrote 0 runs and 0 tendency records" in out
        assert raw_items(world) == clean_apply


def test_only_runs_with_archived_messages_in_the_window_are_touched(piped: RunnerStatsWorld, capsys: Any) -> None:
    # Given two damaged runs, one of them with no archived message in the window of the other
    view = piped.view()
    inside = runs_of(view)[0]
    start, end = window_of(view, inside)
    outside = next(
        key for key in runs_of(view) if all(not start <= m.timestamp_utc < end for m in view.runs[(key.user_id, key.run_id)].archived)
    )
    expected = [key for key in runs_of(view) if any(start <= m.timestamp_utc < end for m in view.runs[(key.user_id, key.run_id)].archived)]
    for key in (inside, outside):
        corrupt_totals(piped, key)
    outside_damaged = run_item(piped, outside)
    # When the tool repairs the window of the first run
    status = runner_stats_reprocess.main(arguments(piped, "--from", format_time(start), "--to", format_time(end), "--apply"))
    out = capsys.readouterr().out
    # Then it selected exactly the runs with a message in the window and repaired only the first run
    assert status == 0
    assert f"{len(expected)} runs have archived messages in the window" in out
    assert f"1 of {len(expected)} rebuilt runs" in out
    assert listed_runs(out) == [f"user {inside.user_id} run {inside.run_id}"]
    assert piped.view().runs[(inside.user_id, inside.run_id)] == view.runs[(inside.user_id, inside.run_id)]
    # and the other run is left as it was, damage included
    assert run_item(piped, outside) == outside_damaged


class WriteBeforeFirstUpdate:
    """A DynamoDB client through which the pipeline commits once more just before the tool's first write."""

    def __init__(self, client: Any, concurrent_write: Callable[[], None]) -> None:
        self._client = client
        self._concurrent_write: Callable[[], None] | None = concurrent_write

    def update_item(self, **request: Any) -> Any:
        if self._concurrent_write is not None:
            write, self._concurrent_write = self._concurrent_write, None
            write()
        return self._client.update_item(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_pipeline_write_between_read_and_apply_is_not_clobbered(piped: RunnerStatsWorld, workload: Workload, capsys: Any) -> None:
    # Given a damaged run, and a device that sends one more message for it while the tool runs
    view = piped.view()
    damaged = runs_of(view)[1]
    clean = view.runs[(damaged.user_id, damaged.run_id)]
    corrupt_totals(piped, damaged)
    last = clean.archived[-1]
    late_message = {
        "user_id": damaged.user_id,
        "run_id": damaged.run_id,
        "sequence_id": last.sequence_id + 1,
        "timestamp_utc": last.timestamp_utc + 30_000,
        "distance_meters": 50,
    }

    def pipeline_commits() -> None:
        event = lambda_event(records_from_payloads([(str(damaged.user_id), json.dumps(late_message).encode())], 10**6))
        assert piped.invoke(event) == {"batchItemFailures": []}

    client = WriteBeforeFirstUpdate(piped.client, pipeline_commits)
    # When the tool has read the run and the pipeline commits before the tool writes
    status = runner_stats_reprocess.main(arguments(piped, *WHOLE_DAY, "--apply"), dynamodb=client)
    out = capsys.readouterr().out
    # Then the tool's write is refused and reported, with the advice to run it again
    assert status == 1
    assert f"LOST RACE user {damaged.user_id} run {damaged.run_id}: the pipeline wrote it after version" in out
    assert "run the tool again" in out
    # and the pipeline's write stands: the new message is applied and kept in the archive tail
    stored = run_item(piped, damaged)
    assert stored["high_water"] == last.sequence_id + 1
    assert f"{last.sequence_id + 1}:{last.timestamp_utc + 30_000}:50" in stored["pending"]
    assert stored["message_count"] == 8  # the damaged count plus the new message: not overwritten
    # When the operator runs the tool again
    assert runner_stats_reprocess.main(arguments(piped, *WHOLE_DAY, "--apply")) == 0
    capsys.readouterr()
    # Then the run equals a clean pass over all its messages, the new one included
    repaired = piped.view().runs[(damaged.user_id, damaged.run_id)]
    assert repaired.total_meters == clean.total_meters + 50
    assert repaired.message_count == clean.message_count + 1
    assert repaired.last_ts == last.timestamp_utc + 30_000 and repaired.first_ts == clean.first_ts


def test_runs_that_cannot_be_rebuilt_safely_are_listed_and_skipped(piped: RunnerStatsWorld, capsys: Any) -> None:
    # Given a run whose chunk 1 was deleted, and another whose run item was deleted (its tail with it)
    keys = runs_of(piped.view())
    no_chunk, no_item = keys[0], keys[2]
    tables = piped.settings.tables
    chunks = run_item(piped, no_chunk)["chunks"]
    piped.client.delete_item(TableName=tables.messages, Key=to_attributes({"run_key": no_chunk.archive_key, "chunk": 1}))
    piped.client.delete_item(TableName=tables.run_stats, Key=to_attributes({"user_id": no_item.user_id, "run_id": no_item.run_id}))
    before = raw_items(piped)
    # When the tool runs with --apply
    status = runner_stats_reprocess.main(arguments(piped, *WHOLE_DAY, "--apply"))
    out = capsys.readouterr().out
    # Then both are listed with the reason, their users' tendencies are not checked, nothing is written, and it exits 1
    assert status == 1
    assert f"SKIPPED user {no_chunk.user_id} run {no_chunk.run_id}: archive incomplete: chunk(s) 1 of {chunks} missing" in out
    assert f"SKIPPED user {no_item.user_id} run {no_item.run_id}: no run item" in out
    assert f"SKIPPED tendency of user {no_chunk.user_id}: not checked" in out
    assert "applied: wrote 0 runs and 0 tendency records" in out
    assert raw_items(piped) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: --from"),
        (["--from", "yesterday"], "--from 'yesterday' is not an ISO-8601 date or time"),
        (["--from", "2026-11-02", "--to", "2026-11-01"], "--from must be before --to"),
        (["--from", "2026-11-01", "--run-stats-table", "T"], "give --stack, or every one of"),
    ],
)
def test_bad_arguments_are_refused_with_a_message(argv: list[str], message: str, capsys: Any) -> None:
    # Given a missing or malformed window, or no way to find the tables
    # When the tool starts
    with pytest.raises(SystemExit) as stopped:
        runner_stats_reprocess.main(argv)
    # Then it stops with usage error 2 and says what is wrong
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_progress_bars_are_drawn_with_progress(piped: RunnerStatsWorld, capsys: Any) -> None:
    # Given the pipeline's result
    # When the tool runs with --progress (stderr is not a terminal here)
    assert runner_stats_reprocess.main(arguments(piped, *WHOLE_DAY, "--progress")) == 0
    err = capsys.readouterr().err
    # Then each phase draws its bar on stderr, through to the end
    assert "scanning archive chunks:" in err
    assert "scanning run items: 100%|" in err and "| 6/6 [" in err
    assert "rebuilding runs: 100%|" in err


def test_the_stack_outputs_name_the_tables(piped: RunnerStatsWorld, capsys: Any) -> None:
    # Given a stack whose outputs name the pipeline's tables
    import boto3

    tables = piped.settings.tables
    outputs = {"RunStatsTableName": tables.run_stats, "TendencyTableName": tables.tendency, "MessagesTableName": tables.messages}
    template = {
        "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {name: {"Value": value} for name, value in outputs.items()},
    }
    boto3.client("cloudformation", region_name="us-east-1").create_stack(
        StackName="Onceflow-dev-RunnerStats", TemplateBody=json.dumps(template)
    )
    # When the tool is given the stack instead of table names
    status = runner_stats_reprocess.main(["--stack", "Onceflow-dev-RunnerStats", *WHOLE_DAY])
    # Then it finds the tables and rebuilds the runs
    assert status == 0
    assert "6 runs have archived messages in the window" in capsys.readouterr().out


@pytest.mark.parametrize("context", [RunContext(RunKey(1, 2), version=1, first_ts=5, last_ts=9), RunContext(RunKey(1, 2), version=3)])
def test_totals_are_only_rewritten_over_a_stored_run_with_messages(context: RunContext) -> None:
    # Given a context that was never stored (version 1 = new), or one without any applied message
    store = RunStatsRepairStore(RunStatsTables("R", "T", "M", "X"), client=object())  # type: ignore[arg-type]
    # When its totals are to be rewritten
    # Then the store refuses before making any request
    with pytest.raises(ValueError, match="only a stored run item"):
        store.rewrite_totals(context)


def archived(*entries: tuple[int, int]) -> tuple[ArchivedMessage, ...]:
    return tuple(ArchivedMessage(seq, 1_000 * seq, Decimal(meters)) for seq, meters in entries)


@pytest.mark.parametrize(
    ("read", "chunks", "reason"),
    [
        (RunContext(RunKey(1, 2), version=1, high_water=0), [], "archive empty"),
        (
            RunContext(RunKey(1, 2), version=2, high_water=3, pending=archived((3, 10)), archive_chunks=1),
            [ArchiveChunk(RunKey(1, 2), 0, archived((1, 10), (3, 10)))],
            "archive corrupt: sequence(s) 3 archived more than once",
        ),
        (
            RunContext(RunKey(1, 2), version=2, high_water=4, pending=archived((1, 10), (2, 10))),
            [],
            "archive and dedup record disagree: high water 4, newest archived sequence 2",
        ),
        (
            RunContext(RunKey(1, 2), version=2, high_water=3, gaps=((2, 2),), pending=archived((1, 10), (2, 10), (3, 10))),
            [],
            "archive and dedup record disagree: sequence(s) 2 archived but recorded as gaps",
        ),
    ],
)
def test_an_archive_that_disagrees_with_its_run_item_is_not_rebuilt(read: RunContext, chunks: list[ArchiveChunk], reason: str) -> None:
    # Given a run item and the chunks it covers that do not add up
    # When the run is rebuilt from them
    outcome = rebuild_run(read, chunks)
    # Then the rebuild is refused with the reason
    assert isinstance(outcome, str) and outcome.startswith(reason)


def test_a_gap_still_open_is_kept_by_the_rebuild() -> None:
    # Given a run item whose sequence 2 has not arrived yet, with damaged totals
    read = RunContext(
        RunKey(1, 2), version=5, high_water=3, gaps=((2, 2),), total_meters=Decimal(1), message_count=9, pending=archived((1, 10), (3, 15))
    )
    # When it is rebuilt
    rebuilt = rebuild_run(read, [])
    # Then only the totals change: the gap stays open for the pipeline, and the version moves on by one
    assert rebuilt == replace(read, version=6, total_meters=Decimal(25), message_count=2, first_ts=1_000, last_ts=3_000)


def test_tables_that_do_not_exist_are_a_usage_error(moto_aws: None, capsys: Any) -> None:
    # Given no tables at all
    # When the tool is pointed at them
    status = runner_stats_reprocess.main(["--run-stats-table", "R", "--tendency-table", "T", "--messages-table", "M", *WHOLE_DAY])
    # Then it says so and exits 2
    assert status == 2
    assert "table(s) R, T, M do not exist" in capsys.readouterr().err
