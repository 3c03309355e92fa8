"""The event-log API function on the embedded cloud, as its tests here drive it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.event_log_world import EventLogWorld
from runtime.event_log import api_handler
from runtime.event_log.contract import HANDLER_API
from runtime.shared import observability


def clear_cold_start_caches() -> None:
    for cached in (api_handler.settings, api_handler.deps):
        cached.cache_clear()


@pytest.fixture
def api(log_world: EventLogWorld, monkeypatch: pytest.MonkeyPatch) -> Iterator[EventLogWorld]:
    """The function's environment set (with the small test settings), no client left from other tests."""
    environment = {**log_world.cloud.function_environment(HANDLER_API), "SNAPSHOT_EVERY": "20"}
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(observability.metrics, "namespace", environment["POWERTOOLS_METRICS_NAMESPACE"])
    clear_cold_start_caches()
    yield log_world
    clear_cold_start_caches()
    observability.metrics.clear_metrics()
