"""`python -m benchmarks.loader_concurrency`: the taxi loader's rows/s with one batch in flight (the
serial loader, --in-flight 1) against several (the default, --in-flight 8), when every HTTP request
takes 50 ms.

The loader (onceflow.clients.taxi_loader: HttpTaxiApi over urllib, its real threads, checkpoint
and in-order commits) sends the 2,000 real rows of tests/data/taxi_etl in its default batches of
100 lines to a stub of `POST /trips/batch` on localhost (http.server, a thread per request) that
waits DELAY_MS and then answers as the API does: the body through the API's own parsing
(runtime.taxi_etl.requests: content ids, the execution name, 400/413), an execution name seen
before answered as a duplicate. Each run starts from a fresh stub and checkpoint, and is measured
without the read-back (its 16 readers are the same for every N; `--wait` and the saga behind the
API are not what --in-flight changes). rows/s = rows acknowledged / wall time of `load_file`.

Checked in every run: every row of the file was acknowledged under its content id, and the stub
started each row exactly once (one new execution per batch, no row in two, none answered as a
duplicate). Target (issue 25): the default at least TARGET_RATIO x the serial loader's rows/s,
measured in the same run. Figures, not a pass/fail test; `main` says whether the target is met.
"""

from __future__ import annotations

import base64
import io
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from devtools.taxi_rows import SAMPLE, sample_lines
from onceflow.clients import taxi_loader
from onceflow.clients.taxi_loader import Console, HttpTaxiApi, LoadOptions, load_file
from runtime.shared.refusals import Refusal
from runtime.taxi_etl import contract
from runtime.taxi_etl.requests import content_id, decode_body, parse_batch
from runtime.taxi_etl.trips import MAX_LINE_BYTES
from runtime.taxi_etl.workflow import StartOutcome

DELAY_MS = 50.0  # each HTTP request's round trip: API Gateway, the authorizer (cached), StartExecution
TARGET_RATIO = 4.0
IN_FLIGHT = (1, 4, taxi_loader.DEFAULT_IN_FLIGHT, 16)
REPEATS = 3  # each N measured this many times; the median run is reported
MAX_LINES = 100  # dev's batch_max_lines
DUPLICATE = StartOutcome.DUPLICATE.value  # the answer's flag, as the API's handler names it


@dataclass(frozen=True)
class Parsed:
    """What the API makes of a batch body: its execution, the id of each line, the ids of its rows (unique)."""

    name: str
    store_request_ids: tuple[str, ...]
    rows: tuple[str, ...]


def parse(body: bytes) -> Parsed:
    """The API's own parsing of a body (runtime.taxi_etl.requests); a Refusal as the API raises it."""
    text = decode_body(base64.b64encode(body).decode("ascii"), is_base64=True, max_bytes=taxi_loader.BATCH_MAX_BYTES)
    submission = parse_batch(text, None, max_lines=MAX_LINES, max_line_bytes=MAX_LINE_BYTES)
    return Parsed(submission.execution_name, submission.store_request_ids, tuple(row.store_request_id for row in submission.rows))


def expected_bodies(path: Path) -> dict[bytes, Parsed]:
    """The bodies the loader sends for this file (its batches, cut as it cuts them), parsed by the API's rules ahead of
    the run: the stub's answers then cost no CPU of the loader's process, as a remote API's do not."""
    with path.open("rb") as stream:
        bodies = [batch.body() for batch in taxi_loader.iter_batches(taxi_loader.read_lines(stream)) if batch.rows]
    return {body: parse(body) for body in bodies}


class StubApi:
    """What the loader's POSTs started: executions by name, and how many new executions carried each row."""

    def __init__(self, delay_seconds: float, prepared: dict[bytes, Parsed]) -> None:
        self.delay = delay_seconds
        self.prepared = prepared
        self.lock = threading.Lock()
        self.executions: dict[str, tuple[str, ...]] = {}  # name -> its rows' ids
        self.started_rows: Counter[str] = Counter()  # row id -> new executions that carried it
        self.duplicates = 0
        self.posts = 0
        self.most_at_once = 0
        self._at_once = 0

    def post(self, body: bytes) -> tuple[int, dict[str, object]]:
        with self.lock:
            self.posts += 1
            self._at_once += 1
            self.most_at_once = max(self.most_at_once, self._at_once)
        try:
            time.sleep(self.delay)
            try:
                parsed = self.prepared.get(body) or parse(body)  # a body not foreseen (a 413's half, say) is parsed now
            except Refusal as refusal:
                return refusal.status, refusal.body()
            name = parsed.name
            with self.lock:
                duplicate = name in self.executions
                if duplicate:
                    self.duplicates += 1
                else:
                    self.executions[name] = parsed.rows
                    self.started_rows.update(parsed.rows)
            ids = list(parsed.store_request_ids)
            return (200 if duplicate else 202), {f"{contract.KEY_STORE_REQUEST_ID}s": ids, "execution": name, DUPLICATE: duplicate}
        finally:
            with self.lock:
                self._at_once -= 1


