"""The stream router on the table's real stream records, filtered like its event source mapping."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from devtools.aws.table_stream import StreamFilter, dynamodb_stream_event, filter_patterns
from devtools.event_log_world import EventLogWorld
from devtools.sheet_workload import sheet_edits
from runtime.event_log import contract
from runtime.event_log.messages import SideEffect, SideEffectMessage, side_effect_request_id
from runtime.event_log.side_effects import StreamRouter

LOG = "sheet-r"


def queued(world: EventLogWorld, url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := world.clients.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get("Messages"):
        messages.extend(batch)
    return messages


def test_only_snapshot_and_large_payload_inserts_reach_the_router(log_world: EventLogWorld) -> None:
    # Given 45 appended events: their inserts, the head's writes, two Snapshot entries
    log_world.append_edits(LOG, sheet_edits(seed=31, count=45))
    # When the stream is read through the mapping's FilterCriteria
    records = log_world.stream.poll()
    # Then only the two inserted Snapshot entries pass; everything else is dropped before any invocation
    assert [record.record["dynamodb"]["NewImage"]["kind"]["S"] for record in records] == ["Snapshot", "Snapshot"]
    assert all(record.record["eventName"] == "INSERT" for record in records)
    assert log_world.stream.seen >= 45 + 45 + 2 + 2
    assert log_world.stream.dropped == log_world.stream.seen - 2


def stream_record(event_name: str, kind: str | None) -> dict[str, Any]:
    image = {"log_id": {"S": LOG}, "seq": {"N": "20.5"}} | ({"kind": {"S": kind}} if kind else {})
    body: dict[str, Any] = {"Keys": {"log_id": {"S": LOG}, "seq": {"N": "20.5"}}, "SequenceNumber": "7", "SizeBytes": 90}
    if event_name != "REMOVE":
        body["NewImage"] = image
    if event_name != "INSERT":
        body["OldImage"] = image
    return {"eventName": event_name, "eventSource": "aws:dynamodb", "dynamodb": body}


def test_the_synthesized_filter_delivers_inserts_of_side_effect_entries_and_drops_the_rest(log_world: EventLogWorld) -> None:
    # Given the router mapping's filter, as synthesized, applied by the embedded cloud's matcher
    (pattern,) = filter_patterns(log_world.cloud.event_source_mapping(contract.HANDLER_ROUTER))
    stream_filter = StreamFilter(pattern)
    # When records of each kind of write are filtered
    answers = {
        (event_name, kind): stream_filter.matches(stream_record(event_name, kind))
        for event_name in ("INSERT", "MODIFY", "REMOVE")
        for kind in (*contract.SIDE_EFFECT_KINDS, "SetCell", None)
    }
    # Then only the inserts of Snapshot and LargePayload entries are delivered
    assert {key for key, delivered in answers.items() if delivered} == {("INSERT", kind) for kind in contract.SIDE_EFFECT_KINDS}


def test_one_message_per_side_effect_with_a_deterministic_request_id(log_world: EventLogWorld) -> None:
    # Given the filtered stream records of two Snapshot entries
    log_world.append_edits(LOG, sheet_edits(seed=32, count=45))
    records = log_world.stream.poll()
    # When the router handles them, and then handles them again (a redelivered batch)
    for _ in range(2):
        assert log_world.invoke_router(dynamodb_stream_event(records)) == {"batchItemFailures": []}
    # Then each delivery sent one message per entry, carrying the same request id both times
    messages = queued(log_world, log_world.worker.options.queue_url)
    ids = sorted(message["MessageAttributes"]["RequestId"]["StringValue"] for message in messages)
    expected = sorted(side_effect_request_id(SideEffect.BUILD_SNAPSHOT, LOG, Decimal(seq)) for seq in ("20.5", "40.5"))
    assert ids == sorted(expected * 2)
    assert queued(log_world, log_world.finalizer.queue_url) == []


class RefusingQueue:
    """SQS that refuses the messages of one request id (a throttle, say) and takes the rest."""

    def __init__(self, refused: str) -> None:
        self.refused = refused
        self.sent: list[str] = []

    def send(self, queue_url: str, messages: Sequence[SideEffectMessage], delay_seconds: int = 0) -> list[str]:
        self.sent.extend(m.request_id for m in messages if m.request_id != self.refused)
        return [m.request_id for m in messages if m.request_id == self.refused]

    def change_visibility(self, queue_url: str, receipt_handle: str, seconds: int) -> bool:
        raise AssertionError("the router never changes visibility")


def test_a_record_sqs_refused_is_reported_so_lambda_retries_from_it(log_world: EventLogWorld) -> None:
    # Given two Snapshot records, and SQS refusing the second one's message
    log_world.append_edits(LOG, sheet_edits(seed=33, count=45))
    records = log_world.stream.poll()
    second = side_effect_request_id(SideEffect.BUILD_SNAPSHOT, LOG, Decimal("40.5"))
    queue = RefusingQueue(second)
    # When the router handles the batch
    report = StreamRouter(queue, log_world.router.queues).route(dynamodb_stream_event(records)["Records"])
    # Then the refused record is reported by its sequence number, the other was sent
    assert report.batch_item_failures() == [{"itemIdentifier": records[1].sequence_number}]
    assert report.sent == 1 and queue.sent == [side_effect_request_id(SideEffect.BUILD_SNAPSHOT, LOG, Decimal("20.5"))]


def test_a_record_with_no_side_effect_is_reported_not_dropped(log_world: EventLogWorld) -> None:
    # Given a record that got past the filter but names no side effect (a bug upstream)
    broken = {
        "eventName": "INSERT",
        "dynamodb": {"SequenceNumber": "900", "NewImage": {"kind": {"S": "SetCell"}, "log_id": {"S": LOG}, "seq": {"N": "1"}}},
    }
    # When the router handles it
    report = StreamRouter(RefusingQueue(""), log_world.router.queues).route([broken])
    # Then it is reported (retried, then kept by the mapping's on-failure destination), never silently dropped
    assert report.batch_item_failures() == [{"itemIdentifier": "900"}]


def test_the_deployed_handler_routes_with_its_synthesized_settings_and_publishes_its_count(
    log_world: EventLogWorld, monkeypatch: Any, capsys: Any
) -> None:
    # Given the Lambda entry point with the synthesized function's environment, and two Snapshot records
    from devtools.aws.lambda_context import FakeLambdaContext
    from runtime.event_log import router_handler

    for name, value in log_world.cloud.function_environment("runtime.event_log.router_handler.handler").items():
        monkeypatch.setenv(name, value)
    router_handler.settings.cache_clear()
    router_handler.deps.cache_clear()
    log_world.append_edits(LOG, sheet_edits(seed=33, count=45))
    records = log_world.stream.poll()
    try:
        # When Lambda invokes it with the filtered batch
        answer = router_handler.handler(dynamodb_stream_event(records), FakeLambdaContext())
    finally:
        router_handler.settings.cache_clear()
        router_handler.deps.cache_clear()
    # Then nothing is reported failed, both messages are queued, and the count is published
    assert answer == {"batchItemFailures": []}
    assert len(queued(log_world, log_world.worker.options.queue_url)) == 2
    emf = [line for line in capsys.readouterr().out.splitlines() if '"SideEffectsSent"' in line]
    assert len(emf) == 1 and '"SideEffectsSent":[2.0]' in emf[0].replace(" ", "")
