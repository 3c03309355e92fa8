"""The taxi loader (onceflow.clients.taxi_loader) against an API in memory: the API's own request
parsing (runtime.taxi_etl.requests: content ids, the header deciding the layout, the state budget's
413), Standard's execution names (the same name and input again is a duplicate) and each row's fate
by the phases' own rules. No network.

Batches go without a key, so every row has its content id and a rerun, a CRLF or BOM copy or
another --batch-lines stores nothing twice; the checkpoint (execution names) only saves requests;
the header decides the layout, and a truncated row is refused by its line; a 413 is split; the exit
status and the summary name every outcome (stored, flagged, refused, not sent, unread, pending);
the read-back's --wait bounds the wait, not the reading; the HTTP client retries the same bytes.
"""

from __future__ import annotations

import base64
import io
import json
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.taxi_rows import DROPOFF_BEFORE_PICKUP, SPRING_FORWARD_GAP, sample_header, sample_lines, schema_rows
from onceflow.clients import taxi_loader
from onceflow.clients.taxi_loader import (
    Answer,
    ApiUnavailable,
    Batch,
    Checkpoint,
    Console,
    HttpTaxiApi,
    Kind,
    Line,
    LoadOptions,
    LoadReport,
    classify,
    iter_batches,
    load_file,
    read_lines,
)
from runtime.shared.refusals import Refusal
from runtime.taxi_etl import contract
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import content_id, decode_body, parse_batch, parse_single
from runtime.taxi_etl.row_state import parse_row_id
from runtime.taxi_etl.trip_items import final_item
from runtime.taxi_etl.trip_lines import Accepted, Rejected, transform_tuple, validate_line
from runtime.taxi_etl.trips import MAX_LINE_BYTES

SCHEMA_ROWS = schema_rows()
HEADER, ROWS = sample_header(), sample_lines()
MALFORMED = {
    "five columns": "1,2,3,4,5",
    "binary junk": "\x00\x01\x02PK\x03\x04 junk",
    "unclosed quote": '2,"2019-10-23T16:39:42.000,2019-10-23T17:14:10.000,1,7.93,1,N,138,170,1,29.5,1,0.5,7.98,6.12,0.3,47.9,2.5',
    "2009 row": SCHEMA_ROWS["yellow_2009"]["row"],
    "2009 header": SCHEMA_ROWS["yellow_2009"]["header"],
    "2015 row": SCHEMA_ROWS["yellow_2015"]["row"],
    "too long": ROWS[0] + " " * MAX_LINE_BYTES,
}
TRUNCATED = ROWS[5].rsplit(",", 1)[0]  # a 2019 row cut at its last comma: 17 fields, the shape of a 2017 row
assert len(TRUNCATED.split(",")) == 17


class SimulatedCrash(Exception):
    """The loader's process dies here."""


class FakeApi:
    """POST /trips/batch and GET /trips/{id} in memory, as the deployed API answers them."""

    url = "https://api.test"

    def __init__(self, *, max_lines: int = 100, unsettled_reads: int = 0) -> None:
        self.max_lines = max_lines
        self.unsettled_reads = unsettled_reads  # a row reads 404, then pending, this many times before its end state
        self.executions: dict[str, str] = {}  # execution name -> input
        self.rows: dict[str, str] = {}  # StoreRequestId -> tuple (the line the API submitted)
        self.bodies: list[bytes] = []  # each POST's body, in order
        self.statuses: list[int] = []
        self.reads: Counter[str] = Counter()
        self.failing_store: set[str] = set()
        self.before_start: Callable[[int], None] | None = None  # called with the POST's index before anything starts
        self.after_start: Callable[[int], None] | None = None  # ... after the execution started, before the answer
        self.lock = threading.Lock()

    @property
    def posts(self) -> int:
        return len(self.bodies)

    def post_batch(self, body: bytes) -> Answer:
        with self.lock:  # several batches in flight: each POST its own index
            index = len(self.bodies)
            self.bodies.append(body)
        if self.before_start:
            self.before_start(index)
        try:  # the body's bytes as API Gateway hands them over, through the API's own decoding (strict UTF-8, no BOM)
            text = decode_body(base64.b64encode(body).decode("ascii"), is_base64=True, max_bytes=taxi_loader.BATCH_MAX_BYTES)
            submission = parse_batch(text, None, max_lines=self.max_lines, max_line_bytes=MAX_LINE_BYTES)
        except Refusal as refusal:
            return self._answer(refusal.status, refusal.body())
        name, execution_input = submission.execution_name, submission.execution_input()
        assert self.executions.get(name, execution_input) == execution_input  # content names: never another input
        duplicate = name in self.executions
        self.executions[name] = execution_input
        self.rows.update((row.store_request_id, row.tuple) for row in submission.rows)
        if self.after_start:
            self.after_start(index)
        document = {"StoreRequestIds": list(submission.store_request_ids), "execution": name, "duplicate": duplicate}
        return self._answer(200 if duplicate else 202, {**document, "skippedHeader": submission.skipped_header})

    def _answer(self, status: int, document: dict[str, Any]) -> Answer:
        self.statuses.append(status)
        return Answer(status, document)

    def get_row(self, store_request_id: str) -> Answer:
        parse_row_id(store_request_id)  # the loader asks only for ids the API gives
        if store_request_id not in self.rows:
            return Answer(404, {"StoreRequestId": store_request_id, "error": "no phase has seen this id"})
        self.reads[store_request_id] += 1
        if self.reads[store_request_id] <= self.unsettled_reads:
            first = self.reads[store_request_id] == 1
            return (
                Answer(404, {}) if first else Answer(200, {"StoreRequestId": store_request_id, "state": "pending", "phase": "validation"})
            )
        return Answer(200, {"StoreRequestId": store_request_id, "generation": 1, **self.fate(store_request_id)})

    def fate(self, store_request_id: str) -> dict[str, Any]:
        validated = validate_line(self.rows[store_request_id])
        if isinstance(validated, Rejected):
            return flagged(Phase.VALIDATION, validated.rule.value, validated.message)
        transformed = transform_tuple(validated.tuple)
        if isinstance(transformed, Rejected):
            return flagged(Phase.TRANSFORMATION, transformed.rule.value, transformed.message)
        if store_request_id in self.failing_store:
            return flagged(Phase.STORE, "error:ClientError", "the trips table refused the write")
        assert isinstance(transformed, Accepted)
        return {"state": "stored", "findings": final_item(store_request_id, transformed.tuple).get("findings", [])}

    def stored_ids(self) -> list[str]:
        return [store_request_id for store_request_id in self.rows if self.fate(store_request_id)["state"] == "stored"]


def flagged(phase: Phase, detail: str, message: str) -> dict[str, Any]:
    return {"state": "flagged", "phase": phase.value, "reason": int(phase.reason), "detail": detail, "message": message}


def write(path: Path, lines: list[str], *, ending: str = "\n", last_ending: bool = True) -> Path:
    text = ending.join(lines) + (ending if last_ending else "")
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    return path


def quiet() -> Console:
    return Console(io.StringIO(), io.StringIO(), False)


def run(path: Path, api: Any, **options: Any) -> tuple[LoadReport, str]:
    console = quiet()
    report = load_file(path, api, LoadOptions(**options), console=console, sleep=lambda seconds: None)
    out = console.out.getvalue()  # type: ignore[attr-defined]
    return report, out


def ids_of(report: LoadReport) -> dict[int, str]:
    """The file's line number -> StoreRequestId of every row acknowledged."""
    return {line: store_request_id for batch in report.sent for store_request_id, line in batch.rows()}


def counts_line(out: str, name: str) -> str:
    (line,) = [line for line in out.splitlines() if line.startswith(f"    {name} ")]
    return line


