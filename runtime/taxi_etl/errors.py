"""The taxi saga's own exceptions, in one place. PhaseInputError's class name is the error name the
state machine catches (contract.ERROR_PHASE_INPUT); keep it."""

from __future__ import annotations

from runtime.shared.http import Unprocessable


class RequestConflict(Unprocessable):
    """The id (from the Idempotency-Key) was already used for a different request (HTTP 422)."""


class PhaseInputError(ValueError):
    """The state machine handed a phase something that is not rows; no retry can fix it."""


class StoreConflict(Exception):
    """The final table holds a different item under this StoreRequestId."""


class StoreUnavailable(Exception):
    """DynamoDB kept some of the work unprocessed; the workflow's retry takes it up again."""
