"""Lambda entry point of the bulk state machine's Chunk task (the Distributed Map's child). Thin: parse, call, map.

Input: `{"bucket", "key", "versionId", "loadId", "layout", "chunk": {"index", "start", "end", "firstLine", "lines"}}`.
Output: `{}`; the chunk's summary is in the bucket (runtime/taxi_etl/bulk_chunk.py).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

from runtime.shared.aws import Clients
from runtime.shared.observability import MetricUnit, add_dimensioned_metric, instrumented, logger, metrics
from runtime.taxi_etl import bulk_chunk_wiring, contract
from runtime.taxi_etl.bulk_chunk import ChunkTask, run_chunk
from runtime.taxi_etl.bulk_chunk_wiring import BulkChunkDeps, BulkChunkSettings
from runtime.taxi_etl.transient import transient_errors

if TYPE_CHECKING:  # an annotation only: the handler does not import Powertools' typing module
    from aws_lambda_powertools.utilities.typing import LambdaContext


@functools.cache
def settings() -> BulkChunkSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return BulkChunkSettings.from_env(os.environ)


@functools.cache
def deps() -> BulkChunkDeps:
    """Built on the first invocation (cold start), never at import time; one pooled connection per row written at once."""
    return bulk_chunk_wiring.build(settings(), Clients(pool_connections=bulk_chunk_wiring.CHUNK_ROW_CONCURRENCY))


def handle(event: dict[str, Any], context: LambdaContext, deps: BulkChunkDeps) -> dict[str, Any]:
    task = ChunkTask.from_event(event)
    with transient_errors():  # AWS failing a call is no verdict on the rows: retried longer
        summary = run_chunk(task, deps.bucket, deps.status, deps.final, max_line_bytes=deps.max_line_bytes, concurrency=deps.concurrency)
    if summary is None:
        logger.info("chunk already done", extra={"loadId": task.load.load_id, "chunk": task.chunk.index})
        return {}
    metrics.add_metric(name=contract.METRIC_ROWS_STORED, unit=MetricUnit.Count, value=summary.stored)
    metrics.add_metric(name=contract.METRIC_ROWS_ALREADY_STORED, unit=MetricUnit.Count, value=summary.already_stored)
    # Real trips stored with something odd about them, by finding: the dashboard's data-quality graph.
    for finding, rows in summary.stored_now_findings.items():
        add_dimensioned_metric(contract.METRIC_ROWS_STORED_WITH_FINDING, rows, finding=finding)
    # The dashboard splits flagged rows by phase and reason, whichever route flagged them (the per-batch flag
    # step's ExecutionsFlagged, which alarms watch, is not counted: a chunk is no execution of the saga).
    for (phase, detail), rows in summary.flagged_by_step.items():
        add_dimensioned_metric(contract.METRIC_ROWS_FLAGGED, rows, phase=phase.value, reason=detail)
    logger.info(
        "chunk loaded",
        extra={
            "loadId": task.load.load_id,
            "chunk": task.chunk.index,
            "rows": summary.rows_read,
            "refused": len(summary.refused),
            "stored": summary.stored,
            "flagged": sum(summary.flagged.values()),
        },
    )
    return {}


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
