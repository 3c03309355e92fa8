"""The consistency primitives (runtime/shared/consistency.py): deterministic ids, version guards, backoff.

Pure: random draws come from seeded random.Random instances.
"""

from __future__ import annotations

import itertools
import random
import re
import statistics
from decimal import Decimal

import pytest

from runtime.shared.consistency import VersionGuard, deterministic_id, full_jitter_backoff

HEX = re.compile(r"[0-9a-f]+")

# --- deterministic_id ---------------------------------------------------------------------------


def test_the_same_parts_give_the_same_id() -> None:
    # Given the parts of one piece of work (as a retry would compute them again)
    parts = ("chunk", "sheet-1", 3, 17)
    # When the id is computed twice
    # Then it is the same both times
    assert deterministic_id(*parts) == deterministic_id(*parts)


def test_ids_are_pinned_across_releases() -> None:
    # Given the parts of a payload key a client was handed before a deploy
    # When the id is computed now
    # Then it is the same value: the complete call recomputes the key and must find the object
    assert deterministic_id("payload", "sheet-1", "upload-req-0001") == "30d6519c7d0d930685b41035b3dc682a"


@pytest.mark.parametrize("length", [1, 8, 24, 32, 64])
def test_the_id_has_the_requested_length_of_hex_digits(length: int) -> None:
    # Given a requested length
    # When an id is computed
    identifier = deterministic_id("effect", "log", Decimal("1000.5"), length=length)
    # Then it has exactly that many lowercase hex digits, and shorter ids are prefixes of longer ones
    assert len(identifier) == length and HEX.fullmatch(identifier)
    assert deterministic_id("effect", "log", Decimal("1000.5"), length=64).startswith(identifier)


def test_the_default_length_is_32() -> None:
    # Given no length
    # When an id is computed
    # Then it has 32 hex digits (128 bits)
    assert len(deterministic_id("anything")) == 32


def test_different_parts_give_different_ids() -> None:
    # Given many different part tuples (kinds, logs, numbers, positions)
    tuples = [
        (kind, log, number, index)
        for kind, log, number, index in itertools.product(
            ("chunk", "payload", "build_snapshot"), ("a", "b", "sheet-1"), range(10), range(30)
        )
    ]
    # When their ids are computed
    ids = {deterministic_id(*parts) for parts in tuples}
    # Then no two collide
    assert len(ids) == len(tuples)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("a", "bc"), ("ab", "c")),
        (("ab",), ("a", "b")),
        (("a", "b", "c"), ("a", "bc")),
        (("", "a"), ("a", "")),
        (("a",), ("a", "")),
        (("1", "23"), ("12", "3")),
        (("chunk", "sheet-1", 1, 23), ("chunk", "sheet-1", 12, 3)),
    ],
    ids=repr,
)
def test_where_the_parts_split_matters(first: tuple[object, ...], second: tuple[object, ...]) -> None:
    # Given two part tuples whose concatenation is the same text
    # When their ids are computed
    # Then they differ: the boundaries between parts are part of the id
    assert deterministic_id(*first) != deterministic_id(*second)


def test_the_order_of_the_parts_matters() -> None:
    # Given the same parts in another order
    # When their ids are computed
    # Then they differ
    assert deterministic_id("sheet-1", "chunk") != deterministic_id("chunk", "sheet-1")


# --- VersionGuard -------------------------------------------------------------------------------


def test_a_guard_for_a_new_item_requires_that_it_does_not_exist() -> None:
    # Given a write computed from "no item yet"
    # When its condition is built
    # Then it only succeeds if the key attribute does not exist
    assert VersionGuard("pk", "version", 0).condition() == ("attribute_not_exists(#key)", {"#key": "pk"}, {})


def test_a_guard_for_an_existing_item_requires_the_version_read() -> None:
    # Given a write computed from version 7
    # When its condition is built
    # Then it only succeeds against version 7 (as a DynamoDB number)
    assert VersionGuard("pk", "version", 7).condition() == (
        "#version = :expected_version",
        {"#version": "version"},
        {":expected_version": {"N": "7"}},
    )


# --- full_jitter_backoff ------------------------------------------------------------------------


@pytest.mark.parametrize(("base", "cap"), [(1, 60), (2, 43_200), (3, 100), (5, 7), (1, 1), (2, 3)])
def test_backoff_stays_within_one_and_the_ceiling(base: int, cap: int) -> None:
    # Given a base and a cap, and a seeded rng
    rng = random.Random(base * 1000 + cap)
    for attempt in range(0, 40):
        ceiling = min(cap, base * 2**attempt)
        for _ in range(200):
            # When a backoff is drawn for the attempt
            delay = full_jitter_backoff(attempt, base_seconds=base, cap_seconds=cap, rng=rng)
            # Then it is a whole number of seconds in [1, min(cap, base * 2**attempt)]
            assert isinstance(delay, int)
            assert 1 <= delay <= ceiling, (attempt, delay, ceiling)


