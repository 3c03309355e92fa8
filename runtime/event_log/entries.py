"""What places an entry in the log: its log id, its position (seq) and its kind. Pure.

Apart from the value types (models.py), whose frozen dataclasses cost about a millisecond each at
a cold start: the stream router and the payload finalizer need only these and messages.py.

Positions. Events of a log are numbered 1, 2, 3, ... (the client names the position it appends
at, which makes the entry key deterministic). The Snapshot entry that closes segment k sits at
`cut_k + 0.5`: right after the last event it covers, in the same sort order, without taking a
position a client could be appending at. Segment k is the events in (cut_{k-1}, cut_k]; an event
belongs to the segment that was open (head.snapshots + 1) when it was appended.
"""

from __future__ import annotations

import re
from decimal import Decimal
from enum import StrEnum
from typing import Any

HALF = Decimal("0.5")
# Events are numbered below this; keeps every position (and a marker's .5) exact in DynamoDB.
MAX_POSITION = 10**12 - 1
LOG_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# A log seq as text: an event's position, or a Snapshot entry's cut + 0.5. Matching the text first
# keeps NaN, Infinity, 1E+400 and 40-digit numbers away from Decimal arithmetic and DynamoDB.
SEQ_TEXT = re.compile(rf"[0-9]{{1,{len(str(MAX_POSITION))}}}(?:\.[05])?")


class EntryKind(StrEnum):
    SET_CELL = "SetCell"
    CLEAR_CELL = "ClearCell"
    LARGE_PAYLOAD = "LargePayload"  # a SetCell whose value is an S3 object
    SNAPSHOT = "Snapshot"


CELL_KINDS = frozenset({EntryKind.SET_CELL, EntryKind.CLEAR_CELL, EntryKind.LARGE_PAYLOAD})
# The entries the stream router is invoked for (its FilterCriteria): each has a side effect.
SIDE_EFFECT_KINDS = (EntryKind.SNAPSHOT, EntryKind.LARGE_PAYLOAD)


def marker_seq(cut: int) -> Decimal:
    """Sort key of the Snapshot entry that closes the segment ending at event `cut`."""
    return Decimal(cut) + HALF


def parse_seq(value: Any) -> Decimal | None:
    """A log seq from text or a JSON number, from 0 to MAX_POSITION in steps of 0.5; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = str(value)
    if not SEQ_TEXT.fullmatch(text):
        return None
    seq = Decimal(text)
    return seq if seq <= MAX_POSITION else None
