"""The bulk route's functions: their settings (read once from the environment, validated, frozen) and their
dependencies, built from the settings and the SDK clients (see runtime/taxi_etl/phase_wiring.py).

Plan, Chunk and Report are the bulk state machine's tasks; the loads API (POST /loads, GET /loads/{LoadId}) and
the load starter (the ingest bucket's ObjectCreated events) start and read loads, with the same settings.
runtime/taxi_etl/wiring.py builds any of them from its settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from runtime.shared.aws import Clients
from runtime.shared.settings import SettingsError, require_int, require_str
from runtime.taxi_etl.contract import (
    ENV_BULK_STATE_MACHINE_ARN,
    ENV_CHUNK_ROWS,
    ENV_FINAL_TABLE,
    ENV_INGEST_BUCKET,
    ENV_MAX_LINE_BYTES,
    ENV_STORE_STATUS_TABLE,
    ENV_TRANSFORMATION_STATUS_TABLE,
    ENV_VALIDATION_STATUS_TABLE,
)
from runtime.taxi_etl.load_bucket import LoadBucket, S3LoadBucket

# Annotations only: each builder imports what its own function is built from, so that the loads API, the starter,
# Plan and Report do not load the tables, the row logic and the workflow adapter at their cold start.
if TYPE_CHECKING:
    from runtime.taxi_etl.final_table import FinalTable
    from runtime.taxi_etl.models import Phase
    from runtime.taxi_etl.store import ChunkStatusTable
    from runtime.taxi_etl.workflow import StepFunctionsWorkflow

# The rows of a chunk (TaxiEtlConfig.bulk_chunk_rows' bounds): fewer makes a month file tens of thousands of map
# items; more makes one chunk's work longer than its task's timeout allows at the phases' row concurrency.
CHUNK_ROWS_MIN: Final = 100
CHUNK_ROWS_MAX: Final = 10_000
# A chunk writes its rows as a phase does (each row's chain on one thread), and flags as the flag step does: the
# phases' PHASE_ROW_CONCURRENCY (runtime/taxi_etl/phase_wiring.py; a unit test keeps them equal).
CHUNK_ROW_CONCURRENCY: Final = 32
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
class BulkChunkSettings:
    """Chunk: the ingest bucket, the longest line a trip may be, the three status tables and the trips table."""

    ingest_bucket: str
    max_line_bytes: int
    validation_status_table: str
    transformation_status_table: str
    store_status_table: str
    final_table: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BulkChunkSettings:
        return cls(
            ingest_bucket=require_str(env, ENV_INGEST_BUCKET),
            max_line_bytes=require_int(env, ENV_MAX_LINE_BYTES),
            validation_status_table=require_str(env, ENV_VALIDATION_STATUS_TABLE),
            transformation_status_table=require_str(env, ENV_TRANSFORMATION_STATUS_TABLE),
            store_status_table=require_str(env, ENV_STORE_STATUS_TABLE),
            final_table=require_str(env, ENV_FINAL_TABLE),
        )


@dataclass(frozen=True, slots=True)
class BulkChunkDeps:
    """Chunk: the bucket, each phase's status table, the trips table, and how many rows it writes at once."""

    bucket: LoadBucket
    status: dict[Phase, ChunkStatusTable]
    final: FinalTable
    max_line_bytes: int
    concurrency: int = CHUNK_ROW_CONCURRENCY


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


def build_chunk(settings: BulkChunkSettings, clients: Clients) -> BulkChunkDeps:
    from runtime.taxi_etl.final_table import DynamoFinalTable
    from runtime.taxi_etl.models import Phase
    from runtime.taxi_etl.store import DynamoStatusTable

    status: dict[Phase, ChunkStatusTable] = {
        Phase.VALIDATION: DynamoStatusTable(settings.validation_status_table, client=clients.dynamodb),
        Phase.TRANSFORMATION: DynamoStatusTable(settings.transformation_status_table, client=clients.dynamodb),
        Phase.STORE: DynamoStatusTable(settings.store_status_table, client=clients.dynamodb),
    }
    return BulkChunkDeps(
        S3LoadBucket(settings.ingest_bucket, client=clients.s3),
        status,
        DynamoFinalTable(settings.final_table, client=clients.dynamodb),
        max_line_bytes=settings.max_line_bytes,
        concurrency=CHUNK_ROW_CONCURRENCY,
    )


def build_report(settings: BulkReportSettings, clients: Clients) -> BulkReportDeps:
    return BulkReportDeps(S3LoadBucket(settings.ingest_bucket, client=clients.s3), concurrency=REPORT_READ_CONCURRENCY)


def build_loads(settings: LoadsSettings, clients: Clients) -> LoadsDeps:
    from runtime.taxi_etl.workflow import StepFunctionsWorkflow

    workflow = StepFunctionsWorkflow(settings.bulk_state_machine_arn, deduplicates=True, client=clients.stepfunctions)
    return LoadsDeps(S3LoadBucket(settings.ingest_bucket, client=clients.s3), workflow)


BulkSettings = BulkPlanSettings | BulkChunkSettings | BulkReportSettings | LoadsSettings
BulkDeps = BulkPlanDeps | BulkChunkDeps | BulkReportDeps | LoadsDeps


def build(settings: BulkSettings, clients: Clients) -> BulkDeps:
    """The dependencies of the bulk function whose settings these are."""
    if isinstance(settings, BulkPlanSettings):
        return build_plan(settings, clients)
    if isinstance(settings, BulkChunkSettings):
        return build_chunk(settings, clients)
    if isinstance(settings, BulkReportSettings):
        return build_report(settings, clients)
    return build_loads(settings, clients)
