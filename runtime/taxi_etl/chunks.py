"""The rows of one chunk of a bulk load's file: its lines, each a row with the id and the canonical spelling
/trips/batch gives it, or refused alone with its line number in the file. Pure.

A month file cannot be refused as a whole the way a batch is, so a line that cannot be a trip (too long, not one
CSV record, not UTF-8 text, no mapped trip layout, another field count than the file's layout) is refused on its
own, for the reason and in the words a batch would be refused for it, and the lines around it are kept. Every other
line goes through the batch route's own functions (runtime/taxi_etl/requests.py): split at LF with CR dropped and
blank lines skipped, header lines skipped wherever they are, and rows built by `submission_rows` as for an unkeyed
batch (content ids, first-seen de-duplication). So a chunk's rows are exactly the rows of the same lines sent as a
batch under the file's header, and a trip has one id whichever chunk, file or route it comes in.

A file's layout is decided once, from its first lines (`file_layout`), as a batch's is, and every chunk applies it
(`Layout.to_json` / `Layout.from_json` carry it from the plan to the chunks). A byte-order mark is dropped from the
file's first line; a chunk numbers its lines from the number of its first, so refusals name the file's lines as an
editor numbers them (1 is the first line; blank and header lines count).
"""

from __future__ import annotations

from codecs import BOM_UTF8
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from runtime.shared.refusals import InvalidRequest
from runtime.taxi_etl.models import Row
from runtime.taxi_etl.requests import (
    BINARY,
    Layout,
    check_header,
    data_line,
    decided_layout,
    field_count,
    is_header_line,
    line_problem,
    submission_rows,
    unmapped,
)
from runtime.taxi_etl.trip_lines import header_schema, line_columns


@dataclass(frozen=True, slots=True)
class RefusedLine:
    """A line of the file that cannot be a trip: its number in the file and why, in the words a batch is refused in."""

    line: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "reason": self.reason}


class ChunkRows(NamedTuple):
    rows: tuple[Row, ...]  # unique by id, in first-seen order, as parse_batch's
    refused: tuple[RefusedLine, ...]  # in line order


def file_layout(head: bytes) -> Layout:
    """The layout every chunk of a file applies, decided from `head`, the file's first bytes cut at a line end (its
    first chunk, say), as a batch's is: by the header, otherwise by the first line unless most lines have another
    field count. Refused (InvalidRequest) when the file has no line, its header names an unmapped layout, its first
    lines hold headers of two widths, or none of them has a trip's shape: then no line of it could be a trip."""
    headers: list[str] = []
    numbers: list[int] = []
    counts: list[int | None] = []
    for number, line in _numbered_lines(head, 1):
        if line is not None and is_header_line(line):
            check_header(line)
            headers.append(line)
            continue
        numbers.append(number)
        counts.append(None if line is None or BINARY.search(line) else field_count(line))
    if not headers and not counts:
        raise InvalidRequest("the file has no CSV line")
    layout = decided_layout(headers, counts, subject="file", first_line=numbers[0] if numbers else 1, counted="the first ")
    if layout is None:
        raise InvalidRequest(f"none of the file's first {len(counts)} lines is a yellow-taxi trip's 17 to 20 columns of UTF-8 CSV text")
    return layout


def chunk_rows(data: bytes, first_line: int, layout: Layout, *, max_line_bytes: int) -> ChunkRows:
    """The rows of a chunk, `data` being the file's bytes from the start of line `first_line` to a line end (or the
    file's end), and its refused lines with their numbers in the file."""
    lines: list[str] = []
    refused: list[RefusedLine] = []
    for number, line in _numbered_lines(data, first_line):
        # What the batch route refuses a whole body for (bytes that are not UTF-8, control characters) refuses the line.
        if line is None:
            problem: str | None = f"line {number} is not UTF-8 text"
        elif BINARY.search(line):
            problem = f"line {number} contains control characters: binary data, not CSV text"
        elif is_header_line(line):
            problem = _header_problem(line, number, layout)
        elif (problem := line_problem(line, number, max_line_bytes, layout)) is None:
            lines.append(line)
        if problem is not None:
            refused.append(RefusedLine(number, problem))
    _, rows = submission_rows(lines)
    return ChunkRows(rows, tuple(refused))


def _numbered_lines(data: bytes, first_line: int) -> Iterator[tuple[int, str | None]]:
    """The non-blank lines of `data` split as a batch's body is, each with its number in the file; None for a line
    that is not UTF-8. LF is one byte in UTF-8, never part of another character, so splitting the bytes at LF and
    then decoding each line gives the lines the batch route gets by decoding first."""
    if first_line == 1:
        data = data.removeprefix(BOM_UTF8)
    for number, piece in enumerate(data.split(b"\n"), start=first_line):
        try:
            text = piece.decode("utf-8")
        except UnicodeDecodeError:
            yield number, None
            continue
        line = data_line(text)
        if line is not None:
            yield number, line


def _header_problem(line: str, number: int, layout: Layout) -> str | None:
    """Why a header line is refused: it names an unmapped layout or has another width than the file's layout; None
    when it is skipped, as a batch skips its header lines wherever they are."""
    columns = line_columns(line)
    schema = header_schema(columns)
    if schema is not None and not schema.mapped:
        return f"line {number} is a CSV header of the {schema} layout; {unmapped(schema)}"
    if len(columns) != layout.fields:
        return f"line {number} is a CSV header of {len(columns)} columns, but {layout.stated}: a file has one layout"
    return None
