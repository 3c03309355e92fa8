"""Builds the embedded (moto) cloud from a *synthesized* template, so tests, the demo and the
benchmark use exactly the tables, queues and streams that would be deployed.

Physical names are the logical ids; `names` maps logical id -> physical name so a function's
environment (with its Refs) can be resolved the way CloudFormation would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]

Template = dict[str, Any]


def cdk_context(env_name: str) -> dict[str, Any]:
    """cdk.json's context plus the environment, so in-process synth matches `cdk synth`."""
    context: dict[str, Any] = json.loads((PROJECT_ROOT / "cdk.json").read_text())["context"]
    return {**context, "env": env_name}


def synth_templates(env_name: str, outdir: str | None = None) -> dict[str, Template]:
    """Synthesize the app in-process (with cdk-nag on) and return stack name -> template."""
    from aws_cdk import App

    from app import build_app

    app = build_app(App(context=cdk_context(env_name), outdir=outdir))
    assembly = app.synth()
    return {stack.stack_name: stack.template for stack in assembly.stacks}


def load_assembly(directory: str | Path) -> dict[str, Template]:
    """Templates of a `cdk synth -o DIR` cloud assembly."""
    manifest = json.loads((Path(directory) / "manifest.json").read_text())
    templates: dict[str, Template] = {}
    for name, artifact in manifest["artifacts"].items():
        if artifact.get("type") == "aws:cloudformation:stack":
            template_file = artifact["properties"]["templateFile"]
            templates[name] = json.loads((Path(directory) / template_file).read_text())
    return templates


def resources_of_type(template: Template, resource_type: str) -> dict[str, dict[str, Any]]:
    return {lid: res for lid, res in template.get("Resources", {}).items() if res["Type"] == resource_type}


def find_function(template: Template, handler: str) -> str:
    matches = [
        lid for lid, res in resources_of_type(template, "AWS::Lambda::Function").items() if res["Properties"].get("Handler") == handler
    ]
    if len(matches) != 1:
        raise LookupError(f"expected one function with handler {handler}, found {matches}")
    return matches[0]


def function_behind(template: Template, target: Any) -> str:
    """The logical id of the Lambda function an integration's IntegrationUri or an authorizer's
    AuthorizerUri invokes: the function's ARN (Fn::GetAtt [id, Arn]), or, with SnapStart, an alias's
    ARN (its Ref), which names a version of the function; inside an authorizer's Fn::Join URI too."""
    resources = template.get("Resources", {})
    if isinstance(target, Mapping) and "Fn::Join" in target:
        parts = [part for part in target["Fn::Join"][1] if isinstance(part, Mapping) and _named(part) in resources]
        if len(parts) != 1:
            raise LookupError(f"expected one resource in {target!r}, found {parts}")
        return function_behind(template, parts[0])
    name = _named(target) if isinstance(target, Mapping) else None
    if name is None or name not in resources:
        raise LookupError(f"not a function's, alias's or version's ARN: {target!r}")
    resource = resources[name]
    if resource["Type"] == "AWS::Lambda::Function":
        return name
    if resource["Type"] in ("AWS::Lambda::Alias", "AWS::Lambda::Version"):
        return function_behind(template, resource["Properties"]["FunctionName"])
    raise LookupError(f"{name} is a {resource['Type']}, not a Lambda function, alias or version")


def _named(reference: Mapping[str, Any]) -> str | None:
    """The logical id a Ref or Fn::GetAtt names."""
    if "Ref" in reference:
        return str(reference["Ref"])
    if "Fn::GetAtt" in reference:
        return str(reference["Fn::GetAtt"][0])
    return None


def route_functions(template: Template) -> dict[str, str]:
    """Each HTTP API route key ("POST /trips") -> the logical id of the function its integration invokes."""
    integrations = resources_of_type(template, "AWS::ApiGatewayV2::Integration")
    routes: dict[str, str] = {}
    for route in resources_of_type(template, "AWS::ApiGatewayV2::Route").values():
        target = route["Properties"]["Target"]  # "integrations/<id>", as a Fn::Join with the integration's Ref
        (integration,) = [part["Ref"] for part in target["Fn::Join"][1] if isinstance(part, Mapping) and part.get("Ref") in integrations]
        routes[str(route["Properties"]["RouteKey"])] = function_behind(template, integrations[integration]["Properties"]["IntegrationUri"])
    return routes


def authorizer_functions(template: Template) -> dict[str, str]:
    """Each Lambda authorizer's logical id -> the logical id of the function it invokes."""
    return {
        logical_id: function_behind(template, resource["Properties"]["AuthorizerUri"])
        for logical_id, resource in resources_of_type(template, "AWS::ApiGatewayV2::Authorizer").items()
        if "AuthorizerUri" in resource["Properties"]
    }


