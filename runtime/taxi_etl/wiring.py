"""How the saga's functions are built: each from its settings and the SDK clients.

Each kind of function has its settings and dependencies in a module of its own (phase_wiring:
Validate and Transform; store_wiring; flag_wiring; row_state_wiring; api_wiring; authorizer_wiring; bulk_wiring,
the bulk route's plan, report, loads API and load starter; bulk_chunk_wiring, its chunk), and
each Lambda handler imports only its own, so that a cold start loads nothing another function is
built from. Each handler builds its dependencies once per cold start (`Clients()` builds real
clients lazily, the phases' and the flag step's with a connection pool as large as their
concurrency); the devtools world, the demo, the benchmarks and the tests build any function's
here, from its settings, with their own clients (moto, or clients with faults injected), and
drive the same entry points, each module's `handle`.
"""

from __future__ import annotations

from typing import overload

from runtime.shared.aws import Clients
from runtime.taxi_etl import (
    api_wiring,
    authorizer_wiring,
    bulk_chunk_wiring,
    bulk_wiring,
    flag_wiring,
    phase_wiring,
    row_state_wiring,
    store_wiring,
)
from runtime.taxi_etl.api_wiring import ApiDeps, ApiSettings
from runtime.taxi_etl.authorizer_wiring import AuthorizerDeps, AuthorizerSettings
from runtime.taxi_etl.bulk_chunk_wiring import BulkChunkDeps, BulkChunkSettings
from runtime.taxi_etl.bulk_wiring import (
    BulkPlanDeps,
    BulkPlanSettings,
    BulkReportDeps,
    BulkReportSettings,
    BulkSettings,
    LoadsDeps,
    LoadsSettings,
)
from runtime.taxi_etl.flag_wiring import FlagDeps, FlagSettings
from runtime.taxi_etl.phase_wiring import PhaseDeps, PhaseSettings
from runtime.taxi_etl.row_state_wiring import RowStateDeps, RowStateSettings
from runtime.taxi_etl.store_wiring import StoreDeps, StoreSettings

# Any function's settings, and any function's dependencies.
FunctionSettings = (
    PhaseSettings | StoreSettings | FlagSettings | RowStateSettings | ApiSettings | AuthorizerSettings | BulkSettings | BulkChunkSettings
)
FunctionDeps = (
    PhaseDeps | StoreDeps | FlagDeps | RowStateDeps | ApiDeps | AuthorizerDeps | BulkPlanDeps | BulkChunkDeps | BulkReportDeps | LoadsDeps
)


@overload
def build(settings: PhaseSettings, clients: Clients) -> PhaseDeps: ...
@overload
def build(settings: StoreSettings, clients: Clients) -> StoreDeps: ...
@overload
def build(settings: FlagSettings, clients: Clients) -> FlagDeps: ...
@overload
def build(settings: RowStateSettings, clients: Clients) -> RowStateDeps: ...
@overload
def build(settings: ApiSettings, clients: Clients) -> ApiDeps: ...
@overload
def build(settings: AuthorizerSettings, clients: Clients) -> AuthorizerDeps: ...
@overload
def build(settings: BulkPlanSettings, clients: Clients) -> BulkPlanDeps: ...
@overload
def build(settings: BulkChunkSettings, clients: Clients) -> BulkChunkDeps: ...
@overload
def build(settings: BulkReportSettings, clients: Clients) -> BulkReportDeps: ...
@overload
def build(settings: LoadsSettings, clients: Clients) -> LoadsDeps: ...
def build(settings: FunctionSettings, clients: Clients) -> FunctionDeps:
    """The dependencies of the function whose settings these are."""
    if isinstance(settings, PhaseSettings):
        return phase_wiring.build(settings, clients)
    if isinstance(settings, StoreSettings):
        return store_wiring.build(settings, clients)
    if isinstance(settings, FlagSettings):
        return flag_wiring.build(settings, clients)
    if isinstance(settings, RowStateSettings):
        return row_state_wiring.build(settings, clients)
    if isinstance(settings, ApiSettings):
        return api_wiring.build(settings, clients)
    if isinstance(settings, BulkChunkSettings):
        return bulk_chunk_wiring.build(settings, clients)
    if isinstance(settings, (BulkPlanSettings, BulkReportSettings, LoadsSettings)):
        return bulk_wiring.build(settings, clients)
    return authorizer_wiring.build(settings, clients)
