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

from aws_cdk import Duration, Stack
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from aws_cdk.aws_apigatewayv2_authorizers import HttpLambdaAuthorizer, HttpLambdaResponseType
from aws_cdk.aws_apigatewayv2_integrations import HttpLambdaIntegration
from constructs import Construct

from onceflow.infra.common import CommonProps
from onceflow.infra.lambda_factory import FunctionSpec, create_function
from onceflow.infra.resources import durable_table, throttled_http_api
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
# Each phase's name in TaxiEtlConfig.reserved_concurrency.
PHASE_FUNCTIONS = {contract.PHASE_VALIDATION: "validate", contract.PHASE_TRANSFORMATION: "transform", contract.PHASE_STORE: "store"}


class TaxiEtlSaga(Construct):
    """NYC yellow-taxi rows through validate -> transform -> store, each failure flagged by its phase.

    Creates the three status tables, the trips table (or takes yours), the API key secret (or
    takes yours), the phase, flag, API, row-state and authorizer functions, the Step Functions
    state machine with its encrypted execution logs, and the HTTP API behind the authorizer.
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
    state_machine: sfn.StateMachine
    state_machine_logs: logs.LogGroup
    execution_log_level: sfn.LogLevel
    state_machine_logs_key: kms.Key
    http_api: apigw.HttpApi
    api_stage: apigw.HttpStage
    api_access_logs: logs.LogGroup
    authorizer: HttpLambdaAuthorizer

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
        task.add_retry(errors=NON_RETRYABLE_ERRORS, max_attempts=0)
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
