"""The saga's phases and its flag step, on the store ports. One pass over the rows each.

Validate and Transform are here, Store in runtime/taxi_etl/store_phase.py and the flag step in
runtime/taxi_etl/flag_step.py, so that each function imports only its own (and only the row logic it runs).

Every phase writes a row's status (reason 0) before it acts on the row, so a row that fails
anywhere has a status row to flag. A row an earlier transaction with the same id already flagged
stays flagged: it is rejected again with the same reason, never processed a second time.

Rows are independent (one id, one transaction: no write of one row touches another row's
items), so up to `concurrency` rows are written at once (runtime.shared.concurrency.map_bounded);
each row's own steps stay in order on one thread: its status row, then its check or its trips
item. Verdicts come back in the rows' order, so a phase answers the same document whatever order
the writes completed in. A row whose write fails does not stop the others: every row is attempted,
then the first failure in the rows' order is raised, the one the serial loop raised (and a
StoreConflict only when no row failed otherwise). The serial loop left the rows after a failure
for the workflow's retry; they are now written in the same attempt, so when a store fails for
good the flag step (which skips stored rows) flags only the rows that really failed.
`concurrency=1` writes the rows one after another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from runtime.shared.concurrency import map_bounded
from runtime.taxi_etl.models import Phase, PhaseResult, Row, Verdict
from runtime.taxi_etl.store import StatusTable
from runtime.taxi_etl.trip_lines import Accepted, Rejected, transform_tuple, validate_line


def run_validation(rows: Sequence[Row], status: StatusTable, *, concurrency: int = 1) -> PhaseResult:
    return _run_checks(rows, status, Phase.VALIDATION, validate_line, concurrency)


def run_transformation(rows: Sequence[Row], status: StatusTable, *, concurrency: int = 1) -> PhaseResult:
    return _run_checks(rows, status, Phase.TRANSFORMATION, transform_tuple, concurrency)


def _run_checks(
    rows: Sequence[Row], status: StatusTable, phase: Phase, check: Callable[[str], Accepted | Rejected], concurrency: int
) -> PhaseResult:
    def judge(row: Row) -> Verdict:
        flagged = status.begin(row.store_request_id, row.tuple)
        if flagged is not None:
            return Verdict(row.store_request_id, row.tuple, flagged.reason, flagged.detail, flagged.message)
        outcome = check(row.tuple)
        if isinstance(outcome, Rejected):
            return Verdict(row.store_request_id, row.tuple, phase.reason, outcome.rule.value, outcome.message)
        return Verdict(row.store_request_id, outcome.tuple)

    return PhaseResult(tuple(map_bounded(judge, rows, concurrency)))
