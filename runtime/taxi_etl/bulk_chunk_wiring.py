"""The bulk state machine's Chunk task: its settings (read once from the environment, validated, frozen) and its
dependencies, built from the settings and the SDK clients (see runtime/taxi_etl/phase_wiring.py).

Apart from the other bulk functions' (runtime/taxi_etl/bulk_wiring.py): the chunk's cold start loads the row logic
of every phase, and this module defines only its own two classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from runtime.shared.aws import Clients
from runtime.shared.settings import require_int, require_str
from runtime.taxi_etl.contract import (
    ENV_FINAL_TABLE,
    ENV_INGEST_BUCKET,
    ENV_MAX_LINE_BYTES,
    ENV_STORE_STATUS_TABLE,
    ENV_TRANSFORMATION_STATUS_TABLE,
    ENV_VALIDATION_STATUS_TABLE,
)
from runtime.taxi_etl.final_table import DynamoFinalTable, FinalTable
from runtime.taxi_etl.load_bucket import LoadBucket, S3LoadBucket
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.store import ChunkStatusTable, DynamoStatusTable

# A chunk writes its rows as a phase does (each row's chain on one thread), and flags as the flag step does: the
# phases' PHASE_ROW_CONCURRENCY (runtime/taxi_etl/phase_wiring.py; a unit test keeps them equal).
CHUNK_ROW_CONCURRENCY: Final = 32


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


def build(settings: BulkChunkSettings, clients: Clients) -> BulkChunkDeps:
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
