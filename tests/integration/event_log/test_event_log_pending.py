"""Stuck pending snapshots on the embedded cloud: the scheduled check
(runtime.event_log.pending_check_handler.handler), the operator's `python -m ops.event_log_pending`,
and the worker's build duration.

The check's environment is the one infra gives it (PENDING_TABLE, LEASE_SECONDS,
STUCK_AFTER_SECONDS, RESEND_STUCK_SNAPSHOTS on, SNAPSHOT_QUEUE_URL), with a shorter threshold;
its metrics are read from the EMF document the handler prints.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import pytest

from devtools.aws.faults import SimulatedCrash
from devtools.aws.lambda_context import ClockedLambdaContext, FakeLambdaContext
from devtools.event_log_world import EventLogWorld
from devtools.sheet_workload import sheet_edits
from ops import event_log_pending
from ops.cli import UsageError, resources_from_stack
from runtime.event_log import pending_check_handler, pending_check_wiring, worker_handler
from runtime.event_log.contract import HANDLER_WORKER
from runtime.event_log.messages import SideEffect, SideEffectMessage, parse_message, side_effect_request_id
from runtime.event_log.objects import S3Objects, SqsQueue
from runtime.event_log.snapshots import Outcome, SnapshotWorker
from runtime.event_log.store import DynamoLogStore, DynamoPendingStore
from runtime.shared import observability
from runtime.shared.aws import Clients

LOG = "sheet-pending"
SEQ = Decimal("20.5")  # snapshot 1 of the small configuration (a snapshot every 20 events)
STUCK_AFTER = 1800
SERVICE = "event-log-pending-check"
PENDING_CHECK_HANDLER = "runtime.event_log.pending_check_handler.handler"


# --- helpers ----------------------------------------------------------------------------------


@dataclass
class Check:
    """The deployed check, as the schedule invokes it, and what it printed."""

    world: EventLogWorld
    capsys: pytest.CaptureFixture[str]
    logs: io.StringIO
    environment: dict[str, str] = field(default_factory=dict)

    def run(self) -> tuple[dict[str, Any], dict[str, tuple[str, float]], list[dict[str, Any]]]:
        """The handler's answer, its metrics (name -> (unit, value)) and its log records."""
        self.capsys.readouterr()
        self.logs.seek(0)
        self.logs.truncate()
        context: Any = FakeLambdaContext(function_name="Onceflow-dev-EventLog-PendingCheck")
        response = pending_check_handler.handler({"source": "aws.events", "detail-type": "Scheduled Event"}, context)
        return response, emf_metrics(self.capsys.readouterr().out), [json.loads(line) for line in self.logs.getvalue().splitlines()]


def clear_cold_start_caches() -> None:
    for cached in (pending_check_handler.settings, pending_check_handler.deps):
        cached.cache_clear()


@pytest.fixture
def check(log_world: EventLogWorld, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Check]:
    """The check's environment set (as infra writes it), its clock the world's, its logs captured."""
    environment = {**log_world.cloud.function_environment(PENDING_CHECK_HANDLER), "STUCK_AFTER_SECONDS": str(STUCK_AFTER)}
    assert environment["RESEND_STUCK_SNAPSHOTS"] == "true" and environment["SNAPSHOT_QUEUE_URL"] == log_world.worker.options.queue_url
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    # Powertools reads namespace and service at import; in Lambda the function's variables come first.
    monkeypatch.setattr(observability.metrics, "namespace", "onceflow")
    monkeypatch.setattr(observability.metrics, "service", SERVICE)
    # The deployed entry point, built as at a cold start, with the world's clock.
    built = functools.cache(lambda: replace(pending_check_wiring.build(pending_check_handler.settings(), Clients()), clock=log_world.clock))
    monkeypatch.setattr(pending_check_handler, "deps", built)
    logs = io.StringIO()
    handler = observability.logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    monkeypatch.setattr(handler, "stream", logs)
    clear_cold_start_caches()
    yield Check(log_world, capsys, logs, environment)
    clear_cold_start_caches()
    observability.metrics.clear_metrics()


