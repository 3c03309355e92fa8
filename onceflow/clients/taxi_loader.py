"""Load a CSV file of NYC yellow-taxi trips, of any size, into the taxi ETL saga (Pipeline 3) through
`POST /trips/batch`, then read every row back and print what became of it. A library and a CLI
(the console script `onceflow-taxi-load` of the `clients` extra, or `python -m
onceflow.clients.taxi_loader`)::

    onceflow-taxi-load trips.csv --env dev
    onceflow-taxi-load trips.csv --url "$API_URL"          # the key from ONCEFLOW_API_KEY
    python -m onceflow.clients.taxi_loader trips.csv --url "$API_URL" --api-key "$KEY" --batch-lines 200 --no-progress
    onceflow-taxi-load trips.csv --env dev --in-flight 1       # one batch after another (default: 8 in flight)

    from onceflow.clients.taxi_loader import HttpTaxiApi, LoadOptions, load_file
    report = load_file(Path("trips.csv"), HttpTaxiApi(api_url, api_key), LoadOptions(wait_seconds=60))
    report.exit_status, report.states.stored, report.states.flagged   # flagged: {(phase, reason, detail): rows}

The API key comes from --api-key, else ONCEFLOW_API_KEY, else (with --env) the secret named by the
taxi stack's `ApiKeySecretArn` output (read with boto3). The URL is --url, or the stack's `ApiUrl`
in cdk-outputs-NAME.json (--env NAME; --outputs-file PATH for another file).

Exit status: 0 when every data line of the file was read back stored (with --no-read-back: taken by
the API); 1 when every line's fate is known but some are not stored: flagged by a phase, or refused
(by the loader or the API); 3 when the load is incomplete: rows not sent (the API did not answer,
or refused the key), unread, or still pending after --wait (run it again: nothing is stored twice);
3 wins over 1. 2: a usage error; 130: interrupted (Ctrl-C; run it again). Every data line is in
exactly one of the summary's counts: stored, flagged, refused, not sent, unread, pending.

Why a rerun never stores a row twice
------------------------------------
1. **No key: content ids.** Batches go without an Idempotency-Key, so the API names each row by its
   content, `c-<hash of the trip's canonical parsed values>`, the id /trips gives the same trip,
   and an unkeyed batch's execution `cb-<hash of its ids>`. The same rows cut the same way are the
   same execution (Standard answers a re-sent batch as a duplicate), and a row already stored by any
   route, under any batch, is recognised by the store phase (`RowsAlreadyStored`): a rerun, a CRLF or
   BOM copy, a re-saved file or another --batch-lines map to the same ids and add nothing.
2. **The header decides the layout**, as the API does: each batch carries the file's header line
   (its body stays within 64 KiB with it), a data line whose field count differs from the header's
   (without a header, from the first data line's, unless most of the first 100 data lines have
   another count) is refused by its line number and not sent, so a truncated row cannot pass for
   another year's layout. Blank lines are not sent, and a malformed line is refused in the API's
   words and left out: one bad line never refuses the batch around it.
3. **The checkpoint** `<file>.onceflow-progress` is an optimisation, not what makes a rerun safe: an
   append-only JSON-lines file of the execution names (content, not line ranges or the file's bytes)
   of the batches the API acknowledged, per API URL. A rerun computes each batch's ids as the API
   does (runtime/taxi_etl/trip_lines.canonical_line) and skips a batch whose name is there, reading its
   rows back by those ids; any other batch is sent (a duplicate at worst). A batch is recorded only
   when the API's ids are the loader's. Deleting the checkpoint is always safe. A checkpoint of an
   older loader (format 1, keyed ids `kb-`) stops the run (exit 2): those rows are stored under
   other ids, and loading them now would store them again (README, Upgrade notes).
4. **A 413** (a batch whose states could pass Step Functions' payload limit, or over the API's line
   or byte limit) is split in two and each half sent (recursively; a single row refused so is
   reported refused): the halves' rows keep their ids.

Batches in flight
-----------------
Up to --in-flight N batches (LoadOptions.in_flight; default 8, 1..32) are sent at once, by N
threads, while the file is read on (at most 2N batches read and not yet committed, so memory stays
bounded). Each sender keeps the HTTP client's retries and backoff; the POSTs at once are halved when
an answer came only after a retry (429, 5xx, no answer: `Answer.pushed_back`) and grow back by one
after as many answers without one. A 413 is split by the batch's own sender. N = 1 is the serial
loader, on the calling thread: each batch sent and committed before the next is read.

**The checkpoint is written in file order.** Answers come back in any order; each batch's outcome
(its records, counts and printed lines) is held until every batch before it has answered, then
added to the report and the checkpoint (`InOrderCommits`): a batch answered after a later one is
written first, and one answered while an earlier one is still in flight waits in memory. "Answered"
means final for this run: acknowledged (written), or refused, unanswered after every retry, or not
sent after a stop (never written). A batch after a failed one is still written in its turn: the
checkpoint names content (execution names), not line ranges or a high-water mark, so a rerun sends
exactly the batches it does not name, and no record ever stands for a batch whose answer has not come
back. A crash or Ctrl-C loses only the held answers (the rerun sends those batches again and the
API answers them as duplicates); what is written is always the acknowledged batches among the
first k of the file, in file order. The report, the summary and the refusals are the serial
loader's, line for line; only "the API did not answer 3 batches in a row" counts in the order the
answers came, and batches already in flight when the run stops are still answered and counted.

At the end the loader reads every row back with `GET /trips/{StoreRequestId}`, up to 16 at a time
(fewer while the API fails or throttles: halved on a failure, one more after as many successes),
each GET with a 10 s timeout and 3 attempts. Pending or unseen rows, and failed reads, are read
again with a growing pause until --wait seconds after the last batch; --wait bounds that wait, not
the reading: rows not settled by then are read once more after it, and a row is reported pending
only when that last read said so, unread only when its reads after the deadline failed.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import itertools
import json
import os
import queue
import random
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import IO, Any, Protocol, TextIO
from urllib.parse import quote

from onceflow.clients import extra
from onceflow.clients.local import LOCAL_ENV, LocalCloud, LocalCloudError, missing_file, running_local_cloud
from onceflow.runtime.shared.consistency import deterministic_id
from onceflow.runtime.taxi_etl import contract
from onceflow.runtime.taxi_etl.trip_lines import (
    Schema,
    canonical_line,
    header_schema,
    headerless_layout,
    is_header,
    line_columns,
    row_schema,
)
from onceflow.runtime.taxi_etl.trips import MAX_LINE_BYTES

PROG = "onceflow-taxi-load"  # the console script; also `python -m onceflow.clients.taxi_loader`
ALL_STORED_EXIT_STATUS = 0  # every data line stored (with --no-read-back: taken by the API)
NOT_STORED_EXIT_STATUS = 1  # every line's fate known, some flagged or refused
USAGE_EXIT_STATUS = 2
INCOMPLETE_EXIT_STATUS = 3  # rows not sent, unread or still pending: run it again
INTERRUPTED_EXIT_STATUS = 130  # Ctrl-C, as a shell reports it
# dev's batch_max_lines (prod takes 200). With content ids, 200 of the sample's widest rows take 246,510 bytes of
# Step Functions' 262,144 in their widest state (runtime/taxi_etl/state_budget.py), so prod's 200 fit too; wider
# rows get a 413 and are split (`_deliver`), so the default need not be lower.
DEFAULT_BATCH_LINES = 100
LAYOUT_LINES = 100  # the data lines before any header read ahead to decide a headerless file's layout
MAX_BATCH_LINES = 1000  # the most any deployment takes (TaxiEtlConfig.batch_max_lines)
BATCH_MAX_BYTES = 64 * 1024  # the API's body limit (TaxiEtlConfig.batch_max_bytes)
CONTENT_ID_HEX_CHARS = 32  # c-<hash>, as the API makes it (runtime.taxi_etl.requests.content_id)
CHECKPOINT_SUFFIX = ".onceflow-progress"
CHECKPOINT_FORMAT = 2  # 1: the loader of keyed batches (kb- ids), refused
READERS = 16  # the most concurrent GET /trips/{id} of the read-back
READ_TIMEOUT_SECONDS = 10.0  # one GET: a BatchGetItem behind the API, well under a second when the API is not overloaded
READ_ATTEMPTS = 3  # per GET, with full-jitter backoff; a row whose GET still failed is read again in a later pass
FAILED_READS_TO_PAUSE = 8  # failed GETs in a row: the rest of the pass is not tried (the API is down); read in the next
RETRIES_AFTER_DEADLINE = 3  # passes in a row after --wait that settle none of the failed reads: then they are unread
POST_TIMEOUT_SECONDS = 35.0  # API Gateway answers 503 at 30 s: wait for that answer rather than time out first
READ_CHUNK = 1 << 20
DEFAULT_WAIT_SECONDS = 300.0
SHOWN_FLAGGED = 50  # flagged rows listed one by one in the summary; the rest are counted
STACK_SUFFIX = "-TaxiEtl"  # the taxi stack in a CDK outputs file (Onceflow-<env>-TaxiEtl)
OUTPUTS_FILE = "cdk-outputs-{env}.json"  # what `make deploy ENV=<env>` writes
API_KEY_VARIABLE = "ONCEFLOW_API_KEY"
UNREACHABLE_BATCHES_TO_STOP = 3  # consecutive POSTs the API did not answer: the run stops sending
# Batches in flight at once (--in-flight): a batch is a round trip of tens of ms (more with Step Functions' StartExecution
# behind it), so one at a time leaves the API idle; 8 keeps a 100-line batch's POSTs well under an API's default
# throttle and lets the read-back's 16 readers follow. 1 is the serial loader; more than 32 buys nothing but 429s.
DEFAULT_IN_FLIGHT = 8
MAX_IN_FLIGHT = 32
# C0 controls other than tab, CR and LF: what the API refuses as binary data (runtime.taxi_etl.requests.BINARY).
BINARY = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# What the API refuses in front of a body (runtime.shared.http.UTF8_BOM): the loader drops it from a line.
UTF8_BOM = b"\xef\xbb\xbf"
_API_LINE = re.compile(r"\bline (\d+)\b")
_CONTENT_ID = re.compile(rf"c-[0-9a-f]{{{CONTENT_ID_HEX_CHARS}}}")
EXIT_STATUSES = (
    "exit status: 0 every data line was read back stored (with --no-read-back: taken by the API); "
    "1 every line's fate is known, but some were flagged by a phase or refused (fix them, load them from a new file); "
    "3 incomplete: rows not sent, unread, or still pending after --wait (run it again: nothing is stored twice; 3 wins over 1); "
    "2 usage; 130 interrupted"
)


class UsageError(Exception):
    """The command line, the outputs file, the checkpoint or the key cannot be used (exit status 2)."""


class ApiUnavailable(Exception):
    """The API gave no usable answer after every retry (no connection, timeouts, 429 or 5xx)."""


# --- lines ------------------------------------------------------------------------------------


class Kind(Enum):
    ROW = "row"  # a data line the API takes: sent
    HEADER = "header"  # a header of a mapped layout (or of none): decides the layout, sent in front of each batch
    SKIPPED = "skipped"  # blank: not sent
    REFUSED = "refused"  # a line the API would refuse: reported, not sent


@dataclass(frozen=True, slots=True)
class Line:
    number: int  # in the file, from 1
    kind: Kind
    text: str = ""  # ROW: the line as sent (no line ending); HEADER: the header line
    problem: str = ""  # REFUSED: why, in the API's words, with the file's line number
    fields: int = 0  # ROW and HEADER: the number of CSV fields


def _unmapped(schema: Schema) -> str:
    return f"the {schema} layout is not taken here; send yellow-trip records of 2017 or later, which carry zone ids"


def classify(number: int, data: bytes | None, size: int, *, max_line_bytes: int = MAX_LINE_BYTES) -> Line:
    """One line of the file (`data` without its line ending; None when it was too long to keep) as the
    API would see it alone. The messages are the API's (runtime.taxi_etl.requests), numbered by
    the file's lines; the API judges UTF-8 and control characters for the whole body, the loader per line.
    A byte-order mark in front of a line (the file's own on line 1, as spreadsheets save "CSV UTF-8";
    or where files were concatenated) is dropped: the API refuses a body that starts with one, and a
    BOM is never part of a trip. The layout rule (the header decides) is `apply_layout`'s."""
    if data is None or size > max_line_bytes:
        return Line(number, Kind.REFUSED, problem=f"line {number} is {size} bytes; the limit is {max_line_bytes}")
    try:
        text = data.removeprefix(UTF8_BOM).decode("utf-8")
    except UnicodeDecodeError:
        return Line(number, Kind.REFUSED, problem=f"line {number} is not UTF-8 text; send CSV lines")
    if BINARY.search(text):
        return Line(number, Kind.REFUSED, problem=f"line {number} contains control characters; send CSV text, not binary data")
    if not text.strip():
        return Line(number, Kind.SKIPPED)
    try:
        columns = line_columns(text)
    except ValueError as err:  # an unclosed quote, say
        return Line(number, Kind.REFUSED, problem=f"line {number} is not one well-formed CSV record ({err})")
    if is_header(columns):
        schema = header_schema(columns)
        if schema is not None and not schema.mapped:
            return Line(number, Kind.REFUSED, problem=f"line {number}: the CSV header names the {schema} layout; {_unmapped(schema)}")
        return Line(number, Kind.HEADER, text=text, fields=len(columns))
    schema = row_schema(columns)
    if schema is None:
        return Line(number, Kind.REFUSED, problem=f"line {number} has {len(columns)} columns; a yellow-taxi trip has 17 to 20")
    if not schema.mapped:
        return Line(number, Kind.REFUSED, problem=f"line {number} has the {schema} layout; {_unmapped(schema)}")
    return Line(number, Kind.ROW, text=text, fields=len(columns))


