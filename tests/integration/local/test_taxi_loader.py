"""onceflow.clients.taxi_loader against the local server (`make serve`; the session fixture
`local_stack`): real HTTP on localhost to the taxi API, its real authorizer, the saga on moto's
Step Functions, the trips and status tables in the embedded DynamoDB.

60 real rows and a few that the saga flags go in once each, and the summary reports the flags
with their reasons (exit 1: not every row stored); a loader that dies midway and runs again stores
no row twice, and the batches it sends again (and every batch, once the checkpoint is gone) are
answered as duplicates; a CRLF copy with a byte-order mark, or a re-saved copy, of a loaded file
adds nothing to the trips table, and rows loaded then posted alone to /trips have the loader's ids;
a truncated last line under the header is refused by its line while a batch too large for the API
is split; a file with binary junk and a 2009-layout header gets per-line errors while its rows go
in; --env reads the URL and the key's secret from the outputs file. With several batches in flight
(--in-flight), a loader killed while batches are in flight and run again stores every row once and
reports what a clean one-at-a-time run reports, and two loaders of one file at once store every row
once.

Each test takes its own rows of the sample (content ids: a row another test stored is the same row).
The files are small and their batches smaller still: what is under test is how batches, crashes
and reruns meet, not volume (tests/integration/taxi_etl/test_taxi_saga.py stores 2,000 rows)."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from devtools.taxi_rows import DROPOFF_BEFORE_PICKUP, SPRING_FORWARD_GAP, sample_header, sample_lines, schema_rows
from onceflow.clients import taxi_loader
from onceflow.clients.taxi_loader import Answer, Console, HttpTaxiApi, LoadOptions, LoadReport, load_file
from onceflow.runtime.taxi_etl import contract
from runtime.taxi_etl.store import STATUS_REASON
from tests.integration.local.raw_http import request

# Unmeasured: they replay paths that lighter tests measure, at more CPU than they add to coverage
# (docs/development.md)
pytestmark = pytest.mark.no_cover

SCHEMA_ROWS = schema_rows()
HEADER, ROWS = sample_header(), sample_lines()
WAIT_SECONDS = 120.0
READ_BACK_PAUSE = 0.25  # the local stack settles a batch's rows within a second or two


class SimulatedCrash(Exception):
    """The loader's process dies here."""


class CrashAfter:
    """The real API, until the loader dies right after the API answered its `posts`-th batch (before the checkpoint)."""

    def __init__(self, api: HttpTaxiApi, posts: int) -> None:
        self._api = api
        self._posts = posts
        self.url = api.url
        self.executions: list[str] = []
        self._lock = threading.Lock()  # several batches in flight

    def post_batch(self, body: bytes) -> Answer:
        answer = self._api.post_batch(body)
        with self._lock:
            self.executions.append(str(answer.document["execution"]))
            answered = len(self.executions)
        if answered == self._posts:
            raise SimulatedCrash(f"the loader died after the answer to batch {answer.document['execution']}")
        return answer

    def get_row(self, store_request_id: str) -> Answer:
        return self._api.get_row(store_request_id)


def wait_until_quiet(local_stack: Any, timeout: float = WAIT_SECONDS) -> None:
    """Until no execution of the taxi state machine is running (a row is stored before its execution ends)."""
    stepfunctions = local_stack.client("stepfunctions")
    arn = taxi_outputs(local_stack)[contract.OUTPUT_STATE_MACHINE_ARN]
    deadline = time.monotonic() + timeout
    while stepfunctions.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]:
        assert time.monotonic() < deadline, f"executions still running after {timeout} s"
        time.sleep(0.2)


def write(path: Path, lines: list[str | bytes], *, ending: bytes = b"\n", last_ending: bool = True) -> Path:
    data = ending.join(line if isinstance(line, bytes) else line.encode() for line in lines)
    path.write_bytes(data + (ending if last_ending else b""))
    return path


