"""How the runner-stats pipeline is built: from its settings and the SDK clients, in one place.

The Lambda handler builds it once per cold start (`Clients()` builds real clients lazily);
the devtools world, the demo and the tests build it with their own clients (moto, or clients
with faults injected) and drive the same entry point, `handler.handle`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runtime.runner_stats.service import RunnerStatsService
from runtime.runner_stats.settings import RunnerStatsSettings
from runtime.runner_stats.store import DynamoRunStatsStore
from runtime.shared.aws import Clients
from runtime.shared.observability import count_metric

# Where the handler's counts go: name, value. Lambda's is the package's Powertools Metrics, which
# the instrumented entry point flushes; a world or test injects its own (thread-safe, not printed).
CountSink = Callable[[str, int], None]


@dataclass(frozen=True, slots=True)
class RunnerStatsDeps:
    """What the handler needs: the service over the DynamoDB store, and where its counts go."""

    service: RunnerStatsService
    count: CountSink = count_metric


def clients_for(settings: RunnerStatsSettings) -> Clients:
    """Lambda's clients: one connection per thread the handler runs its I/O on, and no client-side
    validation: every request is built by the store from typed models, and at a full shard's
    batch of about 850 calls botocore's check is CPU that a small function's share of a vCPU
    cannot spare (`make bench --only latency` measures it)."""
    return Clients(pool_connections=settings.options.io_concurrency, validate_parameters=False)


def build(settings: RunnerStatsSettings, clients: Clients) -> RunnerStatsDeps:
    store = DynamoRunStatsStore(
        settings.tables,
        client=clients.dynamodb,
        reject_payload_max_bytes=settings.reject_payload_max_bytes,
        read_concurrency=settings.options.io_concurrency,
    )
    return RunnerStatsDeps(service=RunnerStatsService(store, settings.options))
