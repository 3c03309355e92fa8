from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.aws.template_resources import Template
from devtools.runner_world import RunnerStatsWorld

FAULTS_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fault suites run without coverage measurement (pytest-cov's `no_cover`): they replay the
    write paths that the unit and integration tests already reach, hundreds of times over under
    injected crashes, and measuring that replay costs CPU for no line counted (on Python 3.13 with
    sys.monitoring, test_runner_stats_faults.py: 142 s of CPU measured, 127 s paused, 118 s without
    coverage). Every fault case still runs and asserts; only its lines are not counted toward the floor."""
    for item in items:
        if FAULTS_DIR in item.path.parents:
            item.add_marker(pytest.mark.no_cover)


@pytest.fixture
def world(moto_aws: None, runner_stats_template: Template) -> Iterator[RunnerStatsWorld]:
    yield RunnerStatsWorld.create(runner_stats_template)
