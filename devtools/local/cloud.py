"""The three pipelines on the embedded cloud served over HTTP (devtools/aws/moto_server.py).

Every table, bucket, queue, stream and secret comes from the synthesized dev templates
(devtools/aws/template_resources.EmbeddedCloud, the taxi saga's through devtools/taxi_world.TaxiWorld);
every function is its real entry point (`handle`), built through its pipeline's wiring from the
settings of its synthesized environment (plus the overrides given), on SDK clients whose endpoint is
the moto server, as another process's clients are.

What Lambda's event sources do is done by one background thread (`Poller`), every half second:
the log table's stream -> router (filtered like the event source mapping, devtools/aws/table_stream.py),
the snapshot queue -> snapshot worker and the payload queue -> payload finalizer (devtools/aws/sqs_esm.py),
and the runner-stats Kinesis stream -> its handler (devtools/aws/esm.py), and the taxi ingest bucket's
ObjectCreated queue -> the load starter. The taxi saga's state machines (the per-batch one and the bulk
one) run on moto's Step Functions executor, whose Lambda tasks `TaxiWorld.routing` sends to the
entry points of the phases and of the bulk plan, chunk and report.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from unittest import mock

from devtools.aws.esm import EventSourceMapping, KinesisShard, ListShard
from devtools.aws.esm import Invoke as EventInvoke
from devtools.aws.lambda_context import ClockedLambdaContext, as_lambda_context
from devtools.aws.moto_fit import InstanceAttribute, Reach, reaches_into_moto
from devtools.aws.sigv4 import LocalCredentials, Refused, verify_authorization
from devtools.aws.sqs_esm import SqsEventSource
from devtools.aws.table_stream import StreamRecord, TableStream, dynamodb_stream_event, filter_patterns
from devtools.aws.template_resources import EmbeddedCloud, Template, find_function, resources_of_type
from devtools.local.http_api import ACCOUNT, Authorize, Denied, HttpRequest, Integration, Invoke, Route
from runtime.shared.aws import Clients, client_config
from runtime.shared.observability import metrics

REGION = "us-east-1"
# Any key pair is taken by moto (account 123456789012); these are what `make serve` prints.
ACCESS_KEY_ID = "onceflow-local"
SECRET_ACCESS_KEY = "onceflow-local-secret"
# What the event-log API and the presigned URLs of the moto server verify signatures against.
LOCAL_CREDENTIALS = LocalCredentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY)
IAM_SERVICE = "execute-api"
# The handlers run up to 64 requests at once on one client (runner stats' IO_CONCURRENCY_MAX).
POOL_CONNECTIONS = 64
# The most messages one poll takes from a queue before the other sources get their turn.
MESSAGES_PER_POLL = 50
# Records already delivered that the embedded streams keep (the log table's stream, the Kinesis
# shards): moto keeps every record forever, AWS for 24 hours; a long-running server keeps this many.
DELIVERED_RECORDS_KEPT = 1_000
# Closed state machine executions the embedded Step Functions keeps, each with its history and a copy
# of its state machine (about 50 KB for one trip): moto keeps them all, AWS for 90 days. A request
# repeating the name of one trimmed away starts a new execution; its rows are stored once anyway.
CLOSED_EXECUTIONS_KEPT = 1_000
HEADER_SOURCE = "$request.header."
# What a payload 2.0 authorizer gets of the request's event, besides its own fields.
AUTHORIZER_EVENT_KEYS = (
    "routeKey",
    "rawPath",
    "rawQueryString",
    "cookies",
    "headers",
    "queryStringParameters",
    "pathParameters",
    "requestContext",
)


class EndpointClients:
    """SDK clients of the embedded cloud at `endpoint`: the local key pair, one region, and the functions'
    own config (runtime/shared/aws.py: SigV4, so a presigned URL carries the signed headers), but S3
    path-style: the server is one host, so a presigned URL is <endpoint>/<bucket>/<key> where AWS's is
    <bucket>.s3.<region>.amazonaws.com/<key>, and names no bucket host that would need DNS."""

    def __init__(self, endpoint: str, region: str = REGION) -> None:
        import boto3

        self.endpoint = endpoint
        self.region = region
        self._session = boto3.session.Session(aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY, region_name=region)
        self._lock = threading.Lock()  # a boto3 session is not safe to create clients from on several threads

    def client(self, service: str) -> Any:
        from botocore.config import Config

        config = client_config(service, pool_connections=POOL_CONNECTIONS)
        if service == "s3":
            config = config.merge(Config(s3={"addressing_style": "path"}))
        with self._lock:
            factory: Any = self._session.client
            return factory(service, endpoint_url=self.endpoint, config=config)

    def clients(self, *services: str) -> Clients:
        return Clients(**{service: self.client(service) for service in services})


def function_handlers(template: Template) -> list[str]:
    return [str(res["Properties"].get("Handler")) for res in resources_of_type(template, "AWS::Lambda::Function").values()]


def environment(cloud: EmbeddedCloud, handler: str, overrides: Mapping[str, str]) -> dict[str, str]:
    """The function's synthesized environment, with the overrides of the variables it has."""
    synthesized = cloud.function_environment(handler)
    return {**synthesized, **{name: value for name, value in overrides.items() if name in synthesized}}


