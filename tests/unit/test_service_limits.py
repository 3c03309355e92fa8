"""The embedded cloud's service limits (devtools/aws/service_limits.py) against moto: what AWS
refuses over each limit is refused, what sits exactly at it is accepted."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from botocore.exceptions import ClientError

from devtools.aws import service_limits as limits
from devtools.aws.clients import new_client
from devtools.aws.moto_patches import embedded_aws, fast_transactions
from devtools.local.http_api import HttpApi, HttpRequest, Integration, Route
from devtools.taxi_world import embedded_saga_cloud

ROLE = "arn:aws:iam::123456789012:role/limits"
FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:limits"


def document_of(size: int, **extra: Any) -> dict[str, Any]:
    """A JSON object of exactly `size` bytes (compact, UTF-8)."""
    document = {**extra, "pad": ""}
    document["pad"] = "x" * (size - limits.json_bytes(document))
    assert limits.json_bytes(document) == size
    return document


def compact(document: Any) -> str:
    return json.dumps(document, separators=(",", ":"))


def error_code(error: ClientError) -> str:
    return str(error.response["Error"]["Code"])


# --- Step Functions -------------------------------------------------------------------------


@pytest.fixture
def sfn() -> Iterator[Any]:
    with embedded_saga_cloud():
        yield new_client("stepfunctions")


def machine(sfn: Any, name: str, states: dict[str, Any], start: str) -> str:
    definition = {"StartAt": start, "States": states}
    return str(sfn.create_state_machine(name=name, definition=json.dumps(definition), roleArn=ROLE)["stateMachineArn"])


def run(sfn: Any, arn: str, name: str, execution_input: str = "{}") -> dict[str, Any]:
    started = sfn.start_execution(stateMachineArn=arn, name=name, input=execution_input)
    return dict(sfn.describe_execution(executionArn=started["executionArn"]))


def test_an_execution_input_at_the_limit_runs_and_one_byte_over_is_refused(sfn: Any) -> None:
    # Given a one-state machine
    arn = machine(sfn, "pass", {"Pass": {"Type": "Pass", "End": True}}, "Pass")
    # When it is started with an input of exactly 262,144 bytes, then with one byte more
    at_limit = run(sfn, arn, "at-limit", compact(document_of(limits.STEP_FUNCTIONS_PAYLOAD_BYTES)))
    with pytest.raises(ClientError) as refused:
        run(sfn, arn, "over", compact(document_of(limits.STEP_FUNCTIONS_PAYLOAD_BYTES + 1)))
    # Then the first runs to the end; the second is a ValidationException naming the limit, and no execution exists
    assert at_limit["status"] == "SUCCEEDED"
    assert error_code(refused.value) == "ValidationException" and "262144" in str(refused.value)
    assert [execution["name"] for execution in sfn.list_executions(stateMachineArn=arn)["executions"]] == ["at-limit"]


def test_a_task_result_over_the_limit_fails_the_execution_even_past_a_states_all_catch(sfn: Any) -> None:
    # Given a Lambda task whose Catch takes States.ALL, and a function that returns `size` bytes
    states = {
        "Task": {"Type": "Task", "Resource": FUNCTION, "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}], "End": True},
        "Caught": {"Type": "Pass", "End": True},
    }
    arn = machine(sfn, "task", states, "Task")
    size = {"bytes": 0}

    def invoke(backend: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any) -> bytes:
        return compact(document_of(size["bytes"])).encode()

    with mock.patch("moto.awslambda_simple.models.LambdaSimpleBackend.invoke", invoke):
        # When the function returns exactly 262,144 bytes, then one byte more
        size["bytes"] = limits.STEP_FUNCTIONS_PAYLOAD_BYTES
        at_limit = run(sfn, arn, "at-limit")
        size["bytes"] = limits.STEP_FUNCTIONS_PAYLOAD_BYTES + 1
        over = run(sfn, arn, "over")
    # Then the first succeeds through the task; the second fails the execution with States.DataLimitExceeded,
    # which States.ALL does not catch (the Caught state is never entered)
    assert at_limit["status"] == "SUCCEEDED"
    assert (over["status"], over["error"]) == ("FAILED", limits.STATES_DATA_LIMIT_EXCEEDED)
    history = sfn.get_execution_history(executionArn=over["executionArn"])["events"]
    entered = [event["stateEnteredEventDetails"]["name"] for event in history if "stateEnteredEventDetails" in event]
    assert entered == ["Task"]


def test_a_task_input_over_the_limit_fails_the_execution(sfn: Any) -> None:
    # Given a Lambda task whose Parameters send its input twice, and a function that answers {}
    states = {
        "Task": {
            "Type": "Task",
            "Resource": FUNCTION,
            "Parameters": {"first.$": "$", "second.$": "$"},
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
            "End": True,
        },
        "Caught": {"Type": "Pass", "End": True},
    }
    arn = machine(sfn, "twice", states, "Task")
    invoked: list[int] = []

    def invoke(backend: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any) -> bytes:
        invoked.append(len(body))
        return b"{}"

    wrapper = limits.json_bytes({"first": {}, "second": {}}) - 4  # the Parameters around two copies of the input
    with mock.patch("moto.awslambda_simple.models.LambdaSimpleBackend.invoke", invoke):
        # When the task's input, built by Parameters, is exactly the limit, then one byte over
        at_limit = run(sfn, arn, "at-limit", compact(document_of((limits.STEP_FUNCTIONS_PAYLOAD_BYTES - wrapper) // 2)))
        over = run(sfn, arn, "over", compact(document_of((limits.STEP_FUNCTIONS_PAYLOAD_BYTES - wrapper) // 2 + 1)))
    # Then the first invocation happens; the second is never scheduled and the execution fails with DataLimitExceeded
    assert at_limit["status"] == "SUCCEEDED" and len(invoked) == 1
    assert (over["status"], over["error"]) == ("FAILED", limits.STATES_DATA_LIMIT_EXCEEDED)


def test_a_state_output_is_measured_as_compact_utf8_json(sfn: Any) -> None:
    # Given a Pass state that outputs its input, and inputs of exactly 262,144 bytes as compact UTF-8 JSON with
    # non-ASCII text (moto alone measured `json.dumps` with spaces and \\u escapes: six bytes for an "é")
    arn = machine(sfn, "echo", {"Echo": {"Type": "Pass", "Parameters": {"a.$": "$.a", "pad.$": "$.pad"}, "End": True}}, "Echo")
    document = document_of(limits.STEP_FUNCTIONS_PAYLOAD_BYTES, a="é" * 200)
    # When it runs
    result = run(sfn, arn, "utf8", json.dumps(document, separators=(",", ":"), ensure_ascii=False))
    # Then it succeeds: the output is exactly at the limit as Step Functions counts it (moto counted it 803 bytes over)
    assert len(json.dumps(document).encode()) == limits.STEP_FUNCTIONS_PAYLOAD_BYTES + 803
    assert result["status"] == "SUCCEEDED"


# --- Lambda ---------------------------------------------------------------------------------


@pytest.fixture
def lambda_client() -> Iterator[Any]:
    with (
        embedded_aws(config={"lambda": {"use_docker": False}}),
        mock.patch("moto.awslambda_simple.models.LambdaSimpleBackend.invoke", lambda *args: b"{}"),
    ):
        yield new_client("lambda")


@pytest.mark.parametrize(
    ("invocation_type", "limit"),
    [("RequestResponse", limits.LAMBDA_SYNC_PAYLOAD_BYTES), ("Event", limits.LAMBDA_ASYNC_PAYLOAD_BYTES)],
)
def test_an_invoke_payload_at_the_limit_is_taken_and_one_byte_over_is_refused(lambda_client: Any, invocation_type: str, limit: int) -> None:
    # Given a function, and payloads of exactly the limit and one byte over
    # When each is invoked
    taken = lambda_client.invoke(FunctionName=FUNCTION, InvocationType=invocation_type, Payload=compact(document_of(limit)))
    with pytest.raises(ClientError) as refused:
        lambda_client.invoke(FunctionName=FUNCTION, InvocationType=invocation_type, Payload=compact(document_of(limit + 1)))
    # Then the first is invoked; the second is refused as Lambda refuses it, naming the limit
    assert taken["StatusCode"] in (200, 202)
    assert error_code(refused.value) == "RequestEntityTooLargeException"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 413 and str(limit) in str(refused.value)


def test_an_event_source_batch_is_cut_where_it_would_pass_six_mb() -> None:
    # Given 5 records of 2 MiB each, and the event a mapping builds from them
    records = ["r" * (2 * 1024 * 1024)] * 5

    def to_event(batch: Any) -> dict[str, Any]:
        return {"Records": list(batch)}

    # When the mapping fills an invocation
    taken = limits.fitting_batch(records, to_event)
    # Then it takes the 2 records that fit 6 MiB (3 would not), and a record that fits no invocation is refused
    assert taken == 2
    assert limits.json_bytes(to_event(records[:2])) <= limits.LAMBDA_SYNC_PAYLOAD_BYTES < limits.json_bytes(to_event(records[:3]))
    with pytest.raises(limits.LambdaPayloadTooLarge, match="6291456"):
        limits.fitting_batch(["r" * limits.LAMBDA_SYNC_PAYLOAD_BYTES], to_event)


def test_a_response_over_six_mb_is_a_function_error() -> None:
    # Given results of exactly 6 MiB and one byte more
    # When they are checked as a synchronous invocation's response
    size = limits.check_lambda_response(document_of(limits.LAMBDA_SYNC_PAYLOAD_BYTES))
    # Then the first passes and the second fails the invocation
    assert size == limits.LAMBDA_SYNC_PAYLOAD_BYTES
    with pytest.raises(limits.LambdaResponseTooLarge, match="exceeded maximum allowed payload size"):
        limits.check_lambda_response(document_of(limits.LAMBDA_SYNC_PAYLOAD_BYTES + 1))


def test_an_http_api_body_over_ten_mb_is_answered_413_before_any_integration() -> None:
    # Given bodies of exactly 10 MiB and one byte more
    # When the HTTP API receives them
    # Then only the second is refused, with API Gateway's 413
    assert limits.http_api_refusal(b"x" * limits.HTTP_API_PAYLOAD_BYTES) is None
    assert limits.http_api_refusal(b"x" * (limits.HTTP_API_PAYLOAD_BYTES + 1)) == (413, {"message": "Request Entity Too Large"})


# --- SQS ------------------------------------------------------------------------------------


@pytest.fixture
def queue() -> Iterator[tuple[Any, str]]:
    with embedded_aws():
        sqs = new_client("sqs")
        yield sqs, str(sqs.create_queue(QueueName="limits")["QueueUrl"])


def depth(sqs: Any, url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def test_a_message_counts_its_utf8_bytes_and_its_attributes(queue: tuple[Any, str]) -> None:
    sqs, url = queue
    attributes = {"RequestId": {"DataType": "String", "StringValue": "r" * 100}}
    attribute_bytes = len("RequestId") + len("String") + 100
    # Given a body that fills 1 MiB with its attribute, and one byte more; and a body of 2-byte characters
    # (moto alone counted characters and left attributes out, so it took all three)
    at_limit = "a" * (limits.SQS_MESSAGE_BYTES - attribute_bytes)
    # When each is sent
    sqs.send_message(QueueUrl=url, MessageBody=at_limit, MessageAttributes=attributes)
    with pytest.raises(ClientError) as over:
        sqs.send_message(QueueUrl=url, MessageBody=at_limit + "a", MessageAttributes=attributes)
    with pytest.raises(ClientError) as wide:
        sqs.send_message(QueueUrl=url, MessageBody="é" * (limits.SQS_MESSAGE_BYTES // 2 + 1))
    # Then only the first is queued; the others are InvalidParameterValue naming the limit
    assert depth(sqs, url) == 1
    for refused in (over, wide):
        assert error_code(refused.value) == "InvalidParameterValue" and "1048576 bytes" in str(refused.value)


def test_a_batch_over_one_mib_in_total_is_refused_whole(queue: tuple[Any, str]) -> None:
    sqs, url = queue
    # Given two messages of 600,000 bytes (300,000 characters each: moto alone took the batch)
    entries = [{"Id": str(index), "MessageBody": "é" * 300_000} for index in range(2)]
    # When they are sent as one batch, and then one of them alone in a batch
    with pytest.raises(ClientError) as refused:
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    sqs.send_message_batch(QueueUrl=url, Entries=entries[:1])
    # Then the batch is BatchRequestTooLong and none of its messages is queued; the single one is
    assert error_code(refused.value) == "AWS.SimpleQueueService.BatchRequestTooLong" or "BatchRequestTooLong" in error_code(refused.value)
    assert depth(sqs, url) == 1


# --- DynamoDB -------------------------------------------------------------------------------


@pytest.fixture
def table() -> Iterator[Any]:
    with embedded_aws(), fast_transactions():
        dynamodb = new_client("dynamodb")
        dynamodb.create_table(
            TableName="limits",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield dynamodb


def item_of(key: str, size: int) -> dict[str, Any]:
    """An item of exactly `size` bytes by DynamoDB's rules (names and UTF-8 values)."""
    item: dict[str, Any] = {"pk": {"S": key}, "v": {"S": ""}}
    item["v"]["S"] = "v" * (size - limits.dynamodb_item_bytes(item))
    assert limits.dynamodb_item_bytes(item) == size
    return item


