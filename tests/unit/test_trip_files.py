"""A trip file as the loader reads it (onceflow/clients/trip_files.py): .csv, .csv.gz and .parquet give one stream of
CSV lines, and a row has one content id whether it comes from Parquet, from CSV or over HTTP. The Parquet files are
built here from the real rows of tests/data/taxi_etl (tests/trip_parquet.py). Pure: no AWS."""

from __future__ import annotations

import gzip
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onceflow.clients.trip_files import TripFileError, TripStream, parquet_layout, trip_lines
from runtime.taxi_etl.requests import content_id, parse_single
from runtime.taxi_etl.trip_lines import canonical_line, line_columns
from tests.trip_parquet import SAMPLE, TLC_COLUMNS, sample_cells, sample_lines, trip_table, write_parquet

MAX_LINE_BYTES = 4096
CBD_FEES = (0.75, 0.0, 1.5, None)  # a 2025 fee column: charged, not charged, and null (read as 0)


def http_id(line: str) -> str:
    """The id POST /trips gives the line."""
    return parse_single(line, None, max_line_bytes=MAX_LINE_BYTES).rows[0].store_request_id


def layout_fees(columns: int, count: int) -> dict[str, list[float | None]]:
    fees: dict[str, list[float | None]] = {}
    if columns >= 19:
        fees["Airport_fee"] = [1.25 if index % 7 == 0 else 0.0 for index in range(count)]
    if columns == 20:
        fees["cbd_congestion_fee"] = [CBD_FEES[index % len(CBD_FEES)] for index in range(count)]
    return fees


