"""The bulk route end to end on the embedded cloud: a real file put in the ingest bucket, its load started by
POST /loads (the loads API's entry point) or by its ObjectCreated event (moto S3 -> the starter queue -> the load
starter's entry point), and the bulk state machine's synthesized definition executed by moto: Plan, the Distributed
Map over the plan's manifest with one Chunk task per 100 lines, Report. Every task is routed to its handler with its
synthesized function's settings, and every call is checked against that function's role (the IAM audit).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.aws.template_resources import Template
from devtools.taxi_rows import bad_at_transformation, bad_at_validation, sample_header, sample_lines
from devtools.taxi_world import BULK_CHUNK_HANDLER, BULK_PLAN_HANDLER, BULK_REPORT_HANDLER, TaxiWorld, embedded_saga_cloud
from runtime.shared.dynamo import to_attributes
from runtime.taxi_etl.loads import load_id
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import submission_rows
from runtime.taxi_etl.trip_items import final_item
from runtime.taxi_etl.trip_lines import Accepted, transform_tuple, validate_line

CHUNK_ROWS = 100
# With the header, 300 lines: three chunks of 100; one line Validate rejects in the first, one Transform rejects in the third.
SAMPLE = sample_lines()
LINES = [*SAMPLE[:50], bad_at_validation(SAMPLE[50]), *SAMPLE[51:250], bad_at_transformation(SAMPLE[250]), *SAMPLE[251:299]]
KEY = "incoming/yellow_2019-10_first_300.csv"


def file_bytes(lines: list[str]) -> bytes:
    return ("\n".join([sample_header(), *lines]) + "\n").encode()


def expected_items(lines: list[str]) -> dict[str, dict[str, Any]]:
    """What the three phases store for these lines, computed without the saga: each row's id as /trips/batch
    gives it (submission_rows), its item from one clean pass of the row logic; rows either phase rejects are absent."""
    _, rows = submission_rows(lines)
    items: dict[str, dict[str, Any]] = {}
    for row in rows:
        validated = validate_line(row.tuple)
        transformed = transform_tuple(validated.tuple) if isinstance(validated, Accepted) else None
        if isinstance(transformed, Accepted):
            items[row.store_request_id] = final_item(row.store_request_id, transformed.tuple)
    return items


@pytest.fixture
def bulk(taxi_etl_template: Template) -> Iterator[TaxiWorld]:
    """The dev saga with its bulk route on moto, 100 lines per chunk."""
    with embedded_saga_cloud() as waits:
        world = TaxiWorld.create(taxi_etl_template, bulk=True, chunk_rows=CHUNK_ROWS)
        world.retry_waits = waits
        yield world


def test_a_file_loaded_through_post_loads_stores_every_row_once_and_reports_it(bulk: TaxiWorld) -> None:
    # Given 300 real trip lines (with the export's header) in the ingest bucket
    version = bulk.put_file(KEY, file_bytes(LINES))
    expected = expected_items(LINES)
    _, rows = submission_rows(LINES)
    # When POST /loads asks for the file
    status, body = bulk.start_load(KEY)
    # Then the load of that version started under its id, and its execution (run to its end here) succeeded
    loaded = load_id(bulk.ingest_bucket, KEY, version)
    assert (status, body) == (202, {"loadId": loaded, "execution": loaded, "status": "RUNNING"})
    assert [(e["name"], e["status"]) for e in bulk.bulk_executions()] == [(loaded, "SUCCEEDED")]
    # and Plan ran once, one Chunk per 100 lines, Report once
    calls = bulk.invocations.calls
    assert (calls.count(BULK_PLAN_HANDLER), calls.count(BULK_CHUNK_HANDLER), calls.count(BULK_REPORT_HANDLER)) == (1, 3, 1)
    # and the trips table holds exactly the rows the phases accept, each under its /trips/batch id, as one clean pass stores it
    assert bulk.final_items() == expected
    # and every row the phases reject is flagged in its phase's status table (none left pending)
    stored_status = bulk.status_rows()
    for row in rows:
        reasons = {
            phase: int(table[row.store_request_id]["StatusReason"])
            for phase, table in stored_status.items()
            if row.store_request_id in table
        }
        assert (row.store_request_id in expected) == all(reason == 0 for reason in reasons.values()), (row, reasons)
    # and report.json adds the three chunks' summaries up
    report = bulk.report(loaded)
    assert report is not None
    flagged_rows = len(rows) - len(expected)
    assert {
        name: report[name] for name in ("status", "chunks", "chunksDone", "chunksMissing", "lines", "rowsRead", "stored", "alreadyStored")
    } == {
        "status": "SUCCEEDED",
        "chunks": 3,
        "chunksDone": 3,
        "chunksMissing": [],
        "lines": len(LINES) + 1,
        "rowsRead": len(rows),
        "stored": len(expected),
        "alreadyStored": 0,
    }
    assert report["flagged"] == {"transformation": 1, "validation": 1} and flagged_rows == 2
    assert (report["refusedLines"], report["refused"], report["error"]) == (0, [], None)
    assert (report["bucket"], report["key"], report["versionId"], report["loadId"]) == (bulk.ingest_bucket, KEY, version, loaded)


def test_the_same_file_started_twice_is_one_execution_and_its_answer_is_the_report(bulk: TaxiWorld) -> None:
    # Given a file whose load has run
    version = bulk.put_file(KEY, file_bytes(LINES[:40]))  # one chunk
    loaded = load_id(bulk.ingest_bucket, KEY, version)
    bulk.start_load(KEY)
    chunk_calls = bulk.invocations.calls.count(BULK_CHUNK_HANDLER)
    # When the same version is asked for again, by POST /loads and by its (redelivered) ObjectCreated event
    again = bulk.start_load(KEY, version)
    starter_answers = bulk.deliver_load_events()
    # Then both answers name the one execution, which ran once: no second execution, no chunk ran again
    assert again == (200, {"loadId": loaded, "execution": loaded, "status": "SUCCEEDED"})
    assert starter_answers == [{"batchItemFailures": []}]
    assert [e["name"] for e in bulk.bulk_executions()] == [loaded]
    assert bulk.invocations.calls.count(BULK_CHUNK_HANDLER) == chunk_calls == 1
    # and GET /loads/{LoadId} answers with the report
    status, body = bulk.get_load(loaded)
    assert status == 200
    assert (body["status"], body["execution"], body["report"]) == ("SUCCEEDED", loaded, bulk.report(loaded))


def test_a_file_put_under_incoming_is_loaded_through_its_object_created_event(bulk: TaxiWorld) -> None:
    # Given a file put under incoming/ (its ObjectCreated event is in the starter queue)
    version = bulk.put_file(KEY, file_bytes(LINES[:40]))
    loaded = load_id(bulk.ingest_bucket, KEY, version)
    # When the starter's event source mapping delivers the queue
    answers = bulk.deliver_load_events()
    # Then the starter reported no failure, and the load of that version ran to SUCCEEDED with every accepted row stored
    assert answers == [{"batchItemFailures": []}]
    assert [(e["name"], e["status"]) for e in bulk.bulk_executions()] == [(loaded, "SUCCEEDED")]
    assert bulk.final_items() == expected_items(LINES[:40])
    # and a file outside incoming/ sends no event: nothing more is delivered
    bulk.put_file("elsewhere/not-a-load.csv", file_bytes(LINES[:1]))
    assert bulk.deliver_load_events() == []


def test_get_loads_answers_404_for_an_unknown_load_and_post_loads_404_for_a_missing_file(bulk: TaxiWorld) -> None:
    # Given an ingest bucket without the file
    # When a load of a missing key is asked for, and an id no load has
    missing = bulk.start_load("incoming/missing.csv")
    unknown = bulk.get_load(load_id(bulk.ingest_bucket, "incoming/missing.csv", "v1"))
    # Then both are 404 (S3 answers the loads API's HeadObject 404, not 403: it may list the bucket), and nothing started
    assert missing[0] == 404 and unknown[0] == 404
    assert bulk.bulk_executions() == []


def test_a_file_deleted_before_its_event_is_delivered_fails_its_load_at_once_with_a_report(bulk: TaxiWorld) -> None:
    # Given a file put under incoming/, then its version deleted before the starter reads its event
    version = bulk.put_file(KEY, file_bytes(LINES[:10]))
    bulk.s3.delete_object(Bucket=bulk.ingest_bucket, Key=KEY, VersionId=version)
    loaded = load_id(bulk.ingest_bucket, KEY, version)
    # When the event is delivered
    assert bulk.deliver_load_events() == [{"batchItemFailures": []}]
    # Then the load started and failed as LoadFailed: the plan found its input gone (404, not 403: it may list the
    # bucket), which no retry fixes, so it ran once and no chunk ran
    (execution,) = bulk.bulk_executions()
    assert (execution["name"], execution["status"]) == (loaded, "FAILED")
    assert bulk.describe_load(loaded)["error"] == "LoadFailed"
    calls = bulk.invocations.calls
    assert (calls.count(BULK_PLAN_HANDLER), calls.count(BULK_CHUNK_HANDLER), calls.count(BULK_REPORT_HANDLER)) == (1, 0, 1)
    # and its report says FAILED with the plan's error, no chunk planned, nothing stored
    report = bulk.report(loaded)
    assert report is not None
    assert (report["status"], report["chunks"], report["stored"], report["error"]["error"]) == ("FAILED", None, 0, "LoadInputError")
    assert bulk.final_items() == {}


def test_get_loads_answers_a_running_loads_progress_from_its_manifest_summaries_and_map_run(bulk: TaxiWorld) -> None:
    # Given a file of two chunks whose load is asked for, and GET /loads/{LoadId} called while the load is still
    # running: when its Report task starts (the chunks run on moto's worker threads in any order; by then both are done)
    version = bulk.put_file(KEY, file_bytes(LINES[:150]))
    loaded = load_id(bulk.ingest_bucket, KEY, version)
    seen: list[tuple[int, dict[str, Any]]] = []

    def look_while_running(handler: str, attempt: int) -> None:
        if handler == BULK_REPORT_HANDLER:
            seen.append(bulk.get_load(loaded))

    bulk.invocations.before = look_while_running
    # When the load runs
    bulk.start_load(KEY)
    # Then the answer was the running execution and its progress: two chunks planned (the manifest), two
    # summaries written, and the map run's item counts
    ((status, body),) = seen
    assert status == 200
    assert (body["loadId"], body["execution"], body["status"]) == (loaded, loaded, "RUNNING")
    progress = body["progress"]
    assert (progress["chunks"], progress["chunksDone"]) == (2, 2)
    assert (progress["itemCounts"]["total"], progress["itemCounts"]["succeeded"], progress["itemCounts"]["failed"]) == (2, 2, 0)
    # and once it ended, the answer is the report
    assert bulk.get_load(loaded)[1]["report"]["status"] == "SUCCEEDED"


def test_a_row_whose_id_holds_other_content_is_flagged_and_the_rest_of_its_chunk_stored(bulk: TaxiWorld) -> None:
    # Given a small file, and one of its rows' ids already holding another trip's item in the trips table
    lines = SAMPLE[:20]
    expected = expected_items(lines)
    _, rows = submission_rows(lines)
    taken = rows[3].store_request_id
    other = {**expected_items([SAMPLE[20]]).popitem()[1], "StoreRequestId": taken}
    trips = bulk.environment(BULK_CHUNK_HANDLER)["FINAL_TABLE"]
    bulk.dynamodb.put_item(TableName=trips, Item=to_attributes(other))
    # When the file is loaded
    version = bulk.put_file(KEY, file_bytes(lines))
    bulk.start_load(KEY)
    # Then the load succeeded, every other row is stored, and the taken id keeps its item and is flagged in Store
    loaded = load_id(bulk.ingest_bucket, KEY, version)
    assert bulk.describe_load(loaded)["status"] == "SUCCEEDED"
    assert bulk.final_items() == {**expected, taken: other}
    report = bulk.report(loaded)
    assert report is not None
    assert (report["stored"], report["flagged"]) == (len(expected) - 1, {"store": 1})
    assert int(bulk.status_rows()[Phase.STORE][taken]["StatusReason"]) != 0


# Unmeasured: it replays paths that lighter tests measure, at more CPU than it adds to coverage (docs/development.md)
@pytest.mark.no_cover
def test_all_2000_real_rows_load_in_bulk_each_with_its_findings(taxi_etl_template: Template) -> None:
    # Given the whole real sample as the portal exports it (header first), and the bulk route cutting it every 1,000
    # lines: 2,001 lines, so three chunks, the last of one row
    with embedded_saga_cloud():
        world = TaxiWorld.create(taxi_etl_template, bulk=True, chunk_rows=1000)
        world.put_file(KEY, file_bytes(SAMPLE))
        # When POST /loads asks for it
        status, body = world.start_load(KEY)
        # Then every one of the 2,000 rows is a trip, as one clean pass of the row logic stores it: none flagged, none dropped
        assert status == 202
        items = world.final_items()
        assert items == expected_items(SAMPLE) and len(items) == len(SAMPLE)
        assert all(rows == {} for rows in world.status_rows().values())  # a clean row gets no status row in bulk
        # and the odd ones carry their findings: three totals 1.95 above their columns, one zero-length trip
        found = Counter(finding for item in items.values() for finding in item.get("findings", []))
        assert found == Counter({"total_amount_mismatch": 3, "dropoff_equals_pickup": 1})
        assert sorted(str(item["unexplained_amount"]) for item in items.values() if "unexplained_amount" in item) == ["1.95"] * 3
        # and on every stored row the normalized charges sum to the total
        assert all(sum(item["charges"].values()) == item["total_amount"] for item in items.values())
        # and the report says so
        report = world.report(body["loadId"])
        assert report is not None
        assert {name: report[name] for name in ("status", "chunks", "rowsRead", "stored", "alreadyStored", "flagged", "findings")} == {
            "status": "SUCCEEDED",
            "chunks": 3,
            "rowsRead": len(SAMPLE),
            "stored": len(SAMPLE),
            "alreadyStored": 0,
            "flagged": {},
            "findings": {"dropoff_equals_pickup": 1, "total_amount_mismatch": 3},
        }
