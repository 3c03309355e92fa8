"""The taxi ETL saga on the embedded cloud: tables, secret and state machine from the synthesized
template, moto's Step Functions executor running the synthesized definition, and its Lambda
tasks routed to the in-process phase handlers with the settings of their synthesized functions.
With `bulk=True` the world also has the bulk route: the ingest bucket (versioned, its ObjectCreated
events sent to the starter queue), the bulk state machine (a Distributed Map), its tasks routed to
the bulk handlers, and the loads API.

`start_execution` runs the whole execution before it returns (moto's synchronous worker), and a
Retry's wait is recorded instead of slept, so a test reads the end state right after a request.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from devtools.aws.clients import new_client
from devtools.aws.lambda_context import FakeLambdaContext, as_lambda_context
from devtools.aws.moto_fit import Reach, reaches_into_moto
from devtools.aws.template_resources import EmbeddedCloud, Template, find_function, resources_of_type
from runtime.shared.aws import Clients
from runtime.shared.observability import metrics
from runtime.taxi_etl import (
    bulk_chunk_handler,
    bulk_plan_handler,
    bulk_report_handler,
    flag_handler,
    store_handler,
    transform_handler,
    validate_handler,
    wiring,
)
from runtime.taxi_etl import contract as taxi_etl_contract
from runtime.taxi_etl.bulk_chunk_wiring import BulkChunkSettings
from runtime.taxi_etl.bulk_wiring import BulkPlanSettings, BulkReportSettings
from runtime.taxi_etl.flag_wiring import FlagSettings
from runtime.taxi_etl.load_objects import report_key
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.phase_wiring import PhaseSettings
from runtime.taxi_etl.store import DynamoStatusTable
from runtime.taxi_etl.store_wiring import StoreSettings

REGION = "us-east-1"
ACCOUNT = "123456789012"
VALIDATE_HANDLER = taxi_etl_contract.HANDLER_VALIDATE
TRANSFORM_HANDLER = taxi_etl_contract.HANDLER_TRANSFORM
STORE_HANDLER = taxi_etl_contract.HANDLER_STORE
FLAG_HANDLER = taxi_etl_contract.HANDLER_FLAG
API_HANDLER = taxi_etl_contract.HANDLER_API
AUTHORIZER_HANDLER = taxi_etl_contract.HANDLER_AUTHORIZER
ROW_STATE_HANDLER = taxi_etl_contract.HANDLER_ROW_STATE
BULK_PLAN_HANDLER = taxi_etl_contract.HANDLER_BULK_PLAN
BULK_CHUNK_HANDLER = taxi_etl_contract.HANDLER_BULK_CHUNK
BULK_REPORT_HANDLER = taxi_etl_contract.HANDLER_BULK_REPORT
LOADS_API_HANDLER = taxi_etl_contract.HANDLER_LOADS_API
LOAD_STARTER_HANDLER = taxi_etl_contract.HANDLER_LOAD_STARTER
TEST_API_KEY = "k3y-for-the-embedded-cloud-only-0123456789abcdef"

Invoke = Callable[[dict[str, Any]], dict[str, Any]]


def client(service: str) -> Any:
    return new_client(service)


def function_arn(logical_id: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical_id}"


@dataclass
class Invocations:
    """What the state machine invoked, and the hook a test uses to fail an invocation."""

    calls: list[str] = field(default_factory=list)  # handler paths, in order
    # Called before each invocation with (handler path, attempt number of that handler); may raise.
    before: Callable[[str, int], None] | None = None
    # Called after each invocation with its handler path, before its metrics are dropped (a Lambda runtime would flush them).
    after: Callable[[str], None] | None = None


# moto's Lambda invocation, which the worlds route to the in-process handlers.
LAMBDA_INVOKE = Reach(
    "moto.awslambda_simple.models",
    "LambdaSimpleBackend.invoke",
    ("self", "function_name", "qualifier", "body", "headers", "response_headers"),
)


@reaches_into_moto(
    Reach("moto.stepfunctions.parser.asl.component.common.retry.retrier_decl", "time.sleep"),
    Reach(
        "moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function",
        "WaitFunction._wait_interval",
        ("self", "env", "wait_seconds"),
    ),
    Reach("moto.stepfunctions.parser.backend.execution_worker", "ExecutionWorker.start", ("self",)),
    Reach("moto.stepfunctions.parser.backend.execution_worker", "ExecutionWorker._execution_logic", ("self",)),
)
@contextmanager
def embedded_saga_cloud(state_waits: list[float] | None = None) -> Iterator[list[float]]:
    """moto executing state machines in-process and synchronously, its DynamoDB requests atomic across
    the phases' threads; yields the retry waits it skipped. The Wait states' waits (the automatic
    redrive's) are skipped too, and recorded in `state_waits` when given."""
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    from devtools.aws.moto_patches import cached_state_machines, embedded_aws

    waits: list[float] = []
    waited = state_waits if state_waits is not None else []
    logging.getLogger("moto.stepfunctions.parser").setLevel(logging.CRITICAL)  # it logs every caught failure
    with (
        embedded_aws(config={"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}),
        cached_state_machines(),
        mock.patch.object(retrier_decl, "time", types.SimpleNamespace(sleep=waits.append)),
        mock.patch.object(WaitFunction, "_wait_interval", lambda function, env, wait_seconds: waited.append(wait_seconds)),
        mock.patch.object(ExecutionWorker, "start", lambda worker: worker._execution_logic()),
    ):
        yield waits


@dataclass
class TaxiWorld:
    template: Template
    cloud: EmbeddedCloud
    dynamodb: Any
    stepfunctions: Any
    secrets: Any
    state_machine_arn: str
    secret_arn: str
    # The API function's own Step Functions client (faults attach here, as to the deployed function's).
    api_stepfunctions: Any = field(default_factory=lambda: client("stepfunctions"))
    routes: dict[str, Invoke] = field(default_factory=dict)  # function logical id -> in-process handler
    invocations: Invocations = field(default_factory=Invocations)
    retry_waits: list[float] = field(default_factory=list)  # the Retry waits moto skipped (from embedded_saga_cloud)
    state_waits: list[float] = field(default_factory=list)  # the Wait states' waits it skipped (given to embedded_saga_cloud)

    # The bulk route (TaxiWorld.create(..., bulk=True)); None without it.
    s3: Any = None
    sqs: Any = None
    bulk_state_machine_arn: str | None = None
    # The plan's rows per chunk in place of the synthesized CHUNK_ROWS (a small file in several chunks); None: as synthesized.
    chunk_rows: int | None = None

    @classmethod
    def create(
        cls, template: Template, *, workflow_type: str | None = None, bulk: bool = False, chunk_rows: int | None = None
    ) -> TaxiWorld:
        """Call inside `embedded_saga_cloud()`. `workflow_type` overrides the synthesized one (of the per-batch
        machine; the bulk machine is always STANDARD). `bulk` adds the bulk route, `chunk_rows` overrides its plan's cut."""
        dynamodb, stepfunctions, secrets = client("dynamodb"), client("stepfunctions"), client("secretsmanager")
        s3, sqs = (client("s3"), client("sqs")) if bulk else (None, None)
        cloud = EmbeddedCloud(template).create(dynamodb=dynamodb, s3=s3, sqs=sqs)
        (secret_id,) = resources_of_type(template, "AWS::SecretsManager::Secret")
        secret_arn = secrets.create_secret(Name=secret_id, SecretString=TEST_API_KEY)["ARN"]
        cloud.names[secret_id] = secret_arn  # a secret's Ref is its ARN
        machine_arn = create_state_machine(stepfunctions, cloud, state_machine_running(template, VALIDATE_HANDLER), workflow_type)
        world = cls(template, cloud, dynamodb, stepfunctions, secrets, machine_arn, secret_arn, s3=s3, sqs=sqs, chunk_rows=chunk_rows)
        if bulk:
            world.bulk_state_machine_arn = create_state_machine(stepfunctions, cloud, state_machine_running(template, BULK_PLAN_HANDLER))
        world._route_tasks()
        return world

    def environment(self, handler: str) -> dict[str, str]:
        environment = self.cloud.function_environment(handler)
        if handler == BULK_PLAN_HANDLER and self.chunk_rows is not None:
            environment[taxi_etl_contract.ENV_CHUNK_ROWS] = str(self.chunk_rows)
        return environment

    def _route_tasks(self) -> None:
        # Each task goes to its real entry point, built through the wiring on this world's client.
        clients = Clients(dynamodb=self.dynamodb)
        validate = wiring.build(PhaseSettings.from_env(self.environment(VALIDATE_HANDLER)), clients)
        transform = wiring.build(PhaseSettings.from_env(self.environment(TRANSFORM_HANDLER)), clients)
        store = wiring.build(StoreSettings.from_env(self.environment(STORE_HANDLER)), clients)
        flagging = wiring.build(FlagSettings.from_env(self.environment(FLAG_HANDLER)), clients)
        context = as_lambda_context(FakeLambdaContext())
        handlers: dict[str, Invoke] = {
            VALIDATE_HANDLER: lambda event: validate_handler.handle(event, context, validate),
            TRANSFORM_HANDLER: lambda event: transform_handler.handle(event, context, transform),
            STORE_HANDLER: lambda event: store_handler.handle(event, context, store),
            FLAG_HANDLER: lambda event: flag_handler.handle(event, context, flagging),
        }
        if self.bulk_state_machine_arn is not None:
            handlers |= self._bulk_tasks(context)
        self.routes = {find_function(self.template, handler): self._observed(handler, invoke) for handler, invoke in handlers.items()}

    def _bulk_tasks(self, context: Any) -> dict[str, Invoke]:
        """The bulk state machine's tasks, each through the wiring on this world's clients."""
        clients = Clients(dynamodb=self.dynamodb, s3=self.s3)
        plan = wiring.build(BulkPlanSettings.from_env(self.environment(BULK_PLAN_HANDLER)), clients)
        chunk = wiring.build(BulkChunkSettings.from_env(self.environment(BULK_CHUNK_HANDLER)), clients)
        report = wiring.build(BulkReportSettings.from_env(self.environment(BULK_REPORT_HANDLER)), clients)
        return {
            BULK_PLAN_HANDLER: lambda event: bulk_plan_handler.handle(event, context, plan),
            BULK_CHUNK_HANDLER: lambda event: bulk_chunk_handler.handle(event, context, chunk),
            BULK_REPORT_HANDLER: lambda event: bulk_report_handler.handle(event, context, report),
        }

    def status_table(self, name: str) -> DynamoStatusTable:
        return DynamoStatusTable(name, client=self.dynamodb)

    def _observed(self, handler: str, invoke: Invoke) -> Invoke:
        def run(event: dict[str, Any]) -> dict[str, Any]:
            self.invocations.calls.append(handler)
            if self.invocations.before is not None:
                self.invocations.before(handler, self.invocations.calls.count(handler))
            try:
                return invoke(event)
            finally:
                if self.invocations.after is not None:
                    self.invocations.after(handler)
                metrics.clear_metrics()  # no Lambda runtime flushes them here

        return run

    @reaches_into_moto(LAMBDA_INVOKE)
    @contextmanager
    def routing(self) -> Iterator[None]:
        """Lambda tasks of the state machine go to the in-process handlers while this is open."""
        from moto.awslambda_simple.models import LambdaSimpleBackend

        routes = self.routes

        def invoke(backend: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: dict[str, str]) -> bytes:
            logical_id = function_name.split(":function:")[-1].split(":")[0]
            try:
                result: Any = routes[logical_id](json.loads(body) if body else {})
            except BaseException as error:
                response_headers["x-amz-function-error"] = "Unhandled"
                result = {"errorType": type(error).__name__, "errorMessage": str(error)}
            return json.dumps(result).encode()

        with mock.patch.object(LambdaSimpleBackend, "invoke", invoke):
            yield

    # --- reading the outcome ------------------------------------------------------------------

    def table_items(self, handler_env_name: str) -> dict[str, dict[str, Any]]:
        from runtime.shared.dynamo import from_attributes

        name = self.environment(FLAG_HANDLER)[handler_env_name]
        items: dict[str, dict[str, Any]] = {}
        for page in self.dynamodb.get_paginator("scan").paginate(TableName=name, ConsistentRead=True):
            for attributes in page["Items"]:
                item = from_attributes(attributes)
                items[str(item[taxi_etl_contract.KEY_STORE_REQUEST_ID])] = item
        return items

    def redrive_arguments(self, *extra: str) -> list[str]:
        """`ops.taxi_redrive`'s command line for this world's state machine and tables, then `extra`."""
        tables = self.environment(FLAG_HANDLER)
        names = (
            taxi_etl_contract.ENV_FINAL_TABLE,
            taxi_etl_contract.ENV_VALIDATION_STATUS_TABLE,
            taxi_etl_contract.ENV_TRANSFORMATION_STATUS_TABLE,
            taxi_etl_contract.ENV_STORE_STATUS_TABLE,
        )
        options = ("--trips-table", "--validation-status-table", "--transformation-status-table", "--store-status-table")
        table_arguments = [part for option, name in zip(options, names, strict=True) for part in (option, tables[name])]
        return ["--state-machine-arn", self.state_machine_arn, *table_arguments, *extra]

    def final_items(self) -> dict[str, dict[str, Any]]:
        return self.table_items(taxi_etl_contract.ENV_FINAL_TABLE)

    def status_rows(self) -> dict[Phase, dict[str, dict[str, Any]]]:
        return {
            Phase.VALIDATION: self.table_items(taxi_etl_contract.ENV_VALIDATION_STATUS_TABLE),
            Phase.TRANSFORMATION: self.table_items(taxi_etl_contract.ENV_TRANSFORMATION_STATUS_TABLE),
            Phase.STORE: self.table_items(taxi_etl_contract.ENV_STORE_STATUS_TABLE),
        }

    def executions(self) -> list[dict[str, Any]]:
        pages = self.stepfunctions.get_paginator("list_executions").paginate(stateMachineArn=self.state_machine_arn)
        return [execution for page in pages for execution in page["executions"]]

    def describe(self, name: str) -> dict[str, Any]:
        arn = f"{self.state_machine_arn.replace(':stateMachine:', ':execution:')}:{name}"
        return dict(self.stepfunctions.describe_execution(executionArn=arn))

    def history(self, name: str) -> list[dict[str, Any]]:
        arn = f"{self.state_machine_arn.replace(':stateMachine:', ':execution:')}:{name}"
        pages = self.stepfunctions.get_paginator("get_execution_history").paginate(executionArn=arn)
        return [event for page in pages for event in page["events"]]

    # --- the API ------------------------------------------------------------------------------

    @contextmanager
    def serving_api(self) -> Iterator[None]:
        """The API function's synthesized environment, and its cold-start caches emptied around it."""
        from runtime.taxi_etl import api_handler

        def cold_start() -> None:
            for cached in (api_handler.settings, api_handler.deps):
                cached.cache_clear()

        cold_start()
        environment = self.environment(API_HANDLER)
        # The deployed entry point builds its pipeline through the wiring, on the API's own client.
        built = api_handler.deps
        api_handler.deps = functools.cache(
            lambda: wiring.build(api_handler.settings(), Clients(stepfunctions=self.api_stepfunctions, dynamodb=self.dynamodb))
        )
        namespace = metrics.namespace  # read by Powertools at import; the function's own is set here
        metrics.namespace = environment["POWERTOOLS_METRICS_NAMESPACE"]
        try:
            with mock.patch.dict(os.environ, environment):
                yield
        finally:
            metrics.namespace = namespace
            api_handler.deps = built
            cold_start()
            metrics.clear_metrics()

    def call_api(self, event: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """The deployed entry point, runtime.taxi_etl.api_handler.handler; call inside `serving_api()`."""
        from runtime.taxi_etl import api_handler

        with self.routing():
            response = api_handler.handler(dict(event), FakeLambdaContext())  # type: ignore[arg-type]
        return int(response["statusCode"]), json.loads(response["body"])

    def post(self, path: str, body: str | bytes | None, *, idempotency_key: str | None = None) -> tuple[int, dict[str, Any]]:
        return self.call_api(http_api_event(path, body, idempotency_key=idempotency_key))

    def get_row(self, store_request_id: str) -> tuple[int, dict[str, Any]]:
        """GET /trips/{StoreRequestId} through its deployed entry point: status and body (`get_row_result`)."""
        response = self.get_row_result(store_request_id)
        return int(response["statusCode"]), json.loads(response["body"])

    def get_row_result(self, store_request_id: str) -> dict[str, Any]:
        """The whole Lambda result of GET /trips/{StoreRequestId} through its deployed entry point,
        runtime.taxi_etl.row_state_handler.handler, with that function's synthesized environment and a cold start."""
        from runtime.taxi_etl import row_state_handler

        for cached in (row_state_handler.settings, row_state_handler.deps):
            cached.cache_clear()
        path = f"/trips/{store_request_id}"
        event = http_api_event(
            path, None, method="GET", route=ROW_STATE_ROUTE_KEY, path_parameters={taxi_etl_contract.KEY_STORE_REQUEST_ID: store_request_id}
        )
        try:
            with mock.patch.dict(os.environ, self.environment(ROW_STATE_HANDLER)):
                response = row_state_handler.handler(event, FakeLambdaContext())  # type: ignore[arg-type]
        finally:
            for cached in (row_state_handler.settings, row_state_handler.deps):
                cached.cache_clear()
            metrics.clear_metrics()
        return response

    def start(self, name: str, rows: list[Mapping[str, str]]) -> dict[str, Any]:
        """Start an execution directly (not through the API) and return its description."""
        with self.routing():
            self.stepfunctions.start_execution(stateMachineArn=self.state_machine_arn, name=name, input=json.dumps({"rows": rows}))
        return self.describe(name)

    # --- the bulk route (bulk=True) -------------------------------------------------------------

    @property
    def ingest_bucket(self) -> str:
        return self.environment(LOADS_API_HANDLER)[taxi_etl_contract.ENV_INGEST_BUCKET]

    def put_file(self, key: str, data: bytes) -> str:
        """A file put in the ingest bucket as the loader puts it; its version id. Its ObjectCreated event goes to
        the starter queue (moto delivers it in-process); `deliver_load_events` hands the queue to the starter."""
        return str(self.s3.put_object(Bucket=self.ingest_bucket, Key=key, Body=data)["VersionId"])

    def start_load(self, key: str, version_id: str | None = None) -> tuple[int, dict[str, Any]]:
        """POST /loads for the file (its latest version unless given) through the loads API's entry point; the
        load runs to its end before this returns."""
        document: dict[str, str] = {"key": key} | ({"versionId": version_id} if version_id is not None else {})
        return self.call_loads_api(http_api_event(taxi_etl_contract.ROUTE_LOADS, json.dumps(document), content_type="application/json"))

    def load(self, key: str, data: bytes) -> tuple[int, dict[str, Any]]:
        """Put the file and start its load through POST /loads: the answer of the POST."""
        self.put_file(key, data)
        return self.start_load(key)

    def get_load(self, load_id: str) -> tuple[int, dict[str, Any]]:
        """GET /loads/{LoadId} through the loads API's entry point."""
        path = taxi_etl_contract.ROUTE_LOAD.replace("{" + taxi_etl_contract.KEY_LOAD_ID + "}", load_id)
        event = http_api_event(
            path, None, method="GET", route=f"GET {taxi_etl_contract.ROUTE_LOAD}", path_parameters={taxi_etl_contract.KEY_LOAD_ID: load_id}
        )
        return self.call_loads_api(event)

    def report(self, load_id: str) -> dict[str, Any] | None:
        """The load's report.json as the Report task wrote it; None before."""
        try:
            body = self.s3.get_object(Bucket=self.ingest_bucket, Key=report_key(load_id))["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            return None
        document: dict[str, Any] = json.loads(body)
        return document

    def call_loads_api(self, event: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """The deployed entry point, runtime.taxi_etl.loads_api_handler.handler, with its synthesized environment and
        a cold start; the executions it starts run while the bulk tasks are routed."""
        from runtime.taxi_etl import loads_api_handler

        response = self._cold_entry_point(loads_api_handler, LOADS_API_HANDLER, dict(event))
        return int(response["statusCode"]), json.loads(response["body"])

    def deliver_load_events(self) -> list[dict[str, Any]]:
        """What the starter's event source mapping does: each message of the starter queue to the load starter's entry
        point, the messages it reports failed left for a later delivery, the others deleted. The answers, in order."""
        from runtime.taxi_etl import load_starter_handler

        queue_id = self.cloud.event_source_mapping(LOAD_STARTER_HANDLER)["EventSourceArn"]["Fn::GetAtt"][0]
        queue_url = self.cloud.names[queue_id]  # a queue's Ref is its URL
        answers: list[dict[str, Any]] = []
        while messages := self.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages"):
            records = [sqs_record(message, queue_url) for message in messages]
            answer = self._cold_entry_point(load_starter_handler, LOAD_STARTER_HANDLER, {"Records": records})
            answers.append(answer)
            failed = {failure["itemIdentifier"] for failure in answer.get("batchItemFailures", [])}
            done = [message for message in messages if message["MessageId"] not in failed]
            for message in done:
                self.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            if failed:
                break  # left in flight until their visibility ends, as SQS would
        return answers

    def describe_load(self, execution_name: str) -> dict[str, Any]:
        """DescribeExecution of a bulk load's execution (its generation's name)."""
        arn = f"{str(self.bulk_state_machine_arn).replace(':stateMachine:', ':execution:')}:{execution_name}"
        return dict(self.stepfunctions.describe_execution(executionArn=arn))

    def bulk_executions(self) -> list[dict[str, Any]]:
        pages = self.stepfunctions.get_paginator("list_executions").paginate(stateMachineArn=self.bulk_state_machine_arn)
        return [execution for page in pages for execution in page["executions"]]

    def _cold_entry_point(self, module: Any, handler: str, event: dict[str, Any]) -> dict[str, Any]:
        """A handler module's deployed entry point with its function's environment, its caches emptied around it."""
        for cached in (module.settings, module.deps):
            cached.cache_clear()
        try:
            with mock.patch.dict(os.environ, self.environment(handler)), self.routing():
                result: dict[str, Any] = module.handler(event, FakeLambdaContext())
        finally:
            for cached in (module.settings, module.deps):
                cached.cache_clear()
            metrics.clear_metrics()
        return result


def sqs_record(message: Mapping[str, Any], queue_url: str) -> dict[str, Any]:
    """An SQS message as Lambda's event source mapping hands it to a function."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes", {}),
        "messageAttributes": {},
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue_url.rsplit('/', 1)[-1]}",
        "awsRegion": REGION,
    }


def state_machine_running(template: Template, handler: str) -> tuple[str, dict[str, Any]]:
    """The one state machine of the template whose definition invokes the function of `handler`."""
    function_id = find_function(template, handler)
    found = [
        (machine_id, machine)
        for machine_id, machine in resources_of_type(template, "AWS::StepFunctions::StateMachine").items()
        if {"Fn::GetAtt": [function_id, "Arn"]} in machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    ]
    if len(found) != 1:
        raise LookupError(f"expected one state machine invoking {handler}, found {[machine_id for machine_id, _ in found]}")
    return found[0]


def definition_part(cloud: EmbeddedCloud, part: Any) -> str:
    """A part of a synthesized DefinitionString's Fn::Join, as the embedded cloud names it."""
    if isinstance(part, str):
        return part
    if part == {"Ref": "AWS::Partition"}:
        return "aws"
    target = part.get("Fn::GetAtt", [None, None])
    if target[1] == "Arn" and cloud.template["Resources"][target[0]]["Type"] == "AWS::Lambda::Function":
        return function_arn(part["Fn::GetAtt"][0])  # no function is created: its tasks are routed (TaxiWorld.routing)
    return cloud.resolve(part)


def create_state_machine(
    stepfunctions: Any, cloud: EmbeddedCloud, machine: tuple[str, dict[str, Any]], workflow_type: str | None = None
) -> str:
    """The synthesized state machine created in moto under its logical id; its ARN (also its Ref in `cloud`)."""
    machine_id, resource = machine
    definition = "".join(definition_part(cloud, part) for part in resource["Properties"]["DefinitionString"]["Fn::Join"][1])
    arn = str(
        stepfunctions.create_state_machine(
            name=machine_id,
            definition=definition,
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/{machine_id}Role",
            type=workflow_type or resource["Properties"].get("StateMachineType", "STANDARD"),
        )["stateMachineArn"]
    )
    cloud.names[machine_id] = arn
    return arn


ROW_STATE_ROUTE_KEY = "GET /trips/{StoreRequestId}"


def http_api_event(
    path: str,
    body: str | bytes | None,
    *,
    idempotency_key: str | None = None,
    method: str = "POST",
    route: str | None = None,
    path_parameters: Mapping[str, str] | None = None,
    content_type: str = "text/csv",
) -> dict[str, Any]:
    """An HTTP API (payload 2.0) request that the key authorizer allowed; bytes are sent base64-encoded."""
    headers = {"content-type": content_type, "host": "abc123.execute-api.us-east-1.amazonaws.com"}
    if idempotency_key is not None:
        headers["idempotency-key"] = idempotency_key
    route_key = route or f"{method} {path}"
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": "",
        "headers": headers,
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "abc123",
            "authorizer": {"lambda": {}},
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "203.0.113.7", "userAgent": "taxi-loader/1.0"},
            "requestId": "req-taxi",
            "routeKey": route_key,
            "stage": "$default",
        },
        "isBase64Encoded": isinstance(body, bytes),
    }
    if body is not None:
        event["body"] = base64.b64encode(body).decode() if isinstance(body, bytes) else body
    if path_parameters is not None:
        event["pathParameters"] = dict(path_parameters)
    return event


def state_transitions(history: list[dict[str, Any]]) -> int:
    """What Standard workflows bill: one per state entered, and one per retry of a task."""
    types_seen = [str(event["type"]) for event in history]
    entered = sum(1 for kind in types_seen if kind.endswith("StateEntered"))
    attempts = sum(1 for kind in types_seen if kind in ("LambdaFunctionScheduled", "TaskScheduled"))
    tasks_entered = types_seen.count("TaskStateEntered")
    return entered + attempts - tasks_entered
