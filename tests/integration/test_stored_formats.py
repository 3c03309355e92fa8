"""The format of data at rest is a contract: golden stored items, one per table and item kind.

Every kind of item the runtime (and the operator's redrive) writes to a DynamoDB table, every kind
of object the snapshot worker writes to the event log's bucket, and every kind of message the stream
router leaves on the event log's queues (for up to their retention, and in their dead-letter queues,
across a deployment) has a golden copy under tests/golden/: the item in DynamoDB's typed wire format
(`{"name": {"S": "..."}}`, binary as base64, as DynamoDB's JSON protocol sends it), the object as
its key and body, the message as its body and attributes. They were made by running the real write
paths (the DynamoDB adapters, the services, the phases, the snapshot worker, the router) on moto,
with a fixed clock and fixed ids, and reviewed before they were committed.

Two tests per golden item (and object, and message):
- the current code writes it: the same write path, with the same fixed inputs, on tables created
  from the reviewed CloudFormation snapshots (tests/infra/__snapshots__, no synth), stores exactly
  the golden item, read back raw with the low-level client: attribute names, types and values;
- the current code reads it: the golden item put into a fresh table is read through the runtime's
  read path (the adapters' parse functions, the services, the row-state reader) into the expected
  domain values.
A failure here is a stored-format change. Items already stored by deployed stacks keep the old
format, so such a change is never a refactoring's side effect: it is decided, reviewed, and shipped
with a CHANGELOG entry and an upgrade note (how the code reads items of the old format, or how to
migrate them), as a change of a stateful resource's logical ID is.

To change a format deliberately: change the code, then regenerate the golden files with

    .venv/bin/python -m tests.integration.test_stored_formats --regenerate

review `git diff tests/golden/` attribute by attribute, and commit it with the CHANGELOG entry and
the upgrade note. Items of the old format stay in deployed tables: the new code reads them too (keep
the old golden file under `earlier/` as a read-only case, EARLIER_FORMATS), or the change ships with
the migration that rewrites them.

Volatile values: the random tokens a few writes carry so that a retried write recognises itself
(`write_token` on log entries, `ClearToken` and `RedriveToken` on status rows) come from uuid4, with
no seam to fix them. Only those attributes are normalised: the written value must be a string of 32
hex digits, and is then compared as the placeholder the golden files hold in its place.
"""

from __future__ import annotations

import base64
import json
import random
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from devtools.aws.template_resources import EmbeddedCloud, Template, find_function, resources_of_type
from devtools.state import capture
from ops.taxi_store import StatusRepairTable
from runtime.event_log import contract as event_log
from runtime.event_log.cells import order_key
from runtime.event_log.entries import EntryKind
from runtime.event_log.logic import chunk_key, decode_chunk, root_key
from runtime.event_log.messages import SideEffect, SideEffectMessage, parse_message, side_effect_of_record, side_effect_request_id
from runtime.event_log.models import (
    AppendRequest,
    BuildState,
    CellEvent,
    CellValue,
    Head,
    LogEntry,
    PayloadRef,
    PendingSnapshot,
    SnapshotMarker,
)
from runtime.event_log.objects import S3Objects, SqsQueue
from runtime.event_log.service import EventLogService, LogOptions, payload_key
from runtime.event_log.side_effects import RouterQueues, StreamRouter
from runtime.event_log.snapshots import Outcome, SnapshotWorker, WorkerOptions
from runtime.event_log.store import WRITE_TOKEN, DynamoLogStore, DynamoPendingStore
from runtime.runner_stats import contract as runner_stats
from runtime.runner_stats.models import (
    ArchiveChunk,
    ArchivedMessage,
    Rejection,
    RejectReason,
    RunContext,
    RunKey,
    StreamPosition,
    TendencySlot,
    UserTendency,
)
from runtime.runner_stats.store import DynamoRunStatsStore, RunStatsTables
from runtime.shared.attributes import from_attributes
from runtime.taxi_etl import contract as taxi_etl
from runtime.taxi_etl.final_table import DynamoFinalTable, DynamoRowReader, PutOutcome
from runtime.taxi_etl.flag_step import CaughtError, FlagMode, FlagRequest, clear_retryable, flag
from runtime.taxi_etl.models import Phase, Row
from runtime.taxi_etl.phases import run_transformation, run_validation
from runtime.taxi_etl.row_state import State, row_state
from runtime.taxi_etl.store import CLEAR_TOKEN, REDRIVE_TOKEN, DynamoStatusTable, StatusRow
from runtime.taxi_etl.store_phase import run_store
from runtime.taxi_etl.trip_items import final_item, same_trip
from runtime.taxi_etl.trip_lines import Accepted, transform_tuple, validate_line
from runtime.taxi_etl.trips import Reason
from tests.unit.taxi_etl.test_taxi_bulk_formats import GOLDEN_FILES as BULK_GOLDEN_FILES  # pure JSON documents, tested there

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = ROOT / "tests" / "golden"
REGENERATE = "python -m tests.integration.test_stored_formats --regenerate"
# The reviewed dev templates: the tables exactly as deployed (keys, types, the segment index and its projection).
TEMPLATE_SNAPSHOT = "tests/infra/__snapshots__/test_snapshots/test_template_matches_snapshot[dev-{stack}].json"

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z: the clock of every write below
NOW_MS = int(NOW * 1000)
TOKEN_ATTRIBUTES = (WRITE_TOKEN, CLEAR_TOKEN, REDRIVE_TOKEN)  # uuid4().hex per write (see the docstring)
_TOKEN = re.compile(r"[0-9a-f]{32}")
TOKEN_PLACEHOLDER = {"S": "<uuid4().hex: random per write>"}


# --- DynamoDB's wire format as JSON (binary as base64, as DynamoDB's JSON protocol sends it) ------


def wire_json(attribute: Mapping[str, Any]) -> dict[str, Any]:
    """An attribute as the low-level client returns it -> its JSON wire form."""
    (kind, value), *_ = attribute.items()
    if kind == "B":
        return {kind: base64.b64encode(value).decode("ascii")}
    if kind == "BS":
        return {kind: [base64.b64encode(member).decode("ascii") for member in value]}
    if kind == "M":
        return {kind: {name: wire_json(member) for name, member in sorted(value.items())}}
    if kind == "L":
        return {kind: [wire_json(member) for member in value]}
    return {kind: value}


def client_form(attribute: Mapping[str, Any]) -> dict[str, Any]:
    """An attribute's JSON wire form -> what the low-level client takes."""
    (kind, value), *_ = attribute.items()
    if kind == "B":
        return {kind: base64.b64decode(value)}
    if kind == "BS":
        return {kind: [base64.b64decode(member) for member in value]}
    if kind == "M":
        return {kind: {name: client_form(member) for name, member in value.items()}}
    if kind == "L":
        return {kind: [client_form(member) for member in value]}
    return {kind: value}


def item_json(item: Mapping[str, Any]) -> dict[str, Any]:
    return {name: wire_json(attribute) for name, attribute in sorted(item.items())}


def item_from_json(item: Mapping[str, Any]) -> dict[str, Any]:
    return {name: client_form(attribute) for name, attribute in item.items()}


# --- the deployed tables and bucket on moto ---------------------------------------------------


@cache
def template(stack: str) -> Template:
    loaded: Template = json.loads((ROOT / TEMPLATE_SNAPSHOT.format(stack=stack)).read_text())
    return loaded


def _variable(cloud: EmbeddedCloud, handler: str, name: str) -> str:
    """A function's environment variable, resolved in the embedded cloud (a table's or the bucket's name)."""
    function = cloud.template["Resources"][find_function(cloud.template, handler)]
    return cloud.resolve(function["Properties"]["Environment"]["Variables"][name])


