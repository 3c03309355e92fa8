"""Starting and reading bulk loads on the embedded cloud: POST /loads, GET /loads/{LoadId} and the load starter (S3
ObjectCreated events through SQS), against a versioned ingest bucket and two stand-in state machines that end at
once (a Pass and a Fail: the bulk state machine is the infra's, and its runs are the infra's tests), so only the
starters' own decisions are observed: which execution (generation) they start or join, and what they answer.

The routes are resolved by the loads API's router and the starter's records read by its logic, the code its
handler's `handle` runs: `handle` is audited against its function's synthesized role, and the bulk functions are
the infra's (the bulk-infra branch), not in this branch's templates.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.aws.clients import new_client
from devtools.taxi_world import embedded_saga_cloud, http_api_event
from runtime.shared.aws import Clients
from runtime.taxi_etl import contract, loads_api_handler, wiring
from runtime.taxi_etl.bulk_wiring import LoadsDeps, LoadsSettings
from runtime.taxi_etl.load_events import files_to_load, start_loads
from runtime.taxi_etl.load_objects import manifest_key, report_key, summary_key
from runtime.taxi_etl.loads import MAX_GENERATIONS, execution_input, execution_name, load_file, start_load
from runtime.taxi_etl.workflow import Start, StepFunctionsWorkflow

BUCKET = "onceflow-test-ingest"
KEY = "incoming/yellow_2019-10.csv"
ROLE = "arn:aws:iam::123456789012:role/bulk"
ENDS_AT_ONCE = {"Pass": {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}}
FAILS_AT_ONCE = {"StartAt": "Failed", "States": {"Failed": {"Type": "Fail", "Error": "LoadFailed", "Cause": "a stand-in"}}}


class Loads:
    def __init__(self, s3: Any, stepfunctions: Any, machine_arn: str) -> None:
        self.s3 = s3
        self.stepfunctions = stepfunctions
        self.machine_arn = machine_arn
        settings = LoadsSettings.from_env({contract.ENV_INGEST_BUCKET: BUCKET, contract.ENV_BULK_STATE_MACHINE_ARN: machine_arn})
        self.deps: LoadsDeps = wiring.build(settings, Clients(s3=s3, stepfunctions=stepfunctions))

    def upload(self, body: bytes = b"vendorid\n", key: str = KEY) -> str:
        return str(self.s3.put_object(Bucket=BUCKET, Key=key, Body=body)["VersionId"])

    def call(self, event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        response = loads_api_handler.router.resolve(event, self.deps)
        return int(response["statusCode"]), json.loads(response["body"])

    def post(self, document: Any, *, content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
        event = http_api_event(contract.ROUTE_LOADS, json.dumps(document) if not isinstance(document, str) else document)
        event["headers"]["content-type"] = content_type
        return self.call(event)

    def get(self, load_id: str) -> tuple[int, dict[str, Any]]:
        path = f"/loads/{load_id}"
        return self.call(
            http_api_event(path, None, method="GET", route="GET /loads/{LoadId}", path_parameters={contract.KEY_LOAD_ID: load_id})
        )

    def executions(self) -> list[dict[str, Any]]:
        listed = self.stepfunctions.list_executions(stateMachineArn=self.machine_arn)["executions"]
        return [self.stepfunctions.describe_execution(executionArn=execution["executionArn"]) for execution in listed]


def world(definition: dict[str, Any]) -> Loads:
    s3, stepfunctions = new_client("s3"), new_client("stepfunctions")
    s3.create_bucket(Bucket=BUCKET)
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    arn = stepfunctions.create_state_machine(name="bulk", definition=json.dumps(definition), roleArn=ROLE)["stateMachineArn"]
    return Loads(s3, stepfunctions, arn)


@pytest.fixture
def succeeding() -> Iterator[Loads]:
    with embedded_saga_cloud():
        yield world(ENDS_AT_ONCE["Pass"])


@pytest.fixture
def idle(moto_aws: None) -> Loads:
    """A state machine whose executions stay RUNNING until stopped (moto without its executor)."""
    return world(ENDS_AT_ONCE["Pass"])


@pytest.fixture
def failing() -> Iterator[Loads]:
    with embedded_saga_cloud():
        yield world(FAILS_AT_ONCE)


def test_a_post_starts_the_load_of_the_current_version_and_a_repeat_answers_its_outcome(succeeding: Loads) -> None:
    # Given a file in the ingest bucket
    version = succeeding.upload()
    load = load_file(BUCKET, KEY, version)
    # When it is posted without a version
    status, body = succeeding.post({"key": KEY})
    # Then generation 1 of that version's load is started, with the canonical input
    assert (status, body) == (202, {"loadId": load.load_id, "execution": load.load_id, "status": "RUNNING"})
    (execution,) = succeeding.executions()
    assert (execution["name"], execution["input"]) == (load.load_id, execution_input(load))
    # When it is posted again, now with its version, and its S3 event is delivered
    again = succeeding.post({"key": KEY, "versionId": version})
    event = json.dumps(
        {"Records": [{"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": BUCKET}, "object": {"key": KEY, "versionId": version}}}]}
    )
    (from_event,) = files_to_load(event, BUCKET)
    started = start_load(from_event, succeeding.deps.workflow)
    # Then the load that succeeded is answered, and no other execution was started
    assert again == (200, {"loadId": load.load_id, "execution": load.load_id, "status": "SUCCEEDED"})
    assert (started.execution, started.status) == (load.load_id, "SUCCEEDED")
    assert len(succeeding.executions()) == 1


def test_a_load_whose_generation_failed_is_run_again_under_the_next_name_until_the_limit(failing: Loads) -> None:
    # Given a file whose load fails every time
    load = load_file(BUCKET, KEY, failing.upload())
    # When it is posted MAX_GENERATIONS times
    answers = [failing.post({"key": KEY}) for _ in range(MAX_GENERATIONS)]
    # Then each post started the next generation, with the same input
    assert [body["execution"] for _, body in answers] == [execution_name(load.load_id, number) for number in range(1, MAX_GENERATIONS + 1)]
    assert {execution["input"] for execution in failing.executions()} == {execution_input(load)}
    # And once every generation failed, a post is refused
    status, body = failing.post({"key": KEY})
    assert status == 409
    assert "failed 9 times" in body["error"]
    assert len(failing.executions()) == MAX_GENERATIONS


def test_get_answers_the_newest_generation_with_progress_then_the_report(failing: Loads) -> None:
    # Given a load whose first generation failed after two of its three chunks
    load = load_file(BUCKET, KEY, failing.upload())
    assert failing.post({"key": KEY})[0] == 202
    failing.s3.put_object(Bucket=BUCKET, Key=manifest_key(load.load_id), Body=json.dumps([{}, {}, {}]))
    for index in (0, 1):
        failing.s3.put_object(Bucket=BUCKET, Key=summary_key(load.load_id, index), Body=b"{}")
    # When it is read
    status, body = failing.get(load.load_id)
    # Then the generation's status and the chunks done are answered
    assert status == 200
    assert body == {"loadId": load.load_id, "execution": load.load_id, "status": "FAILED", "progress": {"chunks": 3, "chunksDone": 2}}
    # When its report is written, it is what is answered
    report = {"loadId": load.load_id, "status": "FAILED", "chunksMissing": [2]}
    failing.s3.put_object(Bucket=BUCKET, Key=report_key(load.load_id), Body=json.dumps(report))
    assert failing.get(load.load_id) == (200, {"loadId": load.load_id, "execution": load.load_id, "status": "FAILED", "report": report})


def test_a_running_generation_is_joined_and_read_as_progress_not_as_an_earlier_report(idle: Loads) -> None:
    # Given a load whose first generation was stopped and reported FAILED, and whose re-run is running
    load = load_file(BUCKET, KEY, idle.upload())
    assert idle.post({"key": KEY}) == (202, {"loadId": load.load_id, "execution": load.load_id, "status": "RUNNING"})
    idle.stepfunctions.stop_execution(executionArn=idle.deps.workflow.execution_arn(load.load_id))
    idle.s3.put_object(Bucket=BUCKET, Key=report_key(load.load_id), Body=json.dumps({"status": "FAILED"}))
    rerun = execution_name(load.load_id, 2)
    assert idle.post({"key": KEY}) == (202, {"loadId": load.load_id, "execution": rerun, "status": "RUNNING"})
    idle.s3.put_object(Bucket=BUCKET, Key=manifest_key(load.load_id), Body=json.dumps([{}, {}]))
    idle.s3.put_object(Bucket=BUCKET, Key=summary_key(load.load_id, 1), Body=b"{}")
    # When it is posted again, and read
    joined = idle.post({"key": KEY})
    status, body = idle.get(load.load_id)
    # Then the post joined the running re-run, and the read shows its progress (the chunk the first generation did)
    assert joined == (202, {"loadId": load.load_id, "execution": rerun, "status": "RUNNING"})
    assert sorted(execution["name"] for execution in idle.executions()) == sorted([load.load_id, rerun])
    assert (status, body) == (
        200,
        {"loadId": load.load_id, "execution": rerun, "status": "RUNNING", "progress": {"chunks": 2, "chunksDone": 1}},
    )


def test_an_unknown_or_malformed_load_id_is_refused(succeeding: Loads) -> None:
    assert succeeding.get("load-" + "0" * 40)[0] == 404
    assert succeeding.get("load-xyz")[0] == 400


@pytest.mark.parametrize(
    ("document", "content_type", "status", "words"),
    [
        ({"key": "elsewhere/a.csv"}, "application/json", 400, "under incoming/"),
        ({"key": "incoming/"}, "application/json", 400, "under incoming/"),
        ({"key": KEY, "bucket": "another"}, "application/json", 400, "unknown field"),
        ({"key": "incoming/missing.csv"}, "application/json", 404, "is not in the bucket"),
        ({"key": KEY, "versionId": "no-such-version"}, "application/json", 404, "is not in the bucket"),
        ("not json", "application/json", 400, "not JSON"),
        ([KEY], "application/json", 400, "JSON object"),
        ({"key": KEY}, "text/csv", 415, "application/json"),
    ],
)
def test_a_post_that_names_no_loadable_version_is_refused_and_starts_nothing(
    succeeding: Loads, document: Any, content_type: str, status: int, words: str
) -> None:
    # Given a file in the bucket
    succeeding.upload()
    # When a request that does not name one of its versions is posted
    got, body = succeeding.post(document, content_type=content_type)
    # Then it is refused, saying why, and nothing started
    assert got == status
    assert words in body["error"]
    assert succeeding.executions() == []


def test_an_object_without_a_version_id_is_refused(succeeding: Loads) -> None:
    # Given an object stored while the bucket's versioning was suspended
    succeeding.s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Suspended"})
    succeeding.s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"vendorid\n")
    # When it is posted
    status, body = succeeding.post({"key": KEY})
    # Then it is a conflict, and nothing started
    assert status == 409
    assert "no version id" in body["error"]
    assert succeeding.executions() == []


def sqs_record(message_id: str, body: str) -> dict[str, Any]:
    return {"messageId": message_id, "body": body, "eventSource": "aws:sqs"}


def created(key: str, version: str) -> str:
    return json.dumps(
        {"Records": [{"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": BUCKET}, "object": {"key": key, "versionId": version}}}]}
    )


class FailingFor(StepFunctionsWorkflow):
    """The bulk state machine, whose StartExecution fails (a throttle, say) for one execution name."""

    def __init__(self, loads: Loads, name: str) -> None:
        super().__init__(loads.machine_arn, deduplicates=True, client=loads.stepfunctions)
        self._failing = name

    def start(self, name: str, execution_input: str) -> Start:
        if name == self._failing:
            raise RuntimeError("StartExecution failed")
        return super().start(name, execution_input)


def test_the_starter_starts_each_new_version_and_has_only_a_failed_start_delivered_again(failing: Loads) -> None:
    # Given two files, the bucket's test event, and a start that fails for the second file's load
    first, second = load_file(BUCKET, KEY, failing.upload()), load_file(BUCKET, "incoming/b.csv", failing.upload(key="incoming/b.csv"))
    test_event = json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": BUCKET})
    records = [
        sqs_record("m-test", test_event),
        sqs_record("m-1", created(KEY, first.version_id)),
        sqs_record("m-2", created("incoming/b.csv", second.version_id)),
    ]
    # When the batch is delivered
    failed = start_loads(records, BUCKET, FailingFor(failing, second.load_id))
    # Then the first file's load started, the test event started nothing, and only the failed message comes back
    assert failed == ["m-2"]
    assert [execution["name"] for execution in failing.executions()] == [first.load_id]
    # When it is delivered again and the start succeeds
    assert start_loads(records[2:], BUCKET, failing.deps.workflow) == []
    # Then the second load started too
    assert sorted(execution["name"] for execution in failing.executions()) == sorted([first.load_id, second.load_id])