class FakeClock:
    """Time that passes only when the loader sleeps or a fake GET says it took a while."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def run_timed(path: Path, api: Any, clock: FakeClock, **options: Any) -> tuple[LoadReport, str]:
    console = quiet()
    report = load_file(path, api, LoadOptions(**options), console=console, clock=clock, sleep=clock.advance)
    return report, console.out.getvalue()  # type: ignore[attr-defined]


# --- content ids ------------------------------------------------------------------------------


def test_batches_go_without_a_key_and_every_row_gets_the_content_id_the_api_gives_on_every_route(tmp_path: Path) -> None:
    # Given the header and 250 real rows
    path = write(tmp_path / "a.csv", [HEADER, *ROWS[:250]])
    api = FakeApi()
    # When they are loaded
    report, _ = run(path, api)
    # Then each row's id is its content id, as the API gives it on /trips/batch and on /trips alone
    assert [ids_of(report)[line] for line in range(2, 252)] == [content_id(row) for row in ROWS[:250]]
    for row in ROWS[:20]:
        assert ids_of(report)[ROWS.index(row) + 2] == parse_single(row, None, max_line_bytes=MAX_LINE_BYTES).execution_name
    # and the loader computes the same ids itself, for every layout's rows and for a line that does not validate
    layouts = [value["row"] for value in SCHEMA_ROWS.values() if isinstance(value, dict) and "row" in value]
    layouts = [row for row in layouts if classify(1, row.encode(), len(row)).kind is Kind.ROW]  # the mapped ones
    # (and for the rows of issue 36's identity holes: cells validation blanks, payment_type 0 before 2025, a "+" distance)
    holes = [ROWS[0].replace(",1,7.93,1,N,", cells) for cells in (",10,7.93,1,N,", ",1,-1.50,7,y,", ",1,+7.93,1,N,")]
    holes += [ROWS[0].replace(",170,1,", ",170,0,"), ROWS[0].replace(",1,7.93,1,N,", ",1,7.93,1,7,").rsplit(",", 1)[0]]
    for row in [*ROWS, *layouts, DROPOFF_BEFORE_PICKUP, SPRING_FORWARD_GAP, ROWS[0].replace(",29.5,", ",29.50,"), *holes]:
        assert taxi_loader.content_id(row) == content_id(parse_batch(row, None, max_lines=1, max_line_bytes=4096).rows[0].tuple)
    # and the checkpoint holds the three batches' execution names, which the API gave, in the file's order
    assert report.exit_status == 0 and api.posts == 3
    records = [json.loads(line) for line in (tmp_path / "a.csv.onceflow-progress").read_text().splitlines()[1:]]
    in_file_order = [
        taxi_loader.batch_name([content_id(row) for row in ROWS[start:end]]) for start, end in ((0, 99), (99, 199), (199, 250))
    ]
    assert [record["execution"] for record in records] == in_file_order and set(in_file_order) == set(api.executions)


def test_the_same_rows_from_a_crlf_or_bom_copy_or_cut_another_way_store_nothing_twice(tmp_path: Path) -> None:
    # Given 300 rows loaded once
    api = FakeApi()
    first, _ = run(write(tmp_path / "a.csv", [HEADER, *ROWS[:300]]), api)
    stored = dict(api.rows)
    # When a CRLF copy with a byte-order mark, another copy in batches of 70, and a re-saved copy (7.50, 1.50) are loaded
    crlf = write(tmp_path / "b.csv", ["\ufeff" + HEADER, *ROWS[:300]], ending="\r\n")
    copy, _ = run(crlf, api)
    recut, _ = run(write(tmp_path / "c.csv", [HEADER, *ROWS[:300]]), api, batch_lines=70)
    resaved, _ = run(write(tmp_path / "d.csv", [HEADER, *(row.replace(",0.5,", ",0.50,") for row in ROWS[:300])]), api)
    # Then every copy's rows have the first load's ids, and the API holds no new row
    assert ids_of(copy) == ids_of(first) == ids_of(recut) == ids_of(resaved)
    assert api.rows == stored
    # and the CRLF copy's identical batches were answered as duplicates: no new execution
    assert (copy.accepted, copy.duplicates) == (0, 4)
    assert all(report.exit_status == 0 for report in (first, copy, recut, resaved))


def test_batch_boundaries_are_line_ranges_cut_before_the_body_with_its_header_outgrows_the_api_limit() -> None:
    # Given a header, 10 rows of 30,000 bytes each (padded with blanks, which the API takes) and a refused line
    header = Line(1, Kind.HEADER, text=HEADER, fields=18)
    rows = [
        Line(number, Kind.ROW, text="x" * 30_000, fields=18) if number != 6 else Line(6, Kind.REFUSED, problem="line 6 ...")
        for number in range(2, 13)
    ]
    # When they are cut into batches of at most 100 lines and 64 KiB
    batches = list(iter_batches([header, *rows], batch_lines=100))
    # Then each body starts with the header and stays within 64 KiB, and the ranges tile the lines in order
    assert all(batch.body().startswith(HEADER.encode() + b"\n") for batch in batches)
    assert all(len(batch.body()) <= taxi_loader.BATCH_MAX_BYTES for batch in batches)
    assert [(batch.first, batch.last) for batch in batches] == [(1, 3), (4, 6), (7, 8), (9, 10), (11, 12)]
    # and a batch of N lines counts every line, sent or not (the header too)
    assert [(batch.first, batch.last) for batch in iter_batches([header, *rows], batch_lines=3, batch_bytes=10**9)] == [
        (1, 3),
        (4, 6),
        (7, 9),
        (10, 12),
    ]
    # and without a header the body holds the rows alone
    assert Batch(1, 1, None, rows=[(1, "a")]).body() == b"a\n"


# --- the header decides the layout ------------------------------------------------------------


def test_a_line_whose_field_count_differs_from_the_headers_is_refused_and_not_sent(tmp_path: Path) -> None:
    # Given 2019 rows under their 18-column header, a 17-column 2017 row among them, and a last line cut at its
    # last comma (17 fields, no line ending): alone, either would pass for a 2017 trip
    path = write(tmp_path / "cut.csv", [HEADER, *ROWS[:50], SCHEMA_ROWS["yellow_2017"]["row"], *ROWS[50:99], TRUNCATED], last_ending=False)
    api = FakeApi()
    # When the file is loaded
    report, out = run(path, api)
    # Then both are refused by their line numbers, naming the header, and neither was sent
    refused = [line for line in out.splitlines() if line.startswith("REFUSED")]
    assert refused == [
        "REFUSED line 52 has 17 columns, but the header (line 1) has 18 (a truncated or shifted row)",
        "REFUSED line 102 has 17 columns, but the header (line 1) has 18 (a truncated or shifted row)",
    ]
    assert TRUNCATED not in api.rows.values() and not any(f"{TRUNCATED}\n".encode() in body for body in api.bodies)
    # and every body sent carries the header, so the API applies the same rule; the other rows are stored
    assert all(body.startswith(HEADER.encode() + b"\n") for body in api.bodies)
    assert report.states is not None and report.states.stored == 99
    # and the run says not everything was stored: exit 1, with the refused count
    assert report.exit_status == taxi_loader.NOT_STORED_EXIT_STATUS
    assert counts_line(out, "refused") == "    refused        2  (each listed above as REFUSED; not stored)"


def test_without_a_header_the_first_data_line_decides_and_a_later_header_decides_from_there(tmp_path: Path) -> None:
    # Given a headerless file: 2019 rows, a cut row, then a 2025 header and 2025-layout rows (files concatenated)
    row_2025 = SCHEMA_ROWS["yellow_2025"]["row"]
    lines = [*ROWS[:10], TRUNCATED, SCHEMA_ROWS["yellow_2025"]["header"], row_2025, row_2025.replace(",10,", ",11,"), ROWS[10]]
    api = FakeApi()
    # When it is loaded
    report, out = run(write(tmp_path / "headerless.csv", lines), api)
    # Then the cut row is refused by the first data line's count, and the 2019 row after the 2025 header by the header's
    assert [line for line in out.splitlines() if line.startswith("REFUSED")] == [
        "REFUSED line 11 has 17 columns, but the first data line (line 1) has 18 (a truncated or shifted row)",
        "REFUSED line 15 has 18 columns, but the header (line 12) has 20 (a truncated or shifted row)",
    ]
    # and the new header started a batch of its own, which carries it: the API took both batches (with batches in flight
    # at once they may arrive in either order, so each is told by its content)
    assert api.statuses == [202, 202]
    rows_2019, from_header = sorted(api.bodies, key=lambda body: body.startswith(b"VendorID"))
    assert rows_2019.count(b"\n") == 10 and not rows_2019.startswith(b"VendorID") and from_header.startswith(b"VendorID")
    assert report.states is not None and report.states.stored == 12 and report.exit_status == 1


def test_a_headerless_file_whose_first_line_is_truncated_refuses_that_line_and_loads_the_rest(tmp_path: Path) -> None:
    # Given a headerless file of 150 real 2019 rows whose first line was cut at its last comma (17 fields: alone, a 2017 row)
    lines = [TRUNCATED, *ROWS[:149]]
    api = FakeApi()
    # When it is loaded
    report, out = run(write(tmp_path / "cut-first.csv", lines), api)
    # Then only the cut line is refused, by the count most of the first 100 data lines have, and every other row is stored
    assert [line for line in out.splitlines() if line.startswith("REFUSED")] == [
        "REFUSED line 1 has 17 columns, but most of the first data lines (99 of 100) have 18 (a truncated or shifted row)",
    ]
    assert report.states is not None and report.states.stored == 149 and report.exit_status == 1
    assert sorted(ids_of(report).values()) == sorted(content_id(row) for row in ROWS[:149])


def test_a_headerless_file_of_2017_rows_keeps_their_layout_and_refuses_the_odd_row(tmp_path: Path) -> None:
    # Given a headerless file of real rows cut to the 2017 layout (17 columns), one 18-column row among them
    rows_2017 = [",".join(ROWS[index].split(",")[:17]) for index in range(20)]
    lines = [*rows_2017[:10], ROWS[30], *rows_2017[10:]]
    api = FakeApi()
    # When it is loaded
    report, out = run(write(tmp_path / "2017.csv", lines), api)
    # Then the 18-column row is refused against the first data line, which most lines agree with
    assert [line for line in out.splitlines() if line.startswith("REFUSED")] == [
        "REFUSED line 11 has 18 columns, but the first data line (line 1) has 17 (a truncated or shifted row)",
    ]
    assert report.states is not None and report.states.stored == 20


# --- reruns and the checkpoint ----------------------------------------------------------------


def crash_at(index: int) -> Callable[[int], None]:
    def hook(current: int) -> None:
        if current == index:
            raise SimulatedCrash(f"the loader died at POST {current}")

    return hook


def test_a_rerun_after_a_crash_sends_only_the_missing_batches_and_reads_every_row_back(tmp_path: Path) -> None:
    # Given 1,000 real rows, and a loader that dies as it sends its fourth batch (nothing of it reached the API)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:1000]])
    api = FakeApi()
    api.before_start = crash_at(3)
    with pytest.raises(SimulatedCrash):
        run(path, api, in_flight=1)  # the serial loader (several in flight: test_taxi_loader_concurrency.py)
    # Then the checkpoint holds the three batches the API acknowledged
    assert len((tmp_path / "trips.csv.onceflow-progress").read_text().splitlines()) == 1 + 3
    # When it runs again
    api.before_start = None
    report, out = run(path, api)
    # Then it sends the fourth batch on, and only those; the first three are read back by the ids the loader computes
    assert api.posts == 4 + 8
    assert (report.skipped, report.accepted, report.duplicates) == (3, 8, 0)
    assert len(api.executions) == 11 and len(api.rows) == 1000
    assert report.states is not None and report.states.stored == 1000 and report.states.flagged_total == 0
    assert report.exit_status == 0 and "3 acknowledged by an earlier run" in out
    # When it runs a third time: nothing is sent, and the summary reads every row back
    report, _ = run(path, api)
    assert api.posts == 12 and report.skipped == 11
    assert report.states is not None and report.states.stored == 1000


def test_a_batch_sent_but_not_acknowledged_is_sent_again_and_answered_as_duplicate(tmp_path: Path) -> None:
    # Given a loader that dies after its second batch started but before the answer came back (a lost answer)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:400]])
    api = FakeApi()
    api.after_start = crash_at(1)
    with pytest.raises(SimulatedCrash):
        run(path, api, in_flight=1)  # the serial loader
    assert len(api.executions) == 2
    # When it runs again
    api.after_start = None
    report, _ = run(path, api, in_flight=1)
    # Then the second batch goes again, the same bytes, and the API answers it as a duplicate (its name is its ids')
    assert api.bodies[2] == api.bodies[1]
    assert api.statuses == [202, 200, 202, 202, 202]  # the first run's answer to its second batch was lost
    assert (report.skipped, report.duplicates, report.accepted) == (1, 1, 3)
    # and no row is counted or stored twice: one execution per batch, 400 rows, each read back once
    assert len(api.executions) == 5 and len(api.rows) == 400
    assert report.states is not None and report.states.read == 400 and report.states.stored == 400
    assert sum(api.reads.values()) == 400


def test_a_changed_file_or_other_batches_or_no_checkpoint_load_only_new_rows(tmp_path: Path) -> None:
    # Given a file loaded in batches of 50
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:120]])
    api = FakeApi()
    assert taxi_loader.main([str(path), "--url", api.url, "--batch-lines", "50", "--no-read-back"], api=api) == 0
    # When it is run again in batches of 100, after a row was appended, and then with its checkpoint deleted
    write(path, [HEADER, *ROWS[:121]])
    assert taxi_loader.main([str(path), "--url", api.url, "--batch-lines", "100", "--no-read-back"], api=api) == 0
    (tmp_path / "trips.csv.onceflow-progress").unlink()
    report, _ = run(path, api)
    # Then no run stopped, and the API holds each of the 121 rows once
    assert len(api.rows) == 121 and set(api.rows) == {content_id(row) for row in ROWS[:121]}
    assert report.exit_status == 0 and report.states is not None and report.states.stored == 121


def test_a_checkpoint_of_the_older_keyed_loader_stops_the_run_before_anything_is_sent(tmp_path: Path, capsys: Any) -> None:
    # Given a file with the checkpoint the loader of keyed batches wrote (format 1: the file's hash and line ranges)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:10]])
    old = {"format": 1, "loader": "onceflow-taxi-load", "sha256": "ab" * 32, "batch_lines": 100, "batch_bytes": 65536}
    (tmp_path / "trips.csv.onceflow-progress").write_text(json.dumps({**old, "acknowledged": {"https://api.test": [[1, 11]]}}) + "\n")
    api = FakeApi()
    # When the loader runs
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(path), "--url", api.url], api=api)
    # Then it stops with a usage error that says why and what to do, and sent nothing
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and api.posts == 0
    assert "written by an older onceflow-taxi-load" in err and "stored a second time" in err and "Upgrade notes" in err


def test_a_checkpoint_that_is_not_one_stops_the_run_and_a_record_cut_short_is_ignored(tmp_path: Path) -> None:
    # Given a file where the checkpoint should be
    path = tmp_path / "x.onceflow-progress"
    path.write_text("{not json")
    # Then opening it says what to do
    with pytest.raises(taxi_loader.UsageError, match="move it away"):
        Checkpoint.open(path)
    # Given a checkpoint whose last record a crash cut short
    path.write_text('{"format": 2}\n{"url": "u", "execution": "cb-1", "rows": 3}\n{"url": "u", "exec')
    # When it is opened and a batch is recorded
    checkpoint = Checkpoint.open(path)
    checkpoint.acknowledge("u", "cb-2", 5)
    checkpoint.close()
    # Then the whole records count, the cut one does not, and the new one is on a line of its own
    assert Checkpoint.open(path).acknowledged == {"u": {"cb-1", "cb-2"}}


def test_a_checkpoint_that_cannot_be_written_stops_the_run_before_anything_is_sent(tmp_path: Path, capsys: Any) -> None:
    # Given a checkpoint path in a folder that does not exist
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:10]])
    api = FakeApi()
    # When the loader runs
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(path), "--url", api.url, "--checkpoint", str(tmp_path / "no" / "such" / "place")], api=api)
    # Then it stops with exit 2, naming the option, and sent nothing
    assert stopped.value.code == 2 and "pass --checkpoint PATH" in capsys.readouterr().err
    assert api.posts == 0


def test_an_interrupt_keeps_the_checkpoint_and_a_rerun_goes_on(tmp_path: Path, capsys: Any) -> None:
    # Given a load interrupted (Ctrl-C) as it sends its third batch
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:400]])
    api = FakeApi()

    def interrupt(index: int) -> None:
        if index == 2:
            raise KeyboardInterrupt

    api.before_start = interrupt
    # Then the loader says how to go on and exits 130, with the first two batches in the checkpoint (the serial loader)
    assert taxi_loader.main([str(path), "--url", api.url, "--in-flight", "1"], api=api) == taxi_loader.INTERRUPTED_EXIT_STATUS
    assert "interrupted; run it again" in capsys.readouterr().err
    assert len((tmp_path / "trips.csv.onceflow-progress").read_text().splitlines()) == 1 + 2
    # When it runs again: the rest goes, and every row is stored once
    api.before_start = None
    assert taxi_loader.main([str(path), "--url", api.url], api=api) == 0
    assert len(api.executions) == 5 and len(api.rows) == 400


# --- malformed lines --------------------------------------------------------------------------


def test_malformed_lines_are_refused_per_line_in_the_apis_words_and_their_batches_go_on(tmp_path: Path) -> None:
    # Given 250 real rows with malformed lines inside the first and the third batch, and non-UTF-8 bytes
    lines = [HEADER, *ROWS[:40], MALFORMED["five columns"], MALFORMED["binary junk"], *ROWS[40:120], MALFORMED["2009 header"]]
    lines += [
        *ROWS[120:200],
        MALFORMED["2009 row"],
        MALFORMED["unclosed quote"],
        MALFORMED["too long"],
        "\udcff\udcfe not utf-8",
        *ROWS[200:250],
    ]
    path = write(tmp_path / "mixed.csv", lines)
    api = FakeApi()
    # When the file is loaded
    report, out = run(path, api)
    # Then each malformed line is reported once, by its line number in the file, in the API's words
    refused = [line for line in out.splitlines() if line.startswith("REFUSED")]
    assert refused == [
        "REFUSED line 42 has 5 columns; a yellow-taxi trip has 17 to 20",
        "REFUSED line 43 contains control characters; send CSV text, not binary data",
        "REFUSED line 124: the CSV header names the yellow 2009-2014 (18 columns, coordinates, no zone ids) layout; "
        "the yellow 2009-2014 (18 columns, coordinates, no zone ids) layout is not taken here; "
        "send yellow-trip records of 2017 or later, which carry zone ids",
        "REFUSED line 205 has the yellow 2009-2014 (18 columns, coordinates, no zone ids) layout; "
        "the yellow 2009-2014 (18 columns, coordinates, no zone ids) layout is not taken here; "
        "send yellow-trip records of 2017 or later, which carry zone ids",
        "REFUSED line 206 is not one well-formed CSV record (not a well-formed CSV line: unexpected end of data)",
        f"REFUSED line 207 is {len(MALFORMED['too long'])} bytes; the limit is {MAX_LINE_BYTES}",
        "REFUSED line 208 is not UTF-8 text; send CSV lines",
    ]
    # and every real row was sent and stored, the batches around the bad lines included: the run went on
    assert report.refused == 7 and report.rows == 250
    assert report.states is not None and report.states.stored == 250
    assert set(api.rows.values()) == set(ROWS[:250])
    # and the run is not all stored: exit 1, and the summary counts the refused lines among the data lines
    assert report.failed == [] and report.exit_status == taxi_loader.NOT_STORED_EXIT_STATUS
    assert "  data lines     257" in out.splitlines()


@pytest.mark.parametrize(
    "line",
    [
        *MALFORMED.values(),
        *ROWS[:3],
        HEADER,
        *(value for layout in SCHEMA_ROWS.values() if isinstance(layout, dict) for value in layout.values()),
        "",
        "   ",
        ROWS[0] + ",",
        DROPOFF_BEFORE_PICKUP,
        "a,b\rc",
    ],
)
def test_the_loader_refuses_exactly_the_lines_the_api_refuses_in_the_same_words(line: str) -> None:
    # Given one line, as the loader classifies it and as the API parses a batch holding it alone
    classified = classify(7, line.encode("utf-8"), len(line.encode("utf-8")))
    try:
        text = decode_body(line or "\n", is_base64=False, max_bytes=taxi_loader.BATCH_MAX_BYTES)
        submission = parse_batch(text, None, max_lines=100, max_line_bytes=MAX_LINE_BYTES)
    except Refusal as refusal:
        api_says: str | None = str(refusal)
    else:
        api_says = None
    # Then the loader sends it exactly when the API takes it, skips what the API skips, and refuses with the API's reason
    if api_says is None:
        assert classified.kind is Kind.ROW and classified.text == line and len(submission.rows) == 1
    elif classified.kind in (Kind.SKIPPED, Kind.HEADER):  # a blank line or a header of a mapped layout: alone, it leaves the API nothing
        assert api_says == "the batch has no CSV line"
    else:
        assert classified.kind is Kind.REFUSED
        problem = classified.problem.replace("line 7", "line 1").removeprefix("line 1: ")
        body_level = problem.replace("line 1", "the request body")  # the API judges binary data for the whole body
        assert problem in api_says or body_level == api_says


@pytest.mark.parametrize("first", [HEADER, ROWS[0]], ids=["header", "data-line"])
def test_a_file_that_starts_with_a_byte_order_mark_loads_and_no_body_sent_has_one(tmp_path: Path, first: str) -> None:
    # Given a file saved as "CSV UTF-8" by a spreadsheet (a BOM in front of its first line, a header or a trip),
    # and a BOM left in front of line 101, where a second such file was appended: the first line of the second batch
    rows = ROWS[:150]
    lines = ["\ufeff" + first, *(row for row in rows if row != first)]
    lines[100] = "\ufeff" + lines[100]
    path = write(tmp_path / "spreadsheet.csv", lines)
    api = FakeApi()
    # When it is loaded (the API refuses a body that starts with a BOM)
    report, _ = run(path, api)
    # Then every batch was accepted, and no body sent starts with a BOM or holds one
    assert api.statuses == [202, 202] and report.failed == [] and report.exit_status == 0
    assert len(api.bodies) == 2 and not any("\ufeff".encode() in body for body in api.bodies)
    # and every trip is stored as the file has it, without the mark
    assert set(api.rows.values()) == set(rows) and report.refused == 0


def test_the_loader_takes_the_apis_own_byte_order_mark() -> None:
    # Given the bytes the API refuses in front of a body
    from runtime.shared import http

    # Then the loader drops the same bytes from a line
    assert taxi_loader.UTF8_BOM == http.UTF8_BOM


def test_the_loader_takes_the_apis_own_binary_rule() -> None:
    # Given the API's pattern for binary data
    from runtime.taxi_etl import requests

    # Then the loader's is the same: a line the API would refuse as binary is never sent
    assert taxi_loader.BINARY.pattern == requests.BINARY.pattern


# --- 413: split and sent again ----------------------------------------------------------------


class StateBudgetApi(FakeApi):
    """A 413 for a batch of more than `most_rows` rows, as the API answers one whose states could pass Step
    Functions' payload limit; and for any batch holding the line `too_wide`."""

    def __init__(self, most_rows: int, too_wide: str = "") -> None:
        super().__init__()
        self.most_rows = most_rows
        self.too_wide = too_wide

    def post_batch(self, body: bytes) -> Answer:
        rows = [line for line in body.decode().splitlines() if line and not line.lower().startswith("vendorid")]
        if len(rows) > self.most_rows or (self.too_wide and self.too_wide in rows):
            self.bodies.append(body)
            message = f"these {len(rows)} rows could take up to 300000 bytes in one state of the saga; Step Functions takes at most 262144"
            return self._answer(413, {"error": message})
        return super().post_batch(body)