@dataclass(frozen=True)
class AtRest:
    """The tables, the bucket and the queues the functions write, created from the reviewed dev templates."""

    dynamodb: Any
    s3: Any
    sqs: Any
    runner: RunStatsTables
    log_table: str
    pending_table: str
    bucket: str
    snapshot_queue: str
    payload_queue: str
    status_tables: dict[Phase, str]
    trips_table: str
    templates: tuple[Template, ...]

    @property
    def runner_store(self) -> DynamoRunStatsStore:
        return DynamoRunStatsStore(self.runner, client=self.dynamodb, reject_payload_max_bytes=REJECT_PAYLOAD_MAX_BYTES)

    @property
    def log(self) -> DynamoLogStore:
        return DynamoLogStore(self.log_table, client=self.dynamodb)

    @property
    def pending(self) -> DynamoPendingStore:
        return DynamoPendingStore(self.pending_table, client=self.dynamodb)

    @property
    def objects(self) -> S3Objects:
        return S3Objects(self.bucket, client=self.s3)

    def status(self, phase: Phase) -> DynamoStatusTable:
        return DynamoStatusTable(self.status_tables[phase], self.dynamodb)

    @property
    def status_by_phase(self) -> dict[Phase, DynamoStatusTable]:
        return {phase: self.status(phase) for phase in Phase}

    @property
    def trips(self) -> DynamoFinalTable:
        return DynamoFinalTable(self.trips_table, self.dynamodb)

    @property
    def row_reader(self) -> DynamoRowReader:
        return DynamoRowReader(self.status_tables, self.trips_table, self.dynamodb)

    def raw_item(self, table: str, key: Mapping[str, Any]) -> dict[str, Any]:
        found = self.dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
        assert found is not None, f"the write path stored no item under {key} in {table}"
        return dict(found)

    def put_golden(self, *goldens: GoldenItem | EarlierFormat) -> None:
        for golden in goldens:
            self.dynamodb.put_item(TableName=golden.table(self), Item=item_from_json(golden.load()))

    def emptied(self) -> AtRest:
        """The same tables, bucket and queues with nothing in them (cheaper than creating them for each case)."""
        for table in [self.runner.run_stats, self.runner.tendency, self.runner.messages, self.runner.rejects]:
            self._empty_table(table)
        for table in [self.log_table, self.pending_table, *self.status_tables.values(), self.trips_table]:
            self._empty_table(table)
        keys = [entry["Key"] for entry in self.s3.list_objects_v2(Bucket=self.bucket).get("Contents", [])]
        if keys:
            self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": [{"Key": key} for key in keys]})
        for queue in (self.snapshot_queue, self.payload_queue):
            self._drain(queue)
        return self

    def _drain(self, queue: str) -> None:
        # Not PurgeQueue: SQS allows one a minute per queue.
        while messages := self.sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", []):
            entries = [{"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]} for index, message in enumerate(messages)]
            self.sqs.delete_message_batch(QueueUrl=queue, Entries=entries)

    def _empty_table(self, table: str) -> None:
        schema = self.dynamodb.describe_table(TableName=table)["Table"]["KeySchema"]
        key_names = [key["AttributeName"] for key in schema]
        for item in self.dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]:
            self.dynamodb.delete_item(TableName=table, Key={name: item[name] for name in key_names})

    def put_golden_object(self, golden: GoldenObject) -> None:
        document = golden.load()
        self.s3.put_object(Bucket=self.bucket, Key=document["Key"], Body=document["Body"].encode("utf-8"))


@contextmanager
def tables_at_rest() -> Iterator[AtRest]:
    import boto3

    from devtools.aws.moto_patches import embedded_aws

    with embedded_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        s3 = boto3.client("s3", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        runner = EmbeddedCloud(template("RunnerStats")).create(dynamodb=dynamodb)
        log = EmbeddedCloud(template("EventLog")).create(dynamodb=dynamodb, s3=s3, sqs=sqs)
        taxi = EmbeddedCloud(template("TaxiEtl")).create(dynamodb=dynamodb)
        status_variables = {
            Phase.VALIDATION: taxi_etl.ENV_VALIDATION_STATUS_TABLE,
            Phase.TRANSFORMATION: taxi_etl.ENV_TRANSFORMATION_STATUS_TABLE,
            Phase.STORE: taxi_etl.ENV_STORE_STATUS_TABLE,
        }
        yield AtRest(
            dynamodb=dynamodb,
            s3=s3,
            sqs=sqs,
            runner=RunStatsTables(
                run_stats=_variable(runner, runner_stats.HANDLER, runner_stats.ENV_RUN_STATS_TABLE),
                tendency=_variable(runner, runner_stats.HANDLER, runner_stats.ENV_TENDENCY_TABLE),
                messages=_variable(runner, runner_stats.HANDLER, runner_stats.ENV_MESSAGES_TABLE),
                rejects=_variable(runner, runner_stats.HANDLER, runner_stats.ENV_REJECTS_TABLE),
            ),
            log_table=_variable(log, event_log.HANDLER_WORKER, event_log.ENV_LOG_TABLE),
            pending_table=_variable(log, event_log.HANDLER_WORKER, event_log.ENV_PENDING_TABLE),
            bucket=_variable(log, event_log.HANDLER_WORKER, event_log.ENV_BUCKET),
            snapshot_queue=_variable(log, event_log.HANDLER_ROUTER, event_log.ENV_SNAPSHOT_QUEUE_URL),
            payload_queue=_variable(log, event_log.HANDLER_ROUTER, event_log.ENV_PAYLOAD_QUEUE_URL),
            status_tables={phase: _variable(taxi, taxi_etl.HANDLER_ROW_STATE, name) for phase, name in status_variables.items()},
            trips_table=_variable(taxi, taxi_etl.HANDLER_ROW_STATE, taxi_etl.ENV_FINAL_TABLE),
            templates=(runner.template, log.template, taxi.template),
        )


# --- golden files -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldenItem:
    """One table's one kind of item: where its golden file is, how it is written and how it is read."""

    path: str  # under tests/golden/
    table: Callable[[AtRest], str]
    key: dict[str, Any]  # the item's key in the client's form
    write: Callable[[AtRest], None]  # the real write path, with fixed inputs
    read: Callable[[AtRest], None]  # the golden item is stored: read it through the runtime, assert the domain values

    def load(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((GOLDEN_DIR / self.path).read_text())
        return loaded

    def written(self, at_rest: AtRest) -> dict[str, Any]:
        self.write(at_rest)
        return with_token_placeholders(item_json(at_rest.raw_item(self.table(at_rest), self.key)))


@dataclass(frozen=True)
class EarlierFormat:
    """An item an earlier version wrote, which deployed tables may still hold: read-only, as no current
    code writes it. Made by that version's own write path (`written_by`, from `git archive`) on moto."""

    path: str
    written_by: str  # the commit whose code wrote it
    table: Callable[[AtRest], str]
    read: Callable[[AtRest], None]

    def load(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((GOLDEN_DIR / self.path).read_text())
        return loaded


@dataclass(frozen=True)
class GoldenObject:
    """One kind of object in the event log's bucket: its golden key and body."""

    path: str
    key: str
    write: Callable[[AtRest], None]
    read: Callable[[AtRest], None]

    def load(self) -> dict[str, str]:
        loaded: dict[str, str] = json.loads((GOLDEN_DIR / self.path).read_text())
        return loaded

    def written(self, at_rest: AtRest) -> dict[str, str]:
        self.write(at_rest)
        body = at_rest.s3.get_object(Bucket=at_rest.bucket, Key=self.key)["Body"].read()
        return {"Key": self.key, "Body": body.decode("utf-8")}


@dataclass(frozen=True)
class GoldenMessage:
    """One kind of message on one of the event log's queues (kept up to the queue's retention, and in its
    dead-letter queue: a deployment's new worker takes the messages the old router sent)."""

    path: str
    queue: Callable[[AtRest], str]
    write: Callable[[AtRest], None]
    read: Callable[[dict[str, Any]], None]  # given the golden message: parse it as the worker does, assert the values

    def load(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((GOLDEN_DIR / self.path).read_text())
        return loaded

    def written(self, at_rest: AtRest) -> dict[str, Any]:
        self.write(at_rest)
        received = at_rest.sqs.receive_message(QueueUrl=self.queue(at_rest), MaxNumberOfMessages=10, MessageAttributeNames=["All"])
        messages = received.get("Messages", [])
        assert len(messages) == 1, f"expected one message on the queue, got {messages}"
        return {"Body": messages[0]["Body"], "MessageAttributes": messages[0].get("MessageAttributes", {})}


def with_token_placeholders(item: Mapping[str, Any]) -> dict[str, Any]:
    """The written item with each random token (checked: a string of 32 hex digits) replaced by the
    placeholder the golden files hold in its place."""
    normalised = dict(item)
    for name in TOKEN_ATTRIBUTES:
        if name in normalised:
            value = normalised[name]
            assert set(value) == {"S"} and _TOKEN.fullmatch(value["S"]), f"{name} is written as {value}, not a uuid4 hex string"
            normalised[name] = TOKEN_PLACEHOLDER
    return normalised


def format_changes(golden: Mapping[str, Any], written: Mapping[str, Any], within: str = "") -> list[str]:
    """What differs between the golden item and the written one, attribute by attribute (into maps)."""
    changes = [f"attribute {within}{name!r} is no longer written (was {golden[name]})" for name in sorted(set(golden) - set(written))]
    changes += [f"attribute {within}{name!r} is new ({written[name]})" for name in sorted(set(written) - set(golden))]
    for name in sorted(set(golden) & set(written)):
        was, now = golden[name], written[name]
        if set(was) != set(now):
            changes.append(f"attribute {within}{name!r} changed type: {was} -> {now}")
        elif "M" in was:
            changes += format_changes(was["M"], now["M"], f"{within}{name!r} > ")
        elif was != now:
            changes.append(f"attribute {within}{name!r} changed value: {was} -> {now}")
    return changes


def stored_format_message(path: str, what: str, changes: list[str]) -> str:
    listed = "\n  ".join(changes)
    return (
        f"STORED-FORMAT CHANGE in tests/golden/{path}: {what}\n  {listed}\n"
        "Deployed stacks hold data in the golden format. If the change is intended, it needs a CHANGELOG entry"
        f" and an upgrade note; regenerate with `{REGENERATE}` and review the diff (tests/golden/README.md)."
    )


def read_or_report(path: str, read: Callable[[AtRest], None], at_rest: AtRest) -> None:
    """Run a golden's read check; any failure is reported as what it is: stored data the code no longer reads."""
    try:
        read(at_rest)
    except Exception as error:
        what = "the current code no longer reads it as stored (deployed tables hold such items: read both formats, or migrate)"
        pytest.fail(stored_format_message(path, what, [f"{type(error).__name__}: {error}"]))


def assert_same_item(path: str, golden: Mapping[str, Any], written: Mapping[str, Any]) -> None:
    changes = format_changes(golden, written)
    assert not changes, stored_format_message(path, "the current code writes another item", changes)


# --- runner stats ---------------------------------------------------------------------------------

RUN = RunKey(user_id=7, run_id=3)
FIRST_RUN = RunKey(user_id=7, run_id=4)
ARCHIVED = (ArchivedMessage(1, NOW_MS, Decimal("0")), ArchivedMessage(2, NOW_MS + 5_000, Decimal("12.5")))
FULL_CONTEXT = RunContext(
    key=RUN,
    version=1,
    high_water=25,
    gaps=((20, 21), (23, 23)),
    closed=((5, 6),),
    forgotten=2,
    held=(ArchivedMessage(70, NOW_MS + 90_000, Decimal("40.25")),),
    gaps_closed=1,
    total_meters=Decimal("1234.5"),
    first_ts=NOW_MS,
    last_ts=NOW_MS + 61_250,
    message_count=21,
    pending=(ArchivedMessage(24, NOW_MS + 60_000, Decimal("10")), ArchivedMessage(25, NOW_MS + 61_250, Decimal("3.75"))),
    archive_chunks=1,
    tendency="good job",
)
ARCHIVE_CHUNK = ArchiveChunk(RUN, 0, ARCHIVED)
FIRST_CONTEXT = RunContext(
    key=FIRST_RUN,
    version=1,
    high_water=1,
    total_meters=Decimal("3.2"),
    first_ts=NOW_MS,
    last_ts=NOW_MS,
    message_count=1,
    pending=(ArchivedMessage(1, NOW_MS, Decimal("3.2")),),
)
TENDENCY = UserTendency(
    user_id=RUN.user_id,
    version=0,
    current=TendencySlot(FIRST_RUN.run_id, NOW_MS + 3_600_000, "fine"),
    previous=TendencySlot(RUN.run_id, NOW_MS, "good job"),
)
REJECT_PAYLOAD_MAX_BYTES = 32  # small, so the poison record's payload is stored truncated
SUSPECT = Rejection(
    StreamPosition("shardId-000000000000:49650000000000000000000000000000000000000000000000000001", "4965000001", "7"),
    RejectReason.SUSPECT_JUMP,
    "sequence 70 is 45 above the high water 25; held until corroborated",
    b'{"user_id":7,"run_id":3}',
    RUN,
)
POISON = Rejection(
    StreamPosition("shardId-000000000000:49650000000000000000000000000000000000000000000000000002", "4965000002", "unknown"),
    RejectReason.NOT_JSON,
    "Expecting value: line 1 column 1 (char 0)",
    b"\xff\xfe not json at all, and longer than the limit",
)


def _commit_full_run(at_rest: AtRest) -> None:
    at_rest.runner_store.commit(FULL_CONTEXT, ARCHIVE_CHUNK)


def _read_full_run(at_rest: AtRest) -> None:
    store = at_rest.runner_store
    assert store.load_context(RUN) == FULL_CONTEXT
    assert store.load_contexts([RUN]) == {RUN: FULL_CONTEXT}


def _commit_first_run(at_rest: AtRest) -> None:
    at_rest.runner_store.commit(FIRST_CONTEXT, None)


def _read_first_run(at_rest: AtRest) -> None:
    assert at_rest.runner_store.load_context(FIRST_RUN) == FIRST_CONTEXT


def _read_archive_chunk(at_rest: AtRest) -> None:
    # The archive is the chunks, then the run item's pending tail.
    assert at_rest.runner_store.read_archive(RunContext(RUN)) == list(ARCHIVED)
    assert at_rest.runner_store.archived_sequences(RunContext(RUN)) == frozenset({1, 2})


def _save_tendency(at_rest: AtRest) -> None:
    at_rest.runner_store.save_tendency(TENDENCY)


def _read_tendency(at_rest: AtRest) -> None:
    written = UserTendency(TENDENCY.user_id, TENDENCY.version + 1, TENDENCY.current, TENDENCY.previous)
    assert at_rest.runner_store.load_tendency(RUN.user_id) == written
    assert at_rest.runner_store.load_tendencies([RUN.user_id]) == {RUN.user_id: written}


def _save_rejection(rejection: Rejection) -> Callable[[AtRest], None]:
    return lambda at_rest: at_rest.runner_store.save_rejections([rejection])


def _read_rejection(rejection: Rejection) -> Callable[[AtRest], None]:
    def read(at_rest: AtRest) -> None:
        # No runtime function reads the rejects table (it is for operators): read it as the demo's view does, and by attribute.
        assert capture(at_rest.dynamodb, at_rest.runner).rejects == {rejection.position.record_id: rejection.reason.value}
        key = {runner_stats.KEY_RECORD_ID: {"S": rejection.position.record_id}}
        item = from_attributes(at_rest.raw_item(at_rest.runner.rejects, key))
        assert item["payload"] == rejection.payload[:REJECT_PAYLOAD_MAX_BYTES]
        assert item["payload_truncated"] is (len(rejection.payload) > REJECT_PAYLOAD_MAX_BYTES)
        assert (item.get("user_id"), item.get("run_id")) == (
            (rejection.key.user_id, rejection.key.run_id) if rejection.key else (None, None)
        )

    return read


def _run_key(key: RunKey) -> dict[str, Any]:
    return {runner_stats.KEY_USER_ID: {"N": str(key.user_id)}, runner_stats.KEY_RUN_ID: {"N": str(key.run_id)}}


RUNNER_STATS = [
    GoldenItem("runner_stats/run_stats/run_item.json", lambda t: t.runner.run_stats, _run_key(RUN), _commit_full_run, _read_full_run),
    GoldenItem(
        "runner_stats/run_stats/run_item_first_message.json",
        lambda t: t.runner.run_stats,
        _run_key(FIRST_RUN),
        _commit_first_run,
        _read_first_run,
    ),
    GoldenItem(
        "runner_stats/messages/archive_chunk.json",
        lambda t: t.runner.messages,
        {runner_stats.KEY_RUN_KEY: {"S": RUN.archive_key}, runner_stats.KEY_CHUNK: {"N": "0"}},
        _commit_full_run,
        _read_archive_chunk,
    ),
    GoldenItem(
        "runner_stats/tendency/user_tendency.json",
        lambda t: t.runner.tendency,
        {runner_stats.KEY_USER_ID: {"N": str(RUN.user_id)}},
        _save_tendency,
        _read_tendency,
    ),
    GoldenItem(
        "runner_stats/rejects/rejection_of_a_run.json",
        lambda t: t.runner.rejects,
        {runner_stats.KEY_RECORD_ID: {"S": SUSPECT.position.record_id}},
        _save_rejection(SUSPECT),
        _read_rejection(SUSPECT),
    ),
    GoldenItem(
        "runner_stats/rejects/poison_record.json",
        lambda t: t.runner.rejects,
        {runner_stats.KEY_RECORD_ID: {"S": POISON.position.record_id}},
        _save_rejection(POISON),
        _read_rejection(POISON),
    ),
]


# --- event log ------------------------------------------------------------------------------------

LOG_ID = "golden-log"
SET_CELL = AppendRequest(LOG_ID, "request-1", 1, CellEvent(EntryKind.SET_CELL, "B2", value="42"))
CLEAR_CELL = AppendRequest(LOG_ID, "request-2", 2, CellEvent(EntryKind.CLEAR_CELL, "A1"))
LARGE_PAYLOAD_REQUEST = "request-3"
LARGE_PAYLOAD_BYTES = b"a payload too large to keep inline"
PAYLOAD = PayloadRef(payload_key(LOG_ID, LARGE_PAYLOAD_REQUEST), len(LARGE_PAYLOAD_BYTES))
MARKER = SnapshotMarker(LOG_ID, number=1, cut=2, previous_cut=0)
ROOT_KEY = root_key(LOG_ID, MARKER.number)
WORKER_REQUEST_ID = "golden-worker-request"  # the invocation's request id: the claim's token
BUILT_STATE = BuildState(chunks=1, cursor=order_key("B2"), previous_chunk=0, consumed=2, cells=1, digest="0" * 64)
DUE = NOW + 60


class _NoQueue:
    """The worker's queue, for a build that finishes at once: it sends nothing."""

    def send(self, queue_url: str, messages: Any, delay_seconds: int = 0) -> list[str]:
        raise AssertionError(f"a build that finishes at once sends nothing, not {messages}")

    def change_visibility(self, queue_url: str, receipt_handle: str, seconds: int) -> bool:
        raise AssertionError("a build that finishes at once changes no visibility")


def _appended(at_rest: AtRest) -> None:
    """Three events through the service (a Snapshot entry after the second), the third a large payload."""
    service = EventLogService(at_rest.log, at_rest.objects, LogOptions(snapshot_every=2), clock=lambda: NOW)
    service.append(SET_CELL)
    service.append(CLEAR_CELL)
    at_rest.s3.put_object(Bucket=at_rest.bucket, Key=PAYLOAD.key, Body=LARGE_PAYLOAD_BYTES)  # the client's upload
    service.complete_upload(LOG_ID, LARGE_PAYLOAD_REQUEST, 3, "C3")


def _built(at_rest: AtRest) -> None:
    """The events appended, then snapshot 1 built by the worker (its chunk, its root, the pointer)."""
    _appended(at_rest)
    worker = SnapshotWorker(
        at_rest.log,
        at_rest.pending,
        at_rest.objects,
        _NoQueue(),
        WorkerOptions(queue_url="unused"),
        clock=lambda: NOW,
        rng=random.Random(0),
    )
    request_id = side_effect_request_id(SideEffect.BUILD_SNAPSHOT, LOG_ID, MARKER.seq)
    message = SideEffectMessage(SideEffect.BUILD_SNAPSHOT, LOG_ID, MARKER.seq, request_id)
    assert worker.handle(message, "receipt", lambda: 900_000, WORKER_REQUEST_ID) is Outcome.BUILT


def _claim(at_rest: AtRest) -> PendingSnapshot:
    """A worker's claim of snapshot 1's build (with its invocation's request id as the token)."""
    claimed = at_rest.pending.claim(LOG_ID, MARKER.seq, WORKER_REQUEST_ID, NOW, event_log.DEFAULT_LEASE_SECONDS)
    assert claimed is not None
    return claimed


def _claimed(at_rest: AtRest) -> None:
    _claim(at_rest)


def _checkpointed(at_rest: AtRest) -> None:
    assert at_rest.pending.checkpoint(_claim(at_rest), BUILT_STATE, NOW + 1)


def _deferred(at_rest: AtRest) -> None:
    assert at_rest.pending.defer(_claim(at_rest), NOW + 2, DUE)


HEAD_AFTER_APPENDS = Head(LOG_ID, next_position=4, snapshots=1, last_cut=2, built=0, exists=True)
HEAD_BUILT = Head(LOG_ID, next_position=4, snapshots=1, last_cut=2, built=1, built_seq=MARKER.seq, built_root=ROOT_KEY, exists=True)
ENTRIES = {
    1: LogEntry(LOG_ID, 1, SET_CELL.request_id, SET_CELL.event, segment=1),
    2: LogEntry(LOG_ID, 2, CLEAR_CELL.request_id, CLEAR_CELL.event, segment=1),
    3: LogEntry(LOG_ID, 3, LARGE_PAYLOAD_REQUEST, CellEvent(EntryKind.LARGE_PAYLOAD, "C3", payload=PAYLOAD), segment=2),
}
PENDING_CLAIMED = PendingSnapshot(LOG_ID, MARKER.seq, created=NOW, modified=NOW, retries=0, increment=1, active=WORKER_REQUEST_ID)


def _log_key(seq: int | Decimal) -> dict[str, Any]:
    return {event_log.KEY_LOG_ID: {"S": LOG_ID}, event_log.KEY_SEQ: {"N": str(seq)}}


def _read_head(expected: Head) -> Callable[[AtRest], None]:
    def read(at_rest: AtRest) -> None:
        assert at_rest.log.read_head(LOG_ID) == expected

    return read


def _stream_side_effect(at_rest: AtRest, seq: int | Decimal) -> SideEffectMessage:
    image = at_rest.raw_item(at_rest.log_table, _log_key(seq))
    return side_effect_of_record({"eventName": "INSERT", "dynamodb": {"NewImage": image, "SequenceNumber": "1"}})


def _read_entry(position: int) -> Callable[[AtRest], None]:
    def read(at_rest: AtRest) -> None:
        entry = ENTRIES[position]
        assert at_rest.log.read_entry(LOG_ID, position) == entry
        # and as the snapshot build reads it: through the segment index, with its projected attributes only
        assert list(at_rest.log.segment_events(LOG_ID, entry.segment, "")) == [entry]
        # and as GET /logs/{id} lists it (after the log's head)
        at_rest.put_golden(golden_item("event_log/log/head.json"))
        service = EventLogService(at_rest.log, at_rest.objects, clock=lambda: NOW)
        latest = service.read_latest(LOG_ID, at_rest.objects, limit=10, after=None)
        assert latest is not None
        expected = {"seq": str(position), "kind": entry.event.kind.value, "position": position, "cell": entry.event.cell}
        assert [{name: listed[name] for name in expected} for listed in latest["entries"]] == [expected]
        if entry.event.kind is EntryKind.LARGE_PAYLOAD:
            # and as the stream router reads its stream record (kept 24 hours, so read across a deployment)
            assert _stream_side_effect(at_rest, position) == _FINALIZE

    return read


def _read_marker(expected: SnapshotMarker) -> Callable[[AtRest], None]:
    def read(at_rest: AtRest) -> None:
        assert at_rest.log.read_marker(LOG_ID, MARKER.seq) == expected
        # and as the stream router reads its stream record (kept 24 hours, so read across a deployment)
        assert _stream_side_effect(at_rest, MARKER.seq) == _BUILD
        # and as GET /logs/{id} lists it (after the log's head)
        at_rest.put_golden(golden_item("event_log/log/head.json"))
        service = EventLogService(at_rest.log, at_rest.objects, clock=lambda: NOW)
        latest = service.read_latest(LOG_ID, at_rest.objects, limit=10, after=None)
        assert latest is not None
        assert latest["entries"] == [
            {"seq": str(MARKER.seq), "kind": EntryKind.SNAPSHOT.value, "snapshot": 1, "cut": 2, "built": bool(expected.root)}
        ]

    return read


def _read_pending(expected: PendingSnapshot) -> Callable[[AtRest], None]:
    def read(at_rest: AtRest) -> None:
        assert at_rest.pending.get(LOG_ID, MARKER.seq) == expected
        assert list(at_rest.pending.scan()) == [expected]

    return read


EVENT_LOG = [
    GoldenItem("event_log/log/head.json", lambda t: t.log_table, _log_key(0), _appended, _read_head(HEAD_AFTER_APPENDS)),
    GoldenItem("event_log/log/head_with_snapshot_pointer.json", lambda t: t.log_table, _log_key(0), _built, _read_head(HEAD_BUILT)),
    GoldenItem("event_log/log/set_cell_entry.json", lambda t: t.log_table, _log_key(1), _appended, _read_entry(1)),
    GoldenItem("event_log/log/clear_cell_entry.json", lambda t: t.log_table, _log_key(2), _appended, _read_entry(2)),
    GoldenItem("event_log/log/large_payload_entry.json", lambda t: t.log_table, _log_key(3), _appended, _read_entry(3)),
    GoldenItem("event_log/log/snapshot_entry.json", lambda t: t.log_table, _log_key(MARKER.seq), _appended, _read_marker(MARKER)),
    GoldenItem(
        "event_log/log/snapshot_entry_built.json",
        lambda t: t.log_table,
        _log_key(MARKER.seq),
        _built,
        _read_marker(SnapshotMarker(LOG_ID, 1, 2, 0, root=ROOT_KEY)),
    ),
    GoldenItem(
        "event_log/pending_snapshots/claimed.json",
        lambda t: t.pending_table,
        _log_key(MARKER.seq),
        _claimed,
        _read_pending(PENDING_CLAIMED),
    ),
    GoldenItem(
        "event_log/pending_snapshots/checkpointed.json",
        lambda t: t.pending_table,
        _log_key(MARKER.seq),
        _checkpointed,
        _read_pending(PendingSnapshot(LOG_ID, MARKER.seq, NOW, NOW + 1, 0, 1, WORKER_REQUEST_ID, BUILT_STATE)),
    ),
    GoldenItem(
        "event_log/pending_snapshots/deferred.json",
        lambda t: t.pending_table,
        _log_key(MARKER.seq),
        _deferred,
        _read_pending(PendingSnapshot(LOG_ID, MARKER.seq, NOW, NOW + 2, 1, 1, None, BuildState(), due=DUE)),
    ),
]


def _read_snapshot_chunk(at_rest: AtRest) -> None:
    body = at_rest.objects.get(chunk_key(LOG_ID, MARKER.number, 0))
    assert decode_chunk(body) == [CellValue(order_key("B2"), "B2", "42")]


def _read_snapshot_root(at_rest: AtRest) -> None:
    # GET /logs/{id} finds the root through the head's pointer and answers from it.
    at_rest.put_golden(golden_item("event_log/log/head_with_snapshot_pointer.json"))
    service = EventLogService(at_rest.log, at_rest.objects, clock=lambda: NOW)
    latest = service.read_latest(LOG_ID, at_rest.objects, limit=10, after=None)
    assert latest is not None
    snapshot = latest["snapshot"]
    assert (snapshot["number"], snapshot["cut"], snapshot["cells"]) == (1, 2, 1)
    assert re.fullmatch(r"[0-9a-f]{64}", snapshot["digest"])
    assert len(snapshot["chunk_urls"]) == 1 and chunk_key(LOG_ID, 1, 0) in snapshot["chunk_urls"][0]


BUCKET_OBJECTS = [
    GoldenObject("event_log/bucket/snapshot_chunk.json", chunk_key(LOG_ID, MARKER.number, 0), _built, _read_snapshot_chunk),
    GoldenObject("event_log/bucket/snapshot_root.json", ROOT_KEY, _built, _read_snapshot_root),
]


def _routed(at_rest: AtRest) -> None:
    """The events appended; then the stream router given the log's new entries, as DynamoDB Streams delivers them."""
    _appended(at_rest)
    images = at_rest.dynamodb.query(
        TableName=at_rest.log_table,
        KeyConditionExpression="#log = :log",
        ExpressionAttributeNames={"#log": event_log.KEY_LOG_ID},
        ExpressionAttributeValues={":log": {"S": LOG_ID}},
    )["Items"]
    records = [{"dynamodb": {"NewImage": image, "SequenceNumber": str(index)}} for index, image in enumerate(images, start=1)]
    side_effects = [record for record in records if record["dynamodb"]["NewImage"]["kind"]["S"] in event_log.SIDE_EFFECT_KINDS]
    report = StreamRouter(SqsQueue(client=at_rest.sqs), RouterQueues(at_rest.snapshot_queue, at_rest.payload_queue)).route(side_effects)
    assert (report.sent, report.failures) == (2, [])


def _read_message(effect: SideEffect, expected: SideEffectMessage) -> Callable[[dict[str, Any]], None]:
    def read(golden: dict[str, Any]) -> None:
        # As Lambda's SQS poller hands it to the worker (or the finalizer): body and messageAttributes.
        attributes = {
            name: {"stringValue": value["StringValue"], "dataType": value["DataType"]}
            for name, value in golden["MessageAttributes"].items()
        }
        assert parse_message(golden["Body"], attributes, effect) == expected

    return read


_BUILD = SideEffectMessage(
    SideEffect.BUILD_SNAPSHOT, LOG_ID, MARKER.seq, side_effect_request_id(SideEffect.BUILD_SNAPSHOT, LOG_ID, MARKER.seq)
)
_FINALIZE = SideEffectMessage(
    SideEffect.FINALIZE_PAYLOAD, LOG_ID, Decimal(3), side_effect_request_id(SideEffect.FINALIZE_PAYLOAD, LOG_ID, Decimal(3)), PAYLOAD.key
)
QUEUE_MESSAGES = [
    GoldenMessage(
        "event_log/snapshot_queue/build_snapshot.json",
        lambda t: t.snapshot_queue,
        _routed,
        _read_message(SideEffect.BUILD_SNAPSHOT, _BUILD),
    ),
    GoldenMessage(
        "event_log/payload_queue/finalize_payload.json",
        lambda t: t.payload_queue,
        _routed,
        _read_message(SideEffect.FINALIZE_PAYLOAD, _FINALIZE),
    ),
]


# --- taxi ETL -------------------------------------------------------------------------------------

# A trip whose columns do not add up to its total (a finding, an unexplained amount), every column filled.
TRIP_ID = "k-golden-trip"
TRIP_LINE = "2,2019-10-23T16:39:42.000,2019-10-23T16:55:00.000,1,7.93,1,N,138,170,1,29.5,1,0.5,7.98,6.12,0.3,50.00,2.5"
# A trip with every column that may be blank left blank, dropped off when picked up.
SPARSE_ID = "k-golden-sparse"
SPARSE_LINE = ",2019-10-23T16:39:42.000,2019-10-23T16:39:42.000,,,,,138,170,,29.5,1,0.5,7.98,6.12,0.3,47.9,2.5"
# Dropped off before it was picked up: Validate flags it.
REJECTED_ID = "k-golden-rejected"
REJECTED_LINE = "2,2019-10-23T16:39:42.000,2019-10-23T16:30:00.000,1,7.93,1,N,138,170,1,29.5,1,0.5,7.98,6.12,0.3,47.9,2.5"
# A good trip whose store AWS failed: flagged retryable in every table.
RETRYABLE_ID = "k-golden-retryable"
TRANSIENT = CaughtError(taxi_etl.ERROR_TRANSIENT, '{"errorMessage": "throttled"}')
REDRIVEN_AT = "2026-01-01T00:00:00Z"  # ops/taxi_redrive.py's `at`: the claim's time, to the second


def transformed(line: str) -> str:
    validated = validate_line(line)
    assert isinstance(validated, Accepted)
    result = transform_tuple(validated.tuple)
    assert isinstance(result, Accepted)
    return result.tuple


def _through_store(store_request_id: str, line: str) -> Callable[[AtRest], None]:
    """The three phases on one row, as the saga runs them."""

    def write(at_rest: AtRest) -> None:
        validated = run_validation([Row(store_request_id, line)], at_rest.status(Phase.VALIDATION))
        passed = [Row(v.store_request_id, v.tuple) for v in validated.passed]
        transformed_rows = run_transformation(passed, at_rest.status(Phase.TRANSFORMATION))
        report = run_store([Row(v.store_request_id, v.tuple) for v in transformed_rows.passed], at_rest.status(Phase.STORE), at_rest.trips)
        assert report.stored == 1

    return write


def _flagged_by_rule(at_rest: AtRest) -> None:
    result = run_validation([Row(REJECTED_ID, REJECTED_LINE)], at_rest.status(Phase.VALIDATION))
    request = FlagRequest(Phase.VALIDATION, rejected=result.verdicts, rows=(), error=None)
    assert flag(request, at_rest.status_by_phase).flagged == 1


def _retryable_request(mode: FlagMode) -> FlagRequest:
    return FlagRequest(Phase.STORE, rejected=(), rows=(Row(RETRYABLE_ID, transformed(TRIP_LINE)),), error=TRANSIENT, mode=mode)


def _flagged_retryable(at_rest: AtRest) -> None:
    """Validate and Transform passed the row; AWS failed its store: the flag step flags it retryable."""
    validated = run_validation([Row(RETRYABLE_ID, TRIP_LINE)], at_rest.status(Phase.VALIDATION))
    run_transformation([Row(v.store_request_id, v.tuple) for v in validated.passed], at_rest.status(Phase.TRANSFORMATION))
    assert flag(_retryable_request(FlagMode.RETRYABLE), at_rest.status_by_phase, at_rest.trips).flagged == 1


def _cleared(at_rest: AtRest) -> None:
    _flagged_retryable(at_rest)
    assert clear_retryable(_retryable_request(FlagMode.CLEAR), at_rest.status_by_phase) == 1


def _redrive_claimed(at_rest: AtRest) -> None:
    """The operator's redrive (ops/taxi_redrive.py) claims the flagged row for its next generation."""
    _flagged_by_rule(at_rest)
    validation = StatusRepairTable(at_rest.status_tables[Phase.VALIDATION], at_rest.dynamodb)
    later = [(StatusRepairTable(at_rest.status_tables[phase], at_rest.dynamodb), None) for phase in (Phase.TRANSFORMATION, Phase.STORE)]
    seen = validation.read_rows([REJECTED_ID])[REJECTED_ID]
    assert validation.claim_redrive(seen, later, at=REDRIVEN_AT) == 2


def _redrive_started(at_rest: AtRest) -> None:
    """The redrive claimed the row, started its execution, and ended the row's pending mark."""
    _redrive_claimed(at_rest)
    StatusRepairTable(at_rest.status_tables[Phase.VALIDATION], at_rest.dynamodb).end_pending(REJECTED_ID, 2)


def _read_status(table: Phase, store_request_id: str, row: StatusRow, state: State, **expected: Any) -> Callable[[AtRest], None]:
    """The row as GET /trips/{id} reads it (one BatchGetItem over the four tables), and what it makes of it."""

    def read(at_rest: AtRest) -> None:
        status, trip = at_rest.row_reader.read(store_request_id)
        assert status[table] == row
        answer = row_state(store_request_id, status, trip)
        assert answer is not None
        assert answer.state is state
        assert {name: getattr(answer, name) for name in expected} == expected

    return read


def _read_trip(at_rest: AtRest) -> None:
    at_rest.put_golden(golden_item("taxi_etl/store_status/in_phase.json"))
    status, trip = at_rest.row_reader.read(TRIP_ID)
    answer = row_state(TRIP_ID, status, trip)
    assert answer is not None and answer.state is State.STORED
    assert answer.findings == ("total_amount_mismatch",)
    assert answer.unexplained_amount == Decimal("2.10")
    assert answer.trip == {
        "pickup_at": "2019-10-23T20:39:42Z",
        "dropoff_at": "2019-10-23T20:55:00Z",
        "pu_location_id": 138,
        "do_location_id": 170,
        "trip_seconds": 918,
        "total_amount": "50.00",
    }


def _read_sparse_trip(at_rest: AtRest) -> None:
    # As the flag step and Store's retry recognise a stored row: the item its tuple makes.
    stored = at_rest.trips.stored_items([SPARSE_ID])[SPARSE_ID]
    assert same_trip(stored, final_item(SPARSE_ID, transformed(SPARSE_LINE)))
    assert stored["findings"] == ["dropoff_equals_pickup"] and stored["trip_seconds"] == 0
    assert not {"vendor", "passenger_count", "trip_distance", "rate_code", "store_and_fwd", "payment_type"} & set(stored)


def _read_trip_of_item_version_2(at_rest: AtRest) -> None:
    # GET /trips/{id} answers it as stored (its store row's tuple makes the same trip across layouts)
    at_rest.put_golden(golden_item("taxi_etl/store_status/in_phase.json"))
    status, trip = at_rest.row_reader.read(TRIP_ID)
    answer = row_state(TRIP_ID, status, trip)
    assert answer is not None and answer.state is State.STORED
    assert (answer.findings, answer.unexplained_amount) == (("total_amount_mismatch",), Decimal("2.10"))
    # and Store, given the same row again, finds it already stored, not a conflict
    assert at_rest.trips.put_once(final_item(TRIP_ID, transformed(TRIP_LINE))) is PutOutcome.ALREADY_STORED


def _row_key(store_request_id: str) -> dict[str, Any]:
    return {taxi_etl.KEY_STORE_REQUEST_ID: {"S": store_request_id}}


def _status_table(phase: Phase) -> Callable[[AtRest], str]:
    return lambda at_rest: at_rest.status_tables[phase]


_REJECTED_MESSAGE = "dropoff_datetime: '2019-10-23T16:30:00.000' is before pickup_datetime '2019-10-23T16:39:42.000'"
_RETRYABLE_DETAIL = f"{taxi_etl.DETAIL_RETRYABLE_PREFIX}{taxi_etl.ERROR_TRANSIENT}"

TAXI_ETL = [
    GoldenItem(
        "taxi_etl/validation_status/in_phase.json",
        _status_table(Phase.VALIDATION),
        _row_key(TRIP_ID),
        _through_store(TRIP_ID, TRIP_LINE),
        _read_status(Phase.VALIDATION, TRIP_ID, StatusRow(TRIP_ID, TRIP_LINE, 0), State.PENDING, phase=Phase.VALIDATION),
    ),
    GoldenItem(
        "taxi_etl/transformation_status/in_phase.json",
        _status_table(Phase.TRANSFORMATION),
        _row_key(TRIP_ID),
        _through_store(TRIP_ID, TRIP_LINE),
        _read_status(Phase.TRANSFORMATION, TRIP_ID, StatusRow(TRIP_ID, TRIP_LINE, 0), State.PENDING, phase=Phase.TRANSFORMATION),
    ),
    GoldenItem(
        "taxi_etl/store_status/in_phase.json",
        _status_table(Phase.STORE),
        _row_key(TRIP_ID),
        _through_store(TRIP_ID, TRIP_LINE),
        _read_status(Phase.STORE, TRIP_ID, StatusRow(TRIP_ID, transformed(TRIP_LINE), 0), State.PENDING, phase=Phase.STORE),
    ),
    GoldenItem(
        "taxi_etl/validation_status/flagged_by_rule.json",
        _status_table(Phase.VALIDATION),
        _row_key(REJECTED_ID),
        _flagged_by_rule,
        _read_status(
            Phase.VALIDATION,
            REJECTED_ID,
            StatusRow(REJECTED_ID, REJECTED_LINE, Reason.VALIDATION, "dropoff_before_pickup", _REJECTED_MESSAGE),
            State.FLAGGED,
            phase=Phase.VALIDATION,
            retryable=False,
        ),
    ),
    GoldenItem(
        "taxi_etl/store_status/flagged_retryable.json",
        _status_table(Phase.STORE),
        _row_key(RETRYABLE_ID),
        _flagged_retryable,
        _read_status(
            Phase.STORE,
            RETRYABLE_ID,
            StatusRow(RETRYABLE_ID, transformed(TRIP_LINE), Reason.STORE, _RETRYABLE_DETAIL, TRANSIENT.cause),
            State.FLAGGED,
            phase=Phase.STORE,
            retryable=True,
        ),
    ),
    GoldenItem(
        "taxi_etl/store_status/cleared_for_redrive.json",
        _status_table(Phase.STORE),
        _row_key(RETRYABLE_ID),
        _cleared,
        _read_status(Phase.STORE, RETRYABLE_ID, StatusRow(RETRYABLE_ID, transformed(TRIP_LINE), 0), State.PENDING, phase=Phase.STORE),
    ),
    GoldenItem(
        "taxi_etl/validation_status/redrive_claimed.json",
        _status_table(Phase.VALIDATION),
        _row_key(REJECTED_ID),
        _redrive_claimed,
        _read_status(
            Phase.VALIDATION,
            REJECTED_ID,
            StatusRow(REJECTED_ID, REJECTED_LINE, 0, generation=2, pending=True),
            State.PENDING,
            phase=Phase.VALIDATION,
            generation=2,
        ),
    ),
    GoldenItem(
        "taxi_etl/validation_status/redrive_started.json",
        _status_table(Phase.VALIDATION),
        _row_key(REJECTED_ID),
        _redrive_started,
        _read_status(
            Phase.VALIDATION,
            REJECTED_ID,
            StatusRow(REJECTED_ID, REJECTED_LINE, 0, generation=2, pending=False),
            State.PENDING,
            phase=Phase.VALIDATION,
            generation=2,
        ),
    ),
    GoldenItem("taxi_etl/trips/trip.json", lambda t: t.trips_table, _row_key(TRIP_ID), _through_store(TRIP_ID, TRIP_LINE), _read_trip),
    GoldenItem(
        "taxi_etl/trips/trip_with_blank_columns.json",
        lambda t: t.trips_table,
        _row_key(SPARSE_ID),
        _through_store(SPARSE_ID, SPARSE_LINE),
        _read_sparse_trip,
    ),
]

GOLDEN_ITEMS = [*RUNNER_STATS, *EVENT_LOG, *TAXI_ETL]
# Items of earlier formats that deployed tables may hold, and that the current code must still read.
EARLIER_FORMATS = [
    EarlierFormat(
        "taxi_etl/trips/earlier/trip_item_version_2.json",
        written_by="a1b1fb3a4ed50371eb65330f83d645464c047e01",  # the last commit of item layout 2 (366c789 made it 3)
        table=lambda t: t.trips_table,
        read=_read_trip_of_item_version_2,
    ),
]
EVERY_GOLDEN: list[GoldenItem | GoldenObject | GoldenMessage] = [*GOLDEN_ITEMS, *BUCKET_OBJECTS, *QUEUE_MESSAGES]


def golden_item(path: str) -> GoldenItem:
    return next(golden for golden in GOLDEN_ITEMS if golden.path == path)


# --- the tests --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployed() -> Iterator[AtRest]:
    with tables_at_rest() as tables:
        yield tables


@pytest.fixture
def at_rest(deployed: AtRest) -> AtRest:
    """Empty tables and bucket for each case."""
    return deployed.emptied()


@pytest.mark.parametrize("golden", GOLDEN_ITEMS, ids=lambda golden: golden.path.removesuffix(".json"))
def test_the_current_code_writes_the_golden_item(golden: GoldenItem, at_rest: AtRest) -> None:
    # Given the golden item of one table and kind, as reviewed and committed
    expected = golden.load()
    # When the real write path runs again with the same fixed inputs, and the item is read back raw
    written = golden.written(at_rest)
    # Then it is the golden item: the same attribute names, types and values
    assert_same_item(golden.path, expected, written)


@pytest.mark.parametrize("golden", GOLDEN_ITEMS, ids=lambda golden: golden.path.removesuffix(".json"))
def test_the_current_code_reads_the_golden_item(golden: GoldenItem, at_rest: AtRest) -> None:
    # Given the golden item stored in a fresh table, as an earlier deployment wrote it
    at_rest.put_golden(golden)
    # When the runtime reads it through its read path
    # Then it gets the domain values the item was written from
    read_or_report(golden.path, golden.read, at_rest)


@pytest.mark.parametrize("earlier", EARLIER_FORMATS, ids=lambda earlier: earlier.path.removesuffix(".json"))
def test_the_current_code_reads_items_of_earlier_formats(earlier: EarlierFormat, at_rest: AtRest) -> None:
    # Given an item an earlier version wrote, stored in a fresh table
    at_rest.put_golden(earlier)
    # When the runtime reads it through its read path
    # Then it gets the domain values, as from an item of the current format
    read_or_report(earlier.path, earlier.read, at_rest)


@pytest.mark.parametrize("golden", BUCKET_OBJECTS, ids=lambda golden: golden.path.removesuffix(".json"))
def test_the_current_code_writes_the_golden_object(golden: GoldenObject, at_rest: AtRest) -> None:
    # Given the golden snapshot object, as reviewed and committed
    expected = golden.load()
    # When the snapshot worker builds the same snapshot of the same events again
    written = golden.written(at_rest)
    # Then it writes the same object under the same key
    changes = [
        f"{name}: {expected.get(name)!r} -> {written.get(name)!r}" for name in ("Key", "Body") if expected.get(name) != written.get(name)
    ]
    assert not changes, stored_format_message(golden.path, "the snapshot worker writes another object", changes)


@pytest.mark.parametrize("golden", BUCKET_OBJECTS, ids=lambda golden: golden.path.removesuffix(".json"))
def test_the_current_code_reads_the_golden_object(golden: GoldenObject, at_rest: AtRest) -> None:
    # Given the golden object in a fresh bucket
    at_rest.put_golden_object(golden)
    # When the runtime reads it
    # Then it gets what the snapshot holds
    read_or_report(golden.path, golden.read, at_rest)


@pytest.mark.parametrize("golden", QUEUE_MESSAGES, ids=lambda golden: golden.path.removesuffix(".json"))
def test_the_current_code_sends_the_golden_message(golden: GoldenMessage, at_rest: AtRest) -> None:
    # Given the golden side-effect message, as reviewed and committed
    expected = golden.load()
    # When the stream router routes the same log entries again
    written = golden.written(at_rest)
    # Then it sends the same body with the same attributes
    changes = [
        f"{name}: {expected[name]!r} -> {written[name]!r}" for name in ("Body", "MessageAttributes") if expected[name] != written[name]
    ]
    assert not changes, stored_format_message(golden.path, "the stream router sends another message", changes)


@pytest.mark.parametrize("golden", QUEUE_MESSAGES, ids=lambda golden: golden.path.removesuffix(".json"))
def test_the_current_code_reads_the_golden_message(golden: GoldenMessage, at_rest: AtRest) -> None:
    # Given the golden message, as an earlier deployment's router sent it
    message = golden.load()
    # When the worker parses it
    # Then it gets the side effect the router meant
    read_or_report(golden.path, lambda _: golden.read(message), at_rest)


def test_every_golden_file_is_tested_and_every_table_has_one(at_rest: AtRest) -> None:
    # Given the golden files on disk and the cases above
    on_disk = {path.relative_to(GOLDEN_DIR).as_posix() for path in GOLDEN_DIR.rglob("*.json")}
    cases = {golden.path for golden in [*EVERY_GOLDEN, *EARLIER_FORMATS]} | set(BULK_GOLDEN_FILES)
    # Then each file is a case and each case has its file
    assert on_disk == cases
    # and every table the stacks deploy holds at least one golden kind (a new table needs its goldens)
    deployed = {logical_id for stack in at_rest.templates for logical_id in resources_of_type(stack, "AWS::DynamoDB::Table")}
    assert {golden.table(at_rest) for golden in GOLDEN_ITEMS} == deployed


@pytest.mark.parametrize(
    ("change", "reported"),
    [
        ({"rename": ("high_water", "highWater")}, ["attribute 'highWater' is new", "attribute 'high_water' is no longer written"]),
        ({"retype": ("message_count", {"S": "21"})}, ["attribute 'message_count' changed type"]),
        ({"drop": "gaps"}, ["attribute 'gaps' is no longer written"]),
        ({"retype": ("total_meters", {"N": "1234.50"})}, ["attribute 'total_meters' changed value"]),
        ({"retype": ("chunks", {"M": {"count": {"N": "1"}}})}, ["attribute 'chunks' changed type"]),
    ],
)
def test_a_renamed_retyped_or_dropped_attribute_is_reported_as_a_stored_format_change(change: dict[str, Any], reported: list[str]) -> None:
    # Given the golden run item and a written item that differs from it in one attribute
    golden = golden_item("runner_stats/run_stats/run_item.json").load()
    written = dict(golden)
    if "rename" in change:
        old, new = change["rename"]
        written[new] = written.pop(old)
    if "retype" in change:
        name, value = change["retype"]
        written[name] = value
    if "drop" in change:
        del written[change["drop"]]
    # When they are compared
    with pytest.raises(AssertionError) as failure:
        assert_same_item("runner_stats/run_stats/run_item.json", golden, written)
    # Then the failure names the change, says it is a stored-format change and how to regenerate deliberately
    message = str(failure.value)
    assert message.startswith("STORED-FORMAT CHANGE in tests/golden/runner_stats/run_stats/run_item.json")
    for text in reported:
        assert text in message
    assert REGENERATE in message and "CHANGELOG" in message and "upgrade note" in message


def test_a_renamed_attribute_inside_a_map_is_reported_by_its_path() -> None:
    # Given the golden tendency item, and a written one whose current run's label is renamed
    golden = golden_item("runner_stats/tendency/user_tendency.json").load()
    current = dict(golden["current_run"]["M"])
    current["name"] = current.pop("label")
    # When they are compared
    with pytest.raises(AssertionError) as failure:
        assert_same_item("runner_stats/tendency/user_tendency.json", golden, {**golden, "current_run": {"M": current}})
    # Then the failure names the attribute inside the map, and only that map
    message = str(failure.value)
    assert "attribute 'current_run' > 'label' is no longer written" in message
    assert "attribute 'current_run' > 'name' is new" in message
    assert "previous_run" not in message


def test_only_the_random_tokens_are_normalised() -> None:
    # Given a written log entry, which carries its write's random token
    written = item_json(
        {"log_id": {"S": LOG_ID}, "seq": {"N": "1"}, "kind": {"S": EntryKind.SET_CELL.value}, "write_token": {"S": "0f" * 16}}
    )
    # Then the token, and only the token, becomes the golden files' placeholder
    assert with_token_placeholders(written) == {**written, "write_token": TOKEN_PLACEHOLDER}
    # and a token of another type or shape is refused, not normalised
    for token in ({"N": "1"}, {"S": "not-a-uuid"}, {"S": "0F" * 16}):
        with pytest.raises(AssertionError, match="not a uuid4 hex string"):
            with_token_placeholders({**written, "write_token": token})


# --- regeneration (a deliberate, reviewed step; see the module docstring) ------------------------


def regenerate() -> list[Path]:
    written: list[Path] = []
    with tables_at_rest() as tables:
        for golden in EVERY_GOLDEN:
            document = golden.written(tables.emptied())
            path = GOLDEN_DIR / golden.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
            written.append(path)
    return written


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        raise SystemExit(
            f"usage: {REGENERATE}\n(rewrites tests/golden/ from the current code: review the diff, see tests/golden/README.md)"
        )
    import tests.conftest  # noqa: F401  (the embedded cloud's region and dummy credentials)

    for path in regenerate():
        print(path.relative_to(ROOT))
