"""Load a CSV file of NYC yellow-taxi trips, of any size, into the taxi ETL saga (Pipeline 3) through
`POST /trips/batch`, then read every row back and print what became of it. A library and a CLI
(the console script `onceflow-taxi-load` of the `clients` extra, or `python -m
onceflow.clients.taxi_loader`)::

    onceflow-taxi-load trips.csv --env dev
    onceflow-taxi-load trips.csv --url "$API_URL"          # the key from ONCEFLOW_API_KEY
    python -m onceflow.clients.taxi_loader trips.csv --url "$API_URL" --api-key "$KEY" --batch-lines 200 --no-progress

    from onceflow.clients.taxi_loader import HttpTaxiApi, LoadOptions, load_file
    report = load_file(Path("trips.csv"), HttpTaxiApi(api_url, api_key), LoadOptions(wait_seconds=60))
    report.exit_status, report.states.stored, report.states.flagged   # flagged: {(phase, reason, detail): rows}

The API key comes from --api-key, else ONCEFLOW_API_KEY, else (with --env) the secret named by the
taxi stack's `ApiKeySecretArn` output (read with boto3). The URL is --url, or the stack's `ApiUrl`
in cdk-outputs-NAME.json (--env NAME; --outputs-file PATH for another file). Exit status 0: every
batch was accepted (rows may still be flagged, and malformed lines are reported and left out: that
is data, not failure); 1: some batch could not be sent or was refused, or the file changed while it
was read; 2: a usage error; 130: interrupted (Ctrl-C; the checkpoint is intact, run it again).

Batches, keys and the checkpoint: why a rerun never stores a row twice
----------------------------------------------------------------------
1. **The file's hash first.** A streaming pass computes the SHA-256 of the whole file (and counts
   its lines, for the progress bar); nothing is held in memory but one read buffer. The second pass
   sends, and hashes again as it reads: a file that changed in between fails the run (exit 1).
   One hash of the whole content, not a running hash of what was read so far: that would tie each
   key to where the batches before it ended; this way the content is named once, and a key adds
   only its own line range.
2. **Batches are ranges of physical lines**: from the line after the previous batch, up to
   --batch-lines lines (the header, blank and malformed lines count), cut earlier when the next
   line would make the body larger than the API's 64 KiB. The boundaries are a function of the
   file's bytes and of (--batch-lines, the byte limit) alone, never of what was read when, so every
   run cuts the same batches. Only data lines the API takes are sent: the header (it carries
   nothing the API uses: it tells layouts by the rows' shape) and blank lines are left out, and a
   malformed line is reported with the API's own words and line number, and left out. So one bad
   line never refuses the batch around it, and a line number in a message is the file's.
3. **One Idempotency-Key per batch**: `<first 32 hex digits of the file's SHA-256>-<first line>-<last
   line>`, e.g. `3f9a...c2-101-200`. The API names the batch's execution `kb-<key>` and its rows
   `kb-<key>-<n>` (the n-th line sent), and Step Functions refuses a second execution of a name:
   whatever happens, a batch is processed once. The same file cut the same way gives the same keys
   in every run; another file, or the same file changed by one byte, gives other keys.
4. **The checkpoint** `<file>.onceflow-progress` (JSON, a few hundred bytes) holds the file's hash,
   how the batches were cut, and per API URL the line ranges whose batch the API acknowledged
   (merged, so it stays small). It is replaced atomically after each acknowledged batch. A rerun
   skips those batches and sends the rest; a batch that was sent but not recorded (a crash, a lost
   answer) is sent again under the same key, and the API answers it as a duplicate (200,
   `"duplicate": true`; 202 with the same ids while the first execution still runs): same ids, no
   new execution. A checkpoint of another file (the hash differs) or cut another way stops the
   run with exit 2 rather than send the rows again under new keys. Deleting the checkpoint is safe
   as long as --batch-lines stays the same (every batch then comes back as a duplicate); changing
   it without the checkpoint would store the rows a second time, under new keys. Two loaders on
   one file at once are safe too: they send the same keys, and the slower one's are duplicates.
5. **What is not sent is not lost**: a batch the API did not answer (after retries of the same
   bytes and key), refused, or answered 422 stays out of the checkpoint, is reported, and makes
   the exit status 1; the run goes on with the next batch (it stops after 3 unanswered batches in
   a row, or at once when the key is refused). A rerun sends it again.

At the end the loader reads every row of the file back with `GET /trips/{StoreRequestId}` (16 at
a time) until none is pending or --wait seconds have passed, and prints rows stored (with their
findings) and flagged, by phase, reason and detail, as the API reports them.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
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

from onceflow.runtime.taxi_etl import contract
from onceflow.runtime.taxi_etl.trips import MAX_LINE_BYTES, Schema, header_schema, is_header, line_columns, row_schema

PROG = "onceflow-taxi-load"  # the console script; also `python -m onceflow.clients.taxi_loader`
USAGE_EXIT_STATUS = 2
INTERRUPTED_EXIT_STATUS = 130  # Ctrl-C, as a shell reports it
DEFAULT_BATCH_LINES = 100  # dev's batch_max_lines (prod takes 200)
MAX_BATCH_LINES = 1000  # the most any deployment takes (TaxiEtlConfig.batch_max_lines)
BATCH_MAX_BYTES = 64 * 1024  # the API's body limit (TaxiEtlConfig.batch_max_bytes)
KEY_HASH_CHARS = 32  # hex digits of the file's SHA-256 in each key: 128 bits
IDEMPOTENCY_KEY_MAX_CHARS = 64  # what the API takes (runtime.taxi_etl.requests.IDEMPOTENCY_KEY)
CHECKPOINT_SUFFIX = ".onceflow-progress"
CHECKPOINT_FORMAT = 1
READERS = 16  # concurrent GET /trips/{id} of the read-back
READ_CHUNK = 1 << 20
DEFAULT_WAIT_SECONDS = 300.0
SHOWN_FLAGGED = 50  # flagged rows listed one by one in the summary; the rest are counted
STACK_SUFFIX = "-TaxiEtl"  # the taxi stack in a CDK outputs file (Onceflow-<env>-TaxiEtl)
OUTPUTS_FILE = "cdk-outputs-{env}.json"  # what `make deploy ENV=<env>` writes
API_KEY_VARIABLE = "ONCEFLOW_API_KEY"
LOCAL_ENDPOINT_OUTPUT = "LocalEndpointUrl"  # `make serve` adds it to every stack of cdk-outputs-local.json (ops.smoke reads it too)
UNREACHABLE_BATCHES_TO_STOP = 3  # consecutive batches the API did not answer: the run stops
# C0 controls other than tab, CR and LF: what the API refuses as binary data (runtime.taxi_etl.requests._BINARY).
BINARY = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# What the API refuses in front of a body (runtime.shared.http.UTF8_BOM): the loader drops it from a line.
UTF8_BOM = b"\xef\xbb\xbf"
_API_LINE = re.compile(r"\bline (\d+)\b")


class UsageError(Exception):
    """The command line, the outputs file, the checkpoint or the key cannot be used (exit status 2)."""


class ApiUnavailable(Exception):
    """The API gave no usable answer after every retry (no connection, timeouts, 429 or 5xx)."""


# --- lines ------------------------------------------------------------------------------------


class Kind(Enum):
    ROW = "row"  # a data line the API takes: sent
    SKIPPED = "skipped"  # blank, or a header of a mapped layout: not sent, as the API would skip it
    REFUSED = "refused"  # a line the API would refuse: reported, not sent


@dataclass(frozen=True, slots=True)
class Line:
    number: int  # in the file, from 1
    kind: Kind
    text: str = ""  # ROW: the line as sent (no line ending)
    problem: str = ""  # REFUSED: why, in the API's words, with the file's line number


def _unmapped(schema: Schema) -> str:
    return f"the {schema} layout is not taken here; send yellow-trip records of 2017 or later, which carry zone ids"


def classify(number: int, data: bytes | None, size: int, *, max_line_bytes: int = MAX_LINE_BYTES) -> Line:
    """One line of the file (`data` without its line ending; None when it was too long to keep) as the
    API would see it in a batch. The messages are the API's (runtime.taxi_etl.requests), numbered by
    the file's lines; the API judges UTF-8 and control characters for the whole body, the loader per line.
    A byte-order mark in front of a line (the file's own on line 1, as spreadsheets save "CSV UTF-8";
    or where files were concatenated) is dropped: the API refuses a body that starts with one, and a
    BOM is never part of a trip."""
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
        return Line(number, Kind.SKIPPED)
    schema = row_schema(columns)
    if schema is None:
        return Line(number, Kind.REFUSED, problem=f"line {number} has {len(columns)} columns; a yellow-taxi trip has 17 to 20")
    if not schema.mapped:
        return Line(number, Kind.REFUSED, problem=f"line {number} has the {schema} layout; {_unmapped(schema)}")
    return Line(number, Kind.ROW, text=text)


def read_lines(
    stream: IO[bytes], *, max_line_bytes: int = MAX_LINE_BYTES, on_bytes: Callable[[bytes], None] | None = None
) -> Iterator[Line]:
    """The file's lines, classified, read lazily: memory holds one line at a time, and a line too long
    to be a trip (binary data without line breaks, say) is counted through, never held whole.
    `on_bytes` sees every byte read, in order (the send pass hashes the file with it)."""
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


# --- batches ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Batch:
    first: int  # the file's line numbers this batch covers, both included
    last: int
    rows: list[tuple[int, str]] = field(default_factory=list)  # (line number, text) of the lines sent, in order
    refused: list[Line] = field(default_factory=list)

    def key(self, file_sha256: str) -> str:
        return batch_key(file_sha256, self.first, self.last)

    def body(self) -> bytes:
        return "".join(f"{text}\n" for _, text in self.rows).encode("utf-8")

    @property
    def lines(self) -> str:
        return f"line {self.first}" if self.first == self.last else f"lines {self.first}-{self.last}"


def batch_key(file_sha256: str, first: int, last: int) -> str:
    """The batch's Idempotency-Key: the file's hash and the line range, nothing a run could change."""
    key = f"{file_sha256[:KEY_HASH_CHARS]}-{first}-{last}"
    if len(key) > IDEMPOTENCY_KEY_MAX_CHARS:  # pragma: no cover - lines past 10**14
        raise ValueError(f"line numbers too large for an Idempotency-Key: {key}")
    return key


def row_id(key: str, position: int) -> str:
    """The StoreRequestId the API gives the `position`-th line (from 1) of a batch sent under `key`."""
    return f"kb-{key}-{position}"


def iter_batches(lines: Iterable[Line], *, batch_lines: int = DEFAULT_BATCH_LINES, batch_bytes: int = BATCH_MAX_BYTES) -> Iterator[Batch]:
    """Batches of consecutive lines, lazily: at most `batch_lines` lines each (every line counts), cut
    before a row that would make the body exceed `batch_bytes`."""
    batch: Batch | None = None
    size = 0
    for line in lines:
        cost = len(line.text.encode("utf-8")) + 1 if line.kind is Kind.ROW else 0
        if batch is not None and (batch.last - batch.first + 1 >= batch_lines or size + cost > batch_bytes):
            yield batch
            batch = None
        if batch is None:
            batch, size = Batch(line.number, line.number), 0
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


@dataclass
class Checkpoint:
    """What a rerun needs to send only what is missing: the file's hash, how it was cut, and per API
    URL the line ranges whose batches were acknowledged (merged intervals)."""

    path: Path
    sha256: str
    batch_lines: int
    batch_bytes: int
    acknowledged: dict[str, list[list[int]]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path, *, sha256: str, batch_lines: int | None, batch_bytes: int) -> Checkpoint:
        """The checkpoint of this file (a new one when there is none); a usage error when it is another file's or cut another way."""
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            new = cls(path, sha256, batch_lines or DEFAULT_BATCH_LINES, batch_bytes)
            try:
                new.save()  # now, so a place where it cannot be written stops the run before anything is sent
            except OSError as err:
                raise UsageError(f"cannot write the checkpoint {path} ({err.strerror or err}); pass --checkpoint PATH") from err
            return new
        except (OSError, ValueError) as err:
            raise UsageError(f"cannot read the checkpoint {path} ({err}); move it away to start over") from err
        try:
            found = cls(
                path,
                str(document["sha256"]),
                int(document["batch_lines"]),
                int(document["batch_bytes"]),
                {str(url): [[int(a), int(b)] for a, b in ranges] for url, ranges in document.get("acknowledged", {}).items()},
            )
            if document.get("format") != CHECKPOINT_FORMAT:
                raise ValueError(f"format {document.get('format')!r}, not {CHECKPOINT_FORMAT}")
        except (KeyError, TypeError, ValueError) as err:
            raise UsageError(f"{path} is not a checkpoint of this loader ({err}); move it away to start over") from err
        if found.sha256 != sha256:
            raise UsageError(
                f"the file changed since {path} was written (sha256 {found.sha256[:16]}..., now {sha256[:16]}...): "
                "its keys would all be new, so rows the old content stored would be stored again. To load it anyway, "
                "as a new file, move the checkpoint away"
            )
        if batch_lines is not None and batch_lines != found.batch_lines:
            raise UsageError(
                f"{path} was written with --batch-lines {found.batch_lines}: rerun with it (or without --batch-lines); "
                "other batches would have other keys and store their rows twice"
            )
        if batch_bytes != found.batch_bytes:
            raise UsageError(f"{path} was written with batches of at most {found.batch_bytes} bytes, not {batch_bytes}")
        return found

    def done(self, url: str, first: int, last: int) -> bool:
        return any(a <= first and last <= b for a, b in self.acknowledged.get(url, ()))

    def acknowledge(self, url: str, first: int, last: int) -> None:
        ranges = sorted([*self.acknowledged.get(url, []), [first, last]])
        merged: list[list[int]] = []
        for a, b in ranges:
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.acknowledged[url] = merged
        self.save()

    def save(self) -> None:
        document = {
            "format": CHECKPOINT_FORMAT,
            "loader": PROG,
            "sha256": self.sha256,
            "batch_lines": self.batch_lines,
            "batch_bytes": self.batch_bytes,
            "acknowledged": self.acknowledged,
        }
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(document) + "\n", encoding="utf-8")
        os.replace(temporary, self.path)  # atomic: a crash leaves the old checkpoint or the new one


