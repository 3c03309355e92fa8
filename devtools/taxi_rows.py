"""Real yellow-taxi rows (tests/data/taxi_etl) and the corruptions the tests and the demo apply to them."""

from __future__ import annotations

from pathlib import Path

from runtime.taxi_etl.trips import line_columns

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SAMPLE = PROJECT_ROOT / "tests" / "data" / "taxi_etl" / "yellow_2019-10_sample.csv"
PICKUP, DROPOFF = 1, 2  # column positions in every yellow schema


def sample_lines() -> list[str]:
    """The 2,000 data lines of the real sample (the header dropped)."""
    return SAMPLE.read_text(encoding="utf-8").splitlines()[1:]


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
