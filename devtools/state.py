"""A canonical view of what the runner-stats pipeline stored, for comparing two runs.

Chunk boundaries, versions and the order of the archive tail depend on how messages were
batched; they are bookkeeping, not results, so the view leaves them out and compares the
archive as a set of messages per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from runtime.runner_stats.contract import KEY_RECORD_ID, KEY_USER_ID
from runtime.runner_stats.models import ArchivedMessage
from runtime.runner_stats.store import DynamoRunStatsStore, RunStatsTables, context_from_item, tendency_from_item
from runtime.shared.dynamo import from_attributes


@dataclass(frozen=True)
class RunView:
    total_meters: Decimal
    total_seconds: Decimal
    first_ts: int | None
    last_ts: int | None
    message_count: int
    high_water: int
    gaps: tuple[tuple[int, int], ...]
    archived: tuple[ArchivedMessage, ...]
    held: tuple[ArchivedMessage, ...] = ()  # suspect jumps held in the run item, by sequence
    closed: tuple[tuple[int, int], ...] = ()
    forgotten: int = 0


@dataclass(frozen=True)
class PipelineView:
    runs: dict[tuple[int, int], RunView]
    tendencies: dict[int, tuple[int | None, str | None, int | None, str | None]]
    rejects: dict[str, str]  # record id -> reason


def _scan(client: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        items.extend(from_attributes(raw) for raw in page.get("Items", []))
    return items


def capture(client: Any, tables: RunStatsTables) -> PipelineView:
    store = DynamoRunStatsStore(tables, client=client)
    runs: dict[tuple[int, int], RunView] = {}
    for item in _scan(client, tables.run_stats):
        context = context_from_item(item)
        archived = tuple(sorted(store.read_archive(context), key=lambda m: m.sequence_id))
        runs[(context.key.user_id, context.key.run_id)] = RunView(
            total_meters=context.total_meters,
            total_seconds=context.total_seconds,
            first_ts=context.first_ts,
            last_ts=context.last_ts,
            message_count=context.message_count,
            high_water=context.high_water,
            gaps=context.gaps,
            archived=archived,
            held=tuple(sorted(context.held, key=lambda m: m.sequence_id)),
            closed=context.closed,
            forgotten=context.forgotten,
        )
    tendencies: dict[int, tuple[int | None, str | None, int | None, str | None]] = {}
    for item in _scan(client, tables.tendency):
        record = tendency_from_item(int(item[KEY_USER_ID]), item)
        current, previous = record.current, record.previous
        tendencies[record.user_id] = (
            current.run_id if current else None,
            current.label if current else None,
            previous.run_id if previous else None,
            previous.label if previous else None,
        )
    rejects = {str(item[KEY_RECORD_ID]): str(item["reason"]) for item in _scan(client, tables.rejects)}
    return PipelineView(runs, tendencies, rejects)
