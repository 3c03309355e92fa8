"""The runner-stats section of `make demo` on a small workload, so that a change that breaks the
demo (such as a new input rule the demo's replay does not meet) fails `make test`."""

from __future__ import annotations

import time
from typing import Any

import pytest

from devtools.demo import REPLAY_LEAD_MS, run_demo
from devtools.workload import generate


@pytest.mark.usefixtures("moto_aws")
def test_the_demo_replay_ends_equal_to_a_clean_pass(runner_stats_template: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    # Given a small workload replayed as if sent just now, as `make demo` does
    workload = generate(
        seed=2026, users=6, runs_per_user=2, messages_per_run=40, malformed=12, base_epoch_ms=int(time.time() * 1000) - REPLAY_LEAD_MS
    )
    # When the demo streams it through the embedded Kinesis into the handler, with its faults
    status = run_demo(runner_stats_template, workload, crash_after_write=10, throttled_write=20)
    # Then it reports OK: both faults happened (the handler writes on a pool of threads), every run
    # equals the clean pass and only the malformed records are rejects
    output = capsys.readouterr().out
    assert status == 0, output
    assert "crash after write 10: yes, throttled write 20: yes" in output
    assert output.rstrip().endswith("OK")
