"""THE one place that makes Lambda functions.

Every function of every pipeline gets the same shape: the one code asset built from runtime/
alone with its bytecode (lambda_assets.build_code_asset), Python 3.13 (the interpreter the suite
runs) on arm64, Powertools from the AWS-managed layer (resolved at deploy time from its public SSM
parameter for the stack's region), the SDK the suite is tested with from the stack's SDK layer
(lambda_assets.build_sdk_layer; CommonProps.sdk_layer), JSON logs into
its own log group with the configured retention, tracing as CommonProps.tracing says (Lambda's
active tracing by default, with no tracing SDK in the function), and a role that may write only to
that log group until the caller grants it more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_cdk import Annotations, CfnMapping, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from onceflow.infra.common import CommonProps
from onceflow.infra.compliance import acknowledge
from onceflow.infra.lambda_assets import LAMBDA_PYTHON, SDK_VERSIONS, build_code_asset, build_sdk_layer, bytecode_compiler
from onceflow.runtime.shared.contract import TRACING_MODE_VARIABLE, TracingMode

# The interpreter the suite, the demo and the bench run (lambda_assets.LAMBDA_PYTHON; tests/infra/test_interpreter.py).
PYTHON_RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
METRICS_NAMESPACE = "onceflow"
_CODE_ATTRIBUTE = "_onceflow_runtime_code"
_LAYER_ATTRIBUTE = "_onceflow_powertools_layer"
_SDK_LAYER_ATTRIBUTE = "_onceflow_sdk_layer"
_ADOT_LAYER_ATTRIBUTE = "_onceflow_adot_layer"
# The ADOT layer's handler wrapper (AWS_LAMBDA_EXEC_WRAPPER): it starts OpenTelemetry, then the handler.
ADOT_EXEC_WRAPPER = "/opt/otel-instrument"
# The alias a SnapStart function is invoked through (FunctionSpec.snap_start).
LIVE_ALIAS = "live"


@dataclass(frozen=True)
class FunctionSpec:
    """What differs between functions; everything else is the factory's default."""

    handler: str  # e.g. "runtime.runner_stats.handler.handler"
    service: str  # POWERTOOLS_SERVICE_NAME
    description: str
    environment: dict[str, str] = field(default_factory=dict)
    memory_mb: int = 256
    timeout_seconds: int = 30
    reserved_concurrency: int | None = None  # None: the account's unreserved pool
    # SnapStart on published versions, and the LIVE_ALIAS alias on the current version (CreatedFunction.alias).
    snap_start: bool = False

    def __post_init__(self) -> None:
        if not self.handler.startswith("runtime.") or self.handler.count(".") < 2:
            raise ValueError(f"handler {self.handler!r} must be a dotted path inside the runtime package")
        reserved = {name for name in self.environment if name.startswith(("POWERTOOLS_", "AWS_", "OTEL_")) or name == TRACING_MODE_VARIABLE}
        if reserved:
            raise ValueError(f"environment names reserved for the factory: {sorted(reserved)}")


@dataclass(frozen=True)
class CreatedFunction:
    function: lambda_.Function
    role: iam.Role
    log_group: logs.LogGroup
    alias: lambda_.Alias | None = None  # with FunctionSpec.snap_start: what callers invoke


def runtime_code(scope: Construct) -> lambda_.Code:
    """The single code asset of a stack (one per stack: assets belong to a stack): runtime/ and its bytecode."""
    stack = Stack.of(scope)
    code = getattr(stack, _CODE_ATTRIBUTE, None)
    if code is None:
        code = lambda_.Code.from_asset(str(build_code_asset()))
        setattr(stack, _CODE_ATTRIBUTE, code)
        if bytecode_compiler() is None:
            python = "python{}.{}".format(*LAMBDA_PYTHON)
            Annotations.of(stack).add_warning_v2(
                "onceflow:no-bytecode",
                f"No {python} interpreter to compile the functions' code and SDK with, so they ship sources alone and every "
                f"cold start compiles them (slower). Put {python} on PATH (pyenv install {'.'.join(map(str, LAMBDA_PYTHON))}, "
                f"or your system's {python} package) and synthesize again.",
            )
    return code