@pytest.mark.parametrize("attempt", [62, 63, 100, 1000, 10**6])
def test_backoff_never_exceeds_the_cap_for_huge_attempts(attempt: int) -> None:
    # Given a very late attempt (2**attempt would overflow a float)
    rng = random.Random(attempt)
    # When backoffs are drawn
    delays = [full_jitter_backoff(attempt, base_seconds=2, cap_seconds=43_200, rng=rng) for _ in range(500)]
    # Then none exceeds the cap, none is below a second, and they still spread over the window
    assert all(1 <= delay <= 43_200 for delay in delays)
    assert max(delays) > 30_000 and min(delays) < 13_000


def test_backoff_is_at_least_one_second_even_for_a_tiny_window() -> None:
    # Given a window under one second
    rng = random.Random(3)
    # When backoffs are drawn
    # Then each is one second: a wait is never a busy loop
    assert {full_jitter_backoff(0, base_seconds=0.25, cap_seconds=60, rng=rng) for _ in range(200)} == {1}


@pytest.mark.parametrize(("base", "attempt"), [(1.75, 0), (2.7, 0), (0.9, 1), (1.25, 2)], ids=["1.75", "2.7", "0.9x2", "1.25x4"])
def test_backoff_does_not_round_above_a_fractional_ceiling(base: float, attempt: int) -> None:
    # Given a base whose window is not a whole number of seconds (WorkerOptions.backoff_base_seconds is a float)
    ceiling = base * 2**attempt
    rng = random.Random(11)
    # When many backoffs are drawn
    delays = [full_jitter_backoff(attempt, base_seconds=base, cap_seconds=43_200, rng=rng) for _ in range(2000)]
    # Then none is above the documented ceiling min(cap, base * 2**attempt)
    assert max(delays) <= ceiling, (max(delays), ceiling)


@pytest.mark.parametrize(("attempt", "base", "cap"), [(10, 2, 43_200), (5, 1, 60), (30, 1, 60), (12, 2, 43_200)])
def test_backoff_spreads_over_the_whole_window(attempt: int, base: int, cap: int) -> None:
    # Given 1000 draws for one attempt with a seeded rng
    ceiling = min(cap, base * 2**attempt)
    rng = random.Random(20240601 + attempt)
    # When the backoffs are drawn
    delays = [full_jitter_backoff(attempt, base_seconds=base, cap_seconds=cap, rng=rng) for _ in range(1000)]
    # Then they are not all equal, reach both ends of the window, and average about half the ceiling
    assert len(set(delays)) > 1
    assert min(delays) <= ceiling * 0.05 + 1 and max(delays) >= ceiling * 0.95
    assert statistics.fmean(delays) == pytest.approx(ceiling / 2, rel=0.1)


def test_the_window_doubles_per_attempt_until_the_cap() -> None:
    # Given 1000 draws per attempt
    rng = random.Random(8)
    means = []
    for attempt in range(4, 10):
        # When backoffs are drawn for successive attempts
        means.append(statistics.fmean(full_jitter_backoff(attempt, base_seconds=2, cap_seconds=600, rng=rng) for _ in range(1000)))
    # Then the mean roughly doubles each attempt (32, 64, 128, 256, 512 s windows) and stops at the cap
    for earlier, later in itertools.pairwise(means[:5]):
        assert 1.6 < later / earlier < 2.4, means
    assert means[5] == pytest.approx(300, rel=0.1)  # 2 * 2**9 = 1024 > 600: the cap's window


def test_the_same_seed_gives_the_same_backoffs() -> None:
    # Given two rngs with the same seed
    first, second = random.Random(42), random.Random(42)
    # When backoffs are drawn from each
    # Then the sequences are identical (the rng is the only source of randomness)
    draws = [full_jitter_backoff(attempt % 20, base_seconds=2, cap_seconds=43_200, rng=first) for attempt in range(100)]
    assert draws == [full_jitter_backoff(attempt % 20, base_seconds=2, cap_seconds=43_200, rng=second) for attempt in range(100)]


def test_without_an_rng_the_module_random_is_used() -> None:
    # Given no rng
    # When backoffs are drawn
    delays = [full_jitter_backoff(6, base_seconds=1, cap_seconds=60, rng=None) for _ in range(300)]
    # Then they are still within [1, 60] and spread
    assert all(1 <= delay <= 60 for delay in delays) and len(set(delays)) > 1
