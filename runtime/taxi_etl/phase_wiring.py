"""Validate and Transform: their settings (read once from the environment, validated, frozen) and
their dependencies, built from the settings and the SDK clients.

One module per kind of function (this one, store_wiring, flag_wiring, row_state_wiring, api_wiring,
authorizer_wiring), so that a handler imports only what its own function is built from;
runtime/taxi_etl/wiring.py builds any of them from its settings. The environment names are the
contract's (runtime/taxi_etl/contract.py), which infra/taxi_etl/construct.py sets; an infra test
checks that every synthesized function carries exactly the variables its settings class reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.shared.aws import Clients
from runtime.shared.settings import require_str
from runtime.taxi_etl.contract import ENV_STATUS_TABLE
from runtime.taxi_etl.store import DynamoStatusTable, StatusTable

# Rows a phase (Validate, Transform, Store) writes at once (threads, and connections in its client's pool). A row's chain is at
# most two calls (Store: its status row, then its item), so a 100-row batch waits for about
# ceil(100 / 32) x 2 = 8 DynamoDB round trips instead of 200. More would save a round trip or two
# per batch while making each batch's burst on the tables, and each cold start's connections, larger.
PHASE_ROW_CONCURRENCY = 32


@dataclass(frozen=True, slots=True)
class PhaseSettings:
    """Validate and transform: their own status table only."""

    status_table: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> PhaseSettings:
        return cls(status_table=require_str(env, ENV_STATUS_TABLE))


@dataclass(frozen=True, slots=True)
class PhaseDeps:
    """Validate and Transform: their own status table."""

    status: StatusTable
    concurrency: int = PHASE_ROW_CONCURRENCY


def build(settings: PhaseSettings, clients: Clients) -> PhaseDeps:
    return PhaseDeps(DynamoStatusTable(settings.status_table, client=clients.dynamodb), concurrency=PHASE_ROW_CONCURRENCY)
