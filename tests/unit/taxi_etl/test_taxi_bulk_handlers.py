"""The bulk state machine's three task handlers (`handle`, the deployed entry point's seam) on in-memory ports: what
each returns to the state machine, what it writes to the bucket, and the metrics the chunk publishes (the saga's
dashboard counts: rows stored, already stored, stored with a finding, flagged by phase and reason).

The tables are tests/unit/taxi_etl/test_taxi_phases.py's fakes, the bucket a dict: no AWS call is made.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.aws.lambda_context import FakeLambdaContext, as_lambda_context
from runtime.shared.observability import metrics
from runtime.taxi_etl import bulk_chunk_handler, bulk_plan_handler, bulk_report_handler
from runtime.taxi_etl.bulk_chunk_wiring import BulkChunkDeps
from runtime.taxi_etl.bulk_wiring import BulkPlanDeps, BulkReportDeps
from runtime.taxi_etl.errors import LoadInputError, PhaseInputError
from runtime.taxi_etl.load_bucket import LoadBucket, ObjectGone, json_bytes
from runtime.taxi_etl.load_objects import manifest_key, report_key, summary_key
from runtime.taxi_etl.loads import load_file
from tests.unit.taxi_etl.test_taxi_flag_metrics import emf_records, published
from tests.unit.taxi_etl.test_taxi_phases import BAD_LOCATION, GOOD, IN_THE_GAP, OTHER, Tables, sample_line

CONTEXT = as_lambda_context(FakeLambdaContext())
BUCKET = "onceflow-dev-ingest"
KEY = "incoming/a.csv"
SERVICE = ("service", "tests")


class DictBucket:
    """The ingest bucket in memory: object versions to load, and a load's JSON objects."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], bytes] = {}
        self.objects: dict[str, bytes] = {}

    @property
    def name(self) -> str:
        return BUCKET

    def version_of(self, key: str, version_id: str | None = None) -> str:
        raise AssertionError("the tasks never look a version up")

    def stream(self, key: str, version_id: str) -> Iterator[bytes]:
        if (key, version_id) not in self.files:
            raise ObjectGone(f"{key} {version_id}")
        data = self.files[key, version_id]
        yield from (data[start : start + 100] for start in range(0, len(data), 100))

    def read_range(self, key: str, version_id: str, start: int, end: int) -> bytes:
        return self.files[key, version_id][start : end + 1]

    def exists(self, key: str) -> bool:
        return key in self.objects

    def put_json(self, key: str, document: Any) -> None:
        self.objects[key] = json_bytes(document)

    def get_json(self, key: str) -> Any | None:
        return json.loads(self.objects[key]) if key in self.objects else None

    def list_keys(self, prefix: str) -> Iterator[str]:
        yield from sorted(key for key in self.objects if key.startswith(prefix))


_bucket_port: LoadBucket = DictBucket()  # the fake implements the port (checked by type checkers)


def event_of(bucket: DictBucket, lines: list[str], version: str = "v1") -> dict[str, str]:
    bucket.files[KEY, version] = ("\n".join(lines) + "\n").encode()
    load = load_file(BUCKET, KEY, version)
    return {"bucket": BUCKET, "key": KEY, "versionId": version, "loadId": load.load_id}


