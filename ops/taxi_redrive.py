"""Re-drive the taxi saga's flagged rows once their cause is fixed: a throttled or refused trips table,
a rule that was too strict, a bug in a phase.

A row is *flagged* when a status table holds a non-zero StatusReason for its StoreRequestId. The
tool finds the flagged rows by scanning the three status tables, or by reading the rows named
with --id. It keeps the rows that match every filter given:
  --phase  the phase that flagged the row (validation, transformation, store); the same as
  --reason its code (1, 2, 3);
  --detail StatusDetail, a rule name or a shell pattern (`error:*`);
  --id     a StoreRequestId (repeat it for several).
A row whose trip is already in the trips table is left alone. A StoreConflict is such a row: the
id holds another trip, and a redrive would only conflict again. A row that is neither flagged nor
stored belongs to an execution that is still running or ended without reaching its flag step
(aborted, or its flag step failed). This tool does not touch it: redrive that execution in Step
Functions, which keeps its input.

To redrive a row is to run a new transaction of the same StoreRequestId on the raw line kept in its
validation status row. The phases then write the same status rows and the same trip as a first
pass would. Each transaction of an id is a *generation*. The API's transaction is generation 1;
the first redrive is generation 2. The generation is kept on the validation status row (Generation),
and it names the execution: `r<N>-<StoreRequestId>`, or `rh<N>-<hash>` when that is too long.
A Standard state machine starts one execution per name, and that gives each generation its own
execution. Three steps per row:
  1. claim: one DynamoDB transaction, conditional on the row as it was read (reason, detail,
     message, generation, not pending). It sets the validation row to reason 0, Generation N and
     RedrivePending, and records the flag it clears in RedrivenFlag and RedrivenAt. It deletes the
     row's transformation and store status rows: the new execution writes them again when it gets
     there, so the tables describe only the current generation, as after a first pass. If another
     run or an execution changed the row after it was read, nothing is written and the row is
     reported. The claim also writes a random token of its own (RedriveToken): a claim that was
     applied but lost its response fails its conditions when botocore sends it again, and finds
     its own token on the row, so it goes on to step 2 instead of reporting a change.
  2. StartExecution(name of (id, N), the row as input). The input is the API's single-row
     format, {"rows": [{"StoreRequestId", "tuple"}]}.
  3. RedrivePending is removed.
What a crash or a rerun does:
  - Before step 1, nothing has changed.
  - After step 1 or step 2, the row is pending. Every run first completes the pending rows it
    reads, whatever the filters: their flag is already cleared, so leaving them would leave a row
    neither flagged nor processed (a scan reads all of them; with --id, those ids). It calls
    StartExecution again with the same name and input. Standard starts nothing new for that call:
    it answers with the running execution, or "already exists" for an ended one. So a generation
    is never run twice, and no row is lost.
  - A second run finds the rows that were stored, and the rows in flight, no longer flagged. It
    redrives nothing. A row that its redrive flags again shows as flagged with its generation. A
    later run can redrive it again, as generation N + 1.
Each row gets an execution of its own. The batch format could carry up to 100 rows, but then the
name and the input would depend on which rows were claimed together. A crash in the middle of a
claim, or two runs at once, could then start one row's generation under two names, or leave it
named by an execution that does not hold it. With one row per execution, (name, input) depends
only on (id, generation, line), and every retry lands on the same execution. The cost is 7
state transitions per row instead of 0.07, $0.18 per 1,000 redriven rows. A redrive is rare.
On an Express state machine, names do not deduplicate. A rerun after a crash between steps 2
and 3 runs that generation again. That is harmless, because every phase is idempotent (one trip
per row, a flag set twice is the same flag), but it is billed twice.

    python -m ops.taxi_redrive --stack Onceflow-prod-TaxiEtl --dry-run
    python -m ops.taxi_redrive --env prod --dry-run          # the TaxiEtl stack of cdk-outputs-prod.json
    python -m ops.taxi_redrive --stack Onceflow-prod-TaxiEtl --phase store --detail 'error:*'
    python -m ops.taxi_redrive --stack Onceflow-prod-TaxiEtl --id k-load-2019-10-row-1 --id c-0b5e...
    python -m ops.taxi_redrive --state-machine-arn ARN --trips-table T --validation-status-table V \\
        --transformation-status-table X --store-status-table S --reason 1 --detail dropoff_not_after_pickup --limit 50

Exit status: 0 when every selected row was redriven (or there was nothing to do); 1 when some rows
could not be redriven (they are listed, and a rerun retries them); 2 on a usage error.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from ops.cli import AwsSession, StackKind, add_aws_options, add_target, resolve_target, usage_errors
from ops.progress import Bar, progress_bar
from ops.taxi_store import StatusRepairTable
from runtime.shared.aws import error_code
from runtime.taxi_etl import contract as taxi_etl_contract
from runtime.taxi_etl.final_table import DynamoFinalTable
from runtime.taxi_etl.models import STORE_REQUEST_ID, Phase
from runtime.taxi_etl.requests import redrive_submission
from runtime.taxi_etl.store import StatusRow
from runtime.taxi_etl.workflow import RequestConflict, StepFunctionsWorkflow

TAXI_ETL = StackKind(
    "TaxiEtl",
    {
        taxi_etl_contract.OUTPUT_STATE_MACHINE_ARN: "state_machine_arn",
        taxi_etl_contract.OUTPUT_TRIPS_TABLE: "trips_table",
        taxi_etl_contract.OUTPUT_STATUS_TABLES[taxi_etl_contract.PHASE_VALIDATION]: "validation_status_table",
        taxi_etl_contract.OUTPUT_STATUS_TABLES[taxi_etl_contract.PHASE_TRANSFORMATION]: "transformation_status_table",
        taxi_etl_contract.OUTPUT_STATUS_TABLES[taxi_etl_contract.PHASE_STORE]: "store_status_table",
    },
)
PHASE_BY_REASON = {int(phase.reason): phase for phase in Phase}
MESSAGE_SHOWN = 160  # characters of StatusMessage in a listing


@dataclass(frozen=True)
class Resources:
    state_machine_arn: str
    trips_table: str
    validation_status_table: str
    transformation_status_table: str
    store_status_table: str

    def status_table(self, phase: Phase) -> str:
        return str(getattr(self, f"{phase.value}_status_table"))


@dataclass(frozen=True)
class Filters:
    phase: Phase | None = None
    reason: int | None = None
    detail: str | None = None  # a shell pattern
    ids: frozenset[str] = frozenset()

    def match(self, target: Target) -> bool:
        flag = target.flag
        if flag is None:
            return False
        return (
            (self.phase is None or target.phase == self.phase)
            and (self.reason is None or flag.reason == self.reason)
            and (self.detail is None or fnmatch.fnmatchcase(flag.detail or "", self.detail))
            and (not self.ids or target.store_request_id in self.ids)
        )


@dataclass(frozen=True)
class Target:
    """One StoreRequestId and its status rows as read, by the phase whose table holds them."""

    store_request_id: str
    rows: Mapping[Phase, StatusRow]

    @property
    def anchor(self) -> StatusRow | None:
        """The validation row: it holds the raw line and the redrive bookkeeping."""
        return self.rows.get(Phase.VALIDATION)

    @property
    def flag(self) -> StatusRow | None:
        """The row that says why: the validation row when it is flagged (a flag step writes it first), else the first flagged one."""
        anchor = self.anchor
        if anchor is not None and anchor.flagged:
            return anchor
        return next((row for row in self.rows.values() if row.flagged), None)

    @property
    def phase(self) -> Phase | None:
        return PHASE_BY_REASON.get(self.flag.reason) if self.flag else None

    @property
    def generation(self) -> int:
        return self.anchor.generation if self.anchor else 1

    @property
    def pending(self) -> bool:
        return bool(self.anchor and self.anchor.pending)

    def describe(self) -> str:
        flag = self.flag
        if flag is None:
            return f"{self.store_request_id}  generation {self.generation}"
        phase = self.phase.value if self.phase else "?"
        message = (flag.message or "").replace("\n", " ")
        message = message if len(message) <= MESSAGE_SHOWN else message[: MESSAGE_SHOWN - 3] + "..."
        return f"{self.store_request_id}  {phase}  reason {flag.reason}  {flag.detail or '-'}  generation {self.generation}  {message}"


@dataclass
class Report:
    scanned: int = 0
    to_redrive: list[Target] = field(default_factory=list)  # flagged, matching, not stored
    to_resume: list[Target] = field(default_factory=list)  # pending: claimed by an earlier run, maybe not started
    already_stored: list[Target] = field(default_factory=list)
    not_flagged: list[str] = field(default_factory=list)  # ids named with --id that need nothing
    held_back: int = 0  # over --limit
    redriven: list[str] = field(default_factory=list)  # "<id> as <execution> (<outcome>)"
    resumed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (id, why)


class Redriver:
    def __init__(self, resources: Resources, *, dynamodb: Any = None, stepfunctions: Any = None) -> None:
        self.resources = resources
        client = dynamodb or AwsSession().client("dynamodb")
        self.status = {phase: StatusRepairTable(resources.status_table(phase), client=client) for phase in Phase}
        self.trips = DynamoFinalTable(resources.trips_table, client=client)
        self._stepfunctions = stepfunctions
        self._workflow: StepFunctionsWorkflow | None = None

    @property
    def workflow(self) -> StepFunctionsWorkflow:
        """Built on the first start (a dry run never asks Step Functions anything)."""
        if self._workflow is None:
            client = self._stepfunctions or AwsSession().client("stepfunctions")
            # Ask the deployed state machine its type: only Standard deduplicates starts.
            kind = client.describe_state_machine(stateMachineArn=self.resources.state_machine_arn)["type"]
            self._workflow = StepFunctionsWorkflow(self.resources.state_machine_arn, deduplicates=kind == "STANDARD", client=client)
        return self._workflow

    @property
    def anchor_table(self) -> StatusRepairTable:
        return self.status[Phase.VALIDATION]

    # --- finding ------------------------------------------------------------------------------

    def find(self, filters: Filters, *, limit: int | None = None, progress: Bar | None = None) -> Report:
        report = Report()
        if filters.ids:
            ids = set(filters.ids)
        else:
            ids = set()

            def scanned(count: int) -> None:
                report.scanned += count
                if progress:
                    progress.update(count)

            for phase, table in self.status.items():
                ids.update(row.store_request_id for row in table.scan_flagged(with_pending=phase == Phase.VALIDATION, on_page=scanned))
        # One consistent read of every table for each id: the claim's conditions are on these rows.
        read = {phase: table.read_rows(ids) for phase, table in self.status.items()}
        candidates: list[Target] = []
        for store_request_id in sorted(ids):
            target = Target(store_request_id, {phase: rows[store_request_id] for phase, rows in read.items() if store_request_id in rows})
            if not target.rows:
                report.failed.append((store_request_id, "no status row has this id"))
            elif target.pending:
                report.to_resume.append(target)
            elif target.flag is None:
                report.not_flagged.append(store_request_id)
            elif filters.match(target):
                candidates.append(target)
        stored = self.trips.stored_items(target.store_request_id for target in candidates)
        for target in candidates:
            (report.already_stored if target.store_request_id in stored else report.to_redrive).append(target)
        if limit is not None and len(report.to_redrive) > limit:
            report.held_back = len(report.to_redrive) - limit
            del report.to_redrive[limit:]
        return report

    def total_rows(self) -> int:
        return sum(table.approximate_count() for table in self.status.values())

    # --- redriving ----------------------------------------------------------------------------

    def redrive(self, report: Report, progress: Bar | None = None) -> None:
        """Pending rows first (started again, under their generation's name), then the selected flagged rows."""
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for target in report.to_resume:
            anchor = target.anchor
            assert anchor is not None  # a pending target is pending through its anchor
            self._start(report, report.resumed, target.store_request_id, anchor.raw_tuple, anchor.generation)
            if progress:
                progress.update()
        for target in report.to_redrive:
            self._claim_and_start(report, target, at)
            if progress:
                progress.update()

    def _claim_and_start(self, report: Report, target: Target, at: str) -> None:
        anchor = target.anchor
        if anchor is None or anchor.raw_tuple is None:
            report.failed.append((target.store_request_id, "no validation status row holds its raw line; nothing to redrive from"))
            return
        later = [(self.status[phase], target.rows.get(phase)) for phase in (Phase.TRANSFORMATION, Phase.STORE)]
        try:
            generation = self.anchor_table.claim_redrive(anchor, later, at=at)
        except ClientError as err:
            report.failed.append((target.store_request_id, f"DynamoDB refused the claim ({error_code(err)}); nothing changed, run again"))
            return
        if generation is None:
            report.failed.append((target.store_request_id, "its status rows changed after this run read them; run again"))
            return
        self._start(report, report.redriven, target.store_request_id, anchor.raw_tuple, generation)

    def _start(self, report: Report, done: list[str], store_request_id: str, line: str | None, generation: int) -> None:
        if line is None:
            report.failed.append((store_request_id, "its validation status row has no raw line"))
            return
        submission = redrive_submission(store_request_id, line, generation)
        try:
            started = self.workflow.start(submission.execution_name, submission.execution_input())
        except RequestConflict:
            report.failed.append((store_request_id, f"execution {submission.execution_name} exists with another input; left pending"))
            return
        except ClientError as err:
            report.failed.append((store_request_id, f"StartExecution failed ({error_code(err)}); left pending, run again"))
            return
        self.anchor_table.end_pending(store_request_id, generation)
        done.append(f"{store_request_id} as {submission.execution_name} ({started.outcome.value})")


def parse_filters(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Filters:
    phase = Phase(args.phase) if args.phase else None
    if phase is not None and args.reason is not None and int(phase.reason) != args.reason:
        parser.error(f"--phase {phase.value} is reason {int(phase.reason)}, not {args.reason}")
    bad = [store_request_id for store_request_id in args.id or [] if not STORE_REQUEST_ID.fullmatch(store_request_id)]
    if bad:
        parser.error(f"--id must be a StoreRequestId (1-80 letters, digits, '_' or '-'): {', '.join(bad)}")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    return Filters(phase=phase, reason=args.reason, detail=args.detail, ids=frozenset(args.id or ()))


def print_rows(title: str, lines: Iterable[str]) -> None:
    for line in lines:
        print(f"  {title}{line}")


def main(argv: list[str] | None = None, *, cloudformation: Any = None, dynamodb: Any = None, stepfunctions: Any = None) -> int:
    """The command; the clients are the SDK's defaults unless given (tests give their own)."""
    parser = argparse.ArgumentParser(description="Re-drive the taxi saga's flagged rows (after their cause is fixed).")
    parser.add_argument("--phase", choices=[phase.value for phase in Phase], help="only rows flagged by this phase")
    parser.add_argument("--reason", type=int, choices=sorted(PHASE_BY_REASON), help="only rows with this StatusReason")
    parser.add_argument("--detail", help="only rows whose StatusDetail matches (a rule name, or a pattern like 'error:*')")
    parser.add_argument("--id", action="append", metavar="STORE_REQUEST_ID", help="only this row (repeatable); read, not scanned")
    parser.add_argument("--limit", type=int, help="redrive at most this many flagged rows this run")
    parser.add_argument("--dry-run", action="store_true", help="list what would be redriven; change nothing")
    add_target(parser, TAXI_ETL)
    add_aws_options(parser)
    parser.add_argument("--progress", action="store_true", help="draw the progress bars even when stderr is not a terminal")
    args = parser.parse_args(argv)
    filters = parse_filters(parser, args)
    aws = AwsSession.from_args(args)
    with usage_errors(parser):
        resources = Resources(**resolve_target(args, TAXI_ETL, cloudformation, aws))
        tool = Redriver(resources, dynamodb=dynamodb or aws.client("dynamodb"), stepfunctions=stepfunctions or aws.client("stepfunctions"))
    scanning = progress_bar(0 if filters.ids else tool.total_rows(), "scanning status tables", force=args.progress)
    report = tool.find(filters, limit=args.limit, progress=scanning)
    scanning.close()

    source = f"read {len(filters.ids)} ids" if filters.ids else f"scanned {report.scanned} status rows"
    print(
        f"{source}: {len(report.to_redrive)} flagged rows to redrive, {len(report.to_resume)} pending redrives to complete, "
        f"{len(report.already_stored)} flagged rows already stored (left alone)"
    )
    print_rows("redrive  ", (target.describe() for target in report.to_redrive))
    print_rows(
        "complete ",
        (f"{target.store_request_id}  generation {target.generation} (claimed, not known started)" for target in report.to_resume),
    )
    print_rows("stored   ", (target.describe() for target in report.already_stored))
    print_rows("not flagged: ", report.not_flagged)
    if report.held_back:
        print(f"  ... and {report.held_back} more over --limit {args.limit}")
    if args.dry_run:
        print(f"dry run: would redrive {len(report.to_redrive)} rows and complete {len(report.to_resume)} pending redrives")
    else:
        redriving = progress_bar(len(report.to_redrive) + len(report.to_resume), "redriving", force=args.progress)
        tool.redrive(report, redriving)
        redriving.close()
        print_rows("completed ", report.resumed)
        print_rows("redriven ", report.redriven)
        print(f"redrove {len(report.redriven)} rows, completed {len(report.resumed)} pending redrives; {len(report.failed)} failed")
        print("each execution writes its status rows as it runs; a row its redrive flags again shows here next time, one generation up")
    for store_request_id, why in report.failed:
        print(f"  NOT REDRIVEN {store_request_id}: {why}")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
