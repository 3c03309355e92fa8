"""The API key check of the authorizer: a constant-time compare against the key in Secrets Manager.

Both sides are hashed before `hmac.compare_digest`, so the time taken depends neither on where
the first differing character is nor on the length of the presented key.

The secret is cached (Powertools Parameters, max_age). When the secret is rotated, the cached
key goes stale: a key that does not match the cached one makes the check read the secret again,
but at most once per `refresh_floor_seconds`, so a stream of wrong keys cannot turn into a
stream of Secrets Manager calls.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable

# fetch(force) -> the current key; force=True bypasses the cache.
KeyFetcher = Callable[[bool], str]


def same_key(presented: str, expected: str) -> bool:
    if not expected:
        return False  # an empty secret authorizes nobody
    presented_digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
    expected_digest = hashlib.sha256(expected.encode("utf-8", "surrogatepass")).digest()
    return hmac.compare_digest(presented_digest, expected_digest)


class ApiKeyCheck:
    def __init__(self, fetch: KeyFetcher, *, refresh_floor_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._refresh_floor = refresh_floor_seconds
        self._clock = clock
        self._last_forced: float | None = None

    def forget(self) -> None:
        """Lift the refresh floor: the next mismatch may re-read the secret at once (after a SnapStart
        restore, whose monotonic clock need not continue the snapshot's)."""
        self._last_forced = None

    def allows(self, presented: str | None) -> bool:
        if not presented:
            return False
        if same_key(presented, self._fetch(False)):
            return True
        now = self._clock()
        if self._last_forced is not None and now - self._last_forced < self._refresh_floor:
            return False
        self._last_forced = now
        return same_key(presented, self._fetch(True))
