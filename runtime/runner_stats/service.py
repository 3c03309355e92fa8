"""Batch processing for runner stats: parse, fold per run, commit each run, then push tendencies.

Write order per user (each idempotent or conditional, so a crash between any two is repaired
by redelivery):
1. tendency pushes still owed by committed runs (see below);
2. too-late and suspect-jump records into the rejects table (deterministic key: the record's eventID);
3. per key, the combined run item (conditional on the version read), together with a flushed
   archive chunk in one transaction when the stored archive tail is full;
4. the user's tendency record, when a committed run's label changed.
The tendency is only ever computed from committed totals, and the run item records the label
whose push was confirmed (`tendency`); until then the push is owed and step 1 settles it.
A push merges into the user's record as last read or written by this invocation: the users with
a run new to the batch or a push still owed (known from the contexts read) have theirs read up
front, 100 to a BatchGetItem, instead of one GetItem each; the write stays conditional on that
version, and a lost race re-reads.
A key that keeps losing races, or whose writes fail, is reported at its first record in the
batch (stop-at-first-failure per key); Lambda re-reads from there and the records already
applied are dropped as duplicates.

Users are independent (no write of one user's touches another's items), so up to
`io_concurrency` users are processed at once, each on its own thread with its own report; the
steps above stay in order within that thread. A user's runs are independent items too, so when
a batch holds fewer users than `io_concurrency` (one user's backlog of runs, say), step 3
commits each user's keys on the threads the other users leave free: `io_concurrency // users`
at once, one at a time in the usual batch of hundreds of users. The batch's reads of the run
contexts go out concurrently too, and so do the rejects of poison records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
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
    TimestampWindow,
    UserTendency,
)
from runtime.runner_stats.parsing import parse_record
from runtime.runner_stats.store import RunStatsStore
from runtime.shared.concurrency import map_bounded
from runtime.shared.consistency import VersionConflict
from runtime.shared.observability import logger


@dataclass(slots=True)
class BatchReport:
    """What happened to one batch: counts for metrics, and the records Lambda must redeliver."""

    failures: list[StreamPosition] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def merge(self, other: BatchReport) -> None:
        self.failures.extend(other.failures)
        self.counts.update(other.counts)

    def batch_item_failures(self) -> list[dict[str, str]]:
        return [{"itemIdentifier": position.sequence_number} for position in self.failures]


@dataclass(slots=True)
class _KnownTendency:
    """A user's tendency record as this invocation last read or wrote it (None: read it first)."""

    record: UserTendency | None


# What one key's commit came to (RunnerStatsService._commit_key).
_COMMITTED, _CONFLICTED, _BROKEN = "committed", "conflicted", "broken"


@dataclass(frozen=True, slots=True)
class ServiceOptions:
    policy: FoldPolicy = field(default_factory=FoldPolicy)
    commit_attempts: int = 4
    # Kinesis's record limit: extra device metadata is ignored, not a reason to reject.
    max_message_bytes: int = 1_048_576
    timestamps: TimestampWindow = field(default_factory=TimestampWindow)
    # Users processed at once (threads), and BatchGetItem chunks read at once. 1 runs everything in order.
    io_concurrency: int = 32


def owes_tendency_push(context: RunContext) -> bool:
    """The run's committed label has not been confirmed in the user's tendency record yet."""
    return context.message_count > 0 and tendency_label(context.total_meters) != context.tendency


def _will_push(read: RunContext) -> bool:
    """A run whose user's tendency record this batch will push to, known before the fold: a new run
    (its first applied message gives it a label) or one whose label is still owed."""
    return read.version == 0 or owes_tendency_push(read)