def puts(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"Put": {"TableName": "limits", "Item": item}} for item in items]


def count(dynamodb: Any) -> int:
    pages = dynamodb.get_paginator("scan").paginate(TableName="limits", Select="COUNT")  # a page reads at most 1 MB
    return sum(int(page["Count"]) for page in pages)


def test_a_transaction_of_four_mb_is_written_and_one_byte_more_is_refused_whole(table: Any) -> None:
    # Given eleven items that come to exactly 4 MB (10 of 400,000 bytes and one of the rest), and the same with one
    # byte more on the last (moto alone has no aggregate limit and wrote them)
    sizes = [400_000] * 10 + [limits.DYNAMODB_TRANSACTION_BYTES - 4_000_000]
    at_limit = [item_of(f"a{index}", size) for index, size in enumerate(sizes)]
    over = [item_of(f"b{index}", size + (index == 10)) for index, size in enumerate(sizes)]
    # When each is written in one TransactWriteItems
    table.transact_write_items(TransactItems=puts(at_limit))
    with pytest.raises(ClientError) as refused:
        table.transact_write_items(TransactItems=puts(over))
    # Then the first transaction is written whole; the second is a ValidationException naming 4 MB, and none of it is written
    assert error_code(refused.value) == "ValidationException" and "4 MB" in str(refused.value)
    assert count(table) == 11