def api_of(local_stack: Any) -> HttpTaxiApi:
    return HttpTaxiApi(local_stack.taxi_url, local_stack.api_key)


def load(path: Path, api: Any, **options: Any) -> tuple[LoadReport, list[str]]:
    """The loader on `path`; its read-back pauses at most READ_BACK_PAUSE between passes (its growing
    pauses, up to 5 s, are for a cloud; tests/unit/test_taxi_loader.py tests them on a fake clock)."""
    console = Console(io.StringIO(), io.StringIO(), False)
    options = LoadOptions(wait_seconds=WAIT_SECONDS, **options)
    report = load_file(path, api, options, console=console, sleep=lambda seconds: time.sleep(min(seconds, READ_BACK_PAUSE)))
    return report, console.out.getvalue().splitlines()  # type: ignore[attr-defined]


def taxi_outputs(local_stack: Any) -> dict[str, str]:
    document = json.loads(Path(local_stack.outputs_file).read_text())
    (outputs,) = [outputs for stack, outputs in document.items() if stack.endswith("-TaxiEtl")]
    return {str(key): str(value) for key, value in outputs.items()}


def ids_of(report: LoadReport) -> dict[int, str]:
    """The file's line number -> StoreRequestId of every row the API acknowledged."""
    return {line: store_request_id for batch in report.sent for store_request_id, line in batch.rows()}


def trips_table(local_stack: Any) -> str:
    return taxi_outputs(local_stack)[contract.OUTPUT_TRIPS_TABLE]


def trips_count(local_stack: Any) -> int:
    """Items in the trips table, counted through the embedded DynamoDB."""
    pages = (
        local_stack.client("dynamodb")
        .get_paginator("scan")
        .paginate(TableName=trips_table(local_stack), Select="COUNT", ConsistentRead=True)
    )
    return sum(page["Count"] for page in pages)


def trips_of(local_stack: Any, ids: set[str]) -> list[dict[str, Any]]:
    """The trips items under these ids."""
    dynamodb, table, items = local_stack.client("dynamodb"), trips_table(local_stack), []
    ordered = sorted(ids)
    for start in range(0, len(ordered), 100):
        keys = [{contract.KEY_STORE_REQUEST_ID: {"S": store_request_id}} for store_request_id in ordered[start : start + 100]]
        answer = dynamodb.batch_get_item(RequestItems={table: {"Keys": keys, "ConsistentRead": True}})
        assert not answer.get("UnprocessedKeys")
        items.extend(answer["Responses"][table])
    return items


def trip_of(item: dict[str, Any]) -> tuple[str, ...]:
    """What makes a trip (times, zones, amount), to count how often each trip was stored."""
    return tuple(
        str(next(iter(item[name].values()))) for name in ("pickup_at", "dropoff_at", "pu_location_id", "do_location_id", "total_amount")
    )


def assert_stored_once(local_stack: Any, report: LoadReport, rows: int) -> list[dict[str, Any]]:
    trips = trips_of(local_stack, set(ids_of(report).values()))
    assert len(trips) == rows
    assert len({trip_of(item) for item in trips}) == rows  # no trip under two ids
    return trips


