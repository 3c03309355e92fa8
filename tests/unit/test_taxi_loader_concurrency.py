"""The taxi loader with several batches in flight (--in-flight N, issue 25 item 4), against the API in
memory of tests/unit/test_taxi_loader.py, whose answers these tests hold back and release in an
order of their choosing.

Answers are committed to the report and the checkpoint in file order (`InOrderCommits`): a batch
answered after a later one is written first, one answered while an earlier one is in flight waits;
a batch not acknowledged is never written, and the batches after it are written in their turn (the
checkpoint names content, not ranges). A crash or Ctrl-C with batches in flight leaves a checkpoint
of acknowledged batches in file order, and a rerun stores every row once and reports what a clean
run reports; two loaders of one file at once store every row once; the summary of a concurrent run
is the serial run's, line for line; a 413 is still split; the API's push-back lowers the number of
POSTs at once.
"""

from __future__ import annotations

import io
import itertools
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from onceflow.clients import taxi_loader
from onceflow.clients.taxi_loader import (
    Answer,
    ApiUnavailable,
    Checkpoint,
    Console,
    Delivered,
    InOrderCommits,
    LoadOptions,
    LoadReport,
    batch_name,
    load_file,
)
from runtime.taxi_etl.requests import content_id
from tests.unit.test_taxi_loader import (
    HEADER,
    MALFORMED,
    ROWS,
    FakeApi,
    SimulatedCrash,
    StateBudgetApi,
    counts_line,
    ids_of,
    write,
)

# Unmeasured: they replay paths that lighter tests measure, at more CPU than they add to coverage
# (docs/development.md)
pytestmark = pytest.mark.no_cover

WAIT = 5.0  # a test's longest wait for a sender thread; never reached when the loader is right


def run(path: Path, api: Any, **options: Any) -> tuple[LoadReport, str]:
    console = Console(io.StringIO(), io.StringIO(), False)
    report = load_file(path, api, LoadOptions(**options), console=console, sleep=lambda seconds: None)
    return report, console.out.getvalue()  # type: ignore[attr-defined]


def records(path: Path) -> list[str]:
    """The execution names in a checkpoint file, in the order written (a record cut short left out)."""
    names = []
    for line in path.read_text().splitlines()[1:]:
        try:
            names.append(json.loads(line)["execution"])
        except (ValueError, KeyError):
            continue
    return names


def names_in_file_order(rows: list[str], batch_rows: int) -> list[str]:
    """The execution names of a headed file's batches of `batch_rows` lines (the first batch has the header as one)."""
    cuts = [0, batch_rows - 1, *range(2 * batch_rows - 1, len(rows), batch_rows), len(rows)]
    cuts = sorted(set(cut for cut in cuts if cut <= len(rows)))
    return [batch_name([content_id(row) for row in rows[start:end]]) for start, end in itertools.pairwise(cuts)]


def summary(out: str) -> list[str]:
    """The summary's lines, from `summary of`: what a run reports, not the order it printed progress in."""
    lines = out.splitlines()
    return lines[next(n for n, line in enumerate(lines) if line.startswith("summary of")) :]


