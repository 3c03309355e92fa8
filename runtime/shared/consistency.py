"""The consistency primitives every pipeline is written on.

- deterministic keys: a retry computes the same keys (runner stats: the Kinesis eventID and
  the run key; event log: the entry position, chunk keys and side-effect request ids), so its
  writes land on the same items;
- version guards: a conditional write that only succeeds against the version that was read
  (optimistic locking, and the stale-write guard for monotonic state); callers re-read and
  retry a bounded number of times on VersionConflict;
- bounded backoff with full jitter for work that has to wait for other work.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass


class VersionConflict(Exception):
    """A conditional write found another version than the one it was computed from."""


@dataclass(frozen=True, slots=True)
class VersionGuard:
    """Condition for a write computed from `expected` (0 means 'the item did not exist')."""

    key_attribute: str
    version_attribute: str
    expected: int

    def condition(self) -> tuple[str, dict[str, str], dict[str, dict[str, str]]]:
        """ConditionExpression, ExpressionAttributeNames and ExpressionAttributeValues."""
        if self.expected == 0:
            return "attribute_not_exists(#key)", {"#key": self.key_attribute}, {}
        return (
            "#version = :expected_version",
            {"#version": self.version_attribute},
            {":expected_version": {"N": str(self.expected)}},
        )


def deterministic_id(*parts: object, length: int = 32) -> str:
    """A hex id that depends only on the text of `parts`: every retry of the same work computes
    the same one. Each part is length-prefixed, so no two different lists of parts share a text."""
    text = "".join(f"{len(str(part))}:{part};" for part in parts)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def full_jitter_backoff(attempt: int, *, base_seconds: float, cap_seconds: float, rng: random.Random | None = None) -> int:
    """Seconds to wait before attempt `attempt` (0-based): uniform in [1, min(cap, base * 2**attempt)].

    "Full jitter" spreads the retries of many waiting workers over the whole window, so they do
    not wake up together; at least one second, so a wait is never a busy loop.
    """
    ceiling = min(cap_seconds, base_seconds * 2 ** min(attempt, 62))
    draw = (rng or random).uniform(0, ceiling)
    return max(1, int(draw))  # rounded down, so never above the ceiling
