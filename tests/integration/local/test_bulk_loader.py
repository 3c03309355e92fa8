"""`onceflow-taxi-load` against the local server (`make serve`; the session fixture `local_stack`) through the bulk
route: the file uploaded to the embedded S3's ingest bucket, POST /loads and GET /loads/{LoadId} over real HTTP
behind the real authorizer, the bulk state machine's Distributed Map on moto's Step Functions, the trips table in the
embedded DynamoDB.

Real rows of tests/data/taxi_etl as a CSV file and as its Parquet file (tests/trip_parquet.py): every row stored once
under the id /trips gives it, and loading the file again, or its Parquet twin, adds no trip; a loader killed while it
follows the load, run again, stores every row once; a spreadsheet's CSV (a byte-order mark, CRLF) loads. Each test
takes its own rows of the sample (content ids: a row another test stored is the same row)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devtools.taxi_rows import sample_header, sample_lines
from onceflow.clients import taxi_loader
from runtime.taxi_etl import contract
from runtime.taxi_etl.requests import content_id
from tests.trip_parquet import sample_cells, trip_table, write_parquet

ROOT = Path(__file__).resolve().parents[3]
HEADER, ROWS = sample_header(), sample_lines()
WAIT = "120"  # --wait: a load of tens of rows takes a few seconds here


def write(path: Path, lines: list[str], ending: str = "\n", prefix: bytes = b"") -> Path:
    path.write_bytes(prefix + "".join(f"{line}{ending}" for line in lines).encode())
    return path


def taxi_outputs(local_stack: Any) -> dict[str, str]:
    document = json.loads(Path(local_stack.outputs_file).read_text())
    (outputs,) = [outputs for stack, outputs in document.items() if stack.endswith("-TaxiEtl")]
    return {str(key): str(value) for key, value in outputs.items()}


def trips_count(local_stack: Any) -> int:
    """Items in the trips table, counted through the embedded DynamoDB."""
    table = taxi_outputs(local_stack)[contract.OUTPUT_TRIPS_TABLE]
    pages = local_stack.client("dynamodb").get_paginator("scan").paginate(TableName=table, Select="COUNT", ConsistentRead=True)
    return sum(page["Count"] for page in pages)


def stored_ids(local_stack: Any, ids: set[str]) -> set[str]:
    """Which of these ids the trips table holds."""
    dynamodb, table, found = local_stack.client("dynamodb"), taxi_outputs(local_stack)[contract.OUTPUT_TRIPS_TABLE], set()
    ordered = sorted(ids)
    for start in range(0, len(ordered), 100):
        keys = [{contract.KEY_STORE_REQUEST_ID: {"S": row_id}} for row_id in ordered[start : start + 100]]
        answer = dynamodb.batch_get_item(RequestItems={table: {"Keys": keys, "ConsistentRead": True}})
        assert not answer.get("UnprocessedKeys")
        found |= {item[contract.KEY_STORE_REQUEST_ID]["S"] for item in answer["Responses"][table]}
    return found


def loader_arguments(local_stack: Any, path: Path) -> list[str]:
    return [str(path), "--env", "local", "--outputs-file", str(local_stack.outputs_file), "--no-progress", "--wait", WAIT]


def load(local_stack: Any, path: Path, capsys: Any) -> tuple[int, str]:
    """The CLI in this process, with --env local and nothing else: its exit status and what it printed."""
    status = taxi_loader.main(loader_arguments(local_stack, path))
    return status, capsys.readouterr().out


@pytest.fixture(autouse=True)
def nothing_exported(local_stack: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """As from a second shell: no API key, no endpoint; the embedded cloud's key pair (the outputs file's)."""
    monkeypatch.delenv(taxi_loader.API_KEY_VARIABLE, raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    for name, value in local_stack.aws_environment().items():
        monkeypatch.setenv(name, value)


def test_a_csv_and_its_parquet_store_every_row_once_and_a_second_run_adds_nothing(local_stack: Any, tmp_path: Path, capsys: Any) -> None:
    # Given 60 real rows as a CSV file, and the same rows as a Parquet file with TLC's types
    rows = list(ROWS[1000:1060])
    csv_path = write(tmp_path / "october.csv", [HEADER, *rows])
    parquet_path = write_parquet(tmp_path / "october.parquet", trip_table(sample_cells()[1000:1060]))
    ids = {content_id(row) for row in rows}
    before = trips_count(local_stack)

    # When the CSV is loaded with --env local
    status, out = load(local_stack, csv_path, capsys)
    # Then every row is stored once, under the id /trips gives it, and the report says so
    assert status == 0, out
    assert "stored                     60" in out and "ALL STORED (exit 0)" in out
    assert stored_ids(local_stack, ids) == ids and trips_count(local_stack) == before + 60

    # When the same file is loaded again
    status, out = load(local_stack, csv_path, capsys)
    # Then nothing went up, the load was the same, and no trip was added
    assert status == 0 and "already uploaded" in out, out
    assert trips_count(local_stack) == before + 60

    # When its Parquet twin is loaded (another file: another object and load)
    status, out = load(local_stack, parquet_path, capsys)
    # Then its rows are the same trips, found stored: none added
    assert status == 0, out
    assert "already stored             60" in out
    assert trips_count(local_stack) == before + 60


def test_a_loader_killed_while_following_its_load_and_run_again_stores_every_row_once(local_stack: Any, tmp_path: Path) -> None:
    # Given 80 real rows as a CSV file, and the loader run as a command from a second shell
    rows = list(ROWS[1100:1180])
    path = write(tmp_path / "killed.csv", [HEADER, *rows])
    before = trips_count(local_stack)
    command = [sys.executable, "-u", "-m", "onceflow.clients.taxi_loader", *loader_arguments(local_stack, path)]
    environment = {**os.environ, **local_stack.aws_environment()}
    # When it is killed (SIGKILL: no clean-up) once it has started the load
    first = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    seen = [first.stdout.readline() for _ in range(2)]
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert seen[0].startswith("uploaded: ") and seen[1].startswith("load load-"), seen
    # And it is run again
    again = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    # Then the second run found the object, joined or read the load, and every row is stored once
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.startswith("already uploaded: ") and seen[1].split(":")[0] in again.stdout
    ids = {content_id(row) for row in rows}
    assert stored_ids(local_stack, ids) == ids and trips_count(local_stack) == before + 80


def test_a_spreadsheets_csv_with_a_byte_order_mark_and_crlf_loads(local_stack: Any, tmp_path: Path, capsys: Any) -> None:
    # Given a file saved as "CSV UTF-8" by a spreadsheet: a byte-order mark, the header, 3 rows, CRLF line ends
    rows = list(ROWS[1200:1203])
    path = write(tmp_path / "spreadsheet.csv", [HEADER, *rows], ending="\r\n", prefix=b"\xef\xbb\xbf")
    # When it is loaded
    status, out = load(local_stack, path, capsys)
    # Then the three trips are stored under their ids
    assert status == 0, out
    ids = {content_id(row) for row in rows}
    assert stored_ids(local_stack, ids) == ids


def test_a_csv_of_no_trip_layout_is_refused_as_a_whole_and_exits_1(local_stack: Any, tmp_path: Path, capsys: Any) -> None:
    # Given a CSV file that is no trip file: none of its lines has a trip's columns
    path = write(tmp_path / "inventory.csv", ["sku,count", "a-1,3", "b-2,5"])
    # When it is loaded
    status, out = load(local_stack, path, capsys)
    # Then the load refused the file as a whole, said why, and the loader exits 1: loading it again changes nothing
    assert status == 1, out
    assert f"error: {contract.ERROR_LOAD_INPUT}: " in out and "FILE REFUSED (exit 1)" in out
