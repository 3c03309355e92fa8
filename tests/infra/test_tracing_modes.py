"""Tracing modes (CommonProps.tracing), per construct: what each puts in the template, and the
repository's choice per environment.

ACTIVE (the default) and SDK differ only in the variable that makes the runtime create Powertools'
Tracer; OTEL adds the pinned ADOT layer and its wrapper; OFF turns Lambda's and Step Functions'
tracing off, and with it the X-Ray statement of every function's role.

The modes are the project's functions' (those running `runtime.` handlers). The taxi stack also holds
CDK's inline BucketNotificationsHandler, which puts the ingest bucket's notification configuration at
deploy time: CDK gives it no tracing, layers or environment whatever the mode, so it is not traced in
ACTIVE, SDK or OTEL either. The tests name it as the only such function (a second one fails them).
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from devtools.aws.template_resources import resources_of_type
from onceflow.constructs import (
    CommonProps,
    ConfigError,
    EventLog,
    EventLogProps,
    RunnerStatsPipeline,
    RunnerStatsPipelineProps,
    TaxiEtlSaga,
    TaxiEtlSagaProps,
    TracingMode,
)
from onceflow.infra.common import ADOT_PYTHON_LAYER_ARNS
from onceflow.infra.config import ENVIRONMENTS
from onceflow.infra.lambda_factory import ADOT_EXEC_WRAPPER
from runtime.shared.contract import TRACING_MODE_VARIABLE
from tests.infra.template_queries import sdk_layer_ref

XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}


def synth(common: CommonProps, *, region: str | None = None) -> dict[str, Any]:
    """All three pipelines in one stack, as a team would compose them, with the same CommonProps."""
    stack = Stack(App(), "Team", env={"region": region} if region else None)
    RunnerStatsPipeline(stack, "Runs", RunnerStatsPipelineProps(common=common))
    EventLog(stack, "Sheets", EventLogProps(common=common))
    TaxiEtlSaga(stack, "Taxis", TaxiEtlSagaProps(common=common))
    return Template.from_stack(stack).to_json()


def functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The project's functions (their handlers are in the runtime package), by logical id."""
    return {
        name: resource["Properties"]
        for name, resource in resources_of_type(template, "AWS::Lambda::Function").items()
        if str(resource["Properties"].get("Handler", "")).startswith("runtime.")
    }


def assert_only_cdk_untraced_deploy_time_handler(template: dict[str, Any]) -> None:
    """The template's other functions are exactly CDK's bucket notifications handler, with no tracing, layer or environment."""
    others = {name: resource["Properties"] for name, resource in resources_of_type(template, "AWS::Lambda::Function").items()}
    for name in functions(template):
        others.pop(name)
    ((name, handler),) = others.items()
    assert name.startswith("BucketNotificationsHandler"), name
    assert handler["Description"] == 'AWS CloudFormation handler for "Custom::S3BucketNotifications" resources (@aws-cdk/aws-s3)'
    assert not {"TracingConfig", "Layers", "Environment"} & set(handler), sorted(handler)


