"""The runner-stats fault suites' common check: a pipeline's end state against the independent
recomputation of its unique messages (devtools/reference.py)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from devtools import reference
from devtools.state import PipelineView
from devtools.workload import DeviceMessage


def assert_matches_reference(view: PipelineView, unique: Sequence[DeviceMessage]) -> None:
    """Every run's totals, count and archive, with no gap left open, and every user's tendency, as one clean pass computes them."""
    totals = reference.clean_pass(unique)
    assert set(view.runs) == set(totals)
    for key, expected in totals.items():
        run = view.runs[key]
        assert run.total_meters == Decimal(expected.total_meters)
        assert run.total_seconds == Decimal(str(expected.total_seconds))
        assert run.message_count == expected.message_count
        assert run.gaps == ()
        assert [m.sequence_id for m in run.archived] == sorted(m.sequence_id for m in unique if (m.user_id, m.run_id) == key)
    tendencies = reference.clean_tendencies(totals)
    assert view.tendencies == {user: (t.current_run_id, t.current, t.previous_run_id, t.previous) for user, t in tendencies.items()}
