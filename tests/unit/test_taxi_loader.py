"""The taxi loader (onceflow.clients.taxi_loader) against an API in memory: the API's own request
parsing (runtime.taxi_etl.requests), Standard's execution names (the same name and input again is a
duplicate, another input 422) and each row's fate by the phases' own rules. No network.

Keys per (file hash, line range); a rerun after a crash sends only what is missing, and a batch
sent again is a duplicate, never a second execution; malformed lines are refused per line in the
API's words while their batch goes on; the file is streamed; the summary groups flagged rows by
phase, reason and detail; the HTTP client retries the same bytes under the same key.
"""

from __future__ import annotations

import base64
import io
import json
import sys
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
from runtime.shared.http import Refusal
from runtime.taxi_etl import contract
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import IDEMPOTENCY_KEY, decode_body, parse_batch
from runtime.taxi_etl.row_state import parse_row_id
from runtime.taxi_etl.trips import MAX_LINE_BYTES, Accepted, Rejected, final_item, transform_tuple, validate_line

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
KEY_OF_BATCH = taxi_loader.batch_key


class SimulatedCrash(Exception):
    """The loader's process dies here."""


class FakeApi:
    """POST /trips/batch and GET /trips/{id} in memory, as the deployed API answers them."""

    url = "https://api.test"

    def __init__(self, *, max_lines: int = 100, unsettled_reads: int = 0) -> None:
        self.max_lines = max_lines
        self.unsettled_reads = unsettled_reads  # a row reads 404, then pending, this many times before its end state
        self.executions: dict[str, str] = {}  # execution name -> input
        self.rows: dict[str, str] = {}  # StoreRequestId -> line
        self.posts: list[str] = []  # the Idempotency-Key of each POST, in order
        self.statuses: list[int] = []
        self.reads: Counter[str] = Counter()
        self.failing_store: set[str] = set()
        self.before_start: Callable[[int], None] | None = None  # called with the POST's index before anything starts
        self.after_start: Callable[[int], None] | None = None  # ... after the execution started, before the answer

    def post_batch(self, body: bytes, key: str) -> Answer:
        index = len(self.posts)
        self.posts.append(key)
        if self.before_start:
            self.before_start(index)
        try:  # the body's bytes as API Gateway hands them over, through the API's own decoding (strict UTF-8, no BOM)
            text = decode_body(base64.b64encode(body).decode("ascii"), is_base64=True, max_bytes=taxi_loader.BATCH_MAX_BYTES)
            submission = parse_batch(text, key, max_lines=self.max_lines, max_line_bytes=MAX_LINE_BYTES)
        except Refusal as refusal:
            return self._answer(refusal.status, refusal.body())
        name, execution_input = submission.execution_name, submission.execution_input()
        if name in self.executions and self.executions[name] != execution_input:
            return self._answer(422, {"error": f"Idempotency-Key {key} was already used for another request"})
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


def write(path: Path, lines: list[str]) -> Path:
    path.write_bytes("".join(f"{line}\n" for line in lines).encode("utf-8", "surrogateescape"))
    return path


def quiet() -> Console:
    return Console(io.StringIO(), io.StringIO(), False)


def run(path: Path, api: FakeApi, **options: Any) -> tuple[LoadReport, str]:
    console = quiet()
    report = load_file(path, api, LoadOptions(**options), console=console, sleep=lambda seconds: None)
    out = console.out.getvalue()  # type: ignore[attr-defined]
    return report, out


# --- keys -------------------------------------------------------------------------------------


