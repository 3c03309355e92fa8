"""The seed port ends with exactly what the reference seed model predicts, with or without
Powertools idempotency, and costs what its algorithm implies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3  # type: ignore[import-untyped, unused-ignore]
import pytest

from benchmarks.seed_baseline import (
    SeedTables,
    compare_with_reference,
    create_idempotency_table,
    create_seed_tables,
    idempotent_seed_handler_factory,
    seed_handler,
)
from devtools.aws.capacity import CapacityMeter
from devtools.aws.moto_patches import embedded_aws
from devtools.reference import SeedOutcome, seed_pass
from devtools.workload import Workload, generate, kinesis_events

IDEMPOTENCY_TABLE = "seed-idempotency"


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    with embedded_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def workload() -> Workload:
    # Late and malformed rates are raised so a 100-message workload surely exercises both.
    return generate(seed=21, users=5, runs_per_user=2, messages_per_run=10, late_rate=0.10, malformed=7)


def _assert_tables_match(client: Any, tables: SeedTables, expected: SeedOutcome, workload: Workload) -> None:
    assert compare_with_reference(client, tables, expected) == []
    # And each archived message carries the payload of the message it archives
    by_id = {(m.user_id, m.run_id, m.sequence_id): m for m in workload.unique}
    for page in client.get_paginator("scan").paginate(TableName=tables.messages):
        for item in page["Items"]:
            user_id, run_id = (int(part) for part in item["run_key"]["S"].split("#"))
            message = by_id[(user_id, run_id, int(item["sequence_id"]["N"]))]
            assert (int(item["timestamp_utc"]["N"]), int(item["distance_meters"]["N"])) == (message.timestamp_utc, message.distance_meters)


def test_seed_handler_ends_as_the_reference_predicts(client: Any, workload: Workload) -> None:
    # Given the seed tables, a meter, and what the reference seed model predicts
    tables = create_seed_tables(client)
    meter = CapacityMeter()
    meter.attach(client)
    expected = seed_pass(workload.deliveries)
    assert expected.lost_meters > 0  # late messages overtaken: the flaw under measurement
    valid = sum(d.kind != "malformed" for d in workload.deliveries)

    # When the stream is consumed in batches of 100
    for event in kinesis_events(workload.deliveries, 100):
        seed_handler(event, client, tables)

    # Then cost: one eventually consistent read (half an RRU) per valid delivery, four small puts
    # per applied message
    assert meter.calls == {"GetItem": valid, "PutItem": 4 * len(expected.archived)}
    assert meter.rru == valid / 2
    assert meter.wru == 4 * len(expected.archived)
    # Then the tables hold exactly the reference outcome
    _assert_tables_match(client, tables, expected, workload)


def test_idempotent_variant_ends_with_the_same_tables_and_absorbs_replays(client: Any, workload: Workload) -> None:
    # Given the seed tables, an idempotency table and the Powertools-wrapped handler
    tables = create_seed_tables(client, prefix="idem")
    create_idempotency_table(client, IDEMPOTENCY_TABLE)
    handler = idempotent_seed_handler_factory(client, tables, IDEMPOTENCY_TABLE)
    expected = seed_pass(workload.deliveries)
    valid = sum(d.kind != "malformed" for d in workload.deliveries)

    # When the stream is consumed in batches of 100
    for event in kinesis_events(workload.deliveries, 100):
        handler(event)

    # Then the seed tables are identical to the plain seed's outcome
    _assert_tables_match(client, tables, expected, workload)
    # Then one COMPLETED idempotency record exists per distinct message
    records = client.scan(TableName=IDEMPOTENCY_TABLE)["Items"]
    assert len(records) == len(workload.unique)
    assert {r["status"]["S"] for r in records} == {"COMPLETED"}

    # When the whole stream is replayed, metered
    meter = CapacityMeter()
    meter.attach(client)
    for event in kinesis_events(workload.deliveries, 100):
        handler(event)

    # Then every valid delivery stops at a failed conditional put (1 WRU), and nothing changes
    assert meter.calls == {"PutItem": valid}
    assert meter.wru == valid and meter.rru == 0
    _assert_tables_match(client, tables, expected, workload)
