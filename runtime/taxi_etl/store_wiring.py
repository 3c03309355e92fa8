"""The Store phase: its settings (read once from the environment, validated, frozen) and its
dependencies, built from the settings and the SDK clients (see runtime/taxi_etl/phase_wiring.py,
whose PHASE_ROW_CONCURRENCY it writes at)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.shared.aws import Clients
from runtime.shared.settings import require_str
from runtime.taxi_etl import phase_wiring
from runtime.taxi_etl.contract import ENV_FINAL_TABLE, ENV_STATUS_TABLE
from runtime.taxi_etl.final_table import DynamoFinalTable, FinalTable
from runtime.taxi_etl.store import DynamoStatusTable, StatusTable


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """Store: its own status table and the trips table."""

    status_table: str
    final_table: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StoreSettings:
        return cls(status_table=require_str(env, ENV_STATUS_TABLE), final_table=require_str(env, ENV_FINAL_TABLE))


@dataclass(frozen=True, slots=True)
class StoreDeps:
    """Store: its status table, the trips table, and how many rows it writes at once."""

    status: StatusTable
    final: FinalTable
    concurrency: int = phase_wiring.PHASE_ROW_CONCURRENCY


def build(settings: StoreSettings, clients: Clients) -> StoreDeps:
    return StoreDeps(
        DynamoStatusTable(settings.status_table, client=clients.dynamodb),
        DynamoFinalTable(settings.final_table, client=clients.dynamodb),
        concurrency=phase_wiring.PHASE_ROW_CONCURRENCY,
    )
