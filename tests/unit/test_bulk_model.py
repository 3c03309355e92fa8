"""The bulk route's AWS model and its prices (benchmarks/bulk_load.py): the arithmetic `make bench`
prints for a month of trips, checked on inputs small enough to work out by hand."""

from __future__ import annotations

import math

import pytest

from benchmarks.bulk_load import (
    FULL_CORE_MB,
    MULTIPART_PART_BYTES,
    BulkShape,
    ChunkProfile,
    MonthInputs,
    Quotas,
    RouteCounts,
    chunk_seconds,
    cost_per_million_rows,
    cpu_share,
    month_counts,
    month_model,
    success_path,
    transitions_from_definition,
    upload_requests,
)
from benchmarks.taxi_cost import PRICES

# A chunk of 2,000 rows: 100 DynamoDB calls one after another, 3 S3 calls, 1 s of CPU on a full core.
CHUNK = ChunkProfile(rows=2000, dynamodb_round_trips=100, s3_round_trips=3, cpu_s=1.0)
ONE_WRU_PER_TABLE = {"trips": 1.0, "validation": 1.0}


def inputs(**changes: object) -> MonthInputs:
    base: dict[str, object] = {
        "rows": 3_000_000,
        "bytes_per_row": 100.0,
        "chunk": CHUNK,
        "max_concurrency": 100,
        "memory_mb": FULL_CORE_MB,
        "timeout_s": 300.0,
        "wru_per_row": ONE_WRU_PER_TABLE,
        "rru_per_row": {"trips": 0.0},
        "dynamodb_call_ms": 5.0,
        "s3_call_ms": 20.0,
        "plan_mb_per_s": 50.0,
        "report_readers": 16,
    }
    base.update(changes)
    return MonthInputs(**base)  # type: ignore[arg-type]