def emf_metrics(stdout: str) -> dict[str, tuple[str, float]]:
    """The one EMF document of the invocation: namespace onceflow, dimension service only."""
    documents = [json.loads(line) for line in stdout.splitlines() if line.startswith("{") and '"_aws"' in line]
    assert len(documents) == 1, stdout
    document = documents[0]
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "onceflow"
    assert directive["Dimensions"] == [["service"]] and document["service"] == SERVICE
    values: dict[str, tuple[str, float]] = {}
    for metric in directive["Metrics"]:
        points = document[metric["Name"]]
        points = points if isinstance(points, list) else [points]
        assert len(points) == 1, f"{metric['Name']} has {points}"
        values[metric["Name"]] = (metric["Unit"], points[0])
    return values


def receive_one(world: EventLogWorld) -> dict[str, Any]:
    [message] = world.clients.sqs.receive_message(
        QueueUrl=world.worker.options.queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )["Messages"]
    return dict(message)


def parse(message: dict[str, Any]) -> Any:
    return parse_message(message["Body"], message.get("MessageAttributes", {}), SideEffect.BUILD_SNAPSHOT)


class DyingObjects(S3Objects):
    """The bucket of a worker whose process dies right after it wrote its first chunk."""

    def put(self, key: str, body: bytes) -> None:
        super().put(key, body)
        if key.endswith(".ndjson"):
            raise SimulatedCrash("worker died mid-build")


class WatchedObjects(S3Objects):
    """The bucket of a live worker: after its first chunk, two minutes pass and someone looks."""

    def __init__(self, bucket: str, *, client: Any, world: EventLogWorld, look: Callable[[], None]) -> None:
        super().__init__(bucket, client=client)
        self.world = world
        self.look = look
        self.looked = False

    def put(self, key: str, body: bytes) -> None:
        super().put(key, body)
        if key.endswith(".ndjson") and not self.looked:
            self.looked = True
            self.world.clock.advance(120)
            self.look()


def worker_with(world: EventLogWorld, objects: S3Objects) -> SnapshotWorker:
    return SnapshotWorker(
        DynamoLogStore(world.worker.log_table, client=world.clients.dynamodb),
        DynamoPendingStore(world.worker.pending_table, client=world.clients.dynamodb),
        objects,
        SqsQueue(client=world.clients.sqs),
        world.worker.options,
        clock=world.clock,
    )


def die_mid_build_and_lose_the_message(world: EventLogWorld) -> Decimal:
    """Snapshot 1's worker claims it, writes a chunk and dies; a duplicate's delete took its only message."""
    world.append_edits(LOG, sheet_edits(seed=31, count=20))
    world.route()
    message = receive_one(world)
    dying = worker_with(world, DyingObjects(world.worker.bucket, client=world.clients.s3))
    with pytest.raises(SimulatedCrash):
        dying.handle(parse(message), message["ReceiptHandle"], lambda: 10**6, "dying-worker")
    world.clients.sqs.delete_message(QueueUrl=world.worker.options.queue_url, ReceiptHandle=message["ReceiptHandle"])
    return Decimal(parse(message).seq)


def pending_tool(world: EventLogWorld, *extra: str) -> int:
    argv = ["--pending-table", world.worker.pending_table, "--lease-seconds", str(int(world.worker.options.lease_seconds))]
    return event_log_pending.main([*argv, "--stuck-after", str(STUCK_AFTER), *extra], dynamodb=world.clients.dynamodb, clock=world.clock)


# --- the scheduled check ------------------------------------------------------------------------


