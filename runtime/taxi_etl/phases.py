"""The saga's phases and its flag step, on the store ports. One pass over the rows each.

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

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from runtime.shared.concurrency import map_bounded
from runtime.taxi_etl import contract
from runtime.taxi_etl.errors import StoreConflict
from runtime.taxi_etl.models import FlagMode, FlagRequest, Phase, PhaseResult, Row, Verdict
from runtime.taxi_etl.store import FinalTable, PutOutcome, StatusTable
from runtime.taxi_etl.trips import Accepted, Finding, Rejected, Rule, final_item, same_trip, transform_tuple, validate_line

ERROR_DETAIL_PREFIX = "error:"
RETRYABLE_DETAIL_PREFIX = contract.DETAIL_RETRYABLE_PREFIX  # AWS failed the phase; no verdict on the row


def is_retryable_detail(detail: str | None) -> bool:
    """A flag set because AWS failed the phase (a redrive of the same line may store the row), not a verdict."""
    return bool(detail) and str(detail).startswith(RETRYABLE_DETAIL_PREFIX)


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


@dataclass(frozen=True, slots=True)
class StoreReport:
    result: PhaseResult
    stored: int
    already_stored: int
    findings: tuple[tuple[Finding, int], ...] = ()  # rows this run stored with each finding


class _RowStored(NamedTuple):  # not a dataclass: creating one costs each cold start ~0.25 ms more
    """What became of one row in the store phase: its verdict, or a conflict (no verdict)."""

    verdict: Verdict | None
    outcome: PutOutcome | None = None  # the put's, for a row whose item was written or found
    findings: tuple[Finding, ...] = ()


def run_store(rows: Sequence[Row], status: StatusTable, final: FinalTable, *, concurrency: int = 1) -> StoreReport:
    """Status row with the transformed tuple, then the typed item, written once.

    Every row is attempted; a conflict is raised after the others are stored, so one bad row
    does not hold back its batch, and the workflow's Catch flags exactly the rows not stored.
    """

    def store(row: Row) -> _RowStored:
        flagged = status.begin(row.store_request_id, row.tuple)
        if flagged is not None:
            return _RowStored(Verdict(row.store_request_id, row.tuple, flagged.reason, flagged.detail, flagged.message))
        try:
            item = final_item(row.store_request_id, row.tuple)
        except ValueError as err:
            return _RowStored(Verdict(row.store_request_id, row.tuple, Phase.STORE.reason, Rule.MALFORMED_TUPLE.value, str(err)))
        try:
            outcome = final.put_once(item)
        except StoreConflict:
            return _RowStored(None)
        return _RowStored(Verdict(row.store_request_id, row.tuple), outcome, tuple(Finding(code) for code in item.get("findings", ())))

    stored = map_bounded(store, rows, concurrency)
    verdicts: list[Verdict] = []
    counts = {PutOutcome.STORED: 0, PutOutcome.ALREADY_STORED: 0}
    findings: Counter[Finding] = Counter()
    conflicts: list[str] = []
    for row, result in zip(rows, stored, strict=True):
        if result.verdict is None:
            conflicts.append(row.store_request_id)
            continue
        if result.outcome is not None:
            counts[result.outcome] += 1
            if result.outcome == PutOutcome.STORED:
                findings.update(result.findings)
        verdicts.append(result.verdict)
    if conflicts:
        raise StoreConflict(f"{len(conflicts)} row(s) already stored with different content: {', '.join(conflicts[:10])}")
    return StoreReport(
        PhaseResult(tuple(verdicts)), counts[PutOutcome.STORED], counts[PutOutcome.ALREADY_STORED], tuple(sorted(findings.items()))
    )


@dataclass(frozen=True, slots=True)
class FlagOutcome:
    error: str  # the name the execution fails with, e.g. ValidationFailed
    cause: str
    flagged: int
    by_detail: tuple[tuple[str, int], ...] = ()  # (rule or "error:<Name>", rows), by detail: the metric's reason

    def to_json(self) -> dict[str, object]:
        return {"error": self.error, "cause": self.cause, "flagged": self.flagged}


def flag(
    request: FlagRequest, tables: Mapping[Phase, StatusTable], final: FinalTable | None = None, *, concurrency: int = 1
) -> FlagOutcome:
    """Set the same reason in every status table the transaction touched, for each failed row.

    The reason comes from the phase's own verdicts, or, when the phase failed as a whole, from
    the phase and the error its Catch caught. A row whose final item is already there (a batch
    whose store failed after some rows) is complete, and is not flagged.

    The rows' validation status is flagged first, for all of them, then their other tables
    (up to `concurrency` updates at once), so a row's validation row is flagged before any
    other, as the redrive's reading of a flag assumes.
    """
    verdicts = list(request.rejected)
    if request.error is not None:
        # The state machine says which errors were AWS's (its Catch for them asks for a retryable flag).
        retryable = request.mode in (FlagMode.RETRYABLE, FlagMode.REDRIVEN)
        detail = f"{RETRYABLE_DETAIL_PREFIX if retryable else ERROR_DETAIL_PREFIX}{request.error.name}"
        verdicts = [Verdict(row.store_request_id, row.tuple, request.phase.reason, detail, request.error.cause) for row in request.rows]
        if request.phase == Phase.STORE and final is not None:
            stored = final.stored_items(verdict.store_request_id for verdict in verdicts)
            verdicts = [verdict for verdict in verdicts if not _is_stored(stored, verdict)]
    touched = request.phase.touched

    def set_flag(update: tuple[Phase, Verdict]) -> None:
        phase, verdict = update
        tables[phase].flag(verdict.store_request_id, verdict.tuple, verdict.reason, verdict.detail, verdict.message)

    first, *others = touched
    map_bounded(set_flag, [(first, verdict) for verdict in verdicts], concurrency)
    map_bounded(set_flag, [(phase, verdict) for verdict in verdicts for phase in others], concurrency)
    reasons = sorted({f"{int(verdict.reason)} {verdict.detail}" for verdict in verdicts})
    cause = f"{len(verdicts)} row(s) flagged in {', '.join(phase.value for phase in touched)} status: {'; '.join(reasons)[:900]}"
    by_detail = tuple(sorted(Counter(verdict.detail for verdict in verdicts).items()))
    return FlagOutcome(error=request.phase.failure_name, cause=cause, flagged=len(verdicts), by_detail=by_detail)


def clear_retryable(request: FlagRequest, tables: Mapping[Phase, StatusTable], *, concurrency: int = 1) -> int:
    """Before the automatic redrive of a phase AWS failed: clear the retryable flags of the request's rows,
    so that the phase, run again, finds its status rows at reason 0. Returns the rows cleared.

    Only a retryable flag of this phase is cleared (the update's condition); a row flagged otherwise
    meanwhile (a rule, a conflict, another execution's verdict) keeps its flag, and the phase run again
    answers it from that flag. The validation rows are cleared last, the reverse of `flag`: a clear cut
    short leaves the row flagged where the redrive tool and GET /trips look first, and repeating it is
    harmless (a row already cleared fails the condition and is skipped).
    """
    *others, first = reversed(request.phase.touched)

    def clear(update: tuple[Phase, Row]) -> bool:
        phase, row = update
        return tables[phase].clear_retryable(row.store_request_id, request.phase.reason)

    map_bounded(clear, [(phase, row) for row in request.rows for phase in others], concurrency)
    return sum(map_bounded(clear, [(first, row) for row in request.rows], concurrency))


def _is_stored(stored: Mapping[str, Mapping[str, object]], verdict: Verdict) -> bool:
    """The row's own item is in the trips table (not merely some item under its id)."""
    if verdict.store_request_id not in stored:
        return False
    try:
        return same_trip(stored[verdict.store_request_id], final_item(verdict.store_request_id, verdict.tuple))
    except ValueError:
        return False
