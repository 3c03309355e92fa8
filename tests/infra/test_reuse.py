"""The constructs in someone else's stack: all three pipelines and their monitoring, composed with
resources the user already has (a stream, a bucket, a secret, a trips table, an alarm topic),
synthesized with the project's cdk-nag checks on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from constructs import IConstruct

from devtools.aws.template_resources import cdk_context
from onceflow.constructs import (
    EventLog,
    EventLogMonitoring,
    EventLogMonitoringProps,
    EventLogProps,
    RunnerStatsMonitoring,
    RunnerStatsMonitoringProps,
    RunnerStatsPipeline,
    RunnerStatsPipelineProps,
    TaxiEtlMonitoring,
    TaxiEtlMonitoringProps,
    TaxiEtlSaga,
    TaxiEtlSagaProps,
    acknowledge_event_log,
    acknowledge_imported_bucket,
    acknowledge_runner_stats,
    acknowledge_taxi_etl,
    add_compliance_checks,
)
from runtime.taxi_etl import contract as taxi_etl_contract

STREAM_ARN = "arn:aws:kinesis:eu-west-1:111122223333:stream/team-devices"
BUCKET_NAME = "team-event-log-data"
SECRET_NAME = "team/taxi-api-key"
TRIPS_TABLE = "nycYellowTaxis"
TOPIC_ARN = "arn:aws:sns:eu-west-1:111122223333:team-pager"
VALIDATION_FAILED = r"ValidationFailed|Validation failed"


class TeamStack(Stack):
    """What a user writes: their own resources, imported, and the three constructs composed. The
    constructs add their own cdk-nag acknowledgements; only the imported bucket's wildcards are
    the user's call. With own_acknowledgements the user opts out and adds each set explicitly."""

    def __init__(self, app: App, *, acknowledge_bucket: bool = True, own_acknowledgements: bool = False) -> None:
        super().__init__(app, "TeamStack")
        topic = sns.Topic.from_topic_arn(self, "Pager", TOPIC_ARN)
        stream = kinesis.Stream.from_stream_arn(self, "Devices", STREAM_ARN)
        bucket = s3.Bucket.from_bucket_name(self, "Data", BUCKET_NAME)
        secret = secretsmanager.Secret.from_secret_name_v2(self, "ApiKey", SECRET_NAME)
        trips = dynamodb.Table.from_table_name(self, "Trips", TRIPS_TABLE)

        by_construct = not own_acknowledgements
        self.runner_stats = RunnerStatsPipeline(self, "Runs", RunnerStatsPipelineProps(stream=stream, acknowledge_findings=by_construct))
        if own_acknowledgements:
            acknowledge_runner_stats(self.runner_stats)
        RunnerStatsMonitoring(self, "RunsMonitoring", RunnerStatsMonitoringProps(pipeline=self.runner_stats, alarm_topic=topic))

        self.event_log = EventLog(self, "Sheets", EventLogProps(bucket=bucket, acknowledge_findings=by_construct))
        if own_acknowledgements:
            acknowledge_event_log(self.event_log)
        if acknowledge_bucket:
            acknowledge_imported_bucket(
                self.event_log, "team-event-log-data is ours; its payloads/ and snapshots/ prefixes are for onceflow."
            )
        EventLogMonitoring(self, "SheetsMonitoring", EventLogMonitoringProps(event_log=self.event_log, alarm_topic=topic))

        self.saga = TaxiEtlSaga(
            self,
            "Taxis",
            TaxiEtlSagaProps(api_key_secret=secret, trips_table=trips, acknowledge_findings=by_construct),
        )
        if own_acknowledgements:
            acknowledge_taxi_etl(self.saga)
        TaxiEtlMonitoring(self, "TaxisMonitoring", TaxiEtlMonitoringProps(saga=self.saga, alarm_topic=topic))


def team_app(outdir: Path) -> App:
    app = App(context=cdk_context("dev"), outdir=str(outdir))
    add_compliance_checks(app)
    return app


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> tuple[TeamStack, dict[str, Any]]:
    outdir = tmp_path_factory.mktemp("team")
    app = team_app(outdir)
    stack = TeamStack(app)
    # synth raises on any unacknowledged cdk-nag finding
    assembly = app.synth()
    return stack, dict(assembly.get_stack_by_name("TeamStack").template)


