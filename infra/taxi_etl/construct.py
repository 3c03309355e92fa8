"""TaxiEtlSaga: NYC yellow-taxi rows through validate -> transform -> store, flagged per phase.

HTTP API (Lambda authorizer, key in Secrets Manager) -> API function -> Step Functions
(one execution per request, named by its StoreRequestId) -> Validate, Transform and Store
functions, each writing its own status table before it acts -> the final table. A phase's
rejected rows, or the phase's caught error, go to that phase's flag step, which sets the
reason code in every status table the transaction touched.

Usable from any stack with no arguments: `TaxiEtlSaga(stack, "Taxis")`. Pass an existing secret
holding the API key and an existing trips table, or let the construct create them. Everything it
creates is exposed as a typed attribute.
"""

from __future__ import annotations

from aws_cdk import Arn, ArnFormat, Duration, FeatureFlags, Stack
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3n
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from aws_cdk.aws_apigatewayv2_authorizers import HttpLambdaAuthorizer, HttpLambdaResponseType
from aws_cdk.aws_apigatewayv2_integrations import HttpLambdaIntegration
from constructs import Construct

from onceflow.infra.common import CommonProps
from onceflow.infra.lambda_factory import FunctionSpec, create_function
from onceflow.infra.resources import durable_table, encrypted_queue, throttled_http_api
from onceflow.infra.taxi_etl.compliance import acknowledge_taxi_etl
from onceflow.infra.taxi_etl.props import TaxiEtlConfig, TaxiEtlSagaProps
from onceflow.runtime.taxi_etl import contract

# Lambda's own transient failures: always worth retrying with backoff.
LAMBDA_SERVICE_ERRORS = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
    "Lambda.ClientExecutionTimeoutException",
]
AUTHORIZER_TIMEOUT_SECONDS = 10  # API Gateway waits at most 10 s for a Lambda authorizer
# The task's input is not rows: no retry can fix it, so it goes straight to the flag step.
NON_RETRYABLE_ERRORS = [contract.ERROR_PHASE_INPUT]
# AWS failing the task, not the rows: the handlers' own (runtime/taxi_etl/transient.py names a closed
# connection, a timeout, a throttle, a 5xx, unprocessed keys so) and Lambda's. Retried longer than a
# crash or a bug, then the rows are flagged retryable and the phase is redriven once.
TRANSIENT_ERRORS = [contract.ERROR_TRANSIENT, *LAMBDA_SERVICE_ERRORS]
# Everything else a task can fail with: a crash, a bug, a timeout (a phase that runs out of time on a
# batch may do so again). States.TaskFailed matches every error but States.Timeout, so this retrier
# comes after the two above: Step Functions takes the first retrier whose ErrorEquals matches.
OTHER_TASK_ERRORS = ["States.TaskFailed", "States.Timeout"]
# The plan's own refusal of a file (missing version, not CSV text, no trip layout): no retry can fix it.
BULK_PLAN_NON_RETRYABLE_ERRORS = [contract.ERROR_LOAD_INPUT]
# The Distributed Map's label (its map runs are named <state machine>/<label>:<id>).
BULK_MAP_LABEL = "Chunks"
# A load of a month's file runs for minutes; a bound keeps a stuck one from running a year (Standard's limit).
BULK_EXECUTION_TIMEOUT = Duration.hours(24)
# An ObjectCreated event the starter keeps failing on (the state machine throttled or down) is retried this
# often, then kept in the dead-letter queue for 14 days; POST /loads starts the same load by hand.
LOAD_STARTER_MAX_RECEIVES = 5
LOAD_STARTER_BATCH_SIZE = 10
# The ingest bucket's server access logs: kept 90 days, like the event log bucket's.
ACCESS_LOG_RETENTION = Duration.days(90)
ACCESS_LOGS_BY_BUCKET_POLICY = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"
# Each phase's name in TaxiEtlConfig.reserved_concurrency.
PHASE_FUNCTIONS = {contract.PHASE_VALIDATION: "validate", contract.PHASE_TRANSFORMATION: "transform", contract.PHASE_STORE: "store"}