def apply_layout(lines: Iterable[Line]) -> Iterator[Line]:
    """The header decides the layout, as the API decides it for a batch: a data line whose field count
    differs from the header's is refused (a truncated or shifted row, e.g. a 2019 row cut short, which
    would otherwise pass for a 2017 one). A header further down (files concatenated) decides from there
    on. Before any header, the first data line does, unless most of the first LAYOUT_LINES data lines have
    another count (trip_lines.headerless_layout, the API's rule for a headerless batch): then a first line
    cut short is refused, not every good line after it. Those lines are read ahead, so memory holds at most
    LAYOUT_LINES lines more."""
    lines = iter(lines)
    ahead: list[Line] = []
    rows: list[Line] = []
    for line in lines:
        ahead.append(line)
        if line.kind is Kind.ROW:
            rows.append(line)
        if line.kind is Kind.HEADER or len(rows) >= LAYOUT_LINES:
            break
    layout = headerless_layout([line.fields for line in rows]) if rows else None
    fields, source = 0, ""
    if layout is not None:
        fields, agreeing = layout
        first = rows[0]
        source = (
            f"the first data line (line {first.number}) has"
            if fields == first.fields
            else f"most of the first data lines ({agreeing} of {len(rows)}) have"
        )
    for line in itertools.chain(ahead, lines):
        if line.kind is Kind.HEADER:
            fields, source = line.fields, f"the header (line {line.number}) has"
        elif line.kind is Kind.ROW and line.fields != fields:
            line = Line(
                line.number,
                Kind.REFUSED,
                problem=f"line {line.number} has {line.fields} columns, but {source} {fields} (a truncated or shifted row)",
            )
        yield line


def read_lines(
    stream: IO[bytes], *, max_line_bytes: int = MAX_LINE_BYTES, on_bytes: Callable[[bytes], None] | None = None
) -> Iterator[Line]:
    """The file's lines, classified and under the layout rule, read lazily: memory holds one line at a
    time, and a line too long to be a trip (binary data without line breaks, say) is counted through,
    never held whole. `on_bytes` sees every byte read, in order (the send pass hashes the file with it)."""
    return apply_layout(_physical_lines(stream, max_line_bytes, on_bytes))


def _physical_lines(stream: IO[bytes], max_line_bytes: int, on_bytes: Callable[[bytes], None] | None) -> Iterator[Line]:
    keep = max_line_bytes + 2  # the line and its CRLF
    number = 0
    while True:
        chunk = stream.readline(keep + 1)
        if not chunk:
            return
        if on_bytes:
            on_bytes(chunk)
        number += 1
        if chunk.endswith(b"\n") or len(chunk) <= keep:
            data = chunk.rstrip(b"\n").rstrip(b"\r")
            yield classify(number, data, len(data), max_line_bytes=max_line_bytes)
            continue
        size = len(chunk)
        while not chunk.endswith(b"\n"):
            chunk = stream.readline(READ_CHUNK)
            if not chunk:
                break
            if on_bytes:
                on_bytes(chunk)
            size += len(chunk)
        yield classify(number, None, size - (1 if chunk.endswith(b"\n") else 0), max_line_bytes=max_line_bytes)


# --- ids --------------------------------------------------------------------------------------


