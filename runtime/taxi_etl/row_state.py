"""What became of one row: pending, stored, or flagged, read from its status rows and trips item.

Pure: the reader (store.DynamoRowReader) fetches the four items; this decides what they mean.
Each phase writes its status row (reason 0) before it acts, and the flag step sets the failing
phase's reason code in every status table the transaction touched, so:

- flagged: any status row has a non-zero reason. The reason code names the phase (1 validation,
  2 transformation, 3 store); the detail and message are that phase's row's. `retryable` is true when
  the detail is `retryable:<error>`: AWS failed the phase (after its retries and, once the flag is
  final, the automatic redrive), which says nothing about the row; any other detail is a verdict.
- stored: no row is flagged, the store phase has written its row, and the trips item under the id
  is the one that row's tuple makes (the test the flag step uses: `same_trip`). Store writes its
  status row before the item, so the row with the item is a store that finished; an item that is
  not the row's own (another transaction's, which Store will flag as a StoreConflict) is not.
  A content id (c-...) names one canonical spelling of a trip, so its item is its own: with no status
  row at all and the item there, the row is stored. That is how a bulk load's chunk leaves a row it
  stored (runtime/taxi_etl/bulk_chunk.py writes status rows only for rows it flags). A keyed id
  (k-/kb-) names whatever was sent under its key: only the store row's tuple says the item is its own.
- pending: some status row exists and neither of the above holds (the row is between phases, or a
  redrive has cleared its flag and its new execution has not finished). `phase` is the last phase
  whose row exists.
- unknown (None): no phase has seen the id (and, for a content id, no trips item holds it). The API answers
  202 before Validate writes its row, so an id accepted a moment ago is unknown for as long as its execution
  takes to start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

from runtime.shared.refusals import InvalidRequest
from runtime.taxi_etl import contract
from runtime.taxi_etl.models import STORE_REQUEST_ID, Phase
from runtime.taxi_etl.store import FIRST_GENERATION, StatusRow
from runtime.taxi_etl.trip_items import final_item, same_trip

_PHASE_OF_REASON: dict[int, Phase] = {phase.reason: phase for phase in Phase}
# The ids requests.py gives rows, exactly: k-<Idempotency-Key>, kb-<Idempotency-Key>-<line number
# from 1> and c-<hex hash>. Not a batch's execution name (kb-<key>, cb-...) nor a redrive's (r2-...).
_KEY = contract.IDEMPOTENCY_KEY_PATTERN
CONTENT_ID_PREFIX = "c-"
_ROW_ID = re.compile(rf"k-{_KEY}|kb-{_KEY}-[1-9][0-9]*|{CONTENT_ID_PREFIX}[0-9a-f]{{{contract.CONTENT_ID_HEX_CHARS}}}")


class State(StrEnum):
    PENDING = "pending"
    STORED = "stored"
    FLAGGED = "flagged"


@dataclass(frozen=True, slots=True)
class RowState:
    store_request_id: str
    state: State
    phase: Phase | None = None  # flagged: the failing phase; pending: the last phase reached
    reason: int | None = None
    detail: str | None = None
    message: str | None = None
    generation: int = 1
    findings: tuple[str, ...] = ()
    unexplained_amount: Decimal | None = None
    trip: dict[str, Any] = field(default_factory=dict)

    @property
    def retryable(self) -> bool:
        """Flagged because AWS failed its phase (`retryable:<error>`), not for what the row holds: the same line may still be stored."""
        return self.state is State.FLAGGED and (self.detail or "").startswith(contract.DETAIL_RETRYABLE_PREFIX)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"StoreRequestId": self.store_request_id, "state": self.state.value, "generation": self.generation}
        if self.state is State.FLAGGED:
            phase = self.phase.value if self.phase else None
            body |= {"phase": phase, "reason": self.reason, "detail": self.detail, "message": self.message, "retryable": self.retryable}
        elif self.state is State.PENDING:
            body["phase"] = self.phase.value if self.phase else None
        else:
            # Amounts as strings: a JSON float would not give back the cents the item holds.
            unexplained = None if self.unexplained_amount is None else str(self.unexplained_amount)
            body |= {"findings": list(self.findings), "unexplainedAmount": unexplained, "trip": self.trip}
        return body


def parse_row_id(text: str | None) -> str:
    """The path's StoreRequestId, or InvalidRequest naming what is wrong with it."""
    if not text:
        raise InvalidRequest("the path has no StoreRequestId; ask for /trips/<StoreRequestId>")
    if not STORE_REQUEST_ID.fullmatch(text) or not _ROW_ID.fullmatch(text):
        raise InvalidRequest(
            "a StoreRequestId is what POST /trips or /trips/batch answered: k-<key>, kb-<key>-<n> or c-<hash>"
            f" (a key is 1-64 letters, digits, '_' or '-'; n a line number from 1; the hash {contract.CONTENT_ID_HEX_CHARS} hex digits),"
            " at most 80 characters"
        )
    return text


