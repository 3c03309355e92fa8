"""A DynamoDB table stream read the way Lambda's event source mapping reads it, with its
FilterCriteria applied before any invocation (records that do not match are dropped).

The filters are matched by moto's EventBridge event-pattern matcher (moto.events.models.EventPattern):
Lambda "supports the same set of syntax and rules as Amazon EventBridge" (Lambda Developer Guide,
"Control which events Lambda sends to your function"). It matches equals, null and empty, prefix,
suffix, equals-ignore-case, anything-but, numeric (JSON numbers only, so never DynamoDB's N strings,
as on AWS), exists true and false (on leaf values only, as on AWS: {"S": [...]}, not the attribute
above it), $or, and an array value (a set such as SS) when any of its elements matches. A pattern is
refused (ValueError, as Lambda refuses it when the mapping is created) when it holds a rule the
matcher would get wrong or Lambda does not document:
- a number or boolean to equal, plain or in anything-but: the matcher compares values (300 equals
  300.0, 1 equals true) where Lambda compares their JSON text;
- any other named rule (wildcard, cidr, or a misspelt name): the matcher lets every value through
  a name it does not know.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from devtools.aws.moto_fit import InstanceAttribute, Reach, reaches_into_moto


@dataclass(frozen=True)
class StreamRecord:
    sequence_number: str
    record: dict[str, Any]  # as Lambda delivers it


# Lambda's documented rules, each with the value it takes; a numeric rule is checked on its own.
_STRING_RULES: Final = ("prefix", "suffix", "equals-ignore-case")
_NUMERIC_OPERATORS: Final = ("<", "<=", "=", ">=", ">")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _anything_but_refusal(value: Any) -> str | None:
    if isinstance(value, str):
        return None
    if isinstance(value, list) and value and all(isinstance(element, str) for element in value):
        return None
    if isinstance(value, Mapping) and len(value) == 1:
        ((name, inner),) = value.items()
        if name in ("prefix", "suffix") and isinstance(inner, str):
            return None
    return "anything-but takes strings (or a prefix or suffix): the matcher compares numbers by value, Lambda by their JSON text"


def _rule_refusal(rule: Any) -> str | None:
    """Why the matcher would answer this one rule of a filter's list differently from Lambda, if it would."""
    if rule is None or isinstance(rule, str):
        return None
    if isinstance(rule, (bool, int, float)):
        return f"{json.dumps(rule)} to equal: the matcher compares numbers and booleans by value (300 is 300.0, 1 is true), Lambda as text"
    if not isinstance(rule, Mapping) or len(rule) != 1:
        return f"{json.dumps(rule)} is not a filter rule"
    ((name, value),) = rule.items()
    if name in _STRING_RULES:
        return None if isinstance(value, str) else f"{name} takes a string"
    if name == "exists":
        return None if isinstance(value, bool) else "exists takes true or false"
    if name == "anything-but":
        return _anything_but_refusal(value)
    if name == "numeric":
        pairs = list(zip(value[::2], value[1::2], strict=False)) if isinstance(value, list) and len(value) % 2 == 0 else []
        valid = bool(pairs) and all(operator in _NUMERIC_OPERATORS and _is_number(number) for operator, number in pairs)
        return None if valid else f'numeric takes operators and numbers in pairs, such as [">", 0, "<=", 5]: {json.dumps(value)}'
    return f"{name!r} is not a filter rule Lambda documents; the matcher would let every value through it"


def _refusals(pattern: Mapping[str, Any], path: str = "") -> Iterator[str]:
    for name, rules in pattern.items():
        where = f"{path}.{name}" if path else name
        if name == "$or":
            if not isinstance(rules, list):
                yield f"{where}: $or takes a list of patterns"
                continue
            for alternative in rules:
                yield from _refusals(alternative, path) if isinstance(alternative, Mapping) else [f"{where}: {json.dumps(alternative)}"]
        elif isinstance(rules, Mapping):
            yield from _refusals(rules, where)
        elif isinstance(rules, list):
            yield from (f"{where}: {refusal}" for refusal in map(_rule_refusal, rules) if refusal is not None)