def function_timeout(template: Template, handler: str) -> int:
    return int(template["Resources"][find_function(template, handler)]["Properties"].get("Timeout", 3))


def entry_point(handle: Callable[[dict[str, Any], Any, Any], Any], deps: Any, *, timeout_seconds: float = 60) -> EventInvoke:
    """`handle(event, context, deps)` as Lambda would run it: a fresh context per invocation whose
    remaining time runs down from the function's timeout; its metrics dropped (no runtime flushes them)."""

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        context = ClockedLambdaContext(clock=time.time, timeout_seconds=timeout_seconds)
        try:
            result: dict[str, Any] = handle(event, as_lambda_context(context), deps)
            return result
        finally:
            metrics.clear_metrics()

    return invoke


def on_failure_destination(cloud: EmbeddedCloud, mapping: Mapping[str, Any], sqs: Any, info_key: str, source_arn: str) -> Any:
    """The mapping's on-failure SQS destination: a record of each batch given up on, as Lambda sends it."""
    destination = mapping.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
    if destination is None:
        return lambda records: None
    queue_url = cloud.names[f"{destination['Fn::GetAtt'][0]}.url"]

    def send(records: list[Any]) -> None:
        info = {
            "startSequenceNumber": records[0].sequence_number,
            "endSequenceNumber": records[-1].sequence_number,
            "batchSize": len(records),
            "streamArn": source_arn,
        }
        document = {"version": "1.0", "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), info_key: info}
        sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(document))

    return send


