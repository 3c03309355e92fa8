"""Starting the saga (runtime/taxi_etl/workflow.py) on a fake Step Functions client.

The fake keeps executions by ARN with Standard semantics: StartExecution with a new name starts one;
with the name of a running execution and the same input it answers with that execution; otherwise
(the execution has ended, or the input differs) it raises ExecutionAlreadyExists, as the service does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from botocore.exceptions import ClientError

from runtime.taxi_etl.workflow import RequestConflict, Start, StartOutcome, StepFunctionsWorkflow

STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:onceflow-dev-taxi"
EXECUTION_PREFIX = "arn:aws:states:us-east-1:123456789012:execution:onceflow-dev-taxi"
T0 = datetime(2024, 1, 1, 12, tzinfo=UTC)
INPUT = '{"rows":[{"StoreRequestId":"k-order-42","tuple":"2,2019-10-23T16:39:42.000"}]}'


def client_error(code: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} (fake)"}}, operation)


@dataclass
class FakeExecution:
    name: str
    input: str
    start_date: datetime
    status: str = "RUNNING"


@dataclass
class FakeStepFunctions:
    executions: dict[str, FakeExecution] = field(default_factory=dict)  # by execution ARN
    started: list[str] = field(default_factory=list)  # every StartExecution name, in order
    described: list[str] = field(default_factory=list)  # every DescribeExecution ARN, in order
    start_error: str | None = None  # when set, StartExecution fails with this code
    now: datetime = T0  # the service's clock: an execution's startDate

    def start_execution(self, *, stateMachineArn: str, name: str, input: str) -> dict[str, Any]:  # noqa: N803 - the SDK names
        self.started.append(name)
        if self.start_error is not None:
            raise client_error(self.start_error, "StartExecution")
        arn = f"{stateMachineArn.replace(':stateMachine:', ':execution:', 1)}:{name}"
        existing = self.executions.get(arn)
        if existing is not None and not (existing.status == "RUNNING" and existing.input == input):
            raise client_error("ExecutionAlreadyExists", "StartExecution")
        execution = self.executions.setdefault(arn, FakeExecution(name, input, self.now))
        return {"executionArn": arn, "startDate": execution.start_date}

    def describe_execution(self, *, executionArn: str) -> dict[str, Any]:  # noqa: N803 - the SDK's name
        self.described.append(executionArn)
        execution = self.executions.get(executionArn)
        if execution is None:
            raise client_error("ExecutionDoesNotExist", "DescribeExecution")
        return {
            "executionArn": executionArn,
            "name": execution.name,
            "status": execution.status,
            "input": execution.input,
            "startDate": execution.start_date,
        }

    def finish(self, name: str) -> None:
        self.executions[f"{EXECUTION_PREFIX}:{name}"].status = "SUCCEEDED"


def standard(fake: FakeStepFunctions, asked_at: datetime | None = None) -> StepFunctionsWorkflow:
    """The adapter on `fake`, whose own clock reads `asked_at` (the service's clock by default)."""
    return StepFunctionsWorkflow(STATE_MACHINE_ARN, deduplicates=True, client=cast(Any, fake), clock=lambda: asked_at or fake.now)


def test_a_new_name_starts_an_execution() -> None:
    # Given a Standard state machine with no execution
    fake = FakeStepFunctions()
    # When a request starts its execution
    start = standard(fake).start("k-order-42", INPUT)
    # Then it is STARTED with the execution's ARN, and the execution has the input
    assert start == Start(StartOutcome.STARTED, f"{EXECUTION_PREFIX}:k-order-42")
    assert fake.executions[start.execution_arn].input == INPUT
    assert fake.described == []


def test_the_same_request_while_its_execution_runs_is_started_again_as_the_same_execution() -> None:
    # Given a running execution
    fake = FakeStepFunctions()
    first = standard(fake).start("k-order-42", INPUT)
    # When the same request comes again
    again = standard(fake).start("k-order-42", INPUT)
    # Then the answer is the same execution, still STARTED, and only one exists
    assert again == first and again.outcome == StartOutcome.STARTED
    assert len(fake.executions) == 1


def test_the_same_request_after_its_execution_ended_is_a_duplicate() -> None:
    # Given an execution that has ended
    fake = FakeStepFunctions()
    standard(fake).start("k-order-42", INPUT)
    fake.finish("k-order-42")
    fake.now += timedelta(seconds=30)
    # When the same request comes again, 30 s later, its JSON written with other whitespace and key order
    document = json.loads(INPUT)
    reformatted = json.dumps({"rows": [{"tuple": document["rows"][0]["tuple"], "StoreRequestId": "k-order-42"}]}, indent=2)
    assert reformatted != INPUT
    start = standard(fake).start("k-order-42", reformatted)
    # Then it is a DUPLICATE of that execution, whose ARN is derived from the state machine's
    assert start == Start(StartOutcome.DUPLICATE, f"{EXECUTION_PREFIX}:k-order-42")
    assert fake.described == [f"{EXECUTION_PREFIX}:k-order-42"]
    assert len(fake.executions) == 1


@pytest.mark.parametrize(
    ("asked_before_start_ms", "outcome"),
    [(250.0, StartOutcome.STARTED), (0.0, StartOutcome.STARTED), (-0.4, StartOutcome.STARTED), (-2.0, StartOutcome.DUPLICATE)],
    ids=["asked-before", "same-ms", "same-ms-by-resolution", "asked-after"],
)
def test_a_start_applied_whose_response_was_lost_is_recognised_as_our_own_start(
    asked_before_start_ms: float, outcome: StartOutcome
) -> None:
    # Given our StartExecution landed, its response was lost, and its execution ended before botocore's
    # retry, which then meets ExecutionAlreadyExists; our call was made `asked_before_start_ms` before the
    # service's startDate (which has millisecond resolution)
    fake = FakeStepFunctions()
    asked_at = fake.now - timedelta(milliseconds=asked_before_start_ms)
    fake.start_execution(stateMachineArn=STATE_MACHINE_ARN, name="k-order-42", input=INPUT)
    fake.finish("k-order-42")
    # When the adapter sees that answer for the call it made at `asked_at`
    start = standard(fake, asked_at=asked_at).start("k-order-42", INPUT)
    # Then an execution that started after the call was made (in the same millisecond or later) is ours:
    # STARTED; one that started before the call belongs to an earlier request: DUPLICATE
    assert start == Start(outcome, f"{EXECUTION_PREFIX}:k-order-42")


@pytest.mark.parametrize("status", ["RUNNING", "SUCCEEDED", "FAILED"])
def test_a_name_reused_for_a_different_request_is_a_conflict(status: str) -> None:
    # Given an execution (running or ended) for key order-42
    fake = FakeStepFunctions()
    standard(fake).start("k-order-42", INPUT)
    fake.executions[f"{EXECUTION_PREFIX}:k-order-42"].status = status
    # When another request reuses the key with a different row
    other = INPUT.replace("16:39:42", "16:39:43")
    with pytest.raises(RequestConflict) as raised:
        standard(fake).start("k-order-42", other)
    # Then it is a conflict naming the id and telling the client to use a new key, caused by the service's refusal
    assert "k-order-42 was already used for a different request" in str(raised.value)
    assert "Idempotency-Key" in str(raised.value)
    assert isinstance(raised.value.__cause__, ClientError)
    # And the first execution is untouched
    assert fake.executions[f"{EXECUTION_PREFIX}:k-order-42"].input == INPUT


def test_an_express_workflow_does_not_deduplicate_and_the_error_propagates() -> None:
    # Given an Express workflow (no name deduplication) whose start is refused as already existing
    fake = FakeStepFunctions()
    fake.executions[f"{EXECUTION_PREFIX}:k-order-42"] = FakeExecution("k-order-42", INPUT, T0, "SUCCEEDED")
    workflow = StepFunctionsWorkflow(STATE_MACHINE_ARN, deduplicates=False, client=cast(Any, fake))
    # When the request starts
    with pytest.raises(ClientError) as raised:
        workflow.start("k-order-42", INPUT)
    # Then the service's error is raised as is, and no execution is described
    assert raised.value.response["Error"]["Code"] == "ExecutionAlreadyExists"
    assert fake.described == []


@pytest.mark.parametrize("deduplicates", [True, False])
@pytest.mark.parametrize("code", ["ThrottlingException", "AccessDeniedException", "InvalidName", "StateMachineDoesNotExist"])
def test_any_other_start_error_propagates(code: str, deduplicates: bool) -> None:
    # Given a start that fails for another reason
    fake = FakeStepFunctions(start_error=code)
    workflow = StepFunctionsWorkflow(STATE_MACHINE_ARN, deduplicates=deduplicates, client=cast(Any, fake))
    # When the request starts
    with pytest.raises(ClientError) as raised:
        workflow.start("c-0123", INPUT)
    # Then that error is raised, not read as a duplicate or a conflict
    assert not isinstance(raised.value, RequestConflict)
    assert raised.value.response["Error"]["Code"] == code
    assert fake.described == []


def test_the_execution_arn_swaps_only_the_resource_type() -> None:
    # Given a state machine in another partition whose name contains "stateMachine"
    workflow = StepFunctionsWorkflow(
        "arn:aws-cn:states:cn-north-1:123456789012:stateMachine:stateMachine-x", deduplicates=True, client=cast(Any, object())
    )
    # When an execution's ARN is derived
    # Then only the resource type changes
    assert workflow.execution_arn("kb-run-7") == "arn:aws-cn:states:cn-north-1:123456789012:execution:stateMachine-x:kb-run-7"
