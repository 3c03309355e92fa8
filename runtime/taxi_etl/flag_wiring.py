"""The flag step: its settings (read once from the environment, validated, frozen) and its
dependencies, built from the settings and the SDK clients (see runtime/taxi_etl/phase_wiring.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.shared.aws import Clients
from runtime.shared.settings import require_str
from runtime.taxi_etl.contract import ENV_FINAL_TABLE, ENV_STORE_STATUS_TABLE, ENV_TRANSFORMATION_STATUS_TABLE, ENV_VALIDATION_STATUS_TABLE
from runtime.taxi_etl.final_table import DynamoFinalTable, FinalTable
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.store import DynamoStatusTable, StatusTable

# The flag step's updates at once. Its costliest input, a failed Store, is one read and then three
# status tables per row, the validation ones first: 1 + ceil(100 / 50) + ceil(200 / 50) = 7 round
# trips for 100 rows (32 would give 12). It runs only when rows fail, so its bursts are rare.
FLAG_UPDATE_CONCURRENCY = 50


@dataclass(frozen=True, slots=True)
class FlagSettings:
    """The flag step: the three status tables and the trips table."""

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
class FlagDeps:
    """The flag step: each phase's status table, the trips table, and how many updates it makes at once."""

    status: dict[Phase, StatusTable]
    final: FinalTable
    concurrency: int = FLAG_UPDATE_CONCURRENCY


def build(settings: FlagSettings, clients: Clients) -> FlagDeps:
    status: dict[Phase, StatusTable] = {
        Phase.VALIDATION: DynamoStatusTable(settings.validation_table, client=clients.dynamodb),
        Phase.TRANSFORMATION: DynamoStatusTable(settings.transformation_table, client=clients.dynamodb),
        Phase.STORE: DynamoStatusTable(settings.store_table, client=clients.dynamodb),
    }
    return FlagDeps(status, DynamoFinalTable(settings.final_table, client=clients.dynamodb), concurrency=FLAG_UPDATE_CONCURRENCY)
