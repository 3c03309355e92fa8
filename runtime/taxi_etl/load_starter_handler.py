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
from runtime.shared.observability import instrumented
from runtime.taxi_etl import bulk_wiring
from runtime.taxi_etl.bulk_wiring import LoadsDeps, LoadsSettings
from runtime.taxi_etl.load_events import start_loads

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
    failed = start_loads(event.get("Records") or (), deps.bucket.name, deps.workflow)
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed]}


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
