"""Each function's synthesized role, with its ARNs resolved as the embedded cloud names resources,
and an evaluator of IAM identity policies for it.

Why not moto's `IAMPolicy`: it treats an Allow statement whose condition does not hold as an
explicit Deny (AWS treats it as not applying), matches actions case-sensitively, and reads `.` in
a pattern as a regex wildcard. This evaluator follows AWS's evaluation logic for identity-based
policies ("Policy evaluation logic" in the IAM User Guide): an explicit Deny wins, then any Allow,
else the request is implicitly denied; `*` and `?` are wildcards in actions (case-insensitive) and
resources; a condition key the request does not carry makes a positive operator false, a negated
one true, and an `...IfExists` operator true.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from devtools.aws.iam_needs import (
    ACCOUNT,
    REGION,
    Need,
    bucket_arn,
    key_arn,
    log_group_arn,
    queue_arn,
    secret_arn,
    state_machine_arn,
    stream_arn,
    table_arn,
)

Template = Mapping[str, Any]


class UnsupportedPolicy(ValueError):
    """A policy element this evaluator does not model: refuse rather than guess."""


@dataclass(frozen=True)
class Grant:
    """One action pattern on one resource pattern of one Allow statement of a function's role."""

    policy: str
    statement: int
    action: str
    resource: str
    conditional: bool = False

    def describe(self) -> str:
        return f"{self.action} on {self.resource}" + (" (conditional)" if self.conditional else "")


@dataclass(frozen=True)
class Decision:
    allowed: bool
    grants: tuple[Grant, ...] = ()  # the Allow grants that matched (all of them, for the usage report)
    denied_by: str | None = None  # an explicit Deny statement, if one matched


# --- resolving the template's intrinsic functions ---------------------------------------------------


def _attribute_arn(resources: Mapping[str, Any], logical_id: str, attribute: str) -> str:
    kind = resources[logical_id]["Type"]
    if kind == "AWS::DynamoDB::Table":
        return table_arn(logical_id) + ("/stream/*" if attribute == "StreamArn" else "")
    arns = {
        "AWS::S3::Bucket": lambda: bucket_arn(logical_id.lower()),
        "AWS::SQS::Queue": lambda: queue_arn(logical_id),
        "AWS::Kinesis::Stream": lambda: stream_arn(logical_id),
        "AWS::Logs::LogGroup": lambda: log_group_arn(logical_id),
        "AWS::KMS::Key": lambda: key_arn(logical_id),
        "AWS::Lambda::Function": lambda: f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical_id}",
        "AWS::IAM::Role": lambda: f"arn:aws:iam::{ACCOUNT}:role/{logical_id}",
    }
    if attribute != "Arn" or kind not in arns:
        raise UnsupportedPolicy(f"cannot resolve Fn::GetAtt {logical_id}.{attribute} ({kind})")
    return arns[kind]()


def _ref(resources: Mapping[str, Any], name: str) -> str:
    pseudo = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::URLSuffix": "amazonaws.com"}
    if name in pseudo:
        return pseudo[name]
    kind = resources[name]["Type"]
    if kind == "AWS::StepFunctions::StateMachine":
        return state_machine_arn(name)
    if kind == "AWS::SecretsManager::Secret":
        return secret_arn(name)
    if kind == "AWS::SQS::Queue":
        return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"
    return name  # tables, buckets, streams, log groups: the Ref is the name


def resolve(value: Any, resources: Mapping[str, Any]) -> Any:
    """A policy value with CloudFormation's intrinsic functions evaluated (lists stay lists)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return [resolve(item, resources) for item in value]
    if isinstance(value, Mapping) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Ref":
            return _ref(resources, argument)
        if function == "Fn::GetAtt":
            return _attribute_arn(resources, argument[0], argument[1])
        if function == "Fn::Join":
            separator, parts = argument
            return separator.join(str(resolve(part, resources)) for part in parts)
        if function == "Fn::Select":
            index, items = argument
            return resolve(items, resources)[int(index)]
        if function == "Fn::Split":
            separator, text = argument
            return str(resolve(text, resources)).split(separator)
    if isinstance(value, Mapping):
        return {key: resolve(item, resources) for key, item in value.items()}
    raise UnsupportedPolicy(f"cannot resolve {value!r}")


# --- matching -----------------------------------------------------------------------------------


@cache
def _pattern(text: str, ignore_case: bool) -> re.Pattern[str]:
    translated = "".join(".*" if char == "*" else "." if char == "?" else re.escape(char) for char in text)
    return re.compile(f"^{translated}$", re.IGNORECASE if ignore_case else 0)


def matches(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    """IAM's wildcard match: `*` any run of characters, `?` one character."""
    return _pattern(pattern, ignore_case).match(value) is not None


def _as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _equals(expected: str, actual: str) -> bool:
    return actual == expected


def _like(expected: str, actual: str) -> bool:
    return matches(expected, actual)


