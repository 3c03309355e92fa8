"""A bulk load's chunk: its lines through the saga's checks in-process, read before written, flagged as the
per-batch machine flags them, and its summary written last.

The chunk reads before it writes, in batches (consistent BatchGetItem, 100 keys a request): the rows' trips items,
then the status rows of the rows not stored. A row whose own item is there is already stored (no write); a row
some status row flags is flagged as it is (counted, no write): what the per-batch phases answer for a row an
earlier transaction flagged. The other rows go through the per-batch machine's own pure checks
(trip_lines.validate_line, transform_tuple, as runtime/taxi_etl/phases.py calls them) with no status write, and
a row that passes costs ONE write: its trips item, put once (conditional). Only a row that is flagged gets status
rows: each table its phase touched is begun with the tuple that phase was given (as the per-batch phases begin
them), then flagged by the flag step's own function (runtime/taxi_etl/flag_step.py) with the request the state
machine would send it, so a flagged row's status rows are those /trips/batch leaves. A StoreConflict (the id
stored with other content) flags the row as the per-batch Store's Catch does.

A stored row therefore has no status rows when the bulk route stored it: GET /trips/{id} answers "stored" for a
content id (c-...) from its trips item alone (runtime/taxi_etl/row_state.py). Status rows differ between the
routes only for rows never flagged (/trips/batch leaves reason-0 rows, a chunk none).

Every write before the summary is idempotent (a flag set again, an item put once, its own item recognised after a
lost response), so a chunk retried, redelivered or run again by a later generation repeats only no-ops; the
summary's existence means the chunk is done, and a later attempt returns at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from runtime.shared.concurrency import map_bounded
from runtime.taxi_etl.chunks import RefusedLine, chunk_rows
from runtime.taxi_etl.errors import LoadInputError, StoreConflict
from runtime.taxi_etl.final_table import FinalTable, PutOutcome
from runtime.taxi_etl.flag_step import CaughtError, FlagOutcome, FlagRequest, flag, rejected_request
from runtime.taxi_etl.load_bucket import LoadBucket, ObjectGone
from runtime.taxi_etl.load_objects import ChunkRange, LoadFile, summary_key
from runtime.taxi_etl.models import Phase, Row, Verdict
from runtime.taxi_etl.requests import Layout
from runtime.taxi_etl.store import ChunkStatusTable, StatusRow
from runtime.taxi_etl.trip_items import final_item, same_trip
from runtime.taxi_etl.trip_lines import Rejected, transform_tuple, validate_line
from runtime.taxi_etl.trips import Finding, Reason, Rule


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


class _Judged(NamedTuple):  # not a dataclass: one per row
    """A row after the pure checks: the tuple each phase was given (validation's is the line), and either its
    trips item or the rejecting phase's verdict."""

    given: dict[Phase, str]
    item: dict[str, Any] | None = None
    rejected: Verdict | None = None


def run_chunk(
    task: ChunkTask,
    bucket: LoadBucket,
    status: Mapping[Phase, ChunkStatusTable],
    final: FinalTable,
    *,
    max_line_bytes: int,
    concurrency: int = 1,
) -> ChunkSummary | None:
    """The chunk's lines read, checked, flagged and stored, then its summary; None when an earlier attempt wrote it."""
    key = summary_key(task.load.load_id, task.chunk.index)
    if bucket.exists(key):
        return None
    try:
        data = bucket.read_range(task.load.key, task.load.version_id, task.chunk.start, task.chunk.end)
    except ObjectGone as err:
        raise LoadInputError(str(err)) from err
    rows, refused = chunk_rows(data, task.chunk.first_line, task.layout, max_line_bytes=max_line_bytes)
    summary = ChunkSummary(task.chunk, rows_read=len(rows), refused=refused)
    ids = {row.store_request_id for row in rows}
    stored = final.stored_items(ids)
    flags = _flags(status, ids - stored.keys())
    to_put: list[tuple[Row, _Judged, dict[str, Any]]] = []
    rejected: dict[Phase, list[tuple[Row, _Judged]]] = {phase: [] for phase in Phase}
    conflicts: list[tuple[Row, _Judged]] = []
    for row in rows:
        earlier = flags.get(row.store_request_id)
        if earlier is not None:
            # Rejected again with the same reason, never processed twice; its flag is already written. Counted as the
            # per-batch machine counts it: its Validate answers the flag, and that phase's flag step sets it again.
            summary.flagged[Reason(earlier.reason).name.lower()] += 1
            summary.flagged_by_detail[earlier.detail or ""] += 1
            summary.flagged_by_step[(Phase.VALIDATION, earlier.detail or "")] += 1
            continue
        judged = _judge(row)
        if judged.rejected is not None:
            rejected[_phase_of(judged.rejected)].append((row, judged))
        elif judged.item is not None and row.store_request_id in stored:
            if same_trip(stored[row.store_request_id], judged.item):
                summary.already_stored += 1
                summary.findings.update(_findings(judged.item))
            else:
                conflicts.append((row, judged))
        elif judged.item is not None:
            to_put.append((row, judged, judged.item))

    def put(entry: tuple[Row, _Judged, dict[str, Any]]) -> PutOutcome | None:
        try:
            return final.put_once(entry[2])
        except StoreConflict:
            return None

    for (row, judged, item), put_outcome in zip(to_put, map_bounded(put, to_put, concurrency), strict=True):
        if put_outcome is None:
            conflicts.append((row, judged))
            continue
        found = _findings(item)
        summary.findings.update(found)
        if put_outcome is PutOutcome.STORED:
            summary.stored += 1
            summary.stored_now_findings.update(found)
        else:
            summary.already_stored += 1
    for phase, judged_rows in rejected.items():
        if judged_rows:
            _begin(status, phase, judged_rows, concurrency)
            verdicts = [judged.rejected for _, judged in judged_rows if judged.rejected is not None]
            outcome = flag(rejected_request(phase, verdicts), status, concurrency=concurrency)
            summary.count_flags(phase, Counter(verdict.reason.name.lower() for verdict in verdicts), outcome)
    if conflicts:
        # What the per-batch Store's Catch asks of its flag step (flag_step.flag skips a row whose own item is stored).
        _begin(status, Phase.STORE, conflicts, concurrency)
        conflict_rows = tuple(Row(row.store_request_id, judged.given[Phase.STORE]) for row, judged in conflicts)
        conflict = StoreConflict.of_ids([row.store_request_id for row in conflict_rows])
        caught = CaughtError(name=type(conflict).__name__, cause=str(conflict))
        outcome = flag(FlagRequest(Phase.STORE, rejected=(), rows=conflict_rows, error=caught), status, final, concurrency=concurrency)
        summary.count_flags(Phase.STORE, Counter({Phase.STORE.reason.name.lower(): outcome.flagged}), outcome)
    bucket.put_json(key, summary.to_json())
    return summary


def _flags(status: Mapping[Phase, ChunkStatusTable], ids: set[str]) -> dict[str, StatusRow]:
    """Each id some status row flags: its first flagged row in the phases' order (validation's, which the flag step
    writes first), the one the per-batch phases and GET /trips/{id} answer from."""
    if not ids:
        return {}
    found: dict[str, StatusRow] = {}
    for phase in Phase:
        for store_request_id, row in status[phase].status_rows(ids).items():
            if row.flagged and store_request_id not in found:
                found[store_request_id] = row
    return found


def _judge(row: Row) -> _Judged:
    """The per-batch phases' checks, pure: validation, transformation, then the trips item Store would write."""
    given = {Phase.VALIDATION: row.tuple}
    validated = validate_line(row.tuple)
    if isinstance(validated, Rejected):
        return _Judged(given, rejected=_rejection(row, row.tuple, Phase.VALIDATION, validated.rule.value, validated.message))
    given[Phase.TRANSFORMATION] = validated.tuple
    transformed = transform_tuple(validated.tuple)
    if isinstance(transformed, Rejected):
        return _Judged(given, rejected=_rejection(row, validated.tuple, Phase.TRANSFORMATION, transformed.rule.value, transformed.message))
    given[Phase.STORE] = transformed.tuple
    try:
        item = final_item(row.store_request_id, transformed.tuple)
    except ValueError as err:
        return _Judged(given, rejected=_rejection(row, transformed.tuple, Phase.STORE, Rule.MALFORMED_TUPLE.value, str(err)))
    return _Judged(given, item=item)


def _rejection(row: Row, given: str, phase: Phase, detail: str, message: str) -> Verdict:
    """`phase`'s verdict on the tuple it was given, as the per-batch phase answers it."""
    return Verdict(row.store_request_id, given, phase.reason, detail, message)


def _begin(status: Mapping[Phase, ChunkStatusTable], phase: Phase, rows: Sequence[tuple[Row, _Judged]], concurrency: int) -> None:
    """Each table `phase` touched begun as the per-batch phases begin it (the tuple that phase was given), so the
    flag that follows leaves the status rows /trips/batch leaves (the flag keeps a row's RawTuple)."""
    begins = [(table, row.store_request_id, judged.given[table]) for row, judged in rows for table in phase.touched]
    map_bounded(lambda begin: status[begin[0]].begin(begin[1], begin[2]), begins, concurrency)


def _phase_of(verdict: Verdict) -> Phase:
    return next(phase for phase in Phase if phase.reason == verdict.reason)


def _findings(item: Mapping[str, Any]) -> Counter[str]:
    return Counter(Finding(code).value for code in item.get("findings", ()))