def test_an_empty_pending_table_publishes_zero_age_and_no_stuck_snapshot(check: Check) -> None:
    # Given nothing pending
    # When the schedule invokes the check
    response, metrics, logs = check.run()
    # Then every metric is published, all zero, and nothing is logged as stuck
    assert metrics == {
        "OldestPendingSnapshotAgeSeconds": ("Seconds", 0),
        "PendingSnapshots": ("Count", 0),
        "StuckPendingSnapshots": ("Count", 0),
        "StuckSnapshotsResent": ("Count", 0),
    }
    assert response == {"pending": 0, "stuck": 0, "oldest_age_seconds": 0}
    assert [record["message"] for record in logs] == ["pending snapshots checked"]


def test_a_worker_that_died_mid_build_leaves_a_stuck_row_that_the_check_reports(check: Check) -> None:
    world = check.world
    # Given a worker that died mid-build, with its message gone
    seq = die_mid_build_and_lose_the_message(world)
    # When the check runs within the threshold
    world.clock.advance(STUCK_AFTER)
    _, metrics, _ = check.run()
    # Then the row is pending but not stuck yet (its message could still come back)
    assert metrics["StuckPendingSnapshots"] == ("Count", 0) and metrics["OldestPendingSnapshotAgeSeconds"] == ("Seconds", STUCK_AFTER)
    # When it runs after the threshold
    world.clock.advance(1)
    response, metrics, logs = check.run()
    # Then the row is stuck, the metric shows its age, and the log names it, its holder and the recovery
    assert metrics == {
        "OldestPendingSnapshotAgeSeconds": ("Seconds", STUCK_AFTER + 1),
        "PendingSnapshots": ("Count", 1),
        "StuckPendingSnapshots": ("Count", 1),
        "StuckSnapshotsResent": ("Count", 1),
    }
    assert response == {"pending": 1, "stuck": 1, "oldest_age_seconds": STUCK_AFTER + 1}
    [stuck] = [record for record in logs if record["message"] == "stuck pending snapshot"]
    assert (stuck["log_id"], stuck["seq"], stuck["holder"], stuck["lease_expired"]) == (LOG, str(seq), "dying-worker", True)
    assert stuck["age_seconds"] == STUCK_AFTER + 1 and stuck["level"] == "WARNING"
    assert f"--log-id {LOG} --from-position 20" in stuck["recover"]
    # and its build message was sent again, once
    assert world.depth(world.worker.options.queue_url) == 1


def test_a_live_build_is_not_stuck(check: Check) -> None:
    world = check.world
    # Given a worker building snapshot 1, two minutes after its claim, when the check and the tool look
    world.append_edits(LOG, sheet_edits(seed=32, count=20))
    world.route()
    message = receive_one(world)
    looks: list[Any] = []

    def look() -> None:
        looks.append((check.run(), pending_tool(world)))

    worker = worker_with(world, WatchedObjects(world.worker.bucket, client=world.clients.s3, world=world, look=look))
    # When the build runs to the end
    assert worker.handle(parse(message), message["ReceiptHandle"], lambda: 10**6, "live-worker") == Outcome.BUILT
    # Then mid-build the check saw one pending snapshot, two minutes old, not stuck; the tool exited 0
    [((response, metrics, logs), tool_status)] = looks
    assert metrics["StuckPendingSnapshots"] == ("Count", 0) and metrics["OldestPendingSnapshotAgeSeconds"] == ("Seconds", 120)
    assert response["pending"] == 1 and tool_status == 0
    assert not [record for record in logs if record["message"] == "stuck pending snapshot"]
    # and the build took the two minutes
    assert worker.progress.build_seconds == [120.0]


def test_a_stuck_row_whose_holder_died_is_re_sent_by_default_and_built_once(check: Check) -> None:
    world = check.world
    # Given a stuck row whose holder died with its only message, and the check with the environment infra gives it
    die_mid_build_and_lose_the_message(world)
    world.clock.advance(STUCK_AFTER + 1)
    # When the check runs twice before any worker catches up
    _, first, _ = check.run()
    _, second, _ = check.run()
    # Then each run sent the router's message once (same request id), and the workers build it once
    assert first["StuckSnapshotsResent"] == second["StuckSnapshotsResent"] == ("Count", 1)
    request_ids = {m["MessageAttributes"]["RequestId"]["StringValue"] for m in peek(world)}
    assert len(request_ids) == 1
    source = world.snapshot_source()
    world.drain([source, world.payload_source()])
    assert world.verify(LOG) == []
    assert source.stats.delivered == 2
    # and afterwards nothing is pending or sent
    _, after, _ = check.run()
    assert after == {
        "OldestPendingSnapshotAgeSeconds": ("Seconds", 0),
        "PendingSnapshots": ("Count", 0),
        "StuckPendingSnapshots": ("Count", 0),
        "StuckSnapshotsResent": ("Count", 0),
    }