def test_every_valid_row_is_stored_once_and_flagged_rows_are_reported_with_their_reasons(local_stack: Any, tmp_path: Path) -> None:
    # Given 60 real rows, two that fail validation and one that fails transformation, in batches of 25 lines
    lines: list[str | bytes] = [HEADER, *ROWS[1500:1525], DROPOFF_BEFORE_PICKUP, *ROWS[1600:1625], SPRING_FORWARD_GAP]
    lines += [*ROWS[1700:1710], DROPOFF_BEFORE_PICKUP.replace("16:30:00", "16:20:00")]
    path = write(tmp_path / "october.csv", lines)
    # When the loader sends the file to the local API
    report, out = load(path, api_of(local_stack), batch_lines=25)
    # Then every batch was accepted, none refused, and every row was read back settled
    assert report.failed == [] and report.refused_total == 0
    assert (report.batches, report.accepted, report.duplicates) == (3, 3, 0)
    states = report.states
    assert states is not None and states.pending == [] and states.unreadable == []
    # and the 60 real rows are stored, each once, and the three others are not
    assert states.stored == 60
    assert_stored_once(local_stack, report, 60)
    # and the flagged rows are reported by phase, reason and detail, each with its line; not all stored: exit 1
    assert states.flagged == {("validation", 1, "dropoff_before_pickup"): 2, ("transformation", 2, "nonexistent_local_time"): 1}
    assert "      validation (reason 1) dropoff_before_pickup: 2" in out
    assert "      transformation (reason 2) nonexistent_local_time: 1" in out
    flagged_lines = sorted(int(line.split()[2]) for line in out if line.startswith("FLAGGED line"))
    assert flagged_lines == [27, 53, 64]
    assert report.exit_status == taxi_loader.NOT_STORED_EXIT_STATUS
    # and the status tables hold the same codes
    dynamodb = local_stack.client("dynamodb")
    validation = taxi_outputs(local_stack)[contract.OUTPUT_STATUS_TABLES[contract.PHASE_VALIDATION]]
    flagged_ids = [store_request_id for _, store_request_id, _ in states.flagged_rows]
    reasons = [
        dynamodb.get_item(TableName=validation, Key={contract.KEY_STORE_REQUEST_ID: {"S": store_request_id}}, ConsistentRead=True)["Item"]
        for store_request_id in flagged_ids
    ]
    assert sorted(item[STATUS_REASON]["N"] for item in reasons) == ["1", "1", "2"]


def test_a_crash_midway_and_a_rerun_store_every_row_once_and_resent_batches_are_duplicates(local_stack: Any, tmp_path: Path) -> None:
    # Given 60 other real rows in three batches, and a loader that dies right after the API answered its second batch
    path = write(tmp_path / "crash.csv", [HEADER, *ROWS[300:360]])
    crashing = CrashAfter(api_of(local_stack), posts=2)
    with pytest.raises(SimulatedCrash):
        load(path, crashing, batch_lines=25, in_flight=1)  # the serial loader; several in flight: the test after this one
    # and whose batches' executions have ended since (while one runs, the API answers its resend 202 with the same
    # ids, as StartExecution does: still one execution; once it has ended, 200 and "duplicate": true)
    wait_until_quiet(local_stack)
    # When it runs again
    report, out = load(path, api_of(local_stack), batch_lines=25, in_flight=1)
    # Then the first batch is skipped (acknowledged), the second is sent again and answered as a duplicate, the third is new,
    # and the read-back covers the rows of all three
    assert (report.skipped, report.duplicates, report.accepted) == (1, 1, 1)
    assert report.exit_status == 0
    # and every row is stored once: 60 trips, none twice
    assert report.states is not None and report.states.stored == 60 and report.states.flagged_total == 0
    assert_stored_once(local_stack, report, 60)
    # When every batch's execution has ended, and the checkpoint is lost and the file is loaded again
    wait_until_quiet(local_stack)
    (tmp_path / "crash.csv.onceflow-progress").unlink()
    report, out = load(path, api_of(local_stack), batch_lines=25, read_back=False)
    # Then every batch is answered as a duplicate, and still no row is stored twice
    assert (report.skipped, report.duplicates, report.accepted) == (0, 3, 0)
    assert (
        "  batches          3  (3 sent: 0 accepted, 3 answered as duplicates; 0 acknowledged by an earlier run; 0 with no row; 0 not sent)"
        in out
    )
    assert_stored_once(local_stack, report, 60)


def data_line_counts(out: list[str]) -> list[str]:
    """The summary's counts of the data lines, from `data lines` to the verdict: what became of every row."""
    start = next(number for number, line in enumerate(out) if line.startswith("  data lines"))
    return out[start:]


