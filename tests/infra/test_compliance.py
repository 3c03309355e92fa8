"""cdk-nag (as CDK policy-validation plugins) runs on every synth, and its acknowledgements stay narrow.

A finding that is not acknowledged makes `app.synth()` raise, so the session fixtures
`dev_templates` / `prod_templates` already prove the real app has none; these tests make that
explicit, prove the checks really fail on a bad resource, and pin down every acknowledgement.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, CfnResource, Stack, Stage
from aws_cdk import aws_sqs as sqs
from constructs import IConstruct

from app import build_app
from devtools.aws.template_resources import cdk_context
from onceflow.infra.compliance import acknowledge, add_compliance_checks
from onceflow.infra.config import load_config
from tests.conftest import assembly_for

ENVS = ("dev", "prod")
PLUGINS = {"AwsSolutions", "Serverless"}
# How CDK (2.275) records `Validations.of(scope).acknowledge(...)` on the construct.
ACKNOWLEDGED_RULES_METADATA = "aws:cdk:acknowledged-rules"
# The stacks build_app creates per environment: "<stack_prefix>-<suffix>".
STACK_SUFFIXES = ("Alarms", "RunnerStats", "EventLog", "TaxiEtl")
# The complete inventory: (stack suffix, construct path inside the stack, rule) -> the one
# CloudFormation resource type the acknowledged construct wraps. A new acknowledgement must be
# added here, in review.
_TAXI_ETL_FUNCTIONS = (
    "Validation",
    "Transformation",
    "Store",
    "Flag",
    "Api",
    "Authorizer",
    "RowState",
    "BulkPlan",
    "BulkChunk",
    "BulkReport",
    "LoadsApi",
    "LoadStarter",
)
_BULK_EXECUTIONS = (
    "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:{kind}:"
    '{{"Fn::Select":[6,{{"Fn::Split":[":",{{"Ref":"TaxiEtlBulkStateMachine479724BD"}}]}}]}}{suffix}:*'
)
_ACKNOWLEDGED_IN_EVERY_ENV = {
    ("RunnerStats", "RunnerStats/FailureQueue/Resource", "AwsSolutions::AwsSolutions-SQS3"): "AWS::SQS::Queue",
    ("RunnerStats", "RunnerStats/FailureQueue/Resource", "Serverless::Serverless-SQSRedrivePolicy"): "AWS::SQS::Queue",
    ("RunnerStats", "RunnerStats/Handler/Resource", "Serverless::Serverless-LambdaDLQ"): "AWS::Lambda::Function",
    ("RunnerStats", "RunnerStats/HandlerRole/DefaultPolicy/Resource", "AwsSolutions::AwsSolutions-IAM5[Resource::*]"): "AWS::IAM::Policy",
    # EventLog: the two dead-letter queues and the stream's on-failure queue have no DLQ of their own
    ("EventLog", "EventLog/SnapshotDeadLetterQueue/Resource", "Serverless::Serverless-SQSRedrivePolicy"): "AWS::SQS::Queue",
    ("EventLog", "EventLog/PayloadDeadLetterQueue/Resource", "Serverless::Serverless-SQSRedrivePolicy"): "AWS::SQS::Queue",
    ("EventLog", "EventLog/StreamFailureQueue/Resource", "AwsSolutions::AwsSolutions-SQS3"): "AWS::SQS::Queue",
    ("EventLog", "EventLog/StreamFailureQueue/Resource", "Serverless::Serverless-SQSRedrivePolicy"): "AWS::SQS::Queue",
    # EventLog: no function is invoked asynchronously, so none has a function DLQ
    ("EventLog", "EventLog/ApiHandler/Resource", "Serverless::Serverless-LambdaDLQ"): "AWS::Lambda::Function",
    ("EventLog", "EventLog/RouterHandler/Resource", "Serverless::Serverless-LambdaDLQ"): "AWS::Lambda::Function",
    ("EventLog", "EventLog/SnapshotWorker/Resource", "Serverless::Serverless-LambdaDLQ"): "AWS::Lambda::Function",
    ("EventLog", "EventLog/PayloadFinalizer/Resource", "Serverless::Serverless-LambdaDLQ"): "AWS::Lambda::Function",
    ("EventLog", "EventLog/PendingCheck/Resource", "Serverless::Serverless-LambdaDLQ"): "AWS::Lambda::Function",
    # EventLog: the pending check's schedule carries no data; a failed delivery is replaced by the next run
    ("EventLog", "EventLog/PendingCheckSchedule/Resource", "Serverless::Serverless-EventBusDLQ"): "AWS::Events::Rule",
    # EventLog: the X-Ray statement of every role (the Lambda factory's acknowledgement)
    ("EventLog", "EventLog/ApiHandlerRole/DefaultPolicy/Resource", "AwsSolutions::AwsSolutions-IAM5[Resource::*]"): "AWS::IAM::Policy",
    ("EventLog", "EventLog/RouterHandlerRole/DefaultPolicy/Resource", "AwsSolutions::AwsSolutions-IAM5[Resource::*]"): "AWS::IAM::Policy",
    ("EventLog", "EventLog/SnapshotWorkerRole/DefaultPolicy/Resource", "AwsSolutions::AwsSolutions-IAM5[Resource::*]"): "AWS::IAM::Policy",
    (
        "EventLog",
        "EventLog/PayloadFinalizerRole/DefaultPolicy/Resource",
        "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
    ): "AWS::IAM::Policy",
    ("EventLog", "EventLog/PendingCheckRole/DefaultPolicy/Resource", "AwsSolutions::AwsSolutions-IAM5[Resource::*]"): "AWS::IAM::Policy",
    # EventLog: object wildcards under one prefix of the construct's own bucket, each on one role
    (
        "EventLog",
        "EventLog/ApiHandlerRole/DefaultPolicy/Resource",
        "AwsSolutions::AwsSolutions-IAM5[Resource::<EventLogBucket7DE35D8B.Arn>/payloads/*]",
    ): "AWS::IAM::Policy",
    (
        "EventLog",
        "EventLog/ApiHandlerRole/DefaultPolicy/Resource",
        "AwsSolutions::AwsSolutions-IAM5[Resource::<EventLogBucket7DE35D8B.Arn>/snapshots/*]",
    ): "AWS::IAM::Policy",
    (
        "EventLog",
        "EventLog/SnapshotWorkerRole/DefaultPolicy/Resource",
        "AwsSolutions::AwsSolutions-IAM5[Resource::<EventLogBucket7DE35D8B.Arn>/snapshots/*]",
    ): "AWS::IAM::Policy",
    (
        "EventLog",
        "EventLog/PayloadFinalizerRole/DefaultPolicy/Resource",
        "AwsSolutions::AwsSolutions-IAM5[Resource::<EventLogBucket7DE35D8B.Arn>/payloads/*]",
    ): "AWS::IAM::Policy",
    # TaxiEtl: every function is invoked synchronously (state machine, API Gateway), none has a function DLQ
    # (the bulk functions too: the bulk state machine, API Gateway, and the starter's SQS event source)
    **{
        ("TaxiEtl", f"TaxiEtl/{name}Function/Resource", "Serverless::Serverless-LambdaDLQ"): "AWS::Lambda::Function"
        for name in _TAXI_ETL_FUNCTIONS
    },
    # TaxiEtl: the X-Ray statement of every function's role (the Lambda factory's acknowledgement)
    **{
        (
            "TaxiEtl",
            f"TaxiEtl/{name}FunctionRole/DefaultPolicy/Resource",
            "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
        ): "AWS::IAM::Policy"
        for name in _TAXI_ETL_FUNCTIONS
    },
    # TaxiEtl bulk route: object wildcards under one prefix of the ingest bucket, each on one role
    **{
        (
            "TaxiEtl",
            f"TaxiEtl/{name}FunctionRole/DefaultPolicy/Resource",
            "AwsSolutions::AwsSolutions-IAM5[Resource::<TaxiEtlIngestBucket32077F3C.Arn>/incoming/*]",
        ): "AWS::IAM::Policy"
        for name in ("BulkPlan", "BulkChunk", "LoadsApi")
    },
    **{
        (
            "TaxiEtl",
            f"TaxiEtl/{name}FunctionRole/DefaultPolicy/Resource",
            "AwsSolutions::AwsSolutions-IAM5[Resource::<TaxiEtlIngestBucket32077F3C.Arn>/loads/*]",
        ): "AWS::IAM::Policy"
        for name in ("BulkPlan", "BulkChunk", "BulkReport", "LoadsApi")
    },
    # TaxiEtl bulk route: its state machine reads manifests under loads/, invokes its three functions, logs and traces
    (
        "TaxiEtl",
        "TaxiEtl/BulkStateMachine/Role/DefaultPolicy/Resource",
        "AwsSolutions::AwsSolutions-IAM5[Resource::<TaxiEtlIngestBucket32077F3C.Arn>/loads/*]",
    ): "AWS::IAM::Policy",
    **{
        (
            "TaxiEtl",
            "TaxiEtl/BulkStateMachine/Role/DefaultPolicy/Resource",
            f"AwsSolutions::AwsSolutions-IAM5[Resource::<TaxiEtl{function}.Arn>:*]",
        ): "AWS::IAM::Policy"
        for function in ("BulkPlanFunction6E2C945E", "BulkChunkFunctionC177CCC7", "BulkReportFunction9E794B0C")
    },
    ("TaxiEtl", "TaxiEtl/BulkStateMachine/Role/DefaultPolicy/Resource", "AwsSolutions::AwsSolutions-IAM5[Resource::*]"): "AWS::IAM::Policy",
    # TaxiEtl bulk route: CDK's Distributed Map policy on the machine's own child executions and labelled map runs
    **{
        (
            "TaxiEtl",
            "TaxiEtl/BulkStateMachine/DistributedMapPolicy/Resource",
            f"AwsSolutions::AwsSolutions-IAM5[Resource::{_BULK_EXECUTIONS.format(kind='execution', suffix=suffix)}]",
        ): "AWS::IAM::Policy"
        for suffix in ("", "/Chunks")
    },
    # TaxiEtl bulk route: the loads API and the starter read the bulk machine's executions (load ids known at run
    # time); the loads API describes its map runs
    **{
        (
            "TaxiEtl",
            f"TaxiEtl/{name}FunctionRole/DefaultPolicy/Resource",
            f"AwsSolutions::AwsSolutions-IAM5[Resource::{_BULK_EXECUTIONS.format(kind='execution', suffix='')}]",
        ): "AWS::IAM::Policy"
        for name in ("LoadsApi", "LoadStarter")
    },
    (
        "TaxiEtl",
        "TaxiEtl/LoadsApiFunctionRole/DefaultPolicy/Resource",
        f"AwsSolutions::AwsSolutions-IAM5[Resource::{_BULK_EXECUTIONS.format(kind='mapRun', suffix='/Chunks')}]",
    ): "AWS::IAM::Policy",
    # TaxiEtl bulk route: the starter's dead-letter queue has none of its own
    ("TaxiEtl", "TaxiEtl/LoadStarterDeadLetterQueue/Resource", "Serverless::Serverless-SQSRedrivePolicy"): "AWS::SQS::Queue",
    # TaxiEtl bulk route: CDK's deploy-time bucket notifications handler runs with CDK's managed basic execution policy
    (
        "TaxiEtl",
        "BucketNotificationsHandler050a0587b7544547bf325f094a3db834/Role/Resource",
        "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
    ): "AWS::IAM::Role",
    # TaxiEtl: the state machine may invoke each of its four functions (and their versions), log and trace
    **{
        (
            "TaxiEtl",
            "TaxiEtl/StateMachine/Role/DefaultPolicy/Resource",
            f"AwsSolutions::AwsSolutions-IAM5[Resource::<TaxiEtl{function}.Arn>:*]",
        ): "AWS::IAM::Policy"
        for function in (
            "ValidationFunction29AF2C6A",
            "TransformationFunctionB66B77B4",
            "StoreFunction773AFA53",
            "FlagFunction3853FC0E",
        )
    },
    ("TaxiEtl", "TaxiEtl/StateMachine/Role/DefaultPolicy/Resource", "AwsSolutions::AwsSolutions-IAM5[Resource::*]"): "AWS::IAM::Policy",
    # TaxiEtl: the API reads the executions of its one state machine (names known at run time)
    (
        "TaxiEtl",
        "TaxiEtl/ApiFunctionRole/DefaultPolicy/Resource",
        "AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:"
        '{"Fn::Select":[6,{"Fn::Split":[":",{"Ref":"TaxiEtlStateMachine72705BD6"}]}]}:*]',
    ): "AWS::IAM::Policy",
    # TaxiEtl: a shared API key is rotated by the operator, with its clients
    ("TaxiEtl", "TaxiEtl/ApiKeySecret/Resource", "AwsSolutions::AwsSolutions-SMG4"): "AWS::SecretsManager::Secret",
    # Every function runs python3.13, the suite's interpreter and its bytecode's, not the newest runtime
    # (the Lambda factory's acknowledgement)
    **{
        (suffix, f"{suffix}/{function}/Resource", rule): "AWS::Lambda::Function"
        for suffix, function in (
            ("RunnerStats", "Handler"),
            *(("EventLog", name) for name in ("ApiHandler", "RouterHandler", "SnapshotWorker", "PayloadFinalizer", "PendingCheck")),
            *(("TaxiEtl", f"{name}Function") for name in _TAXI_ETL_FUNCTIONS),
        )
        for rule in ("AwsSolutions::AwsSolutions-L1", "Serverless::Serverless-LambdaLatestVersion")
    },
}
# An SQS event source's construct id embeds the queue's unique id (stack name + path hash), so the
# paths of the two SQS event source mappings differ per environment.
_ESM_DESTINATION = "Serverless::Serverless-LambdaEventSourceMappingDestination"
EXPECTED_ACKNOWLEDGEMENTS = {
    "dev": {
        **_ACKNOWLEDGED_IN_EVERY_ENV,
        (
            "TaxiEtl",
            "TaxiEtl/LoadStarterFunction/SqsEventSource:OnceflowdevTaxiEtlLoadStarterQueue63F3C273/Resource",
            _ESM_DESTINATION,
        ): "AWS::Lambda::EventSourceMapping",
        (
            "EventLog",
            "EventLog/SnapshotWorker/SqsEventSource:OnceflowdevEventLogSnapshotQueueFD767561/Resource",
            _ESM_DESTINATION,
        ): "AWS::Lambda::EventSourceMapping",
        (
            "EventLog",
            "EventLog/PayloadFinalizer/SqsEventSource:OnceflowdevEventLogPayloadQueue089C1340/Resource",
            _ESM_DESTINATION,
        ): "AWS::Lambda::EventSourceMapping",
    },
    "prod": {
        **_ACKNOWLEDGED_IN_EVERY_ENV,
        # prod's state machine logs failures only, without row content (taxi_etl.execution_log_level)
        ("TaxiEtl", "TaxiEtl/StateMachine/Resource", "AwsSolutions::AwsSolutions-SF1"): "AWS::StepFunctions::StateMachine",
        ("TaxiEtl", "TaxiEtl/BulkStateMachine/Resource", "AwsSolutions::AwsSolutions-SF1"): "AWS::StepFunctions::StateMachine",
        (
            "TaxiEtl",
            "TaxiEtl/LoadStarterFunction/SqsEventSource:OnceflowprodTaxiEtlLoadStarterQueue854799E1/Resource",
            _ESM_DESTINATION,
        ): "AWS::Lambda::EventSourceMapping",
        (
            "EventLog",
            "EventLog/SnapshotWorker/SqsEventSource:OnceflowprodEventLogSnapshotQueueDAE16042/Resource",
            _ESM_DESTINATION,
        ): "AWS::Lambda::EventSourceMapping",
        (
            "EventLog",
            "EventLog/PayloadFinalizer/SqsEventSource:OnceflowprodEventLogPayloadQueue9DE4C293/Resource",
            _ESM_DESTINATION,
        ): "AWS::Lambda::EventSourceMapping",
    },
}
MIN_REASON_LENGTH = 40  # a sentence, not "ok" or "n/a"
# jsii surfaces the failure as RuntimeError("ValidationFailed: ..."); the wording after it varies.
VALIDATION_FAILED = r"ValidationFailed|Validation failed"


def report_of(outdir: Path) -> dict[str, Any]:
    report = outdir / "validation-report.json"
    # CDK writes the report whenever a plugin ran; without one there was nothing to report.
    return json.loads(report.read_text()) if report.exists() else {"pluginReports": []}


def stack_suffixes(env_name: str) -> dict[str, str]:
    """Stack name -> stack suffix, for every stack the app builds in the environment."""
    prefix = load_config(env_name).stack_prefix
    return {f"{prefix}-{suffix}": suffix for suffix in STACK_SUFFIXES}


def stack_of(env_name: str, construct_path: str) -> tuple[str, str]:
    """(stack name, stack suffix) of the app's stack a construct path lies in."""
    stack_name = construct_path.split("/", 1)[0]
    suffixes = stack_suffixes(env_name)
    assert stack_name in suffixes, f"{construct_path} is not inside one of the app's stacks {sorted(suffixes)}"
    return stack_name, suffixes[stack_name]


