"""Lambda entry point of the bulk state machine's Report task (after the chunks, and after a caught failure).
Thin: parse, call, map.

Input: `{"loadId", "bucket", "key", "versionId", "plan": <Plan's output, absent when it failed>, "error": <the caught
error, absent when none>}`. Output: `{"report": {"bucket", "key"}, "status", "rowsRead", "stored", ...}`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtime.shared.aws import Clients
from runtime.shared.observability import instrumented, logger
from runtime.taxi_etl import bulk_wiring
from runtime.taxi_etl.bulk_report import write_report
from runtime.taxi_etl.bulk_wiring import BulkReportDeps, BulkReportSettings
from runtime.taxi_etl.load_objects import LoadFile
from runtime.taxi_etl.transient import transient_errors

if TYPE_CHECKING:  # an annotation only: the handler does not import Powertools' typing module
    from aws_lambda_powertools.utilities.typing import LambdaContext


@functools.cache
def settings() -> BulkReportSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return BulkReportSettings.from_env(os.environ)


@functools.cache
def deps() -> BulkReportDeps:
    """Built on the first invocation (cold start), never at import time; one pooled connection per summary read at once."""
    return bulk_wiring.build_report(settings(), Clients(pool_connections=bulk_wiring.REPORT_READ_CONCURRENCY))


def _document(event: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    value = event.get(name)
    return value if isinstance(value, Mapping) else None


def handle(event: dict[str, Any], context: LambdaContext, deps: BulkReportDeps) -> dict[str, Any]:
    load = LoadFile.from_event(event)
    with transient_errors():  # AWS failing a call is retried longer
        outcome = write_report(load, _document(event, "plan"), _document(event, "error"), deps.bucket, concurrency=deps.concurrency)
    logger.info("load reported", extra={"loadId": load.load_id, **{name: outcome[name] for name in ("status", "chunksDone", "stored")}})
    return outcome


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
