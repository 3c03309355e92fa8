"""Parquet trip files built in the test from the real NYC TLC rows of tests/data/taxi_etl/yellow_2019-10_sample.csv,
with the column names and types of the TLC's yellow-trip Parquet files (never downloaded): VendorID int32, times
timestamp[us] (or [ns]) New York wall clock without a time zone, passenger_count and RatecodeID double,
store_and_fwd_flag string, the zone ids int32, payment_type int64, distance and amounts double."""

from __future__ import annotations

import csv
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

SAMPLE = Path(__file__).resolve().parent / "data" / "taxi_etl" / "yellow_2019-10_sample.csv"
AMOUNT_NAMES = ("fare_amount", "extra", "mta_tax", "tip_amount", "tolls_amount", "improvement_surcharge", "total_amount")
# Columns in the sample's CSV order, each with the TLC Parquet name and type.
TLC_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("VendorID", pa.int32()),
    ("tpep_pickup_datetime", "timestamp"),
    ("tpep_dropoff_datetime", "timestamp"),
    ("passenger_count", pa.float64()),
    ("trip_distance", pa.float64()),
    ("RatecodeID", pa.float64()),
    ("store_and_fwd_flag", pa.string()),
    ("PULocationID", pa.int32()),
    ("DOLocationID", pa.int32()),
    ("payment_type", pa.int64()),
    *((name, pa.float64()) for name in AMOUNT_NAMES),
    ("congestion_surcharge", pa.float64()),
)


@cache
def sample_lines() -> tuple[str, ...]:
    """The sample's data lines, as in the file (no header, no line ending)."""
    return tuple(SAMPLE.read_text(encoding="utf-8").splitlines()[1:])


def sample_cells() -> list[list[str]]:
    return [next(csv.reader([line])) for line in sample_lines()]


def _value(text: str, kind: Any) -> Any:
    if text == "":
        return None
    if kind == "timestamp":
        return datetime.fromisoformat(text)
    if kind == pa.string():
        return text
    return float(text) if kind == pa.float64() else int(text)


def trip_table(rows: list[list[str]], *, unit: str = "us", fees: dict[str, list[float | None]] | None = None) -> Any:
    """A table of `rows` (CSV cells in the sample's 18-column order) with TLC's Parquet types; `fees` adds columns
    after congestion_surcharge (name -> one value per row), as the 2022 and 2025 files have them."""
    arrays: dict[str, Any] = {}
    for index, (name, kind) in enumerate(TLC_COLUMNS):
        arrow_type = pa.timestamp(unit) if kind == "timestamp" else kind
        arrays[name] = pa.array([_value(row[index], kind) for row in rows], arrow_type)
    for name, values in (fees or {}).items():
        arrays[name] = pa.array(values, pa.float64())
    return pa.table(arrays)


def write_parquet(path: Path, table: Any, *, row_group_size: int = 500) -> Path:
    pq.write_table(table, path, row_group_size=row_group_size)
    return path
