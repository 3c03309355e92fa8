"""The saga's tables as ports, with DynamoDB adapters that take an injected client.

Status tables (validationStatus, transformationStatus, storeStatus) hold one row per
StoreRequestId: RawTuple (what the phase was given), StatusReason (0 while the row is in the
phase or has passed it; a phase's code once flagged), and for flagged rows StatusDetail (a rule
from runtime.taxi_etl.trips.Rule, or `error:<name>`) and StatusMessage.

The final table holds the typed item of every row that passed all three phases, written once: its
port and adapter, and the reader of a row across all four tables, are in runtime/taxi_etl/final_table.py
(Store, the flag step and GET /trips/{id} use them; Validate and Transform write their status rows only).

A redrive (ops/taxi_redrive.py) keeps its bookkeeping on the validation status row, the one row
every transaction of an id has and the one that holds the raw line: Generation (which transaction
of the id the status rows describe: absent for the API's, 2 for the first redrive, ...),
RedrivePending (set when a redrive clears the flag, removed once its execution is started),
RedrivenFlag / RedrivenAt (the flag the latest redrive cleared, and when) and RedriveToken (the
latest claim's own random token, by which a claim whose response was lost recognises itself). The
phases write a status row with UpdateItem, so these attributes survive the redrive's own execution.

The automatic redrive's clear step leaves ClearToken on each row whose retryable flag it cleared: the
clear's own random token, by which a clear whose response was lost recognises itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

from runtime.shared.aws import KeysUnprocessed, batch_get_all
from runtime.shared.dynamo import (
    from_attributes,
    is_conditional_check_failed,
    item_when_condition_failed,
    to_attributes,
)
from runtime.taxi_etl import contract
from runtime.taxi_etl.errors import StoreUnavailable
from runtime.taxi_etl.trips import Reason

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

KEY = contract.KEY_STORE_REQUEST_ID
RAW_TUPLE = "RawTuple"
STATUS_REASON = "StatusReason"
STATUS_DETAIL = "StatusDetail"
STATUS_MESSAGE = "StatusMessage"
GENERATION = "Generation"
REDRIVE_PENDING = "RedrivePending"
REDRIVEN_FLAG = "RedrivenFlag"
REDRIVEN_AT = "RedrivenAt"
REDRIVE_TOKEN = "RedriveToken"
CLEAR_TOKEN = "ClearToken"
FIRST_GENERATION = 1  # the API's transaction; a status row without Generation describes it


@dataclass(frozen=True, slots=True)
class Flagged:
    """A row an earlier transaction with the same id already flagged in this table."""

    reason: Reason
    detail: str
    message: str


@dataclass(frozen=True, slots=True)
class StatusRow:
    """A status row as stored; None for an attribute the row does not have."""

    store_request_id: str
    raw_tuple: str | None
    reason: int
    detail: str | None = None
    message: str | None = None
    generation: int = FIRST_GENERATION
    pending: bool = False  # a redrive cleared the flag and may not have started its execution yet

    @property
    def flagged(self) -> bool:
        return self.reason != Reason.OK

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> StatusRow:
        def text(name: str) -> str | None:
            return None if item.get(name) is None else str(item[name])

        return cls(
            store_request_id=str(item[KEY]),
            raw_tuple=text(RAW_TUPLE),
            reason=int(item.get(STATUS_REASON, 0)),
            detail=text(STATUS_DETAIL),
            message=text(STATUS_MESSAGE),
            generation=int(item.get(GENERATION, FIRST_GENERATION)),
            pending=bool(item.get(REDRIVE_PENDING, False)),
        )


class StatusTable(Protocol):
    def begin(self, store_request_id: str, raw_tuple: str) -> Flagged | None:
        """Record that the row entered the phase (reason 0), unless it is already flagged: then that."""

    def flag(self, store_request_id: str, raw_tuple: str, reason: Reason, detail: str, message: str) -> None:
        """Set the row's reason (creating the row if the phase failed before writing it)."""

    def clear_retryable(self, store_request_id: str, reason: Reason) -> bool:
        """Back to reason 0 if the row holds a retryable flag with this reason; False when it does not.

        True also when this call's own update was applied and its response lost: the SDK's retry then
        finds the row already cleared, by this call."""


class ChunkStatusTable(StatusTable, Protocol):
    """A status table a bulk chunk also reads in batches, before it writes (runtime/taxi_etl/bulk_chunk.py)."""

    def status_rows(self, store_request_ids: Iterable[str]) -> dict[str, StatusRow]:
        """The rows of these ids that exist, read consistently."""


class DynamoStatusTable:
    def __init__(self, table_name: str, client: DynamoDBClient) -> None:
        self._table = table_name
        self._client = client

    @property
    def client(self) -> DynamoDBClient:
        return self._client

    def begin(self, store_request_id: str, raw_tuple: str) -> Flagged | None:
        try:
            # A retried phase rewrites its own "in progress" row; a flag is never cleared. An update,
            # not a put, so that a redrive's bookkeeping on the row (Generation, ...) survives.
            self.client.update_item(
                TableName=self._table,
                Key=to_attributes({KEY: store_request_id}),
                UpdateExpression="SET #raw = :raw, #reason = :ok",
                ConditionExpression="attribute_not_exists(#key) OR #reason = :ok",
                ExpressionAttributeNames={"#key": KEY, "#reason": STATUS_REASON, "#raw": RAW_TUPLE},
                ExpressionAttributeValues=to_attributes({":raw": raw_tuple, ":ok": int(Reason.OK)}),
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

    def clear_retryable(self, store_request_id: str, reason: Reason) -> bool:
        # A token of this call's own: a row at reason 0 does not say who cleared it (a stored row the
        # flag step skipped never had a flag), the token does.
        token = uuid.uuid4().hex
        try:
            self.client.update_item(
                TableName=self._table,
                Key=to_attributes({KEY: store_request_id}),
                UpdateExpression="SET #reason = :ok, #token = :token REMOVE #detail, #message",
                ConditionExpression="#reason = :reason AND begins_with(#detail, :retryable)",
                ExpressionAttributeNames={
                    "#reason": STATUS_REASON,
                    "#detail": STATUS_DETAIL,
                    "#message": STATUS_MESSAGE,
                    "#token": CLEAR_TOKEN,
                },
                ExpressionAttributeValues=to_attributes(
                    {":ok": int(Reason.OK), ":reason": int(reason), ":retryable": contract.DETAIL_RETRYABLE_PREFIX, ":token": token}
                ),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as err:
            if not is_conditional_check_failed(err):
                raise
            found = item_when_condition_failed(err)
            # Applied before its response was lost, and the SDK sent it again: the row holds our token.
            return found is not None and found.get(CLEAR_TOKEN) == token
        return True

    def status_rows(self, store_request_ids: Iterable[str]) -> dict[str, StatusRow]:
        """The rows of these ids that exist, read consistently in batches (a bulk chunk reads before it writes)."""
        return {key: StatusRow.from_item(item) for key, item in batch_get_by_id(self.client, self._table, store_request_ids).items()}

    # --- for the operator's redrive (ops/taxi_redrive.py); the phases never call these ----------


def batch_get_by_id(client: DynamoDBClient, table: str, store_request_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The items of these ids that exist, read consistently (the shared BatchGetItem policy)."""
    keys = [to_attributes({KEY: key}) for key in sorted(set(store_request_ids))]
    try:
        items = batch_get_all(client, {table: keys})[table]
    except KeysUnprocessed as error:
        # The SDK already retried each throttled call; the task fails and the workflow retries it.
        raise StoreUnavailable(str(error)) from error
    return {str(item[KEY]): item for item in items}