def csv_fee(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


# --- Parquet, CSV and HTTP: one id per row ------------------------------------------------------------


@pytest.mark.parametrize(("columns", "unit"), [(18, "us"), (19, "ns"), (20, "us")])
def test_every_parquet_row_has_the_id_of_the_same_row_in_csv_and_over_http(tmp_path: Path, columns: int, unit: str) -> None:
    # Given the 2,000 real rows as a Parquet file of the layout, TLC's types, several row groups
    cells = sample_cells()
    fees = layout_fees(columns, len(cells))
    path = write_parquet(tmp_path / "month.parquet", trip_table(cells, unit=unit, fees=fees), row_group_size=300)
    csv_rows = [",".join(row + [csv_fee(values[index]) for values in fees.values()]) for index, row in enumerate(cells)]

    # When the file is read as lines
    header, *lines = trip_lines(path)

    # Then the header names the layout, every line has its columns, and each row has one id on every route
    assert len(line_columns(header)) == columns and header.startswith("VendorID,")
    assert len(lines) == len(cells)
    assert {len(line_columns(line)) for line in lines} == {columns}
    csv_ids, parquet_ids = [content_id(line) for line in csv_rows], [content_id(line) for line in lines]
    assert parquet_ids == csv_ids
    # (POST /trips parses a line as a whole request: every 25th row, both spellings, to keep the test cheap)
    for parquet_line, csv_line, row_id in list(zip(lines, csv_rows, csv_ids, strict=True))[::25]:
        assert http_id(parquet_line) == http_id(csv_line) == row_id
    # And rows that are different trips in CSV are different trips from Parquet
    assert len(set(parquet_ids)) == len(set(csv_rows))
    # And every line is already the trip's canonical spelling, in the file's layout (canonical_line writes an empty
    # fee as 0 and leaves trailing 0 fees out, down to 18 columns)
    assert [canonical_line(line) for line in lines] == [canonical_in_18_to_20(line) for line in lines]


def canonical_in_18_to_20(line: str) -> str:
    cells = line_columns(line)
    cells[17:] = [fee or "0" for fee in cells[17:]]
    while len(cells) > 18 and cells[-1] == "0":
        cells.pop()
    return ",".join(cells)


def test_parquet_cells_are_written_in_the_csv_files_spelling(tmp_path: Path) -> None:
    # Given the first real row (passenger_count 1.0 and RatecodeID 1.0 as doubles) in a 2022 file with a null airport fee
    row = sample_cells()[:1]
    path = write_parquet(tmp_path / "one.parquet", trip_table(row, fees={"airport_fee": [None]}))

    # When it is read
    _, line = trip_lines(path)

    # Then codes are integers, the distance has two places, amounts their shortest form, times the canonical form,
    # and the null fee an empty cell
    assert line == "2,2019-10-23T16:39:42.000,2019-10-23T17:14:10.000,1,7.93,1,N,138,170,1,29.5,1,0.5,7.98,6.12,0.3,47.9,2.5,"


# Values TLC's Parquet columns hold, valid or not: codes the validator blanks (passenger 10, rate code 7), negative
# distances, fractions of a passenger, payment type 0 (unknown before 2025).
cents = st.integers(min_value=-2000, max_value=20000).map(lambda cent: cent / 100)
trips = st.fixed_dictionaries(
    {
        "row": st.integers(min_value=0, max_value=len(sample_lines()) - 1),
        "passenger_count": st.sampled_from([None, 0.0, 1.0, 2.0, 6.0, 9.0, 10.0, 11.0, 1.5]),
        "trip_distance": st.one_of(st.none(), cents),
        "RatecodeID": st.sampled_from([None, 1.0, 2.0, 5.0, 6.0, 7.0, 8.0, 99.0]),
        "store_and_fwd_flag": st.sampled_from([None, "Y", "N"]),
        "payment_type": st.sampled_from([None, 0, 1, 2, 3, 4, 5, 6]),
        "fare_amount": cents,
        "tip_amount": cents,
        "congestion_surcharge": st.sampled_from([0.0, 2.5, -2.5]),
        "Airport_fee": st.sampled_from([0.0, 1.25, 1.75]),
        "minutes": st.integers(min_value=0, max_value=90),
    }
)
ROW_INDEX = {name: index for index, (name, _) in enumerate(TLC_COLUMNS)}


def trip_cells(trip: dict[str, object]) -> list[str]:
    """The CSV cells of a generated trip, as a TLC CSV writes them (TLC times, two-place amounts)."""
    row_index = trip["row"]
    assert isinstance(row_index, int)
    cells = list(sample_cells()[row_index])
    pickup = datetime.fromisoformat(cells[1])
    minutes = trip["minutes"]
    assert isinstance(minutes, int)
    cells[1], cells[2] = (moment.strftime("%Y-%m-%d %H:%M:%S") for moment in (pickup, pickup + timedelta(minutes=minutes)))
    for name in ("passenger_count", "RatecodeID", "payment_type"):
        value = trip[name]
        cells[ROW_INDEX[name]] = "" if value is None else str(int(value))  # type: ignore[call-overload]
    if trip["passenger_count"] == 1.5:
        cells[ROW_INDEX["passenger_count"]] = "1.5"
    flag = trip["store_and_fwd_flag"]
    cells[ROW_INDEX["store_and_fwd_flag"]] = "" if flag is None else str(flag)
    for name in ("trip_distance", "fare_amount", "tip_amount", "congestion_surcharge"):
        value = trip[name]
        cells[ROW_INDEX[name]] = "" if value is None else f"{value:.2f}"
    return [*cells, f"{trip['Airport_fee']:.2f}"]


def meaning(trip: dict[str, object]) -> tuple[str, ...]:
    """What a generated trip says, cell by cell: payment_type 0 is unknown before 2025 (the sample's rows are 2019), as
    an empty cell is."""
    cells = trip_cells(trip)
    if cells[ROW_INDEX["payment_type"]] == "0":
        cells[ROW_INDEX["payment_type"]] = ""
    return tuple(cells)


def parquet_line(tmp_path: Path, trip: dict[str, object]) -> str:
    cells = trip_cells(trip)
    cells[1] = cells[1].replace(" ", "T")
    cells[2] = cells[2].replace(" ", "T")
    airport_fee = float(cells.pop())
    path = write_parquet(tmp_path / "trip.parquet", trip_table([cells], unit="ns", fees={"Airport_fee": [airport_fee]}))
    _, line = trip_lines(path)
    return line


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trip=trips)
def test_a_generated_trip_has_one_id_from_parquet_csv_and_http(tmp_path: Path, trip: dict[str, object]) -> None:
    # Given a trip with TLC's Parquet values, valid or not, and the same trip as a TLC CSV line
    csv_line = ",".join(trip_cells(trip))

    # When it is read from a Parquet file
    line = parquet_line(tmp_path, trip)

    # Then it has the CSV line's id, and the id POST /trips gives it
    assert content_id(line) == content_id(csv_line) == http_id(csv_line)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=trips, second=trips)
def test_two_different_generated_trips_never_share_an_id(tmp_path: Path, first: dict[str, object], second: dict[str, object]) -> None:
    # Given two generated trips (different in any cell, valid or not, or the same)
    # When both are read from Parquet files
    ids = content_id(parquet_line(tmp_path, first)), content_id(parquet_line(tmp_path, second))

    # Then they share an id exactly when they say the same
    assert (ids[0] == ids[1]) == (meaning(first) == meaning(second))


