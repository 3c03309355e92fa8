"""The taxi status tables as the operator's redrive reads and claims them. Not in the Lambda asset:
the phases never scan, claim a redrive or end one; ops.taxi_redrive does."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from botocore.exceptions import ClientError

from runtime.shared.aws import approximate_item_count
from runtime.shared.dynamo import (
    cancellation_codes,
    cancelled_item,
    from_attributes,
    is_conditional_check_failed,
    to_attributes,
)
from runtime.taxi_etl.store import (
    FIRST_GENERATION,
    GENERATION,
    KEY,
    REDRIVE_PENDING,
    REDRIVE_TOKEN,
    REDRIVEN_AT,
    REDRIVEN_FLAG,
    STATUS_DETAIL,
    STATUS_MESSAGE,
    STATUS_REASON,
    DynamoStatusTable,
    StatusRow,
    batch_get_by_id,
)
from runtime.taxi_etl.trips import Reason


def unchanged_condition(row: StatusRow | None, prefix: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """A condition that holds only while the row's flag is as it was read (or the row absent, for None)."""
    if row is None:
        return "attribute_not_exists(#key)", {"#key": KEY}, {}
    parts = [f"#reason = :{prefix}_reason"]
    names = {"#reason": STATUS_REASON}
    values: dict[str, Any] = {f":{prefix}_reason": row.reason}
    for name, attribute, value in (("detail", STATUS_DETAIL, row.detail), ("message", STATUS_MESSAGE, row.message)):
        names[f"#{name}"] = attribute
        if value is None:
            parts.append(f"attribute_not_exists(#{name})")
        else:
            parts.append(f"#{name} = :{prefix}_{name}")
            values[f":{prefix}_{name}"] = value
    return " AND ".join(parts), names, values


class StatusRepairTable(DynamoStatusTable):
    """A status table plus the redrive's scan, reads, claim and completion."""

    @property
    def table_name(self) -> str:
        return self._table

    def approximate_count(self) -> int:
        """DynamoDB's item count (refreshed about every six hours): a progress bar's total."""
        return approximate_item_count(self.client, self._table)

    def scan_flagged(self, *, with_pending: bool = False, on_page: Callable[[int], None] | None = None) -> Iterator[StatusRow]:
        """Every flagged row (with `with_pending`, also every row a redrive left pending); `on_page`
        gets each page's scanned count, for a progress bar."""
        names = {"#reason": STATUS_REASON}
        condition = "#reason <> :ok"
        if with_pending:
            names["#pending"] = REDRIVE_PENDING
            condition += " OR attribute_exists(#pending)"
        pages = self.client.get_paginator("scan").paginate(
            TableName=self._table,
            ConsistentRead=True,
            FilterExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=to_attributes({":ok": int(Reason.OK)}),
        )
        for page in pages:
            if on_page is not None:
                on_page(int(page.get("ScannedCount", 0)))
            for attributes in page.get("Items", []):
                yield StatusRow.from_item(from_attributes(attributes))

    def read_rows(self, store_request_ids: Iterable[str]) -> dict[str, StatusRow]:
        """The rows of these ids that exist, read consistently."""
        items = batch_get_by_id(self.client, self._table, store_request_ids)
        return {key: StatusRow.from_item(item) for key, item in items.items()}

    def claim_redrive(self, seen: StatusRow, later: Sequence[tuple[StatusRepairTable, StatusRow | None]], *, at: str) -> int | None:
        """Open the next generation of `seen`'s id, atomically, and only if no row changed since it was
        read: this (validation) row gets reason 0, Generation + 1 and RedrivePending, and the rows in
        the `later` phases' tables are deleted (the redrive's execution writes them again). Returns the
        new generation, or None when a row changed since it was read (another run claimed it, or an
        execution wrote it): then nothing was written.

        The claim carries a token of its own. When the transaction was applied but its response was
        lost, botocore's retry fails the conditions against the claim itself (DynamoDB would honour
        the transaction's ClientRequestToken for ten minutes; the code does not rely on it): the
        validation row then holds our token and generation, and the claim is ours."""
        generation = seen.generation + 1
        token = uuid.uuid4().hex
        condition, names, values = unchanged_condition(seen, "a")
        condition += " AND attribute_not_exists(#pending) AND "
        if seen.generation == FIRST_GENERATION:
            condition += "attribute_not_exists(#generation)"
        else:
            condition += "#generation = :a_generation"
            values[":a_generation"] = seen.generation
        names |= {
            "#detail": STATUS_DETAIL,
            "#message": STATUS_MESSAGE,
            "#generation": GENERATION,
            "#pending": REDRIVE_PENDING,
            "#flag": REDRIVEN_FLAG,
            "#at": REDRIVEN_AT,
            "#token": REDRIVE_TOKEN,
        }
        values |= {":ok": int(Reason.OK), ":generation": generation, ":pending": True, ":at": at, ":token": token}
        values[":flag"] = f"{seen.reason} {seen.detail or ''}: {seen.message or ''}"[:600]
        update = {
            "TableName": self._table,
            "Key": to_attributes({KEY: seen.store_request_id}),
            "UpdateExpression": "SET #reason = :ok, #generation = :generation, #pending = :pending, #flag = :flag, #at = :at,"
            " #token = :token REMOVE #detail, #message",
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": to_attributes(values),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        items: list[dict[str, Any]] = [{"Update": update}]
        for table, row in later:
            condition, names, values = unchanged_condition(row, "r")
            delete: dict[str, Any] = {
                "TableName": table.table_name,
                "Key": to_attributes({KEY: seen.store_request_id}),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
            }
            if values:
                delete["ExpressionAttributeValues"] = to_attributes(values)
            items.append({"Delete": delete})
        try:
            self.client.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        except ClientError as err:
            found = cancelled_item(err, 0)
            if found is not None and found.get(REDRIVE_TOKEN) == token and found.get(GENERATION) == generation:
                return generation  # our own claim, applied before its response was lost
            codes = cancellation_codes(err)
            if codes and set(codes) <= {"None", "ConditionalCheckFailed", "TransactionConflict"}:
                return None
            raise
        return generation

    def end_pending(self, store_request_id: str, generation: int) -> None:
        """The generation's execution is started: the row is no longer pending (a no-op when it is not)."""
        try:
            self.client.update_item(
                TableName=self._table,
                Key=to_attributes({KEY: store_request_id}),
                UpdateExpression="REMOVE #pending",
                ConditionExpression="#generation = :generation",
                ExpressionAttributeNames={"#pending": REDRIVE_PENDING, "#generation": GENERATION},
                ExpressionAttributeValues=to_attributes({":generation": generation}),
            )
        except ClientError as err:
            if not is_conditional_check_failed(err):  # else a later generation owns the row: not ours to touch
                raise
