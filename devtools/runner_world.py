"""The runner-stats pipeline on the embedded cloud: tables from the synthesized template, the
handler's settings from the synthesized function environment, and helpers to drive it."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from devtools.aws.clients import new_client
from devtools.aws.lambda_context import FakeLambdaContext, as_lambda_context
from devtools.aws.template_resources import EmbeddedCloud, Template
from devtools.state import PipelineView, capture
from runtime.runner_stats import handler, wiring
from runtime.runner_stats.contract import HANDLER
from runtime.runner_stats.service import RunnerStatsService
from runtime.runner_stats.settings import RunnerStatsSettings
from runtime.runner_stats.wiring import RunnerStatsDeps
from runtime.shared.aws import Clients


@dataclass
class RunnerStatsWorld:
    cloud: EmbeddedCloud
    client: Any
    settings: RunnerStatsSettings
    counts: Counter[str] = field(default_factory=Counter)  # the handler's metrics, summed over invocations
    _counts_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def create(cls, template: Template, *, settings_overrides: dict[str, str] | None = None) -> RunnerStatsWorld:
        """Call inside an active moto mock. Overrides change the synthesized function settings."""
        client = new_client()
        cloud = EmbeddedCloud(template).create(dynamodb=client)
        settings = RunnerStatsSettings.from_env({**cloud.function_environment(HANDLER), **(settings_overrides or {})})
        return cls(cloud, client, settings)

    def environment(self) -> dict[str, str]:
        return self.cloud.function_environment(HANDLER)

    def deps(self, client: Any | None = None) -> RunnerStatsDeps:
        """The pipeline as the handler builds it, on this world's client or another (say, one with faults);
        its counts go to this world's `counts`, not the process-wide Metrics (worlds run handlers in threads)."""
        return replace(wiring.build(self.settings, Clients(dynamodb=client or self.client)), count=self._count)

    def _count(self, name: str, value: int) -> None:
        with self._counts_lock:
            self.counts[name] += value

    def service(self, client: Any | None = None) -> RunnerStatsService:
        return self.deps(client).service

    def invoke(self, event: dict[str, Any], client: Any | None = None) -> dict[str, Any]:
        """Drive the real entry point with this world's pipeline."""
        return handler.handle(event, as_lambda_context(FakeLambdaContext()), self.deps(client))

    def view(self) -> PipelineView:
        return capture(self.client, self.settings.tables)
