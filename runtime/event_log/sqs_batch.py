"""What the two SQS consumers share: one record's message, and poison handling."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runtime.event_log import contract
from runtime.event_log.errors import PoisonMessage
from runtime.event_log.models import SideEffect, SideEffectMessage
from runtime.event_log.objects import MessageQueue
from runtime.event_log.parsing import parse_message
from runtime.shared.consistency import full_jitter_backoff
from runtime.shared.observability import MetricUnit, logger, metrics

# A poison message is retried quickly (it reaches the DLQ after the queue's maxReceiveCount
# receives, minutes later), instead of waiting out the long visibility timeout each time.
POISON_RETRY_CAP_SECONDS = 60


def process_batch(
    records: list[Mapping[str, Any]],
    effect: SideEffect,
    queue: MessageQueue,
    queue_url: str,
    act: Callable[[SideEffectMessage, Mapping[str, Any]], bool],
) -> list[dict[str, str]]:
    """Run `act` on every record; returns the batch item failures (messages that stay queued).

    `act` returns False to keep its message (it set the message's visibility itself).
    """
    failures: list[dict[str, str]] = []
    for record in records:
        message_id = str(record.get("messageId", ""))
        try:
            message = parse_message(str(record.get("body", "")), record.get("messageAttributes") or {}, effect)
            if not act(message, record):
                failures.append({"itemIdentifier": message_id})
        except PoisonMessage as err:
            receives = int(record.get("attributes", {}).get("ApproximateReceiveCount", "1"))
            logger.error(
                "poison message; it goes to the DLQ after the queue's retries",
                extra={"message_id": message_id, "reason": str(err), "receives": receives},
            )
            metrics.add_metric(name=contract.METRIC_POISON_MESSAGES, unit=MetricUnit.Count, value=1)
            delay = full_jitter_backoff(receives, base_seconds=1, cap_seconds=POISON_RETRY_CAP_SECONDS)
            queue.change_visibility(queue_url, str(record.get("receiptHandle", "")), delay)
            failures.append({"itemIdentifier": message_id})
        except Exception:
            logger.exception("message failed; it is retried after its visibility timeout", extra={"message_id": message_id})
            failures.append({"itemIdentifier": message_id})
    return failures