def test_a_batch_answered_413_is_split_and_its_halves_sent_and_a_rerun_skips_it(tmp_path: Path) -> None:
    # Given 200 rows in batches of 200 lines, and an API that takes at most 60 rows a batch (the state budget)
    path = write(tmp_path / "wide.csv", [HEADER, *ROWS[:199]])
    api = StateBudgetApi(most_rows=60)
    # When the file is loaded
    report, out = run(path, api, batch_lines=200)
    # Then the 199 rows were halved until each part fit: 99 -> 49 + 50, 100 -> 50 + 50, each part with the header
    assert api.statuses == [413, 413, 202, 202, 413, 202, 202]
    assert all(body.startswith(HEADER.encode()) for body in api.bodies)
    assert report.split == 3 and "SPLIT lines 2-200: HTTP 413 (these 199 rows" in out
    # and every row is stored, with its content id: exit 0
    assert report.states is not None and report.states.stored == 199 and report.exit_status == 0
    assert set(api.rows) == {content_id(row) for row in ROWS[:199]}
    # When it runs again: the whole batch is in the checkpoint, so nothing is sent, not even the 413
    again, _ = run(path, api, batch_lines=200)
    assert api.posts == 7 and again.skipped == 1 and again.states is not None and again.states.stored == 199


def test_a_single_row_answered_413_is_refused_by_its_line_and_the_rest_is_stored(tmp_path: Path) -> None:
    # Given 20 rows, one of which the API refuses even alone
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:20]])
    api = StateBudgetApi(most_rows=100, too_wide=ROWS[7])
    # When the file is loaded
    report, out = run(path, api)
    # Then the batch was halved down to that row, which is reported refused by its file line, in the API's words
    assert [line for line in out.splitlines() if line.startswith("REFUSED")] == [
        "REFUSED line 9 refused by the API (HTTP 413): these 1 rows could take up to 300000 bytes in one state of the saga; "
        "Step Functions takes at most 262144"
    ]
    # and the 19 others are stored; the run exits 1, one refused
    assert report.states is not None and report.states.stored == 19 and report.rows_refused == 1
    assert report.exit_status == taxi_loader.NOT_STORED_EXIT_STATUS
    assert counts_line(out, "refused").startswith("    refused        1")