def test_keys_are_deterministic_per_file_hash_and_line_range_and_differ_between_files(tmp_path: Path) -> None:
    # Given the header and 250 real rows, loaded once
    first = write(tmp_path / "a.csv", [HEADER, *ROWS[:250]])
    api = FakeApi()
    report, _ = run(first, api)
    # Then each batch's key is the file's hash and its line range, one per batch of 100 lines
    assert api.posts == [KEY_OF_BATCH(report.sha256, 1, 100), KEY_OF_BATCH(report.sha256, 101, 200), KEY_OF_BATCH(report.sha256, 201, 251)]
    assert api.posts[0] == f"{report.sha256[:32]}-1-100"
    # and each is a key the API takes, whose row ids GET /trips/{id} takes (the longest row id of the longest range included)
    for key in api.posts:
        assert IDEMPOTENCY_KEY.fullmatch(key)
    assert parse_row_id(taxi_loader.row_id(KEY_OF_BATCH("f" * 64, 9_999_999_001, 10_000_000_000), 1000))
    # When the same content is loaded from another path (no checkpoint there): the same keys again
    same = write(tmp_path / "b.csv", [HEADER, *ROWS[:250]])
    again = FakeApi()
    run(same, again)
    assert again.posts == api.posts
    # When a file differs by one byte: no key is shared
    other = write(tmp_path / "c.csv", [HEADER, *ROWS[:249], ROWS[249].replace(",N,", ",Y,")])
    changed = FakeApi()
    run(other, changed)
    assert len(changed.posts) == 3 and not set(changed.posts) & set(api.posts)


def test_batch_boundaries_are_line_ranges_cut_before_the_body_outgrows_the_api_limit() -> None:
    # Given 10 rows of 30,000 bytes each (padded with blanks, which the API takes) and a refused line
    lines = [
        Line(number, Kind.ROW, text="x" * 30_000) if number != 6 else Line(6, Kind.REFUSED, problem="line 6 ...") for number in range(1, 12)
    ]
    # When they are cut into batches of at most 100 lines and 64 KiB
    batches = list(iter_batches(lines, batch_lines=100))
    # Then each body stays within 64 KiB, the ranges tile the lines in order, and cutting again gives the same ranges
    assert all(len(batch.body()) <= taxi_loader.BATCH_MAX_BYTES for batch in batches)
    assert [(batch.first, batch.last) for batch in batches] == [(1, 2), (3, 4), (5, 7), (8, 9), (10, 11)]
    assert [(batch.first, batch.last) for batch in iter_batches(lines, batch_lines=100)] == [(b.first, b.last) for b in batches]
    # and a batch of N lines counts every line, sent or not
    assert [(batch.first, batch.last) for batch in iter_batches(lines, batch_lines=3, batch_bytes=10**9)] == [
        (1, 3),
        (4, 6),
        (7, 9),
        (10, 11),
    ]


# --- reruns -----------------------------------------------------------------------------------


def crash_at(index: int) -> Callable[[int], None]:
    def hook(current: int) -> None:
        if current == index:
            raise SimulatedCrash(f"the loader died at POST {current}")

    return hook


def test_a_rerun_after_a_crash_sends_only_the_missing_batches(tmp_path: Path) -> None:
    # Given 1,000 real rows, and a loader that dies as it sends its fourth batch (nothing of it reached the API)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:1000]])
    api = FakeApi()
    api.before_start = crash_at(3)
    with pytest.raises(SimulatedCrash):
        run(path, api)
    # Then the checkpoint holds the three batches the API acknowledged
    checkpoint = json.loads((tmp_path / "trips.csv.onceflow-progress").read_text())
    assert checkpoint["acknowledged"] == {api.url: [[1, 300]]}
    sent_before = list(api.posts[:3])
    # When it runs again
    api.before_start = None
    report, out = run(path, api)
    # Then it sends the fourth batch on, and only those: every row is stored once, by one execution per batch
    assert api.posts[4:] == [KEY_OF_BATCH(report.sha256, first, min(first + 99, 1001)) for first in range(301, 1002, 100)]
    assert not set(api.posts[4:]) & set(sent_before)
    assert (report.skipped, report.accepted, report.duplicates) == (3, 8, 0)
    assert len(api.executions) == 11 and len(api.rows) == 1000
    assert report.states is not None and report.states.stored == 1000 and report.states.flagged_total == 0
    assert report.exit_status == 0
    assert "3 acknowledged by an earlier run" in out
    # When it runs a third time: nothing is sent, and the summary reads every row back
    report, _ = run(path, api)
    assert len(api.posts) == 12 and report.skipped == 11
    assert report.states is not None and report.states.stored == 1000


