"""DynamoDB helpers: attribute (de)serialization and reading what a failed conditional write found."""

from __future__ import annotations

from typing import Any, cast

from botocore.exceptions import ClientError

from runtime.shared.attributes import ItemAttributes, from_attributes, to_attributes
from runtime.shared.aws import error_code

__all__ = [
    "ItemAttributes",
    "cancellation_codes",
    "cancelled_item",
    "from_attributes",
    "is_conditional_check_failed",
    "item_when_condition_failed",
    "to_attributes",
]


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