def acknowledgements(app: App) -> list[tuple[IConstruct, str, str]]:
    """(construct, rule, reason) for every acknowledgement anywhere in the construct tree."""
    found = []
    for construct in app.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == ACKNOWLEDGED_RULES_METADATA:
                found.extend((construct, rule, reason) for rule, reason in entry.data.items())
    return found


@pytest.fixture(scope="module", params=ENVS)
def synthesized(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """The real app synthesized (with cdk-nag) into a directory, so its validation report is readable:
    the session's synth of that environment."""
    return str(request.param), assembly_for(str(request.param))


@pytest.fixture(scope="module", params=ENVS)
def built_app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, App]:
    """The real app, built but not synthesized: its construct tree with the acknowledgements."""
    outdir = tmp_path_factory.mktemp(f"{request.param}-unsynthesized")
    return str(request.param), build_app(App(context=cdk_context(str(request.param)), outdir=str(outdir)))


# --- the real app passes ----------------------------------------------------------------------


def test_dev_and_prod_synthesize_with_the_checks_on(dev_templates: dict[str, Any], prod_templates: dict[str, Any]) -> None:
    # Given the session's synth of both environments, with cdk-nag added by build_app
    # When synth ran (it raises on any unacknowledged finding)
    # Then it produced each environment's stacks, and only those
    assert set(dev_templates) == {f"{load_config('dev').stack_prefix}-{suffix}" for suffix in STACK_SUFFIXES}
    assert set(prod_templates) == {f"{load_config('prod').stack_prefix}-{suffix}" for suffix in STACK_SUFFIXES}
    assert set(dev_templates) == {"Onceflow-dev-Alarms", "Onceflow-dev-RunnerStats", "Onceflow-dev-EventLog", "Onceflow-dev-TaxiEtl"}
    assert set(prod_templates) == {"Onceflow-prod-Alarms", "Onceflow-prod-RunnerStats", "Onceflow-prod-EventLog", "Onceflow-prod-TaxiEtl"}