def iam_authorizer(
    keys: Mapping[str, LocalCredentials], region: str = REGION, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> Authorize:
    """IAM authorization, as far as it can be checked without IAM: the request's SigV4 signature
    (Authorization header, service execute-api, this region) recomputed over the request as received
    and compared, against the key pairs in `keys` (devtools/aws/sigv4.py). A refusal is API
    Gateway's 403 with its message and x-amzn-errortype. The caller's IAM permissions are not evaluated."""

    def authorize(event: dict[str, Any], request: HttpRequest) -> Denied | dict[str, Any]:
        verdict = verify_authorization(
            request.method, request.target, request.headers, request.body, keys=keys, region=region, service=IAM_SERVICE, now=clock()
        )
        if isinstance(verdict, Refused):
            return Denied(verdict.status, verdict.message, verdict.code or None)
        return iam_identity(verdict.access_key)

    return authorize


def iam_identity(access_key: str) -> dict[str, Any]:
    """requestContext.authorizer of a request IAM let in (a user of the local account named by its key)."""
    return {
        "iam": {
            "accessKey": access_key,
            "accountId": ACCOUNT,
            "callerId": access_key,
            "cognitoIdentity": None,
            "principalOrgId": None,
            "userArn": f"arn:aws:iam::{ACCOUNT}:user/{access_key}",
            "userId": access_key,
        }
    }


def lambda_authorizer(invoke: Invoke, identity_headers: list[str], region: str = REGION) -> Authorize:
    """A Lambda REQUEST authorizer (payload 2.0, simple responses) as API Gateway calls it: no identity
    -> 401 without a call; `isAuthorized` false -> 403; true -> the request goes on with its context."""

    def authorize(event: dict[str, Any], request: HttpRequest) -> Denied | dict[str, Any]:
        headers = event["headers"]
        identity = [str(headers.get(name, "")) for name in identity_headers]
        if not all(identity):
            return Denied(401, "Unauthorized")
        context = event["requestContext"]
        method, path = context["http"]["method"], context["http"]["path"]
        authorizer_event: dict[str, Any] = {
            "version": "2.0",
            "type": "REQUEST",
            "routeArn": f"arn:aws:execute-api:{region}:{ACCOUNT}:{context['apiId']}/{context['stage']}/{method}{path}",
            "identitySource": identity,
            **{key: event[key] for key in AUTHORIZER_EVENT_KEYS if key in event},
        }
        decision = invoke(authorizer_event)
        if decision.get("isAuthorized") is not True:
            return Denied(403, "Forbidden")
        return {"lambda": decision.get("context") or {}}

    return authorize


def template_routes(template: Template, integration: Integration) -> list[Route]:
    """The HTTP API's routes as synthesized (RouteKey "METHOD /path"), all to `integration`. Read from
    the template rather than from the construct's module: importing that starts the CDK's Node process."""
    keys = [str(route["Properties"]["RouteKey"]) for route in resources_of_type(template, "AWS::ApiGatewayV2::Route").values()]
    return [Route(method, path, integration) for method, _, path in (key.partition(" ") for key in keys)]


def identity_headers(template: Template) -> list[str]:
    """The header names of the API's Lambda authorizer's identity source, from the template."""
    ((_, authorizer),) = resources_of_type(template, "AWS::ApiGatewayV2::Authorizer").items()
    sources = authorizer["Properties"].get("IdentitySource", [])
    return [str(source)[len(HEADER_SOURCE) :].lower() for source in sources if str(source).startswith(HEADER_SOURCE)]


# --- the pipelines ------------------------------------------------------------------------------------


@dataclass
class LocalEventLog:
    """The event log: its API's routes and the poll that drives its stream and queues."""

    cloud: EmbeddedCloud
    routes: list[Route]
    poll: Callable[[], int]
    snapshot_every: int

    @classmethod
    def create(cls, template: Template, clients: EndpointClients, overrides: Mapping[str, str]) -> LocalEventLog:
        from runtime.event_log import (
            api_handler,
            api_wiring,
            finalizer_handler,
            finalizer_wiring,
            router_handler,
            router_wiring,
            worker_handler,
            worker_wiring,
        )
        from runtime.event_log import contract as log_contract

        sdk = clients.clients("dynamodb", "s3", "sqs")
        cloud = EmbeddedCloud(template).create(dynamodb=sdk.dynamodb, sqs=sdk.sqs, s3=sdk.s3)

        def settings_env(handler: str) -> dict[str, str]:
            return environment(cloud, handler, overrides)

        api = api_wiring.ApiSettings.from_env(settings_env(log_contract.HANDLER_API))
        api_function = Integration(
            "event-log API function",
            entry_point(
                api_handler.handle, api_wiring.build(api, sdk), timeout_seconds=function_timeout(template, log_contract.HANDLER_API)
            ),
        )
        routes = template_routes(template, api_function)

        router = entry_point(
            router_handler.handle,
            router_wiring.build(router_wiring.RouterSettings.from_env(settings_env(log_contract.HANDLER_ROUTER)), sdk),
            timeout_seconds=function_timeout(template, log_contract.HANDLER_ROUTER),
        )
        mapping = cloud.event_source_mapping(log_contract.HANDLER_ROUTER)
        stream_arn = str(sdk.dynamodb.describe_table(TableName=api.log_table)["Table"]["LatestStreamArn"])
        stream = TableStream(api.log_table, stream_arn, filter_patterns(mapping))
        stream_mapping = EventSourceMapping(
            router,
            batch_size=int(mapping["BatchSize"]),
            retry_attempts=int(mapping["MaximumRetryAttempts"]),
            bisect_on_error=bool(mapping["BisectBatchOnFunctionError"]),
            to_event=dynamodb_stream_event,
            on_failure=on_failure_destination(cloud, mapping, sdk.sqs, "DDBStreamBatchInfo", stream_arn),
        )
        worker_settings = worker_wiring.WorkerSettings.from_env(settings_env(log_contract.HANDLER_WORKER))
        finalizer_settings = finalizer_wiring.FinalizerSettings.from_env(settings_env(log_contract.HANDLER_FINALIZER))
        sources = [
            sqs_source(
                cloud,
                template,
                sdk.sqs,
                worker_settings.options.queue_url,
                log_contract.HANDLER_WORKER,
                entry_point(
                    worker_handler.handle,
                    worker_wiring.build(worker_settings, sdk),
                    timeout_seconds=function_timeout(template, log_contract.HANDLER_WORKER),
                ),
            ),
            sqs_source(
                cloud,
                template,
                sdk.sqs,
                finalizer_settings.queue_url,
                log_contract.HANDLER_FINALIZER,
                entry_point(
                    finalizer_handler.handle,
                    finalizer_wiring.build(finalizer_settings, sdk),
                    timeout_seconds=function_timeout(template, log_contract.HANDLER_FINALIZER),
                ),
            ),
        ]

        def poll() -> int:
            records: list[StreamRecord] = stream.poll()
            if records:
                stream_mapping.drain(ListShard(records))
                stream.trim(DELIVERED_RECORDS_KEPT)
                stream_mapping.stats.batch_sizes.clear()  # a per-batch history nothing reads here
            delivered = len(records)
            for source in sources:
                for _ in range(MESSAGES_PER_POLL):
                    received = source.poll_once()
                    delivered += received
                    if not received:
                        break
            return delivered

        return cls(cloud, routes, poll, api.options.snapshot_every)


def sqs_source(cloud: EmbeddedCloud, template: Template, sqs: Any, queue_url: str, handler: str, invoke: Invoke) -> SqsEventSource:
    mapping = cloud.event_source_mapping(handler)
    arn = str(sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])
    return SqsEventSource(sqs, queue_url, arn, invoke, batch_size=int(mapping.get("BatchSize", 10)))


