"""An SQS event source mapping, replayed in-process: how Lambda would deliver a queue.

It receives up to the batch size, builds Lambda's SQS event (several invocations when the messages
together pass Lambda's 6 MB), invokes, and deletes the messages
that were not reported in `batchItemFailures`. A failed invocation deletes nothing: every
message of the batch comes back after its visibility timeout. Redrive to the DLQ is moto's,
after the queue's maxReceiveCount receives, exactly as the template configures it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from devtools.aws.faults import SimulatedCrash
from devtools.aws.moto_fit import InstanceAttribute, Reach, reaches_into_moto
from devtools.aws.service_limits import fitting_batch


@dataclass
class SqsStats:
    invocations: int = 0
    delivered: int = 0
    function_errors: int = 0
    kept: int = 0  # reported as batch item failures
    deleted: int = 0


def sqs_event(messages: Sequence[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": message.get("Attributes", {}),
                "messageAttributes": {
                    name: {"stringValue": value.get("StringValue"), "dataType": value.get("DataType", "String")}
                    for name, value in message.get("MessageAttributes", {}).items()
                },
                "md5OfBody": hashlib.md5(message["Body"].encode(), usedforsecurity=False).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": "us-east-1",
            }
            for message in messages
        ]
    }


@dataclass
class SqsEventSource:
    client: Any
    queue_url: str
    queue_arn: str
    invoke: Callable[[dict[str, Any]], dict[str, Any]]
    batch_size: int = 1
    stats: SqsStats = field(default_factory=SqsStats)

    def poll_once(self) -> int:
        """One receive and invocation; returns how many messages were delivered."""
        response = self.client.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=min(10, self.batch_size),
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = response.get("Messages", [])
        remaining = list(messages)
        while remaining:  # in as many invocations as Lambda's 6 MB needs (ten 1 MiB messages do not fit one)
            count = fitting_batch(remaining, lambda part: sqs_event(part, self.queue_arn))
            self._deliver(remaining[:count])
            remaining = remaining[count:]
        return len(messages)

    def _deliver(self, messages: list[dict[str, Any]]) -> None:
        self.stats.invocations += 1
        self.stats.delivered += len(messages)
        try:
            result = self.invoke(sqs_event(messages, self.queue_arn))
        except (Exception, SimulatedCrash):
            self.stats.function_errors += 1
            return
        failed = {item["itemIdentifier"] for item in result.get("batchItemFailures", [])}
        for message in messages:
            if message["MessageId"] in failed:
                self.stats.kept += 1
            else:
                self.client.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
                self.stats.deleted += 1


@reaches_into_moto(
    Reach("moto.core.models", "DEFAULT_ACCOUNT_ID"),
    Reach("moto.sqs.models", "sqs_backends"),
    InstanceAttribute("moto.sqs.models", "SQSBackend", attribute="queues"),
    InstanceAttribute("moto.sqs.models", "Queue", attribute="_messages"),
    InstanceAttribute("moto.sqs.models", "Message", attribute="visible_at"),
    InstanceAttribute("moto.sqs.models", "Message", attribute="delayed_until"),
)
def next_visible_at(queue_url: str) -> float | None:
    """When the earliest hidden or delayed message of a moto queue becomes receivable (epoch s)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import sqs_backends

    name = queue_url.rsplit("/", 1)[-1]
    queue = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].queues[name]
    times = [max(message.visible_at, message.delayed_until) / 1000 for message in queue._messages]
    return min(times) if times else None


def queue_depth(client: Any, queue_url: str) -> int:
    attributes = client.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"],
    )["Attributes"]
    return sum(int(value) for value in attributes.values())
