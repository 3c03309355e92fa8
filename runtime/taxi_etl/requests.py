"""Turns an HTTP request into a submission: rows with their StoreRequestIds and the execution name. Pure.

StoreRequestId (also the execution name of a single-row request):
- `k-<Idempotency-Key>` when the client sends that header (batch rows: `kb-<key>-<line number>`,
  a namespace no single request's id can enter);
- otherwise `c-<hash of the line's canonical spelling>` (trip_lines.canonical_line: the parsed values, with
  amounts, distances, times and codes normalized; the raw line when it does not validate), the same
  on /trips, /trips/batch and the loader, so a trip re-sent in any spelling, from any file or
  route, finds its own transaction.

Only what would make a request meaningless is refused here (not text, no line, wrong column
count, a layout whose columns are not mapped, too long, too many lines); a line's content is the
Validate phase's to judge, and is flagged in the status tables, not refused. Header lines are
skipped wherever they are in a batch; a header of an unmapped layout refuses the request. The
header decides a batch's layout (without one, its first line does, unless most lines have another
field count): a line with another field count is refused by number. Telling the layout by a line's shape is left to a single headerless row.
A bulk load's chunks (runtime/taxi_etl/chunks.py) split, check and build their rows with the same functions, so a
line has the same id and the same refusal on both routes; there a bad line is refused alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.shared.consistency import deterministic_id
from runtime.shared.refusals import InvalidRequest, PayloadTooLarge
from runtime.taxi_etl.contract import CONTENT_ID_HEX_CHARS, IDEMPOTENCY_KEY_PATTERN
from runtime.taxi_etl.errors import PhaseInputError
from runtime.taxi_etl.models import Row
from runtime.taxi_etl.trip_lines import Schema, canonical_line, header_schema, headerless_layout, is_header, line_columns, row_schema
from runtime.taxi_etl.trips import COLUMN_COUNTS

IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
EXECUTION_NAME_MAX_CHARS = 80  # Step Functions' limit on an execution name
# C0 controls other than tab, CR and LF: CSV text never contains them, binary data nearly always does.
BINARY = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Submission:
    """What a request starts: its execution's name, its rows and each data line's StoreRequestId."""

    execution_name: str
    rows: tuple[Row, ...]  # unique by id, in first-seen order
    store_request_ids: tuple[str, ...]  # one per data line, in order
    skipped_header: bool = False

    def execution_input(self) -> str:
        """Canonical JSON, so a repeated request has the same input as the first (Standard deduplicates on it)."""
        rows = [{"StoreRequestId": row.store_request_id, "tuple": row.tuple} for row in self.rows]
        return json.dumps({"rows": rows}, separators=(",", ":"), ensure_ascii=False)


# The HTTP body's parsing (runtime/shared/http.py) and the state budget are imported where the API uses them: the
# bulk chunk function reads its lines with this module and never an HTTP body, and its cold start would pay for both.
def check_media_type(content_type: str | None, body: str | None) -> None:
    """415 unless a body is labelled text/csv (UTF-8), what /trips and /trips/batch take (charset=utf-8 or none):
    checked before the body is read."""
    from runtime.shared.http import CSV, require_media_type

    require_media_type(content_type, body, (CSV,))


def within_state_budget(submission: Submission) -> Submission:
    """The submission, unless a state of its execution could pass Step Functions' payload limit: then a 413
    naming it (runtime/taxi_etl/state_budget.py), before anything starts."""
    from runtime.taxi_etl.state_budget import check_state_budget

    check_state_budget(submission.rows, submission.execution_input())
    return submission


def decode_body(body: str | None, *, is_base64: bool, max_bytes: int) -> str:
    """The CSV text of the body: strict UTF-8 (a BOM, UTF-16 or invalid bytes are a 400), at most
    `max_bytes` bytes (413), and no control characters."""
    if not body:
        raise InvalidRequest("the request body is empty; send CSV text")
    from runtime.shared.http import body_text

    text = body_text(body, is_base64=is_base64, max_bytes=max_bytes, hint="send CSV lines")
    if BINARY.search(text):
        raise InvalidRequest("the request body contains control characters; send CSV text, not binary data")
    return text


def parse_idempotency_key(header: str | None) -> str | None:
    if header is None:
        return None
    if not IDEMPOTENCY_KEY.fullmatch(header):
        raise InvalidRequest("Idempotency-Key must be 1-64 letters, digits, '_' or '-'")
    return header


def content_id(line: str) -> str:
    return _spelling_id(_unkeyed(line))


def _spelling_id(spelling: str) -> str:
    """The content id of a line already in the spelling `_unkeyed` gives it (a canonical line is its own canonical
    line, and a line that does not validate stays as it is), without canonicalizing it a second time."""
    return f"c-{deterministic_id('taxi-row', spelling, length=CONTENT_ID_HEX_CHARS)}"


def _unkeyed(line: str) -> str:
    """What an unkeyed row submits: its canonical spelling when it validates, so that every spelling of the
    trip is the same execution input as well as the same id (Standard refuses a name reused with another input)."""
    return canonical_line(line) or line


def unmapped(schema: Schema) -> str:
    return f"the {schema} layout is not taken here; send yellow-trip records of 2017 or later, which carry zone ids"


def redrive_submission(store_request_id: str, line: str, generation: int) -> Submission:
    """Generation `generation` (2 for the first redrive) of a row's transaction: the row alone, under
    a name that depends only on (id, generation), so every retry of the same redrive names the same
    execution: `r<generation>-<id>`, or `rh<generation>-<hash of the id>` when that is longer than
    Step Functions allows. No name the API gives starts with `r`."""
    name = f"r{generation}-{store_request_id}"
    if len(name) > EXECUTION_NAME_MAX_CHARS:
        name = f"rh{generation}-{deterministic_id('taxi-redrive', store_request_id)}"
    return Submission(name, (Row(store_request_id, line),), (store_request_id,))


def parse_single(text: str, key: str | None, *, max_line_bytes: int) -> Submission:
    lines = _data_lines(text)
    if not lines:
        raise InvalidRequest("the request body has no CSV line")
    if len(lines) > 1:
        raise InvalidRequest(f"this route takes one CSV line, got {len(lines)}; send several to /trips/batch")
    if is_header_line(lines[0]):
        check_header(lines[0])
        raise InvalidRequest("the line is a CSV header, not a trip")
    _check_line(lines[0], 1, max_line_bytes)
    line = lines[0] if key else _unkeyed(lines[0])
    store_request_id = f"k-{key}" if key else _spelling_id(line)
    return within_state_budget(Submission(store_request_id, (Row(store_request_id, line),), (store_request_id,)))


def parse_batch(text: str, key: str | None, *, max_lines: int, max_line_bytes: int) -> Submission:
    lines = _data_lines(text)
    headers = [line for line in lines if is_header_line(line)]
    for header in headers:
        check_header(header)
    skipped_header = bool(headers)
    lines = [line for line in lines if not is_header_line(line)]
    if not lines:
        raise InvalidRequest("the batch has no CSV line")
    if len(lines) > max_lines:
        raise PayloadTooLarge(f"the batch has {len(lines)} lines; the limit is {max_lines}")
    layout = decided_layout(headers, [field_count(line) for line in lines], subject="batch")
    problems = [problem for number, line in enumerate(lines, start=1) if (problem := line_problem(line, number, max_line_bytes, layout))]
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise InvalidRequest(f"{len(problems)} of {len(lines)} lines cannot be trips, nothing was accepted: {shown}")
    ids, rows = submission_rows(lines, key)
    name = f"kb-{key}" if key else f"cb-{deterministic_id('taxi-batch', *ids)}"
    return within_state_budget(Submission(name, rows, ids, skipped_header))


def submission_rows(lines: Sequence[str], key: str | None = None) -> tuple[tuple[str, ...], tuple[Row, ...]]:
    """Each data line's StoreRequestId, in order, and the rows the lines submit: one per id, the first line that has
    it, in first-seen order. Unkeyed (/trips/batch without a key, and a bulk load's chunk), a line submits its
    canonical spelling under its content id; keyed, its own text under `kb-<key>-<number>`."""
    if not key:
        lines = [_unkeyed(line) for line in lines]
    # "kb-" keeps a keyed batch's row ids apart from single keyed ids ("k-<key>"), whatever the keys.
    ids = tuple(f"kb-{key}-{number}" if key else _spelling_id(line) for number, line in enumerate(lines, start=1))
    unique = {store_request_id: Row(store_request_id, line) for store_request_id, line in reversed(list(zip(ids, lines, strict=True)))}
    return ids, tuple(unique[store_request_id] for store_request_id in dict.fromkeys(ids))


@dataclass(frozen=True, slots=True)
class Layout:
    """How many fields every data line of a batch (or of a bulk load's file) must have, and what said so, in the
    words a refusal quotes. Serializable: a bulk load decides it once and hands it to every chunk."""

    fields: int
    source: str  # "the header", "line <n>" or "most lines (<agreeing> of <counted>)"

    @property
    def stated(self) -> str:
        """What the layout says, as a refusal quotes it: "the header has 18", "most lines (4 of 5) have 18"."""
        return f"{self.source} {'have' if self.source.startswith('most') else 'has'} {self.fields}"

    def to_json(self) -> dict[str, Any]:
        return {"fields": self.fields, "source": self.source}

    @classmethod
    def from_json(cls, document: Any) -> Layout:
        fields = document.get("fields") if isinstance(document, Mapping) else None
        source = document.get("source") if isinstance(document, Mapping) else None
        if type(fields) is not int or fields not in COLUMN_COUNTS or not isinstance(source, str) or not source:
            raise PhaseInputError(f"a layout is {{'fields': one of {list(COLUMN_COUNTS)}, 'source': text}}, not {str(document)[:80]}")
        return cls(fields, source)


def decided_layout(
    headers: Sequence[str], field_counts: Sequence[int | None], *, subject: str, first_line: int = 1, counted: str = ""
) -> Layout | None:
    """The header decides a batch's layout (one batch, one file's layout); without one, its first line does, unless
    most lines have another field count: then that count does, and a first line cut short is refused, not every
    good line after it. A truncated or shifted line then cannot pass for another year's layout. None when no line
    has a trip's shape. `field_counts` are the data lines' (None: not one CSV record); a refusal calls them the
    `subject`'s ("batch"), the first one line `first_line`, and how many were counted `counted` + the number
    ("the first " for a file's sample)."""
    widths = sorted({len(line_columns(header)) for header in headers})
    if len(widths) > 1:
        raise InvalidRequest(f"the {subject}'s headers have {' and '.join(map(str, widths))} columns; send one layout per {subject}")
    if widths:
        return Layout(widths[0], "the header")
    layout = headerless_layout(field_counts)
    if layout is None:
        return None
    fields, agreeing = layout
    if fields == field_counts[0]:
        return Layout(fields, f"line {first_line}")
    return Layout(fields, f"most lines ({agreeing} of {counted}{len(field_counts)})")


def field_count(line: str) -> int | None:
    try:
        return len(line_columns(line))
    except ValueError:
        return None


def data_line(piece: str) -> str | None:
    """The text between two LFs as a line: without its line ending (CRLF or LF), so a retry with other line endings
    hashes the same; None when it is blank (blank lines are skipped)."""
    return piece.rstrip("\r") if piece.strip() else None


def _data_lines(text: str) -> list[str]:
    return [line for piece in text.split("\n") if (line := data_line(piece)) is not None]


def is_header_line(line: str) -> bool:
    try:
        return is_header(line_columns(line))
    except ValueError:
        return False


def check_header(line: str) -> None:
    schema = header_schema(line_columns(line))
    if schema is not None and not schema.mapped:
        raise InvalidRequest(f"the CSV header names the {schema} layout; {unmapped(schema)}")


def _check_line(line: str, number: int, max_line_bytes: int) -> None:
    problem = line_problem(line, number, max_line_bytes)
    if problem:
        raise PayloadTooLarge(problem) if "bytes" in problem else InvalidRequest(problem)


def line_problem(line: str, number: int, max_line_bytes: int, layout: Layout | None = None) -> str | None:
    """Why line `number` cannot be a trip (too long, not one CSV record, no mapped trip layout, another field count
    than `layout`), or None: what refuses a whole batch, and a bulk load's line alone."""
    size = len(line.encode("utf-8", "surrogatepass"))
    if size > max_line_bytes:
        return f"line {number} is {size} bytes; the limit is {max_line_bytes}"
    try:
        columns = line_columns(line)
    except ValueError as err:  # an unclosed quote, say
        return f"line {number} is not one well-formed CSV record ({err})"
    schema = row_schema(columns)
    if schema is None:
        return f"line {number} has {len(columns)} columns; a yellow-taxi trip has 17 to 20"
    if not schema.mapped:
        return f"line {number} has the {schema} layout; {unmapped(schema)}"
    if layout is not None and len(columns) != layout.fields:
        return f"line {number} has {len(columns)} columns, but {layout.stated} (a truncated or shifted row)"
    return None