@dataclass
class LocalTaxiSaga:
    """The taxi saga: its API's routes (behind the real authorizer), the API key, both state machines' task routing,
    and the poll that delivers the ingest bucket's ObjectCreated events (the starter queue) to the load starter."""

    cloud: EmbeddedCloud
    routes: list[Route]
    authorize: Authorize
    api_key: str
    routing: contextlib.AbstractContextManager[None]
    poll: Callable[[], int]

    @classmethod
    def create(cls, template: Template, clients: EndpointClients, overrides: Mapping[str, str]) -> LocalTaxiSaga:
        from devtools import taxi_world
        from runtime.taxi_etl import api_handler, authorizer_handler, load_starter_handler, loads_api_handler, row_state_handler, wiring
        from runtime.taxi_etl import contract as taxi_contract
        from runtime.taxi_etl.api_wiring import ApiSettings
        from runtime.taxi_etl.authorizer_wiring import AuthorizerSettings
        from runtime.taxi_etl.bulk_wiring import LoadsSettings
        from runtime.taxi_etl.row_state_wiring import RowStateSettings

        # The world's tables, secret, bucket, queues and state machines, made through this server's clients.
        with mock.patch.object(taxi_world, "client", clients.client):
            world = taxi_world.TaxiWorld.create(template, bulk=True)

        def settings_env(handler: str) -> dict[str, str]:
            return environment(world.cloud, handler, overrides)

        api = wiring.build(
            ApiSettings.from_env(settings_env(taxi_contract.HANDLER_API)),
            Clients(stepfunctions=world.api_stepfunctions, dynamodb=world.dynamodb),
        )
        row_state = wiring.build(RowStateSettings.from_env(settings_env(taxi_contract.HANDLER_ROW_STATE)), Clients(dynamodb=world.dynamodb))
        authorizer_settings = AuthorizerSettings.from_env(settings_env(taxi_contract.HANDLER_AUTHORIZER))
        authorizer = wiring.build(authorizer_settings, Clients(secretsmanager=clients.client("secretsmanager")))
        api_function = Integration(
            "taxi API function",
            entry_point(api_handler.handle, api, timeout_seconds=function_timeout(template, taxi_contract.HANDLER_API)),
        )
        row_state_function = Integration(
            "taxi row-state function",
            entry_point(row_state_handler.handle, row_state, timeout_seconds=function_timeout(template, taxi_contract.HANDLER_ROW_STATE)),
        )
        authorizer_function = Integration(
            "taxi authorizer function",
            entry_point(
                authorizer_handler.handle, authorizer, timeout_seconds=function_timeout(template, taxi_contract.HANDLER_AUTHORIZER)
            ),
        )
        # The bulk route: the loads API, and the load starter behind the ingest bucket's notification queue.
        bulk_clients = Clients(s3=world.s3, stepfunctions=world.stepfunctions)
        loads = wiring.build(LoadsSettings.from_env(settings_env(taxi_contract.HANDLER_LOADS_API)), bulk_clients)
        loads_function = Integration(
            "taxi loads API function",
            entry_point(loads_api_handler.handle, loads, timeout_seconds=function_timeout(template, taxi_contract.HANDLER_LOADS_API)),
        )
        routes = [
            Route("POST", taxi_contract.ROUTE_TRIP, api_function),
            Route("POST", taxi_contract.ROUTE_TRIP_BATCH, api_function),
            Route("GET", taxi_contract.ROUTE_ROW_STATE, row_state_function),
            Route("POST", taxi_contract.ROUTE_LOADS, loads_function),
            Route("GET", taxi_contract.ROUTE_LOAD, loads_function),
        ]
        starter = wiring.build(LoadsSettings.from_env(settings_env(taxi_contract.HANDLER_LOAD_STARTER)), bulk_clients)
        queue_id = world.cloud.event_source_mapping(taxi_contract.HANDLER_LOAD_STARTER)["EventSourceArn"]["Fn::GetAtt"][0]
        starter_source = sqs_source(
            world.cloud,
            template,
            world.sqs,
            world.cloud.names[queue_id],
            taxi_contract.HANDLER_LOAD_STARTER,
            entry_point(
                load_starter_handler.handle, starter, timeout_seconds=function_timeout(template, taxi_contract.HANDLER_LOAD_STARTER)
            ),
        )

        def poll() -> int:
            delivered = 0
            for _ in range(MESSAGES_PER_POLL):
                received = starter_source.poll_once()
                delivered += received
                if not received:
                    break
            return delivered

        api_key = str(world.secrets.get_secret_value(SecretId=world.secret_arn)["SecretString"])
        authorize = lambda_authorizer(authorizer_function, identity_headers(template))
        return cls(world.cloud, routes, authorize, api_key, world.routing(), poll)


