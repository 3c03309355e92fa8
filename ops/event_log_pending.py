"""List the event log's pending snapshots, and which of them are stuck. Read-only.

A pending row lives from a snapshot's first claim until its build finishes. A row is stuck
when no worker holds a live lease on it and it has not been touched for longer than
`--stuck-after` (nothing is working on it and its message is late or gone); see
runtime/event_log/pending_check.py. Exit code 1 when a listed row is stuck (for scripts and
cron), 0 otherwise. It only reads (one Scan), so running it any number of times is harmless.
Recover a stuck snapshot with the command it prints (ops.event_log_reprocess).

    python -m ops.event_log_pending --env prod      # the EventLog stack of cdk-outputs-prod.json (make deploy ENV=prod)
    python -m ops.event_log_pending --stack Onceflow-prod-EventLog
    python -m ops.event_log_pending --stack Onceflow-prod-EventLog --stuck-only --older-than 3600
    python -m ops.event_log_pending --pending-table onceflow-prod-pending --lease-seconds 1200 --stuck-after 6600
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from ops.cli import AwsSession, StackKind, add_aws_options, add_target, resolve_target, target_flags, usage_errors
from ops.event_log_store import PendingRepairStore
from ops.progress import Bar, progress_bar
from runtime.event_log import contract as event_log_contract
from runtime.event_log.models import PendingSnapshot
from runtime.event_log.pending_check import PendingReport, PendingStatus, PendingView, StuckRules, check, format_duration

PENDING_TABLE = StackKind("EventLog", {event_log_contract.OUTPUT_PENDING_TABLE: "pending_table"})
COLUMNS = ("LOG ID", "SEQ", "AGE", "LAST MODIFIED (UTC)", "RETRIES", "CLAIM HOLDER", "LEASE", "STATUS")


def scan(store: PendingRepairStore, now: float, rules: StuckRules, progress: Bar | None = None) -> PendingReport:
    def counted() -> Iterator[PendingSnapshot]:
        for row in store.scan():
            if progress:
                progress.update()
            yield row

    return check(counted(), now, rules)


def lease_column(view: PendingView) -> str:
    if view.holder is None:
        return "-"
    return "expired" if view.lease_expired else "live"


def row(view: PendingView) -> tuple[str, ...]:
    modified = datetime.fromtimestamp(view.pending.modified, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return (
        view.log_id,
        str(view.seq),
        format_duration(view.age_seconds),
        f"{modified} ({format_duration(view.idle_seconds)} ago)",
        str(view.pending.retries),
        view.holder or "-",
        lease_column(view),
        view.status.value.upper() if view.status == PendingStatus.STUCK else view.status.value,
    )


def table(views: list[PendingView]) -> list[str]:
    rows = [COLUMNS, *(row(view) for view in views)]
    widths = [max(len(cells[index]) for cells in rows) for index in range(len(COLUMNS))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip() for cells in rows]


def summary(report: PendingReport, table_name: str, *, listed: int, listed_stuck: int) -> str:
    oldest = report.oldest
    where = f", oldest {format_duration(oldest.age_seconds)} ({oldest.log_id} at {oldest.seq})" if oldest else ""
    counts = ", ".join(f"{report.count(status)} {status.value}" for status in PendingStatus)
    return f"{len(report.views)} pending snapshots in {table_name}: {counts}{where}; listed {listed}, {listed_stuck} of them stuck"


def recovery_hint(view: PendingView, target: str) -> str:
    """The reprocess command for a stuck row, naming the stack as this run named it (--env or --stack)."""
    where = target or "--stack <EventLog stack>"
    return f"python -m ops.event_log_reprocess {where} --log-id {view.log_id} --from-position {view.cut} --dry-run"


def main(argv: list[str] | None = None, *, cloudformation: Any = None, dynamodb: Any = None, clock: Callable[[], float] = time.time) -> int:
    parser = argparse.ArgumentParser(
        description="List the event log's pending snapshots (oldest first) and which are stuck. Read-only. "
        "Exit code 1 when a listed snapshot is stuck, 0 otherwise."
    )
    add_target(parser, PENDING_TABLE)
    add_aws_options(parser)
    parser.add_argument("--stuck-only", action="store_true", help="list only the stuck snapshots")
    parser.add_argument("--older-than", type=float, default=0, metavar="SECONDS", help="list only snapshots pending for longer than this")
    parser.add_argument(
        "--lease-seconds", type=float, default=1200, help="the deployed lease (prod 1200, dev 600); younger claims are live"
    )
    parser.add_argument(
        "--stuck-after",
        type=float,
        default=6600,
        metavar="SECONDS",
        help="untouched for longer than this with no live lease means stuck (default 6600: prod's visibility timeout 5400 + its lease)",
    )
    parser.add_argument("--progress", action="store_true", help="draw the progress bar even when stderr is not a terminal")
    args = parser.parse_args(argv)
    if args.older_than < 0:
        parser.error("--older-than must be 0 or more seconds")
    try:
        rules = StuckRules(lease_seconds=args.lease_seconds, stuck_after_seconds=args.stuck_after)
    except ValueError as err:
        parser.error(f"--lease-seconds / --stuck-after: {err}")

    aws = AwsSession.from_args(args)
    with usage_errors(parser):
        table_name = resolve_target(args, PENDING_TABLE, cloudformation, aws)["pending_table"]
        store = PendingRepairStore(table_name, client=dynamodb or aws.client("dynamodb"))
        progress = progress_bar(store.approximate_count(), f"scanning {table_name}", stream=sys.stderr, force=args.progress)
        report = scan(store, clock(), rules, progress)
        progress.close()

    listed = [
        view for view in report.views if view.age_seconds > args.older_than and (view.status == PendingStatus.STUCK or not args.stuck_only)
    ]
    stuck = [view for view in listed if view.status == PendingStatus.STUCK]
    if listed:
        print("\n".join(table(listed)))
    print(summary(report, table_name, listed=len(listed), listed_stuck=len(stuck)))
    if stuck:
        print("to recover, check and re-enqueue each stuck snapshot (drop --dry-run to send; repeats are dropped by the workers):")
        for view in stuck:
            print(f"  {recovery_hint(view, target_flags(args))}")
    return 1 if stuck else 0


if __name__ == "__main__":
    sys.exit(main())
