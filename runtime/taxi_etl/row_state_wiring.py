"""GET /trips/{id}: its settings (read once from the environment, validated, frozen) and its
dependencies, built from the settings and the SDK clients (see runtime/taxi_etl/phase_wiring.py).
The API reads rows the same way (runtime/taxi_etl/api_wiring.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.shared.aws import Clients
from runtime.shared.settings import require_str
from runtime.taxi_etl.contract import ENV_FINAL_TABLE, ENV_STORE_STATUS_TABLE, ENV_TRANSFORMATION_STATUS_TABLE, ENV_VALIDATION_STATUS_TABLE
from runtime.taxi_etl.final_table import DynamoRowReader, RowReader
from runtime.taxi_etl.models import Phase


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
class RowStateDeps:
    """GET /trips/{id}: the reader of a row across the four tables."""

    reader: RowReader


def row_reader(settings: RowStateSettings, clients: Clients) -> DynamoRowReader:
    tables = {
        Phase.VALIDATION: settings.validation_table,
        Phase.TRANSFORMATION: settings.transformation_table,
        Phase.STORE: settings.store_table,
    }
    return DynamoRowReader(tables, settings.final_table, client=clients.dynamodb)


def build(settings: RowStateSettings, clients: Clients) -> RowStateDeps:
    return RowStateDeps(row_reader(settings, clients))