def _rule_paths(pattern: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The paths of the values the pattern's rules read."""
    for name, rules in pattern.items():
        if name == "$or":
            for alternative in rules:
                yield from _rule_paths(alternative, prefix)
        elif isinstance(rules, Mapping):
            yield from _rule_paths(rules, (*prefix, name))
        else:
            yield (*prefix, name)


def _projection(record: Mapping[str, Any], paths: Sequence[tuple[str, ...]]) -> dict[str, Any]:
    """The record with only the values at `paths` (each kept whole): no other value can change a match,
    and the matcher copies its event through JSON, which for a whole record costs about 0.2 ms."""
    kept: dict[str, Any] = {}
    for path in paths:
        source: Any = record
        target = kept
        for depth, name in enumerate(path):
            if not isinstance(source, Mapping) or name not in source:
                break
            value = source[name]
            if depth == len(path) - 1 or not isinstance(value, Mapping):
                target[name] = value
                break
            if target.get(name) is value:  # kept whole already, through a shorter path
                break
            source, target = value, target.setdefault(name, {})
    return kept


class StreamFilter:
    """One pattern of an event source mapping's FilterCriteria, matched as Lambda matches it (see the module's
    docstring); a pattern the matcher would get wrong is refused here, as Lambda refuses an invalid one."""

    @reaches_into_moto(
        Reach("moto.events.models", "EventPattern.load", ("cls", "raw_pattern")),
        Reach("moto.events.models", "EventPattern.matches_event", ("self", "event")),
    )
    def __init__(self, pattern: Mapping[str, Any]) -> None:
        from moto.events.models import EventPattern

        refusals = list(_refusals(pattern))
        if refusals:
            raise ValueError(f"stream filter pattern {json.dumps(pattern)} refused: " + "; ".join(refusals))
        self.pattern = pattern
        self._paths = list(_rule_paths(pattern))
        self._matcher = EventPattern.load(json.dumps(pattern))  # refuses what EventBridge refuses (an empty list, say)

    def matches(self, record: Mapping[str, Any]) -> bool:
        event: Any = _projection(record, self._paths)  # any JSON object; moto types it as an EventBridge event's
        return self._matcher.matches_event(event)


def filter_patterns(mapping_properties: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The patterns of a synthesized AWS::Lambda::EventSourceMapping's FilterCriteria."""
    filters = mapping_properties.get("FilterCriteria", {}).get("Filters", [])
    return [json.loads(item["Pattern"]) for item in filters]


def dynamodb_stream_event(records: Sequence[StreamRecord]) -> dict[str, Any]:
    return {"Records": [record.record for record in records]}


@reaches_into_moto(
    Reach("moto.core.models", "DEFAULT_ACCOUNT_ID"),
    Reach("moto.dynamodb.models", "dynamodb_backends"),
    Reach("moto.dynamodb.models", "DynamoDBBackend.get_table", ("self", "table_name")),
    InstanceAttribute("moto.dynamodb.models.table", "Table", attribute="stream_shard"),
    InstanceAttribute("moto.dynamodb.models.table", "StreamShard", attribute="items"),
    InstanceAttribute("moto.dynamodb.models.table", "StreamShard", attribute="starting_sequence_number"),
)
def _moto_stream_shard(table_name: str) -> Any:
    """moto's stream shard of the table (its `items`, and the `starting_sequence_number` it numbers new
    records from), or None when the table has no stream; read with MOTO_DYNAMODB_LOCK held."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(table_name).stream_shard


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
    _filters: list[StreamFilter] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._filters = [StreamFilter(pattern) for pattern in self.patterns]

    def poll(self) -> list[StreamRecord]:
        from devtools.aws.moto_patches import MOTO_DYNAMODB_LOCK

        with MOTO_DYNAMODB_LOCK:  # the handlers write on other threads
            shard = _moto_stream_shard(self.table_name)
            if shard is None:
                raise RuntimeError(f"table {self.table_name} has no stream; the template enables one on every table read this way")
            fresh = shard.items[self._next :]
        self._next += len(fresh)
        found: list[StreamRecord] = []
        for item in fresh:
            self.seen += 1
            record = self._as_delivered(item.to_json())
            if self._filters and not any(stream_filter.matches(record) for stream_filter in self._filters):
                self.dropped += 1
                continue
            found.append(StreamRecord(record["dynamodb"]["SequenceNumber"], record))
        return found

    def trim(self, keep: int) -> int:
        """Drop from moto's shard the records this stream has read, but the last `keep`: on AWS a
        stream keeps records 24 hours, moto keeps them all, which a long-running local server cannot
        afford. Sequence numbers go on from where they were. Returns how many were dropped."""
        from devtools.aws.moto_patches import MOTO_DYNAMODB_LOCK

        with MOTO_DYNAMODB_LOCK:
            shard = _moto_stream_shard(self.table_name)
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
