"""The taxi ETL saga's props: its settings, its alarm thresholds and the construct's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn

from onceflow.infra.common import (
    CommonProps,
    ConfigError,
    TableOptions,
    check_reserved_concurrency,
    require_positive,
    validate_pipeline_props,
)

STEP_FUNCTIONS_MAX_PAYLOAD_BYTES = 256 * 1024
VALIDATE_MAX_LINE_BYTES = 4096  # runtime.taxi_etl.trips.MAX_LINE_BYTES: longer lines would only be flagged
# The functions a reservation can name (TaxiEtlConfig.reserved_concurrency); the flag function is not one.
TAXI_ETL_FUNCTIONS: Final = ("api", "row_state", "authorizer", "validate", "transform", "store")
EXPRESS_MAX_EXECUTION_MINUTES = 5
# The bulk route's chunk cut (runtime.taxi_etl.chunks): enough rows to amortize a child's cost, few enough for one
# Lambda invocation to run the three phases on them well inside its timeout.
BULK_CHUNK_ROWS_RANGE: Final = (100, 10_000)
LAMBDA_MAX_TIMEOUT_SECONDS: Final = 900


@dataclass(frozen=True)
class ExecutionLimits:
    """How long an execution may run, how often AWS failing a task is retried, and how long the automatic
    redrive waits: what TaxiEtlConfig's fields of the same names give, or its workflow type's defaults."""

    execution_timeout_minutes: int
    transient_retry_attempts: int
    auto_redrive_wait_seconds: int


# Per workflow type, so choosing EXPRESS alone is valid: its executions last 5 minutes at most, and
# fewer retries of AWS's failures and a shorter wait keep a phase's backoff and its redrive within
# them (132 s of the 300, the rest for the invocations themselves; STANDARD's would take 616 s).
WORKFLOW_DEFAULTS: Final[Mapping[sfn.StateMachineType, ExecutionLimits]] = {
    sfn.StateMachineType.STANDARD: ExecutionLimits(execution_timeout_minutes=15, transient_retry_attempts=8, auto_redrive_wait_seconds=120),
    sfn.StateMachineType.EXPRESS: ExecutionLimits(
        execution_timeout_minutes=EXPRESS_MAX_EXECUTION_MINUTES, transient_retry_attempts=4, auto_redrive_wait_seconds=60
    ),
}


@dataclass(frozen=True)
class TaxiEtlConfig:
    """The taxi ETL saga's settings: its API, authorizer, state machine and phase functions.
    Every field is checked at synth (`validate`) with a message naming it.

    reserved_concurrency: per function ("api", "row_state", "authorizer", "validate",
        "transform", "store"); a function left out runs in the account's unreserved pool. A
        throttled phase is retried (transient_retry_attempts, with backoff), then its rows are
        flagged retryable and redriven once. The flag function takes none: it is the failure path, and a throttled flag step
        would leave rows neither stored nor flagged.
    snap_start: Lambda SnapStart for the four functions behind the HTTP API: the API, row-state, loads API and
        authorizer functions (off by default). On, each gets SnapStart on published versions, CDK
        publishes a version whenever its code or configuration changes, and the API integrations
        and the authorizer invoke the alias `live` on it (TaxiEtlSaga.api_alias, row_state_alias,
        loads_api_alias, authorizer_alias); the after-restore hooks (runtime/shared/snapstart.py) reseed the random
        sources, drop the cached clients and make the authorizer read the API key again. Python's
        SnapStart bills each version's cached snapshot while it exists and every restore: see the
        SnapStart section of docs/tracing.md before turning it on. Not combinable with provisioned concurrency.
    execution_timeout_minutes, transient_retry_attempts, auto_redrive_wait_seconds: None (the
        default) takes the workflow type's (WORKFLOW_DEFAULTS): 15 minutes, 8 attempts and 120 s
        for STANDARD, 5 minutes, 4 attempts and 60 s for EXPRESS. `execution_limits` has the values in effect.

    The bulk route (a file under incoming/ in the ingest bucket -> the bulk state machine, always STANDARD
    whatever workflow_type says: its execution names make a load start once, and its Distributed Map needs it):
    bulk_chunk_rows: lines per chunk, the plan's cut (100..10000; default 2,000). One chunk is one Lambda
        invocation running the three phases on its rows.
    bulk_max_concurrency: chunks run at once (at least 1; default 100). Never 0: AWS reads 0 as "no limit"
        (10,000 children), and the embedded cloud would run one thread per chunk.
    bulk_tolerated_failure_percentage: the share of chunks that may fail (after their retries) with the load
        still going on to its report (0..100; default 0: one failed chunk fails the load, whose report says
        which chunks are missing; a re-run does only those).
    bulk_task_timeout_seconds: the plan, chunk and report functions' timeout (phase_timeout_seconds..900;
        default 300): the plan streams the whole file once, a chunk runs the three phases on its rows.
    ingest_retention_days: how long files under incoming/ and every noncurrent object version are kept
        (default 30); a load started later than that finds its version gone.
    load_report_retention_days: how long a load's manifest, chunk summaries and report are kept under
        loads/ (default 90, at least ingest_retention_days: a file still there keeps its report).
    """

    # STANDARD: execution names deduplicate starts (the API's idempotency rests on it) and the
    # history is kept 90 days. EXPRESS is cheaper per row but runs a repeated start again; see
    # docs/taxi-etl.md before choosing it.
    workflow_type: sfn.StateMachineType = sfn.StateMachineType.STANDARD
    batch_max_lines: int = 100
    # A batch travels as the execution input, which Step Functions caps at 256 KiB; the
    # phases' outputs are a little larger than their input, so a batch stays well below.
    batch_max_bytes: int = 64 * 1024
    max_line_bytes: int = VALIDATE_MAX_LINE_BYTES
    authorizer_cache_seconds: int = 300  # API Gateway caches an allow/deny per key this long
    secret_cache_seconds: int = 300  # the authorizer re-reads the key from Secrets Manager after this
    secret_refresh_floor_seconds: int = 10  # a refused key re-reads the secret at most this often
    api_rate_limit: int = 50
    api_burst_limit: int = 100
    # AWS failing a task (contract.ERROR_TRANSIENT: a closed connection, a timeout, a throttle, a 5xx from
    # DynamoDB; and Lambda's own service errors): no verdict on the rows, so retried longer than a crash.
    transient_retry_attempts: int | None = None  # None: the workflow type's (8 for STANDARD, 4 for EXPRESS)
    transient_retry_max_delay_seconds: int = 60
    task_retry_attempts: int = 2  # any other task failure (a crash, a bug, a timeout): every phase is idempotent
    retry_interval_seconds: int = 2
    retry_max_delay_seconds: int = 60
    # After those retries the rows are flagged `retryable:<error>`, and this long later the phase runs
    # once more on them in the same execution (the automatic redrive); then a failure is final and alarmed.
    auto_redrive_wait_seconds: int | None = None  # None: the workflow type's (120 s for STANDARD, 60 s for EXPRESS)
    execution_timeout_minutes: int | None = None  # None: the workflow type's (15 for STANDARD, 5 for EXPRESS, its limit)
    phase_timeout_seconds: int = 60
    phase_memory_mb: int = 256
    api_timeout_seconds: int = 10
    # What the state machine sends to CloudWatch Logs. ERROR without execution data (the default,
    # prod's) logs only failures, with no row content; ALL with data (dev's) logs every state's
    # input and output, which is what debugging a phase needs and adds $2.70 (batch route) to $7.30
    # (one row per request) per million rows (`make bench` prices both).
    execution_log_level: sfn.LogLevel = sfn.LogLevel.ERROR
    execution_log_data: bool = False
    reserved_concurrency: Mapping[str, int] = field(default_factory=dict)
    snap_start: bool = False
    bulk_chunk_rows: int = 2_000
    bulk_max_concurrency: int = 100
    bulk_tolerated_failure_percentage: float = 0.0
    bulk_task_timeout_seconds: int = 300
    ingest_retention_days: int = 30
    load_report_retention_days: int = 90

    @property
    def execution_limits(self) -> ExecutionLimits:
        """The fields set, the workflow type's defaults for those left None."""
        defaults = WORKFLOW_DEFAULTS[self.workflow_type]
        return ExecutionLimits(
            execution_timeout_minutes=_given_or(self.execution_timeout_minutes, defaults.execution_timeout_minutes),
            transient_retry_attempts=_given_or(self.transient_retry_attempts, defaults.transient_retry_attempts),
            auto_redrive_wait_seconds=_given_or(self.auto_redrive_wait_seconds, defaults.auto_redrive_wait_seconds),
        )

    def validate(self) -> None:
        if not isinstance(self.snap_start, bool):
            raise ConfigError("taxi_etl.snap_start must be True or False")
        if self.workflow_type not in WORKFLOW_DEFAULTS:
            raise ConfigError("taxi_etl.workflow_type must be STANDARD or EXPRESS")
        limits = self.execution_limits
        if not 1 <= self.batch_max_lines <= 1000:
            raise ConfigError("taxi_etl.batch_max_lines must be 1..1000")
        if not 256 <= self.max_line_bytes <= min(self.batch_max_bytes, VALIDATE_MAX_LINE_BYTES):
            raise ConfigError("taxi_etl.max_line_bytes must be 256..batch_max_bytes and at most 4096 (what Validate accepts)")
        if self.batch_max_bytes > STEP_FUNCTIONS_MAX_PAYLOAD_BYTES // 3:
            # validate's output holds the batch plus its verdicts; transform's holds it again.
            raise ConfigError("taxi_etl.batch_max_bytes must be at most a third of Step Functions' 256 KiB payload limit")
        if not 0 <= self.authorizer_cache_seconds <= 3600:
            raise ConfigError("taxi_etl.authorizer_cache_seconds must be 0..3600 (API Gateway's limit)")
        if not 1 <= self.secret_refresh_floor_seconds <= self.secret_cache_seconds <= 3600:
            raise ConfigError("taxi_etl secret caching must satisfy 1 <= refresh floor <= cache seconds <= 3600")
        if not 1 <= self.api_rate_limit <= self.api_burst_limit:
            raise ConfigError("taxi_etl api rate limit must be positive and at most the burst limit")
        if not 0 <= limits.transient_retry_attempts <= 10 or not 0 <= self.task_retry_attempts <= 5:
            raise ConfigError("taxi_etl retries must be bounded: transient 0..10, task 0..5")
        if not 1 <= self.retry_interval_seconds <= self.retry_max_delay_seconds <= 3600:
            raise ConfigError("taxi_etl retry interval must be 1..retry_max_delay_seconds (at most 3600)")
        if not self.retry_max_delay_seconds <= self.transient_retry_max_delay_seconds <= 3600:
            raise ConfigError("taxi_etl.transient_retry_max_delay_seconds must be retry_max_delay_seconds..3600")
        if limits.transient_retry_attempts < self.task_retry_attempts:
            raise ConfigError("taxi_etl.transient_retry_attempts must be at least task_retry_attempts: AWS failing is retried longer")
        if not 1 <= limits.auto_redrive_wait_seconds <= 3600:
            raise ConfigError("taxi_etl.auto_redrive_wait_seconds must be 1..3600")
        for timeout in (self.phase_timeout_seconds, self.api_timeout_seconds):
            if not 3 <= timeout <= 900:
                raise ConfigError("taxi_etl function timeouts must be 3..900 s")
        if self.api_timeout_seconds > 29:
            raise ConfigError("taxi_etl.api_timeout_seconds must be at most 29 (the HTTP API integration limit)")
        if self.workflow_type == sfn.StateMachineType.EXPRESS and limits.execution_timeout_minutes > EXPRESS_MAX_EXECUTION_MINUTES:
            raise ConfigError(f"taxi_etl.execution_timeout_minutes must be at most {EXPRESS_MAX_EXECUTION_MINUTES} for EXPRESS workflows")
        if not 1 <= limits.execution_timeout_minutes <= 24 * 60:
            raise ConfigError("taxi_etl.execution_timeout_minutes must be 1..1440")
        if not 128 <= self.phase_memory_mb <= 10_240:
            raise ConfigError("taxi_etl.phase_memory_mb must be 128..10240")
        if not isinstance(self.execution_log_level, sfn.LogLevel):
            raise ConfigError("taxi_etl.execution_log_level must be an aws_stepfunctions.LogLevel (ALL, ERROR, FATAL or OFF)")
        if self.execution_log_level == sfn.LogLevel.OFF and self.execution_log_data:
            raise ConfigError("taxi_etl.execution_log_data needs an execution_log_level other than OFF")
        if self.workflow_type == sfn.StateMachineType.EXPRESS and self.execution_log_level == sfn.LogLevel.OFF:
            raise ConfigError("taxi_etl.execution_log_level must not be OFF for EXPRESS workflows: their logs are their only history")
        if self.redrive_budget_seconds > limits.execution_timeout_minutes * 60:
            raise ConfigError(
                f"taxi_etl: a phase's retries, the wait and its redrive's retries take up to {self.redrive_budget_seconds} s of backoff,"
                f" more than execution_timeout_minutes allows ({limits.execution_timeout_minutes * 60} s): the execution would time out"
                " with its rows neither stored nor flagged"
            )
        unknown = sorted(set(self.reserved_concurrency) - set(TAXI_ETL_FUNCTIONS))
        if unknown:
            raise ConfigError(
                f"taxi_etl.reserved_concurrency names no function that may take one {unknown}; they are {', '.join(TAXI_ETL_FUNCTIONS)}"
                " (the flag function is the failure path and is never throttled by a reservation)"
            )
        for function, reserved in self.reserved_concurrency.items():
            check_reserved_concurrency(f"taxi_etl.reserved_concurrency[{function!r}]", reserved)
        self._validate_bulk()

    def _validate_bulk(self) -> None:
        low, high = BULK_CHUNK_ROWS_RANGE
        if not _is_int(self.bulk_chunk_rows) or not low <= self.bulk_chunk_rows <= high:
            raise ConfigError(f"taxi_etl.bulk_chunk_rows must be an integer {low}..{high}")
        if not _is_int(self.bulk_max_concurrency) or self.bulk_max_concurrency < 1:
            raise ConfigError(
                "taxi_etl.bulk_max_concurrency must be an integer of at least 1 (0 would mean no limit: 10,000 chunks at once on AWS)"
            )
        tolerated = self.bulk_tolerated_failure_percentage
        if isinstance(tolerated, bool) or not isinstance(tolerated, int | float) or not 0 <= tolerated <= 100:
            raise ConfigError("taxi_etl.bulk_tolerated_failure_percentage must be a number 0..100")
        if not _is_int(self.bulk_task_timeout_seconds) or not (
            self.phase_timeout_seconds <= self.bulk_task_timeout_seconds <= LAMBDA_MAX_TIMEOUT_SECONDS
        ):
            raise ConfigError(
                f"taxi_etl.bulk_task_timeout_seconds must be phase_timeout_seconds..{LAMBDA_MAX_TIMEOUT_SECONDS}:"
                " a chunk holds more rows than a batch"
            )
        if not _is_int(self.ingest_retention_days) or self.ingest_retention_days < 1:
            raise ConfigError("taxi_etl.ingest_retention_days must be an integer of at least 1")
        if not _is_int(self.load_report_retention_days) or self.load_report_retention_days < self.ingest_retention_days:
            raise ConfigError("taxi_etl.load_report_retention_days must be an integer of at least ingest_retention_days")

    @property
    def redrive_budget_seconds(self) -> int:
        """The most one phase can wait: both retriers' backoff (full jitter only shortens it) before and after the
        automatic redrive, and the wait between them. The invocations' own time comes on top."""
        limits = self.execution_limits
        return (
            2
            * (
                self._backoff(limits.transient_retry_attempts, self.transient_retry_max_delay_seconds)
                + self._backoff(self.task_retry_attempts, self.retry_max_delay_seconds)
            )
            + limits.auto_redrive_wait_seconds
        )

    def _backoff(self, attempts: int, max_delay: int) -> int:
        return sum(min(self.retry_interval_seconds * 2**attempt, max_delay) for attempt in range(attempts))


