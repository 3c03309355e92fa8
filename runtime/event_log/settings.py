"""The event-log handlers' settings: each handler reads its environment once, validated, frozen.

The names are the contract's (runtime/event_log/contract.py), which infra/event_log/construct.py
sets; an infra test checks that every synthesized function carries exactly the variables its
settings class reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.event_log.contract import (
    ENV_BACKOFF_BASE_SECONDS,
    ENV_BACKOFF_CAP_SECONDS,
    ENV_BUCKET,
    ENV_CHUNK_BYTES,
    ENV_HANDOFF_MARGIN_MS,
    ENV_LEASE_SECONDS,
    ENV_LOG_TABLE,
    ENV_MAX_BODY_BYTES,
    ENV_MAX_CLAIMS_TO_RESEND,
    ENV_MAX_VALUE_BYTES,
    ENV_PAYLOAD_MAX_BYTES,
    ENV_PAYLOAD_QUEUE_URL,
    ENV_PENDING_TABLE,
    ENV_PENDING_TAG,
    ENV_READ_PAGE_LIMIT,
    ENV_RESEND_STUCK_SNAPSHOTS,
    ENV_SNAPSHOT_EVERY,
    ENV_SNAPSHOT_QUEUE_URL,
    ENV_STUCK_AFTER_SECONDS,
    ENV_URL_EXPIRY_SECONDS,
    SQS_MAX_VISIBILITY_SECONDS,
)
from runtime.event_log.pending_check import StuckRules
from runtime.event_log.service import LogOptions
from runtime.event_log.side_effects import RouterQueues
from runtime.event_log.snapshots import WorkerOptions
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


def pending_tag(env: Mapping[str, str]) -> str:
    tag = require_str(env, ENV_PENDING_TAG)
    name, separator, value = tag.partition("=")
    if not separator or not name or not value or "&" in tag:
        raise SettingsError(f"{ENV_PENDING_TAG} must be one tag as name=value, got {tag!r}")
    return tag


@dataclass(frozen=True, slots=True)
class ApiSettings:
    log_table: str
    bucket: str
    options: LogOptions
    max_value_bytes: int
    max_body_bytes: int
    read_page_limit: int

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ApiSettings:
        defaults = LogOptions()
        settings = cls(
            log_table=require_str(env, ENV_LOG_TABLE),
            bucket=require_str(env, ENV_BUCKET),
            options=LogOptions(
                snapshot_every=int_setting(env, ENV_SNAPSHOT_EVERY, defaults.snapshot_every),
                payload_max_bytes=int_setting(env, ENV_PAYLOAD_MAX_BYTES, defaults.payload_max_bytes),
                pending_tag=pending_tag(env),
                url_expiry_seconds=int_setting(env, ENV_URL_EXPIRY_SECONDS, defaults.url_expiry_seconds),
            ),
            max_value_bytes=int_setting(env, ENV_MAX_VALUE_BYTES, 4096),
            max_body_bytes=int_setting(env, ENV_MAX_BODY_BYTES, 16_384),
            read_page_limit=int_setting(env, ENV_READ_PAGE_LIMIT, 1000),
        )
        if settings.max_value_bytes >= settings.max_body_bytes:
            raise SettingsError(f"{ENV_MAX_VALUE_BYTES} must be below {ENV_MAX_BODY_BYTES}")
        return settings


@dataclass(frozen=True, slots=True)
class RouterSettings:
    queues: RouterQueues

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RouterSettings:
        return cls(RouterQueues(snapshots=require_str(env, ENV_SNAPSHOT_QUEUE_URL), payloads=require_str(env, ENV_PAYLOAD_QUEUE_URL)))


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    log_table: str
    pending_table: str
    bucket: str
    options: WorkerOptions

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerSettings:
        defaults = WorkerOptions(queue_url="")
        options = WorkerOptions(
            queue_url=require_str(env, ENV_SNAPSHOT_QUEUE_URL),
            chunk_bytes=int_setting(env, ENV_CHUNK_BYTES, defaults.chunk_bytes, minimum=256),
            lease_seconds=int_setting(env, ENV_LEASE_SECONDS, int(defaults.lease_seconds)),
            handoff_margin_ms=int_setting(env, ENV_HANDOFF_MARGIN_MS, defaults.handoff_margin_ms),
            backoff_base_seconds=int_setting(env, ENV_BACKOFF_BASE_SECONDS, int(defaults.backoff_base_seconds)),
            backoff_cap_seconds=int_setting(env, ENV_BACKOFF_CAP_SECONDS, int(defaults.backoff_cap_seconds)),
        )
        if options.backoff_cap_seconds > SQS_MAX_VISIBILITY_SECONDS:
            raise SettingsError(
                f"{ENV_BACKOFF_CAP_SECONDS} must be at most {SQS_MAX_VISIBILITY_SECONDS} (the longest SQS visibility timeout)"
            )
        return cls(
            log_table=require_str(env, ENV_LOG_TABLE),
            pending_table=require_str(env, ENV_PENDING_TABLE),
            bucket=require_str(env, ENV_BUCKET),
            options=options,
        )


@dataclass(frozen=True, slots=True)
class FinalizerSettings:
    bucket: str
    queue_url: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FinalizerSettings:
        return cls(bucket=require_str(env, ENV_BUCKET), queue_url=require_str(env, ENV_PAYLOAD_QUEUE_URL))


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
        lease = int_setting(env, ENV_LEASE_SECONDS, int(WorkerOptions(queue_url="").lease_seconds))
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