def test_a_load_through_the_three_handlers_publishes_what_the_dashboard_counts(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a headerless file of two good trips, one repeated, a line Validate rejects, one Transform rejects, and a line no trip can be
    bucket, tables = DictBucket(), Tables()
    event = event_of(bucket, [GOOD, OTHER, BAD_LOCATION, "1,2,3", IN_THE_GAP, GOOD, sample_line(875)])
    # When Plan runs (chunks of 3 lines), then each chunk as the map hands it over, then Report
    plan = bulk_plan_handler.handle(dict(event), CONTEXT, BulkPlanDeps(bucket, chunk_rows=3))
    capsys.readouterr()
    chunk_deps = BulkChunkDeps(bucket, tables.ports(), tables.final, max_line_bytes=4096, concurrency=2)
    manifest = json.loads(bucket.objects[manifest_key(event["loadId"])])
    answers = [bulk_chunk_handler.handle({**event, "layout": plan["layout"], "chunk": item}, CONTEXT, chunk_deps) for item in manifest]
    dimensioned = published(emf_records(capsys.readouterr().out))  # written at once, each its own EMF record
    counted = {name: metrics.metric_set[name]["Value"] for name in ("RowsStored", "RowsAlreadyStored")}  # flushed by the decorator
    metrics.clear_metrics()
    outcome = bulk_report_handler.handle({**event, "plan": plan}, CONTEXT, BulkReportDeps(bucket))
    # Then Plan answered the manifest's place, its three chunks, the lines, the bytes and the layout line 1 decided
    assert plan == {
        "manifest": {"bucket": BUCKET, "key": manifest_key(event["loadId"])},
        "chunks": 3,
        "lines": 7,
        "bytes": len(bucket.files[KEY, "v1"]),
        "layout": {"fields": 18, "source": "line 1"},
    }
    # and each chunk answered {} and counted its rows for the dashboard, summed here over the three chunks
    assert answers == [{}, {}, {}]
    assert counted == {"RowsStored": [2, 0, 1], "RowsAlreadyStored": [0, 1, 0]}
    assert dimensioned == {
        ("RowsStoredWithFinding", (("finding", "total_amount_mismatch"), SERVICE)): 1,
        ("RowsFlagged", (("phase", "validation"), ("reason", "pickup_location"), SERVICE)): 1,
        ("RowsFlagged", (("phase", "transformation"), ("reason", "nonexistent_local_time"), SERVICE)): 1,
    }  # and no ExecutionsFlagged: a chunk is no saga execution, and the alarms count those
    # and Report answered the report's place and its totals
    assert outcome == {
        "report": {"bucket": BUCKET, "key": report_key(event["loadId"])},
        "status": "SUCCEEDED",
        "chunks": 3,
        "chunksDone": 3,
        "lines": 7,
        "rowsRead": 6,
        "stored": 3,
        "alreadyStored": 1,
        "refusedLines": 1,
    }
    # and a stored row cost its trips item only (no status row), while each flagged row's status rows were written
    assert all(tables.reasons(row_id) == dict.fromkeys(tables.status) for row_id in tables.final.items)
    flagged_rows = {row_id for table in tables.status.values() for row_id in table.rows}
    assert len(flagged_rows) == 2 and all(tables.validation.reason_of(row_id) for row_id in flagged_rows)


def test_a_chunk_whose_summary_exists_answers_at_once_and_publishes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a chunk already done (its summary is there)
    bucket, tables = DictBucket(), Tables()
    event = event_of(bucket, [GOOD])
    chunk = {"index": 0, "start": 0, "end": len(GOOD), "firstLine": 1, "lines": 1}
    bucket.put_json(summary_key(event["loadId"], 0), {"index": 0})
    metrics.clear_metrics()  # and no metric an earlier test in this worker left unflushed
    # When it is handed over again
    answer = bulk_chunk_handler.handle(
        {**event, "layout": {"fields": 18, "source": "line 1"}, "chunk": chunk},
        CONTEXT,
        BulkChunkDeps(bucket, tables.ports(), tables.final, max_line_bytes=4096),
    )
    # Then it touched no table and counted nothing
    assert answer == {}
    assert tables.journal == []
    assert published(emf_records(capsys.readouterr().out)) == {}
    assert metrics.metric_set == {}


@pytest.mark.parametrize(
    "event",
    [
        {"bucket": BUCKET, "key": KEY, "versionId": "v1"},
        {"bucket": BUCKET, "key": KEY, "versionId": "v1", "loadId": "load-x", "layout": {"fields": 12, "source": "x"}, "chunk": {}},
        {
            "bucket": BUCKET,
            "key": KEY,
            "versionId": "v1",
            "loadId": "load-x",
            "layout": {"fields": 18, "source": "x"},
            "chunk": {"index": 0},
        },
    ],
)
def test_a_chunk_task_input_that_is_not_one_is_a_phase_input_error(event: dict[str, Any]) -> None:
    with pytest.raises(PhaseInputError):
        bulk_chunk_handler.handle(event, CONTEXT, BulkChunkDeps(DictBucket(), Tables().ports(), Tables().final, max_line_bytes=4096))


def test_a_version_gone_before_its_plan_is_a_load_input_error() -> None:
    # Given a load whose object version is no longer in the bucket
    event = {"bucket": BUCKET, "key": KEY, "versionId": "v9", "loadId": load_file(BUCKET, KEY, "v9").load_id}
    # When Plan runs
    # Then it fails with the error the state machine never retries, and writes no manifest
    bucket = DictBucket()
    with pytest.raises(LoadInputError, match="v9"):
        bulk_plan_handler.handle(dict(event), CONTEXT, BulkPlanDeps(bucket, chunk_rows=100))
    assert bucket.objects == {}
