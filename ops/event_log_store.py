"""The event-log tables as the operator tools read them. Not in the Lambda asset: no handler scans a
log or asks when an entry was appended; ops.event_log_reprocess and ops.event_log_pending do."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from runtime.event_log.store import DynamoLogStore, DynamoPendingStore
from runtime.shared.aws import approximate_item_count
from runtime.shared.dynamo import (
    from_attributes,
)


class LogRepairStore(DynamoLogStore):
    """The log store plus the operator's reads: when an entry was appended, and a whole log in order."""

    def created_at(self, log_id: str, position: int) -> str | None:
        """When the event at `position` was appended (ISO-8601), or None if there is none."""
        response = self.client.get_item(
            TableName=self._table, Key=self._key(log_id, position), ProjectionExpression="created_at", ConsistentRead=True
        )
        value = from_attributes(response.get("Item") or {}).get("created_at")
        return str(value) if value is not None else None

    def scan_log(self, log_id: str, after: Decimal) -> Iterator[dict[str, Any]]:
        """Every entry of a log after `after`, in log order (operator tools)."""
        while True:
            items, next_after = self.entries_after(log_id, after, None)
            yield from items
            if next_after is None:
                return
            after = next_after


class PendingRepairStore(DynamoPendingStore):
    """The pending-snapshots store plus a progress total for the operator's listing."""

    def approximate_count(self) -> int:
        """DynamoDB's item count (refreshed about every six hours): a progress bar's total."""
        return approximate_item_count(self.client, self._table)
