"""The flag step's and the store's metrics: what the saga's alarms (executions per phase) and dashboard
(rows per phase and reason, rows stored with each finding) read, as EMF records on stdout, as
CloudWatch Logs receives them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime.shared.observability import metrics
from runtime.taxi_etl.flag_handler import handle_flag
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.store_handler import handle_store
from runtime.taxi_etl.trip_items import final_item
from tests.unit.taxi_etl.test_taxi_phases import GOOD, OTHER, Tables, given_to, sample_line, transformed

NAMESPACE = "onceflow-tests"  # POWERTOOLS_METRICS_NAMESPACE in tests/conftest.py


def emf_records(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{") and '"_aws"' in line]


def published(records: list[dict[str, Any]]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(metric name, its dimensions) -> value, for every metric of every record."""
    found = {}
    for record in records:
        (directive,) = record["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == NAMESPACE
        (dimension_names,) = directive["Dimensions"]
        dimensions = tuple(sorted((name, record[name]) for name in dimension_names))
        for metric in directive["Metrics"]:
            assert metric["Unit"] == "Count"
            value = record[metric["Name"]]
            found[(metric["Name"], dimensions)] = sum(value) if isinstance(value, list) else value
    return found


def rejected(store_request_id: str, line: str, detail: str) -> dict[str, Any]:
    return {"StoreRequestId": store_request_id, "tuple": line, "reason": 1, "detail": detail, "message": detail}


def test_a_phase_with_rejections_counts_one_execution_and_the_rows_per_reason(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a validation output with three rejected rows under two rules
    tables = Tables()
    state = {
        "rejected": [
            rejected("c-1", GOOD, "dropoff_before_pickup"),
            rejected("c-2", OTHER, "dropoff_before_pickup"),
            rejected("c-3", GOOD + "x", "vendor"),
        ]
    }
    # When the flag step runs
    outcome = handle_flag({"phase": "validation", "state": state}, tables.ports(), tables.final)
    # Then one flagged execution is counted for the phase, and the rows per (phase, reason)
    service = ("service", "tests")
    assert outcome["flagged"] == 3
    assert published(emf_records(capsys.readouterr().out)) == {
        ("ExecutionsFlagged", (("phase", "validation"), service)): 1,
        ("RowsFlagged", (("phase", "validation"), ("reason", "dropoff_before_pickup"), service)): 2,
        ("RowsFlagged", (("phase", "validation"), ("reason", "vendor"), service)): 1,
    }


def test_a_caught_error_is_the_reason_of_every_row_it_flags(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a store that failed as a whole on two rows
    tables = Tables()
    rows = [
        {"StoreRequestId": "c-1", "tuple": given_to(Phase.STORE, GOOD)},
        {"StoreRequestId": "c-2", "tuple": given_to(Phase.STORE, OTHER)},
    ]
    state = {"rows": rows, "error": {"Error": "ProvisionedThroughputExceededException", "Cause": "throttled"}}
    # When the flag step runs
    handle_flag({"phase": "store", "state": state}, tables.ports(), tables.final)
    # Then the reason dimension is the caught error
    service = ("service", "tests")
    assert published(emf_records(capsys.readouterr().out)) == {
        ("ExecutionsFlagged", (("phase", "store"), service)): 1,
        ("RowsFlagged", (("phase", "store"), ("reason", "error:ProvisionedThroughputExceededException"), service)): 2,
    }


def test_nothing_flagged_publishes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a store failure whose only row is already stored as expected (a retry after the put)
    tables = Tables()
    line = given_to(Phase.STORE, GOOD)
    tables.final.items["c-1"] = final_item("c-1", line)
    state = {"rows": [{"StoreRequestId": "c-1", "tuple": line}], "error": {"Error": "States.Timeout", "Cause": ""}}
    # When the flag step runs
    outcome = handle_flag({"phase": "store", "state": state}, tables.ports(), tables.final)
    # Then no row is flagged and no flag metric is published
    assert outcome["flagged"] == 0
    assert published(emf_records(capsys.readouterr().out)) == {}


def test_disabled_metrics_print_nothing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Given metrics switched off the Powertools way (the demo does this)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    tables = Tables()
    state = {"rejected": [rejected("c-1", GOOD, "dropoff_before_pickup")]}
    # When the flag step flags a row
    outcome = handle_flag({"phase": "validation", "state": state}, tables.ports(), tables.final)
    # Then the row is flagged, and no EMF record is written
    assert outcome["flagged"] == 1
    assert emf_records(capsys.readouterr().out) == []


def test_the_store_counts_rows_stored_with_each_finding_once(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a store input of three real trips: a plain one, one whose total is 1.95 above its columns
    # (file line 875) and one that ends at its pick-up second (file line 731)
    mismatch, zero_length = sample_line(875), sample_line(731)
    tables = Tables()
    rows = [{"StoreRequestId": f"c-{n}", "tuple": transformed(line)} for n, line in enumerate((GOOD, mismatch, zero_length))]
    # When the store runs twice on it (a retried task)
    published_by_run, counted = [], []
    for _run in range(2):
        handle_store({"rows": rows}, tables.status[Phase.STORE], tables.final)
        published_by_run.append(published(emf_records(capsys.readouterr().out)))
        # (the handler's decorator flushes these two at the end of the invocation; read them before that)
        counted.append({name: metrics.metric_set[name]["Value"] for name in ("RowsStored", "RowsAlreadyStored")})
        metrics.clear_metrics()
    first, again = published_by_run
    # Then the first run counts each finding on the rows it stored, by finding; the retry stores nothing and counts none
    service = ("service", "tests")
    assert {key: value for key, value in first.items() if key[0] == "RowsStoredWithFinding"} == {
        ("RowsStoredWithFinding", (("finding", "dropoff_equals_pickup"), service)): 1,
        ("RowsStoredWithFinding", (("finding", "total_amount_mismatch"), service)): 1,
    }
    assert again == {}
    assert counted == [{"RowsStored": [3.0], "RowsAlreadyStored": [0.0]}, {"RowsStored": [0.0], "RowsAlreadyStored": [3.0]}]
