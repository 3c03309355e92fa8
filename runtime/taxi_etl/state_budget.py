"""The most a submission can put in one state of the saga, bounded before the execution starts. Pure.

Step Functions limits every state's input and output, a task's input and result, and an
execution's input to 262,144 bytes of UTF-8 JSON ("Quotas related to task executions",
docs.aws.amazon.com/step-functions/latest/dg/limits.html). Past it the execution fails with
States.DataLimitExceeded, which a Catch on States.ALL does not take: the rows its phases had marked
in progress would be neither stored nor flagged. So the API refuses (413, naming the limit) a
request whose largest state could pass it, and starts nothing.

The states, for rows r (the workflow: infra/taxi_etl/construct.py):
- the execution input I = {"rows": [r...]} (Validation's input);
- each phase's output P = {"rows": [passed verdicts], "rejected": [...], ...}, which the next phase
  and the flag step read: Validation's verdict of a row carries the line it validated (passed) or
  the row's tuple with a detail and a message (rejected, or flagged by an earlier execution);
  Transformation's and Store's likewise, for the rows that passed the phase before;
- around them, at most one flag step's outcome at $.flag (a phase after a flagged one gets it in its
  input) and one caught error at $.error, and the flag step's own input {"phase", "state"}.

Validate and Transform are pure, so each row's verdicts are computed here exactly; what an earlier
execution may have stored instead (a flag) is bounded by its detail and message bytes
(runtime/taxi_etl/models.py clips them). The widest state is then at most
    max(I, P_validation, P_transformation, P_store) + flag outcome + caught error + flag input wrapper.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from runtime.shared.refusals import PayloadTooLarge
from runtime.taxi_etl.models import MAX_DETAIL_BYTES, MAX_MESSAGE_BYTES, PhaseResult, Row, Verdict
from runtime.taxi_etl.trip_lines import Accepted, transform_tuple, validate_line
from runtime.taxi_etl.trips import Reason

# Step Functions quotas (limits.html, "Maximum input or output size for a task, state, or execution"): 262,144 bytes.
STEP_FUNCTIONS_PAYLOAD_BYTES: Final = 262_144
# A caught error at $.error: {"Error": <= 256 characters, "Cause": <= 32,768 characters} (the Step Functions API
# reference's limits on an error and its cause). Lambda's error response, the Cause, is JSON written by the runtime
# with json.dumps' defaults: printable ASCII, so a character takes at most 2 bytes in a state (a quote or a
# backslash is escaped), and the error's name likewise.
CAUGHT_ERROR_BYTES: Final = len('{"Error":"","Cause":""}') + 2 * (256 + 32_768)
# A flag step's outcome at $.flag: {"error": "<Phase>Failed", "cause": "<n> row(s) flagged in <tables> status:
# <reasons, at most 900 characters>", "flagged": n} (runtime/taxi_etl/phases.py). 900 characters at up to 6 bytes
# (a \u escape), the rest ASCII and well under 200 bytes.
FLAG_OUTCOME_BYTES: Final = 900 * 6 + 200
_FLAG_MEMBER: Final = len(',"flag":') + FLAG_OUTCOME_BYTES
_ERROR_MEMBER: Final = len(',"error":') + CAUGHT_ERROR_BYTES
_FLAG_INPUT_WRAPPER: Final = len('{"phase":"transformation","state":}')
_EMPTY_RESULT: Final = len(json.dumps(PhaseResult(()).to_json(), separators=(",", ":")))


def json_bytes(document: Any) -> int:
    """Compact JSON in UTF-8, as Step Functions counts a state (and as the embedded cloud measures it)."""
    return len(json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))


def _passed(store_request_id: str, produced: str) -> int:
    return json_bytes(Verdict(store_request_id, produced).to_json())


def _rejected_at_most(store_request_id: str, given: str) -> int:
    """A rejected or flagged verdict of the row: its given tuple, with the longest detail and message."""
    return json_bytes(Verdict(store_request_id, given, Reason.VALIDATION).to_json()) + MAX_DETAIL_BYTES + MAX_MESSAGE_BYTES


def _phase_result(verdicts: Sequence[int]) -> int:
    """A phase's output holding verdicts of these sizes (a comma between two, in whichever list)."""
    return _EMPTY_RESULT + sum(verdicts) + max(0, len(verdicts) - 1)


@dataclass(frozen=True, slots=True)
class StateBudget:
    """The largest JSON each kind of state of a submission's execution can hold, in bytes."""

    execution_input: int
    validation_output: int
    transformation_output: int
    store_output: int

    @property
    def largest_state(self) -> int:
        """The widest state any path can build: a phase document with a flag outcome, a caught error, in a flag step's input."""
        widest = max(self.execution_input, self.validation_output, self.transformation_output, self.store_output)
        return widest + _FLAG_MEMBER + _ERROR_MEMBER + _FLAG_INPUT_WRAPPER

    @property
    def fits(self) -> bool:
        return self.largest_state <= STEP_FUNCTIONS_PAYLOAD_BYTES


def state_budget(rows: Sequence[Row], execution_input: str) -> StateBudget:
    validation: list[int] = []
    transformation: list[int] = []
    store: list[int] = []
    for row in rows:
        validated = validate_line(row.tuple)
        rejected = _rejected_at_most(row.store_request_id, row.tuple)
        if not isinstance(validated, Accepted):
            validation.append(rejected)
            continue
        validation.append(max(rejected, _passed(row.store_request_id, validated.tuple)))
        transformed = transform_tuple(validated.tuple)
        rejected = _rejected_at_most(row.store_request_id, validated.tuple)
        if not isinstance(transformed, Accepted):
            transformation.append(rejected)
            continue
        transformation.append(max(rejected, _passed(row.store_request_id, transformed.tuple)))
        store.append(_rejected_at_most(row.store_request_id, transformed.tuple))
    return StateBudget(
        execution_input=len(execution_input.encode("utf-8", "surrogatepass")),
        validation_output=_phase_result(validation),
        transformation_output=_phase_result(transformation),
        store_output=_phase_result(store),
    )


def check_state_budget(rows: Sequence[Row], execution_input: str) -> StateBudget:
    """The submission's budget; PayloadTooLarge (413) when a state of its execution could pass Step Functions' limit."""
    budget = state_budget(rows, execution_input)
    if not budget.fits:
        raise PayloadTooLarge(
            f"these {len(rows)} rows could take up to {budget.largest_state} bytes in one state of the saga; Step Functions "
            f"takes at most {STEP_FUNCTIONS_PAYLOAD_BYTES} bytes per state (its payload limit): send fewer or shorter lines"
        )
    return budget
