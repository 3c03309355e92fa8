"""The authorizer's API key check (runtime/taxi_etl/api_key.py): constant-time compare, cache, forced refresh floor.

The fetcher is a fake Secrets Manager behind a Powertools-like cache, on a fake clock: fetch(False)
serves the cached key while it is younger than max_age, fetch(True) reads the secret and refreshes
the cache. It counts every call and every read that reached the secret.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from runtime.taxi_etl.api_key import ApiKeyCheck, KeyFetcher, same_key

FLOOR = 10.0
MAX_AGE = 300.0


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeSecret:
    clock: FakeClock
    value: str
    max_age: float = MAX_AGE
    calls: list[bool] = field(default_factory=list)  # the force flag of every fetch
    reads: int = 0  # fetches that reached Secrets Manager
    _cached: str | None = None
    _cached_at: float = 0.0

    def __call__(self, force: bool) -> str:
        self.calls.append(force)
        if force or self._cached is None or self.clock() - self._cached_at >= self.max_age:
            self.reads += 1
            self._cached, self._cached_at = self.value, self.clock()
        return self._cached

    @property
    def forced(self) -> int:
        return sum(self.calls)


_fetcher_check: KeyFetcher = FakeSecret(FakeClock(), "k")  # the fake is a KeyFetcher (checked by type checkers)


def make_check(value: str = "key-1") -> tuple[ApiKeyCheck, FakeSecret, FakeClock]:
    clock = FakeClock()
    secret = FakeSecret(clock, value)
    return ApiKeyCheck(secret, refresh_floor_seconds=FLOOR, clock=clock), secret, clock


# --- same_key -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("presented", "expected", "same"),
    [
        ("s3cr3t-key", "s3cr3t-key", True),
        ("s3cr3t-kez", "s3cr3t-key", False),
        ("S3CR3T-KEY", "s3cr3t-key", False),
        ("s3cr3t", "s3cr3t-key", False),
        ("s3cr3t-key-and-more", "s3cr3t-key", False),
        ("", "s3cr3t-key", False),
        ("clé-ключ-鍵", "clé-ключ-鍵", True),
        ("cle-ключ-鍵", "clé-ключ-鍵", False),
        ("\ud800", "\ud800", True),  # a lone surrogate is compared, not an encoding crash
    ],
)
def test_same_key_compares_the_whole_text(presented: str, expected: str, same: bool) -> None:
    # Given a presented and an expected key
    # When they are compared
    # Then they are the same only when equal character for character
    assert same_key(presented, expected) is same


@pytest.mark.parametrize("presented", ["", "anything"])
def test_an_empty_secret_authorizes_nobody(presented: str) -> None:
    # Given an empty expected key (a secret not set)
    # When any key, even an empty one, is compared with it
    # Then it is refused
    assert same_key(presented, "") is False


# --- ApiKeyCheck ----------------------------------------------------------------------------------


def test_the_right_key_is_checked_against_the_cache() -> None:
    # Given a check whose secret is key-1
    check, secret, clock = make_check("key-1")
    # When key-1 is presented three times within the cache age
    results = [check.allows("key-1") for _ in range(3)]
    clock.advance(MAX_AGE - 1)
    results.append(check.allows("key-1"))
    # Then every time it is allowed, from one read of the secret, with no forced fetch
    assert results == [True] * 4
    assert secret.calls == [False] * 4 and secret.reads == 1


def test_a_wrong_key_forces_one_refresh() -> None:
    # Given a check whose key is cached
    check, secret, _clock = make_check("key-1")
    assert check.allows("key-1")
    # When a wrong key is presented
    allowed = check.allows("wrong")
    # Then it is refused after one forced read of the secret
    assert allowed is False
    assert secret.calls == [False, False, True] and secret.reads == 2


def test_a_second_wrong_key_within_the_floor_does_not_refetch() -> None:
    # Given a wrong key that just forced a refresh
    check, secret, clock = make_check("key-1")
    assert not check.allows("wrong-1")
    # When more wrong keys come within the floor, the last just before it ends
    clock.advance(1)
    second = check.allows("wrong-2")
    clock.advance(FLOOR - 1.001)
    third = check.allows("wrong-3")
    # Then they are refused from the cache, with no forced fetch and no read
    assert (second, third) == (False, False)
    assert secret.forced == 1 and secret.reads == 2


def test_a_wrong_key_after_the_floor_refetches() -> None:
    # Given a wrong key that forced a refresh
    check, secret, clock = make_check("key-1")
    assert not check.allows("wrong-1")
    # When the floor has passed and another wrong key comes
    clock.advance(FLOOR)
    allowed = check.allows("wrong-2")
    # Then it forces a second refresh (and is refused)
    assert allowed is False
    assert secret.forced == 2 and secret.reads == 3


def test_a_rotated_key_is_accepted_at_once_and_the_old_one_refused() -> None:
    # Given a check with the old key cached
    check, secret, clock = make_check("old-key")
    assert check.allows("old-key")
    # When the secret is rotated and a client presents the new key within the cache age
    secret.value = "new-key"
    clock.advance(1)
    new_allowed = check.allows("new-key")
    # Then the new key is accepted through a forced refresh
    assert new_allowed is True and secret.forced == 1
    # And the old key is refused now (the cache holds the new one), and after the floor too
    assert check.allows("old-key") is False
    clock.advance(FLOOR)
    assert check.allows("old-key") is False
    # And the new key keeps being accepted from the cache
    assert check.allows("new-key") is True
    assert secret.calls[-1] is False


def test_after_a_rotation_a_refresh_spent_within_the_floor_delays_the_new_key_until_the_floor() -> None:
    # Given a wrong key that forced a refresh just before the secret was rotated
    check, secret, clock = make_check("old-key")
    assert not check.allows("wrong")
    secret.value = "new-key"
    # When the new key comes within the floor, then after it
    clock.advance(FLOOR / 2)
    within = check.allows("new-key")
    clock.advance(FLOOR / 2)
    after = check.allows("new-key")
    # Then it is refused at first (no second forced fetch), and accepted once the floor has passed
    assert (within, after) == (False, True)
    assert secret.forced == 2


def test_the_cache_expiring_picks_up_a_rotated_key_without_forcing() -> None:
    # Given the old key cached and the secret rotated
    check, secret, clock = make_check("old-key")
    assert check.allows("old-key")
    secret.value = "new-key"
    # When the cache age has passed
    clock.advance(MAX_AGE)
    # Then the new key is accepted from a plain (unforced) fetch
    assert check.allows("new-key") is True
    assert secret.forced == 0 and secret.reads == 2


@pytest.mark.parametrize("presented", [None, ""])
def test_no_key_is_refused_without_fetching(presented: str | None) -> None:
    # Given a check
    check, secret, _clock = make_check("key-1")
    # When no key or an empty key is presented
    allowed = check.allows(presented)
    # Then it is refused and the secret is not read
    assert allowed is False
    assert secret.calls == [] and secret.reads == 0


def test_an_empty_secret_refuses_every_key() -> None:
    # Given a secret that is empty
    check, secret, _clock = make_check("")
    # When a key is presented
    # Then it is refused, after one forced read to see whether it changed
    assert check.allows("anything") is False
    assert secret.forced == 1
