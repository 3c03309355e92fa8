"""A bulk load's chunk: its lines through the saga's three phases in-process, flagged as the per-batch machine
flags them, and its summary written last.

The phases are the per-batch machine's own functions on the same tables (runtime/taxi_etl/phases.py,
store_phase.py), and the flagging is its flag step's (runtime/taxi_etl/flag_step.py), each phase's rejects handed
over as the state machine hands them (`rejected_request`): so a line's id, verdicts, status rows, flags and trips
item are those /trips/batch gives the same line, and GET /trips/{id} answers the same. Only a StoreConflict is
handled otherwise: the per-batch Store raises it and its Catch flags the rows that are not stored; a chunk flags
the conflicting rows itself, with the same request the Catch sends the flag step, and keeps its other rows.

Every write before the summary is idempotent (status rows begun again, flags set again, items put once), so a
chunk retried, redelivered or run again by a later generation repeats only no-ops; the summary's existence means
the chunk is done, and a later attempt returns at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.taxi_etl.bulk_plan import ChunkRange, LoadFile, summary_key
from runtime.taxi_etl.chunks import RefusedLine, chunk_rows
from runtime.taxi_etl.errors import LoadInputError
from runtime.taxi_etl.final_table import FinalTable
from runtime.taxi_etl.flag_step import CaughtError, FlagOutcome, FlagRequest, flag, rejected_request
from runtime.taxi_etl.load_bucket import LoadBucket, ObjectGone
from runtime.taxi_etl.models import Phase, Row, Verdict
from runtime.taxi_etl.phases import run_transformation, run_validation
from runtime.taxi_etl.requests import Layout
from runtime.taxi_etl.store import StatusTable
from runtime.taxi_etl.store_phase import store_rows


@dataclass(frozen=True, slots=True)
class ChunkTask:
    """The chunk task's input: the load's file, its layout, and the chunk's manifest item."""

    load: LoadFile
    layout: Layout
    chunk: ChunkRange

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> ChunkTask:
        return cls(LoadFile.from_event(event), Layout.from_json(event.get("layout")), ChunkRange.from_json(event.get("chunk")))


@dataclass(slots=True)
class ChunkSummary:
    """What a chunk did: its lines and rows, its refused lines, its rows stored, and its rows flagged (by reason and
    by detail); `to_json` is the summary object's document."""

    chunk: ChunkRange
    rows_read: int = 0
    refused: tuple[RefusedLine, ...] = ()
    stored: int = 0
    already_stored: int = 0
    flagged: Counter[str] = field(default_factory=Counter)  # by reason name: validation, transformation, store
    flagged_by_detail: Counter[str] = field(default_factory=Counter)  # by rule, or error:<name>
    findings: Counter[str] = field(default_factory=Counter)  # the chunk's stored rows (by any attempt) with each finding
    stored_now_findings: Counter[str] = field(default_factory=Counter)  # rows this attempt stored, by finding (the metric's)
    flagged_by_step: Counter[tuple[Phase, str]] = field(default_factory=Counter)  # by the flagging phase and detail (the metric's)

    def count_flags(self, phase: Phase, reasons: Counter[str], outcome: FlagOutcome) -> None:
        self.flagged.update(reasons)
        self.flagged_by_detail.update(dict(outcome.by_detail))
        self.flagged_by_step.update({(phase, detail): rows for detail, rows in outcome.by_detail})

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.chunk.index,
            "firstLine": self.chunk.first_line,
            "lines": self.chunk.lines,
            "rowsRead": self.rows_read,
            "refused": [line.to_json() for line in self.refused],
            "stored": self.stored,
            "alreadyStored": self.already_stored,
            "flagged": dict(sorted(self.flagged.items())),
            "flaggedByDetail": dict(sorted(self.flagged_by_detail.items())),
            "findings": dict(sorted(self.findings.items())),
        }


def run_chunk(
    task: ChunkTask,
    bucket: LoadBucket,
    status: Mapping[Phase, StatusTable],
    final: FinalTable,
    *,
    max_line_bytes: int,
    concurrency: int = 1,
) -> ChunkSummary | None:
    """The chunk's lines through the phases, then its summary; None when an earlier attempt wrote it already."""
    key = summary_key(task.load.load_id, task.chunk.index)
    if bucket.exists(key):
        return None
    try:
        data = bucket.read_range(task.load.key, task.load.version_id, task.chunk.start, task.chunk.end)
    except ObjectGone as err:
        raise LoadInputError(str(err)) from err
    rows, refused = chunk_rows(data, task.chunk.first_line, task.layout, max_line_bytes=max_line_bytes)
    summary = ChunkSummary(task.chunk, rows_read=len(rows), refused=refused)
    passed = _flag_rejects(
        run_validation(rows, status[Phase.VALIDATION], concurrency=concurrency).verdicts, Phase.VALIDATION, summary, status, concurrency
    )
    passed = _flag_rejects(
        run_transformation(passed, status[Phase.TRANSFORMATION], concurrency=concurrency).verdicts,
        Phase.TRANSFORMATION,
        summary,
        status,
        concurrency,
    )
    stored = store_rows(passed, status[Phase.STORE], final, concurrency=concurrency)
    _flag_rejects(stored.report.result.verdicts, Phase.STORE, summary, status, concurrency)
    if stored.conflicts:
        # What the per-batch Store's Catch asks of its flag step (flag_step.flag skips a row whose own item is stored).
        conflict = stored.conflict_error()
        caught = CaughtError(name=type(conflict).__name__, cause=str(conflict))
        outcome = flag(FlagRequest(Phase.STORE, rejected=(), rows=stored.conflicts, error=caught), status, final, concurrency=concurrency)
        summary.count_flags(Phase.STORE, Counter({Phase.STORE.reason.name.lower(): outcome.flagged}), outcome)
    summary.stored, summary.already_stored = stored.report.stored, stored.report.already_stored
    summary.findings.update({finding.value: rows for finding, rows in stored.findings_of_stored_rows})
    summary.stored_now_findings.update({finding.value: rows for finding, rows in stored.report.findings})
    bucket.put_json(key, summary.to_json())
    return summary


def _flag_rejects(
    verdicts: Sequence[Verdict], phase: Phase, summary: ChunkSummary, status: Mapping[Phase, StatusTable], concurrency: int
) -> list[Row]:
    """Flag a phase's rejects as its flag step does; the rows that passed, as the next phase is given them."""
    rejected = [verdict for verdict in verdicts if not verdict.success]
    if rejected:
        outcome = flag(rejected_request(phase, rejected), status, concurrency=concurrency)
        summary.count_flags(phase, Counter(verdict.reason.name.lower() for verdict in rejected), outcome)
    return [Row(verdict.store_request_id, verdict.tuple) for verdict in verdicts if verdict.success]