@pytest.fixture(scope="module")
def team_template(team: tuple[TeamStack, dict[str, Any]]) -> dict[str, Any]:
    return team[1]


def resources(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {name: body for name, body in template["Resources"].items() if body["Type"] == resource_type}


def mentions(value: Any, text: str) -> bool:
    return text in json.dumps(value)


def logical_id(stack: Stack, construct: IConstruct) -> str:
    return stack.get_logical_id(construct.node.default_child)  # type: ignore[arg-type]


def project_functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pipelines' functions by handler (CDK's inline deploy-time bucket notifications handler runs no runtime. handler)."""
    functions = [body["Properties"] for body in resources(template, "AWS::Lambda::Function").values()]
    by_handler = {props["Handler"]: props for props in functions if str(props.get("Handler", "")).startswith("runtime.")}
    assert len(by_handler) == len(functions) - 1, "a handler deployed twice, or a second function without a runtime. handler"
    return by_handler


def test_the_foreign_stack_synthesizes_with_cdk_nag_and_creates_none_of_the_imported_resources(
    team: tuple[TeamStack, dict[str, Any]],
) -> None:
    # Given the team's stack, synthesized with cdk-nag (the fixture: synth raised nothing)
    stack, team_template = team
    # Then the constructs created no stream, no secret and no topic of their own
    for resource_type in ("AWS::Kinesis::Stream", "AWS::SecretsManager::Secret", "AWS::SNS::Topic"):
        assert resources(team_template, resource_type) == {}, resource_type
    # and no bucket in place of the team's event-log bucket: the only buckets are the bulk route's own, which no prop
    # imports, the saga's ingest bucket and its access-log bucket
    assert set(resources(team_template, "AWS::S3::Bucket")) == {
        logical_id(stack, stack.saga.ingest_bucket),
        logical_id(stack, stack.saga.ingest_access_log_bucket),
    }
    # and the only tables are the pipelines' own, without a trips table (4 runner stats + 2 event log + 3 status)
    assert len(resources(team_template, "AWS::DynamoDB::Table")) == 9


def test_the_imported_resources_are_the_ones_used(team_template: dict[str, Any]) -> None:
    # Given the team's stack
    mappings = resources(team_template, "AWS::Lambda::EventSourceMapping")
    # Then the runner-stats function consumes the team's stream
    assert any(mapping["Properties"]["EventSourceArn"] == STREAM_ARN for mapping in mappings.values())
    # and the event-log functions point at the team's bucket; the store step, the flag step,
    # GET /trips/{id}, the POST routes (which read a single row's state first) and the bulk route's chunk task (which
    # stores a load's rows) at the team's trips table
    environments = {handler: props["Environment"]["Variables"] for handler, props in project_functions(team_template).items()}
    assert sum(variables.get("BUCKET") == BUCKET_NAME for variables in environments.values()) == 3
    assert {handler for handler, variables in environments.items() if variables.get("FINAL_TABLE") == TRIPS_TABLE} == {
        taxi_etl_contract.HANDLER_STORE,
        taxi_etl_contract.HANDLER_FLAG,
        taxi_etl_contract.HANDLER_ROW_STATE,
        taxi_etl_contract.HANDLER_API,
        taxi_etl_contract.HANDLER_BULK_CHUNK,
    }
    # and the chunk task may write the team's table, the one its environment names (its reads and puts of stored rows)
    chunk_role = project_functions(team_template)[taxi_etl_contract.HANDLER_BULK_CHUNK]["Role"]["Fn::GetAtt"][0]
    chunk_policies = [
        policy for policy in resources(team_template, "AWS::IAM::Policy").values() if {"Ref": chunk_role} in policy["Properties"]["Roles"]
    ]
    assert chunk_policies and any(mentions(policy, f":table/{TRIPS_TABLE}") for policy in chunk_policies)
    # and the authorizer may read the team's secret
    policies = resources(team_template, "AWS::IAM::Policy")
    assert any(mentions(policy, f"secret:{SECRET_NAME}") for policy in policies.values())
    # and it guards the bulk route's routes as it guards the others: every route of the saga's API (the authorizer's),
    # POST /loads and GET /loads/{LoadId} too
    ((authorizer_id, authorizer),) = resources(team_template, "AWS::ApiGatewayV2::Authorizer").items()
    routes = {
        route["Properties"]["RouteKey"]: route["Properties"]
        for route in resources(team_template, "AWS::ApiGatewayV2::Route").values()
        if route["Properties"]["ApiId"] == authorizer["Properties"]["ApiId"]
    }
    assert {f"POST {taxi_etl_contract.ROUTE_LOADS}", f"GET {taxi_etl_contract.ROUTE_LOAD}"} <= set(routes)
    for route_key, route in routes.items():
        assert route.get("AuthorizerId") == {"Ref": authorizer_id}, route_key


def test_every_alarm_notifies_the_teams_topic(team_template: dict[str, Any]) -> None:
    # Given the team's stack
    alarms = resources(team_template, "AWS::CloudWatch::Alarm")
    # Then there are alarms for all three pipelines, and every one notifies the team's topic on ALARM and OK
    assert len(alarms) == 9 + 9 + 10  # runner stats (with RecordAgeAtRisk), event log, taxi saga (with StillRetryable, FailedLoads)
    for name, alarm in alarms.items():
        assert alarm["Properties"]["AlarmActions"] == [TOPIC_ARN], name
        assert alarm["Properties"]["OKActions"] == [TOPIC_ARN], name
    # and each pipeline has its dashboard
    assert len(resources(team_template, "AWS::CloudWatch::Dashboard")) == 3


def test_without_the_bucket_acknowledgements_the_imported_bucket_fails_cdk_nag(tmp_path: Path) -> None:
    # Given the same stack, but the user skipped acknowledging the wildcards on their own bucket
    app = team_app(tmp_path)
    TeamStack(app, acknowledge_bucket=False)
    # When it is synthesized
    # Then cdk-nag refuses it (the object wildcards under payloads/ and snapshots/ of an imported bucket are the user's call)
    with pytest.raises(RuntimeError, match=VALIDATION_FAILED):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    open_findings = {
        (violation["ruleName"], construct["constructPath"])
        for plugin in report["pluginReports"]
        for violation in plugin["violations"]
        for construct in violation["violatingConstructs"]
    }
    assert {rule for rule, _ in open_findings} == {
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{BUCKET_NAME}/{prefix}*]" for prefix in ("payloads/", "snapshots/")
    }
    assert {path for _, path in open_findings} == {
        f"TeamStack/Sheets/{role}Role/DefaultPolicy/Resource" for role in ("ApiHandler", "SnapshotWorker", "PayloadFinalizer")
    }


def test_a_user_who_owns_the_acknowledgements_adds_each_constructs_set_and_synth_passes(tmp_path: Path) -> None:
    # Given the same stack, with every construct told to leave its acknowledgements to the user,
    # who adds each construct's set explicitly
    app = team_app(tmp_path)
    TeamStack(app, own_acknowledgements=True)
    # When it is synthesized with cdk-nag
    assembly = app.synth()
    # Then it passes, as with the constructs' own acknowledgements
    assert assembly.get_stack_by_name("TeamStack").template["Resources"]


def test_a_construct_told_to_leave_its_acknowledgements_to_the_user_fails_cdk_nag_without_them(tmp_path: Path) -> None:
    # Given a stack whose runner-stats pipeline opts out of its own acknowledgements and adds none
    app = team_app(tmp_path)
    stack = Stack(app, "OptedOut")
    RunnerStatsPipeline(stack, "Runs", RunnerStatsPipelineProps(acknowledge_findings=False))
    # When it is synthesized with cdk-nag
    # Then the findings the construct would have acknowledged are open
    with pytest.raises(RuntimeError, match=VALIDATION_FAILED):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    rules = {violation["ruleName"] for plugin in report["pluginReports"] for violation in plugin["violations"]}
    assert rules == {"AwsSolutions-SQS3", "Serverless-SQSRedrivePolicy", "Serverless-LambdaDLQ"}
