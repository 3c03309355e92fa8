"""The saga's phases and its flag step, on the store ports. One pass over the rows each.

Every phase writes a row's status (reason 0) before it acts on the row, so a row that fails
anywhere has a status row to flag. A row an earlier transaction with the same id already flagged
stays flagged: it is rejected again with the same reason, never processed a second time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from runtime.taxi_etl.errors import StoreConflict
from runtime.taxi_etl.models import FlagRequest, Phase, PhaseResult, Row, Verdict
from runtime.taxi_etl.store import FinalTable, PutOutcome, StatusTable
from runtime.taxi_etl.trips import Accepted, Finding, Rejected, Rule, final_item, same_trip, transform_tuple, validate_line

ERROR_DETAIL_PREFIX = "error:"


def run_validation(rows: Sequence[Row], status: StatusTable) -> PhaseResult:
    return _run_checks(rows, status, Phase.VALIDATION, validate_line)


def run_transformation(rows: Sequence[Row], status: StatusTable) -> PhaseResult:
    return _run_checks(rows, status, Phase.TRANSFORMATION, transform_tuple)


def _run_checks(rows: Sequence[Row], status: StatusTable, phase: Phase, check: Callable[[str], Accepted | Rejected]) -> PhaseResult:
    verdicts: list[Verdict] = []
    for row in rows:
        flagged = status.begin(row.store_request_id, row.tuple)
        if flagged is not None:
            verdicts.append(Verdict(row.store_request_id, row.tuple, flagged.reason, flagged.detail, flagged.message))
            continue
        outcome = check(row.tuple)
        if isinstance(outcome, Rejected):
            verdicts.append(Verdict(row.store_request_id, row.tuple, phase.reason, outcome.rule.value, outcome.message))
        else:
            verdicts.append(Verdict(row.store_request_id, outcome.tuple))
    return PhaseResult(tuple(verdicts))


@dataclass(frozen=True, slots=True)
class StoreReport:
    result: PhaseResult
    stored: int
    already_stored: int
    findings: tuple[tuple[Finding, int], ...] = ()  # rows this run stored with each finding


def run_store(rows: Sequence[Row], status: StatusTable, final: FinalTable) -> StoreReport:
    """Status row with the transformed tuple, then the typed item, written once.

    Every row is attempted; a conflict is raised after the others are stored, so one bad row
    does not hold back its batch, and the workflow's Catch flags exactly the rows not stored.
    """
    verdicts: list[Verdict] = []
    counts = {PutOutcome.STORED: 0, PutOutcome.ALREADY_STORED: 0}
    findings: Counter[Finding] = Counter()
    conflicts: list[str] = []
    for row in rows:
        flagged = status.begin(row.store_request_id, row.tuple)
        if flagged is not None:
            verdicts.append(Verdict(row.store_request_id, row.tuple, flagged.reason, flagged.detail, flagged.message))
            continue
        try:
            item = final_item(row.store_request_id, row.tuple)
        except ValueError as err:
            verdicts.append(Verdict(row.store_request_id, row.tuple, Phase.STORE.reason, Rule.MALFORMED_TUPLE.value, str(err)))
            continue
        try:
            outcome = final.put_once(item)
        except StoreConflict:
            conflicts.append(row.store_request_id)
            continue
        counts[outcome] += 1
        if outcome == PutOutcome.STORED:
            findings.update(Finding(code) for code in item.get("findings", ()))
        verdicts.append(Verdict(row.store_request_id, row.tuple))
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


def flag(request: FlagRequest, tables: Mapping[Phase, StatusTable], final: FinalTable | None = None) -> FlagOutcome:
    """Set the same reason in every status table the transaction touched, for each failed row.

    The reason comes from the phase's own verdicts, or, when the phase failed as a whole, from
    the phase and the error its Catch caught. A row whose final item is already there (a batch
    whose store failed after some rows) is complete, and is not flagged.
    """
    verdicts = list(request.rejected)
    if request.error is not None:
        detail = f"{ERROR_DETAIL_PREFIX}{request.error.name}"
        verdicts = [Verdict(row.store_request_id, row.tuple, request.phase.reason, detail, request.error.cause) for row in request.rows]
        if request.phase == Phase.STORE and final is not None:
            stored = final.stored_items(verdict.store_request_id for verdict in verdicts)
            verdicts = [verdict for verdict in verdicts if not _is_stored(stored, verdict)]
    touched = request.phase.touched
    for verdict in verdicts:
        for phase in touched:
            tables[phase].flag(verdict.store_request_id, verdict.tuple, verdict.reason, verdict.detail, verdict.message)
    reasons = sorted({f"{int(verdict.reason)} {verdict.detail}" for verdict in verdicts})
    cause = f"{len(verdicts)} row(s) flagged in {', '.join(phase.value for phase in touched)} status: {'; '.join(reasons)[:900]}"
    by_detail = tuple(sorted(Counter(verdict.detail for verdict in verdicts).items()))
    return FlagOutcome(error=request.phase.failure_name, cause=cause, flagged=len(verdicts), by_detail=by_detail)


def _is_stored(stored: Mapping[str, Mapping[str, object]], verdict: Verdict) -> bool:
    """The row's own item is in the trips table (not merely some item under its id)."""
    if verdict.store_request_id not in stored:
        return False
    try:
        return same_trip(stored[verdict.store_request_id], final_item(verdict.store_request_id, verdict.tuple))
    except ValueError:
        return False