def test_validation_report_has_no_unacknowledged_findings(synthesized: tuple[str, Path]) -> None:
    # Given the validation report of a synth into a directory
    _, outdir = synthesized
    report = report_of(outdir)
    # When we read every plugin's conclusion
    reports = {plugin["pluginName"]: plugin for plugin in report["pluginReports"]}
    # Then both rule packs ran and succeeded with no open violations
    assert set(reports) == PLUGINS
    for name, plugin in reports.items():
        assert plugin["conclusion"] == "success", name
        assert plugin["violations"] == [], f"{name}: {plugin['violations']}"


def test_every_suppressed_finding_is_acknowledged_on_its_own_resource(synthesized: tuple[str, Path]) -> None:
    # Given the findings the report lists as acknowledged
    env_name, outdir = synthesized
    suppressed = [finding for plugin in report_of(outdir)["pluginReports"] for finding in plugin["suppressedViolations"]]
    assert suppressed, "expected the known acknowledged findings in the report"
    # When we compare where each was acknowledged with where it was found
    found = set()
    for finding in suppressed:
        acknowledged_at = finding["acknowledgedAt"]
        # Then the acknowledgement sits below one of the app's stacks (never on the app or a stack),
        # names the finding it acknowledges, gives a reason, and covers only constructs inside that scope
        stack_name, suffix = stack_of(env_name, acknowledged_at)
        assert acknowledged_at.startswith(f"{stack_name}/"), acknowledged_at
        assert acknowledged_at.count("/") >= 2, f"acknowledged too high up: {acknowledged_at}"
        assert len(finding["reason"].strip()) >= MIN_REASON_LENGTH
        assert finding["acknowledgedId"].endswith(finding["ruleName"])
        for violating in finding["violatingConstructs"]:
            path = violating["constructPath"]
            assert path == acknowledged_at or path.startswith(f"{acknowledged_at}/")
        found.add((suffix, acknowledged_at.removeprefix(f"{stack_name}/"), finding["acknowledgedId"]))
    # and every stack's findings are exactly the reviewed inventory of that environment
    assert found == set(EXPECTED_ACKNOWLEDGEMENTS[env_name])