def content_id(line: str) -> str:
    """The StoreRequestId the API gives an unkeyed row (runtime.taxi_etl.requests.content_id of the line it
    submits, its canonical spelling): the same for every spelling of the trip, from any file or route."""
    canonical = canonical_line(line)
    # The API hashes canonical_line(submitted) or submitted: when the line is canonical as it is (an Open Data line) or does
    # not validate, that is `canonical or line` without spelling it out again (the parse is most of the loader's CPU).
    hashed = canonical or line if canonical is None or canonical == line else canonical_line(canonical) or canonical
    return f"c-{deterministic_id('taxi-row', hashed, length=CONTENT_ID_HEX_CHARS)}"


def batch_name(ids: Sequence[str]) -> str:
    """The execution name the API gives an unkeyed batch of rows with these ids (and the checkpoint's record of it)."""
    return f"cb-{deterministic_id('taxi-batch', *ids)}"


# --- batches ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Batch:
    first: int  # the file's line numbers this batch covers, both included
    last: int
    header: str | None = None  # the header line in force (sent first in the body), None for a headerless file
    rows: list[tuple[int, str]] = field(default_factory=list)  # (line number, text) of the lines sent, in order
    refused: list[Line] = field(default_factory=list)

    def body(self) -> bytes:
        return batch_body(self.header, self.rows)

    @property
    def lines(self) -> str:
        return f"line {self.first}" if self.first == self.last else f"lines {self.first}-{self.last}"


def batch_body(header: str | None, rows: Sequence[tuple[int, str]]) -> bytes:
    head = f"{header}\n" if header is not None else ""
    return (head + "".join(f"{text}\n" for _, text in rows)).encode("utf-8")


def _cost(text: str) -> int:
    return len(text.encode("utf-8")) + 1


def _header_cost(header: str | None) -> int:
    return 0 if header is None else _cost(header)


def iter_batches(lines: Iterable[Line], *, batch_lines: int = DEFAULT_BATCH_LINES, batch_bytes: int = BATCH_MAX_BYTES) -> Iterator[Batch]:
    """Batches of consecutive lines, lazily: at most `batch_lines` lines each (every line counts), cut
    before a row that would make the body (the header in force included) exceed `batch_bytes`, and
    before a header other than the batch's once it has rows (a batch has one layout)."""
    batch: Batch | None = None
    header: str | None = None
    size = 0
    for line in lines:
        cost = _cost(line.text) if line.kind is Kind.ROW else 0
        new_header = line.kind is Kind.HEADER and line.text != header
        if batch is not None and (batch.last - batch.first + 1 >= batch_lines or size + cost > batch_bytes or (new_header and batch.rows)):
            yield batch
            batch = None
        if line.kind is Kind.HEADER:
            header = line.text
        if batch is None:
            batch, size = Batch(line.number, line.number, header), _header_cost(header)
        elif batch.header != header and not batch.rows:
            batch.header, size = header, _header_cost(header)
        batch.last = line.number
        if line.kind is Kind.ROW:
            batch.rows.append((line.number, line.text))
            size += cost
        elif line.kind is Kind.REFUSED:
            batch.refused.append(line)
    if batch is not None:
        yield batch


def scan_file(stream: IO[bytes], on_bytes: Callable[[int], object] | None = None) -> tuple[str, int]:
    """The file's SHA-256 (hex) and its number of lines, in one streaming pass."""
    digest = hashlib.sha256()
    lines = 0
    last = b""
    while chunk := stream.read(READ_CHUNK):
        digest.update(chunk)
        lines += chunk.count(b"\n")
        last = chunk
        if on_bytes:
            on_bytes(len(chunk))
    if last and not last.endswith(b"\n"):
        lines += 1
    return digest.hexdigest(), lines


# --- the checkpoint ---------------------------------------------------------------------------


def checkpoint_path_for(path: Path) -> Path:
    return path.with_name(path.name + CHECKPOINT_SUFFIX)


class Checkpoint:
    """The execution names of the batches the API acknowledged, per API URL: an append-only JSON-lines
    file (a first line naming the format, then one `{"url", "execution", "rows"}` per batch), flushed
    after each. A line cut short by a crash is ignored. Only an optimisation: a batch it does not
    hold is sent, and the API answers what it already has as a duplicate or an already stored row."""

    def __init__(self, path: Path, acknowledged: dict[str, set[str]], stream: TextIO) -> None:
        self.path = path
        self.acknowledged = acknowledged
        self._stream = stream
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path) -> Checkpoint:
        """The checkpoint at `path` (a new one when there is none); a usage error when the file is not one of
        this loader, or one of the older loader of keyed batches."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = None
        except (OSError, ValueError) as err:
            raise UsageError(f"cannot read the checkpoint {path} ({err}); move it away to start over") from err
        if text is None or not text.strip():
            try:
                # now, so a place where it cannot be written stops the run before anything is sent; appending, so two loaders
                # of one file that start together never write over each other (a second head line reads as a record cut short)
                stream = path.open("a" if not text else "w", encoding="utf-8")
                if stream.tell() == 0:
                    stream.write(
                        json.dumps({"format": CHECKPOINT_FORMAT, "loader": PROG, "records": "execution names of acknowledged batches"})
                        + "\n"
                    )
                stream.flush()
            except OSError as err:
                raise UsageError(f"cannot write the checkpoint {path} ({err.strerror or err}); pass --checkpoint PATH") from err
            return cls(path, {}, stream)
        lines = text.splitlines()
        try:
            head = json.loads(lines[0])
            if not isinstance(head, dict):
                raise ValueError("not a JSON object")
        except ValueError as err:
            raise UsageError(f"{path} is not a checkpoint of this loader ({err}); move it away to start over") from err
        if head.get("format") == 1 or "sha256" in head:
            raise UsageError(
                f"{path} was written by an older {PROG}, which stored rows under keyed ids (kb-<file hash>-...); this one sends "
                "no key, so the API gives content ids (c-...) and rows that loader stored would be stored a second time. "
                "Set those rows aside or load only new data (README, Upgrade notes), then move the checkpoint away"
            )
        if head.get("format") != CHECKPOINT_FORMAT:
            raise UsageError(f"{path} is not a checkpoint of this loader (format {head.get('format')!r}); move it away to start over")
        acknowledged: dict[str, set[str]] = {}
        for line in lines[1:]:
            try:
                record = json.loads(line)
                acknowledged.setdefault(str(record["url"]), set()).add(str(record["execution"]))
            except (ValueError, KeyError, TypeError):  # a record cut short by a crash: that batch is sent again
                continue
        try:
            stream = path.open("a", encoding="utf-8")
            if not text.endswith("\n"):
                stream.write("\n")
        except OSError as err:
            raise UsageError(f"cannot write the checkpoint {path} ({err.strerror or err}); pass --checkpoint PATH") from err
        return cls(path, acknowledged, stream)

    def done(self, url: str, name: str) -> bool:
        return name in self.acknowledged.get(url, ())

    def acknowledge(self, url: str, name: str, rows: int) -> None:
        with self._lock:
            if self.done(url, name):
                return
            self.acknowledged.setdefault(url, set()).add(name)
            self._stream.write(json.dumps({"url": url, "execution": name, "rows": rows}) + "\n")
            self._stream.flush()

    def close(self) -> None:
        self._stream.close()


# --- the API ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    document: dict[str, Any]
    pushed_back: int = 0  # answers before this one that were retried (429, 5xx, no answer): the loader sends fewer at once

    @property
    def error(self) -> str:
        return str(self.document.get("error") or self.document.get("message") or self.document)


class TaxiApi(Protocol):
    """What the loader needs of the API; `HttpTaxiApi` is the real one, tests inject others."""

    url: str

    def post_batch(self, body: bytes) -> Answer: ...

    def get_row(self, store_request_id: str) -> Answer: ...


RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


class HttpTaxiApi:
    """The deployed API over HTTPS with urllib. A request that got no usable answer (no connection, a
    timeout, 429 or 5xx) is sent again, the same bytes, with full-jitter backoff: a batch's rows have
    content ids and the batch an execution name made of them, so if an earlier attempt started the
    batch the API answers the retry as a duplicate. A GET gets a shorter timeout and fewer attempts:
    the read-back reads a failed row again later, with fewer readers."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = POST_TIMEOUT_SECONDS,
        attempts: int = 6,
        read_timeout: float = READ_TIMEOUT_SECONDS,
        read_attempts: int = READ_ATTEMPTS,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self._key = api_key
        self._timeout = timeout
        self._attempts = attempts
        self._read_timeout = read_timeout
        self._read_attempts = read_attempts
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._sleep = sleep

    def post_batch(self, body: bytes) -> Answer:
        headers = {"content-type": "text/csv; charset=utf-8"}
        return self._request("POST", contract.ROUTE_TRIP_BATCH, body, headers, self._timeout, self._attempts)

    def get_row(self, store_request_id: str) -> Answer:
        path = contract.ROUTE_ROW_STATE.replace(f"{{{contract.KEY_STORE_REQUEST_ID}}}", quote(store_request_id, safe=""))
        return self._request("GET", path, None, {}, self._read_timeout, self._read_attempts)

    def _request(self, method: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float, attempts: int) -> Answer:
        why = "no attempt"
        for attempt in range(attempts):
            if attempt:
                self._sleep(random.uniform(0, min(self._max_backoff, self._backoff * 2**attempt)))
            request = urllib.request.Request(
                self.url + path,
                data=body,
                method=method,
                headers={"Authorization": self._key, "accept": "application/json", "user-agent": "onceflow-taxi-loader", **headers},
            )
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    answer = Answer(response.status, _json(response.read()))
            except urllib.error.HTTPError as err:
                answer = Answer(err.code, _json(err.read()))
            except (OSError, http.client.HTTPException, ValueError) as err:  # URLError, timeouts, resets, a truncated answer
                why = f"{type(err).__name__}: {err}"
                continue
            if answer.status not in RETRIED_STATUSES:
                return Answer(answer.status, answer.document, pushed_back=attempt)
            why = f"HTTP {answer.status}: {answer.error}"
        raise ApiUnavailable(f"{method} {path}: no answer after {attempts} attempts ({why})")


