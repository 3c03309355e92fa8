"""The API's POST routes: their settings (read once from the environment, validated, frozen) and
their dependencies, built from the settings and the SDK clients (see runtime/taxi_etl/phase_wiring.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.shared.aws import Clients
from runtime.shared.settings import SettingsError, int_setting, require_str
from runtime.taxi_etl.contract import (
    ENV_BATCH_MAX_BYTES,
    ENV_BATCH_MAX_LINES,
    ENV_MAX_LINE_BYTES,
    ENV_STATE_MACHINE_ARN,
    ENV_WORKFLOW_TYPE,
)
from runtime.taxi_etl.final_table import RowReader
from runtime.taxi_etl.row_state_wiring import RowStateSettings, row_reader
from runtime.taxi_etl.workflow import StepFunctionsWorkflow

WORKFLOW_TYPES = ("STANDARD", "EXPRESS")


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """The POST routes: the state machine they start and the limits of a request."""

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
class ApiDeps:
    """The POST routes: their settings, the workflow they start, and the reader of a row's state."""

    settings: ApiSettings
    workflow: StepFunctionsWorkflow
    rows: RowReader


def build(settings: ApiSettings, clients: Clients) -> ApiDeps:
    workflow = StepFunctionsWorkflow(settings.state_machine_arn, deduplicates=settings.deduplicates_starts, client=clients.stepfunctions)
    return ApiDeps(settings, workflow, row_reader(settings.rows, clients))