def test_acknowledgements_are_exactly_the_reviewed_ones_each_on_one_resource(built_app: tuple[str, App]) -> None:
    # Given the construct tree of the app before synth
    env_name, app = built_app
    # When we collect the acknowledgement metadata recorded on its constructs
    found = acknowledgements(app)
    assert found, f"no {ACKNOWLEDGED_RULES_METADATA!r} metadata found; has CDK changed how it records acknowledgements?"
    inventory = {}
    for construct, rule, reason in found:
        # Then none is on the app, a stage or a stack (which would silence a rule everywhere below)
        assert not Stage.is_stage(construct) and not Stack.is_stack(construct), f"{rule} acknowledged on {construct.node.path}"
        # and each is on a construct standing for exactly one CloudFormation resource
        resource = construct if CfnResource.is_cfn_resource(construct) else construct.node.default_child
        assert resource is not None and CfnResource.is_cfn_resource(resource), construct.node.path
        # and has a real reason
        assert len(reason.strip()) >= MIN_REASON_LENGTH, f"{rule} on {construct.node.path}: {reason!r}"
        # and wildcard IAM findings are acknowledged for one specific finding, not the whole rule
        if rule in {"AwsSolutions::AwsSolutions-IAM4", "AwsSolutions::AwsSolutions-IAM5"}:
            pytest.fail(f"{rule} on {construct.node.path} must name the finding, e.g. IAM5[Resource::*]")
        _, suffix = stack_of(env_name, construct.node.path)
        path = construct.node.path.split("/", 1)[1]  # inside the stack
        key = (suffix, path, rule)
        assert key not in inventory, f"{rule} acknowledged twice on {construct.node.path}"
        inventory[key] = resource.cfn_resource_type  # type: ignore[union-attr]
    # and they are exactly the reviewed inventory, each on the resource type it is about
    assert inventory == EXPECTED_ACKNOWLEDGEMENTS[env_name]