def test_a_batch_sent_but_not_acknowledged_is_resent_under_its_key_and_answered_as_duplicate(tmp_path: Path) -> None:
    # Given a loader that dies after its second batch started but before the answer came back (a lost answer)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:400]])
    api = FakeApi()
    api.after_start = crash_at(1)
    with pytest.raises(SimulatedCrash):
        run(path, api)
    assert len(api.executions) == 2
    # When it runs again
    api.after_start = None
    report, out = run(path, api)
    # Then the second batch goes again under the same key, and the API answers it as a duplicate
    assert api.posts[2] == api.posts[1]
    assert api.statuses == [202, 200, 202, 202, 202]  # the first run's answer to its second batch was lost
    assert (report.skipped, report.duplicates, report.accepted) == (1, 1, 3)
    assert "1 answered as duplicates" in out
    # and no row is counted or stored twice: one execution per batch, 400 rows, each read back once
    assert len(api.executions) == 5 and len(api.rows) == 400
    assert report.states is not None and report.states.read == 400 and report.states.stored == 400
    assert sum(api.reads.values()) == 400


def test_a_checkpoint_of_other_content_or_other_batches_stops_the_run_before_anything_is_sent(tmp_path: Path, capsys: Any) -> None:
    # Given a file loaded in batches of 50
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:120]])
    api = FakeApi()
    assert taxi_loader.main([str(path), "--url", api.url, "--batch-lines", "50", "--no-read-back"], api=api) == 0
    posts = len(api.posts)
    # When it is run again in batches of 100
    # Then it stops with a usage error: those batches would have other keys
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(path), "--url", api.url, "--batch-lines", "100"], api=api)
    assert stopped.value.code == 2
    assert "--batch-lines 50" in capsys.readouterr().err
    # When the file changed since (a row appended)
    write(path, [HEADER, *ROWS[:121]])
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(path), "--url", api.url], api=api)
    # Then it stops too, naming the change, and nothing was sent
    assert stopped.value.code == 2
    assert "the file changed since" in capsys.readouterr().err
    assert len(api.posts) == posts


def test_a_rerun_without_batch_lines_takes_the_checkpoints(tmp_path: Path) -> None:
    # Given a file half loaded in batches of 40
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:200]])
    api = FakeApi()
    api.before_start = crash_at(2)
    with pytest.raises(SimulatedCrash):
        run(path, api, batch_lines=40)
    # When it runs again without --batch-lines
    api.before_start = None
    report, _ = run(path, api)
    # Then it cuts the file as before: only the missing batches of 40 lines go
    assert api.posts[3:] == [KEY_OF_BATCH(report.sha256, first, min(first + 39, 201)) for first in range(81, 202, 40)]
    assert report.states is not None and report.states.stored == 200


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
    assert report.failed == [] and report.exit_status == 0


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
        submission = parse_batch(text, "k", max_lines=100, max_line_bytes=MAX_LINE_BYTES)
    except Refusal as refusal:
        api_says: str | None = str(refusal)
    else:
        api_says = None
    # Then the loader sends it exactly when the API takes it, skips what the API skips, and refuses with the API's reason
    if api_says is None:
        assert classified.kind is Kind.ROW and classified.text == line and len(submission.rows) == 1
    elif classified.kind is Kind.SKIPPED:  # a blank line or a header of a mapped layout: alone, it leaves the API nothing
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

    class Recording(FakeApi):
        def __init__(self) -> None:
            super().__init__()
            self.bodies: list[bytes] = []

        def post_batch(self, body: bytes, key: str) -> Answer:
            self.bodies.append(body)
            return super().post_batch(body, key)

    api = Recording()
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
    assert taxi_loader.BINARY.pattern == requests._BINARY.pattern


