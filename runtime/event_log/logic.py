"""The pure core of the event log: the snapshot decision, the streaming fold, chunk encoding.

A snapshot is built by merging two streams that are both in cell order: the previous
snapshot's cells (read chunk by chunk) and the segment's events (read from the segment index,
sorted by cell, then position). Memory holds at most two chunks and two pages (one merged while
the other is written or read), never the sheet.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runtime.event_log.cells import order_key
from runtime.event_log.entries import EntryKind
from runtime.event_log.models import CellValue, Head, LogEntry, PayloadRef, SnapshotMarker
from runtime.shared.consistency import deterministic_id


def snapshot_due(head: Head, every: int) -> bool:
    """The decision after an append: `every` events have passed since the last Snapshot entry."""
    return head.exists and head.since_cut >= every


def next_marker(head: Head) -> SnapshotMarker:
    """The Snapshot entry that closes the open segment at the head."""
    return SnapshotMarker(head.log_id, number=head.open_segment, cut=head.next_position - 1, previous_cut=head.last_cut)


# --- the fold ---------------------------------------------------------------------------------


def apply_event(current: CellValue | None, entry: LogEntry) -> CellValue | None:
    event = entry.event
    if event.kind == EntryKind.CLEAR_CELL:
        return None
    return CellValue(order=order_key(event.cell), cell=event.cell, value=event.value, payload=event.payload)


@dataclass(frozen=True, slots=True)
class MergedCell:
    """One cell after the fold: its final value (None: cleared), and what was read to get it."""

    order: str
    value: CellValue | None
    events: int  # segment events folded into this cell
    previous_chunk: int | None  # chunk of the previous snapshot its old value came from


def merge_segment(previous: Iterable[tuple[int, CellValue]], events: Iterable[LogEntry]) -> Iterator[MergedCell]:
    """Fold a segment's events (in cell, then position order) over the previous snapshot's
    cells (in cell order, with the index of the chunk each came from), one cell at a time."""
    old = iter(previous)
    new = iter(events)
    old_head = next(old, None)
    new_head = next(new, None)
    while old_head is not None or new_head is not None:
        candidates = []
        if old_head is not None:
            candidates.append(old_head[1].order)
        if new_head is not None:
            candidates.append(order_key(new_head.event.cell))
        order = min(candidates)
        value: CellValue | None = None
        chunk: int | None = None
        if old_head is not None and old_head[1].order == order:
            chunk, value = old_head
            old_head = next(old, None)
        folded = 0
        while new_head is not None and order_key(new_head.event.cell) == order:
            value = apply_event(value, new_head)
            folded += 1
            new_head = next(new, None)
        yield MergedCell(order, value, folded, chunk)


# --- chunks and roots -------------------------------------------------------------------------


def encode_cell(cell: CellValue) -> bytes:
    document: dict[str, Any] = {"cell": cell.cell}
    if cell.payload is not None:
        document["payload"] = cell.payload.key
        document["size"] = cell.payload.size
    else:
        document["value"] = cell.value
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def decode_chunk(body: bytes) -> list[CellValue]:
    cells: list[CellValue] = []
    for line in body.splitlines():
        if not line:
            continue
        document = json.loads(line)
        payload = PayloadRef(str(document["payload"]), int(document["size"])) if "payload" in document else None
        cells.append(CellValue(order_key(document["cell"]), document["cell"], document.get("value"), payload))
    return cells


def snapshot_prefix(log_id: str, number: int) -> str:
    return f"snapshots/{log_id}/{number:010d}/"


def chunk_key(log_id: str, number: int, index: int) -> str:
    """Hash-based and deterministic: a rerun of the same build writes exactly the same keys."""
    return f"{snapshot_prefix(log_id, number)}{deterministic_id('chunk', log_id, number, index, length=24)}.ndjson"


def root_key(log_id: str, number: int) -> str:
    return f"{snapshot_prefix(log_id, number)}root.json"


def chain_digest(previous: str, body: bytes) -> str:
    """SHA-256 chained over the chunks in order: the root's digest checks every chunk and their order."""
    return hashlib.sha256(f"{previous}:{hashlib.sha256(body).hexdigest()}".encode()).hexdigest()


def iso_utc(epoch_seconds: float) -> str:
    """When an entry or a snapshot root was written, as the log stores it."""
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