def test_an_oversized_item_refuses_its_transaction_before_anything_is_written(table: Any) -> None:
    # Given a transaction whose first item is small and second is over 400 KB
    items = [item_of("small", 100), item_of("large", limits.DYNAMODB_ITEM_BYTES + 1)]
    # When it is written
    with pytest.raises(ClientError) as refused:
        table.transact_write_items(TransactItems=puts(items))
    # Then it is refused and the small item was not written either (all or nothing)
    assert error_code(refused.value) == "ValidationException" and "Item size" in str(refused.value)
    assert count(table) == 0


def test_an_update_counts_the_item_it_changes_toward_four_mb(table: Any) -> None:
    # Given a stored item of 400,000 bytes, an update of it, and ten new items that with it come to one byte over 4 MB
    table.put_item(TableName="limits", Item=item_of("stored", 400_000))
    update = {
        "Update": {
            "TableName": "limits",
            "Key": {"pk": {"S": "stored"}},
            "UpdateExpression": "SET n = :one",
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
    }
    rest = limits.DYNAMODB_TRANSACTION_BYTES - 400_000
    sizes = [rest // 10] * 9 + [rest - 9 * (rest // 10)]
    over = [item_of(f"o{index}", size + (index == 9)) for index, size in enumerate(sizes)]
    at_limit = [item_of(f"a{index}", size) for index, size in enumerate(sizes)]
    # When they are written with the update in one transaction, then at exactly 4 MB
    with pytest.raises(ClientError) as refused:
        table.transact_write_items(TransactItems=[update, *puts(over)])
    table.transact_write_items(TransactItems=[update, *puts(at_limit)])
    # Then the first is refused whole (the stored item is not updated, no new item written); the second is written
    assert error_code(refused.value) == "ValidationException"
    assert count(table) == 11


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ({"S": "héllo"}, 6),
        ({"N": "123.4500"}, 4),  # 5 significant digits: 3 bytes, plus 1
        ({"N": "-0.001"}, 2),
        ({"B": "AAEC"}, 3),
        ({"BOOL": True}, 1),
        ({"NULL": True}, 1),
        ({"L": [{"S": "ab"}, {"N": "1"}]}, 3 + (1 + 2) + (1 + 2)),
        ({"M": {"k": {"S": "ab"}}}, 3 + 1 + 1 + 2),
        ({"SS": ["a", "bc"]}, 3),
    ],
)
def test_attribute_sizes_follow_dynamodbs_rules(value: dict[str, Any], size: int) -> None:
    # Given an attribute value
    # When it is measured
    # Then its size is DynamoDB's ("DynamoDB item sizes and formats")
    assert limits.attribute_value_bytes(value) == size