def test_an_api_refusal_names_the_files_lines_and_the_run_goes_on(tmp_path: Path) -> None:
    # Given an API that takes at most 60 lines per batch (the loader sends 99 rows, then 51)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:150]])
    api = FakeApi(max_lines=60)
    # When the file is loaded
    report, out = run(path, api)
    # Then each batch is refused with the API's message, the run goes on to the end, and the exit status says so
    assert len(api.posts) == 2 and api.statuses == [413, 202]
    assert report.exit_status == 1 and len(report.failed) == 1
    assert "NOT SENT lines 1-100: refused by the API (HTTP 413): the batch has 99 lines; the limit is 60" in out
    # and the refused batch is not in the checkpoint: a rerun sends it again
    assert json.loads((tmp_path / "trips.csv.onceflow-progress").read_text())["acknowledged"] == {api.url: [[101, 151]]}


def test_the_apis_line_numbers_are_turned_into_the_files() -> None:
    # Given a batch whose rows are file lines 12, 14 and 15, and an API message about its lines 2 and 3
    batch = Batch(11, 15, rows=[(12, "a"), (14, "b"), (15, "c")])
    message = "2 of 3 lines cannot be trips, nothing was accepted: line 2 has 5 columns; line 3 is not one well-formed CSV record"
    # Then the message names lines 14 and 15
    assert taxi_loader._file_lines(message, batch) == (
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


def test_a_load_reads_the_file_twice_as_a_stream_and_sends_as_it_reads(tmp_path: Path) -> None:
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
    report = load_file(tmp_path / "generated.csv", api, LoadOptions(read_back=False), console=console, opener=opener)
    # Then the first batch was sent when only about a batch of the second pass had been made
    assert len(opened) == 2 and made_at_first_post[0] < 300
    # and the whole file went, in 51 batches, its hash checked on the way
    assert len(api.posts) == 51 and report.rows == 5_000 and not report.changed and report.exit_status == 0


def test_a_line_too_long_to_be_a_trip_is_counted_through_not_held(tmp_path: Path) -> None:
    # Given 5 MB of binary data without a line break between two real rows
    raw = GeneratedFile(iter([(ROWS[0] + "\n").encode(), *(b"\x00\xff" * 50_000 for _ in range(50)), b"\n", (ROWS[1] + "\n").encode()]))
    # When its lines are read
    lines = list(read_lines(io.BufferedReader(raw)))
    # Then the long one is refused by its size, and the rows around it are rows
    assert [line.kind for line in lines] == [Kind.ROW, Kind.REFUSED, Kind.ROW]
    assert lines[1].problem == f"line 2 is 5000000 bytes; the limit is {MAX_LINE_BYTES}"


def test_a_file_changed_while_it_is_loaded_is_reported(tmp_path: Path) -> None:
    # Given a file whose second read differs from its first (someone rewrote it in between)
    contents = [[HEADER, *ROWS[:150]], [HEADER, *ROWS[1:151]]]

    def opener() -> io.BytesIO:
        return io.BytesIO("".join(f"{line}\n" for line in contents.pop(0)).encode())

    console = quiet()
    report = load_file(tmp_path / "moving.csv", FakeApi(), LoadOptions(read_back=False), console=console, opener=opener)
    # Then the run says so and fails
    assert report.changed and report.exit_status == 1
    assert "FILE CHANGED" in console.out.getvalue()  # type: ignore[attr-defined]


# --- the summary ------------------------------------------------------------------------------


def test_the_summary_groups_flagged_rows_by_phase_reason_and_detail(tmp_path: Path) -> None:
    # Given real rows (the sample's 2,000, with its four findings), 3 rows that fail validation, 2 transformation, and 1 whose store fails
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS, DROPOFF_BEFORE_PICKUP, DROPOFF_BEFORE_PICKUP, DROPOFF_BEFORE_PICKUP])
    with path.open("a") as file:
        file.write(f"{SPRING_FORWARD_GAP}\n{SPRING_FORWARD_GAP}\n")
    api = FakeApi()
    api.failing_store = {taxi_loader.row_id(KEY_OF_BATCH(taxi_loader.scan_file(path.open("rb"))[0], 1, 100), 7)}
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
    assert any(line.startswith("FLAGGED line 2002 kb-") and "validation (reason 1) dropoff_before_pickup: " in line for line in summary)
    assert any(line.startswith("FLAGGED line 8 kb-") and "store (reason 3) error:ClientError" in line for line in summary)