@contextmanager
def serving(stub: StubApi) -> Iterator[str]:
    """The stub on a localhost port the OS picks, a thread per request; its base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path != contract.ROUTE_TRIP_BATCH:
                status, document = 404, {"error": f"no route {self.path}"}
            else:
                status, document = stub.post(body)
            data = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return

    class Server(ThreadingHTTPServer):
        request_queue_size = 128  # the listen backlog: 5 by default, and a connection over it waits a second for a SYN retry

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="loader-bench-api", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass(frozen=True)
class Run:
    in_flight: int
    rows: int
    batches: int
    seconds: float
    most_at_once: int
    check: str  # "ok", or what went wrong

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds


def measure(path: Path, rows: list[str], in_flight: int, delay_seconds: float, prepared: dict[bytes, Parsed]) -> Run:
    """One load of `path` with `in_flight` batches at once, from a fresh stub and checkpoint; checked."""
    stub = StubApi(delay_seconds, prepared)
    with serving(stub) as url, tempfile.TemporaryDirectory() as scratch:
        api = HttpTaxiApi(url, "bench-key")
        options = LoadOptions(read_back=False, in_flight=in_flight, checkpoint=Path(scratch) / "progress")
        console = Console(io.StringIO(), io.StringIO(), False)
        started = time.perf_counter()
        report = load_file(path, api, options, console=console)
        seconds = time.perf_counter() - started
    expected = [content_id(row) for row in rows]
    acknowledged = [store_request_id for batch in report.sent for store_request_id, _ in batch.rows()]
    problems = []
    if report.exit_status != 0 or report.rows_sent != len(rows):
        problems.append(f"exit {report.exit_status}, {report.rows_sent} of {len(rows)} rows acknowledged")
    if acknowledged != expected:
        problems.append("the rows acknowledged are not the file's, in order, by their content ids")
    if set(stub.started_rows) != set(expected) or any(count != 1 for count in stub.started_rows.values()):
        problems.append(f"rows started other than once each: {sum(stub.started_rows.values())} starts of {len(stub.started_rows)} rows")
    if stub.duplicates or len(stub.executions) != report.batches:
        problems.append(f"{stub.duplicates} duplicate answers, {len(stub.executions)} executions for {report.batches} batches")
    return Run(in_flight, report.rows_sent, report.batches, seconds, stub.most_at_once, "; ".join(problems) or "ok")


def table(runs: list[Run], serial: Run) -> Iterator[str]:
    yield (
        f"{'--in-flight':>11} {'batches':>7} {'rows':>6} {'seconds':>8} {'rows/s':>8} {'x serial':>8} {'POSTs at once':>13}  every row once"
    )
    for run in runs:
        yield (
            f"{run.in_flight:>11} {run.batches:>7} {run.rows:>6} {run.seconds:>8.2f} {run.rows_per_second:>8,.0f} "
            f"{run.rows_per_second / serial.rows_per_second:>7.1f}x {run.most_at_once:>13}  {run.check}"
        )


def main(delay_ms: float = DELAY_MS) -> bool:
    """Prints the figures; True when the default --in-flight loads at least TARGET_RATIO x the serial rows/s, every row once."""
    rows = sample_lines()
    print(
        f"taxi loader: the {len(rows):,} real rows of {SAMPLE.name} in batches of {taxi_loader.DEFAULT_BATCH_LINES} lines, "
        f"every HTTP request {delay_ms:.0f} ms (a stub of POST {contract.ROUTE_TRIP_BATCH} on localhost, the API's own parsing); "
        f"send phase, no read-back; median of {REPEATS}"
    )
    prepared = expected_bodies(SAMPLE)
    runs: list[Run] = []
    for in_flight in IN_FLIGHT:
        measured = [measure(SAMPLE, rows, in_flight, delay_ms / 1000, prepared) for _ in range(REPEATS)]
        failed = [run for run in measured if run.check != "ok"]
        runs.append(failed[0] if failed else sorted(measured, key=lambda run: run.seconds)[len(measured) // 2])
    serial = runs[0]
    for line in table(runs, serial):
        print("  " + line)
    default = next(run for run in runs if run.in_flight == taxi_loader.DEFAULT_IN_FLIGHT)
    ratio = default.rows_per_second / serial.rows_per_second
    ok = ratio >= TARGET_RATIO and all(run.check == "ok" for run in runs)
    print(
        f"  default ({taxi_loader.DEFAULT_IN_FLIGHT} in flight) {default.rows_per_second:,.0f} rows/s against serial "
        f"{serial.rows_per_second:,.0f}: {ratio:.1f}x; target at least {TARGET_RATIO:g}x with every row once: {'met' if ok else 'NOT met'}"
    )
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