# --- the checks really fail -------------------------------------------------------------------


def test_an_unencrypted_queue_without_dlq_or_tls_fails_synth(tmp_path: Path) -> None:
    # Given a throwaway app with the project's compliance checks and a careless queue
    app = App(outdir=str(tmp_path))
    add_compliance_checks(app)
    stack = Stack(app, "Careless")
    sqs.Queue(stack, "Queue", encryption=sqs.QueueEncryption.UNENCRYPTED)
    # When it is synthesized
    with pytest.raises(RuntimeError, match=VALIDATION_FAILED):
        app.synth()
    # Then the report names the queue's missing encryption, DLQ and TLS enforcement
    violations = {
        violation["ruleName"]: [c["constructPath"] for c in violation["violatingConstructs"]]
        for plugin in report_of(tmp_path)["pluginReports"]
        for violation in plugin["violations"]
    }
    for rule in ("AwsSolutions-SQS2", "AwsSolutions-SQS3", "AwsSolutions-SQS4", "Serverless-SQSRedrivePolicy"):
        assert violations.get(rule) == ["Careless/Queue/Resource"], rule


def test_an_acknowledgement_covers_only_the_resource_it_is_made_on(tmp_path: Path) -> None:
    # Given two otherwise compliant queues without a DLQ, and the DLQ findings acknowledged on the first only
    app = App(outdir=str(tmp_path))
    add_compliance_checks(app)
    stack = Stack(app, "TwoQueues")
    first, _second = (sqs.Queue(stack, name, encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True) for name in ("First", "Second"))
    for rule in ("AwsSolutions::AwsSolutions-SQS3", "Serverless::Serverless-SQSRedrivePolicy"):
        acknowledge(first, rule, "Throwaway test queue: the acknowledgement must not reach the other queue.")
    # When it is synthesized
    with pytest.raises(RuntimeError, match=VALIDATION_FAILED):
        app.synth()
    # Then the second queue's findings still fail synth, and the first queue's are only suppressed
    plugins = report_of(tmp_path)["pluginReports"]
    open_paths = {c["constructPath"] for p in plugins for v in p["violations"] for c in v["violatingConstructs"]}
    suppressed_paths = {c["constructPath"] for p in plugins for v in p["suppressedViolations"] for c in v["violatingConstructs"]}
    assert open_paths == {"TwoQueues/Second/Resource"}
    assert suppressed_paths == {"TwoQueues/First/Resource"}
