"""A TLC trip file in any format the loader takes (.csv, .csv.gz, .parquet) as one stream of CSV lines: a header, then
one line per trip, read lazily (one Parquet record batch of at most 65,536 rows, or one CSV line, in memory at a time). Parquet cells are
written in the trip's canonical spelling (runtime/taxi_etl/trip_lines.canonical_line's: New York wall-clock times
as NYC Open Data writes them, codes as integers, distances with two places, amounts in their shortest form, payment
type 0 before 2025 as empty), in the CSV layout the file's column set implies; so a row has the same content id from
the Parquet file, the CSV file and over HTTP. `TripStream` is that stream as a binary file object, which boto3's
managed transfer uploads without a temporary file (`upload_trip_file`).

pyarrow is imported only when a Parquet file is read, so the CSV paths need only the standard library.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from onceflow.runtime.taxi_etl.trip_lines import SCHEMA_BY_COLUMNS
from onceflow.runtime.taxi_etl.trips import INPUT_SEPARATOR, UNKNOWN_PAYMENT_BEFORE_2025

SUFFIXES: Final = (".csv", ".csv.gz", ".parquet")
_PAYMENT_0_KNOWN_FROM: Final = 2025  # before the 2025 data dictionary, payment_type 0 is "unknown" (an empty cell)
_DISTANCE_PLACES: Final = Decimal("0.01")
_READ_BYTES: Final = 1 << 16
# The BOM the API drops from a body's start (runtime.shared.http.UTF8_BOM, whose module the installed wheel cannot import).
UTF8_BOM: Final = b"\xef\xbb\xbf"


class TripFileError(ValueError):
    """The file cannot be read as trips: an unknown format, a Parquet column set of no TLC layout, or no content."""


# The TLC's Parquet columns (lower-cased: "Airport_fee" in the TLC's files, "airport_fee" in some), in CSV order, each
# with its CSV header name and how its cells are written. The first 17 every layout has; the fees follow in the order
# the layouts added them (2019: congestion_surcharge, 2022: airport_fee, 2025: cbd_congestion_fee).
_CODE, _DATETIME, _DISTANCE, _TEXT, _AMOUNT = "code", "datetime", "distance", "text", "amount"
_PARQUET_COLUMNS: Final = (
    ("vendorid", "VendorID", _CODE),
    ("tpep_pickup_datetime", "tpep_pickup_datetime", _DATETIME),
    ("tpep_dropoff_datetime", "tpep_dropoff_datetime", _DATETIME),
    ("passenger_count", "passenger_count", _CODE),
    ("trip_distance", "trip_distance", _DISTANCE),
    ("ratecodeid", "RatecodeID", _CODE),
    ("store_and_fwd_flag", "store_and_fwd_flag", _TEXT),
    ("pulocationid", "PULocationID", _CODE),
    ("dolocationid", "DOLocationID", _CODE),
    ("payment_type", "payment_type", _CODE),
    ("fare_amount", "fare_amount", _AMOUNT),
    ("extra", "extra", _AMOUNT),
    ("mta_tax", "mta_tax", _AMOUNT),
    ("tip_amount", "tip_amount", _AMOUNT),
    ("tolls_amount", "tolls_amount", _AMOUNT),
    ("improvement_surcharge", "improvement_surcharge", _AMOUNT),
    ("total_amount", "total_amount", _AMOUNT),
    ("congestion_surcharge", "congestion_surcharge", _AMOUNT),
    ("airport_fee", "Airport_fee", _AMOUNT),
    ("cbd_congestion_fee", "cbd_congestion_fee", _AMOUNT),
)
_REQUIRED_COLUMNS: Final = min(SCHEMA_BY_COLUMNS)  # 17: the 2017 layout
_PICKUP: Final = 1
_PAYMENT_TYPE: Final = 9


def trip_lines(path: Path) -> Iterator[str]:
    """The file's lines without line endings: a header, then one CSV line per trip (.parquet), or the file's own lines
    (.csv, .csv.gz: every line, blank ones too, so line numbers stay the file's; decoded as UTF-8, the BOM dropped,
    split at LF with a CR before it dropped, as the API splits a body; bytes that are not UTF-8 are kept as
    surrogates, which TripStream writes back as the same bytes, so the bulk route refuses that line itself). Raises
    TripFileError for another suffix, an empty file, or a Parquet file whose columns are no TLC yellow-trip layout."""
    name = path.name.lower()
    if name.endswith(".parquet"):
        return _parquet_lines(path)
    if name.endswith(".csv.gz"):
        return _csv_lines(path, gzipped=True)
    if name.endswith(".csv"):
        return _csv_lines(path, gzipped=False)
    raise TripFileError(f"{path}: a trip file is one of {', '.join(SUFFIXES)}")


def _csv_lines(path: Path, *, gzipped: bool) -> Iterator[str]:
    with _open_csv(path, gzipped=gzipped) as stream:  # the first line read now, so a bad file fails at the call
        try:
            first = stream.readline()
        except (OSError, EOFError) as error:  # gzip.BadGzipFile is an OSError
            raise TripFileError(f"{path}: not readable as {'gzip' if gzipped else 'a file'}: {error}") from error
    if not first.removeprefix(UTF8_BOM):
        raise TripFileError(f"{path}: the file has no CSV line")
    return _decoded(path, gzipped=gzipped)


def _open_csv(path: Path, *, gzipped: bool) -> io.BufferedIOBase:
    return gzip.open(path, "rb") if gzipped else path.open("rb")


def _decoded(path: Path, *, gzipped: bool) -> Iterator[str]:
    with _open_csv(path, gzipped=gzipped) as stream:
        for number, raw in enumerate(stream):
            text = (raw.removeprefix(UTF8_BOM) if number == 0 else raw).decode("utf-8", "surrogateescape")
            yield text.removesuffix("\n").removesuffix("\r")


def _parquet_lines(path: Path) -> Iterator[str]:
    import pyarrow as pa  # type: ignore[import-untyped]  # lazily: only Parquet needs it (no stubs or py.typed)
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as error:
        raise TripFileError(f"{path}: not a Parquet file: {error}") from error
    schema = parquet.schema_arrow
    layout = parquet_layout(list(schema.names))
    for name, _, kind in layout:
        column_type = schema.field(name).type
        if kind == _DATETIME and not (pa.types.is_timestamp(column_type) and column_type.tz is None):
            raise TripFileError(f"{path}: {name} is {column_type}; TLC's times are timestamps of New York wall clock, no time zone")
    if parquet.metadata.num_rows == 0:
        raise TripFileError(f"{path}: the Parquet file has no rows")
    return _parquet_rows(parquet, layout, pa)


def parquet_layout(names: Sequence[str]) -> tuple[tuple[str, str, str], ...]:
    """(the file's column name, the CSV header name, the cell kind) for each column of the CSV layout `names` imply, in
    CSV order: the 17 columns of 2017, then the fees the file has, which must be a prefix of congestion_surcharge,
    airport_fee, cbd_congestion_fee (2019: 18, 2022: 19, 2025: 20). TripFileError names what is missing or unknown."""
    by_lower = {name.lower(): name for name in names}
    known = {lower for lower, _, _ in _PARQUET_COLUMNS}
    unknown = [name for name in names if name.lower() not in known]
    duplicated = sorted(lower for lower in by_lower if sum(name.lower() == lower for name in names) > 1)
    width = _REQUIRED_COLUMNS
    while width < len(_PARQUET_COLUMNS) and _PARQUET_COLUMNS[width][0] in by_lower:
        width += 1
    missing = [header for lower, header, _ in _PARQUET_COLUMNS[:width] if lower not in by_lower]
    beyond = [by_lower[lower] for lower, _, _ in _PARQUET_COLUMNS[width:] if lower in by_lower]
    problems = (
        ([f"unknown columns {unknown}"] if unknown else [])
        + ([f"columns named twice {duplicated}"] if duplicated else [])
        + ([f"missing columns {missing}"] if missing else [])
        + ([f"columns {beyond} without the fees before them"] if beyond else [])
    )
    if problems:
        raise TripFileError(
            f"the Parquet columns {list(names)} are no TLC yellow-trip layout ({'; '.join(problems)}); expected the 17 "
            f"columns {[header for _, header, _ in _PARQUET_COLUMNS[:_REQUIRED_COLUMNS]]} and then, in order, "
            f"{[header for _, header, _ in _PARQUET_COLUMNS[_REQUIRED_COLUMNS:]]} as the year's layout has them"
        )
    return tuple((by_lower[lower], header, kind) for lower, header, kind in _PARQUET_COLUMNS[:width])


def _parquet_rows(parquet: Any, layout: tuple[tuple[str, str, str], ...], pa: Any) -> Iterator[str]:
    yield _csv_text([[header for _, header, _ in layout]]).removesuffix("\n")
    names = [name for name, _, _ in layout]
    for batch in parquet.iter_batches(columns=names):
        columns = [_cells(batch.column(name), kind, pa) for name, _, kind in layout]
        pickups = batch.column(layout[_PICKUP][0])
        years = [moment.year if moment else None for moment in _seconds(pickups, pa).to_pylist()]
        payments = columns[_PAYMENT_TYPE]
        for index, year in enumerate(years):  # 0 means "unknown" before 2025, as an empty cell does: canonical is empty
            if payments[index] == str(UNKNOWN_PAYMENT_BEFORE_2025) and year is not None and year < _PAYMENT_0_KNOWN_FROM:
                payments[index] = ""
        yield from _csv_text(list(zip(*columns, strict=True))).split("\n")[:-1]


def _seconds(column: Any, pa: Any) -> Any:
    """Timestamps cut to whole seconds (canonical times have none; [ns] has no Python datetime), New York wall clock."""
    return column.cast(pa.timestamp("s"), safe=False)


def _cells(column: Any, kind: str, pa: Any) -> list[str]:
    if kind == _DATETIME:
        return ["" if moment is None else _moment(moment) for moment in _seconds(column, pa).to_pylist()]
    values = column.to_pylist()
    if kind == _TEXT:
        return ["" if value is None else str(value) for value in values]
    write = _WRITERS[kind]
    return ["" if value is None else write(value) for value in values]


def _moment(moment: datetime) -> str:
    # trip_lines' canonical time, NYC Open Data's spelling: whole seconds here, four-digit years; faster than strftime
    return f"{moment.isoformat()}.000"


def _integral(value: float | int) -> str:
    """A code in a double column (passenger_count 1.0) as the CSV files write it, 1; a fraction as it is, for the
    validator to blank."""
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    return str(int(value))


def _amount(value: float | int) -> str:
    """The shortest decimal that is the double (repr's), in the amount's canonical form: 7.5, 9, 0 (not -0)."""
    text = repr(value)
    if isinstance(value, float) and "e" not in text and "n" not in text:  # most amounts: no exponent, NaN or inf
        text = text.removesuffix(".0")
        return "0" if text == "-0" else text
    number = Decimal(text)
    if not number.is_finite():
        return text
    return format((number + 0).normalize(), "f")


def _distance(value: float | int) -> str:
    """A distance with at least two places, as the TLC's CSVs write it: 1.5 -> 1.50, 0.0 -> 0.00."""
    number = Decimal(repr(value))
    if not number.is_finite():
        return repr(value)
    number = (number + 0).normalize()
    exponent = number.as_tuple().exponent
    assert isinstance(exponent, int)  # finite
    return format(number.quantize(_DISTANCE_PLACES) if exponent > -2 else number, "f")


_WRITERS: Final[dict[str, Callable[[Any], str]]] = {
    _CODE: _integral,
    _AMOUNT: _amount,
    _DISTANCE: _distance,
}


def _csv_text(rows: Sequence[Sequence[str]]) -> str:
    """The rows as CSV, each ending in LF; quoted as the csv module quotes (a comma in a text cell, say)."""
    target = io.StringIO()
    csv.writer(target, delimiter=INPUT_SEPARATOR, lineterminator="\n", quoting=csv.QUOTE_MINIMAL).writerows(rows)
    return target.getvalue()


class TripStream(io.RawIOBase):
    """The lines of `trip_lines` as UTF-8 bytes (a CSV file's bytes that are not UTF-8 as they were), each ending in
    LF: a read-only, non-seekable binary file that boto3's `upload_fileobj` reads part by part. Holds at most one
    line more than a read asks for."""

    def __init__(self, lines: Iterator[str]) -> None:
        super().__init__()
        self._lines = lines
        self._pending = memoryview(b"")  # what is left of the last line read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        size = 0
        while size < len(view):
            if not self._pending:
                line = next(self._lines, None)
                if line is None:
                    break
                self._pending = memoryview(f"{line}\n".encode("utf-8", "surrogateescape"))
            taken = min(len(view) - size, len(self._pending))
            view[size : size + taken] = self._pending[:taken]
            self._pending = self._pending[taken:]
            size += taken
        return size


def upload_trip_file(
    s3: Any, path: Path, bucket: str, key: str, *, part_size: int, on_bytes: Callable[[int], object] | None = None
) -> dict[str, str]:
    """Upload the file's `trip_lines` to s3://bucket/key through boto3's managed transfer: a single PUT up to
    `part_size` bytes, a multipart upload of `part_size` parts above it (S3 takes parts of 5 MiB or more). `on_bytes`
    is called with each count of bytes sent (a progress bar's update). Returns the object's ETag and, in a versioned
    bucket, VersionId, as a HEAD of the key reads them after the upload."""
    from boto3.s3.transfer import TransferConfig

    config = TransferConfig(multipart_threshold=part_size, multipart_chunksize=part_size)
    with io.BufferedReader(TripStream(trip_lines(path)), buffer_size=_READ_BYTES) as stream:
        s3.upload_fileobj(stream, bucket, key, Config=config, Callback=on_bytes)
    head = s3.head_object(Bucket=bucket, Key=key)
    return {name: head[name] for name in ("ETag", "VersionId") if name in head}
