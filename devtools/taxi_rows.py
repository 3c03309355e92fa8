"""Real yellow-taxi rows (tests/data/taxi_etl) and the corruptions the tests and the demo apply to them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime.taxi_etl.trip_lines import line_columns

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SAMPLE = PROJECT_ROOT / "tests" / "data" / "taxi_etl" / "yellow_2019-10_sample.csv"
SCHEMA_ROWS = SAMPLE.parent / "schema_rows.json"  # a header and a row of each yellow layout, 2009-2025
PICKUP, DROPOFF = 1, 2  # column positions in every yellow schema
# Lines the saga flags: a drop-off before its pick-up (validation), a time in the 2019 spring-forward gap (transformation).
DROPOFF_BEFORE_PICKUP = "2,2019-10-23T16:39:42.000,2019-10-23T16:30:00.000,1,7.93,1,N,138,170,1,29.5,1,0.5,7.98,6.12,0.3,47.9,2.5"
SPRING_FORWARD_GAP = "2,2019-03-10T02:30:00.000,2019-03-10T03:10:00.000,1,1.00,1,N,138,170,1,9.5,0,0.5,0,0,0.3,10.3,0"


def sample_header() -> str:
    """The real sample's header line."""
    return SAMPLE.read_text(encoding="utf-8").splitlines()[0]


def sample_lines() -> list[str]:
    """The 2,000 data lines of the real sample (the header dropped)."""
    return SAMPLE.read_text(encoding="utf-8").splitlines()[1:]


def schema_rows() -> dict[str, Any]:
    """Per layout name (yellow_2009, ...), its header and one row."""
    loaded: dict[str, Any] = json.loads(SCHEMA_ROWS.read_text(encoding="utf-8"))
    return loaded


def with_columns(line: str, **changes: str) -> str:
    """`line` with columns replaced by position, e.g. with_columns(line, c2="...")."""
    columns = line_columns(line)
    for name, value in changes.items():
        columns[int(name.removeprefix("c"))] = value
    return ",".join(columns)


def bad_at_validation(line: str) -> str:
    """Drop-off at midnight of the pick-up's day, so before it: Validate rejects it (dropoff_before_pickup)."""
    return with_columns(line, c2=f"{line_columns(line)[PICKUP][:10]}T00:00:00.000")


def bad_at_transformation(line: str) -> str:
    """A trip starting at 02:30 on 2019-03-10, a local time that does not exist (clocks jumped 02:00 -> 03:00):
    valid as text, so Validate passes it, but Transform cannot name its UTC instant."""
    return with_columns(line, c1="2019-03-10T02:30:00.000", c2="2019-03-10T03:10:00.000")
