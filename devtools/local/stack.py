"""The dev stacks running on localhost: the moto server, both HTTP APIs and the event sources' thread,
started together and stopped together (`make serve`, and the `local_stack` test fixture in-process).

Also the stack outputs a deploy would write, for this local "environment": `cdk-outputs-local.json`
has the stacks as `Onceflow-local-<Kind>` with the output keys of the synthesized templates (each
resolved to the embedded resource, the API URLs to the local servers) plus the embedded cloud's
endpoint (`LocalEndpointUrl`, the moto server), region and dummy key pair (onceflow/clients/local.py),
which `--env local` of the tools and clients uses for every AWS call.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.aws.moto_patches import fast_transactions
from devtools.aws.moto_server import MotoServer, serving_state_machines
from devtools.aws.sigv4 import key_ring
from devtools.aws.template_resources import EmbeddedCloud, Template, resources_of_type
from devtools.local.cloud import (
    ACCESS_KEY_ID,
    LOCAL_CREDENTIALS,
    REGION,
    SECRET_ACCESS_KEY,
    EndpointClients,
    LocalEventLog,
    LocalRunnerStats,
    LocalTaxiSaga,
    Poller,
    function_handlers,
    iam_authorizer,
    keep_executions_bounded,
)
from devtools.local.http_api import ApiServer, HttpApi
from onceflow.clients.local import LOCAL_ENV, LocalCloud
from runtime.event_log import contract as event_log_contract
from runtime.runner_stats import contract as runner_stats_contract
from runtime.taxi_etl import contract as taxi_etl_contract


def pipeline_templates(templates: Mapping[str, Template]) -> dict[str, tuple[str, Template]]:
    """Each pipeline's (stack name, template) of an assembly, found by the function only it has."""
    markers = {
        "runner_stats": runner_stats_contract.HANDLER,
        "event_log": event_log_contract.HANDLER_API,
        "taxi_etl": taxi_etl_contract.HANDLER_API,
    }
    found: dict[str, tuple[str, Template]] = {}
    for pipeline, handler in markers.items():
        matches = [(name, template) for name, template in templates.items() if handler in function_handlers(template)]
        if len(matches) != 1:
            raise LookupError(f"expected one stack with the function {handler}, found {[name for name, _ in matches]}")
        found[pipeline] = matches[0]
    return found


def check_overrides(templates: Mapping[str, Template], overrides: Mapping[str, str]) -> None:
    """Every override names a variable some synthesized function has (a typo is an error, not a no-op)."""
    known: set[str] = set()
    for template in templates.values():
        for resource in resources_of_type(template, "AWS::Lambda::Function").values():
            known.update(resource["Properties"].get("Environment", {}).get("Variables", {}))
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"no function has the environment variable(s) {unknown}")


def local_stack_name(stack_name: str) -> str:
    """Onceflow-dev-EventLog -> Onceflow-local-EventLog: the kind is what the operator tools look for."""
    prefix, _, kind = stack_name.rpartition("-")
    project = prefix.rpartition("-")[0] or prefix
    return f"{project}-{LOCAL_ENV}-{kind}"


def output_value(value: Any, cloud: EmbeddedCloud, api_url: str | None) -> str:
    """An output's value in the embedded cloud: a resource's name (its logical id when it is not
    created here, a dashboard say), or the local API's URL for the API's endpoint."""
    if isinstance(value, Mapping) and "Fn::GetAtt" in value and value["Fn::GetAtt"][1] == "ApiEndpoint" and api_url:
        return api_url
    if isinstance(value, Mapping) and "Ref" in value:
        return cloud.names.get(value["Ref"], str(value["Ref"]))
    return cloud.resolve(value)


def stack_outputs(template: Template, cloud: EmbeddedCloud, api_url: str | None, local: LocalCloud) -> dict[str, str]:
    outputs = {
        key: output_value(spec["Value"], cloud, api_url) for key, spec in template.get("Outputs", {}).items() if "Export" not in spec
    }
    return {**outputs, **local.outputs()}