def _given_or(value: int | None, default: int) -> int:
    return default if value is None else value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class TaxiEtlAlarms:
    """When the taxi saga pages someone. Counts are per 5-minute period."""

    # Flagged executions end in a Fail state, so this counts rejected rows' executions too.
    failed_executions_per_5min: int = 20
    flagged_validation_per_5min: int = 20  # bad input: the clients' data
    flagged_transformation_per_5min: int = 5  # valid rows that cannot be converted
    flagged_store_per_5min: int = 1  # the store failed after its retries: ours to fix
    authorizer_denials_per_5min: int = 50
    api_4xx_per_5min: int = 100
    api_5xx_per_5min: int = 1
    execution_p99_ms: int = 120_000  # a clean run takes seconds; retries with backoff take minutes
    # Rows AWS kept failing through the retries and the one automatic redrive: an outage, ours to follow up
    # (`ops.taxi_redrive --detail 'retryable:*'` once it is over).
    still_retryable_rows_per_5min: int = 1
    # A bulk load that failed or timed out: its caller sees a FAILED load (a row's verdict is in the report, not a failure).
    failed_loads_per_5min: int = 1

    def validate(self) -> None:
        require_positive("monitoring.taxi_etl", self)


@dataclass(frozen=True)
class TaxiEtlSagaProps:
    """Inputs of TaxiEtlSaga; every one has a production-safe default.

    settings: workflow type, batch limits, retries, authorizer caching, throttling, logging, each function,
        and SnapStart for the HTTP-facing functions (settings.snap_start, off by default).
    common: removal policy (data retained by default), log retention and level, Powertools layer.
    tables: billing mode (on-demand by default) and the tables' own removal policy (the status
        tables, and the trips table when the construct creates it).
    api_key_secret: an existing Secrets Manager secret whose SecretString is the API key
        clients send in the Authorization header. By default the construct creates one with a
        generated 48-character key.
    trips_table: an existing table for the stored trips (the seed's nycYellowTaxis), keyed by
        a string partition key named StoreRequestId with no sort key. By default the construct
        creates one (encrypted, point-in-time recovery, billed and removed as `tables` says).
    acknowledge_findings: True (the default) adds this construct's cdk-nag acknowledgements, each
        for one of its resources with the reason it holds there, so a stack that adds the
        AwsSolutions and Serverless packs needs no call of its own. False leaves them to the
        caller, who may add this construct's set with acknowledge_taxi_etl(construct) or write its own.
    """

    settings: TaxiEtlConfig = field(default_factory=TaxiEtlConfig)
    common: CommonProps = field(default_factory=CommonProps)
    tables: TableOptions = field(default_factory=TableOptions)
    api_key_secret: secretsmanager.ISecret | None = None
    trips_table: dynamodb.ITable | None = None
    acknowledge_findings: bool = True

    def validate(self) -> None:
        validate_pipeline_props("TaxiEtlSagaProps", self.settings, TaxiEtlConfig, self.common, self.tables)
