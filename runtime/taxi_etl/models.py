"""What travels between the saga's states: a phase's input rows, its verdicts and the flag request.

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

from runtime.taxi_etl import contract
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
    store_request_id: str
    tuple: str


@dataclass(frozen=True, slots=True)
class Verdict:
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


@dataclass(frozen=True, slots=True)
class CaughtError:
    """What a Catch put at `$.error`: the error name and its cause (Lambda's JSON error, usually)."""

    name: str
    cause: str


class FlagMode(StrEnum):
    """What the state machine asks of a flag step (contract.FLAG_MODE_KEY in its input)."""

    FINAL = "final"  # no mode given: flag the rows for good (a rule, a rejection, an error that is not AWS's)
    RETRYABLE = contract.FLAG_MODE_RETRYABLE  # AWS failed the phase: flag the rows retryable; they are redriven once
    REDRIVEN = contract.FLAG_MODE_REDRIVEN  # AWS failed the phase again after that redrive: flag retryable, for good
    CLEAR = contract.FLAG_MODE_CLEAR  # before the redrive: clear the retryable flags this execution set


@dataclass(frozen=True, slots=True)
class FlagRequest:
    phase: Phase
    rejected: tuple[Verdict, ...]  # the phase's own rejections (no error), or
    rows: tuple[Row, ...]  # the rows the phase was given, when it failed with `error`
    error: CaughtError | None
    mode: FlagMode = FlagMode.FINAL


def parse_rows(event: Mapping[str, Any]) -> list[Row]:
    """The phase input; duplicate ids are kept once (the first), since one id is one transaction."""
    rows = event.get("rows") if isinstance(event, Mapping) else None
    if not isinstance(rows, list):
        raise PhaseInputError("a phase input must be an object with a 'rows' list")
    unique: dict[str, Row] = {}
    for position, document in enumerate(rows):
        row = _row(document, position)
        unique.setdefault(row.store_request_id, row)
    return list(unique.values())


def _row(document: Any, position: int) -> Row:
    if not isinstance(document, Mapping):
        raise PhaseInputError(f"row {position} is not an object")
    store_request_id, text = document.get("StoreRequestId"), document.get("tuple")
    if not isinstance(store_request_id, str) or not STORE_REQUEST_ID.fullmatch(store_request_id):
        raise PhaseInputError(f"row {position} has no valid StoreRequestId")
    if not isinstance(text, str):
        raise PhaseInputError(f"row {position} has no tuple text")
    return Row(store_request_id, text)


def parse_flag_request(event: Mapping[str, Any]) -> FlagRequest:
    """`{"phase": ..., "state": <the state the flag step was given>}`: either a phase's output with
    rejections, or the phase's input with the error its Catch put at `$.error`."""
    try:
        phase = Phase(str(event.get("phase")))
    except ValueError as err:
        raise PhaseInputError(f"unknown phase {event.get('phase')!r}") from err
    try:
        mode = FlagMode(str(event.get(contract.FLAG_MODE_KEY, FlagMode.FINAL)))
    except ValueError as err:
        raise PhaseInputError(f"unknown flag mode {event.get(contract.FLAG_MODE_KEY)!r}") from err
    state = event.get("state")
    if not isinstance(state, Mapping):
        raise PhaseInputError("a flag request must carry the state it flags")
    error = state.get("error")
    if isinstance(error, Mapping):
        caught = CaughtError(name=str(error.get("Error", "States.TaskFailed")), cause=str(error.get("Cause", "")))
        return FlagRequest(phase, rejected=(), rows=tuple(parse_rows(state)), error=caught, mode=mode)
    if mode is not FlagMode.FINAL:
        raise PhaseInputError(f"a flag request in mode {mode.value!r} must carry the error its Catch caught")
    rejected = state.get("rejected")
    if not isinstance(rejected, list):
        raise PhaseInputError("a flag request without an error must carry the phase's rejected rows")
    return FlagRequest(phase, rejected=tuple(_rejected_verdict(document, phase) for document in rejected), rows=(), error=None)


def _rejected_verdict(document: Any, phase: Phase) -> Verdict:
    row = _row(document, 0)
    reason = document.get("reason")
    if not isinstance(reason, int) or reason not in {int(code) for code in Reason} or reason == Reason.OK:
        reason = phase.reason  # a verdict always names a failure; an unknown one is this phase's
    return Verdict(row.store_request_id, row.tuple, Reason(reason), str(document.get("detail", "")), str(document.get("message", "")))
