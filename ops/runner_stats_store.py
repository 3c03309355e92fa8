"""The runner-stats tables as the operator tools read and repair them. Not in the Lambda asset: the
handler never scans, reads whole items or rewrites totals; ops.runner_stats_reprocess does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError

from runtime.runner_stats.contract import KEY_CHUNK, KEY_RUN_ID, KEY_RUN_KEY, KEY_USER_ID
from runtime.runner_stats.models import (
    ArchiveChunk,
    ArchivedMessage,
    RunContext,
    RunKey,
)
from runtime.runner_stats.store import DynamoRunStatsStore, context_from_item, decode_messages, run_key_from_archive_key
from runtime.shared.aws import approximate_item_count
from runtime.shared.consistency import VersionConflict, VersionGuard
from runtime.shared.dynamo import (
    from_attributes,
    is_conditional_check_failed,
    item_when_condition_failed,
    to_attributes,
)


class RunStatsRepairStore(DynamoRunStatsStore):
    """The run-stats store plus the operator's scans, whole-item reads and the guarded totals rewrite."""

    def approximate_item_count(self, table_name: str) -> int:
        """DescribeTable's ItemCount (refreshed by DynamoDB about every 6 hours): a progress total."""
        return approximate_item_count(self.client, table_name)

    def scan_chunks(self) -> Iterator[ArchiveChunk]:
        """Every flushed archive chunk of every run (a consistent, paginated Scan)."""
        paginator = self.client.get_paginator("scan")
        for page in paginator.paginate(TableName=self._tables.messages, ConsistentRead=True):
            for raw in page.get("Items", []):
                item = from_attributes(raw)
                yield ArchiveChunk(
                    run_key_from_archive_key(str(item[KEY_RUN_KEY])), int(item[KEY_CHUNK]), decode_messages(item["messages"])
                )

    def scan_archive_tails(self) -> Iterator[tuple[RunKey, tuple[ArchivedMessage, ...]]]:
        """Every run item's key and archive tail (the messages not flushed into a chunk yet)."""
        paginator = self.client.get_paginator("scan")
        pages = paginator.paginate(
            TableName=self._tables.run_stats,
            ProjectionExpression="user_id, run_id, pending",
            ConsistentRead=True,
        )
        for page in pages:
            for raw in page.get("Items", []):
                item = from_attributes(raw)
                yield RunKey(int(item[KEY_USER_ID]), int(item[KEY_RUN_ID])), decode_messages(item.get("pending", ""))

    def read_run_item(self, key: RunKey) -> dict[str, Any] | None:
        """The whole combined item as stored (user-facing totals and dedup record from one read)."""
        response = self.client.get_item(
            TableName=self._tables.run_stats,
            Key=to_attributes({KEY_USER_ID: key.user_id, KEY_RUN_ID: key.run_id}),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return from_attributes(item) if item else None

    def read_chunks(self, key: RunKey, count: int) -> list[ArchiveChunk]:
        """The run's flushed chunks with index < count (the ones a run item with `chunks` = count covers)."""
        chunks: list[ArchiveChunk] = []
        paginator = self.client.get_paginator("query")
        pages = paginator.paginate(
            TableName=self._tables.messages,
            KeyConditionExpression="run_key = :run_key AND chunk < :count",
            ExpressionAttributeValues={":run_key": {"S": key.archive_key}, ":count": {"N": str(count)}},
            ConsistentRead=True,
        )
        for page in pages:
            for raw in page.get("Items", []):
                item = from_attributes(raw)
                chunks.append(ArchiveChunk(key, int(item[KEY_CHUNK]), decode_messages(item["messages"])))
        return chunks

    def load_user_runs(self, user_id: int) -> list[RunContext]:
        """Every run item of one user (a consistent Query on the table's partition key)."""
        contexts: list[RunContext] = []
        paginator = self.client.get_paginator("query")
        pages = paginator.paginate(
            TableName=self._tables.run_stats,
            KeyConditionExpression="user_id = :user_id",
            ExpressionAttributeValues={":user_id": {"N": str(user_id)}},
            ConsistentRead=True,
        )
        for page in pages:
            contexts.extend(context_from_item(from_attributes(raw)) for raw in page.get("Items", []))
        return contexts

    def rewrite_totals(self, context: RunContext) -> None:
        """Set only the user-facing totals of a stored run item to context's, as version context.version,
        over version context.version - 1 (the stale-write guard). Every other attribute (high water,
        gaps, closed ranges, archive tail, chunk count, confirmed tendency) stays as stored."""
        if context.version < 2 or context.first_ts is None or context.last_ts is None:
            raise ValueError("only a stored run item (version >= 1) with applied messages can have its totals rewritten")
        guard = VersionGuard(KEY_USER_ID, "version", context.version - 1)
        condition, names, values = guard.condition()
        totals: dict[str, Any] = {
            "total_meters": context.total_meters,
            "total_seconds": context.total_seconds,
            "message_count": context.message_count,
            "first_ts": context.first_ts,
            "last_ts": context.last_ts,
            "version": context.version,
        }
        expression = "SET " + ", ".join(f"#{name} = :{name}" for name in totals)
        names.update({f"#{name}": name for name in totals})
        values.update(to_attributes({f":{name}": value for name, value in totals.items()}))
        try:
            self.client.update_item(
                TableName=self._tables.run_stats,
                Key=to_attributes({KEY_USER_ID: context.key.user_id, KEY_RUN_ID: context.key.run_id}),
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as err:
            if is_conditional_check_failed(err):
                found = item_when_condition_failed(err)
                if found is not None and all(found.get(name) == value for name, value in totals.items()):
                    return  # our own update, applied before its response was lost and the SDK retried it
                raise VersionConflict(f"run {context.key} moved past version {context.version - 1}") from err
            raise
