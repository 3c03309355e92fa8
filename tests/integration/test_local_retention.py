"""What keeps a long-running `make serve` from growing without limit: the embedded streams keep only
the last records already delivered (moto keeps every record; AWS keeps them 24 hours), and the
embedded Step Functions the last closed executions (moto keeps all; AWS 90 days). Outside
tests/integration/local: these tests start and end their own moto, which would reset the running
local stack's (tests/integration/local/test_local_http_api.py checks its transactions)."""

from __future__ import annotations

import json
import time
from typing import Any
from unittest import mock

import boto3
import pytest

from devtools.aws.esm import EventSourceMapping, KinesisShard
from devtools.aws.moto_patches import embedded_aws
from devtools.aws.table_stream import TableStream
from devtools.local.cloud import REGION, trim_executions, trim_kinesis_shard

KEEP = 10


def stream_items(table: str) -> list[Any]:
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    shard = dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION].get_table(table).stream_shard
    assert shard is not None
    return list(shard.items)


@pytest.mark.usefixtures("moto_aws")
def test_a_table_stream_read_and_trimmed_keeps_at_most_the_last_records_and_misses_none() -> None:
    # Given a table with a stream, read the way the local server reads the log table's
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    dynamodb.create_table(
        TableName="streamed",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )
    arn = dynamodb.describe_table(TableName="streamed")["Table"]["LatestStreamArn"]
    stream = TableStream("streamed", arn)
    read: list[int] = []
    # When 500 items are written in rounds of 50, each round read and then trimmed to the last 10 read
    for round_number in range(10):
        for index in range(50):
            dynamodb.put_item(TableName="streamed", Item={"pk": {"S": f"{round_number}-{index}"}})
        read.extend(int(record.sequence_number) for record in stream.poll())
        stream.trim(KEEP)
        # Then the shard never holds more than the 10 kept
        assert len(stream_items("streamed")) == KEEP
    # and every record was read once, in order, with sequence numbers going on across the trims
    assert len(read) == 500 and read == sorted(set(read))


@pytest.mark.usefixtures("moto_aws")
def test_a_kinesis_shard_trimmed_behind_the_checkpoint_keeps_at_most_the_last_records_and_misses_none() -> None:
    # Given a Kinesis stream drained by an event source mapping, as the local server's runner-stats one
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.kinesis.models import kinesis_backends

    kinesis = boto3.client("kinesis", region_name=REGION)
    kinesis.create_stream(StreamName="runs", ShardCount=1)
    shard_id = kinesis.list_shards(StreamName="runs")["Shards"][0]["ShardId"]
    delivered: list[str] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        delivered.extend(record["kinesis"]["data"] for record in event["Records"])
        return {"batchItemFailures": []}

    mapping = EventSourceMapping(invoke, batch_size=25)
    checkpoint: str | None = None
    # When 400 records are put in rounds of 40, each round drained and the shard trimmed to the last 10 delivered
    for round_number in range(10):
        kinesis.put_records(
            StreamName="runs", Records=[{"Data": f"{round_number}-{index}".encode(), "PartitionKey": "p"} for index in range(40)]
        )
        checkpoint = mapping.drain(KinesisShard(kinesis, "runs", shard_id), checkpoint)
        trim_kinesis_shard("runs", shard_id, checkpoint, KEEP)
        # Then the shard holds only the 10 kept
        assert len(kinesis_backends[DEFAULT_ACCOUNT_ID][REGION].streams["runs"].shards[shard_id].records) == KEEP
    # and each record was delivered exactly once
    assert len(delivered) == 400 and len(set(delivered)) == 400


def test_the_embedded_step_functions_keeps_at_most_the_last_closed_executions() -> None:
    # Given moto running state machines (as the local server's does), and 30 executions of one that has finished
    from moto.core.config import default_user_config

    with mock.patch.dict(default_user_config, {"stepfunctions": {"execute_state_machine": True}}), embedded_aws():
        stepfunctions = boto3.client("stepfunctions", region_name=REGION)
        definition = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}})
        arn = stepfunctions.create_state_machine(name="kept", definition=definition, roleArn="arn:aws:iam::123456789012:role/sfn")[
            "stateMachineArn"
        ]
        names = [f"run-{index:02d}" for index in range(30)]
        for name in names:
            stepfunctions.start_execution(stateMachineArn=arn, name=name, input="{}")
        deadline = time.monotonic() + 60
        while any(e["status"] == "RUNNING" for e in stepfunctions.list_executions(stateMachineArn=arn)["executions"]):
            assert time.monotonic() < deadline, "the executions did not finish"
            time.sleep(0.1)
        # When they are trimmed to the last 10 closed, twice
        dropped = trim_executions(KEEP)
        again = trim_executions(KEEP)
        # Then 20 went, and the newest 10 are still described and listed
        assert (dropped, again) == (20, 0)
        listed = sorted(e["name"] for e in stepfunctions.list_executions(stateMachineArn=arn)["executions"])
        assert listed == names[-KEEP:]
