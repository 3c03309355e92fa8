"""What the bulk route's functions name and pass around, light enough for every one of them to import: the object
version a load reads (`LoadFile`), one manifest item (`ChunkRange`), and where a load keeps its manifest, its
chunks' summaries and its report in the ingest bucket. The plan's cut is in runtime/taxi_etl/bulk_plan.py, which
imports the row logic; the loads API, the load starter and the report do not need it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.taxi_etl import contract
from runtime.taxi_etl.errors import PhaseInputError


@dataclass(frozen=True, slots=True)
class ChunkRange:
    """One item of the manifest: the chunk's bytes, its first line's number in the file and its lines."""

    index: int
    start: int
    end: int  # inclusive
    first_line: int
    lines: int

    def to_json(self) -> dict[str, int]:
        return {"index": self.index, "start": self.start, "end": self.end, "firstLine": self.first_line, "lines": self.lines}

    @classmethod
    def from_json(cls, document: Any) -> ChunkRange:
        names = ("index", "start", "end", "firstLine", "lines")
        found = [document.get(name) if isinstance(document, Mapping) else None for name in names]
        values = [value for value in found if type(value) is int and value >= 0]
        if len(values) != len(names):
            raise PhaseInputError(f"a chunk is {{{', '.join(repr(name) for name in names)}}} of integers >= 0, not {str(document)[:120]}")
        index, start, end, first_line, lines = values
        if end < start or first_line < 1:
            raise PhaseInputError(f"chunk {index} has no bytes or no first line: {str(document)[:120]}")
        return cls(index, start, end, first_line, lines)


@dataclass(frozen=True, slots=True)
class LoadFile:
    """What a load reads: one object version of the ingest bucket."""

    bucket: str
    key: str
    version_id: str
    load_id: str

    @classmethod
    def from_event(cls, event: Any) -> LoadFile:
        values = [event.get(name) if isinstance(event, Mapping) else None for name in ("bucket", "key", "versionId", "loadId")]
        if not all(isinstance(value, str) and value for value in values):
            raise PhaseInputError("a bulk task's input must carry 'bucket', 'key', 'versionId' and 'loadId'")
        bucket, key, version_id, load_id = (str(value) for value in values)
        return cls(bucket, key, version_id, load_id)


def manifest_key(load_id: str) -> str:
    return f"{contract.LOADS_PREFIX}{load_id}/manifest.json"


def summaries_prefix(load_id: str) -> str:
    return f"{contract.LOADS_PREFIX}{load_id}/chunks/"


def summary_key(load_id: str, index: int) -> str:
    return f"{summaries_prefix(load_id)}{index:06d}.json"


def report_key(load_id: str) -> str:
    return f"{contract.LOADS_PREFIX}{load_id}/report.json"
