"""The bulk route's functions but the chunk: their settings (read once from the environment, validated, frozen)
and their dependencies, built from the settings and the SDK clients (see runtime/taxi_etl/phase_wiring.py).

Plan and Report are the bulk state machine's tasks; the loads API (POST /loads, GET /loads/{LoadId}) and the load
starter (the ingest bucket's ObjectCreated events) start and read loads, with the same settings. The Chunk task's
are in runtime/taxi_etl/bulk_chunk_wiring.py: its cold start is the heaviest of the route, and defining the other
four functions' classes (a frozen dataclass costs about 1 ms to create) took its import from 1.20x to 1.23x of
boto3's. runtime/taxi_etl/wiring.py builds any of the five.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from runtime.shared.aws import Clients
from runtime.shared.settings import SettingsError, require_int, require_str
from runtime.taxi_etl.contract import ENV_BULK_STATE_MACHINE_ARN, ENV_CHUNK_ROWS, ENV_INGEST_BUCKET
from runtime.taxi_etl.load_bucket import LoadBucket, S3LoadBucket

# An annotation only: the loads API and the starter build the workflow adapter, Plan and Report do not load it.
if TYPE_CHECKING:
    from runtime.taxi_etl.workflow import StepFunctionsWorkflow

# The rows of a chunk (TaxiEtlConfig.bulk_chunk_rows' bounds): fewer makes a month file tens of thousands of map
# items; more makes one chunk's work longer than its task's timeout allows at the phases' row concurrency.
CHUNK_ROWS_MIN: Final = 100
CHUNK_ROWS_MAX: Final = 10_000
# Summaries the report reads at once: small objects, so a month file's ~1,500 take seconds, not minutes.
REPORT_READ_CONCURRENCY: Final = 16


@dataclass(frozen=True, slots=True)
class BulkPlanSettings:
    """Plan: the ingest bucket and the rows of a chunk."""

    ingest_bucket: str
    chunk_rows: int

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BulkPlanSettings:
        chunk_rows = require_int(env, ENV_CHUNK_ROWS, minimum=CHUNK_ROWS_MIN)
        if chunk_rows > CHUNK_ROWS_MAX:
            raise SettingsError(f"environment variable {ENV_CHUNK_ROWS} must be <= {CHUNK_ROWS_MAX}, got {chunk_rows}")
        return cls(ingest_bucket=require_str(env, ENV_INGEST_BUCKET), chunk_rows=chunk_rows)


@dataclass(frozen=True, slots=True)
class BulkPlanDeps:
    bucket: LoadBucket
    chunk_rows: int


@dataclass(frozen=True, slots=True)
class BulkReportSettings:
    """Report: the ingest bucket (the summaries it reads and the report it writes)."""

    ingest_bucket: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BulkReportSettings:
        return cls(ingest_bucket=require_str(env, ENV_INGEST_BUCKET))


@dataclass(frozen=True, slots=True)
class BulkReportDeps:
    bucket: LoadBucket
    concurrency: int = REPORT_READ_CONCURRENCY


@dataclass(frozen=True, slots=True)
class LoadsSettings:
    """The loads API and the load starter: the ingest bucket and the bulk state machine they start."""

    ingest_bucket: str
    bulk_state_machine_arn: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LoadsSettings:
        return cls(ingest_bucket=require_str(env, ENV_INGEST_BUCKET), bulk_state_machine_arn=require_str(env, ENV_BULK_STATE_MACHINE_ARN))


@dataclass(frozen=True, slots=True)
class LoadsDeps:
    """The bucket (the file's version, a load's manifest, summaries and report) and the bulk state machine
    (always STANDARD: a second start with the same name and input is the same execution)."""

    bucket: LoadBucket
    workflow: StepFunctionsWorkflow


def build_plan(settings: BulkPlanSettings, clients: Clients) -> BulkPlanDeps:
    return BulkPlanDeps(S3LoadBucket(settings.ingest_bucket, client=clients.s3), chunk_rows=settings.chunk_rows)


def build_report(settings: BulkReportSettings, clients: Clients) -> BulkReportDeps:
    return BulkReportDeps(S3LoadBucket(settings.ingest_bucket, client=clients.s3), concurrency=REPORT_READ_CONCURRENCY)


def build_loads(settings: LoadsSettings, clients: Clients) -> LoadsDeps:
    from runtime.taxi_etl.workflow import StepFunctionsWorkflow

    workflow = StepFunctionsWorkflow(settings.bulk_state_machine_arn, deduplicates=True, client=clients.stepfunctions)
    return LoadsDeps(S3LoadBucket(settings.ingest_bucket, client=clients.s3), workflow)


BulkSettings = BulkPlanSettings | BulkReportSettings | LoadsSettings
BulkDeps = BulkPlanDeps | BulkReportDeps | LoadsDeps


def build(settings: BulkSettings, clients: Clients) -> BulkDeps:
    """The dependencies of the bulk function (but the chunk) whose settings these are."""
    if isinstance(settings, BulkPlanSettings):
        return build_plan(settings, clients)
    if isinstance(settings, BulkReportSettings):
        return build_report(settings, clients)
    return build_loads(settings, clients)