def test_a_row_without_a_holder_whose_message_is_gone_is_re_sent_after_its_due_time(check: Check) -> None:
    world = check.world
    # Given snapshot 2 deferred (its predecessor unbuilt), snapshot 1 built, and snapshot 2's message lost
    world.append_edits(LOG, sheet_edits(seed=35, count=40))
    world.route()
    first, second = sorted(peek_and_take(world), key=lambda message: Decimal(parse(message).seq))
    patient = world.snapshot_worker()
    assert patient.handle(parse(second), second["ReceiptHandle"], lambda: 10**6, "deferring-worker") == Outcome.DEFERRED
    world.clients.sqs.delete_message(QueueUrl=world.worker.options.queue_url, ReceiptHandle=second["ReceiptHandle"])
    assert world.snapshot_worker().handle(parse(first), first["ReceiptHandle"], lambda: 10**6, "builder") == Outcome.BUILT
    deferred = DynamoPendingStore(world.worker.pending_table, client=world.clients.dynamodb).get(LOG, Decimal("40.5"))
    assert deferred is not None and deferred.active is None and deferred.due is not None
    # When the check runs after the deferral's due time, but within the threshold of it
    world.clock.advance(deferred.due - world.clock() + STUCK_AFTER)
    _, waiting, _ = check.run()
    # Then the row only waits: its message could still come back
    assert (waiting["StuckPendingSnapshots"], waiting["StuckSnapshotsResent"]) == (("Count", 0), ("Count", 0))
    # When it runs once the message is overdue by more than the threshold
    world.clock.advance(1)
    _, stuck, _ = check.run()
    # Then the build message is sent again, and the snapshot is built from its predecessor
    assert (stuck["StuckPendingSnapshots"], stuck["StuckSnapshotsResent"]) == (("Count", 1), ("Count", 1))
    world.drain()
    assert world.verify(LOG) == []


def test_with_re_sending_switched_off_the_check_only_reports(check: Check, monkeypatch: pytest.MonkeyPatch) -> None:
    world = check.world
    # Given a stuck row, and an operator who switched re-sending off to recover by hand
    die_mid_build_and_lose_the_message(world)
    world.clock.advance(STUCK_AFTER + 1)
    monkeypatch.setenv("RESEND_STUCK_SNAPSHOTS", "false")
    clear_cold_start_caches()
    # When the check runs
    _, metrics, _ = check.run()
    # Then it reports the row and sends nothing
    assert (metrics["StuckPendingSnapshots"], metrics["StuckSnapshotsResent"]) == (("Count", 1), ("Count", 0))
    assert world.depth(world.worker.options.queue_url) == 0


def peek_and_take(world: EventLogWorld) -> list[dict[str, Any]]:
    """Every visible snapshot message, received and held (as invocations would hold them)."""
    url = world.worker.options.queue_url
    messages: list[dict[str, Any]] = []
    while batch := world.clients.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get("Messages"):
        messages.extend(batch)
    return messages


def peek(world: EventLogWorld) -> list[dict[str, Any]]:
    """Every visible snapshot message, made visible again at once."""
    url = world.worker.options.queue_url
    messages: list[dict[str, Any]] = []
    while batch := world.clients.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get("Messages"):
        messages.extend(batch)
    for message in messages:
        world.clients.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    return messages


# --- the operator tool --------------------------------------------------------------------------


