"""onceflow.clients.taxi_loader against the local server (`make serve`; the session fixture
`local_stack`): real HTTP on localhost to the taxi API, its real authorizer, the saga on moto's
Step Functions, the trips and status tables in the embedded DynamoDB.

250 real rows and a few that the saga flags go in once each, and the summary reports the flags
with their reasons; a loader that dies midway and runs again stores no row twice, and the batches
it sends again (and every batch, once the checkpoint is gone) are answered as duplicates; a file
with binary junk and a 2009-layout header gets per-line errors while its rows go in; --env reads
the URL and the key's secret from the outputs file."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from devtools.taxi_rows import DROPOFF_BEFORE_PICKUP, SPRING_FORWARD_GAP, sample_header, sample_lines, schema_rows
from onceflow.clients import taxi_loader
from onceflow.clients.taxi_loader import Answer, Console, HttpTaxiApi, LoadOptions, LoadReport, load_file
from onceflow.runtime.taxi_etl import contract
from runtime.taxi_etl.store import STATUS_REASON

SCHEMA_ROWS = schema_rows()
HEADER, ROWS = sample_header(), sample_lines()
WAIT_SECONDS = 120.0


class SimulatedCrash(Exception):
    """The loader's process dies here."""


class CrashAfter:
    """The real API, until the loader dies right after the API answered its `posts`-th batch (before the checkpoint)."""

    def __init__(self, api: HttpTaxiApi, posts: int) -> None:
        self._api = api
        self._posts = posts
        self.url = api.url
        self.sent: list[str] = []

    def post_batch(self, body: bytes, key: str) -> Answer:
        answer = self._api.post_batch(body, key)
        self.sent.append(key)
        if len(self.sent) == self._posts:
            raise SimulatedCrash(f"the loader died after the answer to batch {key}")
        return answer

    def get_row(self, store_request_id: str) -> Answer:
        return self._api.get_row(store_request_id)


def wait_until_ended(local_stack: Any, names: list[str], timeout: float = WAIT_SECONDS) -> None:
    """Until none of the named executions of the taxi state machine is running."""
    stepfunctions = local_stack.client("stepfunctions")
    prefix = taxi_outputs(local_stack)[contract.OUTPUT_STATE_MACHINE_ARN].replace(":stateMachine:", ":execution:", 1)
    deadline = time.monotonic() + timeout
    while any(stepfunctions.describe_execution(executionArn=f"{prefix}:{name}")["status"] == "RUNNING" for name in names):
        assert time.monotonic() < deadline, f"executions {names} still running after {timeout} s"
        time.sleep(0.2)