# --- the API ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    document: dict[str, Any]

    @property
    def error(self) -> str:
        return str(self.document.get("error") or self.document.get("message") or self.document)


class TaxiApi(Protocol):
    """What the loader needs of the API; `HttpTaxiApi` is the real one, tests inject others."""

    url: str

    def post_batch(self, body: bytes, key: str) -> Answer: ...

    def get_row(self, store_request_id: str) -> Answer: ...


RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


class HttpTaxiApi:
    """The deployed API over HTTPS with urllib. A request that got no usable answer (no connection, a
    timeout, 429 or 5xx) is sent again, the same bytes under the same key, with full-jitter backoff:
    if an earlier attempt started the batch, the API answers the retry as a duplicate."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        attempts: int = 6,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self._key = api_key
        self._timeout = timeout
        self._attempts = attempts
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._sleep = sleep

    def post_batch(self, body: bytes, key: str) -> Answer:
        headers = {"content-type": "text/csv; charset=utf-8", "Idempotency-Key": key}
        return self._request("POST", contract.ROUTE_TRIP_BATCH, body, headers)

    def get_row(self, store_request_id: str) -> Answer:
        path = contract.ROUTE_ROW_STATE.replace(f"{{{contract.KEY_STORE_REQUEST_ID}}}", quote(store_request_id, safe=""))
        return self._request("GET", path, None, {})

    def _request(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        why = "no attempt"
        for attempt in range(self._attempts):
            if attempt:
                self._sleep(random.uniform(0, min(self._max_backoff, self._backoff * 2**attempt)))
            request = urllib.request.Request(
                self.url + path,
                data=body,
                method=method,
                headers={"Authorization": self._key, "accept": "application/json", "user-agent": "onceflow-taxi-loader", **headers},
            )
            try:
                with urllib.request.urlopen(request, timeout=self._timeout) as response:
                    answer = Answer(response.status, _json(response.read()))
            except urllib.error.HTTPError as err:
                answer = Answer(err.code, _json(err.read()))
            except (OSError, http.client.HTTPException, ValueError) as err:  # URLError, timeouts, resets, a truncated answer
                why = f"{type(err).__name__}: {err}"
                continue
            if answer.status not in RETRIED_STATUSES:
                return answer
            why = f"HTTP {answer.status}: {answer.error}"
        raise ApiUnavailable(f"{method} {path}: no answer after {self._attempts} attempts ({why})")


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
    """A batch the API acknowledged (now or in an earlier run): its key and the lines of its rows."""

    key: str
    lines: array[int]  # the file's line number of each row, in the order sent
    ids: list[str] | None = None  # None: the API's kb-<key>-<n>, as it answered

    def rows(self) -> Iterator[tuple[str, int]]:
        for position, line in enumerate(self.lines, start=1):
            yield (self.ids[position - 1] if self.ids else row_id(self.key, position)), line


@dataclass
class RowStates:
    """What the read-back found, by state."""

    read: int = 0
    stored: int = 0
    findings: Counter[str] = field(default_factory=Counter)
    flagged: Counter[tuple[str, int, str]] = field(default_factory=Counter)  # (phase, reason, detail)
    flagged_rows: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)  # the first SHOWN_FLAGGED
    pending: list[tuple[str, int]] = field(default_factory=list)  # (id, line) still pending or not seen yet
    unreadable: list[tuple[str, int, str]] = field(default_factory=list)  # (id, line, why)

    @property
    def flagged_total(self) -> int:
        return sum(self.flagged.values())


@dataclass
class LoadReport:
    file: Path
    sha256: str = ""
    lines: int = 0
    batches: int = 0
    accepted: int = 0  # batches started now (202)
    duplicates: int = 0  # batches the API had already processed (200, duplicate)
    skipped: int = 0  # batches the checkpoint had acknowledged
    empty: int = 0  # batches with no line to send
    failed: list[str] = field(default_factory=list)  # batches not acknowledged, and why
    rows: int = 0  # data lines the API takes (in every batch, sent now or before)
    rows_sent: int = 0  # of them, sent in this run
    skipped_lines: int = 0  # headers and blank lines
    refused: int = 0  # lines not sent, reported
    refusals: list[str] = field(default_factory=list)  # the first problems, for callers (all are printed)
    stopped: str = ""  # why the run stopped before the end of the file
    changed: bool = False  # the file's content changed between the two passes
    states: RowStates | None = None
    sent: list[SentBatch] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        return 1 if self.failed or self.stopped or self.changed else 0


@dataclass(frozen=True)
class LoadOptions:
    batch_lines: int | None = None  # None: the checkpoint's, or DEFAULT_BATCH_LINES
    batch_bytes: int = BATCH_MAX_BYTES
    wait_seconds: float = DEFAULT_WAIT_SECONDS
    read_back: bool = True
    readers: int = READERS
    checkpoint: Path | None = None  # None: <file>.onceflow-progress


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
    opens the file (twice: once to hash it, once to send it)."""
    options = options or LoadOptions()
    console = console or Console(sys.stdout, sys.stderr, None)
    open_file = opener or (lambda: path.open("rb"))
    report = LoadReport(path)
    size = _size(path) if opener is None else 0
    with open_file() as stream:
        bar = console.bar(size, "hashing", "B", scale=True)
        report.sha256, report.lines = scan_file(stream, bar.update)
        bar.close()
    checkpoint = Checkpoint.open(
        options.checkpoint or checkpoint_path_for(path),
        sha256=report.sha256,
        batch_lines=options.batch_lines,
        batch_bytes=options.batch_bytes,
    )
    console.print(
        f"{path.name}: {report.lines} lines, sha256 {report.sha256[:16]}..., batches of up to {checkpoint.batch_lines} lines "
        f"to {api.url}{contract.ROUTE_TRIP_BATCH} (checkpoint {checkpoint.path.name})"
    )
    _send(path, api, checkpoint, report, console, open_file)
    if options.read_back and report.sent:
        report.states = read_back(
            api, report.sent, console, readers=options.readers, wait_seconds=options.wait_seconds, clock=clock, sleep=sleep
        )
    print_summary(report, console, options.wait_seconds)
    return report


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _send(
    path: Path, api: TaxiApi, checkpoint: Checkpoint, report: LoadReport, console: Console, open_file: Callable[[], IO[bytes]]
) -> None:
    digest = hashlib.sha256()
    unreachable = 0
    bar = console.bar(report.lines, "loading", "line")
    with open_file() as stream:
        lines = read_lines(stream, on_bytes=digest.update)
        for batch in iter_batches(lines, batch_lines=checkpoint.batch_lines, batch_bytes=checkpoint.batch_bytes):
            report.batches += 1
            report.rows += len(batch.rows)
            report.refused += len(batch.refused)
            report.skipped_lines += batch.last - batch.first + 1 - len(batch.rows) - len(batch.refused)
            for line in batch.refused:
                console.print(f"REFUSED {line.problem}")
                if len(report.refusals) < 1000:
                    report.refusals.append(line.problem)
            key = batch.key(report.sha256)
            lines_sent = array("L", (number for number, _ in batch.rows))
            if not batch.rows:
                report.empty += 1
                checkpoint.acknowledge(api.url, batch.first, batch.last)
            elif checkpoint.done(api.url, batch.first, batch.last):
                report.skipped += 1
                report.sent.append(SentBatch(key, lines_sent))
            else:
                outcome = _post(api, batch, key, report, console)
                unreachable = unreachable + 1 if outcome == "unreachable" else 0
                if isinstance(outcome, SentBatch):
                    report.sent.append(outcome)
                    report.rows_sent += len(batch.rows)
                    checkpoint.acknowledge(api.url, batch.first, batch.last)
                elif outcome == "unauthorized":
                    report.stopped = "the API refused the key"
                elif unreachable >= UNREACHABLE_BATCHES_TO_STOP:
                    report.stopped = f"the API did not answer {unreachable} batches in a row"
            bar.update(batch.last - batch.first + 1)
            if report.stopped:
                break
    bar.close()
    if not report.stopped and digest.hexdigest() != report.sha256:
        report.changed = True