def test_the_tool_lists_a_stuck_snapshot_with_its_recovery_and_exits_1(log_world: EventLogWorld, capsys: Any) -> None:
    # Given a worker that died mid-build with its message gone, over the threshold ago
    seq = die_mid_build_and_lose_the_message(log_world)
    log_world.clock.advance(STUCK_AFTER + 1)
    # When the tool lists the pending snapshots (the bar forced on, as on a terminal)
    status = pending_tool(log_world, "--progress")
    captured = capsys.readouterr()
    # Then it shows the row (age, holder, expired lease, STUCK), a summary, the command to recover, and exits 1
    assert status == 1
    header, line, summary, advice, command = captured.out.splitlines()
    assert header.split()[:3] == ["LOG", "ID", "SEQ"]
    assert line.split()[:3] == [LOG, str(seq), "30m01s"]
    assert line.split()[-4:] == ["0", "dying-worker", "expired", "STUCK"]
    table = log_world.worker.pending_table
    assert (
        summary
        == f"1 pending snapshots in {table}: 0 building, 0 waiting, 1 stuck, oldest 30m01s ({LOG} at {seq}); listed 1, 1 of them stuck"
    )
    assert advice.startswith("to recover")
    assert command.strip() == f"python -m ops.event_log_reprocess --stack <EventLog stack> --log-id {LOG} --from-position 20 --dry-run"
    assert "scanning" in captured.err and "1/1" in captured.err
    # When it runs again (read-only) with filters that exclude the row
    # Then it lists nothing and exits 0
    assert pending_tool(log_world, "--older-than", str(STUCK_AFTER + 5)) == 0
    assert "listed 0, 0 of them stuck" in capsys.readouterr().out


def test_the_tool_separates_stuck_from_waiting_rows(log_world: EventLogWorld, capsys: Any) -> None:
    # Given a stuck snapshot in one log, and in another a dead holder whose lease just expired
    die_mid_build_and_lose_the_message(log_world)
    log_world.clock.advance(STUCK_AFTER + 1)
    log_world.append_edits("sheet-other", sheet_edits(seed=33, count=20))
    log_world.route()
    message = receive_one(log_world)
    with pytest.raises(SimulatedCrash):
        worker_with(log_world, DyingObjects(log_world.worker.bucket, client=log_world.clients.s3)).handle(
            parse(message), message["ReceiptHandle"], lambda: 10**6, "recent-worker"
        )
    log_world.clock.advance(log_world.worker.options.lease_seconds + 1)
    # When the tool lists everything, then only the stuck ones
    assert pending_tool(log_world) == 1
    everything = capsys.readouterr().out
    assert pending_tool(log_world, "--stuck-only") == 1
    stuck_only = capsys.readouterr().out
    # Then the full list has both, oldest first, the stuck one marked; --stuck-only drops the waiting one
    assert [line.split()[0] for line in everything.splitlines()[1:3]] == [LOG, "sheet-other"]
    assert everything.splitlines()[2].split()[-2:] == ["expired", "waiting"]
    assert "2 pending snapshots" in everything and "1 waiting, 1 stuck" in everything and "listed 2, 1 of them stuck" in everything
    assert "sheet-other" not in stuck_only.split("\n", 2)[1] and "listed 1, 1 of them stuck" in stuck_only