def sdk_layer(scope: Construct) -> lambda_.ILayerVersion:
    """The stack's SDK layer: the boto3 and botocore the suite is tested with (SDK_VERSIONS), with bytecode."""
    stack = Stack.of(scope)
    layer: lambda_.ILayerVersion | None = getattr(stack, _SDK_LAYER_ATTRIBUTE, None)
    if layer is None:
        versions = ", ".join(f"{name} {version}" for name, version in SDK_VERSIONS.items())
        layer = lambda_.LayerVersion(
            stack,
            "SdkLayer",
            code=lambda_.Code.from_asset(str(build_sdk_layer())),
            compatible_runtimes=[PYTHON_RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description=f"onceflow's AWS SDK for {PYTHON_RUNTIME.name}: {versions}",
        )
        setattr(stack, _SDK_LAYER_ATTRIBUTE, layer)
    return layer


def powertools_parameter(common: CommonProps) -> str:
    """The public SSM parameter Powertools publishes its layer's ARN under, in each region where it
    publishes the layer: /aws/service/powertools/python/<architecture>/<runtime>/<version>
    (ops/preflight.py checks that it resolves in the target region)."""
    return f"/aws/service/powertools/python/{ARCHITECTURE.name}/{PYTHON_RUNTIME.name}/{common.powertools_layer_version}"


def powertools_layer(scope: Construct, common: CommonProps) -> lambda_.ILayerVersion:
    """The AWS-managed Powertools layer for this runtime and architecture, by region."""
    stack = Stack.of(scope)
    layer = getattr(stack, _LAYER_ATTRIBUTE, None)
    if layer is None:
        arn = ssm.StringParameter.value_for_string_parameter(stack, powertools_parameter(common))
        layer = lambda_.LayerVersion.from_layer_version_arn(stack, "PowertoolsLayer", arn)
        setattr(stack, _LAYER_ATTRIBUTE, layer)
    return layer


def adot_layer(scope: Construct, common: CommonProps) -> lambda_.ILayerVersion:
    """The pinned ADOT Python layer of the stack's region (a template mapping: the stack may be region-agnostic)."""
    stack = Stack.of(scope)
    layer = getattr(stack, _ADOT_LAYER_ATTRIBUTE, None)
    if layer is None:
        arns = {region: {"Arn": arn} for region, arn in sorted(common.adot_layer_arns.items())}
        # lazy: a stack in a known region gets the ARN itself (and an unpinned region fails at synth, not deploy)
        mapping = CfnMapping(stack, "AdotPythonLayer", mapping=arns, lazy=True)
        arn = mapping.find_in_map(Stack.of(scope).region, "Arn")
        layer = lambda_.LayerVersion.from_layer_version_arn(stack, "AdotLayer", arn)
        setattr(stack, _ADOT_LAYER_ATTRIBUTE, layer)
    return layer


def uses_adot_layer(common: CommonProps) -> bool:
    """Whether the functions run with the ADOT layer (`adot_layer`): in the OTEL tracing mode."""
    return common.tracing is TracingMode.OTEL


def tracing_configuration(scope: Construct, common: CommonProps) -> tuple[lambda_.Tracing, list[lambda_.ILayerVersion], dict[str, str]]:
    """Lambda's tracing setting, the extra layers and the variables of the construct's tracing mode."""
    mode = common.tracing
    environment = {TRACING_MODE_VARIABLE: mode.value}
    if not uses_adot_layer(common):
        return (lambda_.Tracing.ACTIVE if mode.lambda_active_tracing else lambda_.Tracing.DISABLED), [], environment
    # Spans go to X-Ray through Lambda's daemon (active tracing); Application Signals stays off, since it
    # needs its own managed policy and bills per span.
    environment |= {"AWS_LAMBDA_EXEC_WRAPPER": ADOT_EXEC_WRAPPER, "OTEL_AWS_APPLICATION_SIGNALS_ENABLED": "false"}
    return lambda_.Tracing.ACTIVE, [adot_layer(scope, common)], environment


def create_function(scope: Construct, construct_id: str, spec: FunctionSpec, common: CommonProps) -> CreatedFunction:
    log_group = logs.LogGroup(
        scope,
        f"{construct_id}Logs",
        retention=common.log_retention,
        removal_policy=common.removal_policy,
    )
    role = iam.Role(
        scope,
        f"{construct_id}Role",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description=f"{spec.description} (least privilege; grants added by its construct)",
    )
    # Its own log group only, instead of the account-wide AWSLambdaBasicExecutionRole.
    log_group.grant_write(role)
    tracing, tracing_layers, tracing_environment = tracing_configuration(scope, common)
    function = lambda_.Function(
        scope,
        construct_id,
        runtime=PYTHON_RUNTIME,
        architecture=ARCHITECTURE,
        code=runtime_code(scope),
        handler=spec.handler,
        snap_start=lambda_.SnapStartConf.ON_PUBLISHED_VERSIONS if spec.snap_start else None,
        description=spec.description,
        role=role,
        memory_size=spec.memory_mb,
        timeout=Duration.seconds(spec.timeout_seconds),
        reserved_concurrent_executions=spec.reserved_concurrency,
        # The SDK layer last: Lambda unpacks layers in this order into /opt, so its files win where another
        # layer (Powertools, ADOT) ships the same package.
        layers=[powertools_layer(scope, common), *tracing_layers, *([sdk_layer(scope)] if common.sdk_layer else [])],
        tracing=tracing,
        log_group=log_group,
        logging_format=lambda_.LoggingFormat.JSON,
        application_log_level_v2=lambda_.ApplicationLogLevel(common.log_level if common.log_level != "WARNING" else "WARN"),
        system_log_level_v2=lambda_.SystemLogLevel.WARN,
        environment={
            "POWERTOOLS_SERVICE_NAME": spec.service,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            "POWERTOOLS_LOG_LEVEL": common.log_level,
            **tracing_environment,
            **spec.environment,
        },
    )
    # The log group's grant made the default policy, so it exists now.
    tracing_actions = "xray:PutTraceSegments and xray:PutTelemetryRecords (tracing) and, " if tracing == lambda_.Tracing.ACTIVE else ""
    acknowledge(
        role.node.find_child("DefaultPolicy").node.default_child,  # type: ignore[arg-type]
        "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
        f"Only actions that support no resource-level permissions use '*': {tracing_actions}"
        "for a DynamoDB stream consumer, dynamodb:ListStreams; every other statement of this role names its own resources.",
    )
    runtime_reason = (
        f"{PYTHON_RUNTIME.name} on purpose, not the newest runtime: it is the interpreter the handlers are tested, "
        "benchmarked and compiled to bytecode with (the code asset and the SDK layer carry its .pyc files); "
        "a newer one would run untested code and compile at every cold start."
    )
    for rule in ("AwsSolutions::AwsSolutions-L1", "Serverless::Serverless-LambdaLatestVersion"):
        acknowledge(function.node.default_child, rule, runtime_reason)  # type: ignore[arg-type]
    alias = live_alias(scope, construct_id, function) if spec.snap_start else None
    return CreatedFunction(function=function, role=role, log_group=log_group, alias=alias)


def live_alias(scope: Construct, construct_id: str, function: lambda_.Function) -> lambda_.Alias:
    """The LIVE_ALIAS alias on the function's current version: CDK publishes a new version whenever
    the function's code or configuration changes (the version's logical id is a hash of them), and
    the alias moves to it. SnapStart snapshots a version when it is published; callers (API
    integrations, authorizers) invoke the alias, so every restore is of the latest snapshot.

    The superseded version is deleted once the alias has moved (CloudFormation's cleanup phase):
    SnapStart for Python bills each version's cached snapshot for as long as the version exists.
    """
    version = function.current_version
    version.apply_removal_policy(RemovalPolicy.DESTROY)
    return lambda_.Alias(scope, f"{construct_id}{LIVE_ALIAS.capitalize()}Alias", alias_name=LIVE_ALIAS, version=version)