def test_a_batch_the_api_refuses_is_reported_by_the_files_lines_and_the_run_goes_on(tmp_path: Path) -> None:
    # Given an API that refuses the first batch naming its lines 2 and 3 (rules the loader does not know)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:150]])
    message = "2 of 99 lines cannot be trips, nothing was accepted: line 2 is odd; line 3 is odd"

    class RefusingFirst(FakeApi):
        def post_batch(self, body: bytes) -> Answer:
            if ROWS[0].encode() not in body:
                return super().post_batch(body)
            self.bodies.append(body)
            return self._answer(400, {"error": message})

    api = RefusingFirst()
    # When the file is loaded
    report, out = run(path, api)
    # Then the refusal names the file's lines 3 and 4, the next batch went, and its rows are stored
    refusal = "REFUSED lines 2-100 refused by the API (HTTP 400): 2 of 99 lines cannot be trips, nothing was accepted: "
    assert refusal + "line 3 is odd; line 4 is odd" in out.splitlines()
    assert report.rows_refused == 99 and report.states is not None and report.states.stored == 51
    assert report.exit_status == taxi_loader.NOT_STORED_EXIT_STATUS


def test_the_apis_line_numbers_are_turned_into_the_files() -> None:
    # Given a batch whose rows are file lines 12, 14 and 15, and an API message about its lines 2 and 3
    rows = [(12, "a"), (14, "b"), (15, "c")]
    message = "2 of 3 lines cannot be trips, nothing was accepted: line 2 has 5 columns; line 3 is not one well-formed CSV record"
    # Then the message names lines 14 and 15
    assert taxi_loader._file_lines(message, rows) == (
        "2 of 3 lines cannot be trips, nothing was accepted: line 14 has 5 columns; line 15 is not one well-formed CSV record"
    )