class RunnerStatsService:
    def __init__(self, store: RunStatsStore, options: ServiceOptions = ServiceOptions()) -> None:
        self._store = store
        self._options = options

    def process(self, records: Sequence[Mapping[str, Any]]) -> BatchReport:
        """Fold the batch into run statistics; the report names the records to redeliver.

        Not Powertools' BatchProcessor: it handles records one by one and reports each failed
        record, while this pipeline reads a batch's contexts in one call, commits per run key and,
        when a key fails, reports that key's FIRST record. Kinesis redelivers from the lowest
        reported sequence number, so every later message of that key comes back in order; a
        per-record report would let a later message of a run be applied before an earlier one.
        """
        report = BatchReport()
        by_key: dict[RunKey, list[PositionedMessage]] = {}
        rejections: list[Rejection] = []
        for record in records:
            parsed = parse_record(record, max_bytes=self._options.max_message_bytes, window=self._options.timestamps)
            if isinstance(parsed, Rejection):
                rejections.append(parsed)
            else:
                by_key.setdefault(parsed.message.key, []).append(parsed)
        for rejected in map_bounded(self._reject, rejections, self._options.io_concurrency):
            report.merge(rejected)
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
        known = self._known_tendencies(by_user, contexts)

        # The threads users leave free commit a user's keys at once (at least one per user).
        commit_concurrency = max(1, self._options.io_concurrency // len(by_user))

        def process_user(user_id: int) -> BatchReport:
            # The user's own contexts and report: threads share nothing they write.
            user_report = BatchReport()
            user_contexts = {key: contexts[key] for key in by_user[user_id]}
            failed = self._process_user(
                user_id, by_user[user_id], user_contexts, by_key, user_report, commit_concurrency, known.get(user_id)
            )
            user_report.failures.extend(by_key[key][0].position for key in failed)
            return user_report

        for user_report in map_bounded(process_user, list(by_user), self._options.io_concurrency):
            report.merge(user_report)
        return report

    def _known_tendencies(self, by_user: Mapping[int, Sequence[RunKey]], contexts: Mapping[RunKey, RunContext]) -> dict[int, UserTendency]:
        """The tendency records of the users who will push, as far as the contexts read tell: a run new to the
        batch, or a push still owed. Read up front; none if that read fails (each push then reads its own,
        as for a run whose label changes in this batch)."""
        pushing = [user_id for user_id, keys in by_user.items() if any(_will_push(contexts[key]) for key in keys)]
        if not pushing:
            return {}
        try:
            return self._store.load_tendencies(pushing)
        except Exception:
            logger.exception("could not read tendency records up front; each push reads its own")
            return {}

    def _reject(self, rejection: Rejection) -> BatchReport:
        report = BatchReport()
        try:
            self._store.save_rejections([rejection])
        except Exception:
            logger.exception("could not store a rejected record", extra={"record_id": rejection.position.record_id})
            report.failures.append(rejection.position)
            return report
        logger.warning(
            "record rejected",
            extra={"record_id": rejection.position.record_id, "reason": rejection.reason.value, "detail": rejection.detail},
        )
        report.counts["rejected"] += 1
        return report

    def _process_user(
        self,
        user_id: int,
        keys: list[RunKey],
        contexts: dict[RunKey, RunContext],
        by_key: Mapping[RunKey, Sequence[PositionedMessage]],
        report: BatchReport,
        commit_concurrency: int = 1,
        tendency: UserTendency | None = None,
    ) -> list[RunKey]:
        """Apply a user's keys (committing up to `commit_concurrency` at once); returns the keys to report
        as failed. `tendency` is the user's record as read up front, if it was."""
        known = _KnownTendency(tendency)
        remaining = list(keys)
        failed: list[RunKey] = []
        for attempt in range(self._options.commit_attempts):
            if attempt:
                report.counts["retried"] += len(remaining)
            results: dict[RunKey, FoldResult] = {}
            for key in list(remaining):
                try:
                    results[key] = fold(contexts[key], by_key[key], self._options.policy, self._archive_lookup(contexts[key]))
                except Exception:
                    logger.exception("could not fold a run; it will be redelivered", extra={"user_id": key.user_id, "run_id": key.run_id})
                    failed.append(key)
                    remaining.remove(key)
            if not remaining:
                return failed
            try:
                # A crash between a commit and its tendency push leaves the push owed; settle
                # it first, from the committed totals, so the commit below may record it.
                self._push_tendency(user_id, [contexts[key] for key in remaining if owes_tendency_push(contexts[key])], known)
                self._store_too_late(results)
            except Exception:
                logger.exception("writes for a user failed; its keys will be redelivered", extra={"user_id": user_id})
                return failed + remaining
            remaining, broken, committed = self._commit_keys(results, contexts, report, commit_concurrency)
            failed.extend(broken)
            owed = [key for key in committed if owes_tendency_push(contexts[key])]
            try:
                self._push_tendency(user_id, [contexts[key] for key in owed], known)
            except Exception:
                # The totals are committed; redelivery finds the push owed and settles it.
                logger.exception("tendency push failed after commit", extra={"user_id": user_id})
                failed.extend(owed)
            if not remaining:
                return failed
        logger.warning("optimistic retries exhausted", extra={"user_id": user_id, "keys": len(remaining)})
        return failed + remaining

    def _archive_lookup(self, context: RunContext) -> Callable[[int], bool]:
        """Was this sequence applied? Asked only below the run's forgotten closed ranges; the archive
        is read once per fold attempt, from the context that attempt folds over."""
        archived: frozenset[int] | None = None

        def lookup(sequence_id: int) -> bool:
            nonlocal archived
            if archived is None:
                archived = self._store.archived_sequences(context)
            return sequence_id in archived

        return lookup

    def _store_too_late(self, results: Mapping[RunKey, FoldResult]) -> None:
        """Too-late and suspect records, before the commit that decides them (an idempotent overwrite)."""
        limit = self._options.policy.jump_limit
        late = [
            Rejection(p.position, RejectReason.TOO_LATE, f"sequence {p.message.sequence_id} was given up as a gap", p.payload, key)
            for key, result in results.items()
            for p in result.too_late
        ]
        suspect = [
            Rejection(
                p.position,
                RejectReason.SUSPECT_JUMP,
                f"sequence {p.message.sequence_id} is more than {limit} above the run's highest applied sequence;"
                " held in the run item: applied if a later message of the run jumps to within"
                f" {limit} of it, or the run catches up to it (the run's archive shows it then)",
                p.payload,
                key,
            )
            for key, result in results.items()
            for p in result.suspect
        ]
        if late or suspect:
            self._store.save_rejections(late + suspect)

    def _push_tendency(self, user_id: int, committed: Sequence[RunContext], known: _KnownTendency) -> None:
        """Merge committed runs' labels into the user's record (conditional on its version), starting from
        the record as this invocation last knew it; a lost race forgets it and re-reads."""
        slots = [TendencySlot(c.key.run_id, c.first_ts or 0, tendency_label(c.total_meters)) for c in committed]
        if not slots:
            return
        for _ in range(self._options.commit_attempts):
            current = known.record if known.record is not None else self._store.load_tendency(user_id)
            merged = reduce(merge_tendency, slots, current)
            if merged == current:
                known.record = current
                return
            try:
                self._store.save_tendency(merged)
            except VersionConflict:
                known.record = None
                continue
            known.record = replace(merged, version=merged.version + 1)  # what the write stored
            return
        raise VersionConflict(f"tendency of user {user_id} kept moving")

    def _commit_keys(
        self, results: Mapping[RunKey, FoldResult], contexts: dict[RunKey, RunContext], report: BatchReport, concurrency: int = 1
    ) -> tuple[list[RunKey], list[RunKey], list[RunKey]]:
        """Commit each key, up to `concurrency` at once; returns (keys that lost a race, keys whose
        writes failed, committed keys). `contexts` and `report` are updated after every commit has
        returned, in the keys' order, so the threads share nothing they write."""
        keys = list(results)
        outcomes = map_bounded(lambda key: self._commit_key(key, results[key], contexts[key]), keys, concurrency)
        conflicted: list[RunKey] = []
        broken: list[RunKey] = []
        committed: list[RunKey] = []
        for key, (outcome, context) in zip(keys, outcomes, strict=True):
            if context is not None:
                contexts[key] = context
            if outcome == _CONFLICTED:
                conflicted.append(key)
            elif outcome == _BROKEN:
                broken.append(key)
            else:
                committed.append(key)
                self._count(results[key], report)
        return conflicted, broken, committed

    def _commit_key(self, key: RunKey, result: FoldResult, read: RunContext) -> tuple[str, RunContext | None]:
        """One key's commit: (outcome, the context to keep for it, or None to keep the one read)."""
        # Labels of the read totals were pushed just before (owed ones) or earlier.
        settled_label = tendency_label(read.total_meters) if read.message_count else None
        try:
            if not (result.changed or settled_label != read.tendency):
                return _COMMITTED, None
            new_context = replace(result.context, version=read.version + 1, tendency=settled_label)
            try:
                self._store.commit(new_context, result.chunk)
            except VersionConflict:
                return _CONFLICTED, self._store.load_context(key)
            return _COMMITTED, new_context
        except Exception:
            logger.exception("commit failed; the key will be redelivered", extra={"user_id": key.user_id, "run_id": key.run_id})
            return _BROKEN, None

    @staticmethod
    def _count(result: FoldResult, report: BatchReport) -> None:
        names = {Outcome.ACCEPTED: "accepted", Outcome.DUPLICATE: "duplicate", Outcome.TOO_LATE: "stale", Outcome.SUSPECT: "suspect"}
        for _, outcome in result.outcomes:
            report.counts[names[outcome]] += 1
        report.counts["accepted"] += result.released  # held messages, applied now
        report.counts["gaps_closed"] += result.gaps_closed
