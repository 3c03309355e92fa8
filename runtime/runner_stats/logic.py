"""The pure core of runner stats: fold a key's messages into its context, and merge tendencies.

`fold(context, messages)` is the seed's g(x, c) = (r, c') applied to a whole batch for one key:
it applies the messages one by one in memory, so its result is identical to processing them
one at a time, and it is written once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from decimal import Decimal

from runtime.runner_stats.errors import AmbiguousSequence
from runtime.runner_stats.models import (
    ArchiveChunk,
    ArchivedMessage,
    FoldPolicy,
    FoldResult,
    Outcome,
    PositionedMessage,
    RunContext,
    SeqRange,
    TendencySlot,
    UserTendency,
)

# Milestones of a run's total distance. Labels only move up, because totals only grow.
TENDENCY_MILESTONES: tuple[tuple[Decimal, str], ...] = ((Decimal(5000), "well done"), (Decimal(200), "good job"))
TENDENCY_START = "fine"
_LABEL_RANK = {TENDENCY_START: 0, **{label: rank for rank, (_, label) in enumerate(reversed(TENDENCY_MILESTONES), start=1)}}


def tendency_label(total_meters: Decimal) -> str:
    for threshold, label in TENDENCY_MILESTONES:
        if total_meters >= threshold:
            return label
    return TENDENCY_START


# --- sequence ranges (sorted, disjoint, inclusive) -------------------------------------------


def contains(ranges: Sequence[SeqRange], value: int) -> bool:
    return any(low <= value <= high for low, high in ranges)


def remove_value(ranges: Sequence[SeqRange], value: int) -> tuple[SeqRange, ...]:
    result: list[SeqRange] = []
    for low, high in ranges:
        if low <= value <= high:
            if low < value:
                result.append((low, value - 1))
            if value < high:
                result.append((value + 1, high))
        else:
            result.append((low, high))
    return tuple(result)


def add_range(ranges: Sequence[SeqRange], new: SeqRange) -> tuple[SeqRange, ...]:
    merged: list[SeqRange] = []
    for low, high in sorted([*ranges, new]):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return tuple(merged)


def count_values(ranges: Sequence[SeqRange]) -> int:
    return sum(high - low + 1 for low, high in ranges)


def take_lowest(ranges: Sequence[SeqRange], count: int) -> tuple[tuple[SeqRange, ...], tuple[SeqRange, ...]]:
    """Split off the `count` lowest values: (taken, remaining)."""
    taken: list[SeqRange] = []
    remaining: list[SeqRange] = []
    for low, high in ranges:
        if count <= 0:
            remaining.append((low, high))
            continue
        size = high - low + 1
        if size <= count:
            taken.append((low, high))
            count -= size
        else:
            taken.append((low, low + count - 1))
            remaining.append((low + count, high))
            count = 0
    return tuple(taken), tuple(remaining)


def split_below(ranges: Sequence[SeqRange], bound: int) -> tuple[tuple[SeqRange, ...], tuple[SeqRange, ...]]:
    """Split into (values < bound, values >= bound)."""
    below: list[SeqRange] = []
    rest: list[SeqRange] = []
    for low, high in ranges:
        if high < bound:
            below.append((low, high))
        elif low >= bound:
            rest.append((low, high))
        else:
            below.append((low, bound - 1))
            rest.append((bound, high))
    return tuple(below), tuple(rest)


# --- the fold ---------------------------------------------------------------------------------


def _close_old_gaps(context: RunContext, policy: FoldPolicy) -> tuple[RunContext, int]:
    by_lag, gaps = split_below(context.gaps, context.high_water - policy.gap_max_lag)
    by_count: tuple[SeqRange, ...] = ()
    excess = count_values(gaps) - policy.gap_max_open
    if excess > 0:
        by_count, gaps = take_lowest(gaps, excess)
    closing = by_lag + by_count
    if not closing:
        return context, 0
    closed = context.closed
    for seq_range in closing:
        closed = add_range(closed, seq_range)
    # Only the newest closed ranges are listed, so the item stays small. The ones dropped here
    # are summarised by `forgotten`, their highest sequence: below it, a sequence that is not
    # listed was either applied or closed, and the archive tells which (see `classify`).
    kept = closed[max(0, len(closed) - policy.closed_ranges_kept) :]
    dropped = closed[: len(closed) - len(kept)]
    forgotten = max(context.forgotten, dropped[-1][1]) if dropped else context.forgotten
    count = count_values(closing)
    return replace(context, gaps=gaps, closed=kept, forgotten=forgotten, gaps_closed=context.gaps_closed + count), count


def _apply(context: RunContext, message: ArchivedMessage) -> RunContext:
    first_ts = message.timestamp_utc if context.first_ts is None else min(context.first_ts, message.timestamp_utc)
    last_ts = message.timestamp_utc if context.last_ts is None else max(context.last_ts, message.timestamp_utc)
    return replace(
        context,
        total_meters=context.total_meters + message.distance_meters,
        first_ts=first_ts,
        last_ts=last_ts,
        message_count=context.message_count + 1,
        pending=(*context.pending, message),
    )


def classify(
    context: RunContext,
    sequence_id: int,
    policy: FoldPolicy | None = None,
    archived: Callable[[int], bool] | None = None,
) -> Outcome:
    """What a message with this sequence is to the run as it stands.

    With `policy`, a sequence more than `policy.jump_limit` above the high water is SUSPECT: on its
    own it would close gaps that valid messages may still fill. `archived` answers "was this
    sequence applied?" from the run's archive; it is asked only below `context.forgotten`.
    """
    if any(held.sequence_id == sequence_id for held in context.held):
        return Outcome.DUPLICATE  # already received and held
    if sequence_id > context.high_water:
        if policy is not None and sequence_id - context.high_water > policy.jump_limit:
            return Outcome.SUSPECT
        return Outcome.ACCEPTED
    if contains(context.gaps, sequence_id):
        return Outcome.ACCEPTED
    if contains(context.closed, sequence_id):
        return Outcome.TOO_LATE
    if sequence_id <= context.forgotten:
        if archived is None:
            raise AmbiguousSequence(f"sequence {sequence_id} of run {context.key} is below its forgotten closed ranges")
        return Outcome.DUPLICATE if archived(sequence_id) else Outcome.TOO_LATE
    return Outcome.DUPLICATE


def _corroborating(held: Sequence[ArchivedMessage], sequence_id: int, limit: int) -> tuple[ArchivedMessage, ...]:
    """The held messages chained to `sequence_id`, each within `limit` of another member."""
    group = [sequence_id]
    members: list[ArchivedMessage] = []
    rest = list(held)
    grown = True
    while grown:
        grown = False
        for candidate in list(rest):
            if any(abs(candidate.sequence_id - seq) <= limit for seq in group):
                group.append(candidate.sequence_id)
                members.append(candidate)
                rest.remove(candidate)
                grown = True
    return tuple(members)


def fold(
    context: RunContext,
    messages: Sequence[PositionedMessage],
    policy: FoldPolicy,
    archived: Callable[[int], bool] | None = None,
) -> FoldResult:
    """Apply one key's messages, in shard order, to the context that was read.

    The archive chunk flushed here is made only of the *stored* pending tail, never of this
    batch's messages, so two workers that read the same version flush identical chunks.

    Jumps: a message more than `policy.jump_limit` above the high water is held in the context,
    not applied (outcome SUSPECT). A later message of the run that jumps as well, to within
    `jump_limit` of a held one, corroborates it: both are applied (a device that really skipped
    ahead). A held message whose sequence the run catches up to is applied then. Only the newest
    `policy.held_kept` are held; every held message is also kept in rejects (`suspect_jump`).
    """
    start = context
    chunk: ArchiveChunk | None = None
    outcomes: list[tuple[PositionedMessage, Outcome]] = []
    gaps_closed = 0
    released = 0
    # Sequences this fold has applied: `archived` answers from the archive as it was read, so a
    # copy of a message applied earlier in the batch, which the same batch's gap closing has since
    # put below `forgotten`, must be found here (issue 24 item 4), or it would be `too_late`.
    applied_here: set[int] = set()

    def applied_before(sequence_id: int) -> bool:
        """Was this sequence applied? This fold's own messages first, then the archive as read."""
        if sequence_id in applied_here:
            return True
        if archived is None:
            raise AmbiguousSequence(f"sequence {sequence_id} of run {start.key} is below its forgotten closed ranges")
        return archived(sequence_id)

    def accept(current: RunContext, message: ArchivedMessage) -> RunContext:
        nonlocal chunk, gaps_closed
        applied_here.add(message.sequence_id)
        if chunk is None and len(start.pending) >= policy.archive_chunk_size and current.pending == start.pending:
            chunk = ArchiveChunk(start.key, start.archive_chunks, start.pending)
            current = replace(current, pending=(), archive_chunks=start.archive_chunks + 1)
        seq = message.sequence_id
        if seq > current.high_water:
            if seq > current.high_water + 1:
                current = replace(current, gaps=add_range(current.gaps, (current.high_water + 1, seq - 1)))
            current = replace(current, high_water=seq)
        else:
            current = replace(current, gaps=remove_value(current.gaps, seq))
        current = _apply(current, message)
        current, closed_now = _close_old_gaps(current, policy)
        gaps_closed += closed_now
        return current

    def release_caught_up(current: RunContext) -> RunContext:
        """Apply held messages the high water has come within `jump_limit` of."""
        nonlocal released
        while True:
            ready = [m for m in current.held if m.sequence_id - current.high_water <= policy.jump_limit]
            if not ready:
                return current
            message = min(ready, key=lambda m: m.sequence_id)
            current = replace(current, held=tuple(m for m in current.held if m != message))
            if message.sequence_id > current.high_water or contains(current.gaps, message.sequence_id):
                current = accept(current, message)
                released += 1
            # else its gap was closed by a corroborated jump past it: it stays a `suspect_jump` reject

    for positioned in messages:
        message = positioned.message
        archived_message = ArchivedMessage(message.sequence_id, message.timestamp_utc, message.distance_meters)
        outcome = classify(context, message.sequence_id, policy, applied_before)
        if outcome is Outcome.SUSPECT:
            group = _corroborating(context.held, message.sequence_id, policy.jump_limit)
            if group:
                outcome = Outcome.ACCEPTED
                context = replace(context, held=tuple(m for m in context.held if m not in group))
                for member in sorted((*group, archived_message), key=lambda m: m.sequence_id):
                    context = accept(context, member)
                released += len(group)
            else:
                held = (*context.held, archived_message)
                context = replace(context, held=held[max(0, len(held) - policy.held_kept) :])
        elif outcome is Outcome.ACCEPTED:
            context = accept(context, archived_message)
        if outcome is Outcome.ACCEPTED:
            context = release_caught_up(context)
        outcomes.append((positioned, outcome))
    changed = context != start
    return FoldResult(context, tuple(outcomes), chunk, gaps_closed, changed, released)


# --- tendency -----------------------------------------------------------------------------------


def _order(slot: TendencySlot) -> tuple[int, int]:
    return (slot.started_at, slot.run_id)


def _higher(stored: TendencySlot, incoming: TendencySlot) -> TendencySlot:
    """A run's label never goes down: a racing worker's older view must not lower it."""
    return stored if _LABEL_RANK.get(stored.label, 0) >= _LABEL_RANK.get(incoming.label, 0) else replace(stored, label=incoming.label)


def merge_tendency(record: UserTendency, slot: TendencySlot) -> UserTendency:
    """Keep the user's two latest runs (by start), each with its latest label.

    The result does not depend on the order in which runs report, so redelivery and
    reordering end in the same record as a clean pass.
    """
    current, previous = record.current, record.previous
    if current is None:
        current = slot
    elif slot.run_id == current.run_id:
        current = _higher(current, slot)
    elif previous is not None and slot.run_id == previous.run_id:
        previous = _higher(previous, slot)
    elif _order(slot) > _order(current):
        current, previous = slot, current
    elif previous is None or _order(slot) > _order(previous):
        previous = slot
    return replace(record, current=current, previous=previous)
