"""benchmarks/saga_latency.py's arithmetic: which rows a task's input names, and the per-task Lambda
durations it hands to the cost table (serial depth x 5 ms + CPU, the costliest flag case)."""

from __future__ import annotations

import pytest

from benchmarks.saga_latency import BATCH_ROWS, Measurement, event_ids, phase_durations_ms
from devtools.aws.latency import LatencyRun


def latency_run(depth: float, cpu_ms: float) -> LatencyRun:
    """A run whose calls went one after another: `depth` x 20 ms more wall time at 20 ms than at 0."""
    return LatencyRun(
        delay_ms=20.0,
        calls=int(depth),
        calls_by_operation={"UpdateItem": int(depth)},
        peak_in_flight=1,
        wall_at_zero_s=0.5,
        wall_at_delay_s=0.5 + depth * 0.020,
        cpu_s=cpu_ms / 1000,
    )


def measured(task: str, scenario: str, rows: int, depth: float, cpu_ms: float) -> Measurement:
    return Measurement(task, scenario, rows, latency_run(depth, cpu_ms), (depth,), "digest")


def test_a_tasks_rows_are_its_input_rows_or_the_rows_and_rejections_its_flag_step_is_given() -> None:
    # Given a phase input, and a flag-step input with the phase's passed and rejected rows
    phase = {"rows": [{"StoreRequestId": "c-2", "tuple": "x"}, {"StoreRequestId": "c-1", "tuple": "y"}]}
    flag = {"phase": "validation", "state": {"rows": [{"StoreRequestId": "c-3"}], "rejected": [{"StoreRequestId": "c-1"}]}}
    # Then the ids they name are found, once each, sorted
    assert event_ids(phase) == ["c-1", "c-2"]
    assert event_ids(flag) == ["c-1", "c-3"]


def test_durations_are_the_chain_at_5_ms_per_call_plus_cpu_and_the_flag_steps_costliest_case() -> None:
    # Given measured depths and CPU for each task, the flag step in two cases
    runs = [
        measured("validate", "clean batch", BATCH_ROWS, 4, 30),
        measured("transform", "clean batch", BATCH_ROWS, 4, 40),
        measured("store", "clean batch", BATCH_ROWS, 8, 35),
        measured("flag", "validation rejects", BATCH_ROWS, 2, 20),
        measured("flag", "store failed", BATCH_ROWS, 7, 45),
        *(measured(task, "clean batch", 1, depth, 1) for task, depth in (("validate", 1), ("transform", 1), ("store", 2))),
        measured("flag", "validation rejects", 1, 1, 1),
        measured("flag", "store failed", 1, 4, 2),
    ]
    # When the durations are derived without measuring again
    durations = phase_durations_ms({}, runs)
    # Then each is depth x 5 ms + CPU, per 100-row and per 1-row invocation, the flag step's from its costliest case
    expected = {
        "validate": {100: 50.0, 1: 6.0},
        "transform": {100: 60.0, 1: 6.0},
        "store": {100: 75.0, 1: 11.0},
        "flag": {100: 80.0, 1: 22.0},
    }
    assert durations.keys() == expected.keys()
    for task, by_rows in expected.items():
        assert durations[task] == pytest.approx(by_rows)