def test_pending_rows_are_read_again_until_they_settle_within_the_wait(tmp_path: Path) -> None:
    # Given an API whose rows are unseen (404), then pending, for a while after they are accepted
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:30]])
    api = FakeApi(unsettled_reads=3)
    # When the file is loaded
    report, out = run(path, api, wait_seconds=60)
    # Then every row was read until it settled: 3 unsettled reads and the last, and none is left pending
    assert report.states is not None and report.states.stored == 30 and report.states.pending == []
    assert set(api.reads.values()) == {4}
    # When a rerun may not wait: the rows still unsettled are listed as pending, and the run has not failed
    again = FakeApi(unsettled_reads=10)
    report, out = run(write(tmp_path / "other.csv", [HEADER, *ROWS[30:40]]), again, wait_seconds=0)
    assert report.states is not None and len(report.states.pending) == 10 and report.exit_status == 0
    assert "    pending       10  after 0 s; run the loader again later to read them (it resends nothing)" in out.splitlines()


def test_the_read_back_uses_a_bounded_pool() -> None:
    # Given the loader's defaults
    # Then it reads 16 rows at once
    assert taxi_loader.READERS == 16


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


def test_the_http_client_retries_the_same_bytes_under_the_same_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an API that answers 503, then drops the connection, then accepts
    import urllib.error
    import urllib.request

    seen: list[tuple[str, str, bytes | None, dict[str, str]]] = []
    answers: list[Any] = [
        urllib.error.HTTPError("https://api.test/trips/batch", 503, "busy", {}, io.BytesIO(b'{"message": "Service Unavailable"}')),  # type: ignore[arg-type]
        ConnectionResetError("reset"),
        Response(202, {"StoreRequestIds": ["kb-k-1"], "duplicate": False}),
    ]

    def urlopen(request: urllib.request.Request, timeout: float) -> Any:
        seen.append((request.get_method(), request.full_url, request.data, dict(request.header_items())))  # type: ignore[arg-type]
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    pauses: list[float] = []
    api = HttpTaxiApi("https://api.test/", "s3cret", sleep=pauses.append)
    # When a batch is posted
    answer = api.post_batch(b"row\n", "file-1-100")
    # Then it was sent three times, the same bytes and key each time, with the key in Authorization, and accepted
    assert answer == Answer(202, {"StoreRequestIds": ["kb-k-1"], "duplicate": False})
    assert [(method, url, body) for method, url, body, _ in seen] == [
        ("POST", "https://api.test" + contract.ROUTE_TRIP_BATCH, b"row\n")
    ] * 3
    assert {headers["Idempotency-key"] for *_, headers in seen} == {"file-1-100"}
    assert {headers["Authorization"] for *_, headers in seen} == {"s3cret"}
    assert len(pauses) == 2
    # When the API refuses a request (4xx): the answer is returned at once, not retried
    answers[:] = [urllib.error.HTTPError("u", 400, "bad", {}, io.BytesIO(b'{"error": "line 1 has 5 columns"}'))]  # type: ignore[arg-type]
    assert api.post_batch(b"1,2\n", "k").error == "line 1 has 5 columns"
    # When the API never answers: ApiUnavailable after every attempt
    answers[:] = [TimeoutError("timed out")] * 6
    with pytest.raises(ApiUnavailable, match="no answer after 6 attempts"):
        api.get_row("kb-k-1")
    assert seen[-1][1] == "https://api.test/trips/kb-k-1"


