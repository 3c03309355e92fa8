"""The taxi saga handlers' settings: each handler reads its environment once, validated, frozen.

The names are the contract's (runtime/taxi_etl/contract.py), which infra/taxi_etl/construct.py sets; an infra test checks that every
synthesized function carries exactly the variables its settings class reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.shared.settings import SettingsError, int_setting, require_str
from runtime.taxi_etl.contract import (
    ENV_API_KEY_SECRET_ID,
    ENV_BATCH_MAX_BYTES,
    ENV_BATCH_MAX_LINES,
    ENV_FINAL_TABLE,
    ENV_MAX_LINE_BYTES,
    ENV_SECRET_CACHE_SECONDS,
    ENV_SECRET_REFRESH_FLOOR_SECONDS,
    ENV_STATE_MACHINE_ARN,
    ENV_STATUS_TABLE,
    ENV_STORE_STATUS_TABLE,
    ENV_TRANSFORMATION_STATUS_TABLE,
    ENV_VALIDATION_STATUS_TABLE,
    ENV_WORKFLOW_TYPE,
)

WORKFLOW_TYPES = ("STANDARD", "EXPRESS")


@dataclass(frozen=True, slots=True)
class PhaseSettings:
    """Validate and transform: their own status table only."""

    status_table: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> PhaseSettings:
        return cls(status_table=require_str(env, ENV_STATUS_TABLE))


@dataclass(frozen=True, slots=True)
class StoreSettings:
    status_table: str
    final_table: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StoreSettings:
        return cls(status_table=require_str(env, ENV_STATUS_TABLE), final_table=require_str(env, ENV_FINAL_TABLE))


@dataclass(frozen=True, slots=True)
class FlagSettings:
    validation_table: str
    transformation_table: str
    store_table: str
    final_table: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FlagSettings:
        return cls(
            validation_table=require_str(env, ENV_VALIDATION_STATUS_TABLE),
            transformation_table=require_str(env, ENV_TRANSFORMATION_STATUS_TABLE),
            store_table=require_str(env, ENV_STORE_STATUS_TABLE),
            final_table=require_str(env, ENV_FINAL_TABLE),
        )


@dataclass(frozen=True, slots=True)
class RowStateSettings:
    """GET /trips/{id}: reads the three status tables and the trips table, writes nothing."""

    validation_table: str
    transformation_table: str
    store_table: str
    final_table: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RowStateSettings:
        return cls(
            validation_table=require_str(env, ENV_VALIDATION_STATUS_TABLE),
            transformation_table=require_str(env, ENV_TRANSFORMATION_STATUS_TABLE),
            store_table=require_str(env, ENV_STORE_STATUS_TABLE),
            final_table=require_str(env, ENV_FINAL_TABLE),
        )


@dataclass(frozen=True, slots=True)
class ApiSettings:
    state_machine_arn: str
    workflow_type: str
    batch_max_lines: int
    batch_max_bytes: int
    max_line_bytes: int
    # Read (never written) before a single unkeyed row starts an execution: a row already stored or
    # flagged, say a batch's row re-sent alone, is answered as a duplicate without one.
    rows: RowStateSettings

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ApiSettings:
        settings = cls(
            state_machine_arn=require_str(env, ENV_STATE_MACHINE_ARN),
            rows=RowStateSettings.from_env(env),
            workflow_type=require_str(env, ENV_WORKFLOW_TYPE).upper(),
            batch_max_lines=int_setting(env, ENV_BATCH_MAX_LINES, 100),
            batch_max_bytes=int_setting(env, ENV_BATCH_MAX_BYTES, 64 * 1024),
            max_line_bytes=int_setting(env, ENV_MAX_LINE_BYTES, 4096),
        )
        if settings.workflow_type not in WORKFLOW_TYPES:
            raise SettingsError(f"{ENV_WORKFLOW_TYPE} must be one of {', '.join(WORKFLOW_TYPES)}")
        if settings.max_line_bytes > settings.batch_max_bytes:
            raise SettingsError(f"{ENV_MAX_LINE_BYTES} must not exceed {ENV_BATCH_MAX_BYTES}")
        return settings

    @property
    def deduplicates_starts(self) -> bool:
        """Only Standard workflows refuse a second execution with the same name."""
        return self.workflow_type == "STANDARD"


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    secret_id: str
    cache_seconds: int
    refresh_floor_seconds: int

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AuthorizerSettings:
        settings = cls(
            secret_id=require_str(env, ENV_API_KEY_SECRET_ID),
            cache_seconds=int_setting(env, ENV_SECRET_CACHE_SECONDS, 300),
            refresh_floor_seconds=int_setting(env, ENV_SECRET_REFRESH_FLOOR_SECONDS, 10),
        )
        if settings.refresh_floor_seconds > settings.cache_seconds:
            raise SettingsError(f"{ENV_SECRET_REFRESH_FLOOR_SECONDS} must not exceed {ENV_SECRET_CACHE_SECONDS}")
        return settings
