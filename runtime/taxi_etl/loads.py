"""Starting and reading bulk loads: one logic for POST /loads, GET /loads/{LoadId} and the load starter.

A load is one object version of the ingest bucket; its LoadId is a hash of (bucket, key, version), and its
executions are its generations: the first is named after the LoadId, a re-run after a generation that ended
FAILED, ABORTED or TIMED_OUT is `<LoadId>-g<n>` (at most MAX_GENERATIONS). Every generation has the same canonical
input, so a redelivered S3 event, a retried POST, or both at once start one execution (a Standard state machine
answers a second StartExecution with the same name and input with the same execution; the workflow adapter,
runtime/taxi_etl/workflow.py, turns ExecutionAlreadyExists for an ended one into DUPLICATE). A re-run skips the
chunks an earlier generation finished (their summaries are there).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from botocore.exceptions import ClientError

from runtime.shared.aws import error_code
from runtime.shared.refusals import Conflict, InvalidRequest, NotFound
from runtime.taxi_etl import contract
from runtime.taxi_etl.load_bucket import UNVERSIONED, LoadBucket, ObjectGone
from runtime.taxi_etl.load_objects import LoadFile, manifest_key, report_key, summaries_prefix
from runtime.taxi_etl.workflow import StartOutcome, StepFunctionsWorkflow

LOAD_ID_HEX_CHARS: Final = 40
LOAD_ID: Final = re.compile(rf"load-[0-9a-f]{{{LOAD_ID_HEX_CHARS}}}")
MAX_GENERATIONS: Final = 9
ENDED_UNSUCCESSFULLY: Final = frozenset({"FAILED", "ABORTED", "TIMED_OUT"})
SUCCEEDED: Final = "SUCCEEDED"
RUNNING: Final = "RUNNING"
MAX_KEY_BYTES: Final = 1024  # S3's limit on a key


def load_id(bucket: str, key: str, version_id: str) -> str:
    return "load-" + hashlib.sha256(f"{bucket}/{key}/{version_id}".encode()).hexdigest()[:LOAD_ID_HEX_CHARS]


def load_file(bucket: str, key: str, version_id: str) -> LoadFile:
    return LoadFile(bucket, key, version_id, load_id(bucket, key, version_id))


def execution_input(load: LoadFile) -> str:
    """The same for every generation and from both starters."""
    document = {"bucket": load.bucket, "key": load.key, "loadId": load.load_id, "versionId": load.version_id}
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def execution_name(load_id: str, generation: int) -> str:
    return load_id if generation == 1 else f"{load_id}-g{generation}"


def parse_load_id(value: str | None) -> str:
    if value is None or not LOAD_ID.fullmatch(value):
        raise InvalidRequest(f"a LoadId is 'load-' and {LOAD_ID_HEX_CHARS} lower-case hex digits")
    return value


def checked_key(key: Any) -> str:
    """A key of the ingest bucket a load may read: under contract.INGEST_PREFIX."""
    if not isinstance(key, str) or not key.startswith(contract.INGEST_PREFIX) or key == contract.INGEST_PREFIX:
        raise InvalidRequest(f"'key' must be the key of a file under {contract.INGEST_PREFIX} in the ingest bucket")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidRequest(f"'key' is longer than S3's {MAX_KEY_BYTES} bytes")
    return key


def requested_file(document: Any, bucket: LoadBucket) -> LoadFile:
    """POST /loads's body `{"key", "versionId"?}` as the object version it names (HeadObject)."""
    if not isinstance(document, Mapping):
        raise InvalidRequest('the body must be a JSON object {"key": "...", "versionId": "..." (optional)}')
    unknown = sorted(set(document) - {"key", "versionId"})
    if unknown:
        raise InvalidRequest(f"unknown field(s) {', '.join(map(repr, unknown))}; send 'key' and, optionally, 'versionId'")
    key = checked_key(document.get("key"))
    version = document.get("versionId")
    if version is not None and (not isinstance(version, str) or not version or len(version) > MAX_KEY_BYTES):
        raise InvalidRequest("'versionId' must be an object version id")
    try:
        version_id = bucket.version_of(key, version)
    except ObjectGone as err:
        raise NotFound(str(err)) from err
    if version_id == UNVERSIONED:
        raise Conflict("the object has no version id (stored while the bucket's versioning was off); upload it again")
    return load_file(bucket.name, key, version_id)


