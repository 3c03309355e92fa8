"""The saga's tables as ports, with DynamoDB adapters that take an injected client.

Status tables (validationStatus, transformationStatus, storeStatus) hold one row per
StoreRequestId: RawTuple (what the phase was given), StatusReason (0 while the row is in the
phase or has passed it; a phase's code once flagged), and for flagged rows StatusDetail (a rule
from runtime.taxi_etl.trips.Rule, or `error:<name>`) and StatusMessage.

The final table holds the typed item of every row that passed all three phases, written once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

from runtime.shared.dynamo import default_client, from_attributes, is_conditional_check_failed, to_attributes
from runtime.taxi_etl.trips import Reason

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

KEY = "StoreRequestId"
RAW_TUPLE = "RawTuple"
STATUS_REASON = "StatusReason"
STATUS_DETAIL = "StatusDetail"
STATUS_MESSAGE = "StatusMessage"
BATCH_GET_LIMIT = 100  # DynamoDB's BatchGetItem limit
UNPROCESSED_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Flagged:
    """A row an earlier transaction with the same id already flagged in this table."""

    reason: Reason
    detail: str
    message: str


class StatusTable(Protocol):
    def begin(self, store_request_id: str, raw_tuple: str) -> Flagged | None:
        """Record that the row entered the phase (reason 0), unless it is already flagged: then that."""

    def flag(self, store_request_id: str, raw_tuple: str, reason: Reason, detail: str, message: str) -> None:
        """Set the row's reason (creating the row if the phase failed before writing it)."""


class PutOutcome(StrEnum):
    STORED = "stored"
    ALREADY_STORED = "already_stored"  # a retry: the same item is there


class StoreConflict(Exception):
    """The final table holds a different item under this StoreRequestId."""


class StoreUnavailable(Exception):
    """DynamoDB kept some of the work unprocessed; the workflow's retry takes it up again."""


class FinalTable(Protocol):
    def put_once(self, item: Mapping[str, Any]) -> PutOutcome: ...

    def stored_items(self, store_request_ids: Iterable[str]) -> dict[str, dict[str, Any]]: ...


class DynamoStatusTable:
    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self._table = table_name
        self._client = client

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            self._client = default_client()
        return self._client

    def begin(self, store_request_id: str, raw_tuple: str) -> Flagged | None:
        try:
            # A retried phase rewrites its own "in progress" row; a flag is never cleared.
            self.client.put_item(
                TableName=self._table,
                Item=to_attributes({KEY: store_request_id, RAW_TUPLE: raw_tuple, STATUS_REASON: int(Reason.OK)}),
                ConditionExpression="attribute_not_exists(#key) OR #reason = :ok",
                ExpressionAttributeNames={"#key": KEY, "#reason": STATUS_REASON},
                ExpressionAttributeValues={":ok": {"N": str(int(Reason.OK))}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as err:
            if not is_conditional_check_failed(err):
                raise
            old = from_attributes(err.response.get("Item", {}))  # type: ignore[arg-type]
            return Flagged(Reason(int(old.get(STATUS_REASON, 0))), str(old.get(STATUS_DETAIL, "")), str(old.get(STATUS_MESSAGE, "")))
        return None

    def flag(self, store_request_id: str, raw_tuple: str, reason: Reason, detail: str, message: str) -> None:
        self.client.update_item(
            TableName=self._table,
            Key=to_attributes({KEY: store_request_id}),
            UpdateExpression="SET #reason = :reason, #detail = :detail, #message = :message, #raw = if_not_exists(#raw, :raw)",
            ExpressionAttributeNames={
                "#reason": STATUS_REASON,
                "#detail": STATUS_DETAIL,
                "#message": STATUS_MESSAGE,
                "#raw": RAW_TUPLE,
            },
            ExpressionAttributeValues=to_attributes(
                {
                    ":reason": int(reason),
                    ":detail": detail or "unspecified",
                    ":message": message or detail or "unspecified",
                    ":raw": raw_tuple,
                }
            ),
        )


class DynamoFinalTable:
    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self._table = table_name
        self._client = client

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            self._client = default_client()
        return self._client

    def put_once(self, item: Mapping[str, Any]) -> PutOutcome:
        try:
            self.client.put_item(
                TableName=self._table,
                Item=to_attributes(item),
                ConditionExpression="attribute_not_exists(#key)",
                ExpressionAttributeNames={"#key": KEY},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as err:
            if not is_conditional_check_failed(err):
                raise
            existing = from_attributes(err.response.get("Item", {}))  # type: ignore[arg-type]
            if existing != dict(item):
                raise StoreConflict(f"StoreRequestId {item[KEY]} is already stored with different content") from err
            return PutOutcome.ALREADY_STORED
        return PutOutcome.STORED

    def stored_items(self, store_request_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        wanted = sorted(set(store_request_ids))
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(wanted), BATCH_GET_LIMIT):
            keys: list[dict[str, Any]] = [to_attributes({KEY: key}) for key in wanted[start : start + BATCH_GET_LIMIT]]
            for _attempt in range(UNPROCESSED_ATTEMPTS):
                if not keys:
                    break
                response = self.client.batch_get_item(RequestItems={self._table: {"Keys": keys, "ConsistentRead": True}})
                for attributes in response.get("Responses", {}).get(self._table, []):
                    item = from_attributes(attributes)
                    found[str(item[KEY])] = item
                unprocessed = response.get("UnprocessedKeys") or {}
                keys = list(unprocessed[self._table]["Keys"]) if self._table in unprocessed else []
            if keys:
                # The SDK already retried the throttled call; the task fails and the workflow retries it.
                raise StoreUnavailable(f"{len(keys)} keys stayed unprocessed by BatchGetItem")
        return found