# --- streaming --------------------------------------------------------------------------------


class GeneratedFile(io.RawIOBase):
    """A file whose bytes a generator makes as they are read: nothing is there before it is asked for."""

    def __init__(self, lines: Iterator[bytes]) -> None:
        self._lines = lines
        self._pending = b""
        self.produced = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._lines)
            except StopIteration:
                return 0
            self.produced += 1
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def endless_rows(count: int) -> Iterator[bytes]:
    yield (HEADER + "\n").encode()
    for index in range(count):
        yield (ROWS[index % len(ROWS)] + "\n").encode()


def test_the_file_is_streamed_batch_by_batch(tmp_path: Path) -> None:
    # Given a file of 10 million rows (about 1.1 GB) that exists only as it is read
    raw = GeneratedFile(endless_rows(10_000_000))
    batches = iter_batches(read_lines(io.BufferedReader(raw)), batch_lines=100)
    # When the first two batches are taken
    first, second = next(batches), next(batches)
    # Then they hold lines 1-100 and 101-200, and only a read buffer's worth more was made
    assert (first.first, first.last, second.first, second.last) == (1, 100, 101, 200)
    assert 200 <= raw.produced < 300


# Unmeasured: it replays paths that lighter tests measure, at more CPU than it adds to coverage (docs/development.md)
@pytest.mark.no_cover
@pytest.mark.parametrize("in_flight", [1, taxi_loader.DEFAULT_IN_FLIGHT])
def test_a_load_reads_the_file_twice_as_a_stream_and_sends_as_it_reads(tmp_path: Path, in_flight: int) -> None:
    # Given a 5,000-row file that the loader opens through a generator each time (once to hash, once to send)
    opened: list[GeneratedFile] = []

    def opener() -> io.BufferedReader:
        opened.append(GeneratedFile(endless_rows(5_000)))
        return io.BufferedReader(opened[-1])

    api = FakeApi()
    made_at_first_post: list[int] = []
    api.before_start = lambda index: made_at_first_post.append(opened[-1].produced) if index == 0 else None
    # When it is loaded
    console = quiet()
    report = load_file(tmp_path / "generated.csv", api, LoadOptions(read_back=False, in_flight=in_flight), console=console, opener=opener)
    # Then the first batch was sent when only about a batch of the second pass had been made (one at a time), or at most
    # the 2N batches the concurrent loader reads ahead of its commits
    assert len(opened) == 2 and made_at_first_post[0] < (2 * in_flight - 1) * 100 + 300
    # and the whole file went, in 51 batches (the sample's 2,000 rows repeat, and a batch of the same rows as one
    # acknowledged before is not sent again), its hash checked on the way
    assert (
        api.posts + report.skipped == 51 and report.skipped > 0 and report.rows == 5_000 and not report.changed and report.exit_status == 0
    )


def test_a_line_too_long_to_be_a_trip_is_counted_through_not_held(tmp_path: Path) -> None:
    # Given 5 MB of binary data without a line break between two real rows
    raw = GeneratedFile(iter([(ROWS[0] + "\n").encode(), *(b"\x00\xff" * 50_000 for _ in range(50)), b"\n", (ROWS[1] + "\n").encode()]))
    # When its lines are read
    lines = list(read_lines(io.BufferedReader(raw)))
    # Then the long one is refused by its size, and the rows around it are rows
    assert [line.kind for line in lines] == [Kind.ROW, Kind.REFUSED, Kind.ROW]
    assert lines[1].problem == f"line 2 is 5000000 bytes; the limit is {MAX_LINE_BYTES}"


def test_a_file_changed_while_it_is_loaded_is_noted_and_its_rows_are_judged_as_sent(tmp_path: Path) -> None:
    # Given a file whose second read differs from its first (someone rewrote it in between)
    contents = [[HEADER, *ROWS[:150]], [HEADER, *ROWS[1:151]]]

    def opener() -> io.BytesIO:
        return io.BytesIO("".join(f"{line}\n" for line in contents.pop(0)).encode())

    console = quiet()
    report = load_file(tmp_path / "moving.csv", FakeApi(), LoadOptions(read_back=False), console=console, opener=opener)
    # Then the run says so; the ids are content ids, so what was sent is what is reported, and all of it was taken
    assert report.changed and report.exit_status == 0
    assert "NOTE: the file changed while it was loaded" in console.out.getvalue()  # type: ignore[attr-defined]


