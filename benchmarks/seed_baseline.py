"""A faithful port of the seed algorithm, and the same wrapped in Powertools idempotency.

The seed consumes Kinesis records one at a time, in order. Per valid message it makes one GetItem
on a context row keyed by (user_id, run_id), eventually consistent as the seed wrote it (boto3's
default, half the price of a consistent read), and, unless the message is not newer than the
context's ``last_seq``, four PutItems: run_stats, tendency, the archived message, and the context
itself. Invalid payloads are skipped silently. Its known flaws are kept on purpose (this is
the baseline that the pipeline is measured against):

* a message with ``sequence_id <= last_seq`` is dropped, so a late message is lost for good;
* nothing is transactional: a crash between the puts leaves the tables disagreeing;
* "previous" tendency is the run context's last label, not the user's previous run.

The idempotent variant adds what Powertools' ``idempotent_function`` costs per message: a
conditional PutItem of an INPROGRESS record and an UpdateItem to COMPLETED for a new key; a
re-sent copy is recognised by the failed conditional put (ReturnValuesOnConditionCheckFailure).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, NamedTuple

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

from devtools.aws.lambda_context import FakeLambdaContext
from devtools.reference import SeedOutcome
from runtime.runner_stats.contract import KEY_RUN_ID, KEY_RUN_KEY, KEY_USER_ID

__all__ = [
    "SeedTables",
    "create_idempotency_table",
    "create_seed_tables",
    "idempotent_seed_handler_factory",
    "seed_handler",
]

# botocore clients are untyped; Any keeps mypy honest about that.
Client = Any
KinesisEvent = Mapping[str, Any]

_FIELDS = (KEY_USER_ID, KEY_RUN_ID, "sequence_id", "timestamp_utc", "distance_meters")


class SeedTables(NamedTuple):
    context: str
    run_stats: str
    tendency: str
    messages: str


class _Message(NamedTuple):
    user_id: int
    run_id: int
    sequence_id: int
    timestamp_utc: int
    distance_meters: int


def _create_table(client: Client, name: str, keys: list[tuple[str, str, str]]) -> None:
    client.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": attr, "KeyType": role} for attr, _, role in keys],
        AttributeDefinitions=[{"AttributeName": attr, "AttributeType": kind} for attr, kind, _ in keys],
    )
    client.get_waiter("table_exists").wait(TableName=name)


def create_seed_tables(client: Client, prefix: str = "seed") -> SeedTables:
    """Create the seed's four on-demand tables, named ``<prefix>-<role>``."""
    tables = SeedTables(
        context=f"{prefix}-context",
        run_stats=f"{prefix}-run-stats",
        tendency=f"{prefix}-tendency",
        messages=f"{prefix}-messages",
    )
    by_user_and_run = [(KEY_USER_ID, "N", "HASH"), (KEY_RUN_ID, "N", "RANGE")]
    _create_table(client, tables.context, by_user_and_run)
    _create_table(client, tables.run_stats, by_user_and_run)
    _create_table(client, tables.tendency, [(KEY_USER_ID, "N", "HASH")])
    _create_table(client, tables.messages, [(KEY_RUN_KEY, "S", "HASH"), ("sequence_id", "N", "RANGE")])
    return tables


def create_idempotency_table(client: Client, name: str) -> None:
    """Create the on-demand table Powertools' DynamoDBPersistenceLayer expects (PK ``id``, S)."""
    _create_table(client, name, [("id", "S", "HASH")])


