"""The pure core of runner stats (runtime/runner_stats/logic.py): ranges, the fold, tendencies.

No I/O at all: contexts and messages are built in memory. hypothesis is not installed in the
venv, so the properties at the end are checked over many seeded random cases instead.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

import pytest

from runtime.runner_stats.errors import AmbiguousSequence
from runtime.runner_stats.logic import (
    add_range,
    classify,
    contains,
    count_values,
    fold,
    merge_tendency,
    remove_value,
    split_below,
    take_lowest,
    tendency_label,
)
from runtime.runner_stats.models import (
    ArchiveChunk,
    ArchivedMessage,
    DeviceMessage,
    FoldPolicy,
    FoldResult,
    Outcome,
    PositionedMessage,
    RunContext,
    RunKey,
    StreamPosition,
    TendencySlot,
    UserTendency,
)

KEY = RunKey(3000, 3091019)
BASE_TS = 1_509_547_364_734
_record_numbers = itertools.count(1)


def message(seq: int, distance: int | str | Decimal = 10, ts: int | None = None, key: RunKey = KEY) -> PositionedMessage:
    """One device message of `key`, at a fresh stream position (as a redelivered copy would be)."""
    number = next(_record_numbers)
    position = StreamPosition(f"shardId-000000000000:{number:056d}", f"{number:056d}", str(key.user_id))
    timestamp = BASE_TS + seq * 30_000 if ts is None else ts
    return PositionedMessage(position, DeviceMessage(key.user_id, key.run_id, seq, timestamp, Decimal(distance)))


def messages(*seqs: int) -> list[PositionedMessage]:
    return [message(seq) for seq in seqs]


def seqs_of(archived: Sequence[ArchivedMessage]) -> list[int]:
    return [m.sequence_id for m in archived]


def outcomes_of(result: FoldResult) -> list[Outcome]:
    return [outcome for _, outcome in result.outcomes]


def fold_each(batches: Sequence[Sequence[PositionedMessage]], policy: FoldPolicy, context: RunContext | None = None) -> list[FoldResult]:
    """Fold batch after batch, each over the context the previous one produced (as if committed)."""
    context = context or RunContext(KEY)
    results = []
    for batch in batches:
        result = fold(context, batch, policy)
        results.append(result)
        context = result.context
    return results


# --- sequence ranges ------------------------------------------------------------------------


def test_contains_checks_every_inclusive_range() -> None:
    ranges = ((2, 4), (7, 7))
    assert [value for value in range(10) if contains(ranges, value)] == [2, 3, 4, 7]
    assert not contains((), 1)


@pytest.mark.parametrize(
    ("ranges", "value", "expected"),
    [
        (((2, 6),), 4, ((2, 3), (5, 6))),  # splits a range in two
        (((2, 6),), 2, ((3, 6),)),  # trims the low end
        (((2, 6),), 6, ((2, 5),)),  # trims the high end
        (((2, 2), (5, 6)), 2, ((5, 6),)),  # removes a one-value range
        (((2, 3), (5, 6)), 4, ((2, 3), (5, 6))),  # a value outside every range changes nothing
    ],
)
def test_remove_value(ranges: tuple[tuple[int, int], ...], value: int, expected: tuple[tuple[int, int], ...]) -> None:
    assert remove_value(ranges, value) == expected


@pytest.mark.parametrize(
    ("ranges", "new", "expected"),
    [
        ((), (3, 5), ((3, 5),)),
        (((1, 2),), (3, 5), ((1, 5),)),  # adjacent ranges merge
        (((1, 4),), (3, 8), ((1, 8),)),  # overlapping ranges merge
        (((10, 12),), (3, 5), ((3, 5), (10, 12))),  # disjoint ranges stay sorted
        (((1, 2), (6, 7)), (3, 5), ((1, 7),)),  # a range that bridges two
    ],
)
def test_add_range_keeps_ranges_sorted_disjoint_and_merged(
    ranges: tuple[tuple[int, int], ...], new: tuple[int, int], expected: tuple[tuple[int, int], ...]
) -> None:
    assert add_range(ranges, new) == expected


def test_count_values() -> None:
    assert count_values(()) == 0
    assert count_values(((1, 1), (3, 7))) == 6


@pytest.mark.parametrize(
    ("count", "taken", "remaining"),
    [
        (0, (), ((2, 4), (7, 9))),
        (2, ((2, 3),), ((4, 4), (7, 9))),  # splits the first range
        (3, ((2, 4),), ((7, 9),)),  # exactly the first range
        (4, ((2, 4), (7, 7)), ((8, 9),)),  # across ranges
        (99, ((2, 4), (7, 9)), ()),  # more than there is
    ],
)
def test_take_lowest(count: int, taken: tuple[tuple[int, int], ...], remaining: tuple[tuple[int, int], ...]) -> None:
    assert take_lowest(((2, 4), (7, 9)), count) == (taken, remaining)


@pytest.mark.parametrize(
    ("bound", "below", "rest"),
    [
        (1, (), ((2, 4), (7, 9))),
        (2, (), ((2, 4), (7, 9))),  # the bound itself is not below
        (3, ((2, 2),), ((3, 4), (7, 9))),
        (5, ((2, 4),), ((7, 9),)),
        (8, ((2, 4), (7, 7)), ((8, 9),)),
        (10, ((2, 4), (7, 9)), ()),
    ],
)
def test_split_below(bound: int, below: tuple[tuple[int, int], ...], rest: tuple[tuple[int, int], ...]) -> None:
    assert split_below(((2, 4), (7, 9)), bound) == (below, rest)


# --- tendency labels ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("meters", "label"),
    [("0", "fine"), ("199.99", "fine"), ("200", "good job"), ("4999.9", "good job"), ("5000", "well done"), ("12000", "well done")],
)
def test_tendency_label_thresholds(meters: str, label: str) -> None:
    assert tendency_label(Decimal(meters)) == label


# --- classification -------------------------------------------------------------------------


def test_classify_by_high_water_gaps_and_closed_ranges() -> None:
    context = RunContext(KEY, high_water=10, gaps=((4, 5),), closed=((2, 3),))
    assert classify(context, 11) is Outcome.ACCEPTED  # above the high water
    assert classify(context, 5) is Outcome.ACCEPTED  # fills an open gap
    assert classify(context, 3) is Outcome.TOO_LATE  # its gap was given up
    assert classify(context, 7) is Outcome.DUPLICATE  # already applied
    assert classify(context, 10) is Outcome.DUPLICATE


# --- the fold -------------------------------------------------------------------------------


def test_fold_applies_messages_in_order() -> None:
    # Given a run with no stored item yet
    batch = [message(1, 100, BASE_TS), message(2, 50, BASE_TS + 30_000), message(3, "20.5", BASE_TS + 60_000)]
    # When its first three messages are folded
    result = fold(RunContext(KEY), batch, FoldPolicy())
    # Then each is applied once, in order, and the context describes them exactly
    context = result.context
    assert outcomes_of(result) == [Outcome.ACCEPTED] * 3
    assert [p for p, _ in result.outcomes] == batch
    assert context.high_water == 3 and context.gaps == () and context.closed == ()
    assert context.total_meters == Decimal("170.5")
    assert (context.first_ts, context.last_ts) == (BASE_TS, BASE_TS + 60_000)
    assert context.total_seconds == Decimal(60)
    assert context.message_count == 3
    assert seqs_of(context.pending) == [1, 2, 3]
    assert context.version == 0  # the fold does not bump versions; the commit does
    assert result.changed and result.chunk is None and result.gaps_closed == 0 and result.too_late == ()


def test_duplicates_in_the_same_batch_and_in_a_later_one_are_ignored() -> None:
    # Given message 1 and 2 applied
    first = fold(RunContext(KEY), [message(1, 100), message(2, 50)], FoldPolicy())
    # When message 2 is resent in the same batch, and 1 and 2 again later with other timestamps and distances
    again = fold(first.context, [message(2, 999, BASE_TS - 10**6), message(1, 999, BASE_TS + 10**9)], FoldPolicy())
    # Then nothing changes
    assert outcomes_of(again) == [Outcome.DUPLICATE, Outcome.DUPLICATE]
    assert again.context == first.context
    assert not again.changed and again.too_late == ()
    within = fold(RunContext(KEY), [message(1, 100), message(1, 100), message(2, 50)], FoldPolicy())
    assert outcomes_of(within) == [Outcome.ACCEPTED, Outcome.DUPLICATE, Outcome.ACCEPTED]
    assert within.context.total_meters == Decimal(150) and within.context.message_count == 2


def test_a_late_message_fills_its_gap_exactly_once() -> None:
    # Given messages 1 and 3 applied, so 2 is an open gap
    opened = fold(RunContext(KEY), [message(1, 100), message(3, 30)], FoldPolicy())
    assert opened.context.high_water == 3 and opened.context.gaps == ((2, 2),)
    # When 2 arrives late (with the earliest timestamp of all), then again
    late = fold(opened.context, [message(2, 20, BASE_TS)], FoldPolicy())
    resent = fold(late.context, [message(2, 20, BASE_TS)], FoldPolicy())
    # Then it is applied once: the gap is gone, its meters counted, first_ts widened
    assert outcomes_of(late) == [Outcome.ACCEPTED]
    assert late.context.gaps == () and late.context.high_water == 3
    assert late.context.total_meters == Decimal(150) and late.context.message_count == 3
    assert late.context.first_ts == BASE_TS
    assert seqs_of(late.context.pending) == [1, 3, 2]
    assert outcomes_of(resent) == [Outcome.DUPLICATE] and resent.context == late.context


def test_gaps_lagging_the_high_water_by_more_than_the_lag_are_closed() -> None:
    policy = FoldPolicy(gap_max_lag=3, gap_max_open=64)
    # Given messages 1 and 5 applied (gap 2..4), each step within the jump limit of 4
    # When message 9 arrives (gaps 6..8; the high water is 9)
    result = fold_each([[message(1)], [message(5)], [message(9)]], policy)[-1]
    # Then the values more than 3 below 9 (2..4) are closed, 6..8 stay open
    assert result.context.gaps == ((6, 8),)
    assert result.context.closed == ((2, 4),)
    assert result.gaps_closed == 3 and result.context.gaps_closed == 3
    # When 6 is 3 behind a high water of 9 it is still open; one more step and it closes
    later = fold(result.context, [message(10)], policy)
    assert later.context.gaps == ((7, 8),) and later.context.closed == ((2, 4), (6, 6))
    assert later.gaps_closed == 1 and later.context.gaps_closed == 4


def test_gaps_beyond_the_open_count_are_closed_lowest_first() -> None:
    policy = FoldPolicy(gap_max_lag=1000, gap_max_open=3)
    # Given 1 and 5 applied: gaps 2..4, exactly the 3 allowed
    results = fold_each([[message(1), message(5)], [message(7)]], policy)
    assert results[0].context.gaps == ((2, 4),) and results[0].gaps_closed == 0
    # When 7 arrives (a fourth open value, 6)
    # Then the lowest open value is given up
    context = results[1].context
    assert context.gaps == ((3, 4), (6, 6)) and context.closed == ((2, 2),)
    assert results[1].gaps_closed == 1 and context.gaps_closed == 1


def test_a_message_for_a_closed_gap_is_too_late_and_not_applied() -> None:
    policy = FoldPolicy(gap_max_lag=3)
    closed = fold_each([[message(1, 10)], [message(5, 10)], [message(9, 10)]], policy)[-1].context
    assert closed.closed == ((2, 4),) and closed.gaps == ((6, 8),)
    # When 3 (closed) and 7 (still open) arrive
    late, in_gap = message(3, 500), message(7, 70)
    result = fold(closed, [late, in_gap], policy)
    # Then 3 is too late (reported), 7 is applied
    assert outcomes_of(result) == [Outcome.TOO_LATE, Outcome.ACCEPTED]
    assert result.too_late == (late,)
    assert result.context.total_meters == Decimal(100)
    assert not contains(result.context.gaps, 3) and contains(result.context.closed, 3)
    # A too-late message alone changes nothing
    alone = fold(result.context, [message(3, 500)], policy)
    assert outcomes_of(alone) == [Outcome.TOO_LATE] and not alone.changed and alone.context == result.context


def test_a_message_for_a_forgotten_closed_range_is_too_late_not_a_duplicate() -> None:
    policy = FoldPolicy(gap_max_lag=1, gap_max_open=64, closed_ranges_kept=2)
    # Given every other sequence number: each skipped one is opened, then closed two steps later
    context = fold_each([[message(seq)] for seq in (1, 3, 5, 7, 9, 11)], policy)[-1].context
    # Then 2, 4, 6, 8 were closed (counted); the two newest closed ranges are listed, and the
    # forgotten ones are summarised by their highest sequence
    assert context.gaps == ((10, 10),)
    assert context.gaps_closed == 4
    assert context.closed == ((6, 6), (8, 8))
    assert context.forgotten == 4
    # A message of the listed closed ranges is too late
    assert classify(context, 8) is Outcome.TOO_LATE
    # Below the forgotten point only the archive tells applied from closed, and it is asked
    applied = {1, 3, 5, 7, 9, 11}
    asked: list[int] = []

    def archived(seq: int) -> bool:
        asked.append(seq)
        return seq in applied

    assert classify(context, 4, archived=archived) is Outcome.TOO_LATE  # a forgotten closed gap
    assert classify(context, 3, archived=archived) is Outcome.DUPLICATE  # applied
    assert asked == [4, 3]
    with pytest.raises(AmbiguousSequence):
        classify(context, 4)
    # When 4 and 8 arrive again, Then neither is applied and both are too late (so both leave a reject)
    late_4, late_8 = message(4, 999), message(8, 999)
    result = fold(context, [late_4, late_8], policy, archived)
    assert result.context.total_meters == context.total_meters and not result.changed
    assert result.too_late == (late_4, late_8)


def test_a_copy_of_a_sequence_applied_earlier_in_the_same_fold_is_a_duplicate_below_forgotten() -> None:
    """Issue 24 item 4: below `forgotten`, "was it applied?" includes what this fold applied."""
    policy = FoldPolicy()
    # Given a run after 1-4 and the even sequences 6..44: the odd ones 5..43 are open gaps
    first = [1, 2, 3, 4, *range(6, 45, 2)]
    context = fold(RunContext(KEY), messages(*first), policy).context
    stored_archive = {m.sequence_id for m in context.pending}  # the archive as the next fold reads it
    asked: list[int] = []

    def archived(seq: int) -> bool:
        asked.append(seq)
        return seq in stored_archive

    # When one fold gets 5, then 46..100 (closing 7..45 and forgetting 7..13), then 5 again
    once = [message(5, 500), *messages(*range(46, 101))]
    result = fold(context, [*once, message(5, 500)], policy, archived)
    # Then the copy is a duplicate (no too-late reject), the archive need not be asked, and the
    # run equals the fold without the copy; with no archive at all it is not ambiguous either
    assert result.context.forgotten == 13
    assert outcomes_of(result)[-1] is Outcome.DUPLICATE and result.too_late == ()
    assert asked == []
    assert result.context == fold(context, once, policy, archived).context
    assert result.context.total_meters == Decimal(500 + 10 * (len(first) + 55))
    assert outcomes_of(fold(context, [*once, message(5, 500)], policy))[-1] is Outcome.DUPLICATE
    # And a forgotten closed gap is still too late, asked of the archive
    assert outcomes_of(fold(context, [*once, message(7)], policy, archived))[-1] is Outcome.TOO_LATE
    assert asked == [7]


def test_forgotten_only_grows_and_never_hides_an_open_gap() -> None:
    policy = FoldPolicy(gap_max_lag=1, gap_max_open=64, closed_ranges_kept=1)
    context = fold_each([[message(seq)] for seq in (1, 3, 5, 7, 9)], policy)[-1].context
    # Then every open gap lies above every listed closed range, which lies above `forgotten`
    assert context.forgotten == 4 and context.closed == ((6, 6),) and context.gaps == ((8, 8),)


# --- jumps: one record must not move the high water far enough to make valid messages too late ---


def run_with_wrong_sequence(wrong: int) -> list[PositionedMessage]:
    """The issue's case: a run of sequences 1..60 at 100 m each, and one record with a wrong
    `sequence_id` arriving right after sequence 10."""
    good = [message(seq, 100) for seq in range(1, 61)]
    return [*good[:10], message(wrong, 100, BASE_TS + 11 * 30_000), *good[10:]]


def fold_each_and_together(deliveries: list[PositionedMessage]) -> tuple[RunContext, list[Outcome], int]:
    """Fold one message at a time and in one batch; both must agree. Returns (context, outcomes, gaps closed)."""
    results = []
    for batches in ([[p] for p in deliveries], [deliveries]):
        folded = fold_each(batches, FoldPolicy())
        outcomes = [outcome for result in folded for outcome in outcomes_of(result)]
        results.append((folded[-1].context, outcomes, sum(result.gaps_closed for result in folded)))
    # (chunk boundaries depend on batching; everything else must not)
    unchunked = [(replace(context, pending=(), archive_chunks=0), outcomes, closed) for context, outcomes, closed in results]
    assert unchunked[0] == unchunked[1]
    return results[0]


def test_one_wrong_sequence_far_ahead_is_held_as_suspect_and_the_run_is_kept() -> None:
    # Given the run with sequence 999,999 after 10
    context, outcomes, gaps_closed = fold_each_and_together(run_with_wrong_sequence(999_999))
    # Then the 60 valid messages are applied: 6,000 m, 60 messages, no gap closed, nothing too late
    assert context.total_meters == Decimal(6000) and context.message_count == 60
    assert context.high_water == 60 and context.gaps == () and context.closed == ()
    assert gaps_closed == 0 and Outcome.TOO_LATE not in outcomes
    # And the wrong one is suspect (kept in rejects by the service), held in the run item, never applied
    assert outcomes[10] is Outcome.SUSPECT and outcomes.count(Outcome.SUSPECT) == 1
    assert [m.sequence_id for m in context.held] == [999_999]


def test_a_wrong_sequence_within_reach_is_applied_once_the_run_catches_up() -> None:
    # Given the run with sequence 100 after 10
    context, outcomes, gaps_closed = fold_each_and_together(run_with_wrong_sequence(100))
    # Then it is held until the run reaches 59 (100 - 41), then applied like any message ahead:
    # the 60 valid messages and it, with 61..99 still open, and nothing too late
    assert outcomes[10] is Outcome.SUSPECT and Outcome.TOO_LATE not in outcomes
    assert context.total_meters == Decimal(6100) and context.message_count == 61
    assert context.high_water == 100 and context.gaps == ((61, 99),) and context.closed == () and gaps_closed == 0
    assert context.held == ()


def test_a_jump_corroborated_by_the_runs_next_message_is_applied_with_it() -> None:
    # Given a device that really skipped from 10 to 500 (a reset), then went on counting
    deliveries = [message(seq, 100) for seq in (*range(1, 11), *range(500, 521))]
    result = fold(RunContext(KEY), deliveries, FoldPolicy())
    # Then 500 is held until 501 corroborates it, and every message is applied
    assert outcomes_of(result)[10:12] == [Outcome.SUSPECT, Outcome.ACCEPTED]
    assert result.released == 1 and result.context.held == ()
    assert result.context.message_count == 31 and result.context.total_meters == Decimal(3100)
    # And the skipped numbers are a gap like any other: closed beyond the lag bound, the newest 40 open
    assert result.context.high_water == 520
    assert result.context.closed == ((11, 479),) and result.context.gaps == ((480, 499),)
    assert result.gaps_closed == 469


def test_a_held_message_is_applied_when_the_run_catches_up_to_it() -> None:
    # Given a run whose message 50 arrives first, and 1..49 after it (a long outage of the sender)
    deliveries = [message(50, 5), *(message(seq, 5) for seq in range(1, 50))]
    result = fold(RunContext(KEY), deliveries, FoldPolicy())
    # Then 50 is held at first, and applied once the run is within the jump limit of it
    assert outcomes_of(result)[0] is Outcome.SUSPECT
    assert result.released == 1 and result.context.held == ()
    assert result.context.message_count == 50 and result.context.gaps == () and result.context.closed == ()
    assert seqs_of(result.context.pending).index(50) == 9  # applied right after 9 (50 - 41)


def test_a_held_message_resent_is_a_duplicate_and_only_the_newest_are_held() -> None:
    policy = FoldPolicy(held_kept=2)
    context = fold(RunContext(KEY), messages(1, 2), policy).context
    # When three unrelated jumps arrive, then the first again
    result = fold(context, [message(1000), message(5000), message(9000), message(9000)], policy)
    # Then each is suspect, the resent one a duplicate, and only the two newest stay held
    assert outcomes_of(result) == [Outcome.SUSPECT, Outcome.SUSPECT, Outcome.SUSPECT, Outcome.DUPLICATE]
    assert [m.sequence_id for m in result.context.held] == [5000, 9000]
    assert result.context.total_meters == context.total_meters and result.context.high_water == 2


def test_a_held_message_below_a_corroborated_jump_stays_a_reject() -> None:
    # Given 100 held, then a real skip to 300 corroborated by 301
    context = fold(RunContext(KEY), messages(1, 100, 300, 301), FoldPolicy()).context
    # Then 100's number was closed by the jump: it is dropped from the held list, never applied
    assert context.held == () and context.message_count == 3 and contains(context.closed, 100)


def test_keeping_no_closed_ranges_keeps_none() -> None:
    policy = FoldPolicy(gap_max_lag=1, closed_ranges_kept=0)
    context = fold_each([[message(seq)] for seq in (1, 3, 5, 7)], policy)[-1].context
    assert context.closed == ()


def test_archive_chunk_is_flushed_only_from_the_stored_full_tail() -> None:
    policy = FoldPolicy(archive_chunk_size=3)
    # Given a stored tail of exactly 3 messages
    full = fold(RunContext(KEY), messages(1, 2, 3), policy)
    assert full.chunk is None and seqs_of(full.context.pending) == [1, 2, 3]  # the tail was empty when read
    # When one more message arrives
    flushed = fold(full.context, messages(4), policy)
    # Then the stored tail becomes chunk 0, and the tail holds only the new message
    assert flushed.chunk == ArchiveChunk(KEY, 0, full.context.pending)
    assert seqs_of(flushed.context.pending) == [4] and flushed.context.archive_chunks == 1
    # When the tail is not full, nothing is flushed, even if the batch makes it overflow
    grown = fold(flushed.context, messages(5, 6, 7, 8), policy)
    assert grown.chunk is None and seqs_of(grown.context.pending) == [4, 5, 6, 7, 8]
    # When the (over)full tail is read next, it is flushed whole as chunk 1, at the first applied message
    next_one = fold(grown.context, [message(6), message(9), message(10)], policy)
    assert outcomes_of(next_one) == [Outcome.DUPLICATE, Outcome.ACCEPTED, Outcome.ACCEPTED]
    assert next_one.chunk is not None and next_one.chunk.index == 1
    assert seqs_of(next_one.chunk.messages) == [4, 5, 6, 7, 8]
    assert seqs_of(next_one.context.pending) == [9, 10] and next_one.context.archive_chunks == 2


def test_no_chunk_is_flushed_when_nothing_is_applied() -> None:
    policy = FoldPolicy(archive_chunk_size=2)
    full = fold(RunContext(KEY), messages(1, 2), policy).context
    # When only duplicates arrive over a full tail
    result = fold(full, messages(1, 2), policy)
    # Then there is no chunk, nothing changed, and nothing needs writing
    assert result.chunk is None and not result.changed and result.context == full


def test_two_workers_reading_the_same_version_flush_identical_chunks() -> None:
    policy = FoldPolicy(archive_chunk_size=2)
    stored = fold(RunContext(KEY), messages(1, 2), policy).context
    one = fold(stored, messages(3), policy)
    other = fold(stored, messages(4, 3, 5), policy)
    assert one.chunk == other.chunk == ArchiveChunk(KEY, 0, stored.pending)


def test_changed_is_false_when_every_message_is_a_duplicate() -> None:
    stored = fold(RunContext(KEY), messages(1, 2, 3), FoldPolicy()).context
    result = fold(stored, messages(3, 1, 2, 2), FoldPolicy())
    assert outcomes_of(result) == [Outcome.DUPLICATE] * 4
    assert not result.changed and result.context == stored


def test_an_empty_batch_changes_nothing() -> None:
    result = fold(RunContext(KEY), [], FoldPolicy())
    assert result.outcomes == () and not result.changed and result.chunk is None


# --- seeded random properties (hypothesis is not installed in the venv) -------------------------

PROPERTY_CASES = 300


@dataclass(frozen=True)
class Folded:
    context: RunContext
    chunks: tuple[ArchiveChunk, ...]
    outcomes: tuple[Outcome, ...]
    gaps_closed: int
    by_position: dict[StreamPosition, Outcome]

    @property
    def archive(self) -> list[ArchivedMessage]:
        return [m for chunk in self.chunks for m in chunk.messages] + list(self.context.pending)

    def semantic(self) -> tuple[object, ...]:
        """What the run *means*; chunk boundaries and tail order depend on batching and are left out."""
        c = self.context
        archive = sorted((m.sequence_id, m.timestamp_utc, m.distance_meters) for m in self.archive)
        held = sorted((m.sequence_id, m.timestamp_utc, m.distance_meters) for m in c.held)
        return (
            c.high_water,
            c.gaps,
            c.closed,
            c.forgotten,
            held,
            c.gaps_closed,
            c.total_meters,
            c.first_ts,
            c.last_ts,
            c.message_count,
            archive,
        )


def fold_batches(batches: Sequence[Sequence[PositionedMessage]], policy: FoldPolicy) -> Folded:
    context = RunContext(KEY)
    chunks: list[ArchiveChunk] = []
    outcomes: list[Outcome] = []
    by_position: dict[StreamPosition, Outcome] = {}
    gaps_closed = 0
    released = 0
    for batch in batches:
        applied = {m.sequence_id for chunk in chunks for m in chunk.messages} | {m.sequence_id for m in context.pending}
        result = fold(context, batch, policy, applied.__contains__)
        released += result.released
        # Totals never decrease, and the result accounts for every message of the batch
        assert result.context.total_meters >= context.total_meters
        assert result.context.message_count >= context.message_count
        assert result.context.high_water >= context.high_water
        assert [p for p, _ in result.outcomes] == list(batch)
        if result.chunk is not None:
            assert result.chunk.index == context.archive_chunks and result.chunk.messages == context.pending
            chunks.append(result.chunk)
        outcomes.extend(outcome for _, outcome in result.outcomes)
        by_position.update((p.position, outcome) for p, outcome in result.outcomes)
        gaps_closed += result.gaps_closed
        context = result.context
    folded = Folded(context, tuple(chunks), tuple(outcomes), gaps_closed, by_position)
    # The archive holds each applied message once, and the chunks are numbered 0, 1, 2...
    assert [chunk.index for chunk in chunks] == list(range(context.archive_chunks))
    # (held messages applied later count once, when they are released)
    assert len(folded.archive) == context.message_count == outcomes.count(Outcome.ACCEPTED) + released
    assert len({m.sequence_id for m in folded.archive}) == context.message_count
    assert gaps_closed == context.gaps_closed
    # Nothing vanishes: every sequence delivered is applied, or was reported too late or suspect
    archived = {m.sequence_id for m in folded.archive}
    delivered = [
        (p.message.sequence_id, outcome) for batch in batches for p, outcome in zip(batch, outcomes_for(batch, folded), strict=True)
    ]
    reported = {seq for seq, outcome in delivered if outcome in (Outcome.TOO_LATE, Outcome.SUSPECT)}
    assert {seq for seq, _ in delivered} <= archived | reported
    return folded


def outcomes_for(batch: Sequence[PositionedMessage], folded: Folded) -> list[Outcome]:
    return [folded.by_position[p.position] for p in batch]


def random_split(rng: random.Random, items: Sequence[PositionedMessage]) -> list[list[PositionedMessage]]:
    cuts = sorted(rng.sample(range(1, len(items)), rng.randint(0, len(items) - 1))) if len(items) > 1 else []
    bounds = [0, *cuts, len(items)]
    return [list(items[low:high]) for low, high in itertools.pairwise(bounds)]


def unique_messages(rng: random.Random, count: int) -> list[DeviceMessage]:
    return [
        DeviceMessage(
            KEY.user_id,
            KEY.run_id,
            seq,
            BASE_TS + seq * 30_000 + rng.randint(-20_000, 20_000),
            Decimal(rng.randint(0, 10_000)) / 10,
        )
        for seq in range(1, count + 1)
    ]


def positioned(device_messages: Sequence[DeviceMessage]) -> list[PositionedMessage]:
    result = []
    for m in device_messages:
        number = next(_record_numbers)
        result.append(PositionedMessage(StreamPosition(f"s:{number}", str(number), str(m.user_id)), m))
    return result


def arrivals_within_lag(rng: random.Random, unique: Sequence[DeviceMessage], lag: int) -> list[DeviceMessage]:
    """Each message first arrives at most `lag` places after its turn; byte-identical copies any time later."""
    timed: list[tuple[float, float, DeviceMessage]] = []
    for m in unique:
        first = m.sequence_id + rng.randint(0, lag)
        timed.append((first, rng.random(), m))
        for _ in range(rng.choice((0, 0, 0, 1, 2))):
            timed.append((first + rng.randint(0, 3 * lag), rng.random(), m))
    return [m for *_, m in sorted(timed, key=lambda t: (t[0], t[1]))]


def arrivals_anyhow(rng: random.Random, unique: Sequence[DeviceMessage]) -> list[DeviceMessage]:
    """Any order; some messages lost; copies that may differ in timestamp and distance."""
    result = [m for m in unique if rng.random() > 0.1]
    for m in unique:
        if rng.random() < 0.3:
            result.append(DeviceMessage(m.user_id, m.run_id, m.sequence_id, m.timestamp_utc + rng.randint(0, 5000), m.distance_meters + 1))
    rng.shuffle(result)
    return result


def cases(seed: int) -> Iterator[random.Random]:
    for case in range(PROPERTY_CASES):
        yield random.Random(seed * 100_003 + case)


def test_any_batching_of_any_delivery_order_equals_one_by_one() -> None:
    policy = FoldPolicy(gap_max_lag=4, gap_max_open=3, closed_ranges_kept=2, archive_chunk_size=3)
    for rng in cases(1):
        deliveries = positioned(arrivals_anyhow(rng, unique_messages(rng, rng.randint(1, 30))))
        one_by_one = fold_batches([[p] for p in deliveries], policy)
        batched = fold_batches(random_split(rng, deliveries), policy)
        assert batched.semantic() == one_by_one.semantic()
        assert batched.outcomes == one_by_one.outcomes
        assert batched.gaps_closed == one_by_one.gaps_closed
        whole = fold_batches([deliveries], policy)
        assert whole.semantic() == one_by_one.semantic()


def test_deliveries_within_the_lag_bound_end_as_one_clean_in_order_pass() -> None:
    lag = 6
    policy = FoldPolicy(gap_max_lag=lag, gap_max_open=lag, closed_ranges_kept=3, archive_chunk_size=4)
    for rng in cases(2):
        unique = unique_messages(rng, rng.randint(1, 40))
        deliveries = positioned(arrivals_within_lag(rng, unique, lag))
        clean = fold_batches([positioned(unique)], policy)
        for batches in ([[p] for p in deliveries], random_split(rng, deliveries)):
            folded = fold_batches(batches, policy)
            assert folded.semantic() == clean.semantic()
            context = folded.context
            assert context.total_meters == sum((m.distance_meters for m in unique), Decimal(0))
            assert context.high_water == len(unique) and context.gaps == () and context.closed == ()
            assert context.gaps_closed == 0 and Outcome.TOO_LATE not in folded.outcomes
            assert sorted(seqs_of(folded.archive)) == [m.sequence_id for m in unique]
            assert folded.outcomes.count(Outcome.ACCEPTED) == len(unique)
            assert folded.outcomes.count(Outcome.DUPLICATE) == len(deliveries) - len(unique)
            assert (context.first_ts, context.last_ts) == (min(m.timestamp_utc for m in unique), max(m.timestamp_utc for m in unique))


# --- tendency merge -----------------------------------------------------------------------------

RUNS = (
    TendencySlot(run_id=11, started_at=BASE_TS, label="well done"),
    TendencySlot(run_id=12, started_at=BASE_TS + 3_600_000, label="fine"),
    TendencySlot(run_id=13, started_at=BASE_TS + 7_200_000, label="good job"),
)


def summary(record: UserTendency) -> tuple[object, ...]:
    current, previous = record.current, record.previous
    return (
        current.run_id if current else None,
        current.label if current else None,
        previous.run_id if previous else None,
        previous.label if previous else None,
    )


def merged(slots: Sequence[TendencySlot]) -> UserTendency:
    record = UserTendency(3000, version=7)
    for slot in slots:
        record = merge_tendency(record, slot)
    return record


@pytest.mark.parametrize("order", list(itertools.permutations(RUNS)), ids=lambda order: "-".join(str(s.run_id) for s in order))
def test_merge_tendency_does_not_depend_on_the_order_runs_report(order: tuple[TendencySlot, ...]) -> None:
    # When the final slots of three runs arrive in any order
    record = merged(order)
    # Then the latest run is current and the one before it previous, each with its label
    assert summary(record) == (13, "good job", 12, "fine")
    assert record.user_id == 3000 and record.version == 7  # the store bumps versions, not the merge


def test_merge_tendency_orders_equal_starts_by_run_id() -> None:
    same_start = [TendencySlot(22, BASE_TS, "fine"), TendencySlot(21, BASE_TS, "good job"), TendencySlot(20, BASE_TS, "fine")]
    for order in itertools.permutations(same_start):
        assert summary(merged(order)) == (22, "fine", 21, "good job")


def test_merge_tendency_interleaved_label_updates_end_with_the_final_labels() -> None:
    # Each run pushes its labels as they rise; runs interleave in every possible way
    progress = {
        11: [TendencySlot(11, RUNS[0].started_at, label) for label in ("fine", "good job", "well done")],
        12: [TendencySlot(12, RUNS[1].started_at, "fine")],
        13: [TendencySlot(13, RUNS[2].started_at, label) for label in ("fine", "good job")],
    }
    streams = [run for run, slots in progress.items() for _ in slots]
    seen = set()
    for arrangement in itertools.permutations(streams):
        if arrangement in seen:
            continue
        seen.add(arrangement)
        positions = dict.fromkeys(progress, 0)
        slots = []
        for run in arrangement:
            slots.append(progress[run][positions[run]])
            positions[run] += 1
        assert summary(merged(slots)) == (13, "good job", 12, "fine")
    assert len(seen) == 60  # 6! / (3! * 2!)


def test_merge_tendency_updates_the_label_of_the_current_and_the_previous_run() -> None:
    record = merged([RUNS[1], RUNS[2]])
    record = merge_tendency(record, TendencySlot(13, RUNS[2].started_at, "well done"))
    record = merge_tendency(record, TendencySlot(12, RUNS[1].started_at, "good job"))
    assert summary(record) == (13, "well done", 12, "good job")
    # A run older than both is not remembered
    assert merge_tendency(record, RUNS[0]) == record


def test_merge_tendency_never_lowers_a_runs_label() -> None:
    # A slower worker's slot, computed before a commit it then loses, arrives after the newer label
    newer = TendencySlot(13, RUNS[2].started_at, "good job")
    stale = TendencySlot(13, RUNS[2].started_at, "fine")
    assert summary(merged([newer, stale])) == summary(merged([stale, newer])) == (13, "good job", None, None)