def test_a_crash_with_batches_in_flight_and_a_rerun_store_every_row_once_and_report_a_clean_run(local_stack: Any, tmp_path: Path) -> None:
    # Given 60 other real rows and one the saga flags, in 11 batches of 6, and a loader of four at a time that dies right
    # after the API answered its third batch, with others in flight
    flagged = DROPOFF_BEFORE_PICKUP.replace("16:30:00", "16:05:00")
    path = write(tmp_path / "inflight.csv", [HEADER, *ROWS[850:880], flagged, *ROWS[975:1005]])
    crashing = CrashAfter(api_of(local_stack), posts=3)
    with pytest.raises(SimulatedCrash):
        load(path, crashing, batch_lines=6, in_flight=4)
    # Then the checkpoint holds acknowledged batches only, in the file's order: never a batch whose answer did not come back
    checkpoint = tmp_path / "inflight.csv.onceflow-progress"
    written = [json.loads(line)["execution"] for line in checkpoint.read_text().splitlines()[1:]]
    assert set(written) <= set(crashing.executions) and len(written) <= 3
    # When every execution has ended and the loader runs again, four at a time
    wait_until_quiet(local_stack)
    report, out = load(path, api_of(local_stack), batch_lines=6, in_flight=4)
    # Then every batch was acknowledged once in this run or the last, and every valid row is stored once
    assert report.skipped == len(written) and report.skipped + report.accepted + report.duplicates == report.batches == 11
    assert report.failed == [] and report.states is not None and report.states.stored == 60
    assert_stored_once(local_stack, report, 60)
    # and its report is what a clean run, one batch at a time, reports of the same file (no checkpoint: every batch again)
    wait_until_quiet(local_stack)
    checkpoint.unlink()
    clean, clean_out = load(path, api_of(local_stack), batch_lines=6, in_flight=1)
    assert clean.duplicates == 11 and ids_of(clean) == ids_of(report)
    assert data_line_counts(out) == data_line_counts(clean_out) and report.exit_status == clean.exit_status
    assert report.exit_status == taxi_loader.NOT_STORED_EXIT_STATUS and "    flagged        1" in out