@dataclass
class EmbeddedCloud:
    """What was created in moto from one template."""

    template: Template
    names: dict[str, str] = field(default_factory=dict)

    def create(self, *, dynamodb: Any = None, sqs: Any = None, kinesis: Any = None, s3: Any = None) -> EmbeddedCloud:
        if dynamodb is not None:
            for logical_id, resource in resources_of_type(self.template, "AWS::DynamoDB::Table").items():
                dynamodb.create_table(**table_request(logical_id, resource["Properties"]))
                self.names[logical_id] = logical_id
        if sqs is not None:
            queues = resources_of_type(self.template, "AWS::SQS::Queue")
            for logical_id, resource in queues.items():
                visibility = str(resource["Properties"].get("VisibilityTimeout", 30))
                url = sqs.create_queue(QueueName=logical_id, Attributes={"VisibilityTimeout": visibility})["QueueUrl"]
                self.names[logical_id] = url  # a queue's Ref is its URL
                self.names[f"{logical_id}.url"] = url
                self.names[f"{logical_id}.arn"] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
                    "QueueArn"
                ]
            for logical_id, resource in queues.items():
                policy = resource["Properties"].get("RedrivePolicy")
                if policy:
                    redrive = {
                        "deadLetterTargetArn": self.resolve(policy["deadLetterTargetArn"]),
                        "maxReceiveCount": policy["maxReceiveCount"],
                    }
                    sqs.set_queue_attributes(QueueUrl=self.names[logical_id], Attributes={"RedrivePolicy": json.dumps(redrive)})
        if kinesis is not None:
            for logical_id, resource in resources_of_type(self.template, "AWS::Kinesis::Stream").items():
                props = resource["Properties"]
                kinesis.create_stream(StreamName=logical_id, ShardCount=int(props.get("ShardCount", 1)))
                self.names[logical_id] = logical_id
        if s3 is not None:
            for logical_id, resource in resources_of_type(self.template, "AWS::S3::Bucket").items():
                name = logical_id.lower()  # bucket names are lower case
                s3.create_bucket(Bucket=name)
                self.names[logical_id] = name
                versioning = resource.get("Properties", {}).get("VersioningConfiguration")
                if versioning is not None:
                    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": versioning["Status"]})
            if sqs is not None:
                self._add_bucket_notifications(s3)
        return self

    def _add_bucket_notifications(self, s3: Any) -> None:
        """CDK's Custom::S3BucketNotifications (what its deploy-time handler puts): each bucket's queue notifications,
        which moto then delivers in-process as S3 does."""
        for resource in resources_of_type(self.template, "Custom::S3BucketNotifications").values():
            props = resource["Properties"]
            configuration = props["NotificationConfiguration"]
            unsupported = set(configuration) - {"QueueConfigurations"}
            if unsupported:
                raise ValueError(f"the embedded cloud delivers S3 notifications to SQS only, not {sorted(unsupported)}")
            queues = [{**queue, "QueueArn": self.resolve(queue["QueueArn"])} for queue in configuration["QueueConfigurations"]]
            s3.put_bucket_notification_configuration(
                Bucket=self.resolve(props["BucketName"]), NotificationConfiguration={"QueueConfigurations": queues}
            )

    def function_environment(self, handler: str) -> dict[str, str]:
        function = self.template["Resources"][find_function(self.template, handler)]
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        return {name: self.resolve(value) for name, value in variables.items()}

    def resolve(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, Mapping) and "Ref" in value:
            return self.names[value["Ref"]]
        if isinstance(value, Mapping) and "Fn::GetAtt" in value and value["Fn::GetAtt"][1] == "Arn":
            return self.names[f"{value['Fn::GetAtt'][0]}.arn"]
        raise ValueError(f"cannot resolve {value!r} in the embedded cloud")

    def event_source_mapping(self, handler: str) -> dict[str, Any]:
        function_id = find_function(self.template, handler)
        for resource in resources_of_type(self.template, "AWS::Lambda::EventSourceMapping").values():
            if resource["Properties"].get("FunctionName") == {"Ref": function_id}:
                return dict(resource["Properties"])
        raise LookupError(f"no event source mapping for {handler}")


def table_request(table_name: str, props: Mapping[str, Any]) -> dict[str, Any]:
    """CreateTable arguments from AWS::DynamoDB::Table properties."""
    request: dict[str, Any] = {
        "TableName": table_name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props.get("BillingMode", "PROVISIONED"),
    }
    if request["BillingMode"] == "PROVISIONED":
        request["ProvisionedThroughput"] = props["ProvisionedThroughput"]
    if "StreamSpecification" in props:
        request["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
    for index_kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        if index_kind in props:
            request[index_kind] = props[index_kind]
    return request
