"""The corrections to moto (devtools/aws/moto_patches.py), checked against unpatched moto.

`fast_transactions` must answer every TransactWriteItems exactly as moto's own implementation
does (outcome, cancellation reasons, old items, final state), only without copying the tables.
`VirtualClock.driving_sqs` replaces the clock functions moto's SQS reads. `cached_action_names`
lists a response class's actions once instead of on every request. If a moto upgrade changes any
of them, these tests fail instead of the suites that rely on the patches drifting quietly.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from devtools.aws import moto_patches
from devtools.aws.clients import new_client
from devtools.aws.moto_patches import (
    VirtualClock,
    atomic_moto_dynamodb,
    cached_action_names,
    cached_attribute_aliases,
    cached_state_machines,
    fast_transactions,
)

TABLES = ("Heads", "Entries")
Step = Callable[[Any], dict[str, Any]]


def put(table: str, key: str, *, return_old: bool = False, **attributes: Any) -> dict[str, Any]:
    request = {"TableName": table, "Item": {"pk": {"S": key}, **attributes}, "ConditionExpression": "attribute_not_exists(pk)"}
    if return_old:
        request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    return {"Put": request}


def outcome(client: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
    """What a caller sees of one TransactWriteItems: success, or the error code and each reason."""
    try:
        client.transact_write_items(TransactItems=items)
    except ClientError as err:
        reasons = [
            {key: value for key, value in reason.items() if key in ("Code", "Item")}
            for reason in err.response.get("CancellationReasons", [])
        ]
        return {"error": err.response["Error"]["Code"], "reasons": reasons}
    return {"error": None}


def scenario(client: Any) -> list[dict[str, Any]]:
    """The transactions the event log writes, and the ways they are refused."""
    steps: list[list[dict[str, Any]]] = [
        # append: an entry and the head, both new
        [put("Entries", "log#1", value={"S": "a"}), put("Heads", "log", next={"N": "2"})],
        # the next append: the head moves 2 -> 3 under its guard, the entry is new
        [
            put("Entries", "log#2", value={"S": "b"}),
            {
                "Update": {
                    "TableName": "Heads",
                    "Key": {"pk": {"S": "log"}},
                    "UpdateExpression": "SET #next = :next",
                    "ConditionExpression": "#next = :expected",
                    "ExpressionAttributeNames": {"#next": "next"},
                    "ExpressionAttributeValues": {":next": {"N": "3"}, ":expected": {"N": "2"}},
                }
            },
        ],
        # a stale append: the entry is taken and the head is not where it thought; old items asked for
        [
            put("Entries", "log#2", return_old=True, value={"S": "stale"}),
            {
                "Update": {
                    "TableName": "Heads",
                    "Key": {"pk": {"S": "log"}},
                    "UpdateExpression": "SET #next = :next",
                    "ConditionExpression": "#next = :expected",
                    "ExpressionAttributeNames": {"#next": "next"},
                    "ExpressionAttributeValues": {":next": {"N": "3"}, ":expected": {"N": "2"}},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        ],
        # one condition fails, the other holds: nothing is applied
        [put("Entries", "log#3", value={"S": "c"}), put("Heads", "log")],
        # a condition check on one item and a delete of another
        [
            {
                "ConditionCheck": {
                    "TableName": "Heads",
                    "Key": {"pk": {"S": "log"}},
                    "ConditionExpression": "attribute_exists(pk)",
                }
            },
            {"Delete": {"TableName": "Entries", "Key": {"pk": {"S": "log#1"}}}},
        ],
        # the same item twice in one transaction
        [put("Entries", "log#9"), {"Delete": {"TableName": "Entries", "Key": {"pk": {"S": "log#9"}}}}],
        # over DynamoDB's 100 actions
        [put("Entries", f"many#{index}") for index in range(101)],
    ]
    return [outcome(client, items) for items in steps]


def final_state(client: Any) -> dict[str, list[dict[str, Any]]]:
    return {table: sorted(client.scan(TableName=table)["Items"], key=lambda item: item["pk"]["S"]) for table in TABLES}


def run_scenario(patch: AbstractContextManager[None]) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    from moto import mock_aws

    with mock_aws(), patch:
        client = new_client("dynamodb")
        for table in TABLES:
            client.create_table(
                TableName=table,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
        return scenario(client), final_state(client)


def test_fast_transactions_answer_exactly_as_moto_does() -> None:
    # Given the same transactions against moto as shipped and against the patched backend
    plain_outcomes, plain_state = run_scenario(nullcontext())
    fast_outcomes, fast_state = run_scenario(fast_transactions())
    # Then every outcome, cancellation reason and old item, and the final tables, are the same
    assert fast_outcomes == plain_outcomes
    assert fast_state == plain_state
    # And the scenario exercised what it claims: successes, cancellations with old items, and both validation errors
    errors = [step["error"] for step in plain_outcomes]
    assert errors == [
        None,
        None,
        "TransactionCanceledException",
        "TransactionCanceledException",
        None,
        "ValidationException",
        "ValidationException",
    ]
    stale = plain_outcomes[2]["reasons"]
    assert [reason["Code"] for reason in stale] == ["ConditionalCheckFailed", "ConditionalCheckFailed"]
    assert stale[0]["Item"]["value"] == {"S": "b"} and stale[1]["Item"]["next"] == {"N": "3"}
    assert [reason["Code"] for reason in plain_outcomes[3]["reasons"]] == ["None", "ConditionalCheckFailed"]


def test_fast_transactions_restore_moto_on_exit() -> None:
    from moto.dynamodb.models import DynamoDBBackend

    # Given moto's own implementation
    original = DynamoDBBackend.transact_write_items
    # When the patch is entered and left
    with fast_transactions():
        assert DynamoDBBackend.transact_write_items is not original
    # Then moto's implementation is back
    assert DynamoDBBackend.transact_write_items is original


def test_atomic_dynamodb_serves_transactions_and_puts_from_many_threads() -> None:
    import threading

    from moto import mock_aws
    from moto.dynamodb.responses import DynamoHandler

    # Given moto's request handler, which the patch wraps (a rename would make the patch a no-op)
    original = DynamoHandler.call_action
    errors: list[BaseException] = []
    with mock_aws(), atomic_moto_dynamodb():
        assert DynamoHandler.call_action is not original
        client = new_client()
        client.create_table(
            TableName="busy",
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        )

        # When eight threads write at once, half of them in transactions (moto copies the table for each;
        # unpatched, some of them fail with "dictionary changed size during iteration")
        def write(worker: int) -> None:
            try:
                for n in range(40):
                    key = {"pk": {"S": f"{worker}-{n}"}}
                    if worker % 2:
                        client.transact_write_items(
                            TransactItems=[{"Put": {"TableName": "busy", "Item": key, "ConditionExpression": "attribute_not_exists(pk)"}}]
                        )
                    else:
                        client.put_item(TableName="busy", Item=key, ConditionExpression="attribute_not_exists(pk)")
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=write, args=(worker,)) for worker in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        count = client.scan(TableName="busy", Select="COUNT")["Count"]
    # Then every write went through, once, and moto's handler is back afterwards
    assert errors == []
    assert count == 8 * 40
    assert DynamoHandler.call_action is original


@pytest.fixture
def sqs() -> Iterator[Any]:
    from moto import mock_aws

    with mock_aws():
        yield new_client("sqs")


def test_moto_sqs_still_reads_the_clock_functions_the_patch_replaces() -> None:
    # Given moto's SQS module
    sqs_models: Any = importlib.import_module("moto.sqs.models")
    # Then it still has the two clock functions VirtualClock replaces (a rename would make the patch a no-op)
    assert callable(sqs_models.unix_time) and callable(sqs_models.unix_time_millis)


def test_unpatched_moto_hides_a_received_message_for_its_visibility_timeout(sqs: Any) -> None:
    # Given a queue with a 30-minute visibility timeout and one message, unpatched
    url = sqs.create_queue(QueueName="plain", Attributes={"VisibilityTimeout": "1800"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    # When it is received, then received again at once
    first = sqs.receive_message(QueueUrl=url).get("Messages", [])
    again = sqs.receive_message(QueueUrl=url).get("Messages", [])
    # Then moto hides it, as SQS does: the behaviour the virtual clock moves through
    assert len(first) == 1 and again == []


def test_the_virtual_clock_moves_visibility_timeouts_and_delays(sqs: Any) -> None:
    clock = VirtualClock()
    sqs_models: Any = importlib.import_module("moto.sqs.models")
    saved = (sqs_models.unix_time, sqs_models.unix_time_millis)
    with clock.driving_sqs():
        # Given a received message with a 30-minute visibility timeout, and a message delayed a minute
        url = sqs.create_queue(QueueName="clocked", Attributes={"VisibilityTimeout": "1800"})["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="received")
        assert len(sqs.receive_message(QueueUrl=url).get("Messages", [])) == 1
        sqs.send_message(QueueUrl=url, MessageBody="delayed", DelaySeconds=60)
        # When the clock stands still, nothing is visible
        assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
        # When it moves past the delay but not the timeout, only the delayed message is
        clock.advance(61)
        assert [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])] == ["delayed"]
        # When it moves past the first message's timeout (but not the delayed one's), the first is back, received twice
        clock.advance(1750)
        bodies = {
            m["Body"]: m["Attributes"]["ApproximateReceiveCount"]
            for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages", [])
        }
        assert bodies == {"received": "2"}
    # Then moto's own clock functions are back
    assert (sqs_models.unix_time, sqs_models.unix_time_millis) == saved


def test_the_embedded_cloud_serves_dynamodb_requests_one_at_a_time() -> None:
    # Given moto's own DynamoDB request entry point
    from moto.dynamodb.responses import DynamoHandler

    from devtools.aws.moto_patches import embedded_aws

    unpatched = DynamoHandler.call_action
    # When the embedded cloud is entered
    with embedded_aws():
        # Then the entry point is the atomic one
        assert DynamoHandler.call_action is not unpatched
    # and on the way out moto is as it was
    assert DynamoHandler.call_action is unpatched


def test_cached_action_names_lists_each_response_class_once_and_restores_moto(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws
    from moto.core import responses
    from moto.dynamodb.responses import DynamoHandler

    # Given moto's own lister of a response class's actions, counted (the name the dispatch calls:
    # a rename in moto would make the patch a no-op)
    original = responses.method_names_from_class
    listed: list[object] = []

    def counted(clazz: object) -> Any:
        listed.append(clazz)
        return original(clazz)

    monkeypatch.setattr(responses, "method_names_from_class", counted)
    monkeypatch.setattr(moto_patches, "_ACTION_NAMES", {})  # what earlier tests in this process listed
    with mock_aws(), cached_action_names():
        client = new_client("dynamodb")
        # When six requests of four actions reach moto's DynamoDB
        client.create_table(
            TableName="cached",
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        )
        for key in ("a", "b", "c"):
            client.put_item(TableName="cached", Item={"pk": {"S": key}})
        item = client.get_item(TableName="cached", Key={"pk": {"S": "b"}})["Item"]
        count = client.scan(TableName="cached", Select="COUNT")["Count"]
        # Then each was dispatched to its action, and the handler's class was listed once
        assert (item, count) == ({"pk": {"S": "b"}}, 3)
        assert listed == [DynamoHandler]
    # and moto's lister (here, the counted one) is back
    assert responses.method_names_from_class is counted


def varied_answers() -> list[Any]:
    """What moto answers to requests of four services whose responses hold nested structures,
    lists, maps, timestamps and binary values (volatile values: ids and times, made constant)."""
    dynamodb, sqs, s3, kinesis = (new_client(service) for service in ("dynamodb", "sqs", "s3", "kinesis"))
    answers: list[Any] = []
    answers.append(
        dynamodb.create_table(
            TableName="varied",
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": name, "AttributeType": "S"} for name in ("pk", "sk", "kind")],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "by-kind",
                    "KeySchema": [{"AttributeName": "kind", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )
    )
    for number in range(3):
        item = {
            "pk": {"S": "p"},
            "sk": {"S": f"s{number}"},
            "kind": {"S": "k"},
            "nested": {"M": {"list": {"L": [{"N": str(number)}, {"B": b"\x00\x01"}, {"SS": ["a", "b"]}]}, "null": {"NULL": True}}},
        }
        answers.append(dynamodb.put_item(TableName="varied", Item=item, ReturnValues="ALL_OLD"))
    answers.append(
        dynamodb.update_item(
            TableName="varied",
            Key={"pk": {"S": "p"}, "sk": {"S": "s1"}},
            UpdateExpression="ADD n :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
            ReturnValues="ALL_NEW",
        )
    )
    answers.append(dynamodb.query(TableName="varied", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "p"}}))
    answers.append(
        dynamodb.query(
            TableName="varied",
            IndexName="by-kind",
            KeyConditionExpression="kind = :k",
            ExpressionAttributeValues={":k": {"S": "k"}},
            Limit=2,
        )
    )
    answers.append(dynamodb.scan(TableName="varied", ConsistentRead=True))
    answers.append(dynamodb.describe_table(TableName="varied"))
    answers.append(dynamodb.batch_get_item(RequestItems={"varied": {"Keys": [{"pk": {"S": "p"}, "sk": {"S": "s0"}}]}}))
    try:
        dynamodb.put_item(
            TableName="varied",
            Item={"pk": {"S": "p"}, "sk": {"S": "s0"}},
            ConditionExpression="attribute_not_exists(pk)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except ClientError as err:
        answers.append(err.response)
    url = sqs.create_queue(QueueName="varied", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    answers.append(sqs.send_message(QueueUrl=url, MessageBody="body", MessageAttributes={"a": {"DataType": "String", "StringValue": "v"}}))
    answers.append(sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], AttributeNames=["All"]))
    answers.append(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]))
    s3.create_bucket(Bucket="varied")
    answers.append(s3.put_object(Bucket="varied", Key="a/b", Body=b"object"))
    answers.append(s3.list_objects_v2(Bucket="varied", Prefix="a/"))
    answers.append(s3.head_object(Bucket="varied", Key="a/b"))
    kinesis.create_stream(StreamName="varied", ShardCount=1)
    answers.append(kinesis.put_records(StreamName="varied", Records=[{"Data": b"d", "PartitionKey": "k"}]))
    answers.append(kinesis.describe_stream_summary(StreamName="varied"))
    return [constant_volatiles(answer) for answer in answers]


VOLATILE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d{4}-\d\d-\d\dT[\d:.]+|\d{10,}(\.\d+)?")


def constant_volatiles(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: constant_volatiles(inner) for key, inner in value.items() if key not in ("ResponseMetadata", "ReceiptHandle")}
    if isinstance(value, list):
        return [constant_volatiles(inner) for inner in value]
    if isinstance(value, datetime):
        return "<time>"
    if isinstance(value, str):
        return VOLATILE.sub("<volatile>", value)
    return value


def test_cached_attribute_aliases_answer_exactly_as_moto_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws
    from moto.core import serialize

    # Given moto's answers to varied requests of four services
    with mock_aws():
        plain = varied_answers()
    # When the same requests are answered twice with the aliases cached (the second time, from the cache)
    monkeypatch.setattr(moto_patches, "_ATTRIBUTE_ALIASES", {})
    originals = (serialize.AttributePicker.get_possible_keys, serialize.XFormedAttributePicker.get_possible_keys)
    with cached_attribute_aliases():
        assert serialize.XFormedAttributePicker.get_possible_keys is not originals[1]
        with mock_aws():
            cached = varied_answers()
        with mock_aws():
            from_the_cache = varied_answers()
    # Then every answer is the same each time, and moto's pickers are back
    assert cached == plain
    assert from_the_cache == plain
    assert (serialize.AttributePicker.get_possible_keys, serialize.XFormedAttributePicker.get_possible_keys) == originals


BRANCHING = {
    "StartAt": "Count",
    "States": {
        "Count": {"Type": "Pass", "Parameters": {"n.$": "$.n", "said.$": "States.Format('n={}', $.n)"}, "Next": "Size"},
        "Size": {"Type": "Choice", "Choices": [{"Variable": "$.n", "NumericGreaterThan": 1, "Next": "Big"}], "Default": "Small"},
        "Big": {"Type": "Pass", "Result": "big", "ResultPath": "$.size", "End": True},
        "Small": {"Type": "Fail", "Error": "Small", "Cause": "n is at most 1"},
    },
}


def executions_of_a_branching_machine() -> list[tuple[str, str | None, list[str]]]:
    """Status, output and history of four executions of one state machine, through moto's executor."""
    import json
    import time

    stepfunctions = new_client("stepfunctions")
    arn = stepfunctions.create_state_machine(
        name="branching", definition=json.dumps(BRANCHING), roleArn="arn:aws:iam::123456789012:role/sfn"
    )["stateMachineArn"]
    started = [
        stepfunctions.start_execution(stateMachineArn=arn, name=f"n{n}", input=json.dumps({"n": n}))["executionArn"] for n in range(4)
    ]
    ended = []
    for execution in started:
        deadline = time.monotonic() + 30
        while (described := stepfunctions.describe_execution(executionArn=execution))["status"] == "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        history = stepfunctions.get_execution_history(executionArn=execution)["events"]
        ended.append((described["status"], described.get("output"), [event["type"] for event in history]))
    return ended


