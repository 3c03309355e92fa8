"""The consistency primitives every pipeline is written on.

- deterministic ids: a retry computes the same keys, so its writes land on the same items;
- version guards: a conditional write that only succeeds against the version that was read
  (optimistic locking, and the stale-write guard for monotonic state);
- a bounded optimistic retry loop around a read-compute-conditional-write step.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

ONCEFLOW_NAMESPACE = uuid.UUID("6f1b0c1e-2b4d-5c7a-9e3f-0a1b2c3d4e5f")

ResultT = TypeVar("ResultT")


def deterministic_id(*parts: object) -> str:
    """A UUIDv5 of the parts: the same inputs always name the same item."""
    return str(uuid.uuid5(ONCEFLOW_NAMESPACE, "\x1f".join(str(part) for part in parts)))


class VersionConflict(Exception):
    """A conditional write found another version than the one it was computed from."""


class RetriesExhausted(Exception):
    """The optimistic loop kept losing races for its whole budget."""

    def __init__(self, attempts: int) -> None:
        super().__init__(f"gave up after {attempts} conflicting attempts")
        self.attempts = attempts


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


def optimistic(step: Callable[[int], ResultT], *, attempts: int, on_conflict: Callable[[int], None] | None = None) -> ResultT:
    """Run `step(attempt)` until it does not raise VersionConflict, at most `attempts` times."""
    for attempt in range(attempts):
        try:
            return step(attempt)
        except VersionConflict:
            if on_conflict is not None:
                on_conflict(attempt)
    raise RetriesExhausted(attempts)
