from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.aws.template_resources import Template
from devtools.runner_world import RunnerStatsWorld


@pytest.fixture
def world(moto_aws: None, runner_stats_template: Template) -> Iterator[RunnerStatsWorld]:
    yield RunnerStatsWorld.create(runner_stats_template)