class HeldApi(FakeApi):
    """The API in memory, whose answers to the POSTs holding these rows wait until the test releases them: the
    execution has started (the rows are in the API) when the answer is held."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.held: dict[str, threading.Event] = {}  # a row of the batch -> its release
        self.waiting: dict[str, threading.Event] = {}  # set once that POST's execution started and its answer waits
        self.answered: list[str] = []  # the held rows whose answers went back, in order
        self.done: dict[str, threading.Event] = {}  # set once that answer went back
        self.after_start = self._hold

    def hold(self, *rows: str) -> None:
        for row in rows:
            self.held[row] = threading.Event()
            self.waiting[row] = threading.Event()
            self.done[row] = threading.Event()

    def _hold(self, index: int) -> None:
        body = self.bodies[index].decode()
        for row, release in self.held.items():
            if row in body:
                self.waiting[row].set()
                assert release.wait(WAIT), f"the answer to the batch of {row[:30]}... was never released"
                with self.lock:
                    self.answered.append(row)
                self.done[row].set()

    def release(self, row: str) -> None:
        self.held[row].set()


def start(target: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """`target` on a thread of its own; its result or exception in the list once it ends."""
    outcome: list[Any] = []

    def body() -> None:
        try:
            outcome.append(target())
        except BaseException as err:  # the test looks at it
            outcome.append(err)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, outcome


# --- the in-order commit rule -------------------------------------------------------------------


def test_answers_in_any_order_are_committed_in_file_order_and_a_later_one_waits_for_every_earlier_one() -> None:
    # Given the commit rule, and five batches whose answers come back 3, 1, 0, 4, 2
    committed: list[int] = []
    commits = InOrderCommits(lambda delivered: committed.append(delivered.position))
    # When batch 3 answers, then 1: nothing is committed, both are held (batch 0 is still in flight)
    assert commits.answered(Delivered(3)) == [] and commits.answered(Delivered(1)) == []
    assert committed == [] and sorted(commits.held) == [1, 3] and commits.next == 0
    # When batch 0 answers: it and batch 1 are committed, in that order; 3 still waits for 2
    assert commits.answered(Delivered(0)) == [0, 1]
    assert commits.answered(Delivered(4)) == [] and sorted(commits.held) == [3, 4]
    # When batch 2 answers: 2, 3 and 4 are committed, in file order, and nothing is held
    assert commits.answered(Delivered(2)) == [2, 3, 4]
    assert committed == [0, 1, 2, 3, 4] and commits.held == {} and commits.next == 5
    # and a batch answered twice is a bug, said at once
    with pytest.raises(ValueError, match="answered twice"):
        commits.answered(Delivered(2))


def test_a_failed_batch_is_never_written_and_the_batches_after_it_are_written_in_their_turn(tmp_path: Path) -> None:
    # Given a checkpoint and the rule writing into it: batches 0 and 2 acknowledged, batch 1 failed (the API did not answer)
    checkpoint = Checkpoint.open(tmp_path / "x.onceflow-progress")
    url = "https://api.test"

    def write_records(delivered: Delivered) -> None:
        for name, rows in delivered.records:
            checkpoint.acknowledge(url, name, rows)

    commits = InOrderCommits(write_records)
    # When batch 2 is acknowledged while 0 and 1 are in flight
    commits.answered(Delivered(2, records=[("cb-two", 100)]))
    # Then nothing is written: its turn has not come
    assert records(checkpoint.path) == []
    # When batch 0 is acknowledged: it is written, and 2 still waits for 1
    commits.answered(Delivered(0, records=[("cb-zero", 99)]))
    assert records(checkpoint.path) == ["cb-zero"]
    # When batch 1 fails (no records: not acknowledged)
    commits.answered(Delivered(1, failed=["lines 101-200: no answer"], rows_not_sent=100))
    # Then it is not written, and batch 2 is, after it: the names are content, so a rerun sends 1 and skips 0 and 2
    checkpoint.close()
    assert records(checkpoint.path) == ["cb-zero", "cb-two"]
    assert Checkpoint.open(checkpoint.path).acknowledged == {url: {"cb-zero", "cb-two"}}


def test_an_interruption_with_an_earlier_batch_in_flight_writes_nothing_after_it(tmp_path: Path) -> None:
    # Given batches 0, 2 and 3 acknowledged and batch 1 still in flight
    checkpoint = Checkpoint.open(tmp_path / "x.onceflow-progress")
    commits = InOrderCommits(lambda delivered: [checkpoint.acknowledge("u", name, rows) for name, rows in delivered.records])
    for position in (0, 2, 3):
        commits.answered(Delivered(position, records=[(f"cb-{position}", 10)]))
    # When the run is interrupted there (the process ends; the held answers are lost)
    checkpoint.close()
    # Then the checkpoint holds batch 0 only: a rerun sends 1, 2 and 3, and the API answers 2 and 3 as duplicates
    assert records(checkpoint.path) == ["cb-0"] and sorted(commits.held) == [2, 3]


# --- loads with answers out of order -----------------------------------------------------------


def test_a_load_whose_answers_come_back_out_of_order_writes_the_checkpoint_and_the_report_in_file_order(tmp_path: Path) -> None:
    # Given 500 rows in six batches (the header is the first batch's 100th line), and an API that holds its answer to the first two batches
    rows = ROWS[:500]
    path = write(tmp_path / "trips.csv", [HEADER, *rows])
    api = HeldApi()
    api.hold(rows[0], rows[150])
    # When they are loaded four at a time
    thread, outcome = start(lambda: run(path, api, in_flight=4, read_back=False))
    assert api.waiting[rows[0]].wait(WAIT) and api.waiting[rows[150]].wait(WAIT)
    # Then while the first batch's answer is held, nothing is written: not even the batches already answered
    checkpoint = tmp_path / "trips.csv.onceflow-progress"
    assert records(checkpoint) == []
    # When the second batch's answer comes back, then the first's
    api.release(rows[150])
    assert api.done[rows[150]].wait(WAIT) and records(checkpoint) == []
    api.release(rows[0])
    thread.join(WAIT)
    # Then the checkpoint and the report list the batches in the file's order, every row once
    (report, _), expected = outcome[0], names_in_file_order(rows, 100)
    assert api.answered == [rows[150], rows[0]]
    assert records(checkpoint) == expected and len(expected) == 6
    assert [line for batch in report.sent for _, line in batch.rows()] == list(range(2, 502))
    assert report.accepted == 6 and report.rows_sent == 500 and report.exit_status == 0


def test_a_concurrent_run_reports_exactly_what_the_serial_run_reports(tmp_path: Path) -> None:
    # Given a file with refused lines in three batches, a row the saga flags, and an API that takes at most 60 rows a batch
    lines = [HEADER, *ROWS[:40], MALFORMED["five columns"], *ROWS[40:300], MALFORMED["binary junk"], *ROWS[300:700]]
    lines += [MALFORMED["2015 row"], *ROWS[700:760]]
    # When the file is loaded one batch at a time, and again (a fresh API, a fresh checkpoint) eight at a time
    (tmp_path / "serial").mkdir()
    (tmp_path / "concurrent").mkdir()
    serial_path, concurrent_path = write(tmp_path / "serial" / "trips.csv", lines), write(tmp_path / "concurrent" / "trips.csv", lines)
    serial_api, concurrent_api = StateBudgetApi(most_rows=60), StateBudgetApi(most_rows=60)
    serial, serial_out = run(serial_path, serial_api, in_flight=1)
    concurrent, concurrent_out = run(concurrent_path, concurrent_api, in_flight=8)
    # Then both split every batch over 60 rows (a 413 under concurrency too) and stored every row once
    assert concurrent.split == serial.split > 0 and len(concurrent_api.rows) == len(serial_api.rows) == 760
    # and the concurrent run printed, counted and checkpointed exactly what the serial one did, in the same order
    assert concurrent_out.splitlines()[1:] == serial_out.splitlines()[1:]
    assert records(concurrent_path.with_name("trips.csv.onceflow-progress")) == records(
        serial_path.with_name("trips.csv.onceflow-progress")
    )
    assert ids_of(concurrent) == ids_of(serial) and concurrent.refusals == serial.refusals
    assert concurrent.states is not None and concurrent.states.stored == 760 and concurrent.refused == 3
    assert concurrent.exit_status == serial.exit_status == taxi_loader.NOT_STORED_EXIT_STATUS


# --- crashes, interruptions and reruns ---------------------------------------------------------


def test_a_crash_with_several_batches_in_flight_leaves_a_checkpoint_in_file_order_and_a_rerun_reports_a_clean_run(tmp_path: Path) -> None:
    # Given 1,000 rows in eleven batches, and a loader of four at a time that dies while the answers to batches 0 and 2 are held
    rows = ROWS[:1000]
    path = write(tmp_path / "trips.csv", [HEADER, *rows])
    api = HeldApi()
    api.hold(rows[0], rows[250])

    def crash_when_both_are_held(index: int) -> None:
        if rows[450] in api.bodies[index].decode():  # the fifth batch starts while the first and third wait
            assert api.waiting[rows[0]].wait(WAIT) and api.waiting[rows[250]].wait(WAIT)
            api.release(rows[0])  # batch 0 is answered
            raise SimulatedCrash("the loader died with batches in flight")

    api.before_start = crash_when_both_are_held
    with pytest.raises(SimulatedCrash):
        run(path, api, in_flight=4)
    api.release(rows[250])
    # Then the checkpoint holds a prefix of the file's batches, in file order, and no batch whose answer never came back
    written, in_order = records(tmp_path / "trips.csv.onceflow-progress"), names_in_file_order(rows, 100)
    assert written == in_order[: len(written)] and in_order[2] not in written
    # When it runs again, four at a time
    api.after_start = api.before_start = None
    report, out = run(path, api, in_flight=4)
    # Then every row is stored once: one execution per batch, and a batch's input is always the same (asserted by the API)
    assert len(api.executions) == len(in_order) == 11 and set(api.rows) == {content_id(row) for row in rows}
    # and the rerun's report is what a clean run of the file reports (a fresh API, one at a time)
    clean_path = write(tmp_path / "clean.csv", [HEADER, *rows])
    clean, clean_out = run(clean_path, FakeApi(), in_flight=1)
    assert summary(out)[3:] == summary(clean_out)[3:] and report.exit_status == clean.exit_status == 0
    assert ids_of(report) == ids_of(clean) and report.states is not None and report.states.stored == 1000
    assert report.skipped + report.accepted + report.duplicates == 11 and report.skipped == len(written)


def test_ctrl_c_with_several_batches_in_flight_exits_130_and_a_rerun_stores_every_row_once(tmp_path: Path, capsys: Any) -> None:
    # Given 800 rows, and a Ctrl-C that lands while the answer to the second batch is held and later ones are answered
    rows = ROWS[1000:1800]
    path = write(tmp_path / "trips.csv", [HEADER, *rows])
    api = HeldApi()
    api.hold(rows[150])

    def interrupt(index: int) -> None:
        if rows[650] in api.bodies[index].decode():
            assert api.waiting[rows[150]].wait(WAIT)
            raise KeyboardInterrupt

    api.before_start = interrupt
    # When the loader runs eight at a time
    status = taxi_loader.main([str(path), "--url", api.url, "--in-flight", "8", "--no-progress"], api=api)
    api.release(rows[150])
    # Then it exits 130, says how to go on, and its checkpoint holds at most the first batch: the second never answered
    assert status == taxi_loader.INTERRUPTED_EXIT_STATUS and "interrupted; run it again" in capsys.readouterr().err
    written = records(tmp_path / "trips.csv.onceflow-progress")
    assert written in ([], names_in_file_order(rows, 100)[:1])
    # When it runs again: every row is stored once, and the run exits 0
    api.before_start = api.after_start = None
    assert taxi_loader.main([str(path), "--url", api.url, "--no-progress"], api=api) == 0
    assert len(api.executions) == 9 and set(api.rows) == {content_id(row) for row in rows}
    assert records(tmp_path / "trips.csv.onceflow-progress")[len(written) :] == names_in_file_order(rows, 100)[len(written) :]


class InterruptedAt:
    """The file's second opening (the send pass), where Ctrl-C lands on the reading thread at line `line`, once `ready` is true."""

    def __init__(self, data: bytes, line: int, ready: Callable[[], bool]) -> None:
        self._stream = io.BytesIO(data)
        self._line = line
        self._ready = ready
        self._read = 0

    def readline(self, size: int = -1) -> bytes:
        self._read += 1
        if self._read == self._line:
            assert self._ready()
            raise KeyboardInterrupt
        return self._stream.readline(size)

    def __enter__(self) -> InterruptedAt:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def test_ctrl_c_on_the_reading_thread_with_batches_in_flight_leaves_a_file_order_prefix(tmp_path: Path) -> None:
    # Given 1,000 rows, an API holding its answer to the second batch, and a Ctrl-C that lands while the loader reads line 650
    rows = ROWS[:1000]
    path = write(tmp_path / "trips.csv", [HEADER, *rows])
    api = HeldApi()
    api.hold(rows[150])
    openings: list[Any] = []

    def opener() -> Any:
        data = path.read_bytes()
        openings.append(io.BytesIO(data) if not openings else InterruptedAt(data, 650, lambda: api.waiting[rows[150]].wait(WAIT)))
        return openings[-1]

    console = Console(io.StringIO(), io.StringIO(), False)
    # When the loader runs four at a time
    with pytest.raises(KeyboardInterrupt):
        load_file(path, api, LoadOptions(in_flight=4), console=console, opener=opener)
    api.release(rows[150])
    # Then its checkpoint holds at most the first batch: the second never answered, and nothing after it was written
    written, in_order = records(tmp_path / "trips.csv.onceflow-progress"), names_in_file_order(rows, 100)
    assert written in ([], in_order[:1])
    # When it runs again: every row is stored once, and the report is a clean run's
    api.after_start = None
    report, out = run(path, api, in_flight=4)
    clean, clean_out = run(write(tmp_path / "clean.csv", [HEADER, *rows]), FakeApi(), in_flight=1)
    assert len(api.executions) == len(in_order) and set(api.rows) == {content_id(row) for row in rows}
    assert summary(out)[3:] == summary(clean_out)[3:] and report.exit_status == clean.exit_status == 0
    assert report.skipped == len(written)