def test_two_loaders_of_one_file_at_once_store_every_row_once(local_stack: Any, tmp_path: Path) -> None:
    # Given 72 other real rows, and two loaders of that file (one checkpoint), four of its six batches in flight each
    rows = [*ROWS[1100:1136], *ROWS[100:136]]
    path = write(tmp_path / "twice.csv", [HEADER, *rows])
    barrier = threading.Barrier(2)
    reports: list[LoadReport] = []

    def loader() -> None:
        barrier.wait(30)
        report, _ = load(path, api_of(local_stack), batch_lines=13, in_flight=4)
        reports.append(report)

    # When both run at once against the local API
    threads = [threading.Thread(target=loader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_SECONDS * 2)
    # Then both read every row back stored, by the same ids
    assert len(reports) == 2
    for report in reports:
        assert report.failed == [] and report.exit_status == 0 and report.states is not None and report.states.stored == 72
    assert ids_of(reports[0]) == ids_of(reports[1])
    # and the trips table holds each row once: 72 trips, none under two ids
    assert_stored_once(local_stack, reports[0], 72)


def test_a_crlf_copy_with_a_byte_order_mark_or_a_resaved_copy_of_a_loaded_file_adds_no_trip(local_stack: Any, tmp_path: Path) -> None:
    # Given 36 real rows loaded in full, in two batches (a batch's lines count the header), and every execution ended
    rows = ROWS[1250:1286]
    first, _ = load(write(tmp_path / "loaded.csv", [HEADER, *rows]), api_of(local_stack), batch_lines=19)
    assert first.exit_status == 0 and first.states is not None and first.states.stored == 36
    wait_until_quiet(local_stack)
    before = trips_count(local_stack)
    # When a CRLF copy with a byte-order mark (another file: no checkpoint of its own) is loaded
    copy = write(tmp_path / "copy.csv", [b"\xef\xbb\xbf" + HEADER.encode(), *(row.encode() for row in rows)], ending=b"\r\n")
    again, _ = load(copy, api_of(local_stack), batch_lines=19)
    # Then its rows have the first load's ids, its batches are the same executions (duplicates), and every row reads stored
    assert ids_of(again) == ids_of(first)
    assert (again.accepted, again.duplicates) == (0, 2)
    assert again.exit_status == 0 and again.states is not None and again.states.stored == 36
    # When a re-saved copy (other spellings of the same amounts, batches of 13 lines) is loaded
    resaved_rows = [row.replace(",0.5,", ",0.50,") for row in rows]
    assert all(row != resaved for row, resaved in zip(rows, resaved_rows, strict=True))  # every row is spelled otherwise
    resaved = write(tmp_path / "resaved.csv", [HEADER, *resaved_rows])
    third, _ = load(resaved, api_of(local_stack), batch_lines=13)
    # Then it has the same ids too: new executions, whose store phase finds every trip already there
    assert ids_of(third) == ids_of(first) and third.accepted == 3
    assert third.exit_status == 0 and third.states is not None and third.states.stored == 36
    # and the trips table holds not one item more
    wait_until_quiet(local_stack)
    assert trips_count(local_stack) == before
    assert_stored_once(local_stack, third, 36)


def test_rows_loaded_then_posted_alone_to_trips_get_the_loaders_ids_and_start_nothing(local_stack: Any, tmp_path: Path) -> None:
    # Given 20 real rows loaded by the loader, and every execution ended
    rows = ROWS[1450:1470]
    report, _ = load(write(tmp_path / "single.csv", [HEADER, *rows]), api_of(local_stack))
    assert report.exit_status == 0
    wait_until_quiet(local_stack)
    before = trips_count(local_stack)
    # When each is posted alone to /trips, unkeyed, with CRLF
    answers = []
    for row in rows:
        headers = [("Authorization", local_stack.api_key), ("content-type", "text/csv")]
        status, _, body = request(f"{local_stack.taxi_url}{contract.ROUTE_TRIP}", "POST", f"{row}\r\n".encode(), headers)
        answers.append((status, json.loads(body)))
    # Then each answer is a 200 duplicate under the id the loader's batch gave it: the trip is stored, nothing started
    assert [answer["StoreRequestId"] for _, answer in answers] == [ids_of(report)[line] for line in range(2, 22)]
    assert all(status == 200 and answer["duplicate"] is True and answer["execution"] is None for status, answer in answers)
    assert {answer["state"] for _, answer in answers} == {"stored"}
    # and the trips table holds not one item more
    wait_until_quiet(local_stack)
    assert trips_count(local_stack) == before


def test_a_truncated_last_line_is_refused_under_the_header_and_a_batch_over_the_apis_limit_is_split(
    local_stack: Any, tmp_path: Path
) -> None:
    # Given the header, 101 real rows and a last line cut at its last comma, without a line ending (17 fields: alone,
    # the shape of a 2017 trip), in one batch of 250 lines: the dev API takes at most 100 lines a batch
    truncated = ROWS[1900].rsplit(",", 1)[0]
    path = write(tmp_path / "cut.csv", [HEADER, *ROWS[1800:1901], truncated], last_ending=False)
    # When the loader sends it
    report, out = load(path, api_of(local_stack), batch_lines=250)
    # Then the cut line is refused by its line, naming the header's count, and not sent
    assert [line for line in out if line.startswith("REFUSED")] == [
        "REFUSED line 103 has 17 columns, but the header (line 1) has 18 (a truncated or shifted row)"
    ]
    # and the API's 413 (101 lines, the limit is 100) split the batch: its halves, each with the header, were accepted
    assert report.split == 1 and report.accepted == 2 and report.failed == []
    assert any(line.startswith("SPLIT lines 2-102: HTTP 413 (the batch has 101 lines; the limit is 100)") for line in out)
    # and the 101 rows are stored, once each; one line was not: exit 1
    assert report.states is not None and report.states.stored == 101
    assert_stored_once(local_stack, report, 101)
    assert report.exit_status == taxi_loader.NOT_STORED_EXIT_STATUS
    assert "    refused        1  (each listed above as REFUSED; not stored)" in out


def test_a_malformed_file_gets_per_line_errors_and_its_rows_still_go_in(local_stack: Any, tmp_path: Path, capsys: Any) -> None:
    # Given a file of real rows with binary junk lines, a 2009-layout header and rows, and a short line among them
    lines: list[str | bytes] = [HEADER, *ROWS[600:650], b"\x89PNG\r\n\x1a", b"\x00\x00\xff\xfe\x00junk"]
    lines += [SCHEMA_ROWS["yellow_2009"]["header"], SCHEMA_ROWS["yellow_2009"]["row"], *ROWS[650:700], "1,2,3"]
    path = write(tmp_path / "mixed.csv", lines)
    # When the loader runs from its command line against the local API
    status = taxi_loader.main([str(path), "--url", local_stack.taxi_url, "--api-key", local_stack.api_key, "--no-progress"])
    out = capsys.readouterr().out.splitlines()
    # Then each bad line has its error, numbered as in the file, in the API's words
    refused = [line for line in out if line.startswith("REFUSED")]
    assert refused == [
        "REFUSED line 52 is not UTF-8 text; send CSV lines",  # b"\x89PNG\r", the first line of a PNG
        "REFUSED line 53 contains control characters; send CSV text, not binary data",
        "REFUSED line 54 is not UTF-8 text; send CSV lines",
        "REFUSED line 55: the CSV header names the yellow 2009-2014 (18 columns, coordinates, no zone ids) layout; "
        "the yellow 2009-2014 (18 columns, coordinates, no zone ids) layout is not taken here; "
        "send yellow-trip records of 2017 or later, which carry zone ids",
        "REFUSED line 56 has the yellow 2009-2014 (18 columns, coordinates, no zone ids) layout; "
        "the yellow 2009-2014 (18 columns, coordinates, no zone ids) layout is not taken here; "
        "send yellow-trip records of 2017 or later, which carry zone ids",
        "REFUSED line 107 has 3 columns; a yellow-taxi trip has 17 to 20",
    ]
    # and the run went on: the batch around them was sent and its 100 rows are stored; the refused lines make it exit 1
    assert status == taxi_loader.NOT_STORED_EXIT_STATUS
    assert "    stored       100" in out and "    refused        6  (each listed above as REFUSED; not stored)" in out
    assert out[-1] == "NOT ALL STORED (exit 1): flagged or refused lines above; fix them and load them from a new file"
    stored = trips_of(local_stack, {taxi_loader.content_id(row) for row in [*ROWS[600:700]]})
    assert len(stored) == 100


def test_env_reads_the_url_and_the_key_from_the_outputs_file_and_the_secret(
    local_stack: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Given the local environment's outputs file (its LocalEndpointUrl says where the secret is), no key in the
    # environment, and the embedded cloud's credentials
    monkeypatch.delenv(taxi_loader.API_KEY_VARIABLE, raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", local_stack.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", local_stack.secret_access_key)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    path = write(tmp_path / "env.csv", [HEADER, *ROWS[800:830]])
    # When the loader runs with --env local
    status = taxi_loader.main([str(path), "--env", "local", "--outputs-file", str(local_stack.outputs_file), "--no-progress"])
    out = capsys.readouterr().out
    # Then it found the API and its key, and the rows are stored: exit 0
    assert status == 0
    assert f"to {taxi_outputs(local_stack)[contract.OUTPUT_API_URL].rstrip('/')}{contract.ROUTE_TRIP_BATCH}" in out
    assert "    stored        30" in out and "ALL STORED (exit 0): every data line was stored" in out
