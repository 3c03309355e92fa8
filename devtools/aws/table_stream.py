"""A DynamoDB table stream read the way Lambda's event source mapping reads it, with its
FilterCriteria applied before any invocation (records that do not match are dropped)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from devtools.aws.moto_fit import InstanceAttribute, Reach, reaches_into_moto


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
    """New records of a (moto) table stream since the last poll, filtered like the mapping.

    Read from moto's shard directly, the way Lambda's poller reads the stream on AWS's side:
    moto's GetRecords spends about a millisecond serializing each record, which would make a
    50,000-event demo wait minutes for nothing.
    """

    table_name: str
    stream_arn: str
    patterns: list[dict[str, Any]] = field(default_factory=list)
    seen: int = 0
    dropped: int = 0
    _next: int = 0

    @reaches_into_moto(
        Reach("moto.core.models", "DEFAULT_ACCOUNT_ID"),
        Reach("moto.dynamodb.models", "dynamodb_backends"),
        Reach("moto.dynamodb.models", "DynamoDBBackend.get_table", ("self", "table_name")),
        InstanceAttribute("moto.dynamodb.models.table", "Table", attribute="stream_shard"),
        InstanceAttribute("moto.dynamodb.models.table", "StreamShard", attribute="items"),
        InstanceAttribute("moto.dynamodb.models.table", "StreamShard", attribute="starting_sequence_number"),
    )
    def poll(self) -> list[StreamRecord]:
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        from devtools.aws.moto_patches import MOTO_DYNAMODB_LOCK

        with MOTO_DYNAMODB_LOCK:  # the handlers write on other threads
            shard = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(self.table_name).stream_shard
            if shard is None:
                raise RuntimeError(f"table {self.table_name} has no stream; the template enables one on every table read this way")
            fresh = shard.items[self._next :]
        self._next += len(fresh)
        found: list[StreamRecord] = []
        for item in fresh:
            self.seen += 1
            record = self._as_delivered(item.to_json())
            if self.patterns and not any(matches(pattern, record) for pattern in self.patterns):
                self.dropped += 1
                continue
            found.append(StreamRecord(record["dynamodb"]["SequenceNumber"], record))
        return found

    @reaches_into_moto(
        Reach("moto.core.models", "DEFAULT_ACCOUNT_ID"),
        Reach("moto.dynamodb.models", "dynamodb_backends"),
        Reach("moto.dynamodb.models", "DynamoDBBackend.get_table", ("self", "table_name")),
        InstanceAttribute("moto.dynamodb.models.table", "Table", attribute="stream_shard"),
        InstanceAttribute("moto.dynamodb.models.table", "StreamShard", attribute="items"),
        InstanceAttribute("moto.dynamodb.models.table", "StreamShard", attribute="starting_sequence_number"),
    )
    def trim(self, keep: int) -> int:
        """Drop from moto's shard the records this stream has read, but the last `keep`: on AWS a
        stream keeps records 24 hours, moto keeps them all, which a long-running local server cannot
        afford. Sequence numbers go on from where they were. Returns how many were dropped."""
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        from devtools.aws.moto_patches import MOTO_DYNAMODB_LOCK

        with MOTO_DYNAMODB_LOCK:
            shard = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(self.table_name).stream_shard
            dropped = max(0, self._next - keep)
            if shard is None or not dropped:
                return 0
            del shard.items[:dropped]
            shard.starting_sequence_number += dropped  # moto numbers a new record len(items) + this
            self._next -= dropped
        return dropped

    def _as_delivered(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        record = dict(raw)
        body = dict(record["dynamodb"])
        created = body.get("ApproximateCreationDateTime")
        if isinstance(created, datetime):
            body["ApproximateCreationDateTime"] = created.timestamp()
        record["dynamodb"] = body
        record["eventSourceARN"] = self.stream_arn
        return record