def xray_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    statements = []
    for policy in resources_of_type(template, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if XRAY_ACTIONS & set(actions):
                statements.append(statement)
    return statements


@pytest.fixture(scope="module")
def templates() -> dict[TracingMode, dict[str, Any]]:
    return {mode: synth(CommonProps(tracing=mode)) for mode in TracingMode}


@pytest.mark.parametrize("mode", [TracingMode.ACTIVE, TracingMode.SDK])
def test_active_and_sdk_trace_every_function_and_the_state_machine_and_differ_only_in_the_runtime_variable(
    templates: dict[TracingMode, dict[str, Any]], mode: TracingMode
) -> None:
    # Given the three pipelines built with the mode
    template = templates[mode]
    # Then every function of the project has Lambda's active tracing, tells the runtime its mode, and runs no ADOT layer
    # or wrapper (CDK's deploy-time bucket notifications handler is not traced: see the module's docstring)
    assert_only_cdk_untraced_deploy_time_handler(template)
    for name, function in functions(template).items():
        assert function["TracingConfig"] == {"Mode": "Active"}, name
        variables = function["Environment"]["Variables"]
        assert variables[TRACING_MODE_VARIABLE] == mode.value, name
        assert "AWS_LAMBDA_EXEC_WRAPPER" not in variables, name
        assert len(function["Layers"]) == 2, name  # Powertools' and the SDK's
    # And the state machines trace too (the taxi saga's and its bulk route's), and every role may send its segments
    machines = resources_of_type(template, "AWS::StepFunctions::StateMachine").values()
    assert len(machines) == 2
    for machine in machines:
        assert machine["Properties"]["TracingConfiguration"] == {"Enabled": True}
    assert len(xray_statements(template)) == len(functions(template)) + len(machines)  # each function's role, each machine's
    assert "Mappings" not in template or "AdotPythonLayer" not in template["Mappings"]


def test_sdk_and_active_templates_are_the_same_but_for_the_mode_variable(templates: dict[TracingMode, dict[str, Any]]) -> None:
    # Given the templates of the two modes, When the mode variable is taken out of both
    def without_mode(template: dict[str, Any]) -> dict[str, Any]:
        for function in functions(template).values():
            function["Environment"]["Variables"].pop(TRACING_MODE_VARIABLE)
        return template

    # Then nothing else differs: the SDK mode costs nothing in the template, only in the function
    assert without_mode(synth(CommonProps(tracing=TracingMode.SDK))) == without_mode(synth(CommonProps()))


def test_otel_adds_the_pinned_adot_layer_of_the_region_and_its_wrapper(templates: dict[TracingMode, dict[str, Any]]) -> None:
    # Given the pipelines built with the OTEL mode in a region-agnostic stack
    template = templates[TracingMode.OTEL]
    # Then the template maps each pinned region to its layer version ARN
    assert template["Mappings"]["AdotPythonLayer"] == {region: {"Arn": arn} for region, arn in ADOT_PYTHON_LAYER_ARNS.items()}
    assert ADOT_PYTHON_LAYER_ARNS["us-east-1"].endswith(":layer:AWSOpenTelemetryDistroPython:25")
    # And every function of the project runs Powertools' layer and the mapped ADOT layer, through the ADOT wrapper, with
    # active tracing (CDK's deploy-time bucket notifications handler takes none of them)
    assert_only_cdk_untraced_deploy_time_handler(template)
    for name, function in functions(template).items():
        assert function["Layers"][1] == {"Fn::FindInMap": ["AdotPythonLayer", {"Ref": "AWS::Region"}, "Arn"]}, name
        # the SDK layer last, so its boto3 and botocore win over any copy in the layers before it
        assert function["Layers"][2] == sdk_layer_ref(template), name
        variables = function["Environment"]["Variables"]
        assert variables["AWS_LAMBDA_EXEC_WRAPPER"] == ADOT_EXEC_WRAPPER, name
        assert variables["OTEL_AWS_APPLICATION_SIGNALS_ENABLED"] == "false", name
        assert variables[TRACING_MODE_VARIABLE] == "otel", name
        assert function["TracingConfig"] == {"Mode": "Active"}, name


def test_otel_in_a_region_of_its_own_resolves_the_layer_of_that_region() -> None:
    # Given a stack pinned to a region and an ADOT layer ARN supplied for it
    arn = "arn:aws:lambda:eu-west-1:615299751070:layer:AWSOpenTelemetryDistroPython:19"
    template = synth(CommonProps(tracing=TracingMode.OTEL, adot_layer_arns={"eu-west-1": arn}), region="eu-west-1")
    # Then the functions carry that layer's ARN
    assert {function["Layers"][1] for function in functions(template).values()} == {arn}


def test_off_traces_nothing_and_grants_no_xray(templates: dict[TracingMode, dict[str, Any]]) -> None:
    # Given the pipelines built with tracing OFF
    template = templates[TracingMode.OFF]
    # Then no function (CDK's deploy-time bucket notifications handler included), nor any state machine, traces, and no
    # role may send segments
    assert_only_cdk_untraced_deploy_time_handler(template)
    for name, function in functions(template).items():
        assert "TracingConfig" not in function or function["TracingConfig"] == {"Mode": "PassThrough"}, name
        assert function["Environment"]["Variables"][TRACING_MODE_VARIABLE] == "off", name
    machines = resources_of_type(template, "AWS::StepFunctions::StateMachine").values()
    assert len(machines) == 2
    for machine in machines:
        assert machine["Properties"].get("TracingConfiguration", {"Enabled": False}) == {"Enabled": False}
    assert xray_statements(template) == []


@pytest.mark.parametrize(
    ("common", "message"),
    [
        (
            CommonProps(tracing="sdk"),  # type: ignore[arg-type]
            r"tracing must be a TracingMode \(TracingMode.ACTIVE, TracingMode.SDK, TracingMode.OTEL, TracingMode.OFF\)",
        ),
        (
            CommonProps(adot_layer_arns={"eu-west-1": "arn:aws:lambda:us-east-1:615299751070:layer:AWSOpenTelemetryDistroPython:25"}),
            r"adot_layer_arns\['eu-west-1'\] must be that region's AWSOpenTelemetryDistroPython layer version ARN",
        ),
        (CommonProps(tracing=TracingMode.OTEL, adot_layer_arns={}), r"tracing OTEL needs the ADOT layer of at least one region"),
    ],
)
def test_a_wrong_tracing_prop_is_refused_before_anything_is_built(common: CommonProps, message: str) -> None:
    # Given props with a wrong tracing setting, When a construct is built with them, Then synth stops naming the field
    with pytest.raises(ConfigError, match=message):
        TaxiEtlSaga(Stack(App(), "Team"), "Taxis", TaxiEtlSagaProps(common=common))


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
def test_each_environment_traces_with_lambda_and_no_sdk(env_name: str) -> None:
    # Given the repository's environments, Then each chose the default mode: Lambda's traces, no tracing SDK
    config = ENVIRONMENTS[env_name]
    assert config.tracing is TracingMode.ACTIVE
    assert config.common.tracing is TracingMode.ACTIVE


def test_otel_in_a_region_with_no_pinned_layer_fails_at_synth() -> None:
    # Given a stack pinned to a region for which no ADOT layer is pinned or supplied
    # When it is built with the OTEL mode, Then synth stops, naming the missing region, instead of failing at deploy
    with pytest.raises(RuntimeError, match="eu-west-3"):
        synth(CommonProps(tracing=TracingMode.OTEL), region="eu-west-3")
