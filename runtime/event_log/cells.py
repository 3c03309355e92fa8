"""Cell references in A1 notation and their canonical sort order. Pure.

Snapshots store cells in row-major order, and the segment index sorts a segment's events by the
same key, so a snapshot is built by merging two sorted streams instead of holding the sheet.
"""

from __future__ import annotations

import re

from runtime.event_log.errors import InvalidCell

MAX_ROW = 1_048_576  # a spreadsheet's limits (those of the common desktop formats)
MAX_COLUMN = 16_384  # "XFD"
_A1 = re.compile(r"([A-Z]{1,3})([1-9][0-9]{0,6})")


def parse_cell(reference: str) -> tuple[int, int]:
    """(row, column), both 1-based, of an A1 reference such as "B12"."""
    # ASCII first: "ß1".upper() is "SS1", which is not what the client wrote.
    match = _A1.fullmatch(reference.strip().upper()) if reference.isascii() else None
    if not match:
        raise InvalidCell(f"{reference!r} is not a cell reference in A1 notation (such as B12)")
    letters, digits = match.groups()
    column = 0
    for letter in letters:
        column = column * 26 + (ord(letter) - ord("A") + 1)
    row = int(digits)
    if row > MAX_ROW or column > MAX_COLUMN:
        raise InvalidCell(f"{reference!r} is outside the sheet ({MAX_ROW} rows, {MAX_COLUMN} columns)")
    return row, column


def cell_name(row: int, column: int) -> str:
    letters = ""
    while column:
        column, remainder = divmod(column - 1, 26)
        letters = chr(ord("A") + remainder) + letters
    return f"{letters}{row}"


def canonical_cell(reference: str) -> str:
    return cell_name(*parse_cell(reference))


def order_key(reference: str) -> str:
    """Fixed-width, so byte order is row-major order: "B12" -> "0000012:00002"."""
    row, column = parse_cell(reference)
    return f"{row:07d}:{column:05d}"
