"""CapacityMeter bills moto-served DynamoDB calls the way on-demand DynamoDB would."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3  # type: ignore[import-untyped, unused-ignore]
import pytest

from devtools.aws.capacity import CapacityMeter, attribute_size, item_size
from devtools.aws.moto_patches import embedded_aws

TABLE = "meter-test"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")


@pytest.fixture
def client(aws_env: None) -> Iterator[Any]:
    with embedded_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        )
        yield ddb


def _small(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "n": {"N": "1"}}


def test_item_size_follows_dynamodb_rules() -> None:
    # Given values of every kind
    # When sized / Then each follows the documented rule
    assert attribute_size({"S": "héllo"}) == 6
    assert attribute_size({"N": "12345"}) == 4  # 5 significant digits -> 3 + 1
    assert attribute_size({"N": "-0.00120"}) == 2  # "12" -> 1 + 1
    assert attribute_size({"B": b"\x00\x01\x02"}) == 3
    assert attribute_size({"BOOL": True}) == 1 and attribute_size({"NULL": True}) == 1
    assert attribute_size({"SS": ["ab", "c"]}) == 3
    assert attribute_size({"L": [{"S": "ab"}, {"BOOL": False}]}) == 3 + (1 + 2) + (1 + 1)
    assert attribute_size({"M": {"k": {"S": "v"}}}) == 3 + 1 + 1 + 1
    assert item_size({"pk": {"S": "abc"}, "n": {"N": "7"}}) == (2 + 3) + (1 + 2)
    assert item_size(None) == 0


def test_meter_bills_writes_reads_and_failures(client: Any) -> None:
    # Given a meter attached to the client (twice, which must not double count)
    meter = CapacityMeter()
    meter.attach(client)
    meter.attach(client)
    big = {"pk": {"S": "big"}, "blob": {"S": "x" * 1500}}
    assert 1024 < item_size(big) <= 2048

    # When a ~1.5 KB item is put / Then 2 WRU
    client.put_item(TableName=TABLE, Item=big)
    assert meter.wru == 2

    # When a conditional put of a small item fails on the existing 1.5 KB item
    with pytest.raises(client.exceptions.ClientError) as failure:
        client.put_item(
            TableName=TABLE,
            Item={"pk": {"S": "big"}},
            ConditionExpression="attribute_not_exists(pk)",
        )
    # Then it is still billed, by the existing item's size, and nothing changed
    assert failure.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert meter.wru == 4
    assert client.get_item(TableName=TABLE, Key={"pk": {"S": "big"}})["Item"] == big
    meter.reset()
    assert (meter.wru, meter.rru, sum(meter.calls.values())) == (0, 0, 0)

    # When the item is read strongly, then eventually consistent
    client.get_item(TableName=TABLE, Key={"pk": {"S": "big"}}, ConsistentRead=True)
    # Then 1 RRU, then half a unit more
    assert meter.rru == 1
    client.get_item(TableName=TABLE, Key={"pk": {"S": "big"}})
    assert meter.rru == 1.5

    # When two small items are written in one transaction / Then 2 x 1 WRU each
    client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": TABLE, "Item": _small("a")}},
            {"Put": {"TableName": TABLE, "Item": _small("b")}},
        ]
    )
    assert meter.wru == 4

    # When three keys are batch-read consistently / Then 1 RRU per key
    client.batch_get_item(RequestItems={TABLE: {"Keys": [{"pk": {"S": k}} for k in ("a", "b", "big")], "ConsistentRead": True}})
    assert meter.rru == 1.5 + 3

    # Then every call was counted by operation
    assert meter.calls == {"GetItem": 2, "TransactWriteItems": 1, "BatchGetItem": 1}


def test_meter_bills_cancelled_transactions_updates_deletes_and_queries(client: Any) -> None:
    # Given an existing ~1.5 KB item and a metered client
    client.put_item(TableName=TABLE, Item={"pk": {"S": "big"}, "blob": {"S": "x" * 1500}})
    meter = CapacityMeter()
    meter.attach(client)

    # When a transaction is cancelled by a failed condition check on the big item
    with pytest.raises(client.exceptions.ClientError) as failure:
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": TABLE, "Item": _small("c")}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": {"pk": {"S": "big"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )
    # Then both items are billed double (1 KB put + 2 KB check) and nothing was written
    assert failure.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert meter.wru == 2 * 1 + 2 * 2
    assert "Item" not in client.get_item(TableName=TABLE, Key={"pk": {"S": "c"}})
    meter.reset()

    # When the big item shrinks by update, then is deleted
    client.update_item(
        TableName=TABLE,
        Key={"pk": {"S": "big"}},
        UpdateExpression="REMOVE #b",
        ExpressionAttributeNames={"#b": "blob"},
    )
    # Then the update costs the larger (before) size, the delete of the small rest 1 WRU
    assert meter.wru == 2
    client.delete_item(TableName=TABLE, Key={"pk": {"S": "big"}})
    assert meter.wru == 3

    # When a filtered, eventually consistent scan evaluates 5 KB across 5 items
    for i in range(5):
        client.put_item(TableName=TABLE, Item={"pk": {"S": f"s{i}"}, "blob": {"S": "y" * 1000}})
    meter.reset()
    page = client.scan(
        TableName=TABLE,
        FilterExpression="pk = :none",
        ExpressionAttributeValues={":none": {"S": "nothing"}},
    )
    # Then none is returned but all evaluated bytes count: ceil(~5 KB / 4 KB) / 2 = 1
    assert page["Count"] == 0 and page["ScannedCount"] == 5
    assert meter.rru == 1
    assert meter.wru == 0


def test_a_pool_of_writers_is_metered_whole_and_never_breaks_a_transaction(client: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    # Given a table with a sort key (a look-up of a missing partition adds an entry to moto's table)
    client.create_table(
        TableName="runs",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "user", "KeyType": "HASH"}, {"AttributeName": "run", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "user", "AttributeType": "S"}, {"AttributeName": "run", "AttributeType": "N"}],
    )
    meter = CapacityMeter()
    meter.attach(client)

    def write(worker: int) -> None:
        for n in range(30):
            item = {"user": {"S": f"{worker}-{n}"}, "run": {"N": "1"}}
            put = {"TableName": "runs", "Item": item, "ConditionExpression": "attribute_not_exists(#u)"}
            client.transact_write_items(TransactItems=[{"Put": {**put, "ExpressionAttributeNames": {"#u": "user"}}}])

    # When eight threads each write 30 new items in transactions (moto copies the table for each),
    # the meter sizing every item before and after (a failed transaction re-raises here)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(write, range(8)))
    # Then every transaction went through, and each is billed 2 WRU (a transactional write of a small item)
    assert meter.calls["TransactWriteItems"] == 8 * 30
    assert meter.wru == 2 * 8 * 30
    assert client.scan(TableName="runs", Select="COUNT")["Count"] == 8 * 30


def test_meter_splits_the_units_by_table(client: Any) -> None:
    # Given a second table and a metered client
    other = "meter-test-other"
    client.create_table(
        TableName=other,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )
    meter = CapacityMeter()
    meter.attach(client)

    # When a ~1.5 KB item goes to one table and a small one to the other, a batch write puts one
    # more small item in each, and one batch read reads a key of each strongly
    client.put_item(TableName=TABLE, Item={"pk": {"S": "big"}, "blob": {"S": "x" * 1500}})
    client.put_item(TableName=other, Item=_small("a"))
    client.batch_write_item(RequestItems={TABLE: [{"PutRequest": {"Item": _small("b")}}], other: [{"PutRequest": {"Item": _small("c")}}]})
    client.batch_get_item(
        RequestItems={TABLE: {"Keys": [{"pk": {"S": "big"}}], "ConsistentRead": True}, other: {"Keys": [{"pk": {"S": "a"}}]}}
    )
    client.query(TableName=other, KeyConditionExpression="pk = :a", ExpressionAttributeValues={":a": {"S": "a"}}, ConsistentRead=True)

    # Then each table carries its own units, and they add up to the totals
    assert meter.wru_by_table == {TABLE: 2 + 1, other: 1 + 1}
    assert meter.rru_by_table == {TABLE: 1, other: 0.5 + 1}
    assert sum(meter.wru_by_table.values()) == meter.wru
    assert sum(meter.rru_by_table.values()) == meter.rru
    # and a reset clears them too
    meter.reset()
    assert (meter.wru_by_table, meter.rru_by_table) == ({}, {})