def _json(data: bytes) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except ValueError:
        return {"error": data.decode("utf-8", "replace")[:500]}
    return document if isinstance(document, dict) else {"error": str(document)[:500]}


# --- progress and output ----------------------------------------------------------------------


class _Bar(Protocol):
    def update(self, n: float | None = 1) -> bool | None: ...

    def close(self) -> None: ...


class _NoBar:
    def update(self, n: float | None = 1) -> bool | None:
        return None

    def close(self) -> None:
        return None


class Console:
    """The report on `out`, the progress bars (tqdm) on `err`: drawn when `progress` is True, or when
    it is None and `err` is a terminal. Lines printed while a bar is drawn go above it."""

    def __init__(self, out: TextIO, err: TextIO, progress: bool | None) -> None:
        self.out = out
        self.err = err
        self._draw = err.isatty() if progress is None else progress

    def bar(self, total: int, label: str, unit: str = "it", *, scale: bool = False) -> _Bar:
        if not self._draw:
            return _NoBar()
        try:
            from tqdm import tqdm
        except ImportError:  # installed without the `clients` extra: no bars, said once
            self._draw = False
            print(f"{PROG}: no progress bars: tqdm is not installed (pip install 'onceflow[clients]')", file=self.err)
            return _NoBar()
        return tqdm(total=total or None, desc=label, file=self.err, unit=unit, unit_scale=scale, dynamic_ncols=True)

    def print(self, text: str = "") -> None:
        if self._draw:
            try:
                from tqdm import tqdm
            except ImportError:
                self._draw = False
            else:
                tqdm.write(text, file=self.out)  # above the bars, which it redraws
                return
        print(text, file=self.out)


# --- loading ----------------------------------------------------------------------------------


@dataclass
class SentBatch:
    """Rows the API acknowledged (now, or in an earlier run per the checkpoint): their lines and ids."""

    lines: array[int]  # the file's line number of each row, in the order sent
    packed: bytes = b""  # the ids, 16 bytes each, when every one is a content id (c- and 32 hex digits)
    ids: list[str] | None = None  # otherwise the ids as given

    @classmethod
    def of(cls, lines: Iterable[int], ids: Sequence[str]) -> SentBatch:
        numbers = array("L", lines)
        if all(_CONTENT_ID.fullmatch(store_request_id) for store_request_id in ids):
            return cls(numbers, b"".join(bytes.fromhex(store_request_id[2:]) for store_request_id in ids))
        return cls(numbers, ids=list(ids))

    def rows(self) -> Iterator[tuple[str, int]]:
        size = CONTENT_ID_HEX_CHARS // 2
        for position, line in enumerate(self.lines):
            if self.ids is not None:
                yield self.ids[position], line
            else:
                yield f"c-{self.packed[position * size : (position + 1) * size].hex()}", line


@dataclass
class RowStates:
    """What the read-back found, by state."""

    read: int = 0
    stored: int = 0
    findings: Counter[str] = field(default_factory=Counter)
    flagged: Counter[tuple[str, int, str]] = field(default_factory=Counter)  # (phase, reason, detail)
    flagged_rows: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)  # the first SHOWN_FLAGGED
    pending: list[tuple[str, int]] = field(default_factory=list)  # (id, line): the last read, after the deadline, said pending (or 404)
    unreadable: list[tuple[str, int, str]] = field(default_factory=list)  # (id, line, why): no read after the deadline answered

    @property
    def flagged_total(self) -> int:
        return sum(self.flagged.values())


@dataclass
class LoadReport:
    file: Path
    sha256: str = ""
    lines: int = 0
    batches: int = 0  # batches cut from the file
    accepted: int = 0  # POSTs started now (202)
    duplicates: int = 0  # POSTs the API had already processed (200, duplicate)
    skipped: int = 0  # batches (or halves) the checkpoint had acknowledged
    empty: int = 0  # batches with no line to send
    split: int = 0  # batches (or halves) answered 413 and sent again in two halves
    failed: list[str] = field(default_factory=list)  # batches not acknowledged, and why
    rows: int = 0  # data lines the loader takes (in every batch, sent now or before)
    rows_sent: int = 0  # of them, acknowledged by the API in this run
    rows_refused: int = 0  # of them, in batches the API refused (400, 422, a single row's 413)
    rows_not_sent: int = 0  # of them, not acknowledged: the API did not answer, refused the key, or the run stopped
    skipped_lines: int = 0  # headers and blank lines
    refused: int = 0  # lines the loader refused (not sent), reported
    refusals: list[str] = field(default_factory=list)  # the first problems, the loader's and the API's, for callers (all are printed)
    stopped: str = ""  # why the run stopped sending before the end of the file
    changed: bool = False  # the file's content changed between the two passes
    foreign_ids: int = 0  # acknowledged batches whose ids are not the loader's content ids (not checkpointed)
    read_back: bool = True
    states: RowStates | None = None
    sent: list[SentBatch] = field(default_factory=list)

    @property
    def data_lines(self) -> int:
        """Every line that is neither blank nor a header: each ends in exactly one of the summary's counts."""
        return self.rows + self.refused

    @property
    def refused_total(self) -> int:
        return self.refused + self.rows_refused

    @property
    def rows_acknowledged(self) -> int:
        return sum(len(batch.lines) for batch in self.sent)

    @property
    def incomplete(self) -> bool:
        """Rows whose fate a rerun would still change: not sent, unread, or pending."""
        states = self.states
        return bool(self.rows_not_sent or (states is not None and (states.pending or states.unreadable)))

    @property
    def exit_status(self) -> int:
        if self.incomplete:
            return INCOMPLETE_EXIT_STATUS
        if self.refused_total or (self.states is not None and self.states.flagged_total):
            return NOT_STORED_EXIT_STATUS
        return ALL_STORED_EXIT_STATUS


@dataclass(frozen=True)
class LoadOptions:
    batch_lines: int | None = None  # None: DEFAULT_BATCH_LINES
    batch_bytes: int = BATCH_MAX_BYTES
    wait_seconds: float = DEFAULT_WAIT_SECONDS
    read_back: bool = True
    readers: int = READERS
    checkpoint: Path | None = None  # None: <file>.onceflow-progress
    in_flight: int = DEFAULT_IN_FLIGHT  # batches sent at once, 1..MAX_IN_FLIGHT; 1: one after another