@dataclass(frozen=True, slots=True)
class Generation:
    number: int
    name: str
    status: str  # DescribeExecution's: RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED, PENDING_REDRIVE


def _describe(workflow: StepFunctionsWorkflow, name: str) -> dict[str, Any] | None:
    try:
        return dict(workflow.client.describe_execution(executionArn=workflow.execution_arn(name)))
    except ClientError as err:
        if error_code(err) == "ExecutionDoesNotExist":
            return None
        raise


def latest_generation(workflow: StepFunctionsWorkflow, load_id: str) -> Generation | None:
    """The load's newest execution; None when it has none."""
    latest: Generation | None = None
    for number in range(1, MAX_GENERATIONS + 1):
        name = execution_name(load_id, number)
        described = _describe(workflow, name)
        if described is None:
            break
        latest = Generation(number, name, str(described["status"]))
        if latest.status not in ENDED_UNSUCCESSFULLY:
            break  # only an unsuccessful generation has a successor
    return latest


@dataclass(frozen=True, slots=True)
class LoadStart:
    load: LoadFile
    execution: str
    status: str  # RUNNING (started or joined), or SUCCEEDED (done before)


def start_load(load: LoadFile, workflow: StepFunctionsWorkflow) -> LoadStart:
    """Start generation 1, join the running generation, answer a succeeded one, or re-run after an unsuccessful one."""
    generation = latest_generation(workflow, load.load_id)
    number = 1 if generation is None else generation.number
    while True:
        if generation is not None and generation.status == SUCCEEDED:
            return LoadStart(load, generation.name, SUCCEEDED)
        if generation is not None and generation.status in ENDED_UNSUCCESSFULLY:
            number = generation.number + 1
        if number > MAX_GENERATIONS:
            raise Conflict(f"the load {load.load_id} failed {MAX_GENERATIONS} times; upload the file again as a new version")
        name = execution_name(load.load_id, number)
        started = workflow.start(name, execution_input(load))
        if started.outcome is StartOutcome.STARTED:
            return LoadStart(load, name, RUNNING)
        # It ended between our look and our start: look again, and act on how it ended.
        described = _describe(workflow, name)
        if described is None:
            raise RuntimeError(f"Step Functions answered that {name} exists, then that it does not")
        generation = Generation(number, name, str(described["status"]))


def start_body(start: LoadStart) -> tuple[int, dict[str, Any]]:
    return (200 if start.status == SUCCEEDED else 202), {"loadId": start.load.load_id, "execution": start.execution, "status": start.status}


def load_status(load_id: str, bucket: LoadBucket, workflow: StepFunctionsWorkflow) -> tuple[int, dict[str, Any]]:
    """GET /loads/{LoadId}: the report once the newest generation has ended and written it; otherwise that
    generation's status and progress."""
    generation = latest_generation(workflow, load_id)
    running = generation is not None and generation.status not in ENDED_UNSUCCESSFULLY | {SUCCEEDED}
    report = None if running else bucket.get_json(report_key(load_id))  # a running re-run's report is not written yet
    if isinstance(report, Mapping):
        return 200, {
            "loadId": load_id,
            "execution": generation.name if generation else None,
            "status": report.get("status"),
            "report": report,
        }
    if generation is None:
        raise NotFound(f"no load {load_id}: no file was loaded under this id, or its execution has not started yet")
    return 200, {
        "loadId": load_id,
        "execution": generation.name,
        "status": generation.status,
        "progress": progress(load_id, generation, bucket, workflow),
    }


def progress(load_id: str, generation: Generation, bucket: LoadBucket, workflow: StepFunctionsWorkflow) -> dict[str, Any]:
    manifest = bucket.get_json(manifest_key(load_id))
    done = sum(1 for _ in bucket.list_keys(summaries_prefix(load_id)))
    found: dict[str, Any] = {"chunks": len(manifest) if isinstance(manifest, list) else None, "chunksDone": done}
    map_runs = workflow.client.list_map_runs(executionArn=workflow.execution_arn(generation.name)).get("mapRuns", [])
    if map_runs:
        described = workflow.client.describe_map_run(mapRunArn=map_runs[0]["mapRunArn"])
        found["itemCounts"] = {name: count for name, count in described.get("itemCounts", {}).items() if isinstance(count, int)}
    return found
