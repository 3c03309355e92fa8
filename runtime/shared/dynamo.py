"""DynamoDB helpers: attribute (de)serialization and reading what a failed conditional write found."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from runtime.shared.aws import error_code

if TYPE_CHECKING:
    pass

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()

ItemAttributes = dict[str, Any]


def to_attributes(item: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _serializer.serialize(value) for name, value in item.items()}


def from_attributes(attributes: Mapping[str, Any]) -> ItemAttributes:
    return {name: _deserializer.deserialize(value) for name, value in attributes.items()}


def is_conditional_check_failed(err: ClientError) -> bool:
    return error_code(err) == "ConditionalCheckFailedException"


def item_when_condition_failed(err: ClientError) -> ItemAttributes | None:
    """The item a conditional write found, for a write sent with ReturnValuesOnConditionCheckFailure
    ALL_OLD whose condition failed; None for any other error, or when there was no item.

    This is how a writer recognises its own earlier success: a write that was applied, whose
    response was lost and that the SDK sent again, fails its condition against itself. The item
    then carries the writer's own token (or equals what the writer meant to write)."""
    if not is_conditional_check_failed(err):
        return None
    item = cast("dict[str, Any]", err.response).get("Item")
    return from_attributes(item) if item else None


def cancelled_item(err: ClientError, index: int) -> ItemAttributes | None:
    """Like item_when_condition_failed, for item `index` of a cancelled TransactWriteItems."""
    if error_code(err) != "TransactionCanceledException":
        return None
    reasons = cast("list[dict[str, Any]]", err.response.get("CancellationReasons") or [])
    if index >= len(reasons) or reasons[index].get("Code") != "ConditionalCheckFailed":
        return None
    item = reasons[index].get("Item")
    return from_attributes(item) if item else None


def cancellation_codes(err: ClientError) -> list[str]:
    """Per-item reason codes of a cancelled TransactWriteItems, in request order ('None' = ok)."""
    if error_code(err) != "TransactionCanceledException":
        return []
    reasons = err.response.get("CancellationReasons") or []
    return [str(reason.get("Code", "None")) for reason in reasons]
