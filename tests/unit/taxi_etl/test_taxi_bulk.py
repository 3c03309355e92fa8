"""The bulk route's pure parts: the plan's manifest and layout (runtime/taxi_etl/bulk_plan.py), load ids, execution
names and canonical input (loads.py), the S3 events the starter reads (load_events.py), the report's aggregation and
caps (bulk_report.py), and the bulk functions' settings (bulk_wiring.py).

Files are built from the real NYC TLC rows in tests/data/taxi_etl/yellow_2019-10_sample.csv. No AWS.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.shared.refusals import InvalidRequest
from runtime.shared.settings import SettingsError
from runtime.taxi_etl.bulk_chunk_wiring import BulkChunkSettings
from runtime.taxi_etl.bulk_plan import cut_file
from runtime.taxi_etl.bulk_report import CHUNKS_MISSING_SHOWN, REFUSED_SHOWN, aggregate
from runtime.taxi_etl.bulk_wiring import BulkPlanSettings, BulkReportSettings, LoadsSettings
from runtime.taxi_etl.chunks import chunk_rows
from runtime.taxi_etl.errors import LoadInputError, PhaseInputError
from runtime.taxi_etl.load_events import files_to_load
from runtime.taxi_etl.load_objects import ChunkRange, LoadFile
from runtime.taxi_etl.loads import execution_input, execution_name, load_file, load_id, parse_load_id
from runtime.taxi_etl.requests import Layout
from tests.unit.taxi_etl.test_taxi_content_identity import HEADER, ROWS

MAX_LINE_BYTES = 4096
BUCKET = "onceflow-dev-ingest"


def csv_file(rows: int, *, header: bool = True, newline: str = "\n", trailing: bool = True, bom: bool = False) -> bytes:
    lines = ([HEADER] if header else []) + list(ROWS[:rows])
    text = newline.join(lines) + (newline if trailing else "")
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode()


def pieces_of(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


def cut(data: bytes, chunk_rows_: int, piece: int = 1 << 16) -> tuple[tuple[ChunkRange, ...], Layout | None, int]:
    return cut_file(pieces_of(data, piece), chunk_rows_)


def assert_covers(data: bytes, chunks: tuple[ChunkRange, ...]) -> None:
    """The chunks are the file's bytes in order, each cut right after an LF or at the file's end, numbered as an editor numbers lines."""
    assert [chunk.index for chunk in chunks] == list(range(len(chunks)))
    assert b"".join(data[chunk.start : chunk.end + 1] for chunk in chunks) == data
    for chunk in chunks:
        assert chunk.end == len(data) - 1 or data[chunk.end : chunk.end + 1] == b"\n"
        assert chunk.first_line == data.count(b"\n", 0, chunk.start) + 1
        piece = data[chunk.start : chunk.end + 1]
        assert chunk.lines == piece.count(b"\n") + (0 if piece.endswith(b"\n") else 1)


# --- the manifest ---------------------------------------------------------------------------------


def test_a_file_is_cut_every_chunk_rows_lines_at_line_ends() -> None:
    # Given a file of a header and 25 rows, cut every 10 lines
    data = csv_file(25)
    # When it is planned
    chunks, layout, size = cut(data, 10, piece=37)
    # Then three chunks of 10, 10 and 6 lines cover it, and the header decided the layout
    assert [(chunk.first_line, chunk.lines) for chunk in chunks] == [(1, 10), (11, 10), (21, 6)]
    assert_covers(data, chunks)
    assert layout == Layout(18, "the header")
    assert size == len(data)


def test_crlf_lines_are_cut_after_their_lf_and_give_the_rows_of_the_whole_file() -> None:
    # Given a CRLF file without a header
    data = csv_file(12, header=False, newline="\r\n")
    # When it is planned in chunks of 5 lines
    chunks, layout, _ = cut(data, 5, piece=50)
    # Then every chunk ends right after an LF, and the chunks' rows are the whole file's, in order
    assert_covers(data, chunks)
    assert layout == Layout(18, "line 1")
    assert layout is not None
    rows = [
        row
        for chunk in chunks
        for row in chunk_rows(data[chunk.start : chunk.end + 1], chunk.first_line, layout, max_line_bytes=MAX_LINE_BYTES).rows
    ]
    assert rows == list(chunk_rows(data, 1, layout, max_line_bytes=MAX_LINE_BYTES).rows)
    assert len(rows) == 12


def test_a_last_line_without_a_newline_is_a_line_of_the_last_chunk() -> None:
    # Given a file whose last line has no LF
    data = csv_file(7, trailing=False)
    # When it is planned in chunks of 4 lines
    chunks, _, _ = cut(data, 4)
    # Then the last chunk ends at the file's last byte and counts that line
    assert [(chunk.first_line, chunk.lines) for chunk in chunks] == [(1, 4), (5, 4)]
    assert chunks[-1].end == len(data) - 1
    assert_covers(data, chunks)


def test_a_file_of_exactly_whole_chunks_has_no_empty_chunk_after_them() -> None:
    # Given 8 lines ending with an LF, cut every 4
    data = csv_file(7)
    # When it is planned
    chunks, _, _ = cut(data, 4)
    # Then two chunks, the second ending at the file's last LF
    assert [(chunk.first_line, chunk.lines, chunk.end) for chunk in chunks] == [(1, 4, chunks[0].end), (5, 4, len(data) - 1)]


def test_a_bom_is_kept_in_the_first_chunk_and_dropped_by_its_rows() -> None:
    # Given a file that starts with a byte-order mark
    data = csv_file(5, bom=True)
    # When it is planned
    chunks, layout, _ = cut(data, 100)
    # Then the one chunk starts at byte 0 (the BOM is the file's), the header still decides the layout,
    # and the chunk's rows are the five trips
    assert chunks[0].start == 0
    assert layout == Layout(18, "the header")
    assert len(chunk_rows(data, 1, layout, max_line_bytes=MAX_LINE_BYTES).rows) == 5


def test_an_empty_file_has_no_chunk_and_no_layout() -> None:
    # Given an empty object
    # When it is planned
    chunks, layout, size = cut(b"", 10)
    # Then the map has nothing to run
    assert (chunks, layout, size) == ((), None, 0)


@settings(max_examples=15, deadline=None)
@given(
    rows=st.integers(min_value=1, max_value=30), chunk=st.integers(min_value=1, max_value=12), piece=st.integers(min_value=1, max_value=700)
)
def test_the_manifest_does_not_depend_on_how_the_stream_is_read(rows: int, chunk: int, piece: int) -> None:
    # Given any file and any size of the pieces S3 streams it in
    data = csv_file(rows, trailing=rows % 2 == 0)
    # When it is planned
    chunks, _, _ = cut(data, chunk, piece=piece)
    # Then it is the manifest of the whole file read at once
    assert chunks == cut(data, chunk, piece=len(data))[0]
    assert_covers(data, chunks)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        # mtime=0: the same bytes in every xdist worker, which must collect the same test ids
        (gzip.compress(b"vendorid\n1\n", mtime=0), "gzip"),
        (b"PAR1\x15\x04" + b"\x00" * 64, "Parquet"),
        (b"hello,world\nnot,a,trip\n", "17 to 20 columns"),
        (b"\n\n  \n", "no CSV line"),
    ],
    ids=["gzip", "parquet", "no-trip-layout", "blank-lines"],
)
def test_a_file_that_is_not_trips_in_csv_text_is_refused_for_good(data: bytes, words: str) -> None:
    # Given a gzip or Parquet object, or CSV text of no trip layout
    # When it is planned
    with pytest.raises(LoadInputError) as refused:
        cut(data, 10)
    # Then the plan fails with the error the state machine never retries, saying why
    assert words in str(refused.value)


def test_gzip_is_refused_before_the_rest_of_the_object_is_read() -> None:
    # Given a compressed object streamed in pieces
    read: list[int] = []

    def stream() -> Iterator[bytes]:
        for number, piece in enumerate(pieces_of(gzip.compress(csv_file(50)), 16)):
            read.append(number)
            yield piece

    # When it is planned
    with pytest.raises(LoadInputError):
        cut_file(stream(), 10)
    # Then only its first piece was read
    assert read == [0]


def test_a_manifest_item_is_checked_before_a_chunk_reads_it() -> None:
    # Given manifest items as the map hands them to the chunk task
    good = {"index": 3, "start": 10, "end": 99, "firstLine": 7, "lines": 4}
    # When they are read
    # Then a valid one round-trips, and one with a missing or inverted range is a PhaseInputError
    assert ChunkRange.from_json(good).to_json() == good
    for bad in ({**good, "end": 5}, {**good, "firstLine": 0}, {k: v for k, v in good.items() if k != "lines"}, {**good, "start": "10"}):
        with pytest.raises(PhaseInputError):
            ChunkRange.from_json(bad)


# --- identity --------------------------------------------------------------------------------------


def test_a_load_is_one_object_version() -> None:
    # Given the same key in two versions
    first, second = load_id(BUCKET, "incoming/2019-10.csv", "v1"), load_id(BUCKET, "incoming/2019-10.csv", "v2")
    # Then each version is its own load, and the id is the spec's hash
    assert first != second
    assert first == "load-" + hashlib.sha256(f"{BUCKET}/incoming/2019-10.csv/v1".encode()).hexdigest()[:40]
    assert parse_load_id(first) == first


@pytest.mark.parametrize("value", [None, "", "load-", "load-" + "A" * 40, "load-" + "0" * 39, "x" + "0" * 44])
def test_a_malformed_load_id_is_refused(value: str | None) -> None:
    with pytest.raises(InvalidRequest):
        parse_load_id(value)


def test_every_generation_has_the_same_canonical_input() -> None:
    # Given a load
    load = load_file(BUCKET, "incoming/a b.csv", "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")
    # When its execution input is made
    made = execution_input(load)
    # Then it is compact JSON with sorted keys, and generations 1, 2 and 9 are named after the load id
    assert made == json.dumps(
        {"bucket": BUCKET, "key": "incoming/a b.csv", "loadId": load.load_id, "versionId": "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"},
        sort_keys=True,
        separators=(",", ":"),
    )
    assert [execution_name(load.load_id, number) for number in (1, 2, 9)] == [load.load_id, f"{load.load_id}-g2", f"{load.load_id}-g9"]
    assert len(execution_name(load.load_id, 9)) <= 80  # Step Functions' limit on a name


# --- the starter's S3 events ----------------------------------------------------------------------


def s3_event(key: str, version: str | None = "v1", *, bucket: str = BUCKET, event: str = "ObjectCreated:Put") -> str:
    item: dict[str, Any] = {"key": key, "size": 10}
    if version is not None:
        item["versionId"] = version
    return json.dumps({"Records": [{"eventName": event, "s3": {"bucket": {"name": bucket}, "object": item}}]})


def test_an_s3_event_names_the_object_version_with_its_key_decoded() -> None:
    # Given an ObjectCreated event for a key with a space and a plus (URL-encoded as S3 sends them)
    # When it is read
    loads = files_to_load(s3_event("incoming/yellow+2019%2B10.csv"), BUCKET)
    # Then it is the load of that version, the key decoded
    assert loads == [load_file(BUCKET, "incoming/yellow 2019+10.csv", "v1")]


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": BUCKET}),
        s3_event("loads/x/manifest.json"),
        s3_event("incoming/a.csv", bucket="another-bucket"),
        s3_event("incoming/a.csv", None),
        s3_event("incoming/a.csv", "null"),
        s3_event("incoming/a.csv", event="ObjectRemoved:Delete"),
        "not json",
    ],
)
def test_events_that_name_no_loadable_version_start_nothing(body: str) -> None:
    assert files_to_load(body, BUCKET) == []


# --- the report -----------------------------------------------------------------------------------

LOAD = LoadFile(BUCKET, "incoming/a.csv", "v1", "load-" + "0" * 40)


def summary(index: int, *, refused: tuple[int, ...] = (), stored: int = 2, flagged: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "index": index,
        "firstLine": 1 + index * 10,
        "lines": 10,
        "rowsRead": 3,
        "refused": [{"line": line, "reason": f"line {line} is bad"} for line in refused],
        "stored": stored,
        "alreadyStored": 1,
        "flagged": flagged or {},
        "flaggedByDetail": {"error:StoreConflict": 1} if flagged else {},
        "findings": {"total_amount_mismatch": 1},
    }


def test_the_report_adds_up_its_chunks_and_lists_refused_lines_in_line_order() -> None:
    # Given three chunks' summaries read in any order, one of them listed twice
    summaries = [summary(2, refused=(25,)), summary(0, refused=(3, 1)), summary(1, flagged={"store": 1}), summary(0, refused=(3, 1))]
    # When they are aggregated
    report = aggregate(LOAD, {"chunks": 3, "lines": 30}, None, summaries)
    # Then the totals count each chunk once, and the load succeeded
    assert report["status"] == "SUCCEEDED"
    assert (report["chunks"], report["chunksDone"], report["chunksMissing"]) == (3, 3, [])
    assert (report["rowsRead"], report["stored"], report["alreadyStored"], report["lines"]) == (9, 6, 3, 30)
    assert report["flagged"] == {"store": 1}
    assert report["flaggedByDetail"] == {"error:StoreConflict": 1}
    assert report["findings"] == {"total_amount_mismatch": 3}
    assert [line["line"] for line in report["refused"]] == [1, 3, 25]
    assert report["refusedLines"] == 3
    assert report["error"] is None


def test_a_missing_chunk_or_a_caught_error_fails_the_report_and_its_lists_are_capped() -> None:
    # Given 300 chunks of which only chunk 0 is done, and it refused 1,500 lines
    done = summary(0, refused=tuple(range(1500, 0, -1)))
    # When they are aggregated
    report = aggregate(LOAD, {"chunks": 300, "lines": 3000}, None, [done])
    # Then the load failed, the first 100 missing chunks and the first 1,000 refused lines are listed, with full counts
    assert report["status"] == "FAILED"
    assert report["chunksMissing"] == list(range(1, 1 + CHUNKS_MISSING_SHOWN))
    assert [line["line"] for line in report["refused"]] == list(range(1, REFUSED_SHOWN + 1))
    assert report["refusedLines"] == 1500
    # And a plan that failed leaves no chunk count, with the caught error in the report
    failed = aggregate(LOAD, None, {"Error": "LoadInputError", "Cause": "the file is gzip-compressed"}, [])
    assert (failed["status"], failed["chunks"], failed["lines"]) == ("FAILED", None, None)
    assert failed["error"] == {"error": "LoadInputError", "cause": "the file is gzip-compressed"}


def test_an_empty_file_is_a_succeeded_load_of_nothing() -> None:
    report = aggregate(LOAD, {"chunks": 0, "lines": 0}, None, [])
    assert (report["status"], report["chunksDone"], report["rowsRead"]) == ("SUCCEEDED", 0, 0)


# --- settings -------------------------------------------------------------------------------------

CHUNK_ENV = {
    "INGEST_BUCKET": BUCKET,
    "MAX_LINE_BYTES": "4096",
    "VALIDATION_STATUS_TABLE": "v",
    "TRANSFORMATION_STATUS_TABLE": "t",
    "STORE_STATUS_TABLE": "s",
    "FINAL_TABLE": "trips",
}


def test_the_bulk_settings_read_exactly_their_variables() -> None:
    # Given each function's environment as the construct sets it
    # When read
    # Then each settings object holds its values
    assert BulkPlanSettings.from_env({"INGEST_BUCKET": BUCKET, "CHUNK_ROWS": "2000"}) == BulkPlanSettings(BUCKET, 2000)
    assert BulkChunkSettings.from_env(CHUNK_ENV) == BulkChunkSettings(BUCKET, 4096, "v", "t", "s", "trips")
    assert BulkReportSettings.from_env({"INGEST_BUCKET": BUCKET}) == BulkReportSettings(BUCKET)
    arn = "arn:aws:states:us-east-1:123456789012:stateMachine:bulk"
    assert LoadsSettings.from_env({"INGEST_BUCKET": BUCKET, "BULK_STATE_MACHINE_ARN": arn}) == LoadsSettings(BUCKET, arn)


@pytest.mark.parametrize("rows", ["99", "10001", "", "many", "0"])
def test_chunk_rows_out_of_bounds_is_refused_at_cold_start(rows: str) -> None:
    with pytest.raises(SettingsError, match="CHUNK_ROWS"):
        BulkPlanSettings.from_env({"INGEST_BUCKET": BUCKET, "CHUNK_ROWS": rows})


@pytest.mark.parametrize("missing", sorted(CHUNK_ENV))
def test_a_chunk_without_one_of_its_variables_is_refused_at_cold_start(missing: str) -> None:
    with pytest.raises(SettingsError, match=missing):
        BulkChunkSettings.from_env({name: value for name, value in CHUNK_ENV.items() if name != missing})


def test_a_chunk_writes_as_many_rows_at_once_as_a_phase() -> None:
    # Given the chunk's row concurrency, a constant so that the light bulk functions need not import the phases' wiring
    from runtime.taxi_etl import bulk_chunk_wiring, phase_wiring

    # Then it is the phases' own: a chunk's burst on the tables is a phase's
    assert bulk_chunk_wiring.CHUNK_ROW_CONCURRENCY == phase_wiring.PHASE_ROW_CONCURRENCY
