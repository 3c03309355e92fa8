"""The saga's Store phase, on the store ports (see runtime/taxi_etl/phases.py: one pass over the rows,
up to `concurrency` rows written at once, verdicts in the rows' order)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from runtime.shared.concurrency import map_bounded
from runtime.taxi_etl.errors import StoreConflict
from runtime.taxi_etl.final_table import FinalTable, PutOutcome
from runtime.taxi_etl.models import Phase, PhaseResult, Row, Verdict
from runtime.taxi_etl.store import StatusTable
from runtime.taxi_etl.trip_items import final_item
from runtime.taxi_etl.trips import Finding, Rule


@dataclass(frozen=True, slots=True)
class StoreReport:
    """The Store phase's verdicts and what it counted: items written, items already there, findings."""

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
    stored = store_rows(rows, status, final, concurrency=concurrency)
    if stored.conflicts:
        raise stored.conflict_error()
    return stored.report


@dataclass(frozen=True, slots=True)
class StoredRows:
    """The Store phase's pass over its rows: its report (without the conflicting rows) and the rows whose id the
    trips table holds with different content. The per-batch machine raises the conflict (its Catch flags them);
    a bulk load's chunk flags them itself (runtime/taxi_etl/bulk_chunk.py)."""

    report: StoreReport
    conflicts: tuple[Row, ...]
    # Rows whose own item is in the trips table (stored now or before), by finding: what the rows are, whichever
    # attempt stored them (the report's findings count only this attempt's).
    findings_of_stored_rows: tuple[tuple[Finding, int], ...] = ()

    def conflict_error(self) -> StoreConflict:
        return StoreConflict.of_ids([row.store_request_id for row in self.conflicts])


def store_rows(rows: Sequence[Row], status: StatusTable, final: FinalTable, *, concurrency: int = 1) -> StoredRows:
    """Every row through the Store phase (see run_store); a conflict is returned, not raised."""

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
    findings_of_stored_rows: Counter[Finding] = Counter()
    conflicts: list[Row] = []
    for row, result in zip(rows, stored, strict=True):
        if result.verdict is None:
            conflicts.append(row)
            continue
        if result.outcome is not None:
            counts[result.outcome] += 1
            findings_of_stored_rows.update(result.findings)
            if result.outcome == PutOutcome.STORED:
                findings.update(result.findings)
        verdicts.append(result.verdict)
    report = StoreReport(
        PhaseResult(tuple(verdicts)), counts[PutOutcome.STORED], counts[PutOutcome.ALREADY_STORED], tuple(sorted(findings.items()))
    )
    return StoredRows(report, tuple(conflicts), tuple(sorted(findings_of_stored_rows.items())))