class TaxiEtlSaga(Construct):
    """NYC yellow-taxi rows through validate -> transform -> store, each failure flagged by its phase.

    Creates the three status tables, the trips table (or takes yours), the API key secret (or
    takes yours), the phase, flag, API, row-state and authorizer functions, the Step Functions
    state machine with its encrypted execution logs, and the HTTP API behind the authorizer; and the
    bulk route: the ingest bucket, its ObjectCreated queue and the load starter, the bulk plan, chunk
    and report functions, the bulk state machine, and POST /loads and GET /loads/{LoadId}.
    """

    settings: TaxiEtlConfig
    validation_status_table: dynamodb.Table
    transformation_status_table: dynamodb.Table
    store_status_table: dynamodb.Table
    final_table: dynamodb.ITable
    api_key_secret: secretsmanager.ISecret
    validate_function: lambda_.Function
    transform_function: lambda_.Function
    store_function: lambda_.Function
    flag_function: lambda_.Function
    api_function: lambda_.Function
    row_state_function: lambda_.Function
    authorizer_function: lambda_.Function
    # The aliases the API integrations and the authorizer invoke when settings.snap_start is on; None when it is off.
    api_alias: lambda_.Alias | None
    row_state_alias: lambda_.Alias | None
    authorizer_alias: lambda_.Alias | None
    loads_api_alias: lambda_.Alias | None
    state_machine: sfn.StateMachine
    state_machine_logs: logs.LogGroup
    execution_log_level: sfn.LogLevel
    state_machine_logs_key: kms.Key
    http_api: apigw.HttpApi
    api_stage: apigw.HttpStage
    api_access_logs: logs.LogGroup
    authorizer: HttpLambdaAuthorizer
    # The bulk route: a file under incoming/ in the ingest bucket -> the bulk state machine (plan, a Distributed
    # Map of chunks, report), started by POST /loads or by the file's ObjectCreated event through the starter queue.
    ingest_bucket: s3.Bucket
    ingest_access_log_bucket: s3.Bucket
    load_starter_queue: sqs.Queue
    load_starter_dead_letter_queue: sqs.Queue
    bulk_plan_function: lambda_.Function
    bulk_chunk_function: lambda_.Function
    bulk_report_function: lambda_.Function
    loads_api_function: lambda_.Function
    load_starter_function: lambda_.Function
    bulk_state_machine: sfn.StateMachine
    bulk_state_machine_logs: logs.LogGroup

    def __init__(self, scope: Construct, construct_id: str, props: TaxiEtlSagaProps | None = None) -> None:
        props = props if props is not None else TaxiEtlSagaProps()
        if not isinstance(props, TaxiEtlSagaProps):
            raise TypeError("TaxiEtlSaga needs TaxiEtlSagaProps")
        props.validate()
        super().__init__(scope, construct_id)
        self.settings = settings = props.settings
        common, tables = props.common, props.tables

        key = dynamodb.Attribute(name=contract.KEY_STORE_REQUEST_ID, type=dynamodb.AttributeType.STRING)
        self.validation_status_table = durable_table(self, "ValidationStatusTable", tables, common, key)
        self.transformation_status_table = durable_table(self, "TransformationStatusTable", tables, common, key)
        self.store_status_table = durable_table(self, "StoreStatusTable", tables, common, key)
        self.final_table = props.trips_table or durable_table(self, "TripsTable", tables, common, key)  # the seed's nycYellowTaxis
        self.api_key_secret = props.api_key_secret or secretsmanager.Secret(
            self,
            "ApiKeySecret",
            description="onceflow taxi ETL API key: clients send it as the Authorization header",
            generate_secret_string=secretsmanager.SecretStringGenerator(exclude_punctuation=True, password_length=48),
            removal_policy=common.removal_policy,
        )

        self._add_phase_functions(common, settings)
        self._add_state_machine(common, settings)
        self._add_api(common, settings)
        self._add_bulk_route(common, settings)
        if props.acknowledge_findings:
            acknowledge_taxi_etl(self)

    @property
    def status_tables(self) -> dict[str, dynamodb.Table]:
        """Phase name -> its status table, in phase order."""
        return {
            contract.PHASE_VALIDATION: self.validation_status_table,
            contract.PHASE_TRANSFORMATION: self.transformation_status_table,
            contract.PHASE_STORE: self.store_status_table,
        }

    # --- functions ------------------------------------------------------------------------------

    def _phase_spec(
        self,
        settings: TaxiEtlConfig,
        handler: str,
        service: str,
        description: str,
        environment: dict[str, str],
        reserved_concurrency: int | None = None,
    ) -> FunctionSpec:
        return FunctionSpec(
            handler=handler,
            service=service,
            description=description,
            memory_mb=settings.phase_memory_mb,
            timeout_seconds=settings.phase_timeout_seconds,
            reserved_concurrency=reserved_concurrency,
            environment=environment,
        )

    def _add_phase_functions(self, common: CommonProps, settings: TaxiEtlConfig) -> None:
        descriptions = {
            contract.PHASE_VALIDATION: "Taxi saga Validate: checks each row against the TLC yellow-trip data dictionary",
            contract.PHASE_TRANSFORMATION: "Taxi saga Transform: names for codes, UTC timestamps, tab-separated",
            contract.PHASE_STORE: "Taxi saga Store: writes each row's typed item once to the trips table",
        }
        functions: dict[str, lambda_.Function] = {}
        for phase, table in self.status_tables.items():
            environment = {contract.ENV_STATUS_TABLE: table.table_name}
            if phase == contract.PHASE_STORE:
                environment[contract.ENV_FINAL_TABLE] = self.final_table.table_name
            spec = self._phase_spec(
                settings,
                contract.PHASE_HANDLERS[phase],
                contract.PHASE_SERVICES[phase],
                descriptions[phase],
                environment,
                settings.reserved_concurrency.get(PHASE_FUNCTIONS[phase]),
            )
            functions[phase] = create_function(self, f"{phase}Function", spec, common).function
            # The status row: a conditional update (it never clears a flag, keeps a redrive's generation).
            table.grant(functions[phase], "dynamodb:UpdateItem")
        self.validate_function = functions[contract.PHASE_VALIDATION]
        self.transform_function = functions[contract.PHASE_TRANSFORMATION]
        self.store_function = functions[contract.PHASE_STORE]
        # The typed item: a conditional put, so a retry is a no-op.
        self.final_table.grant(self.store_function, "dynamodb:PutItem")

        flag_spec = self._phase_spec(
            settings,
            contract.HANDLER_FLAG,
            contract.SERVICE_FLAG,
            "Taxi saga flag steps: sets a failed row's reason in every status table its transaction touched",
            {
                contract.ENV_VALIDATION_STATUS_TABLE: self.validation_status_table.table_name,
                contract.ENV_TRANSFORMATION_STATUS_TABLE: self.transformation_status_table.table_name,
                contract.ENV_STORE_STATUS_TABLE: self.store_status_table.table_name,
                contract.ENV_FINAL_TABLE: self.final_table.table_name,
            },
        )
        self.flag_function = create_function(self, "FlagFunction", flag_spec, common).function
        for table in self.status_tables.values():
            table.grant(self.flag_function, "dynamodb:UpdateItem")
        # Reads only: a row already stored is complete and is not flagged.
        self.final_table.grant(self.flag_function, "dynamodb:BatchGetItem")

    # --- the state machine ----------------------------------------------------------------------

    def _invoke(
        self,
        state_id: str,
        function: lambda_.IFunction,
        settings: TaxiEtlConfig,
        flag_input: sfn.TaskInput | None = None,
        result_path: str | None = None,
    ) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(
            self,
            state_id,
            lambda_function=function,
            payload=flag_input,
            # A flag step keeps the state and adds its outcome at $.flag, for the Choice and Fail after it.
            result_path=result_path or ("$.flag" if flag_input else None),
            payload_response_only=True,
            retry_on_service_exceptions=False,  # the retries below say exactly what is retried
        )
        return self._retried(task, settings, NON_RETRYABLE_ERRORS)

    @staticmethod
    def _retried(task: tasks.LambdaInvoke, settings: TaxiEtlConfig, non_retryable: list[str]) -> tasks.LambdaInvoke:
        """The saga's retriers on a task: `non_retryable` never, AWS's failures long, anything else briefly."""
        task.add_retry(errors=non_retryable, max_attempts=0)
        # AWS failing the task: longer, with a later cap, since only time fixes it.
        task.add_retry(
            errors=TRANSIENT_ERRORS,
            interval=Duration.seconds(settings.retry_interval_seconds),
            max_attempts=settings.execution_limits.transient_retry_attempts,
            backoff_rate=2,
            max_delay=Duration.seconds(settings.transient_retry_max_delay_seconds),
            jitter_strategy=sfn.JitterType.FULL,
        )
        # A crash or a timeout inside a phase: every phase is idempotent, so running it again is safe.
        task.add_retry(
            errors=OTHER_TASK_ERRORS,
            interval=Duration.seconds(settings.retry_interval_seconds),
            max_attempts=settings.task_retry_attempts,
            backoff_rate=2,
            max_delay=Duration.seconds(settings.retry_max_delay_seconds),
            jitter_strategy=sfn.JitterType.FULL,
        )
        return task

    def _flag_task(self, state_id: str, phase: str, settings: TaxiEtlConfig, mode: str | None = None) -> tasks.LambdaInvoke:
        """The flag function on the whole state; `mode` (contract.FLAG_MODE_*) asks for a step of the automatic redrive."""
        payload: dict[str, object] = {"phase": phase.lower(), "state": sfn.JsonPath.entire_payload}
        if mode is not None:
            payload[contract.FLAG_MODE_KEY] = mode
        result_path = "$.cleared" if mode == contract.FLAG_MODE_CLEAR else None
        return self._invoke(state_id, self.flag_function, settings, sfn.TaskInput.from_object(payload), result_path)

    @staticmethod
    def _catch(task: tasks.LambdaInvoke, transient: sfn.IChainable, other: sfn.IChainable) -> None:
        """What its retries left: AWS's failures to `transient`, anything else to `other` (catchers match in order)."""
        task.add_catch(transient, errors=TRANSIENT_ERRORS, result_path="$.error")
        task.add_catch(other, errors=["States.ALL"], result_path="$.error")

    def _add_state_machine(self, common: CommonProps, settings: TaxiEtlConfig) -> None:
        """Validation -> Transformation -> Store, each with its flag step and its automatic redrive.

        The automatic redrive is a Wait and one more pass of the failed phase inside the same execution:
        Flag<P>Retryable (rows flagged `retryable:<error>`) -> Wait<P>Redrive -> Clear<P>Flags (the
        retryable flags cleared) -> Redrive<P> (the phase again; its rejects and other errors are flagged
        as a first pass's are) -> on, or Flag<P>StillRetryable (flagged for good, RowsStillRetryable
        counted and alarmed). Simplest and correct under at-least-once: the redrive is a state of the
        execution that failed, so it happens once per execution by construction, with no second
        execution to name, deduplicate or lose, no queue or rule, and no new permission; a task retried
        or an Express execution run twice repeats only idempotent steps (flags set again, a clear whose
        condition no longer holds, conditional status and trips writes). An SQS- or EventBridge-driven
        redriver would need its own deduplication (ops/taxi_redrive's generation names), a role that may
        start executions, and still could not be in the state machine's stack without a cycle.
        """
        stored = sfn.Succeed(self, "Stored", comment="Every row of the request was stored or flagged")
        next_state: sfn.IChainable = stored
        # Built back to front: each phase continues into the next one.
        for phase, function in reversed(
            list(zip(contract.PHASES, (self.validate_function, self.transform_function, self.store_function), strict=True))
        ):
            failed = sfn.Fail(self, f"{phase}Failed", error_path="$.flag.error", cause_path="$.flag.cause")
            flag = self._flag_task(f"Flag{phase}", phase, settings)
            after_flag = (
                sfn.Choice(self, f"AfterFlag{phase}")
                .when(sfn.Condition.is_present("$.error"), failed)
                .when(sfn.Condition.boolean_equals("$.hasPassed", True), next_state)
                .otherwise(failed)
            )
            flag_step = flag.next(after_flag)

            # The automatic redrive (see the docstring).
            still_retryable = self._flag_task(f"Flag{phase}StillRetryable", phase, settings, contract.FLAG_MODE_REDRIVEN)
            still_retryable.next(after_flag)
            clear = self._flag_task(f"Clear{phase}Flags", phase, settings, contract.FLAG_MODE_CLEAR)
            self._catch(clear, still_retryable, flag_step)
            redrive = self._invoke(f"Redrive{phase}", function, settings)
            self._catch(redrive, still_retryable, flag_step)
            redrive.next(
                sfn.Choice(self, f"Redrive{phase}Rejects")
                .when(sfn.Condition.boolean_equals("$.hasRejected", True), flag_step)
                .otherwise(next_state)
            )
            retryable = self._flag_task(f"Flag{phase}Retryable", phase, settings, contract.FLAG_MODE_RETRYABLE)
            retryable.next(
                sfn.Wait(
                    self,
                    f"Wait{phase}Redrive",
                    time=sfn.WaitTime.duration(Duration.seconds(settings.execution_limits.auto_redrive_wait_seconds)),
                    comment="AWS failed the phase after its retries: its rows are flagged retryable and tried once more later",
                )
            ).next(clear).next(redrive)

            phase_task = self._invoke(phase, function, settings)
            self._catch(phase_task, retryable, flag_step)
            next_state = phase_task.next(
                sfn.Choice(self, f"{phase}Rejects")
                .when(sfn.Condition.boolean_equals("$.hasRejected", True), flag_step)
                .otherwise(next_state)
            )
        self.state_machine_logs_key = kms.Key(
            self,
            "StateMachineLogsKey",
            description="Encrypts the taxi saga's execution logs",
            enable_key_rotation=True,
            removal_policy=common.removal_policy,
        )
        stack = Stack.of(self)
        # Only for this account's log groups in this region (the encryption context CloudWatch Logs sends).
        logs_service = iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com").with_conditions(
            {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"}}
        )
        self.state_machine_logs_key.grant_encrypt_decrypt(logs_service)
        self.execution_log_level = settings.execution_log_level
        self.state_machine_logs = logs.LogGroup(
            self,
            "StateMachineLogs",
            encryption_key=self.state_machine_logs_key,
            retention=common.log_retention,
            removal_policy=common.removal_policy,
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(next_state),
            state_machine_type=settings.workflow_type,
            timeout=Duration.minutes(settings.execution_limits.execution_timeout_minutes),
            tracing_enabled=common.tracing.lambda_active_tracing,
            logs=sfn.LogOptions(
                destination=self.state_machine_logs, level=settings.execution_log_level, include_execution_data=settings.execution_log_data
            ),
            comment="onceflow taxi ETL saga: validate -> transform -> store, each failure flagged by its phase",
        )
        # Its execution history is what tells a repeated request from a new one (for 90 days).
        self.state_machine.apply_removal_policy(common.removal_policy)

    # --- the API ------------------------------------------------------------------------------

    def _add_api(self, common: CommonProps, settings: TaxiEtlConfig) -> None:
        api_spec = FunctionSpec(
            handler=contract.HANDLER_API,
            service=contract.SERVICE_API,
            reserved_concurrency=settings.reserved_concurrency.get("api"),
            description="Taxi saga API: one execution per request, named by its StoreRequestId",
            timeout_seconds=settings.api_timeout_seconds,
            snap_start=settings.snap_start,
            environment={
                contract.ENV_STATE_MACHINE_ARN: self.state_machine.state_machine_arn,
                contract.ENV_WORKFLOW_TYPE: settings.workflow_type.value,
                contract.ENV_BATCH_MAX_LINES: str(settings.batch_max_lines),
                contract.ENV_BATCH_MAX_BYTES: str(settings.batch_max_bytes),
                contract.ENV_MAX_LINE_BYTES: str(settings.max_line_bytes),
                **self._row_tables_environment(),
            },
        )
        created_api = create_function(self, "ApiFunction", api_spec, common)
        self.api_function, self.api_alias = created_api.function, created_api.alias
        # A single unkeyed row already stored or flagged (a batch's row re-sent alone) starts no execution.
        self._grant_row_reads(self.api_function)
        self.state_machine.grant_start_execution(self.api_function)
        # A repeated request whose execution has ended: compare its input with the first one's.
        self.state_machine.grant_execution(self.api_function, "states:DescribeExecution")

        authorizer_spec = FunctionSpec(
            handler=contract.HANDLER_AUTHORIZER,
            service=contract.SERVICE_AUTHORIZER,
            reserved_concurrency=settings.reserved_concurrency.get("authorizer"),
            description="Taxi saga API authorizer: constant-time compare with the key in Secrets Manager",
            timeout_seconds=AUTHORIZER_TIMEOUT_SECONDS,
            snap_start=settings.snap_start,
            environment={
                contract.ENV_API_KEY_SECRET_ID: self.api_key_secret.secret_arn,
                contract.ENV_SECRET_CACHE_SECONDS: str(settings.secret_cache_seconds),
                contract.ENV_SECRET_REFRESH_FLOOR_SECONDS: str(settings.secret_refresh_floor_seconds),
            },
        )
        created_authorizer = create_function(self, "AuthorizerFunction", authorizer_spec, common)
        self.authorizer_function, self.authorizer_alias = created_authorizer.function, created_authorizer.alias
        # CDK's grant also matches a secret imported by name (its ARN ends in a random suffix) and its KMS key.
        self.api_key_secret.grant_read(self.authorizer_function)
        self.authorizer = HttpLambdaAuthorizer(
            "ApiKeyAuthorizer",
            # With SnapStart, the alias (its invoke permission is the alias's): $LATEST is never restored from a snapshot.
            self.authorizer_alias or self.authorizer_function,
            response_types=[HttpLambdaResponseType.SIMPLE],
            identity_source=["$request.header.Authorization"],
            # API Gateway remembers an allow or deny per key this long, on every route.
            results_cache_ttl=Duration.seconds(settings.authorizer_cache_seconds),
        )

        self.http_api, self.api_stage, self.api_access_logs = throttled_http_api(
            self,
            common,
            description="onceflow taxi ETL (API key in the Authorization header)",
            authorizer=self.authorizer,
            rate_limit=settings.api_rate_limit,
            burst_limit=settings.api_burst_limit,
            extra_log_fields={"authorizerError": "$context.authorizer.error"},
        )
        integration = HttpLambdaIntegration("ApiIntegration", self.api_alias or self.api_function)
        for path in (contract.ROUTE_TRIP, contract.ROUTE_TRIP_BATCH):
            self.http_api.add_routes(path=path, methods=[apigw.HttpMethod.POST], integration=integration)
        self._add_row_state_route(common, settings)

    def _row_tables_environment(self) -> dict[str, str]:
        """Where a row's state is read: its three status rows and its trips item."""
        return {
            contract.ENV_VALIDATION_STATUS_TABLE: self.validation_status_table.table_name,
            contract.ENV_TRANSFORMATION_STATUS_TABLE: self.transformation_status_table.table_name,
            contract.ENV_STORE_STATUS_TABLE: self.store_status_table.table_name,
            contract.ENV_FINAL_TABLE: self.final_table.table_name,
        }

    def _grant_row_reads(self, function: lambda_.IFunction) -> None:
        """One BatchGetItem over the four tables (store.DynamoRowReader), and nothing else."""
        for table in (*self.status_tables.values(), self.final_table):
            table.grant(function, "dynamodb:BatchGetItem")
            # Only a table with a customer managed key has one here (an imported trips table given
            # with its key); the construct's own tables use the AWS managed key, which needs no grant.
            if table.encryption_key is not None:
                table.encryption_key.grant_decrypt(function)

    def _add_row_state_route(self, common: CommonProps, settings: TaxiEtlConfig) -> None:
        """GET /trips/{StoreRequestId}: its own function, which may only read the four tables."""
        spec = FunctionSpec(
            handler=contract.HANDLER_ROW_STATE,
            service=contract.SERVICE_ROW_STATE,
            reserved_concurrency=settings.reserved_concurrency.get("row_state"),
            description="Taxi saga API: what became of one row (pending, stored or flagged), read-only",
            timeout_seconds=settings.api_timeout_seconds,
            snap_start=settings.snap_start,
            environment=self._row_tables_environment(),
        )
        created = create_function(self, "RowStateFunction", spec, common)
        self.row_state_function, self.row_state_alias = created.function, created.alias
        self._grant_row_reads(self.row_state_function)
        self.http_api.add_routes(
            path=contract.ROUTE_ROW_STATE,
            methods=[apigw.HttpMethod.GET],
            integration=HttpLambdaIntegration("RowStateIntegration", self.row_state_alias or self.row_state_function),
        )

    # --- the bulk route ---------------------------------------------------------------------------

    def _add_bulk_route(self, common: CommonProps, settings: TaxiEtlConfig) -> None:
        """A file under incoming/ -> the bulk state machine: Plan cuts it into chunks (a manifest under loads/),
        a Distributed Map runs one chunk task per manifest item (the three phases in-process, the same status
        tables and trips table as the per-batch machine), Report writes the load's report."""
        self._add_ingest_bucket(common, settings)
        self._add_bulk_functions(common, settings)
        self._add_bulk_state_machine(common, settings)
        self._add_loads_functions(common, settings)

    def _add_ingest_bucket(self, common: CommonProps, settings: TaxiEtlConfig) -> None:
        self.ingest_access_log_bucket = s3.Bucket(
            self,
            "IngestAccessLogBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,  # the only encryption S3 server access logging writes to
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            # S3 delivers the logs under a bucket policy (no ACLs) where the app sets CDK's serverAccessLogsUseBucketPolicy
            # flag (cdk.json does); in an app without it CDK grants the log delivery group an ACL, which needs ObjectWriter.
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED
            if FeatureFlags.of(self).is_enabled(ACCESS_LOGS_BY_BUCKET_POLICY)
            else s3.ObjectOwnership.OBJECT_WRITER,
            lifecycle_rules=[s3.LifecycleRule(id="ExpireAccessLogs", expiration=ACCESS_LOG_RETENTION)],
            removal_policy=common.removal_policy,
        )
        self.ingest_bucket = s3.Bucket(
            self,
            "IngestBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            # A load is one object version: a file overwritten while it loads is still read as it was.
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.ingest_access_log_bucket,
            server_access_logs_prefix="ingest/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireIncomingFiles", prefix=contract.INGEST_PREFIX, expiration=Duration.days(settings.ingest_retention_days)
                ),
                s3.LifecycleRule(
                    id="ExpireLoadRecords", prefix=contract.LOADS_PREFIX, expiration=Duration.days(settings.load_report_retention_days)
                ),
                s3.LifecycleRule(
                    id="ExpireOldVersions",
                    noncurrent_version_expiration=Duration.days(settings.ingest_retention_days),
                    expired_object_delete_marker=True,
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
            ],
            removal_policy=common.removal_policy,
        )
        self.load_starter_dead_letter_queue = encrypted_queue(self, "LoadStarterDeadLetterQueue", common)
        self.load_starter_queue = encrypted_queue(
            self,
            "LoadStarterQueue",
            common,
            # AWS's advice for a Lambda event source: six times the function's timeout (room for the poller's retries of a
            # throttled batch before the message shows again).
            visibility_seconds=6 * settings.api_timeout_seconds,
            dead_letter=sqs.DeadLetterQueue(queue=self.load_starter_dead_letter_queue, max_receive_count=LOAD_STARTER_MAX_RECEIVES),
        )
        # SSE-SQS (encrypted_queue): S3 cannot send to a queue encrypted with the AWS managed KMS key.
        self.ingest_bucket.add_event_notification(
            s3.EventType.OBJECT_CREATED,
            s3n.SqsDestination(self.load_starter_queue),
            s3.NotificationKeyFilter(prefix=contract.INGEST_PREFIX),
        )

    def _grant_ingest_reads(self, function: lambda_.IFunction, prefix: str, *actions: str) -> None:
        """Reads under `prefix`: s3:GetObject (HeadObject is authorized as it), or s3:GetObjectVersion for a read of
        one given version (a load reads exactly its version, which needs that action alone)."""
        objects = self.ingest_bucket.arn_for_objects(f"{prefix}*")
        function.add_to_role_policy(iam.PolicyStatement(actions=list(actions), resources=[objects]))

    def _grant_load_writes(self, function: lambda_.IFunction) -> None:
        function.add_to_role_policy(
            iam.PolicyStatement(actions=["s3:PutObject"], resources=[self.ingest_bucket.arn_for_objects(f"{contract.LOADS_PREFIX}*")])
        )

    def _grant_missing_key_answers(self, function: lambda_.IFunction) -> None:
        """s3:ListBucket on the bucket: S3 answers a GetObject or HeadObject of a missing key with 404 only to a
        caller who may list the bucket (403 otherwise), and an s3:prefix condition does not apply to those requests."""
        function.add_to_role_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.ingest_bucket.bucket_arn]))

    def _bulk_spec(
        self, settings: TaxiEtlConfig, handler: str, service: str, description: str, environment: dict[str, str]
    ) -> FunctionSpec:
        return FunctionSpec(
            handler=handler,
            service=service,
            description=description,
            memory_mb=settings.phase_memory_mb,
            timeout_seconds=settings.bulk_task_timeout_seconds,
            environment=environment,
        )

    def _add_bulk_functions(self, common: CommonProps, settings: TaxiEtlConfig) -> None:
        bucket = {contract.ENV_INGEST_BUCKET: self.ingest_bucket.bucket_name}
        plan_spec = self._bulk_spec(
            settings,
            contract.HANDLER_BULK_PLAN,
            contract.SERVICE_BULK_PLAN,
            "Taxi bulk Plan: reads a file's version once, writes its manifest of chunks",
            {**bucket, contract.ENV_CHUNK_ROWS: str(settings.bulk_chunk_rows)},
        )
        self.bulk_plan_function = create_function(self, "BulkPlanFunction", plan_spec, common).function
        self._grant_ingest_reads(self.bulk_plan_function, contract.INGEST_PREFIX, "s3:GetObjectVersion")
        self._grant_load_writes(self.bulk_plan_function)
        # A version deleted before its load ran must answer 404 (the load's input is gone), not 403.
        self._grant_missing_key_answers(self.bulk_plan_function)

        chunk_spec = self._bulk_spec(
            settings,
            contract.HANDLER_BULK_CHUNK,
            contract.SERVICE_BULK_CHUNK,
            "Taxi bulk Chunk: validate, transform and store one chunk's rows, flag its rejects, write its summary",
            {**bucket, contract.ENV_MAX_LINE_BYTES: str(settings.max_line_bytes), **self._row_tables_environment()},
        )
        self.bulk_chunk_function = create_function(self, "BulkChunkFunction", chunk_spec, common).function
        self._grant_ingest_reads(self.bulk_chunk_function, contract.INGEST_PREFIX, "s3:GetObjectVersion")
        self._grant_ingest_reads(self.bulk_chunk_function, contract.LOADS_PREFIX, "s3:GetObject")
        self._grant_load_writes(self.bulk_chunk_function)
        # Its done marker: a HeadObject of a summary not written yet must answer 404, not 403 (and so must its range
        # of a version deleted meanwhile).
        self._grant_missing_key_answers(self.bulk_chunk_function)
        # A chunk reads before it writes: the rows' trips items, then the status rows of the rows not stored
        # (BatchGetItem, consistent); it writes status rows only for the rows it flags (UpdateItem: begun as the
        # phases begin them, then flagged), and each new row's trips item once (the conditional put).
        for table in self.status_tables.values():
            table.grant(self.bulk_chunk_function, "dynamodb:BatchGetItem", "dynamodb:UpdateItem")
        self.final_table.grant(self.bulk_chunk_function, "dynamodb:PutItem", "dynamodb:BatchGetItem")

        report_spec = self._bulk_spec(
            settings,
            contract.HANDLER_BULK_REPORT,
            contract.SERVICE_BULK_REPORT,
            "Taxi bulk Report: sums a load's chunk summaries into its report",
            dict(bucket),
        )
        self.bulk_report_function = create_function(self, "BulkReportFunction", report_spec, common).function
        self._grant_ingest_reads(self.bulk_report_function, contract.LOADS_PREFIX, "s3:GetObject")
        self._grant_load_writes(self.bulk_report_function)
        self.bulk_report_function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.ingest_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": f"{contract.LOADS_PREFIX}*"}},
            )
        )

    def _add_bulk_state_machine(self, common: CommonProps, settings: TaxiEtlConfig) -> None:
        """Plan -> Chunks (a Distributed Map over the plan's manifest) -> Report -> Loaded; a failed plan or map
        -> ReportFailed (the report of what was done) -> LoadFailed. Always STANDARD: its execution names make a
        load start once, and a Distributed Map runs only there."""
        load_fields = {name: sfn.JsonPath.string_at(f"$.{name}") for name in ("bucket", "key", "versionId", "loadId")}
        plan_path = f"$.{contract.BULK_STATE_PLAN}"  # where Plan's output stays for the map and the report
        report_failed = self._retried(
            tasks.LambdaInvoke(
                self,
                "ReportFailed",
                lambda_function=self.bulk_report_function,
                # The whole state: the load, the plan when it ran, and the caught error at $.error.
                result_path="$.report",
                payload_response_only=True,
                retry_on_service_exceptions=False,
            ),
            settings,
            NON_RETRYABLE_ERRORS,
        ).next(
            # Named after the error it ends the execution with (a static name: a Fail state cannot re-raise States.*).
            sfn.Fail(self, contract.ERROR_LOAD_FAILED, error=contract.ERROR_LOAD_FAILED, cause_path="$.error.Cause")
        )

        plan = self._retried(
            tasks.LambdaInvoke(
                self,
                "Plan",
                lambda_function=self.bulk_plan_function,
                result_path=plan_path,
                payload_response_only=True,
                retry_on_service_exceptions=False,
            ),
            settings,
            BULK_PLAN_NON_RETRYABLE_ERRORS,
        )
        plan.add_catch(report_failed, errors=["States.ALL"], result_path="$.error")

        chunk = self._retried(
            tasks.LambdaInvoke(
                self, "Chunk", lambda_function=self.bulk_chunk_function, payload_response_only=True, retry_on_service_exceptions=False
            ),
            settings,
            NON_RETRYABLE_ERRORS,
        )
        chunks = sfn.DistributedMap(
            self,
            "Chunks",
            item_reader=sfn.S3JsonItemReader(
                bucket_name_path=sfn.JsonPath.string_at(f"{plan_path}.manifest.bucket"),
                key=sfn.JsonPath.string_at(f"{plan_path}.manifest.key"),
            ),
            item_selector={
                **load_fields,
                contract.BULK_CHUNK_LAYOUT: sfn.JsonPath.object_at(f"{plan_path}.layout"),
                contract.BULK_CHUNK_ITEM: sfn.JsonPath.object_at("$$.Map.Item.Value"),
            },
            map_execution_type=sfn.StateMachineType.STANDARD,
            label=BULK_MAP_LABEL,
            max_concurrency=settings.bulk_max_concurrency,
            tolerated_failure_percentage=settings.bulk_tolerated_failure_percentage,
            # The chunks' outcomes are their summaries in S3: nothing of them in state (256 KiB for the whole map).
            result_path=sfn.JsonPath.DISCARD,
        )
        chunks.item_processor(chunk)
        chunks.add_catch(report_failed, errors=["States.ALL"], result_path="$.error")

        report = self._retried(
            tasks.LambdaInvoke(
                self,
                "Report",
                lambda_function=self.bulk_report_function,
                payload=sfn.TaskInput.from_object({**load_fields, contract.BULK_STATE_PLAN: sfn.JsonPath.object_at(plan_path)}),
                result_path="$.report",
                payload_response_only=True,
                retry_on_service_exceptions=False,
            ),
            settings,
            NON_RETRYABLE_ERRORS,
        )
        definition = plan.next(chunks).next(report).next(sfn.Succeed(self, "Loaded", comment="Every chunk of the file was done"))

        self.bulk_state_machine_logs = logs.LogGroup(
            self,
            "BulkStateMachineLogs",
            encryption_key=self.state_machine_logs_key,
            retention=common.log_retention,
            removal_policy=common.removal_policy,
        )
        self.bulk_state_machine = sfn.StateMachine(
            self,
            "BulkStateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=BULK_EXECUTION_TIMEOUT,
            tracing_enabled=common.tracing.lambda_active_tracing,
            logs=sfn.LogOptions(
                destination=self.bulk_state_machine_logs,
                level=settings.execution_log_level,
                include_execution_data=settings.execution_log_data,
            ),
            comment="onceflow taxi bulk load: plan a file's chunks -> a Distributed Map of chunk tasks -> report",
        )
        # Its execution names are the loads' ids: the history is what makes a load start once.
        self.bulk_state_machine.apply_removal_policy(common.removal_policy)
        # The ItemReader's GetObject of the manifest (its bucket is a path, so CDK grants nothing for it).
        self.bulk_state_machine.add_to_role_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[self.ingest_bucket.arn_for_objects(f"{contract.LOADS_PREFIX}*")])
        )

    def _loads_environment(self) -> dict[str, str]:
        return {
            contract.ENV_INGEST_BUCKET: self.ingest_bucket.bucket_name,
            contract.ENV_BULK_STATE_MACHINE_ARN: self.bulk_state_machine.state_machine_arn,
        }

    def _grant_load_starts(self, function: lambda_.IFunction) -> None:
        """Start a load (or join it), and read its generations' executions back."""
        self.bulk_state_machine.grant_start_execution(function)
        self.bulk_state_machine.grant_execution(function, "states:DescribeExecution")

    def _add_loads_functions(self, common: CommonProps, settings: TaxiEtlConfig) -> None:
        loads_spec = FunctionSpec(
            handler=contract.HANDLER_LOADS_API,
            service=contract.SERVICE_LOADS_API,
            description="Taxi bulk API: starts the load of a file in the ingest bucket, answers its progress and report",
            timeout_seconds=settings.api_timeout_seconds,
            snap_start=settings.snap_start,
            environment=self._loads_environment(),
        )
        created_loads_api = create_function(self, "LoadsApiFunction", loads_spec, common)
        self.loads_api_function, self.loads_api_alias = created_loads_api.function, created_loads_api.alias
        # HeadObject of the file, of the version asked for or of the latest.
        self._grant_ingest_reads(self.loads_api_function, contract.INGEST_PREFIX, "s3:GetObject", "s3:GetObjectVersion")
        # The load's report and manifest.
        self._grant_ingest_reads(self.loads_api_function, contract.LOADS_PREFIX, "s3:GetObject")
        # A missing file (POST) or report (GET) must answer 404, and the progress lists the chunks' summaries.
        self._grant_missing_key_answers(self.loads_api_function)
        self._grant_load_starts(self.loads_api_function)
        self.bulk_state_machine.grant_execution(self.loads_api_function, "states:ListMapRuns")
        machine_name = Arn.split(self.bulk_state_machine.state_machine_arn, ArnFormat.COLON_RESOURCE_NAME).resource_name
        self.loads_api_function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["states:DescribeMapRun"],
                resources=[
                    Stack.of(self).format_arn(
                        service="states",
                        resource="mapRun",
                        resource_name=f"{machine_name}/{BULK_MAP_LABEL}:*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                ],
            )
        )
        integration = HttpLambdaIntegration("LoadsIntegration", self.loads_api_alias or self.loads_api_function)
        self.http_api.add_routes(path=contract.ROUTE_LOADS, methods=[apigw.HttpMethod.POST], integration=integration)
        self.http_api.add_routes(path=contract.ROUTE_LOAD, methods=[apigw.HttpMethod.GET], integration=integration)

        starter_spec = FunctionSpec(
            handler=contract.HANDLER_LOAD_STARTER,
            service=contract.SERVICE_LOAD_STARTER,
            description="Taxi bulk starter: starts the load of each file created under incoming/ (its S3 event, through SQS)",
            timeout_seconds=settings.api_timeout_seconds,
            environment=self._loads_environment(),
        )
        self.load_starter_function = create_function(self, "LoadStarterFunction", starter_spec, common).function
        # No S3 right: the event names the object version, and the plan finds out if it is gone.
        self._grant_load_starts(self.load_starter_function)
        self.load_starter_function.add_event_source(
            sources.SqsEventSource(self.load_starter_queue, batch_size=LOAD_STARTER_BATCH_SIZE, report_batch_item_failures=True)
        )