def test_two_loaders_of_one_file_at_once_store_every_row_once(tmp_path: Path) -> None:
    # Given 1,000 rows, and two loaders of that file (one checkpoint) started together against one API, eight at a time each
    rows = ROWS[:1000]
    path = write(tmp_path / "trips.csv", [HEADER, *rows])
    api = FakeApi()
    barrier = threading.Barrier(2)

    def loader() -> tuple[LoadReport, str]:
        barrier.wait(WAIT)
        return run(path, api, in_flight=8)

    (first, first_outcome), (second, second_outcome) = start(loader), start(loader)
    first.join(WAIT * 4)
    second.join(WAIT * 4)
    # Then both read every row back stored, each by its content id
    for report, _ in (first_outcome[0], second_outcome[0]):
        assert report.exit_status == 0 and report.states is not None and report.states.stored == 1000
        assert report.rows_not_sent == 0 and sorted(ids_of(report).values()) == sorted(content_id(row) for row in rows)
    # and the API holds each row once, under one execution per batch whose input never changed (asserted by the API)
    assert set(api.rows) == {content_id(row) for row in rows} and len(api.executions) == 11
    # and the checkpoint they shared is one a third run reads: it names every batch, and the third run sends nothing
    posts = api.posts
    third, _ = run(path, api)
    assert third.skipped == 11 and api.posts == posts and third.states is not None and third.states.stored == 1000


