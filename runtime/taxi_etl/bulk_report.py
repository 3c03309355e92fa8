"""A bulk load's report: every chunk's summary read and added up, written as the load's report.json.

The report's lists are capped (the first CHUNKS_MISSING_SHOWN missing chunks, the first REFUSED_SHOWN refused lines
in line order, with the full counts beside them), so the report, and GET /loads/{LoadId}'s answer that carries it,
stay far under Lambda's 6 MB response whatever the file. The aggregation (`aggregate`) is pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

from runtime.shared.concurrency import map_bounded
from runtime.taxi_etl.load_bucket import LoadBucket
from runtime.taxi_etl.load_objects import LoadFile, report_key, summaries_prefix

CHUNKS_MISSING_SHOWN: Final = 100
REFUSED_SHOWN: Final = 1_000
SUCCEEDED: Final = "SUCCEEDED"
FAILED: Final = "FAILED"


def _count(value: Any) -> int:
    return value if type(value) is int else 0


def aggregate(
    load: LoadFile, plan: Mapping[str, Any] | None, error: Mapping[str, Any] | None, summaries: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """report.json's document from the plan's output (None when the plan failed), the error a Catch caught (None
    when none was), and the chunks' summaries (in any order)."""
    chunks = _count(plan.get("chunks")) if plan is not None else None
    done: set[int] = set()
    totals: Counter[str] = Counter()
    flagged: Counter[str] = Counter()
    by_detail: Counter[str] = Counter()
    findings: Counter[str] = Counter()
    refused: list[dict[str, Any]] = []
    refused_lines = 0
    for summary in summaries:
        index = summary.get("index")
        if type(index) is not int or index in done:
            continue
        done.add(index)
        for name in ("rowsRead", "stored", "alreadyStored"):
            totals[name] += _count(summary.get(name))
        flagged.update({str(reason): _count(rows) for reason, rows in (summary.get("flagged") or {}).items()})
        by_detail.update({str(detail): _count(rows) for detail, rows in (summary.get("flaggedByDetail") or {}).items()})
        findings.update({str(code): _count(rows) for code, rows in (summary.get("findings") or {}).items()})
        lines = list(summary.get("refused") or ())
        refused_lines += len(lines)
        refused.extend(lines)
    refused.sort(key=lambda line: _count(line.get("line")))
    missing = [index for index in range(chunks)] if chunks is not None else []
    missing = [index for index in missing if index not in done]
    failed = error is not None or chunks is None or bool(missing)
    return {
        "loadId": load.load_id,
        "bucket": load.bucket,
        "key": load.key,
        "versionId": load.version_id,
        "status": FAILED if failed else SUCCEEDED,
        "chunks": chunks,
        "chunksDone": len(done),
        "chunksMissing": missing[:CHUNKS_MISSING_SHOWN],
        "lines": _count(plan.get("lines")) if plan is not None else None,
        "rowsRead": totals["rowsRead"],
        "stored": totals["stored"],
        "alreadyStored": totals["alreadyStored"],
        "flagged": dict(sorted(flagged.items())),
        "flaggedByDetail": dict(sorted(by_detail.items())),
        "findings": dict(sorted(findings.items())),
        "refusedLines": refused_lines,
        "refused": refused[:REFUSED_SHOWN],
        "error": {"error": str(error.get("Error", "")), "cause": str(error.get("Cause", ""))} if error is not None else None,
    }


def write_report(
    load: LoadFile, plan: Mapping[str, Any] | None, error: Mapping[str, Any] | None, bucket: LoadBucket, *, concurrency: int = 1
) -> dict[str, Any]:
    """Report's task: read every summary, write report.json, and return a small outcome for the state machine."""
    keys = list(bucket.list_keys(summaries_prefix(load.load_id)))
    summaries = [summary for summary in map_bounded(bucket.get_json, keys, concurrency) if isinstance(summary, Mapping)]
    report = aggregate(load, plan, error, summaries)
    key = report_key(load.load_id)
    bucket.put_json(key, report)
    outcome = {
        name: report[name] for name in ("status", "chunks", "chunksDone", "lines", "rowsRead", "stored", "alreadyStored", "refusedLines")
    }
    return {"report": {"bucket": bucket.name, "key": key}, **outcome}
