"""The consistency primitives every pipeline is written on.

- deterministic keys: a retry computes the same keys (runner stats: the Kinesis eventID and
  the run key), so its writes land on the same items;
- version guards: a conditional write that only succeeds against the version that was read
  (optimistic locking, and the stale-write guard for monotonic state); callers re-read and
  retry a bounded number of times on VersionConflict.
"""

from __future__ import annotations

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