@dataclass
class LocalRunnerStats:
    """Runner stats: the poll that delivers its Kinesis stream to the handler."""

    cloud: EmbeddedCloud
    poll: Callable[[], int]

    @classmethod
    def create(cls, template: Template, clients: EndpointClients, overrides: Mapping[str, str]) -> LocalRunnerStats:
        from runtime.runner_stats import contract as runner_contract
        from runtime.runner_stats import handler, wiring
        from runtime.runner_stats.settings import RunnerStatsSettings

        sdk = clients.clients("dynamodb", "sqs")
        kinesis = clients.client("kinesis")
        cloud = EmbeddedCloud(template).create(dynamodb=sdk.dynamodb, sqs=sdk.sqs, kinesis=kinesis)
        settings = RunnerStatsSettings.from_env(environment(cloud, runner_contract.HANDLER, overrides))
        invoke = entry_point(
            handler.handle, wiring.build(settings, sdk), timeout_seconds=function_timeout(template, runner_contract.HANDLER)
        )
        mapping = cloud.event_source_mapping(runner_contract.HANDLER)
        (stream_id,) = resources_of_type(template, "AWS::Kinesis::Stream")
        stream_name = cloud.names[stream_id]
        stream_arn = str(kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]["StreamARN"])
        esm = EventSourceMapping(
            invoke,
            batch_size=int(mapping["BatchSize"]),
            retry_attempts=int(mapping["MaximumRetryAttempts"]),
            bisect_on_error=bool(mapping["BisectBatchOnFunctionError"]),
            on_failure=on_failure_destination(cloud, mapping, sdk.sqs, "KinesisBatchInfo", stream_arn),
        )
        shards = [str(shard["ShardId"]) for shard in kinesis.list_shards(StreamName=stream_name)["Shards"]]
        checkpoints: dict[str, str | None] = dict.fromkeys(shards)

        def poll() -> int:
            for shard_id in shards:
                checkpoints[shard_id] = esm.drain(KinesisShard(kinesis, stream_name, shard_id), checkpoints[shard_id])
                trim_kinesis_shard(stream_name, shard_id, checkpoints[shard_id], DELIVERED_RECORDS_KEPT)
            delivered = sum(esm.stats.batch_sizes)
            esm.stats.batch_sizes.clear()  # counted per poll: a list of every batch would grow without end
            return delivered

        return cls(cloud, poll)