# --- the summary and the exit status ----------------------------------------------------------


# Unmeasured: it replays paths that lighter tests measure, at more CPU than it adds to coverage (docs/development.md)
@pytest.mark.no_cover
def test_the_summary_groups_flagged_rows_by_phase_reason_and_detail(tmp_path: Path) -> None:
    # Given real rows (the sample's 2,000, with its four findings), 3 rows that fail validation, 2 transformation, and 1 whose store fails
    dropoffs = [DROPOFF_BEFORE_PICKUP.replace("16:30:00", f"16:3{n}:00") for n in range(3)]
    gaps = [SPRING_FORWARD_GAP, SPRING_FORWARD_GAP.replace(",1,N,", ",2,N,")]
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS, *dropoffs, *gaps])
    api = FakeApi()
    api.failing_store = {content_id(ROWS[6])}
    # When the file is loaded
    report, out = run(path, api)
    # Then the rows are counted by what became of them, flagged ones by phase, reason and detail
    states = report.states
    assert states is not None
    assert states.stored == 1999
    assert states.findings == {"total_amount_mismatch": 3, "dropoff_equals_pickup": 1}
    assert states.flagged == {
        ("validation", 1, "dropoff_before_pickup"): 3,
        ("transformation", 2, "nonexistent_local_time"): 2,
        ("store", 3, "error:ClientError"): 1,
    }
    summary = out.splitlines()
    assert "    stored      1999  (with findings: dropoff_equals_pickup 1, total_amount_mismatch 3)" in summary
    assert "    flagged        6" in summary
    assert summary.index("      validation (reason 1) dropoff_before_pickup: 3") < summary.index(
        "      transformation (reason 2) nonexistent_local_time: 2"
    )
    assert "      store (reason 3) error:ClientError: 1" in summary
    # and each flagged row is listed with its line, id and the API's message
    assert any(line.startswith("FLAGGED line 2002 c-") and "validation (reason 1) dropoff_before_pickup: " in line for line in summary)
    assert any(line.startswith(f"FLAGGED line 8 {content_id(ROWS[6])}: store (reason 3) error:ClientError") for line in summary)
    # and the run exits 1: every row's fate is known, but not every row is stored
    assert report.exit_status == taxi_loader.NOT_STORED_EXIT_STATUS
    assert summary[-1] == "NOT ALL STORED (exit 1): flagged or refused lines above; fix them and load them from a new file"


class UnreadableApi(FakeApi):
    """Takes batches; every GET gets no answer (the client's retries spent)."""

    def get_row(self, store_request_id: str) -> Answer:
        self.reads[store_request_id] += 1
        raise ApiUnavailable(f"GET /trips/{store_request_id}: no answer after 3 attempts (TimeoutError: timed out)")


class PendingApi(FakeApi):
    """Takes batches; every row reads pending (its execution never ends)."""

    def get_row(self, store_request_id: str) -> Answer:
        self.reads[store_request_id] += 1
        return Answer(200, {"StoreRequestId": store_request_id, "state": "pending", "phase": "validation", "generation": 1})


@pytest.mark.parametrize(
    ("case", "status", "counts"),
    [
        ("all stored", 0, {"stored": 30, "flagged": 0, "refused": 0, "not sent": 0, "unread": 0, "pending": 0}),
        ("some flagged", 1, {"stored": 29, "flagged": 2, "refused": 0, "not sent": 0, "unread": 0, "pending": 0}),
        ("some refused", 1, {"stored": 30, "flagged": 0, "refused": 2, "not sent": 0, "unread": 0, "pending": 0}),
        ("unread", 3, {"stored": 0, "flagged": 0, "refused": 0, "not sent": 0, "unread": 30, "pending": 0}),
        ("pending", 3, {"stored": 0, "flagged": 0, "refused": 0, "not sent": 0, "unread": 0, "pending": 30}),
        ("pending and refused", 3, {"stored": 0, "flagged": 0, "refused": 1, "not sent": 0, "unread": 0, "pending": 30}),
        ("not sent", 3, {"stored": 0, "flagged": 0, "refused": 0, "not sent": 30, "unread": 0, "pending": 0}),
    ],
)
def test_the_exit_status_and_the_summary_name_every_outcome(tmp_path: Path, case: str, status: int, counts: dict[str, int]) -> None:
    # Given 30 real rows and, per case, flagged rows, refused lines (one cut under the header), or an API whose GETs fail,
    # whose rows stay pending, or which refuses the key
    lines = [HEADER, *ROWS[1000:1030]]
    api: FakeApi = FakeApi()
    if case == "some flagged":
        lines = [HEADER, *ROWS[1000:1029], DROPOFF_BEFORE_PICKUP, SPRING_FORWARD_GAP]
    elif case == "some refused":
        lines = [*lines, MALFORMED["five columns"], TRUNCATED]
    elif case == "unread":
        api = UnreadableApi()
    elif case.startswith("pending"):
        api = PendingApi()
        lines = [*lines, TRUNCATED] if case == "pending and refused" else lines
    elif case == "not sent":
        api.post_batch = lambda body: Answer(403, {"message": "Forbidden"})  # type: ignore[method-assign]
    clock = FakeClock()
    # When the file is loaded, waiting up to 20 s for the rows to settle
    report, out = run_timed(write(tmp_path / "trips.csv", lines), api, clock, wait_seconds=20)
    # Then the exit status is the case's, and the summary names each count, every data line in exactly one
    assert report.exit_status == status
    for name, count in counts.items():
        assert counts_line(out, name).startswith(f"    {name:<8}{count:>8}"), (name, counts_line(out, name))
    assert sum(counts.values()) == report.data_lines == len(lines) - 1
    assert out.splitlines()[-1].startswith({0: "ALL STORED", 1: "NOT ALL STORED", 3: "INCOMPLETE"}[status] + f" (exit {status})")
    if case == "unread":  # every read failed: read in passes until the deadline, then RETRIES_AFTER_DEADLINE more
        assert len(api.reads) == 30 and sum(api.reads.values()) > 30
        assert "    unread        30  (the first: line " in out
    if case == "pending":  # and the last read of each row, after the deadline, said pending
        assert clock.now >= 1000.0 + 20
        assert "    pending       30  after 20 s; run the loader again later to read them (it stores nothing twice)" in out.splitlines()


def test_the_exit_status_is_0_when_every_data_line_was_stored_and_documented_in_the_help(capsys: Any) -> None:
    # Given the codes
    # Then each has its constant, and --help says what each means
    assert (taxi_loader.ALL_STORED_EXIT_STATUS, taxi_loader.NOT_STORED_EXIT_STATUS, taxi_loader.INCOMPLETE_EXIT_STATUS) == (0, 1, 3)
    with pytest.raises(SystemExit):
        taxi_loader.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("0 every data line was read back stored", "1 every line's fate is known", "3 incomplete", "2 usage", "130 interrupted"):
        assert words in text


# --- reading back -----------------------------------------------------------------------------


def test_pending_rows_are_read_again_until_they_settle_within_the_wait(tmp_path: Path) -> None:
    # Given an API whose rows are unseen (404), then pending, for a while after they are accepted
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:30]])
    api = FakeApi(unsettled_reads=3)
    # When the file is loaded
    report, _ = run_timed(path, api, FakeClock(), wait_seconds=60)
    # Then every row was read until it settled: 3 unsettled reads and the last, and none is left pending
    assert report.states is not None and report.states.stored == 30 and report.states.pending == []
    assert set(api.reads.values()) == {4}
    # When a rerun may not wait: each row is read once, the rows still unsettled are pending, and the run is incomplete
    again = FakeApi(unsettled_reads=10)
    report, _ = run(write(tmp_path / "other.csv", [HEADER, *ROWS[30:40]]), again, wait_seconds=0)
    assert report.states is not None and len(report.states.pending) == 10 and report.exit_status == 3
    assert set(again.reads.values()) == {1}