@dataclass
class LocalStack:
    """What `start` brought up; `stop` ends all of it. The attributes are the fixture's interface."""

    moto: MotoServer
    event_log_server: ApiServer
    taxi_server: ApiServer
    poller: Poller
    clients: EndpointClients
    api_key: str
    snapshot_every: int
    outputs: dict[str, dict[str, str]]
    region: str = REGION
    access_key_id: str = ACCESS_KEY_ID
    secret_access_key: str = SECRET_ACCESS_KEY
    outputs_file: Path | None = None
    _exit: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    @property
    def moto_endpoint(self) -> str:
        return self.moto.endpoint

    @property
    def event_log_url(self) -> str:
        return self.event_log_server.url

    @property
    def taxi_url(self) -> str:
        return self.taxi_server.url

    def client(self, service: str) -> Any:
        """A boto3 client of the embedded cloud (endpoint, key pair and region of this stack)."""
        return self.clients.client(service)

    def aws_environment(self) -> dict[str, str]:
        """The environment variables another process needs to reach the embedded cloud."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
        }

    @classmethod
    def start(
        cls,
        templates: Mapping[str, Template],
        *,
        moto_port: int = 0,
        event_log_port: int = 0,
        taxi_port: int = 0,
        overrides: Mapping[str, str] | None = None,
        access_log: Callable[[str], None] | None = None,
        poll_interval: float = 0.5,
    ) -> LocalStack:
        """Everything from the synthesized templates (stack name -> template); ports 0: the OS picks."""
        settings = dict(overrides or {})
        check_overrides(templates, settings)
        stacks = pipeline_templates(templates)
        exit_stack = contextlib.ExitStack()
        try:
            keys = key_ring(LOCAL_CREDENTIALS)  # what the event-log API and the presigned URLs verify signatures against
            moto = MotoServer(moto_port, credentials=keys).start()
            exit_stack.callback(moto.stop)
            exit_stack.enter_context(serving_state_machines(moto.port))
            # moto's own TransactWriteItems deep-copies every table it touches: each append cost a copy of
            # the whole log table and its stream, and a server under load grew by GBs (devtools/aws/moto_patches.py).
            exit_stack.enter_context(fast_transactions())
            clients = EndpointClients(moto.endpoint)
            runner_stats = LocalRunnerStats.create(stacks["runner_stats"][1], clients, settings)
            event_log = LocalEventLog.create(stacks["event_log"][1], clients, settings)
            saga = LocalTaxiSaga.create(stacks["taxi_etl"][1], clients, settings)
            exit_stack.enter_context(saga.routing)
            event_log_server = ApiServer(
                HttpApi("event log", "local-eventlog", event_log.routes, iam_authorizer(keys), access_log=access_log), event_log_port
            )
            exit_stack.callback(event_log_server.stop)
            taxi_server = ApiServer(HttpApi("taxi", "local-taxi", saga.routes, saga.authorize, access_log=access_log), taxi_port)
            exit_stack.callback(taxi_server.stop)
            polls = {
                "event log": event_log.poll,
                "runner stats": runner_stats.poll,
                "taxi loads": saga.poll,
                "state machine executions": keep_executions_bounded,
            }
            poller = Poller(polls, interval=poll_interval)
            exit_stack.callback(poller.stop)
            event_log_server.start()
            taxi_server.start()
            poller.start()
        except BaseException:
            exit_stack.close()
            raise
        clouds = {"runner_stats": runner_stats.cloud, "event_log": event_log.cloud, "taxi_etl": saga.cloud}
        urls = {"event_log": event_log_server.url, "taxi_etl": taxi_server.url}
        local = LocalCloud(moto.endpoint, REGION, ACCESS_KEY_ID, SECRET_ACCESS_KEY)
        outputs = {
            local_stack_name(name): stack_outputs(template, clouds[pipeline], urls.get(pipeline), local)
            for pipeline, (name, template) in stacks.items()
        }
        return cls(
            moto=moto,
            event_log_server=event_log_server,
            taxi_server=taxi_server,
            poller=poller,
            clients=clients,
            api_key=saga.api_key,
            snapshot_every=event_log.snapshot_every,
            outputs=outputs,
            _exit=exit_stack,
        )

    def write_outputs(self, path: Path) -> Path:
        """The outputs in `cdk deploy --outputs-file` form (stack name -> {output key: value})."""
        path.write_text(json.dumps(self.outputs, indent=2) + "\n")
        self.outputs_file = path
        return path

    def stop(self) -> None:
        """Stops the event sources, the APIs and the moto server, and undoes the patches (idempotent)."""
        self._exit.close()