def test_cached_state_machines_parse_a_definition_once_and_run_as_moto_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws
    from moto.core.config import default_user_config

    parser: Any = importlib.import_module("moto.stepfunctions.parser.asl.parse.asl_parser").AmazonStateLanguageParser
    monkeypatch.setitem(default_user_config, "stepfunctions", {"execute_state_machine": True})
    # Given four executions of one state machine (two succeed, two fail) on moto as it is
    with mock_aws():
        plain = executions_of_a_branching_machine()
    assert [status for status, _, _ in plain] == ["FAILED", "FAILED", "SUCCEEDED", "SUCCEEDED"]
    # and moto's parser, counted
    parse = parser.__dict__["parse"].__func__
    parses: list[str] = []
    monkeypatch.setattr(parser, "parse", staticmethod(lambda definition: parses.append(definition) or parse(definition)))
    monkeypatch.setattr(moto_patches, "_STATE_MACHINES", {})  # what earlier tests in this process parsed
    counted = parser.__dict__["parse"]
    # When the same runs with the definitions cached
    with cached_state_machines(), mock_aws():
        cached = executions_of_a_branching_machine()
    # Then every execution ended as before, with the same output and history, and the definition was parsed once
    assert cached == plain
    assert len(parses) == 1
    # and moto's parser (here, the counted one) is back
    assert parser.__dict__["parse"] is counted