def test_payment_type_0_before_2025_is_the_empty_cell_of_the_csv_files(tmp_path: Path) -> None:
    # Given a 2019 row with payment_type 0 in Parquet (unknown before 2025), and a null fee
    cells = sample_cells()[:1]
    cells[0][ROW_INDEX["payment_type"]] = "0"
    path = write_parquet(tmp_path / "zero.parquet", trip_table(cells, fees={"Airport_fee": [None]}))

    # When it is read
    _, line = trip_lines(path)

    # Then the cell is empty, and the row has the id of the TLC CSV row that leaves it empty
    assert line_columns(line)[ROW_INDEX["payment_type"]] == ""
    tlc_row = list(sample_cells()[0])
    tlc_row[ROW_INDEX["payment_type"]] = ""
    assert content_id(line) == content_id(",".join(tlc_row))


# --- CSV and gzip ---------------------------------------------------------------------------------


def test_a_gzipped_csv_gives_exactly_the_csv_lines(tmp_path: Path) -> None:
    # Given the sample and the same bytes gzipped
    packed = tmp_path / "sample.csv.gz"
    packed.write_bytes(gzip.compress(SAMPLE.read_bytes()))

    # When both are read
    # Then the lines are the same, the header first
    assert list(trip_lines(packed)) == list(trip_lines(SAMPLE)) == SAMPLE.read_text(encoding="utf-8").splitlines()


def test_a_bom_and_crlf_are_dropped_as_the_api_drops_them(tmp_path: Path) -> None:
    # Given the sample saved with a byte-order mark and CRLF line endings
    saved = tmp_path / "saved.csv"
    saved.write_bytes(b"\xef\xbb\xbf" + SAMPLE.read_bytes().replace(b"\n", b"\r\n"))

    # When it is read
    # Then the lines are the sample's
    assert list(trip_lines(saved)) == list(trip_lines(SAMPLE))


def test_the_stream_is_the_lines_as_utf8_bytes_whatever_the_read_size(tmp_path: Path) -> None:
    # Given a Parquet month and its lines
    path = write_parquet(tmp_path / "month.parquet", trip_table(sample_cells()[:300], fees=layout_fees(19, 300)))
    expected = "".join(f"{line}\n" for line in trip_lines(path)).encode("utf-8")

    # When it is read through TripStream in odd-sized pieces
    stream = TripStream(trip_lines(path))
    pieces = []
    while piece := stream.read(4093):
        pieces.append(piece)

    # Then the bytes are the lines', each ending in LF, and the stream is not seekable (boto3 then reads it part by part)
    assert b"".join(pieces) == expected
    assert stream.readable() and not stream.seekable()


# --- files that are no trips ----------------------------------------------------------------------


def test_a_parquet_file_without_a_column_names_it(tmp_path: Path) -> None:
    # Given a Parquet file without PULocationID
    table = trip_table(sample_cells()[:5]).drop_columns(["PULocationID"])
    path = write_parquet(tmp_path / "missing.parquet", table)

    # When it is read
    # Then the error names the missing column
    with pytest.raises(TripFileError, match=r"missing columns \['PULocationID'\]"):
        trip_lines(path)


def test_a_parquet_file_with_an_unknown_column_names_it(tmp_path: Path) -> None:
    # Given a Parquet file with a column no TLC layout has
    table = trip_table(sample_cells()[:5]).append_column("tip_percent", pa.array([0.1] * 5))
    path = write_parquet(tmp_path / "unknown.parquet", table)

    # When it is read
    # Then the error names it
    with pytest.raises(TripFileError, match=r"unknown columns \['tip_percent'\]"):
        trip_lines(path)


def test_a_later_fee_without_the_ones_before_it_is_no_layout() -> None:
    # Given the 17 columns of 2017 and cbd_congestion_fee, without congestion_surcharge and airport_fee
    names = [name for name, _ in TLC_COLUMNS[:17]] + ["cbd_congestion_fee"]

    # When the layout is decided
    # Then the fee is named as out of place
    with pytest.raises(TripFileError, match=r"columns \['cbd_congestion_fee'\] without the fees before them"):
        parquet_layout(names)


def test_airport_fee_is_taken_in_either_case() -> None:
    # Given the 2022 columns with "Airport_fee" (TLC's files) and with "airport_fee" (some others)
    base = [name for name, _ in TLC_COLUMNS]

    # When the layouts are decided
    # Then both are the 19-column layout, which writes the header TLC's CSV files have
    for fee in ("Airport_fee", "airport_fee"):
        layout = parquet_layout([*base, fee])
        assert [header for _, header, _ in layout][-1] == "Airport_fee"
        assert layout[-1][0] == fee and len(layout) == 19