class SlowApi(FakeApi):
    """Each GET takes `seconds` of the fake clock; every row's execution ends at `ends_at`: pending before."""

    def __init__(self, clock: FakeClock, seconds: float, ends_at: float) -> None:
        super().__init__()
        self.clock = clock
        self.seconds = seconds
        self.ends_at = ends_at
        self.answers: list[tuple[float, str]] = []

    def get_row(self, store_request_id: str) -> Answer:
        self.clock.advance(self.seconds)
        if self.clock() < self.ends_at:
            self.answers.append((self.clock(), "pending"))
            return Answer(200, {"StoreRequestId": store_request_id, "state": "pending", "phase": "store", "generation": 1})
        self.answers.append((self.clock(), "stored"))
        return super().get_row(store_request_id)


def test_a_read_back_longer_than_the_wait_reads_the_unsettled_rows_once_more_after_the_deadline(tmp_path: Path) -> None:
    # Given 40 rows whose executions end 20 s after the load, and a busy API that takes 1 s per GET, read one at a time:
    # the first pass alone takes 40 s, longer than --wait 30
    clock = FakeClock()
    api = SlowApi(clock, seconds=1.0, ends_at=clock() + 20)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[1100:1140]])
    # When the file is loaded with --wait 30
    report, _ = run_timed(path, api, clock, wait_seconds=30, readers=1)
    # Then the rows read pending in the first pass (before their executions ended) were read again after the deadline,
    # and since that read said stored, none is reported pending: every row is stored, exit 0
    assert sum(1 for _, said in api.answers if said == "pending") == 19
    assert report.states is not None and report.states.pending == [] and report.states.stored == 40
    assert report.exit_status == 0


def test_failed_reads_are_read_again_with_fewer_readers_and_only_the_last_failure_makes_a_row_unread(tmp_path: Path) -> None:
    # Given an overloaded API: one GET in three fails (the client's retries spent)
    class Busy(FakeApi):
        def __init__(self) -> None:
            super().__init__()
            self.active = 0
            self.most_active = 0
            self.gets = 0
            self.failed: Counter[str] = Counter()
            self.lock = threading.Lock()

        def get_row(self, store_request_id: str) -> Answer:
            with self.lock:
                self.active += 1
                self.most_active = max(self.most_active, self.active)
                self.gets += 1
                failing = self.gets % 3 == 0
                self.failed[store_request_id] += failing
            try:
                if failing:
                    raise ApiUnavailable("GET: no answer after 3 attempts (TimeoutError: timed out)")
                return super().get_row(store_request_id)
            finally:
                with self.lock:
                    self.active -= 1

    api = Busy()
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[1200:1260]])
    # When the file is loaded with --wait 0 (every read after the deadline)
    report, _ = run_timed(path, api, FakeClock(), wait_seconds=0)
    # Then the failed reads were read again after the deadline and every row is stored; none is unread
    assert sum(1 for count in api.failed.values() if count) >= 15
    assert report.states is not None and report.states.unreadable == [] and report.states.stored == 60
    assert report.exit_status == 0
    # and no more than the pool's 16 ran at once
    assert api.most_active <= taxi_loader.READERS


def test_the_readers_halve_on_a_failure_and_grow_back_one_at_a_time() -> None:
    # Given the read-back's pool of 16
    pool = taxi_loader._Readers(lambda item: Answer(200, {}), 16)
    try:
        # When three reads fail in a row: 16 -> 8 -> 4 -> 2
        for _ in range(3):
            pool._adjust(failed=True)
        assert pool.limit == 2
        # When reads succeed: one more reader after as many successes as there are readers
        for _ in range(2 + 3):
            pool._adjust(failed=False)
        assert pool.limit == 4
        # and it never passes 16
        for _ in range(1000):
            pool._adjust(failed=False)
        assert pool.limit == 16
    finally:
        pool.close()


def test_after_eight_failed_reads_in_a_row_the_rest_of_the_pass_is_not_tried(tmp_path: Path) -> None:
    # Given an API whose GETs all fail, and 200 rows
    api = UnreadableApi()
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[1300:1500]])
    # When the file is loaded with --wait 0
    report, _ = run_timed(path, api, FakeClock(), wait_seconds=0, readers=1)
    # Then each pass stopped asking after 8 failures: the first and RETRIES_AFTER_DEADLINE more, not 200 GETs each
    assert sum(api.reads.values()) == 8 * (1 + taxi_loader.RETRIES_AFTER_DEADLINE)
    assert report.states is not None and len(report.states.unreadable) == 200 and report.exit_status == 3


def test_the_rows_a_pause_leaves_out_are_the_pass_s_last_whichever_reader_took_them() -> None:
    # Given the read-back's 16 readers and a read that always fails at once (on Python 3.13 one reader could then do the
    # pass's reads while the other 15 held rows they had taken off the queue, and those rows were left out every pass)
    tried: list[int] = []
    lock = threading.Lock()

    def fail(item: str) -> str:
        with lock:
            tried.append(int(item))
        return "GET: no answer after 3 attempts"

    pool = taxi_loader._Readers(fail, taxi_loader.READERS)
    try:
        items = [str(n) for n in range(30)]
        ever_read: set[int] = set()
        for _ in range(4):
            # When a pass reads the 30 rows, those left out last time first, as read_back orders them
            pool.resume()
            tried.clear()
            answers = pool.map(items)
            # Then the rows read are the pass's first ones, at least 8, and every later one was left out
            read = [answer == "GET: no answer after 3 attempts" for answer in answers]
            count = read.index(False)
            assert count >= taxi_loader.FAILED_READS_TO_PAUSE and not any(read[count:]), read
            assert sorted(tried) == sorted(int(item) for item in items[:count])
            ever_read.update(tried)
            items = items[count:] + items[:count]
        # and after four passes of at least 8, each of the 30 rows was read
        assert ever_read == set(range(30))
    finally:
        pool.close()


# --- the HTTP client --------------------------------------------------------------------------


class Response:
    def __init__(self, status: int, document: Any) -> None:
        self.status = status
        self._body = json.dumps(document).encode()

    def read(self) -> bytes:
        return self._body

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def test_the_http_client_retries_the_same_bytes_without_a_key_and_reads_with_a_short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an API that answers 503, then drops the connection, then accepts
    import urllib.error
    import urllib.request

    seen: list[tuple[str, str, bytes | None, dict[str, str], float]] = []
    answers: list[Any] = [
        urllib.error.HTTPError("https://api.test/trips/batch", 503, "busy", {}, io.BytesIO(b'{"message": "Service Unavailable"}')),  # type: ignore[arg-type]
        ConnectionResetError("reset"),
        Response(202, {"StoreRequestIds": ["c-" + "0" * 32], "duplicate": False}),
    ]

    def urlopen(request: urllib.request.Request, timeout: float) -> Any:
        seen.append((request.get_method(), request.full_url, request.data, dict(request.header_items()), timeout))  # type: ignore[arg-type]
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    pauses: list[float] = []
    api = HttpTaxiApi("https://api.test/", "s3cret", sleep=pauses.append)
    # When a batch is posted
    answer = api.post_batch(b"row\n")
    # Then it was sent three times, the same bytes each time, with no Idempotency-Key, the key in Authorization, and accepted
    # (the answer says two answers before it were retried: the loader sends fewer batches at once after one)
    assert answer == Answer(202, {"StoreRequestIds": ["c-" + "0" * 32], "duplicate": False}, pushed_back=2)
    assert [(method, url, body) for method, url, body, _, _ in seen] == [
        ("POST", "https://api.test" + contract.ROUTE_TRIP_BATCH, b"row\n")
    ] * 3
    assert not any("Idempotency-key" in headers for _, _, _, headers, _ in seen)
    assert {headers["Authorization"] for _, _, _, headers, _ in seen} == {"s3cret"}
    assert {timeout for *_, timeout in seen} == {taxi_loader.POST_TIMEOUT_SECONDS} and len(pauses) == 2
    # When the API refuses a request (4xx): the answer is returned at once, not retried
    answers[:] = [urllib.error.HTTPError("u", 400, "bad", {}, io.BytesIO(b'{"error": "line 1 has 5 columns"}'))]  # type: ignore[arg-type]
    assert api.post_batch(b"1,2\n").error == "line 1 has 5 columns"
    # When a GET never gets an answer: ApiUnavailable after its 3 attempts of 10 s each (the read-back reads it again later)
    seen.clear()
    answers[:] = [TimeoutError("timed out")] * 3
    with pytest.raises(ApiUnavailable, match="no answer after 3 attempts"):
        api.get_row("c-" + "0" * 32)
    assert [(url, timeout) for _, url, _, _, timeout in seen] == [("https://api.test/trips/c-" + "0" * 32, 10.0)] * 3