# What a stored row's answer repeats from its trips item: when and where, and what was charged.
TRIP_FIELDS = ("pickup_at", "dropoff_at", "pu_location_id", "do_location_id", "trip_seconds", "total_amount")


def row_state(store_request_id: str, status: Mapping[Phase, StatusRow | None], trip: Mapping[str, Any] | None) -> RowState | None:
    """The row's state from its status rows (by phase) and its trips item; None when nothing has seen it."""
    rows = [(phase, row) for phase in Phase if (row := status.get(phase)) is not None]
    if not rows:
        return _stored(store_request_id, trip, FIRST_GENERATION) if trip is not None and is_content_id(store_request_id) else None
    generation = rows[0][1].generation if rows[0][0] is Phase.VALIDATION else 1
    flagged = next((row for _, row in rows if row.flagged), None)
    if flagged is not None:
        return RowState(
            store_request_id,
            State.FLAGGED,
            phase=_PHASE_OF_REASON.get(flagged.reason),  # Reason is an IntEnum: a stored int finds it
            reason=flagged.reason,
            detail=flagged.detail,
            message=flagged.message,
            generation=generation,
        )
    redrive_pending = rows[0][0] is Phase.VALIDATION and rows[0][1].pending
    store_row = status.get(Phase.STORE)
    if trip is not None and store_row is not None and not redrive_pending and _is_own_trip(store_request_id, store_row, trip):
        return _stored(store_request_id, trip, generation)
    return RowState(store_request_id, State.PENDING, phase=rows[-1][0], generation=generation)


def is_content_id(store_request_id: str) -> bool:
    """The id a row's content gives it (c-<hash>), not one a client's key gives it (k-/kb-)."""
    return store_request_id.startswith(CONTENT_ID_PREFIX)


def _stored(store_request_id: str, trip: Mapping[str, Any], generation: int) -> RowState:
    """A stored row's answer: its findings, unexplained amount and trip, from its trips item."""
    unexplained = trip.get("unexplained_amount")
    return RowState(
        store_request_id,
        State.STORED,
        generation=generation,
        findings=tuple(str(finding) for finding in trip.get("findings", ())),
        unexplained_amount=None if unexplained is None else Decimal(str(unexplained)),
        trip={name: _plain(trip[name]) for name in TRIP_FIELDS if name in trip},
    )


def _is_own_trip(store_request_id: str, store_row: StatusRow, trip: Mapping[str, Any]) -> bool:
    """The trips item is the one the store row's tuple makes (in any item layout), as the flag step decides."""
    if store_row.raw_tuple is None:
        return False
    try:
        return same_trip(trip, final_item(store_request_id, store_row.raw_tuple))
    except ValueError:  # a tuple Store cannot turn into an item: it flags the row as malformed_tuple
        return False


def _plain(value: Any) -> Any:
    """A JSON-safe copy: whole numbers as ints, other decimals as strings (never floats)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() and value.as_tuple().exponent == 0 else str(value)
    return value
