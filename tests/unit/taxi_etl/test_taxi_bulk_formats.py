"""A bulk load's objects at rest are a contract: a chunk's manifest, a chunk's summary and the load's report, as
stored (runtime/taxi_etl/load_bucket.json_bytes), each equal to its golden copy under tests/golden/taxi_etl/bulk/.

A later generation of a load reads the manifest and summaries an earlier deployment wrote, and GET /loads/{LoadId}
answers a report written before an upgrade: a change of their format is a reviewed change with a CHANGELOG entry
(regenerate with `.venv/bin/python -m tests.unit.taxi_etl.test_taxi_bulk_formats --regenerate`, review the diff).
Pure: the documents are built by the same functions the tasks write them with, from fixed inputs.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runtime.taxi_etl.bulk_chunk import ChunkSummary
from runtime.taxi_etl.bulk_plan import cut_file
from runtime.taxi_etl.bulk_report import aggregate
from runtime.taxi_etl.chunks import RefusedLine
from runtime.taxi_etl.load_bucket import json_bytes
from runtime.taxi_etl.load_objects import LoadFile
from tests.unit.taxi_etl.test_taxi_content_identity import HEADER, ROWS

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "taxi_etl" / "bulk"
LOAD = LoadFile("onceflow-dev-ingest", "incoming/yellow_2019-10.csv", "3HL4kqtJlcpXroDTDmJ-rmSpXd3dIbrHY", "load-" + "0123456789" * 4)
FILE = ("\r\n".join([HEADER, *ROWS[:7]]) + "\r\n").encode()


def manifest() -> Any:
    chunks, _, _ = cut_file([FILE], 3)
    return [chunk.to_json() for chunk in chunks]


def summary() -> Any:
    chunks, _, _ = cut_file([FILE], 3)
    made = ChunkSummary(
        chunks[1],
        rows_read=2,
        refused=(RefusedLine(5, "line 5 has 5 columns; a yellow-taxi trip has 17 to 20"),),
        stored=1,
        already_stored=0,
        flagged=Counter({"validation": 1}),
        flagged_by_detail=Counter({"pickup_location": 1}),
        findings=Counter({"total_amount_mismatch": 1}),
    )
    return made.to_json()


def report() -> Any:
    return aggregate(LOAD, {"chunks": 3, "lines": 8}, None, [summary()])


DOCUMENTS = {"manifest.json": manifest, "summary.json": summary, "report.json": report}
# Their paths under tests/golden (tests/integration/test_stored_formats.py checks that every golden file is tested).
GOLDEN_FILES = tuple(f"taxi_etl/bulk/{name}" for name in DOCUMENTS)


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_a_bulk_object_is_stored_as_its_golden_copy(name: str) -> None:
    # Given the document a task writes for fixed inputs
    # When it is serialized as stored
    stored = json_bytes(DOCUMENTS[name]())
    # Then it is byte for byte the reviewed golden copy
    assert stored == (GOLDEN / name).read_bytes().rstrip(b"\n"), f"tests/golden/taxi_etl/bulk/{name} changed: a stored format change"


if __name__ == "__main__" and sys.argv[1:] == ["--regenerate"]:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for file_name, build in DOCUMENTS.items():
        (GOLDEN / file_name).write_bytes(json_bytes(build()) + b"\n")
