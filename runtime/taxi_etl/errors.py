"""The taxi saga's own exceptions. PhaseInputError's, LoadInputError's and TransientInfrastructureError's class
names are the error names the state machines match (contract.ERROR_PHASE_INPUT, ERROR_LOAD_INPUT, ERROR_TRANSIENT);
keep them. RequestConflict, the API's refusal of a reused id, is an HTTP refusal (runtime/shared/refusals.py)
and lives where it is raised, in runtime/taxi_etl/workflow.py."""

from __future__ import annotations

from collections.abc import Sequence


class PhaseInputError(ValueError):
    """The state machine handed a phase something that is not rows; no retry can fix it."""


class LoadInputError(ValueError):
    """A bulk load's file cannot be cut into chunks of trips (gone, gzip or Parquet bytes, no trip layout); no
    retry can fix it (contract.ERROR_LOAD_INPUT)."""


class StoreConflict(Exception):
    """The final table holds a different item under this StoreRequestId."""

    @classmethod
    def of_ids(cls, ids: Sequence[str]) -> StoreConflict:
        """The error Store raises for the rows of these StoreRequestIds, which the trips table holds with different
        content (a bulk chunk flags them with it)."""
        return cls(f"{len(ids)} row(s) already stored with different content: {', '.join(ids[:10])}")


class StoreUnavailable(Exception):
    """DynamoDB kept some of the work unprocessed; the workflow's retry takes it up again."""


class TransientInfrastructureError(Exception):
    """AWS failed the task, not the rows: a closed or refused connection, a timeout, a throttle, a 5xx,
    unprocessed keys. The message starts with the original error's class name. The state machine
    retries it longer than other failures, then flags the rows retryable and redrives them once."""
