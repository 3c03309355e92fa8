"""`make serve` end to end over real HTTP: an append read back, a snapshot built by the background worker,
a large payload uploaded to its presigned URL and finalized, a trip posted and stored, a Kinesis record
turned into a run item, and `python -m ops.smoke --env local` passing against it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from devtools.local.stack import LocalStack
from runtime.event_log import contract as event_log_contract
from runtime.runner_stats import contract as runner_stats_contract
from runtime.taxi_etl import contract as taxi_etl_contract

ROOT = Path(__file__).resolve().parents[3]
TRIP = "2,2019-10-23T16:39:42.000,2019-10-23T17:14:10.000,1,7.93,1,N,138,170,1,29.5,1,0.5,7.98,6.12,0.3,47.9,2.5"
T = TypeVar("T")


def eventually(check: Callable[[], T | None], *, timeout: float = 30, what: str = "the condition") -> T:
    """The first non-None result of `check`, polled until `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.2)


def call(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode("utf-8", "replace")  # S3's answers are XML


def signed(stack: LocalStack, method: str, url: str, document: Any = None) -> tuple[int, Any]:
    """A request signed as a deployed client signs it: SigV4 for execute-api."""
    body = json.dumps(document).encode() if document is not None else b""
    aws_request = AWSRequest(method=method, url=url, data=body, headers={"content-type": "application/json"})
    SigV4Auth(Credentials(stack.access_key_id, stack.secret_access_key), "execute-api", stack.region).add_auth(aws_request)
    return call(method, url, body or None, dict(aws_request.headers.items()))


def set_cell(request_id: str, position: int, cell: str, value: str) -> dict[str, Any]:
    return {"request_id": request_id, "position": position, "event": {"kind": "SetCell", "cell": cell, "value": value}}


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_an_append_is_read_back_with_get_snapshot(local_stack: LocalStack) -> None:
    # Given a fresh log
    log_id = fresh("sheet")
    base = f"{local_stack.event_log_url}/logs/{log_id}"
    # When one cell is set over HTTP, signed, and the same request is sent again
    first = signed(local_stack, "POST", f"{base}/entries", set_cell("edit-0001-aaaa", 1, "B12", "42"))
    again = signed(local_stack, "POST", f"{base}/entries", set_cell("edit-0001-aaaa", 1, "B12", "42"))
    status, page = signed(local_stack, "GET", f"{base}/snapshot")
    # Then it was appended once (201, then 200 as a duplicate) and the log reads it back
    assert (first[0], first[1]["position"], first[1]["duplicate"]) == (201, 1, False)
    assert (again[0], again[1]["duplicate"]) == (200, True)
    assert status == 200
    assert (page["log_id"], page["next_position"], page["snapshot"]) == (log_id, 2, None)
    assert [(entry["position"], entry["cell"], entry["value"]) for entry in page["entries"]] == [(1, "B12", "42")]


def test_a_log_reaching_snapshot_every_gets_its_snapshot_built_by_the_worker(local_stack: LocalStack) -> None:
    # Given a fresh log and the stack's snapshot interval (10: SNAPSHOT_EVERY is overridden for these tests)
    log_id = fresh("snap")
    base = f"{local_stack.event_log_url}/logs/{log_id}"
    count = local_stack.snapshot_every
    # When that many cells are set, and two more
    for position in range(1, count + 3):
        status, _ = signed(
            local_stack, "POST", f"{base}/entries", set_cell(f"edit-{position:08d}", position, f"A{position}", str(position))
        )
        assert status == 201

    # Then the router, the snapshot queue and the worker build snapshot 1 in the background
    def built() -> dict[str, Any] | None:
        _, page = signed(local_stack, "GET", f"{base}/snapshot")
        return page if page["snapshot"] is not None else None

    page = eventually(built, what="snapshot 1 to be built")
    assert (page["snapshot"]["number"], page["snapshot"]["cut"], page["snapshot"]["cells"]) == (1, count, count)
    assert [entry["position"] for entry in page["entries"]] == [count + 1, count + 2]
    # and its root, downloaded from the presigned URL (the moto server), names the same cut and cells
    with urllib.request.urlopen(page["snapshot"]["root_url"], timeout=30) as response:
        root = json.loads(response.read())
    assert (root["cut"], root["cells"], root["digest"]) == (count, count, page["snapshot"]["digest"])


def test_a_large_payload_goes_to_its_presigned_url_and_is_finalized(local_stack: LocalStack) -> None:
    # Given an upload URL for a large value
    log_id = fresh("payload")
    base = f"{local_stack.event_log_url}/logs/{log_id}"
    status, upload = signed(local_stack, "POST", f"{base}/payloads", {"request_id": "big-value-0001"})
    assert status == 200
    assert upload["upload_url"].startswith(f"{local_stack.moto_endpoint}/")
    value = b"x" * 6000
    # When the value is PUT there with the headers it names (as curl --data-binary would send it), twice
    headers = {**upload["headers"], "Content-Type": "application/x-www-form-urlencoded"}
    first, _ = call("PUT", upload["upload_url"], value, headers)
    second, _ = call("PUT", upload["upload_url"], value, headers)
    # and the log entry for it is appended
    completed = signed(local_stack, "POST", f"{base}/payloads/complete", {"request_id": "big-value-0001", "position": 1, "cell": "C3"})
    # Then the first upload created the object, the second could not replace it (If-None-Match: *)
    assert (first, second) == (200, 412)
    assert completed[0] == 201
    # and the finalizer, fed by the stream and the payload queue, removes the pending tag of the whole value
    s3 = local_stack.client("s3")
    bucket = local_stack.outputs["Onceflow-local-EventLog"][event_log_contract.OUTPUT_BUCKET]
    eventually(
        lambda: True if not s3.get_object_tagging(Bucket=bucket, Key=upload["object_key"])["TagSet"] else None,
        what="the pending tag to be removed",
    )
    assert s3.get_object(Bucket=bucket, Key=upload["object_key"])["Body"].read() == value


def test_a_posted_trip_is_stored_and_reported_stored(local_stack: LocalStack) -> None:
    # Given the API key and a fresh idempotency key
    key = fresh("load")
    headers = {"Authorization": local_stack.api_key, "Content-Type": "text/csv", "Idempotency-Key": key}
    # When a real trip line is posted
    status, answer = call("POST", f"{local_stack.taxi_url}{taxi_etl_contract.ROUTE_TRIP}", TRIP.encode(), headers)
    # Then it is accepted under the key's id
    assert status == 202
    row_id = answer[taxi_etl_contract.KEY_STORE_REQUEST_ID]
    assert (row_id, answer["duplicate"]) == (f"k-{key}", False)

    # and the state machine stores it: GET /trips/{id} reports it stored, with its trip summary
    def stored() -> dict[str, Any] | None:
        status, state = call("GET", f"{local_stack.taxi_url}/trips/{row_id}", None, {"Authorization": local_stack.api_key})
        return state if status == 200 and state["state"] == "stored" else None

    state = eventually(stored, what=f"row {row_id} to be stored")
    assert (state["trip"]["total_amount"], state["trip"]["trip_seconds"]) == ("47.90", 2068)
    trips_table = local_stack.outputs["Onceflow-local-TaxiEtl"][taxi_etl_contract.OUTPUT_TRIPS_TABLE]
    item = local_stack.client("dynamodb").get_item(TableName=trips_table, Key={taxi_etl_contract.KEY_STORE_REQUEST_ID: {"S": row_id}})
    assert "Item" in item
    # and once the execution has ended (the Store task writes the row before the service marks the
    # execution succeeded; a resend in between answers with the running execution, 202),
    sfn = local_stack.client("stepfunctions")
    machine = local_stack.outputs["Onceflow-local-TaxiEtl"][taxi_etl_contract.OUTPUT_STATE_MACHINE_ARN]
    execution_arn = f"{machine.replace(':stateMachine:', ':execution:', 1)}:{answer['execution']}"
    eventually(
        lambda: True if sfn.describe_execution(executionArn=execution_arn)["status"] == "SUCCEEDED" else None,
        what=f"execution {answer['execution']} to succeed",
    )
    # the same request again is a duplicate, not a second trip
    again = call("POST", f"{local_stack.taxi_url}{taxi_etl_contract.ROUTE_TRIP}", TRIP.encode(), headers)
    assert (again[0], again[1]["duplicate"]) == (200, True)


def test_a_record_put_into_the_stream_becomes_a_run_item(local_stack: LocalStack) -> None:
    # Given a device message of a fresh user and run
    outputs = local_stack.outputs["Onceflow-local-RunnerStats"]
    user_id, run_id = 700_000_000 + uuid.uuid4().int % 10**8, int(time.time())
    message = {
        runner_stats_contract.KEY_USER_ID: user_id,
        runner_stats_contract.KEY_RUN_ID: run_id,
        "sequence_id": 1,
        "timestamp_utc": int(time.time() * 1000),
        "distance_meters": 83.5,
    }
    # When it is put into the Kinesis stream through the moto endpoint
    local_stack.client("kinesis").put_record(
        StreamName=outputs[runner_stats_contract.OUTPUT_STREAM_NAME], Data=json.dumps(message).encode(), PartitionKey=str(user_id)
    )
    # Then the background mapping delivers it to the handler, which writes the run item
    dynamodb = local_stack.client("dynamodb")
    key = {runner_stats_contract.KEY_USER_ID: {"N": str(user_id)}, runner_stats_contract.KEY_RUN_ID: {"N": str(run_id)}}

    def run_item() -> dict[str, Any] | None:
        found: dict[str, Any] | None = dynamodb.get_item(
            TableName=outputs[runner_stats_contract.OUTPUT_RUN_STATS_TABLE], Key=key, ConsistentRead=True
        ).get("Item")
        return found

    item = eventually(run_item, what=f"run item {user_id}/{run_id}")
    assert item["total_meters"] == {"N": "83.5"}


def smoke(local_stack: LocalStack, *extra: str, environment: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert local_stack.outputs_file is not None
    base = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    return subprocess.run(
        [sys.executable, "-m", "ops.smoke", "--env", "local", "--outputs-file", str(local_stack.outputs_file), *extra],
        cwd=ROOT,
        env={**base, **(local_stack.aws_environment() if environment is None else environment)},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_ops_smoke_passes_against_the_local_stack(local_stack: LocalStack) -> None:
    # When `python -m ops.smoke --env local` runs in another process with the stack's credentials
    result = smoke(local_stack, "--timeout", "60")
    # Then its three steps pass, each on one line with its time, and it exits 0
    assert result.returncode == 0, result.stdout + result.stderr
    passes = [line for line in result.stdout.splitlines() if line.startswith("PASS")]
    assert [line.split()[1:3] for line in passes] == [["runner", "stats"], ["event", "log"], ["taxi", "saga"]]
    assert "3 of 3 passed" in result.stdout
    assert f"at {local_stack.moto_endpoint}" in result.stdout


def test_ops_smoke_takes_region_and_key_pair_from_the_outputs_file(local_stack: LocalStack, tmp_path: Path) -> None:
    # Given no AWS variable and no config file (HOME is an empty folder)
    environment = {"HOME": str(tmp_path)}
    # When the smoke test is run with --env local
    result = smoke(local_stack, environment=environment)
    # Then the outputs file's region and dummy key pair are enough: all three steps pass
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 of 3 passed" in result.stdout


def test_ops_smoke_explicit_credentials_win_over_the_outputs_file(local_stack: LocalStack, tmp_path: Path) -> None:
    # Given a key pair in the environment that the local event-log API does not know
    environment = {"HOME": str(tmp_path), "AWS_ACCESS_KEY_ID": "someone-else", "AWS_SECRET_ACCESS_KEY": "not-the-local-secret"}
    # When the smoke test is run with --env local
    result = smoke(local_stack, environment=environment)
    # Then the environment's key pair signs the requests: the event-log API refuses them, moto takes any
    assert result.returncode == 1, result.stdout + result.stderr
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if line.startswith(("PASS", "FAIL"))}
    assert lines["event"].startswith("FAIL") and "403" in lines["event"]
    assert lines["runner"].startswith("PASS")


def test_ops_smoke_against_a_stopped_server_says_to_start_it(local_stack: LocalStack, tmp_path: Path) -> None:
    # Given an outputs file whose embedded cloud is gone (a port nothing listens on)
    assert local_stack.outputs_file is not None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    stale = tmp_path / "cdk-outputs-local.json"
    stale.write_text(local_stack.outputs_file.read_text().replace(local_stack.moto_endpoint, dead))
    # When the smoke test is run with --env local on it
    result = subprocess.run(
        [sys.executable, "-m", "ops.smoke", "--env", "local", "--outputs-file", str(stale)],
        cwd=ROOT,
        env={name: value for name, value in os.environ.items() if not name.startswith("AWS_")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Then it ends with one line saying to start `make serve`, and exit status 2, before any step
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert dead in line and "start `make serve`" in line
    assert "PASS" not in result.stdout and "FAIL" not in result.stdout


def test_the_local_servers_cloud_enforces_aws_service_limits(local_stack: LocalStack) -> None:
    # Given a queue of the local stack's embedded cloud, reached over HTTP as another process reaches it
    sqs = local_stack.client("sqs")
    queue_url = sqs.create_queue(QueueName="local-limits")["QueueUrl"]
    # and a message whose body fits SQS's 1 MiB only if its attribute is not counted (moto counted the body's characters)
    body = "x" * (1024 * 1024 - 8)
    attributes = {"Kind": {"DataType": "String", "StringValue": "oversized"}}
    # When it is sent
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=queue_url, MessageBody=body, MessageAttributes=attributes)
    # Then it is refused as SQS refuses it, and nothing was queued
    assert refused.value.response["Error"]["Code"] in {"InvalidParameterValue", "InvalidParameterValueException"}
    assert "counting its attributes" in refused.value.response["Error"]["Message"]
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0)
