"""The seed port ends with exactly what the reference seed model predicts, with or without
Powertools idempotency, and costs what its algorithm implies."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import boto3  # type: ignore[import-untyped, unused-ignore]
import pytest
from moto import mock_aws

from benchmarks.seed_baseline import (
    SeedTables,
    create_idempotency_table,
    create_seed_tables,
    idempotent_seed_handler_factory,
    seed_handler,
)
from devtools.capacity import CapacityMeter
from devtools.reference import SeedOutcome, seed_pass
from devtools.workload import Workload, generate, kinesis_events

IDEMPOTENCY_TABLE = "seed-idempotency"


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def workload() -> Workload:
    # Late and malformed rates are raised so a 100-message workload surely exercises both.
    return generate(seed=21, users=5, runs_per_user=2, messages_per_run=10, late_rate=0.10, malformed=7)


def _scan(client: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        items.extend(page["Items"])
    return items


def _n(item: dict[str, Any], name: str) -> int:
    return int(Decimal(item[name]["N"]))


def _assert_tables_match(client: Any, tables: SeedTables, expected: SeedOutcome, workload: Workload) -> None:
    run_stats = {
        (_n(i, "user_id"), _n(i, "run_id")): (_n(i, "total_meters"), float(Decimal(i["total_seconds"]["N"])), _n(i, "first_ts"))
        for i in _scan(client, tables.run_stats)
    }
    assert run_stats == {key: (run.total_meters, run.total_seconds, run.first_ts) for key, run in expected.runs.items()}
    tendencies = {
        _n(i, "user_id"): (i["current"]["S"], i["previous"]["S"] if "previous" in i else None) for i in _scan(client, tables.tendency)
    }
    assert tendencies == expected.tendencies
    by_id = {(m.user_id, m.run_id, m.sequence_id): m for m in workload.unique}
    archived = set()
    for item in _scan(client, tables.messages):
        user_id, run_id = (int(part) for part in item["run_key"]["S"].split("#"))
        ident = (user_id, run_id, _n(item, "sequence_id"))
        archived.add(ident)
        assert (_n(item, "timestamp_utc"), _n(item, "distance_meters")) == (
            by_id[ident].timestamp_utc,
            by_id[ident].distance_meters,
        )
    assert archived == expected.archived
    contexts = {(_n(i, "user_id"), _n(i, "run_id")): (_n(i, "last_seq"), _n(i, "total_meters")) for i in _scan(client, tables.context)}
    last_seq = {key: max(s for u, r, s in expected.archived if (u, r) == key) for key in expected.runs}
    assert contexts == {key: (last_seq[key], run.total_meters) for key, run in expected.runs.items()}


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

    # Then cost: one consistent read per valid delivery, four small puts per applied message
    assert meter.calls == {"GetItem": valid, "PutItem": 4 * len(expected.archived)}
    assert meter.rru == valid
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
    records = _scan(client, IDEMPOTENCY_TABLE)
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
