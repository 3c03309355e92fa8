"""runtime/shared/dynamo.py's attribute conversion builds strings, integers and Decimals directly;
it must give exactly what boto3's TypeSerializer and TypeDeserializer give, for every value,
errors included (DynamoDB's stored format is a contract)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.shared.dynamo import from_attributes, to_attributes

SCALARS = st.one_of(
    st.text(max_size=20),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(lambda d: len(d.as_tuple().digits) <= 38),
    st.booleans(),
    st.none(),
    st.binary(max_size=8),
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8
)


def generic(item: dict[str, Any]) -> dict[str, Any] | type[Exception]:
    try:
        return {name: TypeSerializer().serialize(value) for name, value in item.items()}
    except Exception as err:
        return type(err)


def direct(item: dict[str, Any]) -> dict[str, Any] | type[Exception]:
    try:
        return to_attributes(item)
    except Exception as err:
        return type(err)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), VALUES, max_size=6))
def test_to_attributes_is_the_type_serializer_value_for_value(item: dict[str, Any]) -> None:
    # Given any item of scalars, lists and maps (integers beyond DynamoDB's 38 digits included)
    # When it is converted directly and by boto3's serializer
    # Then both give the same attributes, or the same error
    assert direct(item) == generic(item)
    attributes = generic(item)
    if isinstance(attributes, dict):
        # And reading them back gives what boto3's deserializer gives
        assert from_attributes(attributes) == {name: TypeDeserializer().deserialize(value) for name, value in attributes.items()}


@pytest.mark.parametrize(
    "value",
    [Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity"), 1.5, 10**38, -(10**38), Decimal("1" * 39), True, set()],
    ids=["nan", "inf", "-inf", "float", "10^38", "-10^38", "39 digits", "bool", "empty set"],
)
def test_values_dynamodb_cannot_store_fail_as_the_type_serializer_fails(value: Any) -> None:
    # Given a value DynamoDB cannot store as a number (or a type with its own rules)
    # When converted directly
    # Then the outcome is the serializer's own, error type included
    assert direct({"a": value}) == generic({"a": value})
