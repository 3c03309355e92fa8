"""How the saga's functions are built: each from its settings and the SDK clients, in one place.

Each Lambda handler builds its own once per cold start (`Clients()` builds real clients lazily,
the phases' and the flag step's with a connection pool as large as their concurrency below);
the devtools world, the demo, the benchmarks and the tests build them with their own clients
(moto, or clients with faults injected) and drive the same entry points, each module's `handle`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

from runtime.shared.aws import Clients
from runtime.taxi_etl.api_key import ApiKeyCheck
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.settings import ApiSettings, AuthorizerSettings, FlagSettings, PhaseSettings, RowStateSettings, StoreSettings
from runtime.taxi_etl.store import DynamoFinalTable, DynamoRowReader, DynamoStatusTable, FinalTable, RowReader, StatusTable
from runtime.taxi_etl.workflow import StepFunctionsWorkflow

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider

# Rows a phase writes at once (threads, and connections in its client's pool). A row's chain is at
# most two calls (Store: its status row, then its item), so a 100-row batch waits for about
# ceil(100 / 32) x 2 = 8 DynamoDB round trips instead of 200. More would save a round trip or two
# per batch while making each batch's burst on the tables, and each cold start's connections, larger.
PHASE_ROW_CONCURRENCY = 32
# The flag step's updates at once. Its costliest input, a failed Store, is one read and then three
# status tables per row, the validation ones first: 1 + ceil(100 / 50) + ceil(200 / 50) = 7 round
# trips for 100 rows (32 would give 12). It runs only when rows fail, so its bursts are rare.
FLAG_UPDATE_CONCURRENCY = 50


@dataclass(frozen=True, slots=True)
class PhaseDeps:
    """Validate and Transform: their own status table."""

    status: StatusTable
    concurrency: int = PHASE_ROW_CONCURRENCY


@dataclass(frozen=True, slots=True)
class StoreDeps:
    status: StatusTable
    final: FinalTable
    concurrency: int = PHASE_ROW_CONCURRENCY


@dataclass(frozen=True, slots=True)
class FlagDeps:
    status: dict[Phase, StatusTable]
    final: FinalTable
    concurrency: int = FLAG_UPDATE_CONCURRENCY


@dataclass(frozen=True, slots=True)
class RowStateDeps:
    reader: RowReader


@dataclass(frozen=True, slots=True)
class ApiDeps:
    settings: ApiSettings
    workflow: StepFunctionsWorkflow
    rows: RowReader


@dataclass(frozen=True, slots=True)
class AuthorizerDeps:
    provider: SecretsProvider  # its cache lives as long as the execution environment
    check: ApiKeyCheck


def row_reader(settings: RowStateSettings, clients: Clients) -> DynamoRowReader:
    tables = {
        Phase.VALIDATION: settings.validation_table,
        Phase.TRANSFORMATION: settings.transformation_table,
        Phase.STORE: settings.store_table,
    }
    return DynamoRowReader(tables, settings.final_table, client=clients.dynamodb)


def key_check(provider: SecretsProvider, config: AuthorizerSettings) -> ApiKeyCheck:
    def fetch(force: bool) -> str:
        value = provider.get(config.secret_id, max_age=config.cache_seconds, force_fetch=force)
        return value if isinstance(value, str) else ""

    return ApiKeyCheck(fetch, refresh_floor_seconds=config.refresh_floor_seconds)


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
def build(
    settings: PhaseSettings | StoreSettings | FlagSettings | RowStateSettings | ApiSettings | AuthorizerSettings, clients: Clients
) -> PhaseDeps | StoreDeps | FlagDeps | RowStateDeps | ApiDeps | AuthorizerDeps:
    """The dependencies of the function whose settings these are."""
    if isinstance(settings, PhaseSettings):
        return PhaseDeps(DynamoStatusTable(settings.status_table, client=clients.dynamodb), concurrency=PHASE_ROW_CONCURRENCY)
    if isinstance(settings, StoreSettings):
        return StoreDeps(
            DynamoStatusTable(settings.status_table, client=clients.dynamodb),
            DynamoFinalTable(settings.final_table, client=clients.dynamodb),
            concurrency=PHASE_ROW_CONCURRENCY,
        )
    if isinstance(settings, FlagSettings):
        status: dict[Phase, StatusTable] = {
            Phase.VALIDATION: DynamoStatusTable(settings.validation_table, client=clients.dynamodb),
            Phase.TRANSFORMATION: DynamoStatusTable(settings.transformation_table, client=clients.dynamodb),
            Phase.STORE: DynamoStatusTable(settings.store_table, client=clients.dynamodb),
        }
        return FlagDeps(status, DynamoFinalTable(settings.final_table, client=clients.dynamodb), concurrency=FLAG_UPDATE_CONCURRENCY)
    if isinstance(settings, RowStateSettings):
        return RowStateDeps(row_reader(settings, clients))
    if isinstance(settings, ApiSettings):
        workflow = StepFunctionsWorkflow(
            settings.state_machine_arn, deduplicates=settings.deduplicates_starts, client=clients.stepfunctions
        )
        return ApiDeps(settings, workflow, row_reader(settings.rows, clients))
    # Only the authorizer reads the secret: the other handlers do not import Powertools' parameters.
    from aws_lambda_powertools.utilities.parameters import SecretsProvider

    provider = SecretsProvider(boto3_client=clients.secretsmanager)
    return AuthorizerDeps(provider, key_check(provider, settings))