def _post(api: TaxiApi, batch: Batch, key: str, report: LoadReport, console: Console) -> SentBatch | str:
    """Send one batch; the acknowledged batch, or why not ("refused", "unauthorized", "unreachable")."""
    try:
        answer = api.post_batch(batch.body(), key)
    except ApiUnavailable as err:
        report.failed.append(f"{batch.lines}: {err}")
        console.print(f"NOT SENT {batch.lines}: {err}")
        return "unreachable"
    ids = answer.document.get("StoreRequestIds")
    if answer.status in (200, 202) and isinstance(ids, list) and len(ids) == len(batch.rows):
        duplicate = bool(answer.document.get("duplicate"))
        if duplicate:
            report.duplicates += 1
        else:
            report.accepted += 1
        lines = array("L", (number for number, _ in batch.rows))
        derived = [row_id(key, position) for position in range(1, len(ids) + 1)]
        return SentBatch(key, lines, None if ids == derived else [str(i) for i in ids])
    if answer.status in (200, 202):
        why = f"unexpected answer {answer.status}: {str(answer.document)[:300]}"
    elif answer.status in (401, 403):
        why = f"HTTP {answer.status}: the API refused the key ({answer.error})"
    elif answer.status == 422:
        why = (
            f"HTTP 422: the key {key} was already used for other lines ({answer.error}); "
            "the file's lines or the loader's rules changed since that batch was sent"
        )
    else:
        why = f"refused by the API (HTTP {answer.status}): {_file_lines(answer.error, batch)}"
        if answer.status == 413:
            why += "; this deployment takes smaller batches: use a smaller --batch-lines (with a new checkpoint)"
    report.failed.append(f"{batch.lines}: {why}")
    console.print(f"NOT SENT {batch.lines}: {why}")
    return "unauthorized" if answer.status in (401, 403) else "refused"


