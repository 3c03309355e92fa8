"""Lambda entry point of the scheduled stuck-pending check (EventBridge schedule). Thin: scan, check, publish.

Publishes `OldestPendingSnapshotAgeSeconds` (0 when nothing is pending, so the metric is always
there), `PendingSnapshots` and `StuckPendingSnapshots`, logs every stuck row, and re-sends the
build message of every stuck row (`StuckSnapshotsResent`, alarmed) unless RESEND_STUCK_SNAPSHOTS
is false. The runbook is `python -m ops.event_log_pending`, then `python -m ops.event_log_reprocess`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any, Protocol

from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime.event_log import contract, pending_check_wiring
from runtime.event_log.messages import SideEffectMessage
from runtime.event_log.models import PendingSnapshot
from runtime.event_log.objects import MessageQueue
from runtime.event_log.pending_check import PendingReport, PendingStatus, check, format_duration, recovery_messages
from runtime.event_log.pending_check_wiring import PendingCheckDeps, PendingCheckSettings
from runtime.shared.aws import Clients
from runtime.shared.observability import MetricUnit, instrumented, logger, metrics

MAX_LOGGED = 100  # stuck rows logged one by one per run; the count is always exact


class PendingScan(Protocol):
    def scan(self, *, consistent_read: bool = True, page_size: int | None = None) -> Iterator[PendingSnapshot]: ...


@functools.cache
def settings() -> PendingCheckSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return PendingCheckSettings.from_env(os.environ)


@functools.cache
def deps() -> PendingCheckDeps:
    """Built on the first invocation (cold start), never at import time."""
    return pending_check_wiring.build(settings(), Clients())


def run_pending_check(pending: PendingScan, config: PendingCheckSettings, now: float, messages: MessageQueue | None) -> PendingReport:
    report = check(pending.scan(consistent_read=False), now, config.rules)
    metrics.add_metric(name=contract.METRIC_OLDEST_PENDING_SNAPSHOT_AGE, unit=MetricUnit.Seconds, value=round(report.oldest_age_seconds, 3))
    metrics.add_metric(name=contract.METRIC_PENDING_SNAPSHOTS, unit=MetricUnit.Count, value=len(report.views))
    metrics.add_metric(name=contract.METRIC_STUCK_PENDING_SNAPSHOTS, unit=MetricUnit.Count, value=len(report.stuck))
    for view in report.stuck[:MAX_LOGGED]:
        logger.warning(
            "stuck pending snapshot",
            extra={
                "log_id": view.log_id,
                "seq": str(view.seq),
                "age_seconds": round(view.age_seconds),
                "age": format_duration(view.age_seconds),
                "idle_seconds": round(view.idle_seconds),
                "holder": view.holder,
                "lease_expired": view.lease_expired,
                "retries": view.pending.retries,
                "recover": f"python -m ops.event_log_reprocess --stack <EventLog stack> --log-id {view.log_id} --from-position {view.cut}",
            },
        )
    resend: list[SideEffectMessage] = []
    failed: list[str] = []
    if config.resend_queue_url and messages is not None:
        resend = recovery_messages(report, config.max_claims_to_resend)
        failed = messages.send(config.resend_queue_url, resend) if resend else []
    metrics.add_metric(name=contract.METRIC_STUCK_SNAPSHOTS_RESENT, unit=MetricUnit.Count, value=len(resend) - len(failed))
    if failed:
        raise RuntimeError(f"SQS refused {len(failed)} of {len(resend)} build messages; the next run sends them again")
    logger.info(
        "pending snapshots checked",
        extra={
            "pending": len(report.views),
            "building": report.count(PendingStatus.BUILDING),
            "waiting": report.count(PendingStatus.WAITING),
            "stuck": len(report.stuck),
            "oldest_age_seconds": round(report.oldest_age_seconds),
        },
    )
    return report


def handle(event: dict[str, Any], context: LambdaContext, deps: PendingCheckDeps) -> dict[str, Any]:
    report = run_pending_check(deps.store, deps.settings, deps.clock(), deps.queue)
    return {"pending": len(report.views), "stuck": len(report.stuck), "oldest_age_seconds": round(report.oldest_age_seconds, 3)}


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, deps())
