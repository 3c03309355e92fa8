"""DynamoDB's attribute form, to and from Python values: exactly what boto3's TypeSerializer and
TypeDeserializer give (tests/unit/test_shared_dynamo_attributes.py compares them value for value),
with strings, integers and Decimals converted directly. The generic converters try a dozen type
checks per value, and a runner-stats batch converts about 20,000 values (`make bench --only latency`
measures the difference)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, cast

from boto3.dynamodb.types import DYNAMODB_CONTEXT, TypeDeserializer, TypeSerializer

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()
# Integers this short are exact in DynamoDB's 38-digit numbers; longer ones go through the
# serializer, which refuses what DynamoDB cannot store.
_DIRECT_INTEGER_LIMIT = 10**38

ItemAttributes = dict[str, Any]


def to_attributes(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item in DynamoDB's attribute form."""
    return {name: _attribute(value) for name, value in item.items()}


def _attribute(value: Any) -> dict[str, Any]:
    kind = type(value)
    if kind is str:
        return {"S": value}
    if kind is int and abs(value) < _DIRECT_INTEGER_LIMIT:
        return {"N": str(value)}
    if kind is Decimal and value.is_finite():
        return {"N": str(DYNAMODB_CONTEXT.create_decimal(value))}
    return cast("dict[str, Any]", _serializer.serialize(value))


def from_attributes(attributes: Mapping[str, Any]) -> ItemAttributes:
    """An item read from DynamoDB's attribute form."""
    return {name: _value(attribute) for name, attribute in attributes.items()}


def _value(attribute: Mapping[str, Any]) -> Any:
    if len(attribute) == 1:
        if "S" in attribute:
            return attribute["S"]
        if "N" in attribute:
            return DYNAMODB_CONTEXT.create_decimal(attribute["N"])
    return _deserializer.deserialize(cast("Any", attribute))
