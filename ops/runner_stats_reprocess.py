"""Rebuild the runner-stats aggregates of a time window from the message archive: a dry run with a diff.

The archive (flushed chunks in the messages table, plus the tail not flushed yet in each run
item) holds every applied message exactly once, so it is the source of truth for a run's totals.
This tool recomputes them and compares with what is stored, to find and repair the damage of a
bug (or a hand edit) in the run-stats and tendency tables.

How runs are found: one consistent Scan of the messages table (every chunk, decoded) and one of
the run-stats table (projection user_id, run_id, pending: the archive tails). A run is selected
when any of its archived messages has `timestamp_utc` in [--from, --to). A chunk holds its
messages as one encoded string, so a filter expression cannot select on their timestamps: both
scans read the whole table (their cost is the tables' size; --progress draws a bar for each).

How a run is rebuilt: one consistent read of its item (version v), then a Query of its chunks
0 .. chunks-1 (the ones that version covers, so a chunk flushed meanwhile is not counted twice).
The archived messages, sorted by sequence_id, are folded from an empty context with
runtime.runner_stats.logic.fold: one clean in-order pass (every archived sequence is new to that
pass, so all are applied whatever the gap bounds). Compared and repaired are the user-facing
totals only: total_meters, total_seconds, first_ts, last_ts, message_count. The user's tendency
is derived from runs, so for each user with a rebuilt run it is rebuilt from all the user's run
items (the rebuilt totals for the window's runs, the stored ones for the others) with
logic.merge_tendency in start order, and compared on the run and label of current_run and
previous_run (started_at is bookkeeping and is not compared).

What is never touched: the dedup record the live handler needs (high_water, gaps, closed,
gaps_closed), the archive (chunks and the run item's pending tail, chunk count), the confirmed
tendency label, and the rejects table. A run whose gaps are still open is rebuilt: its gaps are
kept, so a late message is still applied by the pipeline, on top of the repaired totals.

Writes (only with --apply): an UpdateItem of the five totals and version v+1, on condition that
the version is still v; then the tendency record, as version+1 over the version read. A write
the pipeline made after the read (a lost race) is never overwritten: it is reported, and a rerun
rebuilds from the new state. A write of the tool's own that landed but lost its response, so
that the SDK's retry failed its condition against it, is told from a race by the item the
condition found (our version and totals, or our whole tendency record) and counts as written.
A second --apply finds no diff and writes nothing.

Runs that cannot be rebuilt safely are listed with the reason and skipped (and so is their
user's tendency): no run item (its dedup record and archive tail are gone), a chunk missing, a
sequence archived twice, or an archive that disagrees with the dedup record (high water is not
the newest archived sequence, or an archived sequence is recorded as a gap or as closed).

Exit code: 0 when nothing differs (or everything was applied), 1 when a dry run found
differences or runs were skipped or a write lost a race (run it again), 2 on a usage error.

    python -m ops.runner_stats_reprocess --stack Onceflow-prod-RunnerStats --from 2026-11-01 --to 2026-11-02
    python -m ops.runner_stats_reprocess --stack Onceflow-prod-RunnerStats --from 2026-11-01 --to 2026-11-02 --apply
    python -m ops.runner_stats_reprocess --env dev --from 2026-11-01   # the RunnerStats stack of cdk-outputs-dev.json
    python -m ops.runner_stats_reprocess --run-stats-table T --tendency-table U --messages-table M \\
        --from 2026-11-01T12:00:00Z --to 2026-11-01T18:00:00Z --progress
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import reduce
from typing import Any

from botocore.exceptions import ClientError

from ops.cli import AwsSession, StackKind, add_aws_options, add_target, resolve_target, usage_errors
from ops.progress import Bar, progress_bar
from ops.runner_stats_store import RunStatsRepairStore
from runtime.runner_stats.contract import KEY_RUN_ID, KEY_USER_ID, OUTPUT_MESSAGES_TABLE, OUTPUT_RUN_STATS_TABLE, OUTPUT_TENDENCY_TABLE
from runtime.runner_stats.logic import contains, fold, merge_tendency, tendency_label
from runtime.runner_stats.models import (
    ArchiveChunk,
    ArchivedMessage,
    DeviceMessage,
    FoldPolicy,
    Outcome,
    PositionedMessage,
    RunContext,
    RunKey,
    StreamPosition,
    TendencySlot,
    UserTendency,
)
from runtime.runner_stats.store import RUN_STATS_PROJECTION, RunStatsTables, context_from_item
from runtime.shared.aws import error_code
from runtime.shared.consistency import VersionConflict

RUNNER_STATS = StackKind(
    "RunnerStats",
    {
        OUTPUT_RUN_STATS_TABLE: "run_stats_table",
        OUTPUT_TENDENCY_TABLE: "tendency_table",
        OUTPUT_MESSAGES_TABLE: "messages_table",
    },
)
TOTALS = tuple(name for name in RUN_STATS_PROJECTION if name not in (KEY_USER_ID, KEY_RUN_ID))
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Resources:
    run_stats_table: str
    tendency_table: str
    messages_table: str

    def tables(self) -> RunStatsTables:
        return RunStatsTables(self.run_stats_table, self.tendency_table, self.messages_table, rejects="")  # rejects: never used


@dataclass(frozen=True)
class Window:
    """[start_ms, end_ms) in epoch milliseconds, the unit of `timestamp_utc`."""

    start_ms: int
    end_ms: int

    def __contains__(self, timestamp_ms: object) -> bool:
        return isinstance(timestamp_ms, int) and self.start_ms <= timestamp_ms < self.end_ms

    def __str__(self) -> str:
        return f"[{format_time(self.start_ms)}, {format_time(self.end_ms)})"


@dataclass(frozen=True)
class Change:
    field: str
    stored: str
    rebuilt: str

    def __str__(self) -> str:
        return f"{self.field}: {self.stored} -> {self.rebuilt}"


@dataclass(frozen=True)
class RunRepair:
    read: RunContext  # the dedup record as read (version v)
    rebuilt: RunContext  # the same record with the rebuilt totals, as version v + 1
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class TendencyRepair:
    rebuilt: UserTendency  # carries the version read; save_tendency writes version + 1 over it
    changes: tuple[Change, ...]


@dataclass
class Plan:
    window: Window
    chunks_scanned: int = 0
    items_scanned: int = 0
    selected: list[RunKey] = field(default_factory=list)
    runs: list[RunRepair] = field(default_factory=list)
    skipped: dict[RunKey, str] = field(default_factory=dict)
    tendencies: list[TendencyRepair] = field(default_factory=list)
    tendencies_skipped: dict[int, str] = field(default_factory=dict)

    @property
    def differing_runs(self) -> list[RunRepair]:
        return [run for run in self.runs if run.changes]

    @property
    def differing_tendencies(self) -> list[TendencyRepair]:
        return [tendency for tendency in self.tendencies if tendency.changes]


@dataclass
class ApplyReport:
    runs_written: int = 0
    tendencies_written: int = 0
    lost_races: list[str] = field(default_factory=list)


# --- pure: rebuild and compare ----------------------------------------------------------------


def rebuild_run(read: RunContext, chunks: Sequence[ArchiveChunk]) -> RunContext | str:
    """`read` with its totals rebuilt from its archive (chunks 0..n-1 and its tail), or why it cannot be."""
    indexes = sorted(chunk.index for chunk in chunks)
    if indexes != list(range(read.archive_chunks)):
        missing = sorted(set(range(read.archive_chunks)) - set(indexes))
        return f"archive incomplete: chunk(s) {_short(missing)} of {read.archive_chunks} missing"
    archived = [message for chunk in sorted(chunks, key=lambda c: c.index) for message in chunk.messages] + list(read.pending)
    if not archived:
        return "archive empty: no chunk and no tail to rebuild from"
    key = read.key
    positioned = [
        PositionedMessage(
            StreamPosition(f"archive:{key.archive_key}:{m.sequence_id}", "", str(key.user_id)),
            DeviceMessage(key.user_id, key.run_id, m.sequence_id, m.timestamp_utc, m.distance_meters),
        )
        for m in sorted(archived, key=lambda m: m.sequence_id)
    ]
    result = fold(RunContext(key), positioned, FoldPolicy())
    repeated = sorted({p.message.sequence_id for p, outcome in result.outcomes if outcome is not Outcome.ACCEPTED})
    if repeated:
        return f"archive corrupt: sequence(s) {_short(repeated)} archived more than once"
    clean = result.context
    if clean.high_water != read.high_water:
        return f"archive and dedup record disagree: high water {read.high_water}, newest archived sequence {clean.high_water}"
    missing_yet_archived = sorted(
        {m.sequence_id for m in archived if contains(read.gaps, m.sequence_id) or contains(read.closed, m.sequence_id)}
    )
    if missing_yet_archived:
        return f"archive and dedup record disagree: sequence(s) {_short(missing_yet_archived)} archived but recorded as gaps"
    return replace(
        read,
        version=read.version + 1,
        total_meters=clean.total_meters,
        first_ts=clean.first_ts,
        last_ts=clean.last_ts,
        message_count=clean.message_count,
    )


def run_changes(stored_item: Mapping[str, Any], rebuilt: RunContext) -> tuple[Change, ...]:
    """The user-facing totals that differ, as the stored item holds them (a missing one included)."""
    values: dict[str, Any] = {
        "total_meters": rebuilt.total_meters,
        "total_seconds": rebuilt.total_seconds,
        "first_ts": rebuilt.first_ts,
        "last_ts": rebuilt.last_ts,
        "message_count": rebuilt.message_count,
    }
    return tuple(
        Change(name, _show(stored_item.get(name), name), _show(values[name], name))
        for name in TOTALS
        if _number(stored_item.get(name)) != _number(values[name])
    )


def rebuild_tendency(user_id: int, version: int, runs: Iterable[RunContext]) -> UserTendency:
    """The user's record as a clean pass leaves it: each run's label, merged in start order."""
    slots = [
        TendencySlot(run.key.run_id, run.first_ts, tendency_label(run.total_meters))
        for run in runs
        if run.message_count and run.first_ts is not None
    ]
    return reduce(merge_tendency, sorted(slots, key=lambda slot: (slot.started_at, slot.run_id)), UserTendency(user_id, version))


def tendency_changes(stored: UserTendency, rebuilt: UserTendency) -> tuple[Change, ...]:
    changes: list[Change] = []
    for name, old, new in (("current_run", stored.current, rebuilt.current), ("previous_run", stored.previous, rebuilt.previous)):
        if _slot_identity(old) != _slot_identity(new):
            changes.append(Change(name, _show_slot(old), _show_slot(new)))
    return tuple(changes)


def read_context(item: Mapping[str, Any]) -> RunContext | str:
    """The dedup record of a stored item; its totals may be damaged (they are what gets repaired)."""
    if "version" not in item or "high_water" not in item:
        return "run item has no dedup record (version or high_water missing)"
    return context_from_item({"total_meters": 0, "message_count": 0, **item})


def _slot_identity(slot: TendencySlot | None) -> tuple[int, str] | None:
    return (slot.run_id, slot.label) if slot else None


def _show_slot(slot: TendencySlot | None) -> str:
    return f"run {slot.run_id} {slot.label!r}" if slot else "(none)"


def _number(value: Any) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _show(value: Any, name: str = "") -> str:
    number = _number(value)
    if number is None:
        return "(missing)"
    text = format(number.normalize(), "f")
    if name.endswith("_ts") and number == int(number):
        try:
            return f"{text} ({format_time(int(number))})"
        except OverflowError:  # a damaged timestamp far outside any calendar
            return text
    return text


def _short(values: Sequence[int], limit: int = 8) -> str:
    text = ", ".join(str(v) for v in values[:limit])
    return text + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def format_time(epoch_ms: int) -> str:
    return (_EPOCH + timedelta(milliseconds=epoch_ms)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_time(text: str) -> int:
    """ISO-8601 date or time to epoch milliseconds; a time without offset is UTC."""
    moment = datetime.fromisoformat(text)
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def run_label(key: RunKey) -> str:
    return f"user {key.user_id} run {key.run_id}"


# --- the tool ---------------------------------------------------------------------------------


class Reprocessor:
    def __init__(self, resources: Resources, *, dynamodb: Any = None) -> None:
        self.resources = resources
        self.store = RunStatsRepairStore(resources.tables(), client=dynamodb or AwsSession().client("dynamodb"))

    def missing_tables(self) -> list[str]:
        missing: list[str] = []
        for name in (self.resources.run_stats_table, self.resources.tendency_table, self.resources.messages_table):
            try:
                self.store.approximate_item_count(name)
            except ClientError as err:
                if error_code(err) != "ResourceNotFoundException":
                    raise
                missing.append(name)
        return missing

    def find_runs(self, plan: Plan, *, progress: bool = False) -> list[RunKey]:
        """Runs with an archived message in the window: a scan of every chunk and every archive tail."""
        found: set[RunKey] = set()
        bar = self._progress(self.resources.messages_table, "scanning archive chunks", progress)
        for chunk in self.store.scan_chunks():
            plan.chunks_scanned += 1
            bar.update()
            if _any_in(chunk.messages, plan.window):
                found.add(chunk.key)
        bar.close()
        bar = self._progress(self.resources.run_stats_table, "scanning run items", progress)
        for key, tail in self.store.scan_archive_tails():
            plan.items_scanned += 1
            bar.update()
            if _any_in(tail, plan.window):
                found.add(key)
        bar.close()
        return sorted(found)

    def plan(self, window: Window, *, progress: bool = False) -> Plan:
        """Everything a dry run prints; reads only."""
        plan = Plan(window)
        plan.selected = self.find_runs(plan, progress=progress)
        bar = progress_bar(len(plan.selected), "rebuilding runs", stream=sys.stderr, force=progress)
        rebuilt: dict[RunKey, RunContext] = {}
        for key in plan.selected:
            bar.update()
            outcome = self._rebuild(key)
            if isinstance(outcome, str):
                plan.skipped[key] = outcome
            else:
                plan.runs.append(outcome)
                rebuilt[key] = outcome.rebuilt
        bar.close()
        for user_id in sorted({key.user_id for key in plan.selected}):
            skipped = [key for key in plan.skipped if key.user_id == user_id]
            if skipped:
                plan.tendencies_skipped[user_id] = f"not checked: {run_label(skipped[0])} was skipped"
                continue
            stored = self.store.load_tendency(user_id)
            try:
                runs = [rebuilt.get(run.key, run) for run in self.store.load_user_runs(user_id)]
            except (KeyError, ValueError) as err:  # another run item of the user is damaged outside the window
                plan.tendencies_skipped[user_id] = f"not checked: a run item of the user cannot be read ({err!r})"
                continue
            fresh = rebuild_tendency(user_id, stored.version, runs)
            plan.tendencies.append(TendencyRepair(fresh, tendency_changes(stored, fresh)))
        return plan

    def _rebuild(self, key: RunKey) -> RunRepair | str:
        item = self.store.read_run_item(key)
        if item is None:
            return "no run item: its dedup record and archive tail are gone, so the archive is incomplete"
        read = read_context(item)
        if isinstance(read, str):
            return read
        rebuilt = rebuild_run(read, self.store.read_chunks(key, read.archive_chunks))
        if isinstance(rebuilt, str):
            return rebuilt
        return RunRepair(read, rebuilt, run_changes(item, rebuilt))

    def apply(self, plan: Plan) -> ApplyReport:
        """Write what differs, each write guarded by the version read; never over a newer write."""
        report = ApplyReport()
        raced_users: set[int] = set()
        for repair in plan.differing_runs:
            try:
                self.store.rewrite_totals(repair.rebuilt)
                report.runs_written += 1
            except VersionConflict:
                raced_users.add(repair.read.key.user_id)
                report.lost_races.append(
                    f"{run_label(repair.read.key)}: the pipeline wrote it after version {repair.read.version} was read"
                )
        for tendency in plan.differing_tendencies:
            user_id = tendency.rebuilt.user_id
            if user_id in raced_users:
                report.lost_races.append(f"tendency of user {user_id}: not written, one of the user's runs lost its race")
                continue
            try:
                self.store.save_tendency(tendency.rebuilt)
                report.tendencies_written += 1
            except VersionConflict:
                report.lost_races.append(
                    f"tendency of user {user_id}: the pipeline wrote it after version {tendency.rebuilt.version} was read"
                )
        return report

    def _progress(self, table: str, label: str, force: bool) -> Bar:
        total = self.store.approximate_item_count(table) if force or sys.stderr.isatty() else 0
        return progress_bar(total, label, stream=sys.stderr, force=force)


def _any_in(messages: Iterable[ArchivedMessage], window: Window) -> bool:
    return any(message.timestamp_utc in window for message in messages)


def print_plan(plan: Plan) -> None:
    print(
        f"window {plan.window}: scanned {plan.chunks_scanned} archive chunks and {plan.items_scanned} run items; "
        f"{len(plan.selected)} runs have archived messages in the window"
    )
    for repair in plan.differing_runs:
        print(f"  {run_label(repair.read.key)} (version {repair.read.version}):")
        for change in repair.changes:
            print(f"    {change}")
    for tendency in plan.differing_tendencies:
        print(f"  tendency of user {tendency.rebuilt.user_id} (version {tendency.rebuilt.version}):")
        for change in tendency.changes:
            print(f"    {change}")
    for key, reason in plan.skipped.items():
        print(f"  SKIPPED {run_label(key)}: {reason}")
    for user_id, reason in plan.tendencies_skipped.items():
        print(f"  SKIPPED tendency of user {user_id}: {reason}")
    print(
        f"{len(plan.differing_runs)} of {len(plan.runs)} rebuilt runs and "
        f"{len(plan.differing_tendencies)} of {len(plan.tendencies)} tendency records differ; {len(plan.skipped)} runs skipped"
    )


def main(argv: list[str] | None = None, *, dynamodb: Any = None) -> int:
    parser = argparse.ArgumentParser(
        description="Rebuild runner-stats run totals and tendencies of a time window from the message archive; print the diff.",
        epilog="Exit code: 0 nothing differs (or all applied), 1 differences found / runs skipped / a race lost, 2 usage error.",
    )
    parser.add_argument(
        "--from", dest="start", metavar="TIME", required=True, help="window start, inclusive: ISO-8601, UTC unless an offset is given"
    )
    parser.add_argument(
        "--to", dest="end", metavar="TIME", help="window end, exclusive (default: now); e.g. 2026-11-02 or 2026-11-01T18:00:00Z"
    )
    parser.add_argument("--apply", action="store_true", help="write the rebuilt aggregates (default: a dry run that writes nothing)")
    add_target(parser, RUNNER_STATS)
    add_aws_options(parser)
    parser.add_argument("--progress", action="store_true", help="draw the progress bars even when stderr is not a terminal")
    args = parser.parse_args(argv)
    try:
        start = parse_time(args.start)
    except ValueError:
        parser.error(f"--from {args.start!r} is not an ISO-8601 date or time")
    try:
        end = parse_time(args.end) if args.end else (datetime.now(UTC) - _EPOCH) // timedelta(milliseconds=1)
    except ValueError:
        parser.error(f"--to {args.end!r} is not an ISO-8601 date or time")
    if start >= end:
        parser.error("--from must be before --to")
    aws = AwsSession.from_args(args)
    with usage_errors(parser):
        resources = Resources(**resolve_target(args, RUNNER_STATS, None, aws))
        tool = Reprocessor(resources, dynamodb=dynamodb or aws.client("dynamodb"))
        missing = tool.missing_tables()
    if missing:
        print(f"table(s) {', '.join(missing)} do not exist", file=sys.stderr)
        return 2
    plan = tool.plan(Window(start, end), progress=args.progress)
    print_plan(plan)
    if not args.apply:
        if plan.differing_runs or plan.differing_tendencies:
            print("dry run: nothing written; run again with --apply to write the rebuilt values")
            return 1
        return 1 if plan.skipped else 0
    report = tool.apply(plan)
    print(f"applied: wrote {report.runs_written} runs and {report.tendencies_written} tendency records")
    for race in report.lost_races:
        print(f"  LOST RACE {race}; nothing was overwritten")
    if report.lost_races:
        print("the pipeline wrote while the tool ran: run the tool again to rebuild from the new state")
    return 1 if report.lost_races or plan.skipped else 0


if __name__ == "__main__":
    sys.exit(main())
