"""A Kinesis event source mapping, replayed in-process: how Lambda would deliver a shard.

It builds Lambda's Kinesis event for each batch (no more records than fit Lambda's 6 MB), honours `batchItemFailures` by restarting
from the lowest reported sequence number, retries a batch whose invocation failed, bisects
it on error when asked, and sends a batch that exhausted its retries to the on-failure
callback (the SQS destination).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from devtools.aws.faults import SimulatedCrash
from devtools.aws.service_limits import fitting_batch

SHARD_ID = "shardId-000000000000"


@dataclass(frozen=True)
class ShardRecord:
    sequence_number: str
    partition_key: str
    data: bytes
    arrival_ms: int = 0


class ShardSource(Protocol):
    def read(self, after: str | None, limit: int) -> list[Any]:
        """Up to `limit` records after the checkpoint sequence number (from the start if None)."""
        ...


@dataclass
class ListShard:
    records: Sequence[Any]  # anything with a sequence_number

    def read(self, after: str | None, limit: int) -> list[Any]:
        start = 0 if after is None else next(i for i, r in enumerate(self.records) if r.sequence_number == after) + 1
        return list(self.records[start : start + limit])


@dataclass
class KinesisShard:
    """A shard of a (moto) Kinesis stream, read with GetShardIterator/GetRecords like Lambda does."""

    client: Any
    stream_name: str
    shard_id: str = SHARD_ID

    def read(self, after: str | None, limit: int) -> list[ShardRecord]:
        position: dict[str, str] = (
            {"ShardIteratorType": "TRIM_HORIZON"}
            if after is None
            else {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": after}
        )
        iterator = self.client.get_shard_iterator(StreamName=self.stream_name, ShardId=self.shard_id, **position)["ShardIterator"]
        response = self.client.get_records(ShardIterator=iterator, Limit=limit)
        return [
            ShardRecord(
                sequence_number=record["SequenceNumber"],
                partition_key=record["PartitionKey"],
                data=record["Data"],
                arrival_ms=int(record["ApproximateArrivalTimestamp"].timestamp() * 1000),
            )
            for record in response["Records"]
        ]


def records_from_payloads(payloads: Sequence[tuple[str, bytes]], first_sequence: int = 1) -> list[ShardRecord]:
    """Shard records with increasing, same-width sequence numbers (Kinesis ones are ordered strings)."""
    return [
        ShardRecord(sequence_number=f"{first_sequence + index:056d}", partition_key=key, data=data)
        for index, (key, data) in enumerate(payloads)
    ]


def lambda_event(records: Sequence[ShardRecord], shard_id: str = SHARD_ID) -> dict[str, Any]:
    return {
        "Records": [
            {
                "eventSource": "aws:kinesis",
                "eventID": f"{shard_id}:{record.sequence_number}",
                "eventName": "aws:kinesis:record",
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": record.partition_key,
                    "sequenceNumber": record.sequence_number,
                    "data": base64.b64encode(record.data).decode("ascii"),
                    "approximateArrivalTimestamp": record.arrival_ms / 1000,
                },
            }
            for record in records
        ]
    }


class Invoke(Protocol):
    def __call__(self, event: dict[str, Any]) -> dict[str, Any]: ...


@dataclass
class PollStats:
    invocations: int = 0
    function_errors: int = 0
    partial_failures: int = 0
    redelivered_records: int = 0
    sent_to_on_failure: int = 0
    batch_sizes: list[int] = field(default_factory=list)


@dataclass
class EventSourceMapping:
    """Works for any stream whose records have a `sequence_number`; `to_event` builds the
    Lambda event of a batch (Kinesis by default, `dynamodb_stream_event` for a table stream)."""

    invoke: Invoke
    batch_size: int = 100
    retry_attempts: int = 10
    bisect_on_error: bool = True
    on_failure: Callable[[list[Any]], None] = lambda records: None
    stats: PollStats = field(default_factory=PollStats)
    to_event: Callable[[Sequence[Any]], dict[str, Any]] = lambda records: lambda_event(records)

    def drain(self, shard: ShardSource, checkpoint: str | None = None) -> str | None:
        """Deliver everything after the checkpoint; returns the final checkpoint."""
        while True:
            batch = shard.read(checkpoint, self.batch_size)
            if not batch:
                return checkpoint
            # The mapping stops adding records where the event would pass Lambda's 6 MB; the rest come next.
            batch = batch[: fitting_batch(batch, self.to_event)]
            self._deliver(batch)
            checkpoint = batch[-1].sequence_number

    def _deliver(self, batch: list[Any]) -> None:
        """Deliver one batch until it is checkpointed (done, or given up to on_failure)."""
        attempts = 0
        pending = batch
        while pending:
            size = len(pending)
            self.stats.invocations += 1
            self.stats.batch_sizes.append(size)
            try:
                response = self.invoke(self.to_event(pending))
            except (Exception, SimulatedCrash):
                self.stats.function_errors += 1
                attempts += 1
                if attempts > self.retry_attempts:
                    self._give_up(pending)
                    return
                if self.bisect_on_error and size > 1:
                    # Lambda splits the failing batch and retries the halves in order.
                    half = size // 2
                    self._deliver(pending[:half])
                    pending = pending[half:]
                    attempts = 0
                continue
            failed = [item["itemIdentifier"] for item in response.get("batchItemFailures", [])]
            if not failed:
                return
            self.stats.partial_failures += 1
            attempts += 1
            lowest = min(failed)
            index = next(i for i, record in enumerate(pending) if record.sequence_number == lowest)
            if attempts > self.retry_attempts:
                self._give_up(pending[index:])
                return
            self.stats.redelivered_records += size - index
            pending = pending[index:]

    def _give_up(self, records: list[Any]) -> None:
        self.stats.sent_to_on_failure += len(records)
        self.on_failure(records)
