"""The stream router and the payload finalizer: the log's side effects, made idempotent.

The router is invoked (through its FilterCriteria) only for inserted Snapshot and LargePayload
entries. It sends one SQS message per side effect, with a request id derived from the entry, and
does nothing else. A record it cannot send is reported, so Lambda retries from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.event_log.errors import PoisonMessage
from runtime.event_log.messages import SideEffect, SideEffectMessage, side_effect_of_record
from runtime.event_log.objects import MessageQueue, PayloadObjects
from runtime.shared.observability import logger


@dataclass(frozen=True, slots=True)
class RouterQueues:
    snapshots: str
    payloads: str

    def url_for(self, effect: SideEffect) -> str:
        return self.snapshots if effect == SideEffect.BUILD_SNAPSHOT else self.payloads


@dataclass
class RouteReport:
    sent: int = 0
    failures: list[str] = field(default_factory=list)  # stream SequenceNumbers to retry from

    def batch_item_failures(self) -> list[dict[str, str]]:
        return [{"itemIdentifier": sequence_number} for sequence_number in self.failures]


class StreamRouter:
    def __init__(self, queue: MessageQueue, queues: RouterQueues) -> None:
        self._queue = queue
        self._queues = queues

    def route(self, records: Sequence[Mapping[str, Any]]) -> RouteReport:
        report = RouteReport()
        messages: list[tuple[str, SideEffectMessage]] = []
        for record in records:
            sequence_number = str(record.get("dynamodb", {}).get("SequenceNumber", ""))
            try:
                messages.append((sequence_number, side_effect_of_record(record)))
            except PoisonMessage as err:
                # Only the log's own writes reach the router: this is a bug to look at, not data
                # to drop. Reported, it is retried a bounded number of times and then lands in
                # the mapping's on-failure queue with its position.
                logger.error("stream record without a side effect", extra={"sequence_number": sequence_number, "reason": str(err)})
                report.failures.append(sequence_number)
        for effect in SideEffect:
            batch = [(sequence, message) for sequence, message in messages if message.effect == effect]
            if not batch:
                continue
            try:
                failed = set(self._queue.send(self._queues.url_for(effect), [message for _, message in batch]))
            except Exception:
                logger.exception("could not send side effects", extra={"effect": effect.value, "count": len(batch)})
                failed = {message.request_id for _, message in batch}
            report.failures.extend(sequence for sequence, message in batch if message.request_id in failed)
            report.sent += len(batch) - sum(1 for _, message in batch if message.request_id in failed)
        return report


def finalize_payload(objects: PayloadObjects, message: SideEffectMessage) -> None:
    """Remove the pending tag of a payload the log now holds; doing it twice changes nothing."""
    if message.effect != SideEffect.FINALIZE_PAYLOAD or message.payload_key is None:
        raise PoisonMessage(f"the payload finalizer cannot {message.effect.value}")
    objects.remove_tags(message.payload_key)