def test_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    # Given a CSV saved under a .parquet name, and a .csv.gz that is not gzip
    fake = tmp_path / "month.parquet"
    fake.write_bytes(SAMPLE.read_bytes())
    not_gzip = tmp_path / "month.csv.gz"
    not_gzip.write_bytes(SAMPLE.read_bytes())

    # When they are read
    # Then each is a clear error
    with pytest.raises(TripFileError, match="not a Parquet file"):
        trip_lines(fake)
    with pytest.raises(TripFileError, match="not readable as gzip"):
        trip_lines(not_gzip)


def test_a_file_of_another_format_is_refused(tmp_path: Path) -> None:
    # Given a JSON file
    path = tmp_path / "trips.json"
    path.write_text("[]", encoding="utf-8")

    # When it is read
    # Then the error names the formats taken
    with pytest.raises(TripFileError, match=r"\.csv, \.csv\.gz, \.parquet"):
        trip_lines(path)


@pytest.mark.parametrize("name", ["empty.csv", "empty.csv.gz", "empty.parquet"])
def test_an_empty_file_is_refused(tmp_path: Path, name: str) -> None:
    # Given an empty file: no bytes (CSV), an empty gzip member, a Parquet file with the columns but no rows
    path = tmp_path / name
    if name.endswith(".parquet"):
        write_parquet(path, trip_table([]))
    else:
        path.write_bytes(gzip.compress(b"") if name.endswith(".gz") else b"")

    # When it is read
    # Then it is refused as empty
    with pytest.raises(TripFileError, match=r"no (CSV line|rows)"):
        trip_lines(path)


def test_a_time_column_with_a_time_zone_is_refused(tmp_path: Path) -> None:
    # Given a Parquet file whose pick-up times carry a time zone (an instant, not TLC's New York wall clock)
    table = trip_table(sample_cells()[:5])
    index = table.schema.get_field_index("tpep_pickup_datetime")
    zoned = table.set_column(index, "tpep_pickup_datetime", table.column(index).cast(pa.timestamp("us", tz="UTC")))
    path = write_parquet(tmp_path / "zoned.parquet", zoned)

    # When it is read
    # Then the column and its type are named, rather than times shifted by an offset
    with pytest.raises(TripFileError, match=r"tpep_pickup_datetime is timestamp\[us, tz=UTC\]"):
        trip_lines(path)


def test_doubles_no_csv_file_writes_are_left_for_the_validator_to_judge(tmp_path: Path) -> None:
    # Given a real row whose fare is NaN, tip 1e-05, distance NaN and passenger count 1.5 in Parquet
    cells = sample_cells()[:1]
    table = trip_table(cells)
    for name, value in (("fare_amount", float("nan")), ("tip_amount", 1e-05), ("trip_distance", float("nan")), ("passenger_count", 1.5)):
        table = table.set_column(table.schema.get_field_index(name), name, pa.array([value], pa.float64()))
    path = write_parquet(tmp_path / "odd.parquet", table)

    # When it is read
    _, line = trip_lines(path)

    # Then each is written as the value it is, not rounded to a valid one: the validator then rejects or blanks it
    written = line_columns(line)
    assert [written[ROW_INDEX[name]] for name in ("fare_amount", "tip_amount", "trip_distance", "passenger_count")] == [
        "nan",
        "0.00001",
        "nan",
        "1.5",
    ]


def test_csv_bytes_that_are_not_utf8_reach_the_stream_unchanged(tmp_path: Path) -> None:
    # Given a CSV file whose second trip line has a Latin-1 byte, and a blank line, after a header with a BOM
    header, first, second = SAMPLE.read_bytes().splitlines()[:3]
    broken = second.replace(b",N,", b",\xd1,")
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"\xef\xbb\xbf" + header + b"\r\n" + first + b"\r\n\r\n" + broken + b"\r\n")

    # When it is streamed
    streamed = TripStream(trip_lines(path)).read()

    # Then the bytes are the file's without the BOM and CRs, the blank line kept (line numbers stay the file's) and the
    # byte that is not UTF-8 as it was, for the bulk route to refuse that line as not UTF-8 text
    assert streamed == header + b"\n" + first + b"\n\n" + broken + b"\n"


def test_reading_csv_needs_no_pyarrow(tmp_path: Path) -> None:
    # Given a fresh interpreter
    # When it imports the module and reads the sample CSV
    script = (
        "import sys; from pathlib import Path; from onceflow.clients.trip_files import trip_lines; "
        f"lines = list(trip_lines(Path({str(SAMPLE)!r}))); print(len(lines), 'pyarrow' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)

    # Then it read every line without importing pyarrow (imported only for a Parquet file)
    assert result.stdout.split() == [str(len(sample_lines()) + 1), "False"]
