"""The event-log API function's settings and dependencies: what api_handler builds once per cold start.

One module per function, so each handler imports only what its own function runs (the project's
modules are compiled from source at every cold start). The variable names are the contract's
(runtime/event_log/contract.py), which infra/event_log/construct.py sets; an infra test checks that
every synthesized function carries exactly the variables its settings class reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.event_log.contract import (
    ENV_BUCKET,
    ENV_LOG_TABLE,
    ENV_MAX_BODY_BYTES,
    ENV_MAX_VALUE_BYTES,
    ENV_PAYLOAD_MAX_BYTES,
    ENV_PENDING_TAG,
    ENV_READ_PAGE_LIMIT,
    ENV_SNAPSHOT_EVERY,
    ENV_URL_EXPIRY_SECONDS,
)
from runtime.event_log.objects import S3Objects
from runtime.event_log.service import EventLogService, LogOptions
from runtime.event_log.store import DynamoLogStore
from runtime.shared.aws import Clients
from runtime.shared.settings import SettingsError, int_setting, require_str


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
class ApiDeps:
    settings: ApiSettings
    service: EventLogService
    objects: S3Objects


def build(settings: ApiSettings, clients: Clients) -> ApiDeps:
    objects = S3Objects(settings.bucket, client=clients.s3)
    return ApiDeps(
        settings, EventLogService(DynamoLogStore(settings.log_table, client=clients.dynamodb), objects, settings.options), objects
    )