def _bool(expected: str, actual: str) -> bool:
    return actual.lower() == expected.lower()


# operator -> (how a listed value matches the request's, whether the operator is negated)
_OPERATORS: dict[str, tuple[Callable[[str, str], bool], bool]] = {
    "StringEquals": (_equals, False),
    "StringNotEquals": (_equals, True),
    "StringLike": (_like, False),
    "StringNotLike": (_like, True),
    "ArnEquals": (_equals, False),
    "ArnLike": (_like, False),
    "ArnNotEquals": (_equals, True),
    "ArnNotLike": (_like, True),
    "Bool": (_bool, False),
}


def condition_holds(condition: Mapping[str, Mapping[str, Any]], context: Mapping[str, str]) -> bool:
    """Every operator block holds (AND); within a key, any listed value matches (OR)."""
    for operator, keys in condition.items():
        if_exists = operator.endswith("IfExists")
        base = operator.removesuffix("IfExists")
        if base not in _OPERATORS:
            raise UnsupportedPolicy(f"condition operator {operator} is not modelled")
        compare, negated = _OPERATORS[base]
        for key, expected in keys.items():
            actual = next((value for name, value in context.items() if name.lower() == key.lower()), None)
            if actual is None:
                if not (if_exists or negated):
                    return False
                continue
            matched = any(compare(str(value), actual) for value in _as_list(expected))
            if matched == negated:
                return False
    return True


# --- a role -----------------------------------------------------------------------------------------


@dataclass
class Role:
    """The identity policies of one function's execution role, resolved."""

    name: str
    statements: list[tuple[str, int, Mapping[str, Any]]] = field(default_factory=list)  # (policy, index, statement)

    @classmethod
    def of_function(cls, template: Template, function_id: str) -> Role:
        resources = template["Resources"]
        role_value = resources[function_id]["Properties"]["Role"]
        if not (isinstance(role_value, Mapping) and "Fn::GetAtt" in role_value):
            raise UnsupportedPolicy(f"{function_id}: the role is not a role of this template")
        role_id = role_value["Fn::GetAtt"][0]
        role = cls(role_id)
        role_props = resources[role_id]["Properties"]
        if role_props.get("ManagedPolicyArns"):
            raise UnsupportedPolicy(f"{role_id}: managed policies are not modelled; grant in the template instead")
        documents = [(f"{role_id}.{policy['PolicyName']}", policy["PolicyDocument"]) for policy in role_props.get("Policies", [])]
        for logical_id, resource in resources.items():
            if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in resource["Properties"].get("Roles", []):
                documents.append((logical_id, resource["Properties"]["PolicyDocument"]))
        for policy_name, document in documents:
            for index, statement in enumerate(_as_list_of_statements(document["Statement"])):
                role.statements.append((policy_name, index, resolve(statement, resources)))
        return role

    def evaluate(self, need: Need) -> Decision:
        context = dict(need.context)
        allowing: list[Grant] = []
        for policy, index, statement in self.statements:
            action = _matching_action(statement, need.action)
            resource = _matching_resource(statement, need.resource)
            if action is None or resource is None:
                continue
            if "Condition" in statement and not condition_holds(statement["Condition"], context):
                continue
            if statement["Effect"] == "Deny":
                return Decision(False, denied_by=f"{policy}[{index}]")
            allowing.append(Grant(policy, index, action, resource, "Condition" in statement))
        return Decision(bool(allowing), tuple(allowing))

    def grants(self) -> list[Grant]:
        """Every (action pattern, resource pattern) pair the role's Allow statements name."""
        listed: list[Grant] = []
        for policy, index, statement in self.statements:
            if statement["Effect"] != "Allow" or "NotAction" in statement or "NotResource" in statement:
                continue
            for action in _as_list(statement["Action"]):
                for resource in _as_list(statement.get("Resource", "*")):
                    listed.append(Grant(policy, index, action, resource, "Condition" in statement))
        return listed


def _as_list_of_statements(statement: Any) -> Sequence[Mapping[str, Any]]:
    return [statement] if isinstance(statement, Mapping) else list(statement)


def _matching_action(statement: Mapping[str, Any], action: str) -> str | None:
    if "NotAction" in statement:
        excluded = any(matches(pattern, action, ignore_case=True) for pattern in _as_list(statement["NotAction"]))
        return None if excluded else f"NotAction{_as_list(statement['NotAction'])}"
    return next((pattern for pattern in _as_list(statement["Action"]) if matches(pattern, action, ignore_case=True)), None)


def _matching_resource(statement: Mapping[str, Any], resource: str) -> str | None:
    if "NotResource" in statement:
        excluded = any(matches(pattern, resource) for pattern in _as_list(statement["NotResource"]))
        return None if excluded else f"NotResource{_as_list(statement['NotResource'])}"
    return next((pattern for pattern in _as_list(statement.get("Resource", "*")) if matches(pattern, resource)), None)
