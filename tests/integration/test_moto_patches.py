"""The corrections to moto (devtools/aws/moto_patches.py), checked against unpatched moto.

`fast_transactions` must answer every TransactWriteItems exactly as moto's own implementation
does (outcome, cancellation reasons, old items, final state, stream records), only without copying
the tables, and write nothing of a transaction that one item's refusal cancels.
`VirtualClock.driving_sqs` replaces the clock functions moto's SQS reads. `cached_action_names`
lists a response class's actions once instead of on every request. `step_functions_as_aws` must
fail what AWS fails where moto succeeded (shown on moto as shipped), and so must `strict_distributed_map`
(a Distributed Map past its tolerated failures; 1,000 items on one worker); `cached_step_functions_clients`
must answer as moto's own clients do. If a moto upgrade changes any
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
from hypothesis import example, given, settings
from hypothesis import strategies as st

from devtools.aws import moto_patches
from devtools.aws.clients import new_client
from devtools.aws.moto_patches import (
    VirtualClock,
    atomic_moto_dynamodb,
    cached_action_names,
    cached_attribute_aliases,
    cached_backend_urls,
    cached_state_machines,
    direct_attribute_values,
    fast_transactions,
    linear_item_size,
)

# Each table's key: a partition key alone, or with a sort key (the event log's entries are keyed so).
KEYS = {"Heads": ("pk",), "Entries": ("pk",), "Segments": ("pk", "sk")}
TABLES = tuple(KEYS)
Step = Callable[[Any], dict[str, Any]]


def create_tables(client: Any) -> None:
    for table, key in KEYS.items():
        client.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": name, "KeyType": kind} for name, kind in zip(key, ("HASH", "RANGE"), strict=False)],
            AttributeDefinitions=[{"AttributeName": name, "AttributeType": kind} for name, kind in zip(key, ("S", "N"), strict=False)],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )


def stream_records() -> list[tuple[str, Any, Any, Any]]:
    """Every record of the tables' streams, in order: its event, keys and images."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    backend = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    records = []
    for table in TABLES:
        for record in backend.get_table(table).stream_shard.items:  # moto's own transaction puts back a copy of each table
            body = record.record["dynamodb"]
            records.append((record.record["eventName"], body["Keys"], body.get("NewImage"), body.get("OldImage")))
    return records


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
        return {"error": err.response["Error"]["Code"], "message": err.response["Error"]["Message"], "reasons": reasons}
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
        # an update that creates its item, beside a put
        [
            {
                "Update": {
                    "TableName": "Heads",
                    "Key": {"pk": {"S": "other"}},
                    "UpdateExpression": "SET #next = :one",
                    "ExpressionAttributeNames": {"#next": "next"},
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
            put("Entries", "other#1", value={"S": "a"}),
        ],
        # items under a sort key: a put, and an update that creates its item
        [
            {"Put": {"TableName": "Segments", "Item": {"pk": {"S": "log"}, "sk": {"N": "1"}, "n": {"N": "1"}}}},
            {
                "Update": {
                    "TableName": "Segments",
                    "Key": {"pk": {"S": "log"}, "sk": {"N": "2"}},
                    "UpdateExpression": "SET n = :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
        ],
        # and an update of one of them, under its condition
        [
            {
                "Update": {
                    "TableName": "Segments",
                    "Key": {"pk": {"S": "log"}, "sk": {"N": "1"}},
                    "UpdateExpression": "ADD n :one",
                    "ConditionExpression": "n = :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        ],
    ]
    return [outcome(client, items) for items in steps]


def final_state(client: Any) -> dict[str, list[dict[str, Any]]]:
    def key(item: dict[str, Any]) -> tuple[str, ...]:
        return tuple(str(item[name]) for name in ("pk", "sk") if name in item)

    return {table: sorted(client.scan(TableName=table)["Items"], key=key) for table in TABLES}


def run_scenario(
    patch: AbstractContextManager[None],
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], list[tuple[str, Any, Any, Any]]]:
    from moto import mock_aws

    with mock_aws(), patch:
        client = new_client("dynamodb")
        create_tables(client)
        return scenario(client), final_state(client), stream_records()


def test_fast_transactions_answer_exactly_as_moto_does() -> None:
    # Given the same transactions against moto as shipped and against the patched backend
    plain_outcomes, plain_state, plain_records = run_scenario(nullcontext())
    fast_outcomes, fast_state, fast_records = run_scenario(fast_transactions())
    # Then every outcome, cancellation reason and old item, the final tables and their stream records are the same
    assert fast_outcomes == plain_outcomes
    assert fast_state == plain_state
    assert fast_records == plain_records
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
        None,
        None,
        None,
    ]
    assert plain_state["Segments"][0]["n"] == {"N": "2"} and plain_state["Heads"][1] == {"pk": {"S": "other"}, "next": {"N": "1"}}
    stale = plain_outcomes[2]["reasons"]
    assert [reason["Code"] for reason in stale] == ["ConditionalCheckFailed", "ConditionalCheckFailed"]
    assert stale[0]["Item"]["value"] == {"S": "b"} and stale[1]["Item"]["next"] == {"N": "3"}
    assert [reason["Code"] for reason in plain_outcomes[3]["reasons"]] == ["None", "ConditionalCheckFailed"]


def head_update(expression: str, values: dict[str, Any] | None = None, *, key: str = "log", condition: str | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {"TableName": "Heads", "Key": {"pk": {"S": key}}, "UpdateExpression": expression}
    # `next` is one of DynamoDB's reserved words: an expression names it through #next, or is refused for that alone
    names = {name: value for name, value in (("#text", "text"), ("#next", "next")) if name in expression}
    if names:
        update["ExpressionAttributeNames"] = names
    if values:
        update["ExpressionAttributeValues"] = values
    if condition:
        update["ConditionExpression"] = condition
    return {"Update": update}


ONE = {":one": {"N": "1"}}
# An append's Put of a new entry, then an Update of the head that DynamoDB refuses.
REFUSED_SECOND_ITEMS = {
    "adds a number to a string": head_update("ADD #text :one", ONE),
    "adds a number to a string with SET": head_update("SET #text = #text + :one", ONE),
    "sets a key attribute": head_update("SET pk = :other", {":other": {"S": "other"}}),
    "uses a value it does not define": head_update("SET #next = :missing", ONE),
    "reads an attribute the item does not have": head_update("SET #next = absent"),
    "appends to a string": head_update("SET #text = list_append(#text, :list)", {":list": {"L": [{"S": "a"}]}}),
    "adds a string to an item it creates": head_update("ADD #next :text", {":text": {"S": "a"}}, key="new-log"),
    "holds a condition that fails": head_update("SET #next = :one", ONE, condition="attribute_not_exists(pk)"),
}


REFUSAL_REASONS = {
    "adds a number to a string": "incorrect data type",
    "adds a number to a string with SET": "Incorrect operand type for operator or function; operator or function: +",
    "sets a key attribute": "Cannot update attribute pk. This attribute is part of the key",
    "uses a value it does not define": "attribute value: :missing",
    "reads an attribute the item does not have": "refers to an attribute that does not exist in the item",
    "appends to a string": "operator or function: list_append",
    "adds a string to an item it creates": "incorrect data type",
    "holds a condition that fails": "ConditionalCheckFailed",
}


def refused_transactions(patch: AbstractContextManager[None]) -> dict[str, tuple[dict[str, Any], dict[str, list[dict[str, Any]]], int]]:
    """Each refused transaction's outcome, the tables after it and the stream records it made."""
    from moto import mock_aws

    answers = {}
    with mock_aws(), patch:
        client = new_client("dynamodb")
        create_tables(client)
        client.put_item(TableName="Heads", Item={"pk": {"S": "log"}, "text": {"S": "hello"}})
        for case, second in REFUSED_SECOND_ITEMS.items():
            before = len(stream_records())
            answer = outcome(client, [put("Entries", f"log#{case}", value={"S": "entry"}), second])
            answers[case] = (answer, final_state(client), len(stream_records()) - before)
    return answers


def test_a_transaction_whose_last_item_is_refused_writes_nothing_as_moto_and_dynamodb() -> None:
    # Given a Put of a new entry followed by an Update of the head that is refused, in each way DynamoDB refuses one
    # When each transaction runs against moto as shipped and against the patched backend
    plain = refused_transactions(nullcontext())
    fast = refused_transactions(fast_transactions())
    # Then each is refused with the same error (and cancellation reasons) as moto's own, and nothing is written:
    # no entry, the head as it was, no stream record (the Put was written first, before this patch checked updates)
    untouched = {"Heads": [{"pk": {"S": "log"}, "text": {"S": "hello"}}], "Entries": [], "Segments": []}
    for case, (answer, state, records) in fast.items():
        assert answer == plain[case][0], case
        assert answer["error"] is not None, case
        assert (state, records) == (untouched, 0), case
        assert plain[case][1:] == (untouched, 0), case
    # and the failed condition is the last item's cancellation reason; the refused expressions refuse the request
    assert fast["holds a condition that fails"][0]["error"] == "TransactionCanceledException"
    assert fast["holds a condition that fails"][0]["reasons"] == [{"Code": "None"}, {"Code": "ConditionalCheckFailed"}]
    # and each refused for the reason its case names (not, say, for a reserved word in its expression)
    for case, fragment in REFUSAL_REASONS.items():
        assert fragment in fast[case][0]["message"], (case, fast[case][0]["message"])
    assert {answer["error"] for case, (answer, _, _) in fast.items() if case != "holds a condition that fails"} == {"ValidationException"}


def test_an_item_whose_key_is_not_the_tables_key_schema_refuses_the_transaction_as_dynamodb_does() -> None:
    # Given a transaction that puts a new head and updates the same head by a Key with an attribute beyond the table's
    # key schema (moto as shipped took it for another item: the Update replaced the Put's item, storing the extra
    # attribute as data)
    from moto import mock_aws

    extra = head_update("SET #next = :one", ONE, key="fresh")
    extra["Update"]["Key"]["x"] = {"S": "1"}
    with mock_aws(), fast_transactions():
        client = new_client("dynamodb")
        create_tables(client)
        before = len(stream_records())
        # When it runs on the patched backend
        answer = outcome(client, [put("Heads", "fresh", value={"S": "put"}), extra])
        # Then the request is refused as DynamoDB refuses it, and nothing is written
        assert answer == {"error": "ValidationException", "message": "The provided key element does not match the schema", "reasons": []}
        assert final_state(client) == {"Heads": [], "Entries": [], "Segments": []}
        assert len(stream_records()) == before


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


# --- Step Functions as AWS runs it (step_functions_as_aws, entered by embedded_aws) ----------------

LAMBDA = "arn:aws:lambda:us-east-1:123456789012:function:phase"
CHECK = {"Variable": "$.hasPassed", "BooleanEquals": True, "Next": "Passed"}
GUARDED_CHOICE = {
    "StartAt": "Guard",
    "States": {
        "Guard": {"Type": "Choice", "Choices": [{"Variable": "$.checked", "IsPresent": True, "Next": "Check"}], "Default": "Unchecked"},
        "Check": {"Type": "Choice", "Choices": [CHECK], "Default": "NotPassed"},
        "Passed": {"Type": "Succeed"},
        "NotPassed": {"Type": "Pass", "Result": "not passed", "End": True},
        "Unchecked": {"Type": "Pass", "Result": "unchecked", "End": True},
    },
}
# The same Choice inside a Parallel whose Catch takes States.ALL.
CAUGHT_CHOICE = {
    "StartAt": "Branch",
    "States": {
        "Branch": {
            "Type": "Parallel",
            "Branches": [{"StartAt": "Check", "States": {k: GUARDED_CHOICE["States"][k] for k in ("Check", "Passed", "NotPassed")}}],
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
            "End": True,
        },
        "Caught": {"Type": "Pass", "Result": "caught", "End": True},
    },
}


def lambda_task(parameters: dict[str, Any], caught: str) -> dict[str, Any]:
    """A Lambda task with `parameters`, retried and caught on `caught`."""
    return {
        "StartAt": "Task",
        "States": {
            "Task": {
                "Type": "Task",
                "Resource": LAMBDA,
                "Parameters": parameters,
                "Retry": [{"ErrorEquals": [caught], "MaxAttempts": 2}],
                "Catch": [{"ErrorEquals": [caught], "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Pass", "Result": "caught", "End": True},
        },
    }


Execution = tuple[str, str | None, str, list[str]]


@pytest.fixture
def executing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """moto executes state machines, a Retry's wait is not slept, and Lambda answers {"ok": true}; yields the
    payloads it was invoked with."""
    import types

    from moto.core.config import default_user_config
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    invoked: list[str] = []

    def invoke(backend: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any) -> bytes:
        invoked.append(str(body))
        return b'{"ok": true}'

    monkeypatch.setitem(default_user_config, "stepfunctions", {"execute_state_machine": True})
    monkeypatch.setitem(default_user_config, "lambda", {"use_docker": False})
    monkeypatch.setattr(retrier_decl, "time", types.SimpleNamespace(sleep=lambda seconds: None))
    monkeypatch.setattr("moto.awslambda_simple.models.LambdaSimpleBackend.invoke", invoke)
    return invoked


def run_to_the_end(definition: dict[str, Any], execution_input: dict[str, Any], *, within: float) -> tuple[Any, str, Execution]:
    """One execution of a new state machine of `definition`, waited for (at most `within` seconds): the client, the
    execution's ARN, and its status, error, cause and the states entered."""
    import json
    import time

    stepfunctions = new_client("stepfunctions")
    arn = stepfunctions.create_state_machine(
        name=f"m{time.monotonic_ns()}", definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/sfn"
    )["stateMachineArn"]
    execution = stepfunctions.start_execution(stateMachineArn=arn, name="e", input=json.dumps(execution_input))["executionArn"]
    deadline = time.monotonic() + within
    while (described := stepfunctions.describe_execution(executionArn=execution))["status"] == "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    history = stepfunctions.get_execution_history(executionArn=execution)["events"]
    entered = [event["stateEnteredEventDetails"]["name"] for event in history if "stateEnteredEventDetails" in event]
    return stepfunctions, execution, (described["status"], described.get("error"), described.get("cause", ""), entered)


def execute(definition: dict[str, Any], execution_input: dict[str, Any]) -> Execution:
    """Status, error, cause and the states entered, of one execution of `definition`."""
    return run_to_the_end(definition, execution_input, within=30)[2]


def on_moto_and_on_the_embedded_cloud(definition: dict[str, Any], execution_input: dict[str, Any]) -> tuple[Execution, Execution]:
    from moto import mock_aws

    from devtools.aws.moto_patches import embedded_aws

    with mock_aws():
        plain = execute(definition, execution_input)
    with embedded_aws():
        embedded = execute(definition, execution_input)
    return plain, embedded


def test_a_choice_on_a_missing_path_fails_with_states_runtime_where_moto_took_the_default(executing: list[str]) -> None:
    # Given a Choice on $.hasPassed, reached (past an IsPresent guard on $.checked) by a state without it
    missing = {"checked": True}
    # When it runs on moto as shipped and on the embedded cloud
    plain, embedded = on_moto_and_on_the_embedded_cloud(GUARDED_CHOICE, missing)
    # Then moto read the rule as false and took the Default (the old behaviour, refused now) ...
    assert plain[:2] == ("SUCCEEDED", None) and plain[3] == ["Guard", "Check", "NotPassed"]
    # ... where the embedded cloud fails the execution in the Choice with States.Runtime, naming the path, as AWS does
    status, error, cause, entered = embedded
    assert (status, error, entered) == ("FAILED", "States.Runtime", ["Guard", "Check"])
    assert "Invalid path '$.hasPassed': The choice state's condition path references an invalid value." in cause
    assert "the state 'Check'" in cause


@pytest.mark.parametrize(
    ("execution_input", "entered"),
    [({}, ["Guard", "Unchecked"]), ({"checked": True, "hasPassed": True}, ["Guard", "Check", "Passed"])],
)
def test_is_present_on_a_missing_path_and_a_rule_on_a_present_one_still_choose(
    executing: list[str], execution_input: dict[str, Any], entered: list[str]
) -> None:
    # Given the guarded Choice and an input it can decide on: IsPresent tests a missing path without failing
    # When it runs on the embedded cloud
    plain, embedded = on_moto_and_on_the_embedded_cloud(GUARDED_CHOICE, execution_input)
    # Then it succeeds on the branch moto takes too
    assert embedded == plain == ("SUCCEEDED", None, "", entered)


def test_a_states_all_catch_around_a_choice_on_a_missing_path_does_not_catch_it(executing: list[str]) -> None:
    # Given the Choice on $.hasPassed inside a Parallel whose Catch takes States.ALL, and an input without it
    # When it runs on moto as shipped and on the embedded cloud
    plain, embedded = on_moto_and_on_the_embedded_cloud(CAUGHT_CHOICE, {})
    # Then moto's branch took the Default and succeeded; the embedded cloud's execution fails with States.Runtime,
    # never entering the catcher's state
    assert plain[:2] == ("SUCCEEDED", None) and plain[3] == ["Branch", "Check", "NotPassed"]
    assert embedded[:2] == ("FAILED", "States.Runtime") and "Caught" not in embedded[3]


@pytest.mark.parametrize("caught", ["States.ALL", "States.Runtime"])
def test_a_lambda_task_parameter_on_a_missing_path_is_states_runtime_neither_retried_nor_caught(executing: list[str], caught: str) -> None:
    # Given a Lambda task whose Parameters read $.hasPassed, retried and caught on `caught` (AWS: States.Runtime
    # "isn't retriable, and will always cause the execution to fail"), and an input without it
    definition = lambda_task({"flag.$": "$.hasPassed"}, caught)
    # When it runs on moto as shipped and on the embedded cloud
    plain, embedded = on_moto_and_on_the_embedded_cloud(definition, {})
    # Then moto called it the function's failure ("Exception"): States.ALL retried it and caught it
    if caught == "States.ALL":
        assert plain[:2] == ("SUCCEEDED", None) and plain[3] == ["Task", "Caught"]
    else:
        assert plain[:2] == ("FAILED", "Exception")
    # and the embedded cloud fails the execution with States.Runtime at once, naming the path; the function never ran
    status, error, cause, entered = embedded
    assert (status, error, entered) == ("FAILED", "States.Runtime", ["Task"])
    assert "The JSONPath '$.hasPassed' could not be found" in cause
    assert executing == []


def test_a_lambda_task_that_fails_is_still_retried_and_caught_on_states_all(executing: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a Lambda task retried twice and caught on States.ALL, and a function that always fails
    invoked: list[str] = []

    def failing(backend: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any) -> bytes:
        invoked.append(str(body))
        response_headers["x-amz-function-error"] = "Unhandled"
        return b'{"errorType": "PhaseCrashed", "errorMessage": "injected"}'

    monkeypatch.setattr("moto.awslambda_simple.models.LambdaSimpleBackend.invoke", failing)
    # When it runs on the embedded cloud
    from devtools.aws.moto_patches import embedded_aws

    with embedded_aws():
        status, error, _, entered = execute(lambda_task({"flag.$": "$.hasPassed"}, "States.ALL"), {"hasPassed": True})
    # Then the function's own error is retried (three attempts) and caught, as on AWS
    assert (status, error, entered) == ("SUCCEEDED", None, ["Task", "Caught"])
    assert len(invoked) == 3


def test_the_embedded_cloud_and_the_local_server_run_state_machines_as_aws() -> None:
    from moto.stepfunctions.parser.asl.component.state.choice.comparison.comparison_variable import ComparisonVariable

    from devtools.aws.moto_patches import embedded_aws
    from devtools.aws.moto_server import serving_state_machines

    # Given moto's own Choice comparison
    unpatched = ComparisonVariable._eval_body
    # When the embedded cloud is entered, and the local server's state machines are set up
    # Then each has the comparison that fails a missing path, and moto's is back afterwards
    with embedded_aws():
        assert ComparisonVariable._eval_body is not unpatched
    with serving_state_machines(port=8410):
        assert ComparisonVariable._eval_body is not unpatched
    assert ComparisonVariable._eval_body is unpatched


def test_step_functions_as_aws_restores_moto_on_exit() -> None:
    from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import ErrorEqualsDecl
    from moto.stepfunctions.parser.asl.component.state.choice.comparison.comparison_variable import ComparisonVariable
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda import StateTaskLambda

    from devtools.aws.moto_patches import step_functions_as_aws

    # Given moto's own Choice comparison, Lambda task failure and error matching (the names the patch replaces)
    originals = (ComparisonVariable._eval_body, StateTaskLambda._from_error, ErrorEqualsDecl._eval_body)
    # When the patch is entered and left
    with step_functions_as_aws():
        assert all(
            patched is not original
            for patched, original in zip(
                (ComparisonVariable._eval_body, StateTaskLambda._from_error, ErrorEqualsDecl._eval_body), originals, strict=True
            )
        )
    # Then moto's are back
    assert (ComparisonVariable._eval_body, StateTaskLambda._from_error, ErrorEqualsDecl._eval_body) == originals


# DynamoDB attribute values of every type, nested: what an item can hold.
_NAMES = st.text(min_size=1, max_size=4)
_NUMBERS = st.one_of(st.integers(-(10**20), 10**20), st.decimals(min_value=-(10**9), max_value=10**9, places=3)).map(str)
_SCALAR_VALUES = st.one_of(
    st.text(max_size=6).map(lambda text: {"S": text}),
    _NUMBERS.map(lambda number: {"N": number}),
    st.booleans().map(lambda flag: {"BOOL": flag}),
    st.just({"NULL": True}),
    st.binary(max_size=4).map(lambda blob: {"B": blob}),
    st.sets(st.text(max_size=4), min_size=1, max_size=3).map(lambda texts: {"SS": sorted(texts)}),
    st.sets(st.integers(-99, 99), min_size=1, max_size=3).map(lambda numbers: {"NS": sorted(map(str, numbers))}),
    st.sets(st.binary(min_size=1, max_size=3), min_size=1, max_size=2).map(lambda blobs: {"BS": sorted(blobs)}),
)
ATTRIBUTE_VALUES = st.recursive(
    _SCALAR_VALUES,
    lambda inner: st.one_of(
        st.dictionaries(_NAMES, inner, max_size=3).map(lambda members: {"M": members}),
        st.lists(inner, max_size=3).map(lambda members: {"L": members}),
    ),
    max_leaves=8,
)


def answers_holding(attributes: dict[str, Any]) -> list[Any]:
    """moto's answers that carry an item holding `attributes`: each read, the writes that return the
    item, and a refused write that returns it in its error (the item is gone again at the end)."""
    dynamodb = new_client("dynamodb")
    key = {"pk": {"S": "item"}}
    item = {**key, **attributes}
    answers: list[Any] = [
        dynamodb.put_item(TableName="Heads", Item=item, ReturnValues="ALL_OLD"),
        dynamodb.get_item(TableName="Heads", Key=key),
        dynamodb.query(TableName="Heads", KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": key["pk"]}),
        dynamodb.scan(TableName="Heads"),
        dynamodb.batch_get_item(RequestItems={"Heads": {"Keys": [key]}}),
        dynamodb.transact_get_items(TransactItems=[{"Get": {"TableName": "Heads", "Key": key}}]),
        dynamodb.update_item(
            TableName="Heads",
            Key=key,
            UpdateExpression="SET #touched = :yes",
            ExpressionAttributeNames={"#touched": "touched"},
            ExpressionAttributeValues={":yes": {"BOOL": True}},
            ReturnValues="ALL_NEW",
        ),
    ]
    with pytest.raises(ClientError) as refused:
        dynamodb.put_item(
            TableName="Heads", Item=item, ConditionExpression="attribute_not_exists(pk)", ReturnValuesOnConditionCheckFailure="ALL_OLD"
        )
    answers.append(refused.value.response)
    answers.append(dynamodb.delete_item(TableName="Heads", Key=key, ReturnValues="ALL_OLD"))
    return constant_volatiles(answers)


@settings(max_examples=25, deadline=None)
@given(attributes=st.dictionaries(_NAMES.filter(lambda name: name not in ("pk", "touched")), ATTRIBUTE_VALUES, min_size=1, max_size=4))
def test_direct_attribute_values_answer_exactly_as_moto_does(attributes: dict[str, Any]) -> None:
    from moto import mock_aws

    # Given an item holding attribute values of every type, nested, answered by moto as shipped
    with mock_aws():
        new_client("dynamodb").create_table(
            TableName="Heads",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        plain = answers_holding(attributes)
        # When the same requests are answered with the values written directly
        with direct_attribute_values():
            direct = answers_holding(attributes)
    # Then every answer is the same, binary values included (which moto still writes)
    assert direct == plain


def test_direct_attribute_values_skip_moto_s_walk_for_plain_values_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws
    from moto.core.serialize import BaseJSONSerializer

    walked: list[Any] = []
    moto_s_walk = BaseJSONSerializer.__dict__["_serialize_type_structure"]

    def counted(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if shape.name == "AttributeValue":
            walked.append(value)
        moto_s_walk(self, serialized, value, shape, key)

    monkeypatch.setattr(BaseJSONSerializer, "_serialize_type_structure", counted)
    plain_item = {"pk": {"S": "plain"}, "n": {"N": "1"}, "nested": {"M": {"list": {"L": [{"SS": ["a"]}, {"NULL": True}]}}}}
    binary_item = {"pk": {"S": "binary"}, "blob": {"B": b"\x00"}}
    with mock_aws(), direct_attribute_values():
        dynamodb = new_client("dynamodb")
        create_tables(dynamodb)
        for item in (plain_item, binary_item):
            dynamodb.put_item(TableName="Heads", Item=item)
        # Given an item of strings, numbers, sets, lists and maps, When it is read
        walked.clear()
        assert dynamodb.get_item(TableName="Heads", Key={"pk": plain_item["pk"]})["Item"] == plain_item
        # Then moto's member-by-member walk never ran for its values
        assert walked == []
        # And an item holding a binary value still has that value walked by moto, and read back as stored
        assert dynamodb.get_item(TableName="Heads", Key={"pk": binary_item["pk"]})["Item"] == binary_item
        assert {"B": b"\x00"} in walked
    # and moto's serializer is back once the patch is left
    assert BaseJSONSerializer.__dict__["_serialize_type_structure"] is counted


# moto's limit on an item's size (its attributes' names and values, as moto counts them), in bytes.
MOTO_ITEM_LIMIT = 405_000


def built_item(attributes: dict[str, Any]) -> Any:
    """What moto's Item makes of these attributes: its key and attributes in order, or "refused" (too large)."""
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    try:
        item = Item(DynamoType({"S": "key"}), None, attributes)
    except ItemSizeTooLarge:
        return "refused"
    return item.hash_key, item.range_key, [(name, value.to_json()) for name, value in item.attrs.items()], type(item.attrs)


_LARGE_STRINGS = st.integers(0, MOTO_ITEM_LIMIT // 2).map(lambda size: {"S": "x" * size})


@settings(max_examples=40, deadline=None)
@given(attributes=st.dictionaries(_NAMES, st.one_of(ATTRIBUTE_VALUES, _LARGE_STRINGS), min_size=1, max_size=5))
@example(attributes={"ab": {"S": "x" * (MOTO_ITEM_LIMIT - 2)}})  # at the limit: built
@example(attributes={"ab": {"S": "x" * (MOTO_ITEM_LIMIT - 1)}})  # one byte over: refused
@example(attributes={"a": {"S": "x" * (MOTO_ITEM_LIMIT - 3)}, "b": {"NULL": True}})  # the last attribute tips it over
@example(attributes={"a": {"S": "x" * MOTO_ITEM_LIMIT}, "b": {"S": ""}})  # an earlier one is over on its own
def test_linear_item_size_builds_and_refuses_items_exactly_as_moto_does(attributes: dict[str, Any]) -> None:
    # Given attributes of every type, small and large, around moto's limit
    shipped = built_item(attributes)
    # When moto builds the item with one size check instead of one per attribute
    with linear_item_size():
        checked_once = built_item(attributes)
    # Then the item is the same, attributes in the same order, or refused as moto refuses it
    assert checked_once == shipped
    # and which it is follows the item's size alone
    assert (shipped == "refused") == (item_size(attributes) > MOTO_ITEM_LIMIT)


def item_size(attributes: dict[str, Any]) -> int:
    """An item's size as moto counts it: each attribute's name in UTF-8 and its value's size."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    return sum(len(name.encode("utf-8")) + int(DynamoType(value).size()) for name, value in attributes.items())


def test_linear_item_size_answers_a_put_over_the_limit_as_moto_does() -> None:
    from moto import mock_aws

    # Given an item one byte over moto's limit and one at it, put through the API
    over = {"pk": {"S": "over"}, "v": {"S": "x" * (MOTO_ITEM_LIMIT - len("pkover" + "v") + 1)}}
    at = {"pk": {"S": "at"}, "v": {"S": "x" * (MOTO_ITEM_LIMIT - len("pkat" + "v"))}}
    assert (item_size(over), item_size(at)) == (MOTO_ITEM_LIMIT + 1, MOTO_ITEM_LIMIT)

    def answers() -> list[Any]:
        results: list[Any] = []
        with mock_aws():
            dynamodb = new_client("dynamodb")
            create_tables(dynamodb)
            for item in (over, at):
                try:
                    dynamodb.put_item(TableName="Heads", Item=item)
                    results.append(dynamodb.get_item(TableName="Heads", Key={"pk": item["pk"]}, ConsistentRead=True)["Item"] == item)
                except ClientError as err:
                    results.append(err.response["Error"])
        return results

    shipped = answers()
    with linear_item_size():
        checked_once = answers()
    # Then both answers are moto's: the item over the limit refused with moto's error, the one at it stored
    assert checked_once == shipped
    assert shipped[0]["Code"] == "ValidationException" and shipped[1] is True


# Every service the stacks' functions, the worlds and the local server call.
ROUTED_SERVICES = ("dynamodb", "dynamodbstreams", "s3", "sqs", "kinesis", "lambda", "stepfunctions", "secretsmanager", "sts", "kms")


def moto_s_url_patterns() -> dict[str, dict[str, Any]]:
    """Each service's URL patterns and their handlers, from the backend moto's router asks (a global
    service's, or the region's)."""
    import moto.backends as backends
    from moto.core import DEFAULT_ACCOUNT_ID

    patterns = {}
    for service in ROUTED_SERVICES:
        regions = backends.get_backend(service)[DEFAULT_ACCOUNT_ID]  # type: ignore[call-overload]
        patterns[service] = dict(regions["us-east-1" if "us-east-1" in regions else "aws"].urls)
    return patterns


def test_cached_backend_urls_route_as_moto_does_for_each_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws
    from moto.core.base_backend import BaseBackend

    monkeypatch.setattr(moto_patches, "_BACKEND_URLS", {})
    original = BaseBackend.__dict__["urls"]
    with mock_aws():
        # Given each service's URL patterns as moto builds them, by default and with a custom S3 endpoint
        plain = moto_s_url_patterns()
        monkeypatch.setenv("MOTO_S3_CUSTOM_ENDPOINTS", "http://objects.example:9000")
        plain_custom = moto_s_url_patterns()
        monkeypatch.delenv("MOTO_S3_CUSTOM_ENDPOINTS")
        assert plain_custom["s3"] != plain["s3"]
        # When they are asked for with the patterns cached, twice (the second time from the cache)
        with cached_backend_urls():
            cached = [moto_s_url_patterns(), moto_s_url_patterns()]
            monkeypatch.setenv("MOTO_S3_CUSTOM_ENDPOINTS", "http://objects.example:9000")
            cached_custom = moto_s_url_patterns()
            monkeypatch.delenv("MOTO_S3_CUSTOM_ENDPOINTS")
    # Then they are moto's, under either setting, and moto's property is back
    assert cached == [plain, plain]
    assert cached_custom == plain_custom
    assert BaseBackend.__dict__["urls"] is original


def test_cached_backend_urls_answer_exactly_as_moto_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws

    # Given moto's answers to varied requests of four services
    with mock_aws():
        plain = varied_answers()
    # When the same requests are routed with the URL patterns cached
    monkeypatch.setattr(moto_patches, "_BACKEND_URLS", {})
    with mock_aws(), cached_backend_urls():
        cached = varied_answers()
    # Then every answer is the same
    assert cached == plain


# --- A Distributed Map as AWS runs it (strict_distributed_map, entered by embedded_aws) ------------

CHUNK_FAILED = {"Type": "Fail", "Error": "ChunkFailed", "Cause": "injected"}
# Each item is a child that fails (ChunkFailed) when the item says so, and succeeds otherwise.
CHILD = {
    "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
    "StartAt": "Check",
    "States": {
        "Check": {"Type": "Choice", "Choices": [{"Variable": "$.fail", "BooleanEquals": True, "Next": "Broken"}], "Default": "Done"},
        "Broken": CHUNK_FAILED,
        "Done": {"Type": "Succeed"},
    },
}
THRESHOLD = "States.ExceedToleratedFailureThreshold"


# A child of one state, for a Map whose cost is its machinery.
SUCCEEDING_CHILD = {"ProcessorConfig": CHILD["ProcessorConfig"], "StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}


def distributed_map(
    tolerance: dict[str, Any], *, max_concurrency: int = 4, caught: bool = False, child: dict[str, Any] = CHILD
) -> dict[str, Any]:
    """A Distributed Map over $.items of `child`s with `tolerance` (its ToleratedFailure* fields), its run's
    threshold failure caught by a Pass state when `caught`."""
    chunks: dict[str, Any] = {
        "Type": "Map",
        "ItemsPath": "$.items",
        "ItemProcessor": child,
        "Label": "chunks",
        "MaxConcurrency": max_concurrency,
        "ResultPath": None,
        **tolerance,
        "End": True,
    }
    states: dict[str, Any] = {"Chunks": chunks}
    if caught:
        chunks["Catch"] = [{"ErrorEquals": [THRESHOLD], "ResultPath": "$.error", "Next": "Caught"}]
        states["Caught"] = {"Type": "Pass", "End": True}
    return {"StartAt": "Chunks", "States": states}


def items(count: int, failing: range | tuple[int, ...]) -> dict[str, Any]:
    return {"items": [{"index": index, "fail": index in failing} for index in range(count)]}


MapRun = tuple[str, str | None, str, list[str], dict[str, Any]]


def run_map(definition: dict[str, Any], execution_input: dict[str, Any]) -> MapRun:
    """Status, error, cause, the states entered and DescribeMapRun's answer, of one execution of `definition`."""
    stepfunctions, execution, (status, error, cause, entered) = run_to_the_end(definition, execution_input, within=60)
    (map_run,) = stepfunctions.list_map_runs(executionArn=execution)["mapRuns"]
    return status, error, cause, entered, stepfunctions.describe_map_run(mapRunArn=map_run["mapRunArn"])


@pytest.fixture
def mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto executes state machines (the parser's log of every failure a Catch takes is silenced)."""
    import logging

    from moto.core.config import default_user_config

    monkeypatch.setitem(default_user_config, "stepfunctions", {"execute_state_machine": True})
    parser_log = logging.getLogger("moto.stepfunctions.parser")
    monkeypatch.setattr(parser_log, "level", logging.CRITICAL)


@pytest.mark.parametrize(
    ("tolerance", "failing", "status"),
    [
        # neither declared: any failure fails the run
        ({}, (), "SUCCEEDED"),
        ({}, (7,), "FAILED"),
        # a count: more failures than it fail the run
        ({"ToleratedFailureCount": 2}, (3, 11), "SUCCEEDED"),
        ({"ToleratedFailureCount": 2}, (3, 11, 19), "FAILED"),
        # a percentage of all 20 items: 2 is 10 %, 3 is over it; integral as CDK renders it, or with a fraction
        ({"ToleratedFailurePercentage": 10}, (3, 11), "SUCCEEDED"),
        ({"ToleratedFailurePercentage": 10}, (3, 11, 19), "FAILED"),
        ({"ToleratedFailurePercentage": 10.0}, (3, 11, 19), "FAILED"),
        ({"ToleratedFailurePercentage": 100}, range(20), "SUCCEEDED"),
        # both: either exceeded fails the run
        ({"ToleratedFailureCount": 5, "ToleratedFailurePercentage": 10}, (3, 11, 19), "FAILED"),
        ({"ToleratedFailureCount": 2, "ToleratedFailurePercentage": 50}, (3, 11, 19), "FAILED"),
    ],
)
def test_a_distributed_map_fails_past_its_tolerated_failures_as_aws_does(
    mapping: None, tolerance: dict[str, Any], failing: range | tuple[int, ...], status: str
) -> None:
    from devtools.aws.moto_patches import THRESHOLD_EXCEEDED_CAUSE, embedded_aws

    # Given a Distributed Map of 20 items, `failing` of whose children fail, with `tolerance`
    # When it runs on the embedded cloud
    with embedded_aws():
        ended, error, cause, entered, map_run = run_map(distributed_map(tolerance), items(20, failing))
    # Then it ends as on AWS: past the threshold, the Map Run and the execution fail with States.ExceedToleratedFailureThreshold
    assert entered == ["Chunks"]
    assert (ended, map_run["status"]) == (status, status)
    counts, executions = map_run["itemCounts"], map_run["executionCounts"]
    if status == "SUCCEEDED":
        assert error is None
        assert (counts["total"], counts["succeeded"], counts["failed"], counts["pending"]) == (20, 20 - len(failing), len(failing), 0)
    else:
        assert (error, cause) == (THRESHOLD, THRESHOLD_EXCEEDED_CAUSE)
        # (items not started once the threshold was passed stay pending)
        assert counts["total"] == counts["succeeded"] + counts["failed"] + counts["pending"] == 20
        assert 0 < counts["failed"] <= len(failing)
    # and no child is counted as still running, each failed child is a failed execution
    assert counts["running"] == executions["running"] == 0
    assert executions["failed"] == counts["failed"]


def test_a_catch_takes_a_distributed_map_past_its_threshold_and_no_item_starts_after_it(mapping: None) -> None:
    from devtools.aws.moto_patches import embedded_aws

    # Given a Distributed Map of 20 items, one at a time, tolerating 2 failures, whose first 3 children fail,
    # and a Catch of States.ExceedToleratedFailureThreshold
    definition = distributed_map({"ToleratedFailureCount": 2}, max_concurrency=1, caught=True)
    # When it runs on the embedded cloud
    with embedded_aws():
        ended, error, _, entered, map_run = run_map(definition, items(20, (0, 1, 2)))
    # Then the Map Run failed at the third failure, the catcher took it and the execution succeeded
    assert (ended, error, entered, map_run["status"]) == ("SUCCEEDED", None, ["Chunks", "Caught"], "FAILED")
    # and the 17 items after it never started (AWS starts no child once the run has failed)
    counts = map_run["itemCounts"]
    assert (counts["total"], counts["failed"], counts["succeeded"], counts["pending"], counts["running"]) == (20, 3, 0, 17, 0)


def test_moto_as_shipped_ignores_the_tolerated_failures_and_refuses_an_integral_percentage(mapping: None) -> None:
    from moto import mock_aws

    # Given a Distributed Map tolerating 2 failures, 3 of whose 20 children fail
    with mock_aws():
        # When it runs on moto as shipped
        ended, error, _, _, map_run = run_map(distributed_map({"ToleratedFailureCount": 2}), items(20, (3, 11, 19)))
        # Then the Map Run and the execution succeeded (AWS fails them), and failed children are counted as running
        assert (ended, error, map_run["status"]) == ("SUCCEEDED", None, "SUCCEEDED")
        assert map_run["executionCounts"]["running"] == 3
        # and an integral ToleratedFailurePercentage, as CDK renders it, is not a definition moto takes
        with pytest.raises(ClientError, match="""no viable alternative at input '"ToleratedFailurePercentage":10'"""):
            run_map(distributed_map({"ToleratedFailurePercentage": 10}), items(20, ()))


def test_one_worker_runs_a_thousand_items(mapping: None) -> None:
    from devtools.aws.moto_patches import embedded_aws

    # Given a Distributed Map of 1,000 items run one at a time (moto's worker recursed once per item and died at
    # about 990, leaving the execution running forever)
    # When it runs on the embedded cloud
    with embedded_aws():
        ended, _, _, _, map_run = run_map(distributed_map({}, max_concurrency=1, child=SUCCEEDING_CHILD), {"items": list(range(1000))})
    # Then every item ran and the execution succeeded
    assert ended == "SUCCEEDED"
    assert (map_run["itemCounts"]["succeeded"], map_run["itemCounts"]["total"], map_run["itemCounts"]["pending"]) == (1000, 1000, 0)


def test_strict_distributed_map_and_cached_clients_restore_moto_on_exit() -> None:
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor.distributed_item_processor import (
        DistributedItemProcessor,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor.distributed_item_processor_worker import (
        DistributedItemProcessorWorker,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.state_map import StateMap

    from devtools.aws.moto_patches import _CLIENT_USERS, cached_step_functions_clients, strict_distributed_map
    from devtools.aws.moto_server import serving_state_machines

    parser: Any = importlib.import_module("moto.stepfunctions.parser.asl.parse.asl_parser").AmazonStateLanguageParser
    users = [importlib.import_module(module) for module in _CLIENT_USERS]

    def moto_s() -> tuple[Any, ...]:
        return (
            parser.__dict__["parse"],
            StateMap.from_state_props,
            DistributedItemProcessor.__dict__.get("_map_run"),
            DistributedItemProcessorWorker._eval_job,
            DistributedItemProcessorWorker._eval_pool,
            *(user.boto_client_for for user in users),
        )

    # Given moto's own names (the parser, the Map's props, run, worker and the executor's client builders)
    originals = moto_s()
    # When the patches are entered, alone and as the local server enters them
    # Then each name is replaced while they are on, and moto's are back afterwards
    for patches in (strict_distributed_map, cached_step_functions_clients, lambda: serving_state_machines(port=8410)):
        with patches():
            patched = moto_s()
        assert moto_s() == originals
        assert any(now is not before for now, before in zip(patched, originals, strict=True))
    with strict_distributed_map(), cached_step_functions_clients():
        assert all(now is not before for now, before in zip(moto_s(), originals, strict=True))
    assert moto_s() == originals


def test_cached_clients_answer_lambda_tasks_as_moto_s_and_are_built_once(executing: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from moto import mock_aws

    from devtools.aws.moto_patches import cached_step_functions_clients

    boto_client: Any = importlib.import_module("moto.stepfunctions.parser.asl.utils.boto_client")
    build = boto_client.boto_client_for
    built: list[str] = []
    monkeypatch.setattr(
        boto_client,
        "boto_client_for",
        lambda region, service, state_credentials=None: built.append(service) or build(region, service, state_credentials),
    )
    monkeypatch.setattr(moto_patches, "_STEP_FUNCTIONS_CLIENTS", {})  # what earlier tests in this process built
    definition = lambda_task({"flag.$": "$.hasPassed"}, "States.ALL")
    # Given a Lambda task's execution on moto as shipped
    with mock_aws():
        plain = [execute(definition, {"hasPassed": value}) for value in (True, False)]
    # When the same executions run with the cached clients
    with mock_aws(), cached_step_functions_clients():
        cached = [execute(definition, {"hasPassed": value}) for value in (True, False)]
        # and 8 threads ask for the same client at once
        lambda_eval_utils: Any = importlib.import_module("moto.stepfunctions.parser.asl.component.state.exec.state_task.lambda_eval_utils")
        shared: list[Any] = []
        threads = [
            threading.Thread(target=lambda: shared.append(lambda_eval_utils.boto_client_for("us-east-1", "lambda"))) for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    # Then they end as moto's did, with the same payloads sent, and one Lambda client was built for all of them
    assert cached == plain
    assert executing[:2] == executing[2:]
    assert built == ["lambda"]
    assert len({id(client) for client in shared}) == 1