def test_an_unreachable_api_stops_the_run_after_three_batches_and_a_rerun_resumes(tmp_path: Path) -> None:
    # Given an API that cannot be reached from the second batch on
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:600]])
    api = FakeApi()

    def down(index: int) -> None:
        if index >= 1:
            raise ApiUnavailable("POST /trips/batch: no answer after 6 attempts (URLError: refused)")

    api.before_start = down
    # When the file is loaded
    report, out = run(path, api)
    # Then the run stops after three unanswered batches, says so, and exits 1
    assert len(api.posts) == 4 and report.stopped and report.exit_status == 1
    assert "STOPPED: the API did not answer 3 batches in a row" in out
    # When the API is back: a rerun sends the six missing batches and every row is stored once
    api.before_start = None
    report, _ = run(path, api)
    assert len(api.posts) == 10 and report.skipped == 1 and report.accepted == 6
    assert report.states is not None and report.states.stored == 600


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
    assert stack.api_url == stack_outputs[contract.OUTPUT_API_URL] and stack.endpoint_url is None
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


def test_a_checkpoint_that_is_not_one_is_a_usage_error(tmp_path: Path) -> None:
    # Given a file where the checkpoint should be
    path = tmp_path / "x.onceflow-progress"
    path.write_text("{not json")
    # Then opening it says what to do
    with pytest.raises(taxi_loader.UsageError, match="move it away"):
        Checkpoint.open(path, sha256="0" * 64, batch_lines=None, batch_bytes=taxi_loader.BATCH_MAX_BYTES)


def test_a_key_already_used_for_other_lines_is_reported_and_the_key_refused_stops_the_run(tmp_path: Path) -> None:
    # Given an API that already ran the first batch's key with other lines (the loader's rules changed, say)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:250]])
    sha256 = taxi_loader.scan_file(path.open("rb"))[0]
    api = FakeApi()
    api.executions[f"kb-{KEY_OF_BATCH(sha256, 1, 100)}"] = '{"rows": []}'
    # When the file is loaded
    report, out = run(path, api, read_back=False)
    # Then that batch is reported with the 422, left out of the checkpoint, and the others go
    assert api.statuses == [422, 202, 202] and report.exit_status == 1
    assert f"NOT SENT lines 1-100: HTTP 422: the key {KEY_OF_BATCH(sha256, 1, 100)} was already used for other lines" in out
    # When the API refuses the key itself: the run stops at once, since no batch can go
    refusing = FakeApi()
    refusing.before_start = lambda index: None
    refusing.post_batch = lambda body, key: Answer(403, {"message": "Forbidden"})  # type: ignore[method-assign]
    report, out = run(write(tmp_path / "other.csv", [HEADER, *ROWS[:250]]), refusing)
    assert report.stopped == "the API refused the key" and len(report.failed) == 1 and report.exit_status == 1
    assert "NOT SENT lines 1-100: HTTP 403: the API refused the key (Forbidden)" in out


def test_a_checkpoint_that_cannot_be_written_stops_the_run_before_anything_is_sent(tmp_path: Path, capsys: Any) -> None:
    # Given a checkpoint path in a folder that does not exist
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:10]])
    api = FakeApi()
    # When the loader runs
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(path), "--url", api.url, "--checkpoint", str(tmp_path / "no" / "such" / "place")], api=api)
    # Then it stops with exit 2, naming the option, and sent nothing
    assert stopped.value.code == 2 and "pass --checkpoint PATH" in capsys.readouterr().err
    assert api.posts == []


def test_an_interrupt_keeps_the_checkpoint_and_a_rerun_goes_on(tmp_path: Path, capsys: Any) -> None:
    # Given a load interrupted (Ctrl-C) as it sends its third batch
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:400]])
    api = FakeApi()

    def interrupt(index: int) -> None:
        if index == 2:
            raise KeyboardInterrupt

    api.before_start = interrupt
    # Then the loader says how to go on and exits 130, with the first two batches in the checkpoint
    assert taxi_loader.main([str(path), "--url", api.url], api=api) == taxi_loader.INTERRUPTED_EXIT_STATUS
    assert "interrupted; the checkpoint holds what the API acknowledged" in capsys.readouterr().err
    assert json.loads((tmp_path / "trips.csv.onceflow-progress").read_text())["acknowledged"] == {api.url: [[1, 200]]}
    # When it runs again: the rest goes, and every row is stored once
    api.before_start = None
    assert taxi_loader.main([str(path), "--url", api.url], api=api) == 0
    assert len(api.executions) == 5 and len(api.rows) == 400
