"""DynamoDB helpers: a lazily built client, attribute (de)serialization and error reading."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()

ItemAttributes = dict[str, Any]


@functools.cache
def default_client() -> DynamoDBClient:
    """The process-wide client, built on first use (never at import time)."""
    import boto3

    return boto3.client("dynamodb")


def to_attributes(item: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _serializer.serialize(value) for name, value in item.items()}


def from_attributes(attributes: Mapping[str, Any]) -> ItemAttributes:
    return {name: _deserializer.deserialize(value) for name, value in attributes.items()}


def error_code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def is_conditional_check_failed(err: ClientError) -> bool:
    return error_code(err) == "ConditionalCheckFailedException"


def cancellation_codes(err: ClientError) -> list[str]:
    """Per-item reason codes of a cancelled TransactWriteItems, in request order ('None' = ok)."""
    if error_code(err) != "TransactionCanceledException":
        return []
    reasons = err.response.get("CancellationReasons") or []
    return [str(reason.get("Code", "None")) for reason in reasons]