def _parse(record: Mapping[str, Any]) -> _Message | None:
    try:
        body: Any = json.loads(base64.b64decode(record["kinesis"]["data"], validate=True))
    except (KeyError, TypeError, binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(body, dict):
        return None
    values: list[int] = []
    for field in _FIELDS:
        value = body.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return None
        values.append(value)
    message = _Message(*values)
    return message if message.sequence_id >= 1 else None


def _label(total_meters: Decimal) -> str:
    if total_meters < 200:
        return "fine"
    if total_meters < 5000:
        return "good job"
    return "well done"


def _n(value: int | Decimal) -> dict[str, str]:
    return {"N": str(value)}


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _apply(client: Client, tables: SeedTables, message: _Message) -> None:
    """The seed's per-message step: read context, drop if stale, write three outputs, then context."""
    user_id, run_id = _n(message.user_id), _n(message.run_id)
    response = client.get_item(
        TableName=tables.context,
        Key={KEY_USER_ID: user_id, KEY_RUN_ID: run_id},
    )
    context: dict[str, Any] | None = response.get("Item")
    if context is not None and message.sequence_id <= Decimal(context["last_seq"]["N"]):
        return
    total = Decimal(message.distance_meters)
    first_ts = Decimal(message.timestamp_utc)
    previous: str | None = None
    if context is not None:
        total += Decimal(context["total_meters"]["N"])
        first_ts = Decimal(context["first_ts"]["N"])
        previous = context["tendency"]["S"] if "tendency" in context else None
    total_seconds = (Decimal(message.timestamp_utc) - first_ts) / Decimal(1000)
    current = _label(total)

    client.put_item(
        TableName=tables.run_stats,
        Item={
            KEY_USER_ID: user_id,
            KEY_RUN_ID: run_id,
            "total_meters": _n(total),
            "total_seconds": _n(total_seconds),
            "first_ts": _n(first_ts),
        },
    )
    tendency: dict[str, Any] = {KEY_USER_ID: user_id, "current": _s(current)}
    if previous is not None:
        tendency["previous"] = _s(previous)
    client.put_item(TableName=tables.tendency, Item=tendency)
    client.put_item(
        TableName=tables.messages,
        Item={
            KEY_RUN_KEY: _s(f"{message.user_id}#{message.run_id}"),
            "sequence_id": _n(message.sequence_id),
            "timestamp_utc": _n(message.timestamp_utc),
            "distance_meters": _n(message.distance_meters),
        },
    )
    client.put_item(
        TableName=tables.context,
        Item={
            KEY_USER_ID: user_id,
            KEY_RUN_ID: run_id,
            "last_seq": _n(message.sequence_id),
            "total_meters": _n(total),
            "first_ts": _n(first_ts),
            "tendency": _s(current),
        },
    )


def seed_handler(event: KinesisEvent, client: Client, tables: SeedTables) -> None:
    """Process a Kinesis Lambda event the way the seed does: one record at a time, in order."""
    for record in event.get("Records", []):
        message = _parse(record)
        if message is not None:
            _apply(client, tables, message)


def idempotent_seed_handler_factory(client: Client, tables: SeedTables, idempotency_table: str) -> Callable[[KinesisEvent], None]:
    """The seed handler with each message's step wrapped in Powertools' ``idempotent_function``.

    The idempotency key is the message's (user_id, run_id, sequence_id), so a re-sent copy is
    recognised; records are stored through ``client`` (so a meter attached to it sees them).
    """
    persistence = DynamoDBPersistenceLayer(table_name=idempotency_table, boto3_client=client)
    config = IdempotencyConfig(
        event_key_jmespath="[user_id, run_id, sequence_id]",
        raise_on_no_idempotency_key=True,
    )
    # idempotent_function (unlike @idempotent) never sees a Lambda context: register one, so
    # Powertools sets an in-progress expiry as it would live.
    config.register_lambda_context(FakeLambdaContext(function_name="seed-baseline"))  # type: ignore[arg-type]

    def process_message(message: dict[str, int]) -> None:
        _apply(client, tables, _Message(**message))

    # Applied as a call, not with @, because Powertools' decorator is untyped (returns Any).
    idempotent_process: Callable[..., None] = idempotent_function(
        process_message, data_keyword_argument="message", persistence_store=persistence, config=config
    )

    def handler(event: KinesisEvent) -> None:
        for record in event.get("Records", []):
            message = _parse(record)
            if message is not None:
                idempotent_process(message=message._asdict())

    return handler


def _scan(client: Client, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        items.extend(page["Items"])
    return items


def _int(item: dict[str, Any], name: str) -> int:
    return int(Decimal(item[name]["N"]))


def compare_with_reference(client: Client, tables: SeedTables, expected: SeedOutcome) -> list[str]:
    """Differences between the seed tables and what the seed's own semantics predict."""
    problems: list[str] = []
    run_stats = {
        (_int(i, KEY_USER_ID), _int(i, KEY_RUN_ID)): (_int(i, "total_meters"), float(Decimal(i["total_seconds"]["N"])), _int(i, "first_ts"))
        for i in _scan(client, tables.run_stats)
    }
    if run_stats != {key: (run.total_meters, run.total_seconds, run.first_ts) for key, run in expected.runs.items()}:
        problems.append("run stats differ")
    tendencies = {
        _int(i, KEY_USER_ID): (i["current"]["S"], i["previous"]["S"] if "previous" in i else None) for i in _scan(client, tables.tendency)
    }
    if tendencies != expected.tendencies:
        problems.append("tendencies differ")
    archived = set()
    for item in _scan(client, tables.messages):
        user_id, run_id = (int(part) for part in item[KEY_RUN_KEY]["S"].split("#"))
        archived.add((user_id, run_id, _int(item, "sequence_id")))
    if archived != expected.archived:
        problems.append("archived messages differ")
    contexts = {
        (_int(i, KEY_USER_ID), _int(i, KEY_RUN_ID)): (_int(i, "last_seq"), _int(i, "total_meters")) for i in _scan(client, tables.context)
    }
    last_seq = {key: max(s for u, r, s in expected.archived if (u, r) == key) for key in expected.runs}
    if contexts != {key: (last_seq[key], run.total_meters) for key, run in expected.runs.items()}:
        problems.append("contexts differ")
    return problems
