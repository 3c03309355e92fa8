"""What the two SQS consumers share: one record's message, and poison handling."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runtime.event_log import contract
from runtime.event_log.errors import PoisonMessage
from runtime.event_log.messages import SideEffect, SideEffectMessage, parse_message
from runtime.event_log.objects import MessageQueue
from runtime.shared.consistency import full_jitter_backoff
from runtime.shared.observability import MetricUnit, logger, metrics

# A poison message is retried quickly (it reaches the DLQ after the queue's maxReceiveCount
# receives, minutes later), instead of waiting out the long visibility timeout each time.
POISON_RETRY_CAP_SECONDS = 60


class KeptInQueue(Exception):
    """The record stays queued: `act` kept it (it set its visibility), or it is poison or failed."""


def process_batch(
    records: list[Mapping[str, Any]],
    effect: SideEffect,
    queue: MessageQueue,
    queue_url: str,
    act: Callable[[SideEffectMessage, Mapping[str, Any]], bool],
) -> list[dict[str, str]]:
    """Run `act` on every record; returns the batch item failures (messages that stay queued).

    `act` returns False to keep its message (it set the message's visibility itself). Every record
    is tried, whatever the others did (SQS has no order to keep here). A batch that fails entirely is
    reported, not raised: the messages stay queued as item failures and the invocation succeeds, so
    the function's error alarm means a crash. An empty batch has no failures.

    Not Powertools' BatchProcessor, which did the same: importing its package loads asyncio and
    every event data class, about 10 ms of each cold start of the worker and the finalizer.
    """

    def handle_record(raw: Mapping[str, Any]) -> None:
        message_id = str(raw.get("messageId", ""))
        try:
            message = parse_message(str(raw.get("body", "")), raw.get("messageAttributes") or {}, effect)
            kept = not act(message, raw)
        except PoisonMessage as err:
            receives = int(raw.get("attributes", {}).get("ApproximateReceiveCount", "1"))
            logger.error(
                "poison message; it goes to the DLQ after the queue's retries",
                extra={"message_id": message_id, "reason": str(err), "receives": receives},
            )
            metrics.add_metric(name=contract.METRIC_POISON_MESSAGES, unit=MetricUnit.Count, value=1)
            delay = full_jitter_backoff(receives, base_seconds=1, cap_seconds=POISON_RETRY_CAP_SECONDS)
            queue.change_visibility(queue_url, str(raw.get("receiptHandle", "")), delay)
            raise KeptInQueue(message_id) from err
        except Exception as err:
            logger.exception("message failed; it is retried after its visibility timeout", extra={"message_id": message_id})
            raise KeptInQueue(message_id) from err
        if kept:
            raise KeptInQueue(message_id)

    failures: list[dict[str, str]] = []
    for record in records:
        try:
            handle_record(record)
        except Exception:  # KeptInQueue, or a failure while keeping it (its visibility change): it stays queued either way
            failures.append({"itemIdentifier": str(record.get("messageId", ""))})
    return failures
