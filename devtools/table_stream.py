"""A DynamoDB table stream read the way Lambda's event source mapping reads it, with its
FilterCriteria applied before any invocation (records that do not match are dropped)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class StreamRecord:
    sequence_number: str
    record: dict[str, Any]  # as Lambda delivers it


def matches(pattern: Mapping[str, Any], document: Mapping[str, Any]) -> bool:
    """Lambda event filtering, for the patterns this project uses: nested objects whose leaves
    are lists of allowed string or number values."""
    for name, rule in pattern.items():
        if name not in document:
            return False
        value = document[name]
        if isinstance(rule, Mapping):
            if not isinstance(value, Mapping) or not matches(rule, value):
                return False
        elif isinstance(rule, list):
            if value not in rule:
                return False
        else:
            raise ValueError(f"unsupported filter rule {rule!r}")
    return True


def filter_patterns(mapping_properties: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The patterns of a synthesized AWS::Lambda::EventSourceMapping's FilterCriteria."""
    filters = mapping_properties.get("FilterCriteria", {}).get("Filters", [])
    return [json.loads(item["Pattern"]) for item in filters]


def dynamodb_stream_event(records: Sequence[StreamRecord]) -> dict[str, Any]:
    return {"Records": [record.record for record in records]}


@dataclass
class TableStream:
    """New records of a (moto) table stream since the last poll, filtered like the mapping."""

    client: Any  # dynamodbstreams
    stream_arn: str
    patterns: list[dict[str, Any]] = field(default_factory=list)
    _iterators: dict[str, str] = field(default_factory=dict)
    seen: int = 0
    dropped: int = 0

    def poll(self) -> list[StreamRecord]:
        shards = self.client.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]["Shards"]
        found: list[StreamRecord] = []
        for shard in shards:
            shard_id = shard["ShardId"]
            iterator = (
                self._iterators.get(shard_id)
                or self.client.get_shard_iterator(StreamArn=self.stream_arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")[
                    "ShardIterator"
                ]
            )
            while True:
                response = self.client.get_records(ShardIterator=iterator, Limit=1000)
                iterator = response.get("NextShardIterator") or iterator
                records = response.get("Records", [])
                for raw in records:
                    self.seen += 1
                    record = self._as_delivered(raw)
                    if self.patterns and not any(matches(pattern, record) for pattern in self.patterns):
                        self.dropped += 1
                        continue
                    found.append(StreamRecord(record["dynamodb"]["SequenceNumber"], record))
                if not records:
                    break
            self._iterators[shard_id] = iterator
        return found

    def _as_delivered(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        record = dict(raw)
        body = dict(record["dynamodb"])
        created = body.get("ApproximateCreationDateTime")
        if isinstance(created, datetime):
            body["ApproximateCreationDateTime"] = created.timestamp()
        record["dynamodb"] = body
        record["eventSourceARN"] = self.stream_arn
        return record