# --- the local HTTP API (make serve) ----------------------------------------------------------


def local_api(answer: Any, *, timeout_seconds: float = limits.HTTP_API_INTEGRATION_TIMEOUT_SECONDS) -> tuple[HttpApi, list[Any]]:
    """An HTTP API with one POST route in front of `answer`, and the events the route received."""
    events: list[Any] = []

    def integration(event: dict[str, Any]) -> Any:
        events.append(event)
        return answer()

    api = HttpApi(
        "limits", "api1", [Route("POST", "/items", Integration("items", integration))], integration_timeout_seconds=timeout_seconds
    )
    return api, events


def post(api: HttpApi, body: bytes) -> tuple[int, dict[str, Any]]:
    response = api.handle(HttpRequest("POST", "/items", [("content-type", "text/plain")], body))
    return response.status, json.loads(response.body)


def test_the_local_api_refuses_a_body_or_an_event_over_the_limits_before_the_function_runs() -> None:
    # Given an HTTP API whose function answers 200
    api, events = local_api(lambda: {"statusCode": 200, "body": "{}"})
    # When it receives a body that leaves its event 2 KB under Lambda's 6 MB, a body of 6 MB (its event is more),
    # and a body over the HTTP API's 10 MB
    fits = post(api, b"x" * (limits.LAMBDA_SYNC_PAYLOAD_BYTES - 2048))
    too_large_for_lambda = post(api, b"x" * limits.LAMBDA_SYNC_PAYLOAD_BYTES)
    too_large_for_the_api = post(api, b"x" * (limits.HTTP_API_PAYLOAD_BYTES + 1))
    # Then the first reaches the function, its event within 6 MB; the others are API Gateway's 413, and the function
    # never saw them
    assert fits[0] == 200 and len(events) == 1 and limits.json_bytes(events[0]) <= limits.LAMBDA_SYNC_PAYLOAD_BYTES
    assert too_large_for_lambda == too_large_for_the_api == (413, {"message": "Request Entity Too Large"})


def test_the_local_api_answers_500_for_a_response_over_six_mb_and_503_past_its_integration_timeout() -> None:
    # Given a function answering 6 MiB and one byte, and one that takes longer than a (shortened) integration timeout
    oversized, _ = local_api(lambda: {"statusCode": 200, "body": "x" * limits.LAMBDA_SYNC_PAYLOAD_BYTES})

    def slowly() -> dict[str, Any]:
        time.sleep(0.2)
        return {"statusCode": 200, "body": "{}"}

    slow, events = local_api(slowly, timeout_seconds=0.05)
    # When each is called
    # Then the first is a failed invocation (500); the second is the HTTP API's 503, though the function ran to its end
    assert post(oversized, b"{}") == (500, {"message": "Internal Server Error"})
    assert post(slow, b"{}") == (503, {"message": "Service Unavailable"}) and len(events) == 1