def write(path: Path, lines: list[str | bytes]) -> Path:
    path.write_bytes(b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n" for line in lines))
    return path


def api_of(local_stack: Any) -> HttpTaxiApi:
    return HttpTaxiApi(local_stack.taxi_url, local_stack.api_key)


def load(path: Path, api: Any, **options: Any) -> tuple[LoadReport, list[str]]:
    console = Console(io.StringIO(), io.StringIO(), False)
    report = load_file(path, api, LoadOptions(wait_seconds=WAIT_SECONDS, **options), console=console)
    return report, console.out.getvalue().splitlines()  # type: ignore[attr-defined]


def taxi_outputs(local_stack: Any) -> dict[str, str]:
    document = json.loads(Path(local_stack.outputs_file).read_text())
    (outputs,) = [outputs for stack, outputs in document.items() if stack.endswith("-TaxiEtl")]
    return {str(key): str(value) for key, value in outputs.items()}


def items_of_file(local_stack: Any, table: str, sha256: str) -> list[dict[str, Any]]:
    """Every item of `table` whose id the loader's keys for this file gave (kb-<hash>-<first>-<last>-<n>)."""
    dynamodb = local_stack.client("dynamodb")
    items: list[dict[str, Any]] = []
    for page in dynamodb.get_paginator("scan").paginate(
        TableName=table,
        ConsistentRead=True,
        FilterExpression="begins_with(#id, :prefix)",
        ExpressionAttributeNames={"#id": contract.KEY_STORE_REQUEST_ID},
        ExpressionAttributeValues={":prefix": {"S": f"kb-{sha256[: taxi_loader.KEY_HASH_CHARS]}-"}},
    ):
        items.extend(page["Items"])
    return items


def trip_of(item: dict[str, Any]) -> tuple[str, ...]:
    """What makes a trip (times, zones, amount), to count how often each trip was stored."""
    return tuple(
        str(next(iter(item[name].values()))) for name in ("pickup_at", "dropoff_at", "pu_location_id", "do_location_id", "total_amount")
    )


def assert_stored_once(local_stack: Any, report: LoadReport, rows: int) -> list[dict[str, Any]]:
    trips = items_of_file(local_stack, taxi_outputs(local_stack)[contract.OUTPUT_TRIPS_TABLE], report.sha256)
    assert len(trips) == rows
    assert len({trip_of(item) for item in trips}) == rows  # no trip under two ids
    return trips


def test_every_valid_row_is_stored_once_and_flagged_rows_are_reported_with_their_reasons(local_stack: Any, tmp_path: Path) -> None:
    # Given 250 real rows, two that fail validation and one that fails transformation
    lines: list[str | bytes] = [HEADER, *ROWS[:100], DROPOFF_BEFORE_PICKUP, *ROWS[100:200], SPRING_FORWARD_GAP]
    lines += [*ROWS[200:250], DROPOFF_BEFORE_PICKUP.replace("16:30:00", "16:20:00")]
    path = write(tmp_path / "october.csv", lines)
    # When the loader sends the file to the local API
    report, out = load(path, api_of(local_stack))
    # Then every batch was accepted, none refused, and every row was read back settled
    assert report.exit_status == 0 and report.failed == [] and report.refused == 0
    assert (report.batches, report.accepted, report.duplicates) == (3, 3, 0)
    states = report.states
    assert states is not None and states.pending == [] and states.unreadable == []
    # and the 250 real rows are stored, each once, and the three others are not
    assert states.stored == 250
    assert_stored_once(local_stack, report, 250)
    # and the flagged rows are reported by phase, reason and detail, each with its line
    assert states.flagged == {("validation", 1, "dropoff_before_pickup"): 2, ("transformation", 2, "nonexistent_local_time"): 1}
    assert "      validation (reason 1) dropoff_before_pickup: 2" in out
    assert "      transformation (reason 2) nonexistent_local_time: 1" in out
    flagged_lines = sorted(int(line.split()[2]) for line in out if line.startswith("FLAGGED line"))
    assert flagged_lines == [102, 203, 254]
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
    # Given 250 other real rows, and a loader that dies right after the API answered its second batch
    path = write(tmp_path / "crash.csv", [HEADER, *ROWS[300:550]])
    crashing = CrashAfter(api_of(local_stack), posts=2)
    with pytest.raises(SimulatedCrash):
        load(path, crashing)
    # and whose batches' executions have ended since (while one runs, the API answers its resend 202 with the same
    # ids, as StartExecution does: still one execution; once it has ended, 200 and "duplicate": true)
    wait_until_ended(local_stack, [f"kb-{key}" for key in crashing.sent])
    # When it runs again
    report, out = load(path, api_of(local_stack))
    # Then the first batch is skipped (acknowledged), the second is sent again and answered as a duplicate, the third is new,
    # and the read-back covers the rows of all three
    assert (report.skipped, report.duplicates, report.accepted) == (1, 1, 1)
    assert report.exit_status == 0
    # and every row is stored once: 250 trips, none twice
    assert report.states is not None and report.states.stored == 250 and report.states.flagged_total == 0
    assert_stored_once(local_stack, report, 250)
    # When every batch's execution has ended (a row is stored before its execution is marked ended),
    wait_until_ended(local_stack, [f"kb-{batch.key}" for batch in report.sent])
    # and the checkpoint is lost and the file is loaded again in the same batches
    (tmp_path / "crash.csv.onceflow-progress").unlink()
    report, out = load(path, api_of(local_stack), read_back=False)
    # Then every batch is answered as a duplicate, and still no row is stored twice
    assert (report.skipped, report.duplicates, report.accepted) == (0, 3, 0)
    assert (
        "  batches          3  (3 sent: 0 accepted, 3 answered as duplicates; 0 acknowledged by an earlier run; 0 with no row; 0 not sent)"
        in out
    )
    assert_stored_once(local_stack, report, 250)


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
    # and the run went on: the batch around them was sent, its 100 rows are stored, and the exit status is 0
    assert status == 0
    assert "    stored       100" in out
    sha256 = taxi_loader.scan_file(path.open("rb"))[0]
    assert len(items_of_file(local_stack, taxi_outputs(local_stack)[contract.OUTPUT_TRIPS_TABLE], sha256)) == 100


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
    # Then it found the API and its key, and the rows are stored
    assert status == 0
    assert f"to {taxi_outputs(local_stack)[contract.OUTPUT_API_URL].rstrip('/')}{contract.ROUTE_TRIP_BATCH}" in out
    assert "    stored        30" in out
