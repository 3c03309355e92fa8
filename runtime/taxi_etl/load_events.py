"""The load starter's logic: the ingest bucket's ObjectCreated notifications (S3 event JSON, the body of an SQS
message) as the object versions to load (`files_to_load`, pure), and each started as POST /loads starts it.

S3 URL-encodes an event's key (a space is '+'); an s3:TestEvent (sent when the notification is configured) names
no object. Only the ingest bucket's keys under contract.INGEST_PREFIX with a version id are loads: a notification
for anything else is dropped here rather than failing its message for ever.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote_plus

from runtime.shared.observability import logger
from runtime.shared.refusals import Refusal
from runtime.taxi_etl import contract
from runtime.taxi_etl.load_bucket import UNVERSIONED
from runtime.taxi_etl.load_objects import LoadFile
from runtime.taxi_etl.loads import load_file, start_load
from runtime.taxi_etl.workflow import StepFunctionsWorkflow

TEST_EVENT = "s3:TestEvent"
OBJECT_CREATED_PREFIX = "ObjectCreated:"


def start_loads(records: Iterable[Mapping[str, Any]], ingest_bucket: str, workflow: StepFunctionsWorkflow) -> list[str]:
    """Start (or join) the load of every object version the SQS records' S3 events name; the message ids of the
    records to deliver again (a start that failed). A load refused for good (it failed MAX_GENERATIONS times) is
    logged, not delivered again: no delivery can start it."""
    failed: list[str] = []
    for record in records:
        message_id = str(record.get("messageId", ""))
        try:
            for load in files_to_load(record.get("body"), ingest_bucket):
                started = start_load(load, workflow)
                logger.info("load started", extra={"loadId": load.load_id, "execution": started.execution, "status": started.status})
        except Refusal as refusal:
            logger.error("load not started", extra={"messageId": message_id, "reason": str(refusal)})
        except Exception:
            logger.exception("load not started; the message is delivered again", extra={"messageId": message_id})
            failed.append(message_id)
    return failed


def files_to_load(body: Any, ingest_bucket: str) -> list[LoadFile]:
    """The object versions an SQS message's S3 event asks to load (none for a test event)."""
    try:
        document = json.loads(body) if isinstance(body, str) else None
    except ValueError:
        document = None
    if not isinstance(document, Mapping):
        logger.error("an ingest notification that is not an S3 event was dropped", extra={"body": str(body)[:200]})
        return []
    if document.get("Event") == TEST_EVENT:
        return []
    loads: list[LoadFile] = []
    for record in document.get("Records") or ():
        found = _object_version(record, ingest_bucket)
        if found is not None:
            loads.append(found)
    return loads


def _object_version(record: Any, ingest_bucket: str) -> LoadFile | None:
    s3 = record.get("s3") if isinstance(record, Mapping) else None
    if not isinstance(s3, Mapping) or not str(record.get("eventName", "")).startswith(OBJECT_CREATED_PREFIX):
        logger.warning(
            "an S3 record that creates no object was dropped",
            extra={"eventName": str(record.get("eventName")) if isinstance(record, Mapping) else None},
        )
        return None
    bucket = str((s3.get("bucket") or {}).get("name", ""))
    item = s3.get("object") or {}
    key = unquote_plus(str(item.get("key", "")))
    version_id = item.get("versionId")
    if bucket != ingest_bucket or not key.startswith(contract.INGEST_PREFIX):
        logger.warning("a notification of an object outside the ingest prefix was dropped", extra={"bucket": bucket, "key": key[:200]})
        return None
    if not isinstance(version_id, str) or not version_id or version_id == UNVERSIONED:
        logger.warning("a notification of an object without a version id was dropped", extra={"key": key[:200]})
        return None
    return load_file(bucket, key, version_id)
