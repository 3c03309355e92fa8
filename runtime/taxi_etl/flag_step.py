"""The saga's flag step and the automatic redrive's clear, on the store ports (see
runtime/taxi_etl/phases.py: up to `concurrency` updates at once), and the request the state machine
sends them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from runtime.shared.concurrency import map_bounded
from runtime.taxi_etl import contract
from runtime.taxi_etl.errors import PhaseInputError
from runtime.taxi_etl.final_table import FinalTable
from runtime.taxi_etl.models import Phase, Row, Verdict, parse_row, parse_rows
from runtime.taxi_etl.store import StatusTable
from runtime.taxi_etl.trip_items import final_item, same_trip
from runtime.taxi_etl.trips import Reason

ERROR_DETAIL_PREFIX = "error:"
RETRYABLE_DETAIL_PREFIX = contract.DETAIL_RETRYABLE_PREFIX  # AWS failed the phase; no verdict on the row


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
    """What a flag step is asked to flag: a phase's rejections, or its rows and the error it failed with."""

    phase: Phase
    rejected: tuple[Verdict, ...]  # the phase's own rejections (no error), or
    rows: tuple[Row, ...]  # the rows the phase was given, when it failed with `error`
    error: CaughtError | None
    mode: FlagMode = FlagMode.FINAL


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


def rejected_request(phase: Phase, rejected: Iterable[Verdict]) -> FlagRequest:
    """What the flag step is asked when `phase` rejected these rows: each verdict as the state machine hands it
    over (Verdict.to_json's, detail and message clipped), so that a bulk load's chunk, which flags in-process,
    flags exactly what the per-batch machine's flag step does."""
    return FlagRequest(phase, rejected=tuple(_rejected_verdict(verdict.to_json(), phase) for verdict in rejected), rows=(), error=None)


def _rejected_verdict(document: Any, phase: Phase) -> Verdict:
    row = parse_row(document, 0)
    reason = document.get("reason")
    if not isinstance(reason, int) or reason not in {int(code) for code in Reason} or reason == Reason.OK:
        reason = phase.reason  # a verdict always names a failure; an unknown one is this phase's
    return Verdict(row.store_request_id, row.tuple, Reason(reason), str(document.get("detail", "")), str(document.get("message", "")))


def is_retryable_detail(detail: str | None) -> bool:
    """A flag set because AWS failed the phase (a redrive of the same line may store the row), not a verdict."""
    return bool(detail) and str(detail).startswith(RETRYABLE_DETAIL_PREFIX)


@dataclass(frozen=True, slots=True)
class FlagOutcome:
    """What the flag step flagged; `to_json` is its output, whose error and cause the Fail state carries."""

    error: str  # the name the execution fails with, e.g. ValidationFailed
    cause: str
    flagged: int
    by_detail: tuple[tuple[str, int], ...] = ()  # (rule or "error:<Name>", rows), by detail: the metric's reason

    def to_json(self) -> dict[str, object]:
        return {"error": self.error, "cause": self.cause, "flagged": self.flagged}


def flag(
    request: FlagRequest, tables: Mapping[Phase, StatusTable], final: FinalTable | None = None, *, concurrency: int = 1
) -> FlagOutcome:
    """Set the same reason in every status table the transaction touched, for each failed row.

    The reason comes from the phase's own verdicts, or, when the phase failed as a whole, from
    the phase and the error its Catch caught. A row whose final item is already there (a batch
    whose store failed after some rows) is complete, and is not flagged.

    The rows' validation status is flagged first, for all of them, then their other tables
    (up to `concurrency` updates at once), so a row's validation row is flagged before any
    other, as the redrive's reading of a flag assumes.
    """
    verdicts = list(request.rejected)
    if request.error is not None:
        # The state machine says which errors were AWS's (its Catch for them asks for a retryable flag).
        retryable = request.mode in (FlagMode.RETRYABLE, FlagMode.REDRIVEN)
        detail = f"{RETRYABLE_DETAIL_PREFIX if retryable else ERROR_DETAIL_PREFIX}{request.error.name}"
        verdicts = [Verdict(row.store_request_id, row.tuple, request.phase.reason, detail, request.error.cause) for row in request.rows]
        if request.phase == Phase.STORE and final is not None:
            stored = final.stored_items(verdict.store_request_id for verdict in verdicts)
            verdicts = [verdict for verdict in verdicts if not _is_stored(stored, verdict)]
    touched = request.phase.touched

    def set_flag(update: tuple[Phase, Verdict]) -> None:
        phase, verdict = update
        tables[phase].flag(verdict.store_request_id, verdict.tuple, verdict.reason, verdict.detail, verdict.message)

    first, *others = touched
    map_bounded(set_flag, [(first, verdict) for verdict in verdicts], concurrency)
    map_bounded(set_flag, [(phase, verdict) for verdict in verdicts for phase in others], concurrency)
    reasons = sorted({f"{int(verdict.reason)} {verdict.detail}" for verdict in verdicts})
    cause = f"{len(verdicts)} row(s) flagged in {', '.join(phase.value for phase in touched)} status: {'; '.join(reasons)[:900]}"
    by_detail = tuple(sorted(Counter(verdict.detail for verdict in verdicts).items()))
    return FlagOutcome(error=request.phase.failure_name, cause=cause, flagged=len(verdicts), by_detail=by_detail)


def clear_retryable(request: FlagRequest, tables: Mapping[Phase, StatusTable], *, concurrency: int = 1) -> int:
    """Before the automatic redrive of a phase AWS failed: clear the retryable flags of the request's rows,
    so that the phase, run again, finds its status rows at reason 0. Returns the rows cleared.

    Only a retryable flag of this phase is cleared (the update's condition); a row flagged otherwise
    meanwhile (a rule, a conflict, another execution's verdict) keeps its flag, and the phase run again
    answers it from that flag. The validation rows are cleared last, the reverse of `flag`: a clear cut
    short leaves the row flagged where the redrive tool and GET /trips look first, and repeating it is
    harmless (a row already cleared fails the condition and is skipped).
    """
    *others, first = reversed(request.phase.touched)

    def clear(update: tuple[Phase, Row]) -> bool:
        phase, row = update
        return tables[phase].clear_retryable(row.store_request_id, request.phase.reason)

    map_bounded(clear, [(phase, row) for row in request.rows for phase in others], concurrency)
    return sum(map_bounded(clear, [(first, row) for row in request.rows], concurrency))


def _is_stored(stored: Mapping[str, Mapping[str, object]], verdict: Verdict) -> bool:
    """The row's own item is in the trips table (not merely some item under its id)."""
    if verdict.store_request_id not in stored:
        return False
    try:
        return same_trip(stored[verdict.store_request_id], final_item(verdict.store_request_id, verdict.tuple))
    except ValueError:
        return False
