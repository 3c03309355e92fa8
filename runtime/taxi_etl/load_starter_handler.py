"""Lambda entry point of the load starter: the ingest bucket's ObjectCreated notifications, through SQS. Thin.

Each SQS record holds one S3 event; each of its records (bucket, URL-decoded key, version) starts the load of that
object version as POST /loads does (runtime/taxi_etl/loads.py: the same name and input, so a redelivered event
and a POST are one execution). A record that fails is reported as a batch item failure and delivered again; an
s3:TestEvent, a key outside contract.INGEST_PREFIX, another bucket or an object without a version start nothing.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

from runtime.shared.aws import Clients
from runtime.shared.observability import instrumented, logger
from runtime.shared.refusals import Refusal
from runtime.taxi_etl import bulk_wiring
from runtime.taxi_etl.bulk_wiring import LoadsDeps, LoadsSettings
from runtime.taxi_etl.load_events import files_to_load
from runtime.taxi_etl.loads import start_load

if TYPE_CHECKING:  # an annotation only: the handler does not import Powertools' typing module
    from aws_lambda_powertools.utilities.typing import LambdaContext


@functools.cache
def settings() -> LoadsSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return LoadsSettings.from_env(os.environ)


@functools.cache
def deps() -> LoadsDeps:
    """Built on the first invocation (cold start), never at import time."""
    return bulk_wiring.build_loads(settings(), Clients())


def handle(event: dict[str, Any], context: LambdaContext, deps: LoadsDeps) -> dict[str, Any]:
    failures: list[dict[str, str]] = []
    for record in event.get("Records") or ():
        message_id = str(record.get("messageId", ""))
        try:
            for load in files_to_load(record.get("body"), deps.bucket.name):
                started = start_load(load, deps.workflow)
                logger.info("load started", extra={"loadId": load.load_id, "execution": started.execution, "status": started.status})
        except Refusal as refusal:  # a load that failed MAX_GENERATIONS times: no delivery can start it
            logger.error("load not started", extra={"messageId": message_id, "reason": str(refusal)})
        except Exception:
            logger.exception("load not started; the message is delivered again", extra={"messageId": message_id})
            failures.append({"itemIdentifier": message_id})
    return {"batchItemFailures": failures}


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