def test_the_tool_reads_the_table_from_the_stack_outputs_and_refuses_bad_arguments(log_world: EventLogWorld, capsys: Any) -> None:
    # Given a CloudFormation client whose EventLog stack names the pending table
    class Outputs:
        def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803 (boto3's parameter name)
            outputs = [{"OutputKey": "PendingTableName", "OutputValue": log_world.worker.pending_table}] if StackName == "ok" else []
            return {"Stacks": [{"Outputs": outputs}]}

    # When the table is looked up by stack, for a good and a foreign stack
    # Then the table is found, and a stack without the output is refused with a message
    kind = event_log_pending.PENDING_TABLE
    assert resources_from_stack(Outputs(), "ok", kind) == {"pending_table": log_world.worker.pending_table}
    with pytest.raises(UsageError, match=r"has no outputs \['PendingTableName'\]; is it an onceflow EventLog stack"):
        resources_from_stack(Outputs(), "other", kind)
    # When the tool gets no table, both a stack and a table, a negative age, or a threshold below the lease
    for argv in ([], ["--stack", "s", "--pending-table", "t"], ["--pending-table", "t", "--older-than", "-1"]):
        with pytest.raises(SystemExit) as stopped:
            event_log_pending.main(argv)
        # Then it stops with usage error 2
        assert stopped.value.code == 2
    with pytest.raises(SystemExit):
        event_log_pending.main(["--pending-table", "t", "--lease-seconds", "1200", "--stuck-after", "600"])
    assert "stuck_after_seconds must be at least lease_seconds" in capsys.readouterr().err


# --- the worker's build duration ---------------------------------------------------------------


def test_build_seconds_span_the_whole_build_across_a_takeover_and_are_published(log_world: EventLogWorld) -> None:
    # Given a worker that died mid-build, and its message delivered again after the lease
    die_mid_build_and_lose_the_message(log_world)
    log_world.clock.advance(log_world.worker.options.lease_seconds + 1)
    effect = SideEffect.BUILD_SNAPSHOT
    SqsQueue(client=log_world.clients.sqs).send(
        log_world.worker.options.queue_url, [SideEffectMessage(effect, LOG, SEQ, side_effect_request_id(effect, LOG, SEQ))]
    )
    published: list[dict[str, Any]] = []
    successor = log_world.snapshot_worker()

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        context: Any = ClockedLambdaContext(clock=log_world.clock, timeout_seconds=log_world.function_timeout(HANDLER_WORKER))
        try:
            return worker_handler.handle(event, context, log_world.worker_deps(successor))
        finally:
            published.append(copy.deepcopy(dict(observability.metrics.metric_set)))
            observability.metrics.clear_metrics()

    # When the successor's invocation takes the claim over and builds it
    assert log_world.snapshot_source(invoke).poll_once() == 1
    # Then the build counts from the first claim (the dead worker's), not from the takeover, and is published in seconds
    build_seconds = log_world.worker.options.lease_seconds + 1
    assert successor.progress.build_seconds == [build_seconds]
    [metrics] = published
    assert (metrics["SnapshotBuildSeconds"]["Unit"], metrics["SnapshotBuildSeconds"]["Value"]) == ("Seconds", [build_seconds])
    assert metrics["SnapshotsBuilt"]["Value"] == [1.0]
    assert log_world.verify(LOG) == []


def test_a_handling_that_builds_nothing_publishes_no_build_seconds(log_world: EventLogWorld) -> None:
    # Given snapshot 2's message before snapshot 1 is built
    log_world.append_edits(LOG, sheet_edits(seed=34, count=40))
    log_world.route()
    published: list[dict[str, Any]] = []

    def keep(event: dict[str, Any]) -> dict[str, Any]:
        context: Any = ClockedLambdaContext(clock=log_world.clock, timeout_seconds=log_world.function_timeout(HANDLER_WORKER))
        worker = log_world.snapshot_worker()
        try:
            return worker_handler.handle(event, context, log_world.worker_deps(worker))
        finally:
            published.append(copy.deepcopy(dict(observability.metrics.metric_set)))
            observability.metrics.clear_metrics()

    # When the workers drain the queue (whatever arrives first: snapshot 2 may be deferred)
    log_world.drain([log_world.snapshot_source(keep), log_world.payload_source()])
    # Then only the handlings that built a snapshot published a duration
    assert log_world.verify(LOG) == []
    built = [metrics for metrics in published if "SnapshotsBuilt" in metrics]
    assert len(built) == 2 and all(len(metrics["SnapshotBuildSeconds"]["Value"]) == 1 for metrics in built)
    assert all("SnapshotBuildSeconds" not in metrics for metrics in published if "SnapshotsBuilt" not in metrics)
