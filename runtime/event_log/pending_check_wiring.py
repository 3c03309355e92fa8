"""The scheduled stuck-pending check's settings and dependencies (one module per function: see api_wiring)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from runtime.event_log.contract import (
    DEFAULT_LEASE_SECONDS,
    ENV_LEASE_SECONDS,
    ENV_MAX_CLAIMS_TO_RESEND,
    ENV_PENDING_TABLE,
    ENV_RESEND_STUCK_SNAPSHOTS,
    ENV_SNAPSHOT_QUEUE_URL,
    ENV_STUCK_AFTER_SECONDS,
)
from runtime.event_log.objects import SqsQueue
from runtime.event_log.pending_check import StuckRules
from runtime.event_log.store import DynamoPendingStore
from runtime.shared.aws import Clients
from runtime.shared.settings import SettingsError, int_setting, require_int, require_str

# Longer than the dev queue's visibility timeout (6 x 300 s) plus the lease: by then a dead
# worker's message came back and a successor claimed the row, unless the message is gone.
DEFAULT_STUCK_AFTER_SECONDS = 3600


def bool_setting(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in {"true", "false"}:
        raise SettingsError(f"environment variable {name} must be true or false, got {env[name]!r}")
    return raw == "true"


@dataclass(frozen=True, slots=True)
class PendingCheckSettings:
    """The scheduled stuck-pending check. With RESEND_STUCK_SNAPSHOTS true (the default), every
    stuck row claimed fewer than `max_claims_to_resend` times gets its build message again on
    `resend_queue_url` (infra sets the cap: two queues' worth of receives); false leaves recovery
    to the operator."""

    pending_table: str
    rules: StuckRules
    resend_queue_url: str | None = None
    max_claims_to_resend: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> PendingCheckSettings:
        lease = int_setting(env, ENV_LEASE_SECONDS, DEFAULT_LEASE_SECONDS)
        stuck_after = int_setting(env, ENV_STUCK_AFTER_SECONDS, max(DEFAULT_STUCK_AFTER_SECONDS, lease))
        if stuck_after < lease:
            raise SettingsError(
                f"{ENV_STUCK_AFTER_SECONDS} must be at least {ENV_LEASE_SECONDS} ({lease}): a claim cannot be taken over earlier"
            )
        resend = bool_setting(env, ENV_RESEND_STUCK_SNAPSHOTS, True)
        return cls(
            pending_table=require_str(env, ENV_PENDING_TABLE),
            rules=StuckRules(lease_seconds=lease, stuck_after_seconds=stuck_after),
            resend_queue_url=require_str(env, ENV_SNAPSHOT_QUEUE_URL) if resend else None,
            max_claims_to_resend=require_int(env, ENV_MAX_CLAIMS_TO_RESEND) if resend else 0,
        )


@dataclass(frozen=True, slots=True)
class PendingCheckDeps:
    settings: PendingCheckSettings
    store: DynamoPendingStore
    queue: SqsQueue | None  # None when stuck rows are left to the operator
    clock: Callable[[], float] = time.time


def build(settings: PendingCheckSettings, clients: Clients) -> PendingCheckDeps:
    queue = SqsQueue(client=clients.sqs) if settings.resend_queue_url else None
    return PendingCheckDeps(settings, DynamoPendingStore(settings.pending_table, client=clients.dynamodb), queue)