def _file_lines(message: str, batch: Batch) -> str:
    """The API numbers a batch's lines from 1; the file's numbers are what the user can find."""

    def renumber(match: re.Match[str]) -> str:
        position = int(match.group(1))
        return f"line {batch.rows[position - 1][0]}" if 1 <= position <= len(batch.rows) else match.group(0)

    return _API_LINE.sub(renumber, message)


# --- reading back -----------------------------------------------------------------------------


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
    """GET /trips/{id} of every row, `readers` at a time; pending (or not yet seen) rows are read
    again, with a growing pause, until none is or `wait_seconds` have passed."""
    states = RowStates()
    deadline = clock() + wait_seconds
    total = sum(len(batch.lines) for batch in sent)
    bar = console.bar(total, "reading back", "row")
    pool = _Readers(lambda store_request_id: _get(api, store_request_id), readers)

    def read(rows: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        pending: list[tuple[str, int]] = []
        for chunk in _chunks(rows, readers * 32):
            for (store_request_id, line), answer in zip(chunk, pool.map([store_request_id for store_request_id, _ in chunk]), strict=True):
                if _tally(states, store_request_id, line, answer):
                    pending.append((store_request_id, line))
                else:
                    bar.update()
        return pending

    try:
        pending = read(row for batch in sent for row in batch.rows())
        pause = 0.5
        while pending and clock() < deadline:
            sleep(min(pause, max(deadline - clock(), 0)))
            pause = min(pause * 2, 5.0)
            pending = read(pending)
    finally:
        pool.close()
    bar.close()
    states.pending = pending
    states.read = total - len(pending) - len(states.unreadable)
    return states


class _Readers:
    """`count` daemon threads that call `read` on the items of `map`, answers in order. Not a
    ThreadPoolExecutor: the interpreter joins those at exit, and a Ctrl-C that lands while the main
    thread holds a future's lock leaves a worker waiting for it, so the loader would never exit."""

    def __init__(self, read: Callable[[str], Answer | str], count: int) -> None:
        self._read = read
        self._tasks: queue.SimpleQueue[tuple[int, str] | None] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[tuple[int, Answer | str]] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{PROG}-reader-{n}", daemon=True) for n in range(count)]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            index, item = task
            try:
                answer = self._read(item)
            except Exception as err:  # a bug, not the API: the row is reported unread, the read-back goes on
                answer = f"{type(err).__name__}: {err}"
            self._answers.put((index, answer))

    def map(self, items: Sequence[str]) -> list[Answer | str]:
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


def _tally(states: RowStates, store_request_id: str, line: int, answer: Answer | str) -> bool:
    """Count one answer; True when the row is to be read again (pending, or not seen by any phase yet)."""
    if isinstance(answer, str):
        states.unreadable.append((store_request_id, line, answer))
        return False
    if answer.status == 404:
        return True
    state = answer.document.get("state") if answer.status == 200 else None
    if state == "pending":
        return True
    if state == "stored":
        states.stored += 1
        states.findings.update(str(finding) for finding in answer.document.get("findings") or ())
    elif state == "flagged":
        document = answer.document
        states.flagged[(str(document.get("phase")), int(document.get("reason") or 0), str(document.get("detail")))] += 1
        if len(states.flagged_rows) < SHOWN_FLAGGED:
            states.flagged_rows.append((line, store_request_id, document))
    else:
        states.unreadable.append((store_request_id, line, f"HTTP {answer.status}: {answer.error}"))
    return False


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
    sent = report.accepted + report.duplicates
    say(f"summary of {report.file.name}")
    say(f"  lines     {report.lines:>8}  ({report.rows} rows, {report.skipped_lines} header or blank, {report.refused} refused)")
    say(
        f"  batches   {report.batches:>8}  ({sent} sent: {report.accepted} accepted, {report.duplicates} answered as duplicates; "
        f"{report.skipped} acknowledged by an earlier run; {report.empty} with no row; {len(report.failed)} not sent)"
    )
    for why in report.failed[:20]:
        say(f"    NOT SENT {why}")
    if len(report.failed) > 20:
        say(f"    NOT SENT ... and {len(report.failed) - 20} more")
    if report.failed:
        say("    a rerun sends them again under the same keys: nothing is stored twice")
    if report.refused:
        say(f"  refused   {report.refused:>8}  lines not sent (each listed above as REFUSED, in the API's words)")
    if report.states is not None:
        _print_states(report.states, say, wait_seconds)
    if report.changed:
        say("FILE CHANGED while it was loaded: its hash is not the one the keys were made from; load it again as a new file")
    if report.stopped:
        say(f"STOPPED: {report.stopped}; a rerun sends what is missing")


def _print_states(states: RowStates, say: Callable[[str], None], wait_seconds: float) -> None:
    total = states.read + len(states.pending) + len(states.unreadable)
    findings = ", ".join(f"{name} {count}" for name, count in sorted(states.findings.items()))
    say(f"  read back {total:>8}  (GET {contract.ROUTE_ROW_STATE})")
    say(f"    stored  {states.stored:>8}" + (f"  (with findings: {findings})" if findings else ""))
    say(f"    flagged {states.flagged_total:>8}")
    for (phase, reason, detail), count in sorted(states.flagged.items(), key=lambda item: (item[0][1], item[0][2])):
        say(f"      {phase} (reason {reason}) {detail}: {count}")
    if states.pending:
        say(f"    pending {len(states.pending):>8}  after {wait_seconds:g} s; run the loader again later to read them (it resends nothing)")
    if states.unreadable:
        store_request_id, line, why = states.unreadable[0]
        say(f"    unread  {len(states.unreadable):>8}  (the first: line {line}, {store_request_id}: {why})")
    for line, store_request_id, document in states.flagged_rows:
        say(
            f"FLAGGED line {line} {store_request_id}: {document.get('phase')} (reason {document.get('reason')}) "
            f"{document.get('detail')}: {document.get('message')}"
        )
    if states.flagged_total > len(states.flagged_rows):
        say(f"FLAGGED ... and {states.flagged_total - len(states.flagged_rows)} more (python -m ops.taxi_redrive --dry-run lists them)")


# --- the command line -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaxiStack:
    """What the loader reads from the taxi stack's outputs."""

    api_url: str
    secret_arn: str
    endpoint_url: str | None = None  # `make serve`'s embedded cloud (LocalEndpointUrl): where the secret is


def api_from_outputs(path: Path, env: str) -> TaxiStack:
    """The taxi stack's ApiUrl and ApiKeySecretArn from a CDK outputs file (`{stack name: {OutputKey: value}}`)."""
    deploy = f"run `make deploy ENV={env}` in the repository root, or pass --url"
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError as err:
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
    endpoint = outputs.get(LOCAL_ENDPOINT_OUTPUT)
    return TaxiStack(str(outputs[contract.OUTPUT_API_URL]), str(outputs[contract.OUTPUT_API_KEY_SECRET_ARN]), endpoint and str(endpoint))


def read_api_key(secret_arn: str, profile: str | None = None, endpoint_url: str | None = None) -> str:
    """The API key from Secrets Manager (boto3, the default credentials or `profile`; the secret's region)."""
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
        client: Any = boto3.Session(profile_name=profile, region_name=region).client("secretsmanager", endpoint_url=endpoint_url)
        return str(client.get_secret_value(SecretId=secret_arn)["SecretString"])
    except (BotoCoreError, ClientError, KeyError) as err:
        raise UsageError(f"cannot read the API key from {secret_arn}: {err}; or pass --api-key or set {API_KEY_VARIABLE}") from err


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Load a CSV file of NYC yellow-taxi trips into the taxi ETL saga in batches (a rerun sends only what is missing), "
        "then read every row back and print what became of it.",
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
        help=f"lines per batch, 1-{MAX_BATCH_LINES}, at most the API's limit (default {DEFAULT_BATCH_LINES}, or the checkpoint's)",
    )
    parser.add_argument("--checkpoint", type=Path, metavar="PATH", help=f"where progress is kept (default FILE{CHECKPOINT_SUFFIX})")
    parser.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"how long to wait for pending rows when reading back (default {DEFAULT_WAIT_SECONDS:g})",
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
    if args.batch_lines is not None and not 1 <= args.batch_lines <= MAX_BATCH_LINES:
        parser.error(f"--batch-lines must be 1..{MAX_BATCH_LINES}")
    if args.wait < 0:
        parser.error("--wait must be 0 or more seconds")
    if args.outputs_file is not None and not args.env:
        parser.error("--outputs-file goes with --env")
    if not args.file.is_file():
        parser.error(f"{args.file} is not a file")
    console = Console(sys.stdout, sys.stderr, args.progress)
    options = LoadOptions(batch_lines=args.batch_lines, wait_seconds=args.wait, read_back=args.read_back, checkpoint=args.checkpoint)
    try:
        if api is None:
            api = _api_from_args(args)
        report = load_file(args.file, api, options, console=console)
    except UsageError as err:
        parser.exit(USAGE_EXIT_STATUS, f"{parser.prog}: error: {err}\n")
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted; the checkpoint holds what the API acknowledged: run it again to send the rest", file=sys.stderr)
        return INTERRUPTED_EXIT_STATUS
    return report.exit_status


def _api_from_args(args: argparse.Namespace) -> HttpTaxiApi:
    key = args.api_key or os.environ.get(API_KEY_VARIABLE)
    if args.env:
        stack = api_from_outputs(args.outputs_file or Path(OUTPUTS_FILE.format(env=args.env)), args.env)
        url = stack.api_url
        key = key or read_api_key(stack.secret_arn, args.profile, stack.endpoint_url)
    else:
        url = args.url
    if not key:
        raise UsageError(f"no API key: pass --api-key, set {API_KEY_VARIABLE}, or use --env to read it from the stack's secret")
    if not url.startswith(("https://", "http://")):
        raise UsageError(f"the API URL must start with https:// (got {url!r})")
    return HttpTaxiApi(url, key)


if __name__ == "__main__":
    sys.exit(main())