@reaches_into_moto(
    Reach("moto.core.models", "DEFAULT_ACCOUNT_ID"),
    Reach("moto.kinesis.models", "kinesis_backends"),
    InstanceAttribute("moto.kinesis.models", "KinesisBackend", attribute="streams"),
    InstanceAttribute("moto.kinesis.models", "Stream", attribute="shards"),
    InstanceAttribute("moto.kinesis.models", "Shard", attribute="records"),
)
def trim_kinesis_shard(stream_name: str, shard_id: str, checkpoint: str | None, keep: int) -> int:
    """Drop from moto's shard the records up to `checkpoint` (delivered), but the last `keep` (at least
    one: moto numbers a new record after the last it holds); returns how many were dropped."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.kinesis.models import kinesis_backends

    if checkpoint is None:
        return 0
    records = kinesis_backends[DEFAULT_ACCOUNT_ID][REGION].streams[stream_name].shards[shard_id].records
    numbers = list(records)  # one call: a record put meanwhile on another thread cannot interleave with it
    delivered = [number for number in numbers if number <= int(checkpoint)]
    dropped = delivered[: max(0, len(delivered) - max(1, keep))]
    for number in dropped:
        del records[number]
    return len(dropped)


@reaches_into_moto(
    Reach("moto.core.models", "DEFAULT_ACCOUNT_ID"),
    Reach("moto.stepfunctions.parser.models", "stepfunctions_parser_backends"),
    InstanceAttribute("moto.stepfunctions.models", "StepFunctionBackend", attribute="state_machines"),
    InstanceAttribute("moto.stepfunctions.models", "StateMachineInstance", attribute="executions"),
    InstanceAttribute("moto.stepfunctions.parser.backend.execution", "Execution", attribute="exec_status"),
)
def trim_executions(keep: int) -> int:
    """Drop each state machine's oldest closed executions but the last `keep`; returns how many.
    Removed one by one, so an execution started meanwhile on another thread is never lost."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    dropped = 0
    for state_machine in stepfunctions_parser_backends[DEFAULT_ACCOUNT_ID][REGION].state_machines:
        # The parser's executions (moto's annotations name the base class): exec_status is None until the
        # execution starts, then an ExecutionStatus, a str enum.
        executions: list[Any] = list(state_machine.executions)
        closed = [execution for execution in executions if execution.exec_status not in (None, "RUNNING")]
        for execution in closed[: max(0, len(closed) - keep)]:
            state_machine.executions.remove(execution)
            dropped += 1
    return dropped


def keep_executions_bounded() -> int:
    """The event sources' thread's housekeeping: it delivers nothing (0), so an idle server still waits between rounds."""
    trim_executions(CLOSED_EXECUTIONS_KEPT)
    return 0


# --- the event sources' thread ------------------------------------------------------------------------


@dataclass
class Poller:
    """Runs each poll in turn, again at once while any delivered something, else after `interval` s.
    A poll that fails is reported once per distinct error (as a Lambda log line would be) and retried."""

    polls: Mapping[str, Callable[[], int]]
    interval: float = 0.5
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _last_error: dict[str, str] = field(default_factory=dict)
    rounds: int = 0

    def start(self) -> Poller:
        self._thread = threading.Thread(target=self._run, name="event-sources", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            delivered = sum(self._poll(name, poll) for name, poll in self.polls.items())
            self.rounds += 1
            if not delivered:
                self._stop.wait(self.interval)

    def _poll(self, name: str, poll: Callable[[], int]) -> int:
        try:
            delivered = poll()
        except Exception as error:
            text = f"{type(error).__name__}: {error}"
            if self._last_error.get(name) != text and not self._stop.is_set():
                print(f"event source {name}: {text} (retried every {self.interval} s)", file=sys.stderr)
            self._last_error[name] = text
            return 0
        self._last_error.pop(name, None)
        return delivered

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
