"""Batch processing for runner stats: parse, fold per key, write outputs, then the context.

Write order per user (all idempotent, so a crash between any two is repaired by redelivery):
1. too-late records into the rejects table (deterministic key: the record's eventID);
2. the user's tendency record, only when a run's label changes (conditional on its version);
3. per key, the combined run item (conditional on the version read), together with a flushed
   archive chunk in one transaction when the stored archive tail is full.
A key that keeps losing races, or whose writes fail, is reported at its first record in the
batch (stop-at-first-failure per key); Lambda re-reads from there and the records already
applied are dropped as duplicates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import reduce
from typing import Any

from runtime.runner_stats.logic import fold, merge_tendency, tendency_label
from runtime.runner_stats.models import (
    FoldPolicy,
    FoldResult,
    Outcome,
    PositionedMessage,
    Rejection,
    RejectReason,
    RunContext,
    RunKey,
    StreamPosition,
    TendencySlot,
)
from runtime.runner_stats.parsing import parse_record
from runtime.runner_stats.store import RunStatsStore
from runtime.shared.consistency import VersionConflict
from runtime.shared.observability import logger


@dataclass(slots=True)
class BatchReport:
    """What happened to one batch: counts for metrics, and the records Lambda must redeliver."""

    failures: list[StreamPosition] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def batch_item_failures(self) -> list[dict[str, str]]:
        return [{"itemIdentifier": position.sequence_number} for position in self.failures]


@dataclass(frozen=True, slots=True)
class ServiceOptions:
    policy: FoldPolicy = field(default_factory=FoldPolicy)
    commit_attempts: int = 4
    max_message_bytes: int = 4096


class RunnerStatsService:
    def __init__(self, store: RunStatsStore, options: ServiceOptions = ServiceOptions()) -> None:
        self._store = store
        self._options = options

    def process(self, records: Sequence[Mapping[str, Any]]) -> BatchReport:
        report = BatchReport()
        by_key: dict[RunKey, list[PositionedMessage]] = {}
        for record in records:
            parsed = parse_record(record, max_bytes=self._options.max_message_bytes)
            if isinstance(parsed, Rejection):
                self._reject(parsed, report)
            else:
                by_key.setdefault(parsed.message.key, []).append(parsed)
        if not by_key:
            return report
        keys = list(by_key)
        try:
            contexts = self._store.load_contexts(keys)
        except Exception:
            logger.exception("could not read run contexts; the whole batch will be redelivered")
            report.failures.extend(by_key[key][0].position for key in keys)
            return report
        by_user: dict[int, list[RunKey]] = {}
        for key in keys:
            by_user.setdefault(key.user_id, []).append(key)
        for user_id, user_keys in by_user.items():
            failed = self._process_user(user_id, user_keys, contexts, by_key, report)
            report.failures.extend(by_key[key][0].position for key in failed)
        return report

    def _reject(self, rejection: Rejection, report: BatchReport) -> None:
        try:
            self._store.save_rejections([rejection])
        except Exception:
            logger.exception("could not store a rejected record", extra={"record_id": rejection.position.record_id})
            report.failures.append(rejection.position)
            return
        logger.warning(
            "record rejected",
            extra={"record_id": rejection.position.record_id, "reason": rejection.reason.value, "detail": rejection.detail},
        )
        report.counts["rejected"] += 1

    def _process_user(
        self,
        user_id: int,
        keys: list[RunKey],
        contexts: dict[RunKey, RunContext],
        by_key: Mapping[RunKey, Sequence[PositionedMessage]],
        report: BatchReport,
    ) -> list[RunKey]:
        """Apply a user's keys; returns the keys that could not be committed."""
        remaining = list(keys)
        failed: list[RunKey] = []
        force_tendency_sync = False
        for attempt in range(self._options.commit_attempts):
            if attempt:
                report.counts["retried"] += len(remaining)
            # Whoever beat us may have pushed a tendency built on other data: after any lost
            # race the tendency is re-checked against the fresh contexts.
            force_tendency_sync = force_tendency_sync or attempt > 0
            try:
                results = {key: fold(contexts[key], by_key[key], self._options.policy) for key in remaining}
                self._store_too_late(results)
                self._sync_tendency(user_id, results, force=force_tendency_sync)
            except VersionConflict:
                logger.info("tendency write lost a race; retrying", extra={"user_id": user_id, "attempt": attempt})
                continue
            except Exception:
                logger.exception("writes for a user failed; its keys will be redelivered", extra={"user_id": user_id})
                return failed + remaining
            remaining, broken = self._commit_keys(results, contexts, report)
            failed.extend(broken)
            if not remaining:
                return failed
        logger.warning("optimistic retries exhausted", extra={"user_id": user_id, "keys": len(remaining)})
        return failed + remaining

    def _store_too_late(self, results: Mapping[RunKey, FoldResult]) -> None:
        late = [
            Rejection(p.position, RejectReason.TOO_LATE, f"sequence {p.message.sequence_id} was given up as a gap", p.payload, key)
            for key, result in results.items()
            for p in result.too_late
        ]
        if late:
            self._store.save_rejections(late)

    def _sync_tendency(self, user_id: int, results: Mapping[RunKey, FoldResult], *, force: bool) -> None:
        slots = [
            TendencySlot(key.run_id, result.context.first_ts or 0, tendency_label(result.context.total_meters))
            for key, result in results.items()
            if result.context.message_count and (force or tendency_label(result.context.total_meters) != result.context.tendency)
        ]
        if not slots:
            return
        current = self._store.load_tendency(user_id)
        merged = reduce(merge_tendency, slots, current)
        if merged != current:
            self._store.save_tendency(merged)

    def _commit_keys(
        self, results: Mapping[RunKey, FoldResult], contexts: dict[RunKey, RunContext], report: BatchReport
    ) -> tuple[list[RunKey], list[RunKey]]:
        """Commit each key; returns (keys that lost a race, keys whose writes failed)."""
        conflicted: list[RunKey] = []
        broken: list[RunKey] = []
        for key, result in results.items():
            label = tendency_label(result.context.total_meters) if result.context.message_count else None
            try:
                if result.changed or label != result.context.tendency:
                    new_context = replace(result.context, version=contexts[key].version + 1, tendency=label)
                    try:
                        self._store.commit(new_context, result.chunk)
                    except VersionConflict:
                        conflicted.append(key)
                        contexts[key] = self._store.load_context(key)
                        continue
                    contexts[key] = new_context
            except Exception:
                logger.exception("commit failed; the key will be redelivered", extra={"user_id": key.user_id, "run_id": key.run_id})
                broken.append(key)
                continue
            self._count(result, report)
        return conflicted, broken

    @staticmethod
    def _count(result: FoldResult, report: BatchReport) -> None:
        for _, outcome in result.outcomes:
            name = {Outcome.ACCEPTED: "accepted", Outcome.DUPLICATE: "duplicate", Outcome.TOO_LATE: "stale"}[outcome]
            report.counts[name] += 1
        report.counts["gaps_closed"] += result.gaps_closed
