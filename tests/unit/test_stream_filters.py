"""Stream filters (devtools/aws/table_stream.StreamFilter) as Lambda applies an event source mapping's
FilterCriteria to DynamoDB stream records: moto's event-pattern matcher, with the rules it gets wrong refused.

The literal-list matcher this replaces answered "no match" to every rule but a list of values, so a
prefix, anything-but, exists or set rule dropped records Lambda delivers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from devtools.aws.table_stream import StreamFilter


def record(event_name: str = "INSERT", **new_image: dict[str, Any]) -> dict[str, Any]:
    """A DynamoDB stream record as Lambda delivers it, with these attributes in its new image."""
    keys = {"log_id": {"S": "sheet-7"}, "seq": {"N": "12"}}
    return {
        "eventID": "0f3c",
        "eventName": event_name,
        "eventSource": "aws:dynamodb",
        "eventVersion": "1.1",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1_800_000_000.0,
            "Keys": keys,
            "NewImage": {**keys, **new_image},
            "SequenceNumber": "400",
            "SizeBytes": 120,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/log/stream/2026",
    }


def sized(stream_record: dict[str, Any], size_bytes: int) -> dict[str, Any]:
    stream_record["dynamodb"]["SizeBytes"] = size_bytes
    return stream_record


def on_new_image(attribute: str, rule: Any) -> dict[str, Any]:
    return {"dynamodb": {"NewImage": {attribute: rule}}}


# (pattern, a record Lambda delivers, a record it drops)
RULES = {
    "prefix": (
        on_new_image("kind", {"S": [{"prefix": "Snap"}]}),
        record(kind={"S": "Snapshot"}),
        record(kind={"S": "SetCell"}),
    ),
    "anything-but": (
        on_new_image("kind", {"S": [{"anything-but": ["SetCell", "Head"]}]}),
        record(kind={"S": "LargePayload"}),
        record(kind={"S": "SetCell"}),
    ),
    "exists true": (
        on_new_image("payload_key", {"S": [{"exists": True}]}),
        record(kind={"S": "LargePayload"}, payload_key={"S": "payloads/k"}),
        record(kind={"S": "LargePayload"}),
    ),
    "exists false": (
        on_new_image("payload_key", {"S": [{"exists": False}]}),
        record(kind={"S": "SetCell"}),
        record(kind={"S": "LargePayload"}, payload_key={"S": "payloads/k"}),
    ),
    # A set's value is an array: the rule holds when any of its elements matches.
    "a string set": (
        on_new_image("tags", {"SS": ["urgent"]}),
        record(tags={"SS": ["late", "urgent"]}),
        record(tags={"SS": ["late"]}),
    ),
    "suffix": (
        on_new_image("log_id", {"S": [{"suffix": "-7"}]}),
        record(),
        record(log_id={"S": "sheet-8"}),
    ),
    # Numeric rules read JSON numbers (the record's SizeBytes), never DynamoDB's N, which is a string.
    "numeric": (
        {"dynamodb": {"SizeBytes": [{"numeric": [">", 100, "<=", 400]}]}},
        record(),
        sized(record(), 401),
    ),
    "$or": (
        {"$or": [{"eventName": ["REMOVE"]}, on_new_image("kind", {"S": ["Snapshot"]})]},
        record(kind={"S": "Snapshot"}),
        record(event_name="MODIFY", kind={"S": "SetCell"}),
    ),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_a_rule_delivers_the_records_lambda_delivers_and_drops_the_others(rule: str) -> None:
    from moto.events.models import EventPattern

    # Given a filter of one kind of rule, a record it holds for and one it does not
    pattern, delivered, dropped = RULES[rule]
    stream_filter = StreamFilter(pattern)
    # When each record is filtered
    # Then the first is delivered and the second dropped
    assert stream_filter.matches(delivered) is True
    assert stream_filter.matches(dropped) is False
    # and moto's matcher answers the same on the whole records (the filter hands it only the values its rules read)
    whole = EventPattern.load(json.dumps(pattern))
    records: list[Any] = [delivered, dropped]
    assert [whole.matches_event(each) for each in records] == [True, False]


def test_exists_tests_the_typed_value_not_the_attribute_above_it() -> None:
    # Given filters testing an attribute for existence at its name, as EventBridge rules put it, and at its value
    at_the_attribute = StreamFilter(on_new_image("payload_key", [{"exists": True}]))
    at_the_value = StreamFilter(on_new_image("payload_key", {"S": [{"exists": True}]}))
    with_it = record(payload_key={"S": "payloads/k"})
    # When a record that has it is filtered
    # Then only the rule on the leaf value holds: "exists matching only works on leaf nodes" (EventBridge User Guide)
    assert (at_the_attribute.matches(with_it), at_the_value.matches(with_it)) == (False, True)


def test_a_numeric_rule_never_matches_a_dynamodb_number() -> None:
    # Given a numeric rule on an N attribute ("Numeric matching works with values that are JSON numbers";
    # DynamoDB sends N as a string)
    stream_filter = StreamFilter(on_new_image("seq", {"N": [{"numeric": [">", 0]}]}))
    # When a record whose seq is 12 is filtered
    # Then it is dropped, as on AWS
    assert stream_filter.matches(record()) is False


@pytest.mark.parametrize(
    ("rule", "value", "moto_alone"),
    [
        # moto's matcher compares by value (300 == 300.0, 1 == true); Lambda compares the JSON text, so it drops the
        # first two records and delivers the third
        ([300], 300.0, True),
        ([True], 1, True),
        ([{"anything-but": [300]}], 300.0, False),
        # names Lambda does not document: moto's matcher lets any value through a misspelt one
        ([{"prefx": "Snap"}], "anything", True),
        ([{"wildcard": "Snap*"}], "Snapshot", True),
        ([{"cidr": "10.0.0.0/24"}], "10.0.0.1", True),
        # malformed: an operator without its number matches every number; exists takes a boolean
        ([{"numeric": [">"]}], 5, True),
        ([{"exists": "yes"}], 5, False),
    ],
)
def test_a_rule_the_matcher_gets_wrong_or_lambda_does_not_document_is_refused(rule: list[Any], value: Any, moto_alone: bool) -> None:
    from moto.events.models import EventPattern

    pattern = {"dynamodb": {"SizeBytes": rule}}
    # Given a pattern that moto's matcher alone applies as below, where Lambda answers otherwise or refuses the pattern
    event: Any = {"dynamodb": {"SizeBytes": value}}
    assert EventPattern.load(json.dumps(pattern)).matches_event(event) is moto_alone
    # When it is made a stream filter
    # Then it is refused, naming where the rule is, as Lambda refuses an invalid pattern when the mapping is created
    with pytest.raises(ValueError, match=r"refused: dynamodb\.SizeBytes: "):
        StreamFilter(pattern)


def test_an_or_that_is_not_a_list_of_patterns_is_refused() -> None:
    # Given a pattern whose $or is one pattern rather than a list of them (EventBridge takes only a list)
    pattern = {"$or": {"eventName": ["INSERT"]}}
    # When it is made a stream filter
    # Then it is refused with the reason, not a crash
    with pytest.raises(ValueError, match=r"refused: \$or: \$or takes a list of patterns"):
        StreamFilter(pattern)
