"""The SQS partial batch (runtime/event_log/sqs_batch.py): the item
failures are exactly the messages that stay queued, and a batch that fails entirely is reported,
not raised."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from runtime.event_log.messages import SideEffect, SideEffectMessage
from runtime.event_log.sqs_batch import POISON_RETRY_CAP_SECONDS, process_batch
from tests.events.loader import load_event

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/onceflow-dev-snapshots"


class RecordingQueue:
    def __init__(self) -> None:
        self.visibility: list[tuple[str, int]] = []

    def send(self, queue_url: str, messages: Sequence[SideEffectMessage], delay_seconds: int = 0) -> list[str]:
        raise AssertionError("the batch never sends")

    def change_visibility(self, queue_url: str, receipt_handle: str, seconds: int) -> bool:
        self.visibility.append((receipt_handle, seconds))
        return True


def snapshot_records(count: int) -> list[dict[str, Any]]:
    template = load_event("event_log/sqs_snapshot_message.json")["Records"][0]
    records = []
    for index in range(count):
        record = copy.deepcopy(template)
        record["messageId"] = f"message-{index}"
        record["receiptHandle"] = f"receipt-{index}"
        records.append(record)
    return records


def test_only_the_messages_act_keeps_are_item_failures() -> None:
    # Given three messages, the second of which act keeps queued
    records = snapshot_records(3)
    seen: list[str] = []

    def act(message: SideEffectMessage, record: Mapping[str, Any]) -> bool:
        seen.append(str(record["messageId"]))
        return record["messageId"] != "message-1"

    # When the batch runs
    failures = process_batch(records, SideEffect.BUILD_SNAPSHOT, RecordingQueue(), QUEUE_URL, act)
    # Then every message was acted on in order and only the kept one is reported
    assert seen == ["message-0", "message-1", "message-2"]
    assert failures == [{"itemIdentifier": "message-1"}]


def test_a_batch_that_fails_entirely_is_reported_not_raised() -> None:
    # Given an act that raises on every message
    def act(message: SideEffectMessage, record: Mapping[str, Any]) -> bool:
        raise RuntimeError("DynamoDB is down")

    # When the batch runs
    failures = process_batch(snapshot_records(2), SideEffect.BUILD_SNAPSHOT, RecordingQueue(), QUEUE_URL, act)
    # Then both stay queued and the invocation itself succeeds
    assert failures == [{"itemIdentifier": "message-0"}, {"itemIdentifier": "message-1"}]


def test_an_empty_batch_has_no_failures() -> None:
    # Given no records, When the batch runs, Then nothing is reported and act is never called
    assert process_batch([], SideEffect.BUILD_SNAPSHOT, RecordingQueue(), QUEUE_URL, lambda m, r: False) == []


def test_a_poison_message_is_kept_with_a_short_visibility_and_the_rest_go_on() -> None:
    # Given a message whose body is not a side effect, then a good one
    poison, good = snapshot_records(2)
    poison["body"] = "not json"
    poison["attributes"]["ApproximateReceiveCount"] = "3"
    queue = RecordingQueue()
    acted: list[str] = []

    def act(message: SideEffectMessage, record: Mapping[str, Any]) -> bool:
        acted.append(str(record["messageId"]))
        return True

    # When the batch runs
    failures = process_batch([poison, good], SideEffect.BUILD_SNAPSHOT, queue, QUEUE_URL, act)
    # Then the poison message stays queued with a retry delay within the cap, and the good one is done
    assert failures == [{"itemIdentifier": "message-0"}]
    assert acted == ["message-1"]
    [(receipt, seconds)] = queue.visibility
    assert receipt == "receipt-0"
    assert 0 <= seconds <= POISON_RETRY_CAP_SECONDS
