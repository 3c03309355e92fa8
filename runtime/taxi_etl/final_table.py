"""The trips table (the final table) as a port, with its DynamoDB adapter, and the reader of one row
across the three status tables and the trips table (see runtime/taxi_etl/store.py for the tables)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

from runtime.shared.aws import KeysUnprocessed, batch_get_all
from runtime.shared.dynamo import from_attributes, is_conditional_check_failed, to_attributes
from runtime.taxi_etl.errors import StoreConflict, StoreUnavailable
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.store import KEY, StatusRow, batch_get_by_id
from runtime.taxi_etl.trip_items import same_trip

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class PutOutcome(StrEnum):
    STORED = "stored"
    ALREADY_STORED = "already_stored"  # a retry: the same item is there


class FinalTable(Protocol):
    def put_once(self, item: Mapping[str, Any]) -> PutOutcome: ...

    def stored_items(self, store_request_ids: Iterable[str]) -> dict[str, dict[str, Any]]: ...


class DynamoFinalTable:
    def __init__(self, table_name: str, client: DynamoDBClient) -> None:
        self._table = table_name
        self._client = client

    @property
    def client(self) -> DynamoDBClient:
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
            if not same_trip(existing, item):
                raise StoreConflict(f"StoreRequestId {item[KEY]} is already stored with different content") from err
            return PutOutcome.ALREADY_STORED
        return PutOutcome.STORED

    def stored_items(self, store_request_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        return batch_get_by_id(self.client, self._table, store_request_ids)


class RowReader(Protocol):
    def read(self, store_request_id: str) -> tuple[dict[Phase, StatusRow | None], dict[str, Any] | None]:
        """The id's status row in each phase's table (None where there is none) and its trips item."""


class DynamoRowReader:
    """One consistent BatchGetItem over the three status tables and the trips table: one round trip,
    4 RRU for items up to 4 KB (a missing item costs its read too). Consistent, so a GET right after
    a phase wrote never shows the row's earlier state."""

    def __init__(self, status_tables: Mapping[Phase, str], final_table: str, client: DynamoDBClient) -> None:
        self._status_tables = dict(status_tables)
        self._final_table = final_table
        self._client = client

    @property
    def client(self) -> DynamoDBClient:
        return self._client

    def read(self, store_request_id: str) -> tuple[dict[Phase, StatusRow | None], dict[str, Any] | None]:
        key = to_attributes({KEY: store_request_id})
        tables = [*self._status_tables.values(), self._final_table]
        try:
            read = batch_get_all(self.client, {table: [key] for table in tables})
        except KeysUnprocessed as error:
            raise StoreUnavailable(str(error)) from error
        found = {table: items[0] for table, items in read.items() if items}
        status = {phase: StatusRow.from_item(found[table]) if table in found else None for phase, table in self._status_tables.items()}
        return status, found.get(self._final_table)
