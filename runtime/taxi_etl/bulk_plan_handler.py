"""Lambda entry point of the bulk state machine's Plan task. Thin: parse, call, map.

Input: the execution's `{"bucket", "key", "loadId", "versionId"}`. Output: `{"manifest": {"bucket", "key"}, "chunks",
"lines", "bytes", "layout"}`. LoadInputError (never retried) for a file that cannot be cut into chunks of trips.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

from runtime.shared.aws import Clients
from runtime.shared.observability import instrumented, logger
from runtime.taxi_etl import bulk_wiring
from runtime.taxi_etl.bulk_plan import plan_load
from runtime.taxi_etl.bulk_wiring import BulkPlanDeps, BulkPlanSettings
from runtime.taxi_etl.load_objects import LoadFile
from runtime.taxi_etl.transient import transient_errors

if TYPE_CHECKING:  # an annotation only: the handler does not import Powertools' typing module
    from aws_lambda_powertools.utilities.typing import LambdaContext


@functools.cache
def settings() -> BulkPlanSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return BulkPlanSettings.from_env(os.environ)


@functools.cache
def deps() -> BulkPlanDeps:
    """Built on the first invocation (cold start), never at import time."""
    return bulk_wiring.build_plan(settings(), Clients())


def handle(event: dict[str, Any], context: LambdaContext, deps: BulkPlanDeps) -> dict[str, Any]:
    load = LoadFile.from_event(event)
    with transient_errors():  # AWS failing a call is no verdict on the file: retried longer
        plan = plan_load(load, deps.bucket, deps.chunk_rows)
    logger.info("load planned", extra={"loadId": load.load_id, "chunks": plan["chunks"], "lines": plan["lines"], "bytes": plan["bytes"]})
    return plan


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
