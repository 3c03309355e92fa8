"""SnapStart, opt-in (settings.snap_start on EventLogConfig and TaxiEtlConfig): on, each HTTP-facing
function (the event log's API function; the taxi saga's API, row-state, loads API and authorizer functions) has
SnapStart on published versions, a version CDK republishes when its code or configuration changes,
and the alias `live` on it, which the API integrations, the authorizer and their invoke permissions
name; off (the default), none of that exists. The default templates are pinned by test_snapshots.py.

The stacks are plain `Stack`s with the cdk-nag packs added (add_compliance_checks): synth raises on
any finding not acknowledged, so a successful synth is cdk-nag's clean bill for SnapStart too.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_

from devtools.aws.template_resources import authorizer_functions, find_function, resources_of_type, route_functions
from onceflow.constructs import (
    ConfigError,
    EventLog,
    EventLogConfig,
    EventLogProps,
    TaxiEtlConfig,
    TaxiEtlSaga,
    TaxiEtlSagaProps,
    add_compliance_checks,
)
from onceflow.infra.config import load_config
from onceflow.infra.event_log.construct import ROUTES as EVENT_LOG_ROUTES
from onceflow.infra.lambda_factory import LIVE_ALIAS
from runtime.event_log import contract as event_log_contract
from runtime.taxi_etl import contract as taxi_etl_contract
from tests.infra.template_queries import arn, ref

SNAPSTART_HANDLERS = (
    event_log_contract.HANDLER_API,
    taxi_etl_contract.HANDLER_API,
    taxi_etl_contract.HANDLER_ROW_STATE,
    taxi_etl_contract.HANDLER_LOADS_API,
    taxi_etl_contract.HANDLER_AUTHORIZER,
)
# The handler each route's integration must reach, whichever way (function or alias) it names it.
ROUTE_HANDLERS = {
    **{f"{method.value} {path}": event_log_contract.HANDLER_API for path, method in EVENT_LOG_ROUTES},
    f"POST {taxi_etl_contract.ROUTE_TRIP}": taxi_etl_contract.HANDLER_API,
    f"POST {taxi_etl_contract.ROUTE_TRIP_BATCH}": taxi_etl_contract.HANDLER_API,
    f"GET {taxi_etl_contract.ROUTE_ROW_STATE}": taxi_etl_contract.HANDLER_ROW_STATE,
    f"POST {taxi_etl_contract.ROUTE_LOADS}": taxi_etl_contract.HANDLER_LOADS_API,
    f"GET {taxi_etl_contract.ROUTE_LOAD}": taxi_etl_contract.HANDLER_LOADS_API,
}
APIGATEWAY = "apigateway.amazonaws.com"


def synth(*, snap_start: bool, api_memory_mb: int = 256) -> tuple[dict[str, Any], EventLog, TaxiEtlSaga]:
    """Both constructs in one stack, with cdk-nag on: an open finding makes synth raise."""
    app = App()
    add_compliance_checks(app)
    stack = Stack(app, "Team")
    log = EventLog(stack, "Log", EventLogProps(settings=EventLogConfig(snap_start=snap_start, api_memory_mb=api_memory_mb)))
    taxi = TaxiEtlSaga(stack, "Taxi", TaxiEtlSagaProps(settings=TaxiEtlConfig(snap_start=snap_start)))
    return app.synth().get_stack_by_name("Team").template, log, taxi


@pytest.fixture(scope="module")
def snap_on() -> tuple[dict[str, Any], EventLog, TaxiEtlSaga]:
    return synth(snap_start=True)


@pytest.fixture(scope="module")
def snap_off() -> tuple[dict[str, Any], EventLog, TaxiEtlSaga]:
    return synth(snap_start=False)


def alias_of(template: dict[str, Any], function_id: str) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (lid, body)
        for lid, body in resources_of_type(template, "AWS::Lambda::Alias").items()
        if body["Properties"]["FunctionName"] == ref(function_id)
    ]
    return found


def test_snap_start_is_off_by_default_and_in_every_environment() -> None:
    # Given the constructs' default settings and each environment's
    # When snap_start is read
    # Then it is off everywhere (infra/config.py says why)
    assert EventLogConfig().snap_start is False
    assert TaxiEtlConfig().snap_start is False
    for env_name in ("dev", "prod"):
        config = load_config(env_name)
        assert config.event_log.snap_start is False
        assert config.taxi_etl.snap_start is False


@pytest.mark.parametrize("config", [EventLogConfig(snap_start="yes"), TaxiEtlConfig(snap_start=1)], ids=["event_log", "taxi_etl"])  # type: ignore[arg-type]
def test_snap_start_must_be_a_bool(config: EventLogConfig | TaxiEtlConfig) -> None:
    # Given settings whose snap_start is not True or False
    # When they are validated (as at synth)
    # Then the error names the field
    with pytest.raises(ConfigError, match=r"\.snap_start must be True or False"):
        config.validate()


@pytest.mark.parametrize("handler", SNAPSTART_HANDLERS)
def test_on_each_http_function_has_snap_start_a_version_and_the_live_alias(
    snap_on: tuple[dict[str, Any], EventLog, TaxiEtlSaga], handler: str
) -> None:
    template, _, _ = snap_on
    # Given the HTTP-facing function of the synthesized stack
    function_id = find_function(template, handler)
    function = template["Resources"][function_id]
    # When its SnapStart setting, versions and alias are read
    versions = {
        lid: body
        for lid, body in resources_of_type(template, "AWS::Lambda::Version").items()
        if body["Properties"]["FunctionName"] == ref(function_id)
    }
    alias_id, alias = alias_of(template, function_id)
    # Then SnapStart applies to its published versions
    assert function["Properties"]["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    # And it has one version (CDK's current version), deleted once superseded (its snapshot's cache is billed while it exists)
    ((version_id, version),) = versions.items()
    assert version_id.startswith(function_id.removesuffix(function_id[-8:]) + "CurrentVersion")
    assert version["DeletionPolicy"] == "Delete"
    assert version["UpdateReplacePolicy"] == "Delete"
    # And the alias `live` points at that version
    assert alias["Properties"] == {
        "FunctionName": ref(function_id),
        "FunctionVersion": {"Fn::GetAtt": [version_id, "Version"]},
        "Name": LIVE_ALIAS,
    }
    assert alias_id.startswith(function_id.removesuffix(function_id[-8:]) + "LiveAlias")


def test_on_only_the_http_functions_have_snap_start(snap_on: tuple[dict[str, Any], EventLog, TaxiEtlSaga]) -> None:
    template, _, _ = snap_on
    # Given every function of the stack
    functions = resources_of_type(template, "AWS::Lambda::Function")
    # When those with SnapStart are listed
    with_snap_start = {body["Properties"]["Handler"] for body in functions.values() if "SnapStart" in body["Properties"]}
    # Then they are exactly the five behind the HTTP APIs (the stream, queue, schedule and state machine ones have none)
    assert with_snap_start == set(SNAPSTART_HANDLERS)
    assert len(resources_of_type(template, "AWS::Lambda::Version")) == len(SNAPSTART_HANDLERS)
    assert len(resources_of_type(template, "AWS::Lambda::Alias")) == len(SNAPSTART_HANDLERS)


def test_on_the_integrations_and_the_authorizer_invoke_the_alias(snap_on: tuple[dict[str, Any], EventLog, TaxiEtlSaga]) -> None:
    template, _, _ = snap_on
    # Given every HTTP API integration and the Lambda authorizer
    integrations = resources_of_type(template, "AWS::ApiGatewayV2::Integration")
    ((_, authorizer),) = [(lid, body) for lid, body in resources_of_type(template, "AWS::ApiGatewayV2::Authorizer").items()]
    aliases = {alias_of(template, find_function(template, handler))[0]: handler for handler in SNAPSTART_HANDLERS}
    # When their URIs are read
    # Then each integration's IntegrationUri is an alias's ARN (its Ref), never the function's ($LATEST)
    assert integrations
    for integration in integrations.values():
        assert integration["Properties"]["IntegrationUri"]["Ref"] in aliases
    # And the authorizer's URI names the authorizer function's alias
    parts = authorizer["Properties"]["AuthorizerUri"]["Fn::Join"][1]
    authorizer_alias = alias_of(template, find_function(template, taxi_etl_contract.HANDLER_AUTHORIZER))[0]
    assert ref(authorizer_alias) in parts
    assert not [part for part in parts if isinstance(part, dict) and "Fn::GetAtt" in part]


def test_on_api_gateway_may_invoke_only_the_aliases(snap_on: tuple[dict[str, Any], EventLog, TaxiEtlSaga]) -> None:
    template, _, _ = snap_on
    # Given every permission that lets API Gateway invoke a function
    permissions = [body["Properties"] for body in resources_of_type(template, "AWS::Lambda::Permission").values()]
    api_gateway = [props for props in permissions if props["Principal"] == APIGATEWAY]
    by_alias: dict[str, int] = {}
    for props in api_gateway:
        by_alias[props["FunctionName"]["Ref"]] = by_alias.get(props["FunctionName"]["Ref"], 0) + 1
    # When they are grouped by the function they name
    aliases = {handler: alias_of(template, find_function(template, handler))[0] for handler in SNAPSTART_HANDLERS}
    # Then each names an alias with lambda:InvokeFunction, one per route of its integration (the authorizer: one)
    assert all(props["Action"] == "lambda:InvokeFunction" for props in api_gateway)
    assert set(by_alias) == set(aliases.values())
    assert by_alias[aliases[event_log_contract.HANDLER_API]] == 4
    assert by_alias[aliases[taxi_etl_contract.HANDLER_API]] == 2
    assert by_alias[aliases[taxi_etl_contract.HANDLER_ROW_STATE]] == 1
    assert by_alias[aliases[taxi_etl_contract.HANDLER_LOADS_API]] == 2
    assert by_alias[aliases[taxi_etl_contract.HANDLER_AUTHORIZER]] == 1


def test_on_the_constructs_expose_their_aliases(snap_on: tuple[dict[str, Any], EventLog, TaxiEtlSaga]) -> None:
    _, log, taxi = snap_on
    # Given the constructs built with snap_start on
    # When their alias attributes are read
    # Then each is the `live` alias of its function
    pairs = [
        (log.api_alias, log.api_function),
        (taxi.api_alias, taxi.api_function),
        (taxi.row_state_alias, taxi.row_state_function),
        (taxi.loads_api_alias, taxi.loads_api_function),
        (taxi.authorizer_alias, taxi.authorizer_function),
    ]
    for alias, function in pairs:
        assert isinstance(alias, lambda_.Alias)
        assert alias.alias_name == LIVE_ALIAS
        assert alias.version.lambda_ is function


def test_a_configuration_change_publishes_a_new_version_behind_the_same_alias(
    snap_on: tuple[dict[str, Any], EventLog, TaxiEtlSaga],
) -> None:
    template, _, _ = snap_on
    # Given the event log API's version and alias, and the same stack with the API function's memory changed
    function_id = find_function(template, event_log_contract.HANDLER_API)
    alias_id, alias = alias_of(template, function_id)
    changed, _, _ = synth(snap_start=True, api_memory_mb=512)
    # When the changed stack's are read
    changed_alias_id, changed_alias = alias_of(changed, function_id)
    # Then the alias is the same resource, pointing at a new version (a new logical id: CloudFormation publishes it)
    assert changed_alias_id == alias_id
    assert changed_alias["Properties"]["FunctionVersion"] != alias["Properties"]["FunctionVersion"]


def test_on_the_devtools_resolver_reaches_each_routes_function_through_its_alias(
    snap_on: tuple[dict[str, Any], EventLog, TaxiEtlSaga], snap_off: tuple[dict[str, Any], EventLog, TaxiEtlSaga]
) -> None:
    # Given the stacks with SnapStart on (integrations name aliases) and off (they name functions)
    for template, _, _ in (snap_on, snap_off):
        # When each route's and authorizer's function is resolved from the template
        routes = route_functions(template)
        authorizers = authorizer_functions(template)
        # Then every route reaches the function with its handler, and the authorizer reaches the authorizer function
        handlers = {key: template["Resources"][function_id]["Properties"]["Handler"] for key, function_id in routes.items()}
        assert handlers == ROUTE_HANDLERS
        assert list(authorizers.values()) == [find_function(template, taxi_etl_contract.HANDLER_AUTHORIZER)]


def test_off_there_is_no_snap_start_version_or_alias(snap_off: tuple[dict[str, Any], EventLog, TaxiEtlSaga]) -> None:
    template, log, taxi = snap_off
    # Given the stack with the default settings
    # When its functions, versions, aliases, integrations and permissions are read
    functions = resources_of_type(template, "AWS::Lambda::Function").values()
    permissions = [body["Properties"] for body in resources_of_type(template, "AWS::Lambda::Permission").values()]
    # Then nothing has SnapStart, no version or alias exists, and the constructs expose no alias
    assert not [body for body in functions if "SnapStart" in body["Properties"]]
    assert resources_of_type(template, "AWS::Lambda::Version") == {}
    assert resources_of_type(template, "AWS::Lambda::Alias") == {}
    assert (log.api_alias, taxi.api_alias, taxi.row_state_alias, taxi.loads_api_alias, taxi.authorizer_alias) == (None,) * 5
    # And the integrations, the authorizer and API Gateway's permissions name the functions themselves
    function_arns = [arn(find_function(template, handler)) for handler in SNAPSTART_HANDLERS]
    for integration in resources_of_type(template, "AWS::ApiGatewayV2::Integration").values():
        assert integration["Properties"]["IntegrationUri"] in function_arns
    assert all(props["FunctionName"] in function_arns for props in permissions if props["Principal"] == APIGATEWAY)