# --- stopping and push-back ---------------------------------------------------------------------


def test_an_unreachable_api_stops_a_concurrent_run_and_every_row_is_counted_once(tmp_path: Path) -> None:
    # Given an API that cannot be reached from the third batch on, and a run of four at a time
    rows = ROWS[:1500]
    path = write(tmp_path / "trips.csv", [HEADER, *rows])
    api = FakeApi()

    def down(index: int) -> None:
        if index >= 2:
            raise ApiUnavailable("POST /trips/batch: no answer after 6 attempts (URLError: refused)")

    api.before_start = down
    # When the file is loaded
    report, out = run(path, api, in_flight=4)
    # Then the run stops, and every data line is in exactly one count: acknowledged (the first two POSTs), or not sent
    assert report.stopped == "the API did not answer 3 batches in a row" and report.exit_status == taxi_loader.INCOMPLETE_EXIT_STATUS
    assert report.rows_acknowledged + report.rows_not_sent == report.data_lines == 1500 and report.rows_acknowledged in (199, 200)
    assert counts_line(out, "not sent") == f"    not sent {report.rows_not_sent:>7}  (a rerun sends them)"
    assert len(report.failed) >= 3 and api.posts <= 2 + 3 + 3  # no POST begins after the stop: at most three were in flight
    # When the API is back: a rerun sends the rest, and every row is stored once
    api.before_start = None
    report, _ = run(path, api, in_flight=4)
    assert report.skipped == 2 and report.accepted == 14 and len(api.executions) == 16
    assert report.states is not None and report.states.stored == 1500 and report.exit_status == 0