def test_a_chunk_waits_its_round_trips_and_spends_its_cpu_on_its_share_of_a_core() -> None:
    # Given the chunk above at a full core, then at a quarter of one
    # When its duration is modelled
    # Then it is 100 x 5 ms + 3 x 20 ms + 1 s of CPU, and the CPU takes four times as long on a quarter
    assert chunk_seconds(CHUNK, FULL_CORE_MB, 5.0, 20.0) == pytest.approx(0.5 + 0.06 + 1.0)
    assert cpu_share(FULL_CORE_MB // 4) == pytest.approx(0.25, abs=1e-3)
    assert chunk_seconds(CHUNK, 4 * FULL_CORE_MB, 5.0, 20.0) == pytest.approx(1.56)  # no more than one core
    assert chunk_seconds(CHUNK, round(FULL_CORE_MB / 4), 5.0, 20.0) == pytest.approx(0.56 + 4.0, rel=1e-3)


def test_a_new_tables_write_throughput_bounds_a_month_when_the_chunks_could_go_faster() -> None:
    # Given 3,000,000 rows of one WRU in each of two tables, 100 chunks at a time of 1.56 s each
    model = month_model(inputs())
    # Then 1,500 chunks run in 15 waves (23.4 s), while each table needs 3,000,000 / 4,000 = 750 s
    assert model.chunks == 1500
    assert model.concurrency == 100 and model.concurrency_bound == "the map's MaxConcurrency"
    assert model.limits_s["chunks: 100 at a time (the map's MaxConcurrency)"] == pytest.approx(15 * 1.56)
    assert model.limits_s["DynamoDB writes, trips"] == pytest.approx(750.0)
    # and the bottleneck is a table's writes (the first of the equal ones), 750 s for the map
    assert model.bottleneck == "DynamoDB writes, trips"
    assert model.map_s == pytest.approx(750.0)
    # Plan reads 300 MB at 50 MB/s; Report lists 2 pages, reads 1,500 summaries 16 at a time and writes one
    assert model.plan_s == pytest.approx(6.0)
    assert model.report_s == pytest.approx((2 + math.ceil(1500 / 16) + 1) * 0.02)
    assert model.total_s == pytest.approx(6.0 + 750.0 + model.report_s)
    assert model.rows_per_s == pytest.approx(3_000_000 / model.total_s)
    # Each of the 100 running chunks is held back to 750 s x 100 / 1,500 = 50 s, within its timeout
    assert model.chunk_billed_s == pytest.approx(50.0)
    assert model.fits_timeout
    # and 4,000 rows/s x 1.56 s / 2,000 rows = 3.12: 4 chunks at a time would reach the table's rate
    assert model.saturating_concurrency == 4


def test_the_least_concurrency_bounds_the_chunks_and_they_bound_the_month_when_the_tables_keep_up() -> None:
    # Given a slow chunk (60 s of CPU), a MaxConcurrency above the account's Lambda concurrency, and tables
    # that take 40,000 units a second (75 s for the month)
    slow = ChunkProfile(rows=2000, dynamodb_round_trips=0, s3_round_trips=0, cpu_s=60.0)
    quotas = Quotas(table_write_units_per_s=40_000.0)
    model = month_model(inputs(chunk=slow, max_concurrency=5000, quotas=quotas))
    # Then 1,000 run at once, set by the account's Lambda concurrency, in 2 waves of 60 s
    assert model.concurrency == 1000 and model.concurrency_bound == "the account's Lambda concurrency"
    assert model.bottleneck == "chunks: 1000 at a time (the account's Lambda concurrency)"
    assert model.map_s == pytest.approx(120.0)
    assert model.limits_s["DynamoDB writes, trips"] == pytest.approx(75.0)
    # and a chunk is billed for its own duration: nothing holds it back
    assert model.chunk_billed_s == pytest.approx(60.0)
    # and 40,000 rows/s x 60 s / 2,000 rows = 1,200 chunks at a time would be needed to reach the tables' rate
    assert model.saturating_concurrency == 1200


def test_fewer_chunks_than_the_concurrency_run_in_one_wave() -> None:
    # Given 3 chunks' worth of rows and a MaxConcurrency of 100
    model = month_model(inputs(rows=6000, wru_per_row={}, rru_per_row={}))
    # Then 3 run at once: one wave
    assert (model.chunks, model.concurrency) == (3, 3)
    assert model.map_s == pytest.approx(1.56)


def test_a_chunk_held_back_past_its_timeout_is_reported() -> None:
    # Given a month whose table holds each of 1,000 running chunks back for 500 s, and a 60 s timeout
    model = month_model(inputs(max_concurrency=1000, timeout_s=60.0))
    # Then the chunk's billed duration passes the timeout, and the model says so
    assert model.chunk_billed_s == pytest.approx(750.0 * 1000 / 1500)
    assert not model.fits_timeout


def test_reads_count_against_the_read_throughput() -> None:
    # Given 5 strongly consistent reads a row on one table and no writes
    model = month_model(inputs(wru_per_row={}, rru_per_row={"status": 5.0}))
    # Then that table needs 3,000,000 x 5 / 12,000 = 1,250 s, the bottleneck
    assert model.bottleneck == "DynamoDB reads, status"
    assert model.map_s == pytest.approx(1250.0)


def test_prices_per_million_rows_follow_the_price_table() -> None:
    # Given 2,000,000 rows' counts: 1,000 Lambda requests and 500 GB-s, 3,000 transitions, 8 M WRU and
    # 1 M RRU, 1,000 PUT-class and 3,000 GET-class S3 requests, 20,000 API requests
    counts = RouteCounts("route", 2_000_000, 1000, 500.0, 3000, 8e6, 1e6, 1000, 3000, 20_000)
    costs = cost_per_million_rows(counts)
    # Then each is its count x its price, halved (two million rows)
    assert costs["lambda"] == pytest.approx((1000 * PRICES["lambda_request"] + 500 * PRICES["lambda_gb_second_arm"]) / 2)
    assert costs["step functions"] == pytest.approx(3000 * 0.025 / 1000 / 2)
    assert costs["dynamodb"] == pytest.approx((8 * 0.625 + 1 * 0.125) / 2)
    assert costs["s3"] == pytest.approx((1000 * 0.005 + 3000 * 0.0004) / 1000 / 2)
    assert costs["api"] == pytest.approx(20_000 / 1e6 / 2)


def test_the_loader_uploads_a_small_file_in_one_put_and_a_large_one_in_parts() -> None:
    # Given a file at the multipart threshold, and one of 300 MB
    # Then one PUT, and create + 36 parts of 8 MiB + complete
    assert upload_requests(MULTIPART_PART_BYTES) == 1
    assert upload_requests(300e6) == 2 + math.ceil(300e6 / MULTIPART_PART_BYTES) == 38


def test_a_month_bills_its_chunks_for_their_held_back_duration_and_the_loaders_polls() -> None:
    # Given the month above and what a load and a chunk cost besides their rows
    model = month_model(inputs())
    shape = BulkShape(
        parent_transitions=4,
        child_transitions=2,
        load_invocations=3,
        load_s3_put_class=2,
        load_s3_get_class=4,
        chunk_s3_put_class=1,
        chunk_s3_get_class=3,
    )
    counts = month_counts(model, shape, memory_mb=1024)
    polls = math.ceil(model.total_s / 2.0)
    # Then 1,500 chunk invocations + Plan, Report, the POST, and a poll every 2 s
    assert counts.lambda_requests == 1500 + 3 + polls
    # and 1,500 chunks x 50 s at 1 GB, plus Plan and Report, plus 30 ms per poll
    assert counts.lambda_gb_s == pytest.approx(1500 * 50.0 + model.plan_s + model.report_s + polls * 0.03)
    assert counts.transitions == 4 + 1500 * 2
    assert (counts.wru, counts.rru) == (6_000_000, 0)
    assert counts.s3_put_class == upload_requests(300e6) + 2 + 1500
    assert counts.s3_get_class == 4 + 1500 * 3
    assert counts.api_requests == 1 + polls


def test_transitions_are_counted_on_the_success_path_of_the_parent_and_of_each_child() -> None:
    # Given the bulk machine's shape: Plan -> Chunks (Distributed Map of one task) -> Report -> Loaded, with a
    # failure branch the success path never enters
    definition = {
        "StartAt": "Plan",
        "States": {
            "Plan": {"Type": "Task", "Next": "Chunks", "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "ReportFailed"}]},
            "Chunks": {
                "Type": "Map",
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
                    "StartAt": "Chunk",
                    "States": {"Chunk": {"Type": "Task", "End": True}},
                },
                "Next": "Report",
            },
            "Report": {"Type": "Task", "Next": "Loaded"},
            "Loaded": {"Type": "Succeed"},
            "ReportFailed": {"Type": "Task", "Next": "LoadFailed"},
            "LoadFailed": {"Type": "Fail"},
        },
    }
    # Then the parent enters 4 states, and each child is billed its start and its one state
    assert success_path(definition) == ["Plan", "Chunks", "Report", "Loaded"]
    assert transitions_from_definition(definition) == (4, 2)
    # and a definition that loops is refused rather than counted
    looping = {"StartAt": "A", "States": {"A": {"Type": "Pass", "Next": "A"}}}
    with pytest.raises(ValueError, match="loops"):
        success_path(looping)
