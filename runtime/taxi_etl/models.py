"""What travels between the saga's states: a phase's input rows and its verdicts (the flag step's
request is runtime/taxi_etl/flag_step.py's, the one function that reads it).

Every phase takes `{"rows": [{"StoreRequestId", "tuple"}, ...]}` (one row for the single-row
route, up to the batch limit for the batch route) and returns its verdicts in the same shape, so
the next phase reads the previous phase's output directly:

    {"rows": [passed verdicts], "rejected": [rejected verdicts], "hasPassed": bool, "hasRejected": bool}

A verdict is `{success, reason, StoreRequestId, tuple}` plus `detail` and `message` when the row
was rejected. `tuple` is what the phase produced (or, for a rejection, what it was given).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from runtime.taxi_etl.errors import PhaseInputError
from runtime.taxi_etl.trips import Reason

STORE_REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")  # usable as a Step Functions execution name
# A rejected verdict's detail and message, in the bytes they take in a state (JSON-escaped, UTF-8): a bound per
# row that runtime/taxi_etl/state_budget.py counts on (64 and 512 characters when plain ASCII).
MAX_DETAIL_BYTES = 64
MAX_MESSAGE_BYTES = 512


def _json_char_bytes(char: str) -> int:
    if " " <= char < "\x7f" and char not in '"\\':
        return 1
    return len(json.dumps(char, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2  # an escape, or UTF-8's 2-4 bytes


def clip_json(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` whose JSON string (escaped, UTF-8, without its quotes) takes at most `max_bytes`."""
    used = 0
    for index, char in enumerate(text):
        used += _json_char_bytes(char)
        if used > max_bytes:
            return text[:index]
    return text


class Phase(StrEnum):
    VALIDATION = "validation"
    TRANSFORMATION = "transformation"
    STORE = "store"

    @property
    def reason(self) -> Reason:
        return _REASONS[self]

    @property
    def touched(self) -> tuple[Phase, ...]:
        """The status tables a transaction has written by the time this phase fails."""
        order = list(Phase)
        return tuple(order[: order.index(self) + 1])

    @property
    def failure_name(self) -> str:
        """The error name the execution fails with (`ValidationFailed`, ...)."""
        return f"{self.value.title()}Failed"


_REASONS = {Phase.VALIDATION: Reason.VALIDATION, Phase.TRANSFORMATION: Reason.TRANSFORMATION, Phase.STORE: Reason.STORE}


@dataclass(frozen=True, slots=True)
class Row:
    """One row of a phase input: its id and the tuple the phase is given."""

    store_request_id: str
    tuple: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a phase made of one row: passed (reason 0) with its output tuple, or rejected with the reason."""

    store_request_id: str
    tuple: str
    reason: Reason = Reason.OK
    detail: str = ""
    message: str = ""

    @property
    def success(self) -> bool:
        return self.reason == Reason.OK

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "success": self.success,
            "reason": int(self.reason),
            "StoreRequestId": self.store_request_id,
            "tuple": self.tuple,
        }
        if not self.success:
            document["detail"] = clip_json(self.detail, MAX_DETAIL_BYTES)
            document["message"] = clip_json(self.message, MAX_MESSAGE_BYTES)
        return document


@dataclass(frozen=True, slots=True)
class PhaseResult:
    """A phase's verdicts, in its rows' order; `to_json` is the phase's output."""

    verdicts: tuple[Verdict, ...]

    @property
    def passed(self) -> list[Verdict]:
        return [verdict for verdict in self.verdicts if verdict.success]

    @property
    def rejected(self) -> list[Verdict]:
        return [verdict for verdict in self.verdicts if not verdict.success]

    def to_json(self) -> dict[str, Any]:
        passed, rejected = self.passed, self.rejected
        return {
            "rows": [verdict.to_json() for verdict in passed],
            "rejected": [verdict.to_json() for verdict in rejected],
            "hasPassed": bool(passed),
            "hasRejected": bool(rejected),
        }


def parse_rows(event: Mapping[str, Any]) -> list[Row]:
    """The phase input; duplicate ids are kept once (the first), since one id is one transaction."""
    rows = event.get("rows") if isinstance(event, Mapping) else None
    if not isinstance(rows, list):
        raise PhaseInputError("a phase input must be an object with a 'rows' list")
    unique: dict[str, Row] = {}
    for position, document in enumerate(rows):
        row = parse_row(document, position)
        unique.setdefault(row.store_request_id, row)
    return list(unique.values())


def parse_row(document: Any, position: int) -> Row:
    """One row of a phase input (`position` names it in the error)."""
    if not isinstance(document, Mapping):
        raise PhaseInputError(f"row {position} is not an object")
    store_request_id, text = document.get("StoreRequestId"), document.get("tuple")
    if not isinstance(store_request_id, str) or not STORE_REQUEST_ID.fullmatch(store_request_id):
        raise PhaseInputError(f"row {position} has no valid StoreRequestId")
    if not isinstance(text, str):
        raise PhaseInputError(f"row {position} has no tuple text")
    return Row(store_request_id, text)
