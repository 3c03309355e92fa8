"""Value types of the event log and its snapshots. Pure data, no I/O.

Where an entry sits (positions, kinds) is in entries.py; the side effects' messages in messages.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from runtime.event_log.entries import CELL_KINDS, EntryKind, marker_seq


@dataclass(frozen=True, slots=True)
class PayloadRef:
    """A cell value held in S3 (a large payload)."""

    key: str
    size: int


@dataclass(frozen=True, slots=True)
class CellEvent:
    """What a client appends: set a cell to a value (inline or in S3), or clear it."""

    kind: EntryKind
    cell: str  # A1 notation, canonical upper case
    value: str | None = None  # SetCell
    payload: PayloadRef | None = None  # LargePayload

    def __post_init__(self) -> None:
        if self.kind not in CELL_KINDS:
            raise ValueError(f"{self.kind} is not a cell event")
        if (self.kind == EntryKind.SET_CELL) != (self.value is not None):
            raise ValueError("a SetCell event carries a value, and only a SetCell event does")
        if (self.kind == EntryKind.LARGE_PAYLOAD) != (self.payload is not None):
            raise ValueError("a LargePayload event carries a payload reference, and only it does")


@dataclass(frozen=True, slots=True)
class AppendRequest:
    log_id: str
    request_id: str
    position: int
    event: CellEvent


@dataclass(frozen=True, slots=True)
class AppendResult:
    log_id: str
    position: int
    request_id: str
    duplicate: bool  # True: this request was appended before; nothing was written now


@dataclass(frozen=True, slots=True)
class Head:
    """The log's head item: where the next event goes, and where the snapshots stand."""

    log_id: str
    next_position: int = 1
    snapshots: int = 0  # Snapshot entries appended so far; the open segment is snapshots + 1
    last_cut: int = 0  # the last event covered by the newest Snapshot entry
    built: int = 0  # the newest snapshot whose build finished (the last-snapshot pointer)
    built_seq: Decimal | None = None
    built_root: str | None = None
    exists: bool = False

    @property
    def open_segment(self) -> int:
        return self.snapshots + 1

    @property
    def since_cut(self) -> int:
        return self.next_position - 1 - self.last_cut


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One cell event as stored (and as read back in segment order)."""

    log_id: str
    position: int
    request_id: str
    event: CellEvent
    segment: int


@dataclass(frozen=True, slots=True)
class SnapshotMarker:
    """The Snapshot entry k: covers events 1..cut, built from snapshot k-1 plus segment k."""

    log_id: str
    number: int
    cut: int
    previous_cut: int  # 0 for the first snapshot
    root: str | None = None  # set when the build finished

    @property
    def seq(self) -> Decimal:
        return marker_seq(self.cut)

    @property
    def previous_seq(self) -> Decimal | None:
        return marker_seq(self.previous_cut) if self.number > 1 else None

    @property
    def expected_events(self) -> int:
        return self.cut - self.previous_cut


@dataclass(frozen=True, slots=True)
class CellValue:
    """A cell in a snapshot, in sort order (`order` is the cell's canonical sort key)."""

    order: str
    cell: str
    value: str | None = None
    payload: PayloadRef | None = None


@dataclass(frozen=True, slots=True)
class BuildState:
    """The checkpoint of a snapshot build (the pending item's State).

    Everything up to and including the cell `cursor` is in the first `chunks` chunks; the
    previous snapshot is being read from chunk `previous_chunk`; `consumed` events of the
    segment were folded so far; `digest` chains the SHA-256 of every chunk written.
    """

    chunks: int = 0
    cursor: str = ""
    previous_chunk: int = 0
    consumed: int = 0
    cells: int = 0
    digest: str = ""


@dataclass(frozen=True, slots=True)
class PendingSnapshot:
    """The pending-snapshots item of a snapshot being built (the seed's attributes)."""

    log_id: str
    seq: Decimal
    created: float
    modified: float
    retries: int
    increment: int
    active: str | None
    state: BuildState = field(default_factory=BuildState)
    # When the message of a deferred or handed-off build is due back on the queue (epoch
    # seconds); None once a worker claims it. The stuck check waits for it before counting idle time.
    due: float | None = None


@dataclass(frozen=True, slots=True)
class SnapshotRoot:
    """What a finished snapshot is: its chunks in cell order and how to check them."""

    log_id: str
    number: int
    cut: int
    chunk_keys: tuple[str, ...]
    cells: int
    digest: str

    def to_document(self) -> dict[str, object]:
        return {
            "log_id": self.log_id,
            "snapshot": self.number,
            "cut": self.cut,
            "chunks": list(self.chunk_keys),
            "cells": self.cells,
            "digest": self.digest,
            "format": "ndjson; one cell per line, in row-major cell order",
        }