def load_file(
    path: Path,
    api: TaxiApi,
    options: LoadOptions | None = None,
    *,
    console: Console | None = None,
    opener: Callable[[], IO[bytes]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> LoadReport:
    """Send the file's batches the checkpoint does not hold, then read every row back. `opener`
    opens the file (twice: once to hash and count it, once to send it)."""
    options = options or LoadOptions()
    if not 1 <= options.in_flight <= MAX_IN_FLIGHT:
        raise UsageError(f"in_flight must be 1..{MAX_IN_FLIGHT} batches (got {options.in_flight})")
    console = console or Console(sys.stdout, sys.stderr, None)
    open_file = opener or (lambda: path.open("rb"))
    report = LoadReport(path, read_back=options.read_back)
    size = _size(path) if opener is None else 0
    with open_file() as stream:
        bar = console.bar(size, "hashing", "B", scale=True)
        report.sha256, report.lines = scan_file(stream, bar.update)
        bar.close()
    batch_lines = options.batch_lines or DEFAULT_BATCH_LINES
    checkpoint = Checkpoint.open(options.checkpoint or checkpoint_path_for(path))
    console.print(
        f"{path.name}: {report.lines} lines, sha256 {report.sha256[:16]}..., batches of up to {batch_lines} lines "
        f"to {api.url}{contract.ROUTE_TRIP_BATCH} (checkpoint {checkpoint.path.name})"
    )
    try:
        _Sender(api, checkpoint, report, console, options.in_flight).send(open_file, batch_lines, options.batch_bytes)
    finally:
        checkpoint.close()
    if options.read_back and report.sent:
        report.states = read_back(
            api, report.sent, console, readers=options.readers, wait_seconds=options.wait_seconds, clock=clock, sleep=sleep
        )
    elif options.read_back:
        report.states = RowStates()
    print_summary(report, console, options.wait_seconds)
    return report


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class _Outcome(Enum):
    ACKNOWLEDGED = "acknowledged"
    REFUSED = "refused"  # the API refused the rows: a rerun changes nothing
    UNREACHABLE = "unreachable"  # no answer: a rerun sends them
    UNAUTHORIZED = "unauthorized"  # the key was refused: the run stops
    UNEXPECTED = "unexpected"  # an answer the loader cannot use


@dataclass
class Delivered:
    """What one batch of the file came to, kept until its turn (file order) to be added to the report and
    the checkpoint. `records` are the checkpoint's (execution name, rows), in the order the serial
    loader writes them (a 413's halves, then the whole); `printed` the console's lines, `refusals`
    the problems for `LoadReport.refusals`."""

    position: int  # the batch's place in the file, from 0
    lines: int = 0  # the file's lines the batch covers (the progress bar)
    records: list[tuple[str, int]] = field(default_factory=list)
    sent: list[SentBatch] = field(default_factory=list)
    printed: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    accepted: int = 0
    duplicates: int = 0
    skipped: int = 0
    split: int = 0
    rows_sent: int = 0
    rows_refused: int = 0
    rows_not_sent: int = 0
    foreign_ids: int = 0
    empty: int = 0


class InOrderCommits:
    """Batches answered in any order, added to the report and the checkpoint in the file's order: a batch
    answered after a later one is written first, and one answered while an earlier one is still in
    flight is held (in memory) until every earlier one has answered. "Answered" is final for this run:
    acknowledged (its records are written), or refused, unreachable after every retry, not sent
    (never written: a rerun sends it again). A batch after an unacknowledged one is still written
    when its turn comes: the checkpoint names content (execution names), not line ranges or a
    high-water mark, so a rerun skips exactly the batches named and sends the failed one; no record
    ever stands for a row whose answer has not come back. What is written is thus always the
    acknowledged batches among the first `next` of the file, in file order; a crash or Ctrl-C loses
    only the held ones (a rerun sends them, answered as duplicates)."""

    def __init__(self, commit: Callable[[Delivered], None]) -> None:
        self._commit = commit
        self.next = 0  # the position of the first batch not yet committed
        self.held: dict[int, Delivered] = {}

    def answered(self, delivered: Delivered) -> list[int]:
        """Record this batch's answer; commit it and every held one after it that is now in turn. The positions committed."""
        if delivered.position < self.next or delivered.position in self.held:
            raise ValueError(f"batch {delivered.position} was answered twice")
        self.held[delivered.position] = delivered
        committed: list[int] = []
        while self.next in self.held:
            self._commit(self.held.pop(self.next))
            committed.append(self.next)
            self.next += 1
        return committed


class _Gate:
    """At most `limit` POSTs at once: the limit starts at the number of senders, halves when the API pushed
    back (a 429 or 5xx answer, retried inside the HTTP client, or no answer at all) and grows by one after
    as many calls without push-back as it allows, as the read-back's readers do."""

    def __init__(self, most: int) -> None:
        self._most = max(1, most)
        self.limit = self._most
        self._active = 0
        self._next = 0  # the index of `map`'s items that goes through the gate next
        self._successes = 0
        self._condition = threading.Condition()

    def enter(self) -> None:
        with self._condition:
            while self._active >= self.limit:
                self._condition.wait()
            self._active += 1

    def leave(self, pushed_back: bool) -> None:
        with self._condition:
            self._active -= 1
            if pushed_back:
                self.limit = max(1, self.limit // 2)
                self._successes = 0
            else:
                self._successes += 1
                if self._successes >= self.limit:
                    self.limit = min(self._most, self.limit + 1)
                    self._successes = 0
            self._condition.notify_all()


class _Sender:
    """Sends a file's batches, each once: skipped when the checkpoint holds its content's execution name,
    split in two on a 413. With `in_flight` N > 1, N threads send batches while the file is read (at
    most 2N batches read and not yet committed), and `InOrderCommits` adds their outcomes to the
    report and the checkpoint in file order; with N = 1 each batch is sent, and committed, before the
    next is read, on the calling thread."""

    def __init__(self, api: TaxiApi, checkpoint: Checkpoint, report: LoadReport, console: Console, in_flight: int = 1) -> None:
        self.api = api
        self.checkpoint = checkpoint
        self.report = report
        self.console = console
        self.in_flight = max(1, in_flight)
        self.unanswered = 0  # POSTs in a row the API did not answer (in the order the answers came)
        self.stopped = ""  # why the run stopped sending (set by the sender that saw it)
        self._lock = threading.Lock()
        self._gate = _Gate(self.in_flight)
        self._aborted = False  # the run is ending (an exception, Ctrl-C): senders send nothing more

    def send(self, open_file: Callable[[], IO[bytes]], batch_lines: int, batch_bytes: int) -> None:
        report = self.report
        digest = hashlib.sha256()
        bar = self.console.bar(report.lines, "loading", "line")

        def commit(delivered: Delivered) -> None:
            self._commit(delivered)
            bar.update(delivered.lines)

        commits = InOrderCommits(commit)
        pool = _SenderPool(self._deliver_batch, self.in_flight) if self.in_flight > 1 else None
        try:
            with open_file() as stream:
                batches = iter_batches(read_lines(stream, on_bytes=digest.update), batch_lines=batch_lines, batch_bytes=batch_bytes)
                for position, batch in enumerate(batches):
                    report.batches += 1
                    report.rows += len(batch.rows)
                    report.refused += len(batch.refused)
                    report.skipped_lines += batch.last - batch.first + 1 - len(batch.rows) - len(batch.refused)
                    if pool is None:
                        commits.answered(self._deliver_batch(position, batch))
                        continue
                    while position - commits.next >= 2 * self.in_flight:  # read ahead at most 2N batches
                        commits.answered(pool.answer())
                    if not batch.rows or self.stopped:  # nothing to send: no thread needed
                        commits.answered(self._deliver_batch(position, batch))
                    else:
                        pool.submit(position, batch)
                    while (ready := pool.ready()) is not None:
                        commits.answered(ready)
                while pool is not None and pool.outstanding:
                    commits.answered(pool.answer())
        finally:
            self._aborted = True  # after an exception or Ctrl-C: what is queued is not sent, nothing more is committed
            if pool is not None:
                pool.close()
        bar.close()
        report.stopped = self.stopped
        if digest.hexdigest() != report.sha256:
            report.changed = True

    def _commit(self, delivered: Delivered) -> None:
        """Add a batch's outcome to the report and its records to the checkpoint (in file order)."""
        report = self.report
        for name, rows in delivered.records:
            self.checkpoint.acknowledge(self.api.url, name, rows)
        for line in delivered.printed:
            self.console.print(line)
        room = max(0, 1000 - len(report.refusals))
        report.refusals.extend(delivered.refusals[:room])
        report.sent.extend(delivered.sent)
        report.failed.extend(delivered.failed)
        report.accepted += delivered.accepted
        report.duplicates += delivered.duplicates
        report.skipped += delivered.skipped
        report.split += delivered.split
        report.rows_sent += delivered.rows_sent
        report.rows_refused += delivered.rows_refused
        report.rows_not_sent += delivered.rows_not_sent
        report.foreign_ids += delivered.foreign_ids
        report.empty += delivered.empty
        if self.stopped and not report.stopped:
            report.stopped = self.stopped

    def _deliver_batch(self, position: int, batch: Batch) -> Delivered:
        delivered = Delivered(position, lines=batch.last - batch.first + 1)
        for line in batch.refused:
            delivered.printed.append(f"REFUSED {line.problem}")
            delivered.refusals.append(line.problem)
        if not batch.rows:
            delivered.empty += 1
        elif self.stopped or self._aborted:  # the rest of the file is still read, so every line is counted
            delivered.rows_not_sent += len(batch.rows)
        else:
            self._deliver(delivered, batch.header, batch.rows)
        return delivered

    def _deliver(self, delivered: Delivered, header: str | None, rows: list[tuple[int, str]]) -> _Outcome:
        """Send these rows (a batch, or half of one); skipped when the checkpoint has them, halved on a 413."""
        api = self.api
        lines = _line_range(rows)
        if self.stopped or self._aborted:
            delivered.rows_not_sent += len(rows)
            return _Outcome.UNREACHABLE
        ids = [content_id(text) for _, text in rows]
        name = batch_name(ids)
        if self.checkpoint.done(api.url, name):
            delivered.skipped += 1
            delivered.sent.append(SentBatch.of((number for number, _ in rows), ids))
            return _Outcome.ACKNOWLEDGED
        self._gate.enter()
        if self.stopped or self._aborted:  # the run stopped while this batch waited for its turn to go
            self._gate.leave(False)
            delivered.rows_not_sent += len(rows)
            return _Outcome.UNREACHABLE
        pushed_back = True  # no answer (every attempt failed), or an exception
        try:
            answer = api.post_batch(batch_body(header, rows))
            pushed_back = answer.pushed_back > 0
        except ApiUnavailable as err:
            with self._lock:
                self.unanswered += 1
                unanswered = self.unanswered
            if unanswered >= UNREACHABLE_BATCHES_TO_STOP:
                self._stop(f"the API did not answer {unanswered} batches in a row")
            return self._not_sent(delivered, rows, f"{lines}: {err}", _Outcome.UNREACHABLE)
        finally:
            self._gate.leave(pushed_back)
        with self._lock:
            self.unanswered = 0
        given = answer.document.get("StoreRequestIds")
        if answer.status in (200, 202) and isinstance(given, list) and len(given) == len(rows):
            if answer.document.get("duplicate"):
                delivered.duplicates += 1
            else:
                delivered.accepted += 1
            answered = [str(store_request_id) for store_request_id in given]
            delivered.sent.append(SentBatch.of((number for number, _ in rows), answered))
            delivered.rows_sent += len(rows)
            if answered == ids:
                delivered.records.append((name, len(rows)))
            else:  # another API version's ids: read back by the API's, sent again by a rerun (a duplicate)
                delivered.foreign_ids += 1
            return _Outcome.ACKNOWLEDGED
        if answer.status == 413 and len(rows) > 1:
            delivered.split += 1
            delivered.printed.append(f"SPLIT {lines}: HTTP 413 ({answer.error}); sending them again in two halves")
            half = len(rows) // 2
            outcomes = {self._deliver(delivered, header, rows[:half]), self._deliver(delivered, header, rows[half:])}
            if outcomes == {_Outcome.ACKNOWLEDGED}:
                delivered.records.append((name, len(rows)))  # a rerun skips the whole batch without the 413
            return _Outcome.ACKNOWLEDGED if outcomes == {_Outcome.ACKNOWLEDGED} else min(outcomes, key=_SEVERITY.index)
        if answer.status in (200, 202):
            why = f"{lines}: unexpected answer {answer.status}: {str(answer.document)[:300]}"
            return self._not_sent(delivered, rows, why, _Outcome.UNEXPECTED)
        if answer.status in (401, 403):
            self._stop("the API refused the key")
            why = f"{lines}: HTTP {answer.status}: the API refused the key ({answer.error})"
            return self._not_sent(delivered, rows, why, _Outcome.UNAUTHORIZED)
        why = f"refused by the API (HTTP {answer.status}): {_file_lines(answer.error, rows)}"
        delivered.rows_refused += len(rows)
        delivered.printed.append(f"REFUSED {lines} {why}")
        delivered.refusals.append(f"{lines} {why}")
        return _Outcome.REFUSED

    def _stop(self, why: str) -> None:
        with self._lock:
            if not self.stopped:
                self.stopped = why

    def _not_sent(self, delivered: Delivered, rows: list[tuple[int, str]], why: str, outcome: _Outcome) -> _Outcome:
        delivered.rows_not_sent += len(rows)
        delivered.failed.append(why)
        delivered.printed.append(f"NOT SENT {why}")
        return outcome


class _SenderPool:
    """`count` daemon threads that deliver the batches submitted, answers as they come. Not a
    ThreadPoolExecutor, for the reason `_Readers` gives: Ctrl-C must end the loader at once. An
    exception in a sender (a bug, or a test's simulated crash) is raised on the calling thread by
    `answer`, as a crash of the process would end it."""

    def __init__(self, deliver: Callable[[int, Batch], Delivered], count: int) -> None:
        self._deliver = deliver
        self.outstanding: set[int] = set()  # submitted, not yet returned by `answer`/`ready`
        self._tasks: queue.SimpleQueue[tuple[int, Batch] | None] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[Delivered | BaseException] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{PROG}-sender-{n}", daemon=True) for n in range(count)]
        for thread in self._threads:
            thread.start()

    def submit(self, position: int, batch: Batch) -> None:
        self.outstanding.add(position)
        self._tasks.put((position, batch))

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                self._answers.put(self._deliver(*task))
            except BaseException as err:  # handed to the calling thread, which raises it
                self._answers.put(err)

    def _take(self, answer: Delivered | BaseException) -> Delivered:
        if isinstance(answer, BaseException):
            raise answer
        self.outstanding.discard(answer.position)
        return answer

    def answer(self) -> Delivered:
        """The next answer, waiting for it (in short waits, so Ctrl-C lands)."""
        while True:
            try:
                return self._take(self._answers.get(timeout=0.2))
            except queue.Empty:
                continue

    def ready(self) -> Delivered | None:
        try:
            return self._take(self._answers.get_nowait())
        except queue.Empty:
            return None

    def close(self) -> None:
        for _ in self._threads:
            self._tasks.put(None)


_SEVERITY = [_Outcome.UNAUTHORIZED, _Outcome.UNREACHABLE, _Outcome.UNEXPECTED, _Outcome.REFUSED, _Outcome.ACKNOWLEDGED]


def _line_range(rows: Sequence[tuple[int, str]]) -> str:
    first, last = rows[0][0], rows[-1][0]
    return f"line {first}" if first == last else f"lines {first}-{last}"


def _file_lines(message: str, rows: Sequence[tuple[int, str]]) -> str:
    """The API numbers a batch's data lines from 1 (its header aside); the file's numbers are what the user can find."""

    def renumber(match: re.Match[str]) -> str:
        position = int(match.group(1))
        return f"line {rows[position - 1][0]}" if 1 <= position <= len(rows) else match.group(0)

    return _API_LINE.sub(renumber, message)


# --- reading back -----------------------------------------------------------------------------

_PENDING = "pending"  # a read again reason that is not a failure: the API said pending, or has not seen the id yet
_NOT_TRIED = "not tried"


@dataclass(frozen=True, slots=True)
class _Unsettled:
    store_request_id: str
    line: int
    why: str  # _PENDING, or why the read failed

    @property
    def failed(self) -> bool:
        return self.why != _PENDING


def read_back(
    api: TaxiApi,
    sent: Sequence[SentBatch],
    console: Console,
    *,
    readers: int = READERS,
    wait_seconds: float = DEFAULT_WAIT_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RowStates:
    """GET /trips/{id} of every row, at most `readers` at a time. Rows pending (or not seen yet) and rows
    whose read failed are read again, with a growing pause, until none is left or `wait_seconds` have
    passed; then once more, whatever the time, unless the pass that left them began after the deadline.
    After it, rows whose reads failed are read again while a pass settles any of them (and for
    RETRIES_AFTER_DEADLINE passes that settle none). What the last read of a row said is what is
    reported: pending only when it said pending, unread only when it failed."""
    states = RowStates()
    deadline = clock() + wait_seconds
    total = sum(len(batch.lines) for batch in sent)
    bar = console.bar(total, "reading back", "row")
    pool = _Readers(lambda store_request_id: _get(api, store_request_id), readers)

    def read(rows: Iterable[tuple[str, int]]) -> list[_Unsettled]:
        pool.resume()
        unsettled: list[_Unsettled] = []
        for chunk in _chunks(rows, readers * 32):
            for (store_request_id, line), answer in zip(chunk, pool.map([store_request_id for store_request_id, _ in chunk]), strict=True):
                why = _tally(states, store_request_id, line, answer)
                if why is None:
                    bar.update()
                else:
                    unsettled.append(_Unsettled(store_request_id, line, why))
        unsettled.sort(key=lambda row: not row.why.startswith(_NOT_TRIED))  # those the pause left out go first next time
        return unsettled

    try:
        started = clock()
        unsettled = read(row for batch in sent for row in batch.rows())
        pause = 0.5
        fruitless = 0  # passes after the deadline in a row that settled no row
        while unsettled:
            if started >= deadline:  # the last pass began after the deadline: its answers stand, but for failed reads
                failed = [row for row in unsettled if row.failed]
                if not failed or fruitless >= RETRIES_AFTER_DEADLINE:
                    break
                sleep(min(2.0 ** (fruitless + 1), 10.0))
                settled = [row for row in unsettled if not row.failed]
                again = read((row.store_request_id, row.line) for row in failed)
                fruitless = fruitless + 1 if len(again) == len(failed) and all(row.failed for row in again) else 0
                unsettled = settled + again
                continue
            now = clock()
            if now < deadline:
                sleep(min(pause, deadline - now))
                pause = min(pause * 2, 5.0)
            started = clock()
            unsettled = read((row.store_request_id, row.line) for row in unsettled)
    finally:
        pool.close()
    bar.close()
    for row in unsettled:
        if row.failed:
            states.unreadable.append((row.store_request_id, row.line, row.why))
        else:
            states.pending.append((row.store_request_id, row.line))
    states.read = total - len(states.pending) - len(states.unreadable)
    return states


class _Readers:
    """Daemon threads that call `read` on the items of `map`, answers in order, at most `limit` at once:
    the limit starts at `count`, halves on a failed read (the API down, throttling or timing out) and
    grows by one after as many successes as it allows. After FAILED_READS_TO_PAUSE failed reads in a
    row the rest of the pass is not tried (each gets a failure at once) until `resume`. Items pass the
    gate in their order, whichever thread took them off the queue: the ones a pause leaves out are the
    pass's last, and go first in the next (else the thread scheduling decides, and on Python 3.13 one
    thread could do a pass's reads while the others held the same rows, left out pass after pass). Not a
    ThreadPoolExecutor: the interpreter joins those at exit, and a Ctrl-C that lands while the main
    thread holds a future's lock leaves a worker waiting for it, so the loader would never exit."""

    def __init__(self, read: Callable[[str], Answer | str], count: int) -> None:
        self._read = read
        self._most = max(1, count)
        self.limit = self._most
        self._active = 0
        self._next = 0  # the index of `map`'s items that goes through the gate next
        self._successes = 0
        self._failures_in_a_row = 0
        self._gate = threading.Condition()
        self._tasks: queue.SimpleQueue[tuple[int, str] | None] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[tuple[int, Answer | str]] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{PROG}-reader-{n}", daemon=True) for n in range(self._most)]
        for thread in self._threads:
            thread.start()

    def resume(self) -> None:
        with self._gate:
            self._failures_in_a_row = 0

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            index, item = task
            with self._gate:  # in the items' order, so that the rows a pause leaves out are the pass's last ones
                while index != self._next or self._active >= self.limit:
                    self._gate.wait()
                paused = self._failures_in_a_row >= FAILED_READS_TO_PAUSE
                self._active += 1
                self._next += 1
                self._gate.notify_all()
            answer: Answer | str
            if paused:
                answer = f"{_NOT_TRIED}: the API did not answer {FAILED_READS_TO_PAUSE} reads in a row"
            else:
                try:
                    answer = self._read(item)
                except Exception as err:  # a bug, not the API: the row is read again, and reported unread if it keeps failing
                    answer = f"{type(err).__name__}: {err}"
            with self._gate:
                self._active -= 1
                if not paused:
                    self._adjust(isinstance(answer, str) or answer.status in RETRIED_STATUSES)
                self._gate.notify_all()
            self._answers.put((index, answer))

    def _adjust(self, failed: bool) -> None:
        if failed:
            self._failures_in_a_row += 1
            self.limit = max(1, self.limit // 2)
            self._successes = 0
            return
        self._failures_in_a_row = 0
        self._successes += 1
        if self._successes >= self.limit:
            self.limit = min(self._most, self.limit + 1)
            self._successes = 0

    def map(self, items: Sequence[str]) -> list[Answer | str]:
        with self._gate:
            self._next = 0
        for task in enumerate(items):
            self._tasks.put(task)
        answers: list[Answer | str] = [""] * len(items)
        for _ in items:
            index, answer = self._answers.get()
            answers[index] = answer
        return answers

    def close(self) -> None:
        for _ in self._threads:
            self._tasks.put(None)


def _get(api: TaxiApi, store_request_id: str) -> Answer | str:
    try:
        return api.get_row(store_request_id)
    except ApiUnavailable as err:
        return str(err)


def _tally(states: RowStates, store_request_id: str, line: int, answer: Answer | str) -> str | None:
    """Count one settled answer; else why the row is to be read again (_PENDING: pending or not seen by any
    phase yet; otherwise why the read failed)."""
    if isinstance(answer, str):
        return answer
    if answer.status in RETRIED_STATUSES:
        return f"HTTP {answer.status}: {answer.error}"
    if answer.status == 404:
        return _PENDING
    state = answer.document.get("state") if answer.status == 200 else None
    if state == "pending":
        return _PENDING
    if state == "stored":
        states.stored += 1
        states.findings.update(str(finding) for finding in answer.document.get("findings") or ())
    elif state == "flagged":
        document = answer.document
        states.flagged[(str(document.get("phase")), int(document.get("reason") or 0), str(document.get("detail")))] += 1
        if len(states.flagged_rows) < SHOWN_FLAGGED:
            states.flagged_rows.append((line, store_request_id, document))
    else:  # an answer no retry changes (a 4xx): reported unread now
        states.unreadable.append((store_request_id, line, f"HTTP {answer.status}: {answer.error}"))
    return None


def _chunks(rows: Iterable[tuple[str, int]], size: int) -> Iterator[list[tuple[str, int]]]:
    chunk: list[tuple[str, int]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# --- the summary ------------------------------------------------------------------------------


def print_summary(report: LoadReport, console: Console, wait_seconds: float) -> None:
    say = console.print
    posted = report.accepted + report.duplicates
    say(f"summary of {report.file.name}")
    say(f"  lines     {report.lines:>8}  ({report.data_lines} data lines, {report.skipped_lines} header or blank)")
    split = f"; {report.split} split in two after a 413" if report.split else ""
    say(
        f"  batches   {report.batches:>8}  ({posted} sent: {report.accepted} accepted, {report.duplicates} answered as duplicates; "
        f"{report.skipped} acknowledged by an earlier run; {report.empty} with no row; {len(report.failed)} not sent{split})"
    )
    for why in report.failed[:20]:
        say(f"    NOT SENT {why}")
    if len(report.failed) > 20:
        say(f"    NOT SENT ... and {len(report.failed) - 20} more")
    states = report.states
    say(f"  data lines{report.data_lines:>8}")
    if states is not None:
        findings = ", ".join(f"{name} {count}" for name, count in sorted(states.findings.items()))
        say(f"    stored  {states.stored:>8}" + (f"  (with findings: {findings})" if findings else ""))
        say(f"    flagged {states.flagged_total:>8}")
        for (phase, reason, detail), count in sorted(states.flagged.items(), key=lambda item: (item[0][1], item[0][2])):
            say(f"      {phase} (reason {reason}) {detail}: {count}")
    else:
        say(f"    accepted{report.rows_acknowledged:>8}  (not read back: --no-read-back; stored or flagged is not known)")
    say(f"    refused {report.refused_total:>8}" + ("  (each listed above as REFUSED; not stored)" if report.refused_total else ""))
    say(f"    not sent{report.rows_not_sent:>8}" + ("  (a rerun sends them)" if report.rows_not_sent else ""))
    if states is not None:
        unread = ""
        if states.unreadable:
            store_request_id, line, why = states.unreadable[0]
            unread = f"  (the first: line {line}, {store_request_id}: {why})"
        say(f"    unread  {len(states.unreadable):>8}{unread}")
        pending = f"  after {wait_seconds:g} s; run the loader again later to read them (it stores nothing twice)" if states.pending else ""
        say(f"    pending {len(states.pending):>8}{pending}")
        for line, store_request_id, document in states.flagged_rows:
            say(
                f"FLAGGED line {line} {store_request_id}: {document.get('phase')} (reason {document.get('reason')}) "
                f"{document.get('detail')}: {document.get('message')}"
            )
        if states.flagged_total > len(states.flagged_rows):
            say(f"FLAGGED ... and {states.flagged_total - len(states.flagged_rows)} more (python -m ops.taxi_redrive --dry-run lists them)")
    if report.split:
        say("SPLIT: some batches were too large for the API (413) and went in parts; a smaller --batch-lines saves those requests")
    if report.foreign_ids:
        say(f"NOTE: the API gave {report.foreign_ids} batches ids other than this loader's content ids: they are not in the checkpoint")
    if report.changed:
        say("NOTE: the file changed while it was loaded; what is reported is what was read while sending")
    if report.stopped:
        say(f"STOPPED: {report.stopped}; the rest of the file was not sent: a rerun sends what is missing")
    say(_verdict(report))


def _verdict(report: LoadReport) -> str:
    status = report.exit_status
    if status == INCOMPLETE_EXIT_STATUS:
        return f"INCOMPLETE (exit {status}): rows not sent, unread or pending; run the loader again (nothing is stored twice)"
    if status == NOT_STORED_EXIT_STATUS:
        return f"NOT ALL STORED (exit {status}): flagged or refused lines above; fix them and load them from a new file"
    if not report.read_back:
        return f"ALL TAKEN (exit {status}): every data line was taken by the API (not read back)"
    return f"ALL STORED (exit {status}): every data line was stored"


# --- the command line -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaxiStack:
    """What the loader reads from the taxi stack's outputs."""

    api_url: str
    secret_arn: str
    local: LocalCloud | None = None  # `make serve`'s embedded cloud: where the secret is, and the key pair that reads it


def api_from_outputs(path: Path, env: str) -> TaxiStack:
    """The taxi stack's ApiUrl and ApiKeySecretArn from a CDK outputs file (`{stack name: {OutputKey: value}}`)."""
    deploy = f"run `make deploy ENV={env}` in the repository root, or pass --url"
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError as err:
        if env == LOCAL_ENV:
            raise UsageError(missing_file(path)) from err
        raise UsageError(f"no outputs file {path.absolute()}: {deploy}, or --outputs-file") from err
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot read outputs file {path} ({err}); {deploy}") from err
    if not isinstance(document, dict) or not all(isinstance(outputs, dict) for outputs in document.values()):
        raise UsageError(f"outputs file {path} is not a CDK outputs file (a JSON object of stack name -> outputs); {deploy}")
    stacks = sorted(str(name) for name in document if str(name).endswith(STACK_SUFFIX))
    if len(stacks) != 1:
        found = ", ".join(stacks) or "none"
        raise UsageError(f"outputs file {path} has {len(stacks)} stacks ending in {STACK_SUFFIX} ({found}); {deploy}")
    outputs = document[stacks[0]]
    missing = [name for name in (contract.OUTPUT_API_URL, contract.OUTPUT_API_KEY_SECRET_ARN) if name not in outputs]
    if missing:
        raise UsageError(f"stack {stacks[0]} in outputs file {path} has no outputs {missing}; {deploy}")
    try:
        local = running_local_cloud(document, path)
    except LocalCloudError as err:
        raise UsageError(str(err)) from err
    return TaxiStack(str(outputs[contract.OUTPUT_API_URL]), str(outputs[contract.OUTPUT_API_KEY_SECRET_ARN]), local)


def read_api_key(secret_arn: str, profile: str | None = None, local: LocalCloud | None = None) -> str:
    """The API key from Secrets Manager (boto3, the default credentials or `profile`; the secret's region).
    On `make serve`'s embedded cloud (`local`): its endpoint, and its region and dummy key pair where
    --profile and the AWS_* variables name none."""
    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError as err:
        raise UsageError(
            f"reading the key from the stack's secret needs boto3 (pip install boto3); or pass --api-key or set {API_KEY_VARIABLE}"
        ) from err
    parts = secret_arn.split(":")
    region = parts[3] if len(parts) > 3 and parts[3] else None
    try:
        if local is not None:
            session = boto3.Session(**local.session_options(region=region, profile=profile))
            client: Any = session.client("secretsmanager", endpoint_url=local.endpoint())
        else:
            client = boto3.Session(profile_name=profile, region_name=region).client("secretsmanager")
        return str(client.get_secret_value(SecretId=secret_arn)["SecretString"])
    except (BotoCoreError, ClientError, KeyError) as err:
        raise UsageError(f"cannot read the API key from {secret_arn}: {err}; or pass --api-key or set {API_KEY_VARIABLE}") from err


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Load a CSV file of NYC yellow-taxi trips into the taxi ETL saga in batches (rows get content ids: "
        "a rerun or a copy of the file stores nothing twice), then read every row back and print what became of it.",
        epilog=EXIT_STATUSES,
    )
    parser.add_argument("file", type=Path, metavar="FILE", help="the CSV file (any size: it is streamed)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="the API's base URL (the taxi stack's ApiUrl output)")
    target.add_argument(
        "--env", metavar="NAME", help=f"read ApiUrl and ApiKeySecretArn of the taxi stack from {OUTPUTS_FILE.format(env='NAME')}"
    )
    parser.add_argument(
        "--outputs-file", type=Path, metavar="PATH", help=f"with --env: this file instead of ./{OUTPUTS_FILE.format(env='NAME')}"
    )
    parser.add_argument(
        "--api-key", help=f"the API key (default: {API_KEY_VARIABLE}, or with --env the stack's secret); visible to other local users"
    )
    parser.add_argument("--profile", help="with --env: the AWS profile that reads the key's secret")
    parser.add_argument(
        "--batch-lines",
        type=int,
        metavar="N",
        help=f"lines per batch, 1-{MAX_BATCH_LINES}, at most the API's limit (default {DEFAULT_BATCH_LINES}); a 413 is split",
    )
    parser.add_argument(
        "--in-flight",
        type=int,
        default=DEFAULT_IN_FLIGHT,
        metavar="N",
        help=f"batches sent at once, 1-{MAX_IN_FLIGHT} (default {DEFAULT_IN_FLIGHT}; fewer while the API throttles); the checkpoint "
        "records them in file order; 1 sends one batch after another",
    )
    parser.add_argument("--checkpoint", type=Path, metavar="PATH", help=f"where progress is kept (default FILE{CHECKPOINT_SUFFIX})")
    parser.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"how long after the last batch to wait for rows to settle (default {DEFAULT_WAIT_SECONDS:g}); the rows not settled "
        "by then are read once more after it",
    )
    parser.add_argument("--no-read-back", dest="read_back", action="store_false", help="send only; print no per-row summary")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="draw the progress bars (default: when stderr is a terminal); --no-progress never",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, api: TaxiApi | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (missing := extra.missing_line(PROG)) is not None:
        print(missing, file=sys.stderr)
        return extra.MISSING_EXIT_STATUS
    if args.batch_lines is not None and not 1 <= args.batch_lines <= MAX_BATCH_LINES:
        parser.error(f"--batch-lines must be 1..{MAX_BATCH_LINES}")
    if not 1 <= args.in_flight <= MAX_IN_FLIGHT:
        parser.error(f"--in-flight must be 1..{MAX_IN_FLIGHT}")
    if args.wait < 0:
        parser.error("--wait must be 0 or more seconds")
    if args.outputs_file is not None and not args.env:
        parser.error("--outputs-file goes with --env")
    if not args.file.is_file():
        parser.error(f"{args.file} is not a file")
    console = Console(sys.stdout, sys.stderr, args.progress)
    options = LoadOptions(
        batch_lines=args.batch_lines, wait_seconds=args.wait, read_back=args.read_back, checkpoint=args.checkpoint, in_flight=args.in_flight
    )
    try:
        if api is None:
            api = _api_from_args(args)
        report = load_file(args.file, api, options, console=console)
    except UsageError as err:
        parser.exit(USAGE_EXIT_STATUS, f"{parser.prog}: error: {err}\n")
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted; run it again to send the rest (nothing is stored twice)", file=sys.stderr)
        return INTERRUPTED_EXIT_STATUS
    return report.exit_status


def _api_from_args(args: argparse.Namespace) -> HttpTaxiApi:
    key = args.api_key or os.environ.get(API_KEY_VARIABLE)
    if args.env:
        stack = api_from_outputs(args.outputs_file or Path(OUTPUTS_FILE.format(env=args.env)), args.env)
        url = stack.api_url
        key = key or read_api_key(stack.secret_arn, args.profile, stack.local)
    else:
        url = args.url
    if not key:
        raise UsageError(f"no API key: pass --api-key, set {API_KEY_VARIABLE}, or use --env to read it from the stack's secret")
    if not url.startswith(("https://", "http://")):
        raise UsageError(f"the API URL must start with https:// (got {url!r})")
    return HttpTaxiApi(url, key)


if __name__ == "__main__":
    sys.exit(main())