class ThrottlingApi(FakeApi):
    """Counts the POSTs in flight at once; its first answers are those of an HTTP client that retried a 429 first."""

    def __init__(self, throttled: int) -> None:
        super().__init__()
        self.throttled = throttled  # the first POSTs that are throttled once (then answered)
        self.in_flight = 0
        self.most_in_flight: list[int] = []  # POSTs in flight as each one started
        self._entered = threading.Barrier(4)

    def post_batch(self, body: bytes) -> Answer:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight.append(self.in_flight)
            number = len(self.most_in_flight)
        try:
            if number <= 4:
                self._entered.wait(WAIT)  # the first four are in flight together
            answer = super().post_batch(body)
            return Answer(answer.status, answer.document, pushed_back=1) if number <= self.throttled else answer
        finally:
            with self.lock:
                self.in_flight -= 1


def test_push_back_from_the_api_lowers_the_number_of_batches_in_flight(tmp_path: Path) -> None:
    # Given an API whose first four answers came after a 429, and a loader of four at a time
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:2000]])
    api = ThrottlingApi(throttled=4)
    # When the file is loaded
    report, _ = run(path, api, in_flight=4, read_back=False)
    # Then the first four went together, and the rest never had four in flight again before the limit grew back
    assert api.most_in_flight[:4] == [1, 2, 3, 4]
    assert max(api.most_in_flight[4:8]) <= 2
    # and every row went once
    assert report.rows_sent == 2000 and len(api.rows) == 2000 and report.exit_status == 0


@pytest.mark.parametrize("in_flight", ["0", "33", "-1"])
def test_in_flight_outside_1_to_32_is_a_usage_error(tmp_path: Path, in_flight: str, capsys: Any) -> None:
    # Given a file
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS[:10]])
    # When the loader is asked for that many batches at once
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(path), "--url", FakeApi.url, "--in-flight", in_flight], api=FakeApi())
    # Then it exits 2, naming the range
    assert stopped.value.code == 2 and "--in-flight must be 1..32" in capsys.readouterr().err
    # and the library says so too
    with pytest.raises(taxi_loader.UsageError, match=r"in_flight must be 1\.\.32"):
        run(path, FakeApi(), in_flight=int(in_flight))