def test_an_unreachable_api_stops_the_run_after_three_batches_and_a_rerun_resumes(tmp_path: Path) -> None:
    # Given an API that cannot be reached from the second batch on
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:600]])
    api = FakeApi()

    def down(index: int) -> None:
        if index >= 1:
            raise ApiUnavailable("POST /trips/batch: no answer after 6 attempts (URLError: refused)")

    api.before_start = down
    # When the file is loaded by the serial loader
    report, out = run(path, api, in_flight=1)
    # Then the run stops sending after three unanswered batches, says so, counts the rest of the file as not sent, and exits 3
    assert api.posts == 4 and report.stopped and report.exit_status == taxi_loader.INCOMPLETE_EXIT_STATUS
    assert "STOPPED: the API did not answer 3 batches in a row" in out
    assert report.rows_not_sent == 501 and counts_line(out, "not sent") == "    not sent     501  (a rerun sends them)"
    # When the API is back: a rerun sends the six missing batches and every row is stored once
    api.before_start = None
    report, _ = run(path, api)
    assert api.posts == 10 and report.skipped == 1 and report.accepted == 6
    assert report.states is not None and report.states.stored == 600 and report.exit_status == 0


def test_a_refused_key_stops_the_run_at_once(tmp_path: Path) -> None:
    # Given an API that refuses the key
    refusing = FakeApi()
    refusing.post_batch = lambda body: Answer(403, {"message": "Forbidden"})  # type: ignore[method-assign]
    # When a file is loaded by the serial loader
    report, out = run(write(tmp_path / "other.csv", [HEADER, *ROWS[:250]]), refusing, in_flight=1)
    # Then the run stops after the first batch, reports it, and exits 3 (fix the key, run it again)
    assert report.stopped == "the API refused the key" and len(report.failed) == 1 and report.exit_status == 3
    assert "NOT SENT lines 2-100: HTTP 403: the API refused the key (Forbidden)" in out


# --- the command line -------------------------------------------------------------------------


def outputs(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "cdk-outputs-dev.json"
    path.write_text(json.dumps(document))
    return path


def test_env_reads_the_url_and_the_secret_from_the_taxi_stacks_outputs(tmp_path: Path, moto_aws: None) -> None:
    # Given a deployed environment's outputs file and the key in Secrets Manager
    import boto3

    arn = boto3.client("secretsmanager", region_name="us-east-1").create_secret(Name="taxi-key", SecretString="the-key")["ARN"]
    stack_outputs = {contract.OUTPUT_API_URL: "https://abc.execute-api.us-east-1.amazonaws.com/", contract.OUTPUT_API_KEY_SECRET_ARN: arn}
    path = outputs(tmp_path, {"Onceflow-dev-EventLog": {"LogTableName": "t"}, "Onceflow-dev-TaxiEtl": stack_outputs})
    # When the loader resolves --env
    stack = taxi_loader.api_from_outputs(path, "dev")
    # Then it has the API's URL and the key from the secret (a deployed stack has no local endpoint)
    assert stack.api_url == stack_outputs[contract.OUTPUT_API_URL] and stack.local is None
    assert taxi_loader.read_api_key(stack.secret_arn) == "the-key"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"Onceflow-dev-EventLog": {}}, "has 0 stacks ending in -TaxiEtl"),
        ({"Onceflow-dev-TaxiEtl": {"ApiUrl": "https://x/"}}, "has no outputs ['ApiKeySecretArn']"),
        ([], "is not a CDK outputs file"),
    ],
)
def test_an_outputs_file_without_the_taxi_stack_is_a_usage_error(tmp_path: Path, document: Any, message: str, capsys: Any) -> None:
    # Given an outputs file without what the loader needs
    path = outputs(tmp_path, document)
    data = write(tmp_path / "trips.csv", [HEADER, ROWS[0]])
    # When the loader runs with --env
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(data), "--env", "dev", "--outputs-file", str(path), "--api-key", "k"])
    # Then it stops with exit 2 and says what is missing
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--url", "https://api.test"], "no API key"),
        (["--url", "ftp://api.test", "--api-key", "k"], "must start with https://"),
        (["--api-key", "k"], "one of the arguments --url --env is required"),
        (["--url", "https://api.test", "--env", "dev"], "not allowed with argument"),
        (["--url", "https://api.test", "--api-key", "k", "--batch-lines", "0"], "--batch-lines must be 1..1000"),
        (["--url", "https://api.test", "--api-key", "k", "--outputs-file", "x.json"], "--outputs-file goes with --env"),
        (["--url", "https://api.test", "--api-key", "k", "--wait", "-1"], "--wait must be 0 or more"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    tmp_path: Path, argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Given no key in the environment and a file
    monkeypatch.delenv(taxi_loader.API_KEY_VARIABLE, raising=False)
    data = write(tmp_path / "trips.csv", [HEADER, ROWS[0]])
    # When the command line is wrong
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(data), *argv])
    # Then it stops with exit 2 and a message naming the problem
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_file_is_a_usage_error(tmp_path: Path, capsys: Any) -> None:
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(tmp_path / "nope.csv"), "--url", "https://api.test", "--api-key", "k"])
    assert stopped.value.code == 2 and "is not a file" in capsys.readouterr().err


def test_the_key_comes_from_the_environment_when_not_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the key in ONCEFLOW_API_KEY
    monkeypatch.setenv(taxi_loader.API_KEY_VARIABLE, "from-env")
    args = taxi_loader.build_parser().parse_args([str(tmp_path), "--url", "https://api.test/"])
    # Then the client is built with it
    api = taxi_loader._api_from_args(args)
    assert api.url == "https://api.test" and api._key == "from-env"


# --- progress ---------------------------------------------------------------------------------


def test_progress_bars_are_drawn_on_stderr_when_asked_and_never_with_no_progress(tmp_path: Path) -> None:
    # Given a file
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:150]])
    # When it is loaded with the bars forced on (stderr is not a terminal here)
    drawn = Console(io.StringIO(), io.StringIO(), True)
    load_file(path, FakeApi(), LoadOptions(checkpoint=tmp_path / "a"), console=drawn)
    err = drawn.err.getvalue()  # type: ignore[attr-defined]
    # Then tqdm drew hashing, loading and reading back through to the end, and the report went to stdout
    assert "hashing: 100%" in err and "loading: 100%" in err and "151/151" in err and "reading back: 100%" in err and "150/150" in err
    assert "summary of trips.csv" in drawn.out.getvalue()  # type: ignore[attr-defined]
    # When it is loaded with --no-progress: no bar
    plain = Console(io.StringIO(), io.StringIO(), False)
    load_file(path, FakeApi(), LoadOptions(checkpoint=tmp_path / "b"), console=plain)
    assert plain.err.getvalue() == ""  # type: ignore[attr-defined]


def test_without_tqdm_the_loader_runs_without_bars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the library installed without its extra (no tqdm)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:20]])
    console = Console(io.StringIO(), io.StringIO(), True)
    # When a file is loaded with bars asked for
    report = load_file(path, FakeApi(), console=console)
    # Then it loads, with no bar, and says why once
    assert report.exit_status == 0
    assert console.err.getvalue() == (  # type: ignore[attr-defined]
        "onceflow-taxi-load: no progress bars: tqdm is not installed (pip install 'onceflow[clients]')\n"
    )
