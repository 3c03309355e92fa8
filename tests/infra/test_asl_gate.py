"""The state machine definition gate (devtools/asl_gate.py, run by `make cfn-lint`, and in `make test` by the CLI synth test)
on the synthesized templates: it passes on both environments' state machines, and it fails on each
breakage injected into the string parts of the DefinitionString's `Fn::Join`, tokens left in place,
so each test also proves the join is resolved. cfn-lint lets such a breakage through (it skips a
joined definition), and so does moto.

All the broken templates go through one `check`, so one node process runs asl-validator on them all.
"""

from __future__ import annotations

import copy
import functools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from cfnlint.api import ManualArgs, lint

from devtools.asl_gate import STATE_FIELDS, Finding, check, main
from devtools.aws.template_resources import PROJECT_ROOT, load_assembly, resources_of_type
from tests.conftest import TAXI_ETL_STACK, assembly_for

STATE_MACHINE = "TaxiEtlStateMachine72705BD6"
BULK_STATE_MACHINE = "TaxiEtlBulkStateMachine479724BD"  # the bulk route's, in the same template (never broken here)
CHUNK_ARN = "arn:aws:lambda:us-east-1:123456789012:function:TaxiEtlBulkChunkFunctionC177CCC7"
VALIDATION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:TaxiEtlValidationFunction29AF2C6A"
# The Validation task's catchers, as CDK writes them: the transient errors, then States.ALL.
VALIDATION_CATCHERS = '"Next":"FlagValidationRetryable"},{"ErrorEquals":["States.ALL"],"ResultPath":"$.error","Next":"FlagValidation"}'
VALIDATION_REJECTS = (
    '"ValidationRejects":{"Type":"Choice","Choices":[{"Variable":"$.hasRejected","BooleanEquals":true,"Next":"FlagValidation"}],'
    '"Default":"Transformation"}'
)

# Each breakage: (the text of one join part it replaces, what replaces it).
BREAKAGES: dict[str, tuple[str, str]] = {
    # A typo of a real field of the Task state
    "unknown-state-field": ('"Validation":{"Next":', '"Validation":{"TimeoutSecond":60,"Next":'),
    # A retrier's field in a catcher: asl-validator does not look at a catcher's fields
    "unknown-catcher-field": (
        VALIDATION_CATCHERS,
        VALIDATION_CATCHERS.replace('"Next":"FlagValidation"}', '"Next":"FlagValidation","MaxAttempts":2}'),
    ),
    "catcher-without-next": (VALIDATION_CATCHERS, VALIDATION_CATCHERS.replace(',"Next":"FlagValidation"}', "}")),
    "catcher-errors-not-a-list": (VALIDATION_CATCHERS, VALIDATION_CATCHERS.replace('["States.ALL"]', '"States.ALL"')),
    "missing-next": ('"Validation":{"Next":"ValidationRejects"', '"Validation":{"Next":"ValidationRejected"'),
    "missing-default": (VALIDATION_REJECTS, VALIDATION_REJECTS.replace('"Default":"Transformation"', '"Default":"Transform"')),
    "missing-choice-next": (VALIDATION_REJECTS, VALIDATION_REJECTS.replace('"Next":"FlagValidation"', '"Next":"FlagValidations"')),
    "missing-catch-next": (VALIDATION_CATCHERS, VALIDATION_CATCHERS.replace('"Next":"FlagValidation"}', '"Next":"FlagValidationn"}')),
    # A state only itself leads to: asl-validator counts any Next naming it as reaching it
    "unreachable-state": (
        '{"StartAt":"Validation","States":{',
        '{"StartAt":"Validation","States":{"Orphan":{"Type":"Wait","Seconds":5,"Next":"Orphan"},',
    ),
    "all-retrier-not-last": (
        '"Validation":{"Next":"ValidationRejects","Retry":[',
        '"Validation":{"Next":"ValidationRejects","Retry":[{"ErrorEquals":["States.ALL"]},',
    ),
    "all-catcher-not-last": (
        VALIDATION_CATCHERS,
        VALIDATION_CATCHERS + ',{"ErrorEquals":["PhaseInputError"],"Next":"FlagValidation"}',
    ),
    "all-catcher-not-alone": (VALIDATION_CATCHERS, VALIDATION_CATCHERS.replace('["States.ALL"]', '["States.ALL","States.Timeout"]')),
}


@functools.cache
def _synthesized_taxi_etl_template() -> dict[str, Any]:
    return load_assembly(assembly_for("dev"))[TAXI_ETL_STACK]


def taxi_etl_template() -> dict[str, Any]:
    """A copy of the dev synth's taxi ETL template, to break."""
    return copy.deepcopy(_synthesized_taxi_etl_template())


def join_parts(template: dict[str, Any]) -> list[Any]:
    parts: list[Any] = template["Resources"][STATE_MACHINE]["Properties"]["DefinitionString"]["Fn::Join"][1]
    return parts


def inject(template: dict[str, Any], text: str, replacement: str) -> dict[str, Any]:
    """The template with `text`, which must occur exactly once in the join's string parts, replaced."""
    parts = join_parts(template)
    assert any(not isinstance(part, str) for part in parts), "the definition is no longer a Fn::Join with tokens"
    where = [index for index, part in enumerate(parts) if isinstance(part, str) and text in part]
    assert len(where) == 1 and parts[where[0]].count(text) == 1, f"{text!r} is not in exactly one place of the join"
    parts[where[0]] = parts[where[0]].replace(text, replacement)
    return template


def write_assembly(directory: Path, templates: dict[str, dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, template in templates.items():
        (directory / f"{name}.template.json").write_text(json.dumps(template))
    return directory


@pytest.fixture(scope="module")
def broken_findings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Finding]]:
    """The gate's findings on each breakage, by breakage, from one run over all of them."""
    templates = {name: inject(taxi_etl_template(), text, replacement) for name, (text, replacement) in BREAKAGES.items()}
    assembly = write_assembly(tmp_path_factory.mktemp("broken-assembly"), templates)
    machines, findings = check([assembly])
    assert len(machines) == 2 * len(BREAKAGES)
    by_breakage: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        assert finding.state_machine == STATE_MACHINE
        by_breakage[Path(finding.template).name.removesuffix(".template.json")].append(finding)
    return by_breakage


def problems(findings: list[Finding]) -> set[tuple[str, str]]:
    return {(finding.state, finding.problem) for finding in findings}


def validator_problems(findings: list[Finding]) -> set[tuple[str, str]]:
    return {(finding.state, finding.problem) for finding in findings if finding.problem.startswith("asl-validator ")}


# --- the real templates ------------------------------------------------------------------------------


def test_the_gate_passes_on_both_environments_synthesized_state_machines() -> None:
    # Given the dev and prod cloud assemblies, as `make synth` writes them
    assemblies = [assembly_for("dev"), assembly_for("prod")]
    # When the gate checks them
    machines, findings = check(assemblies)
    # Then it finds the saga's two state machines in each, resolved, and nothing wrong with any
    assert [(Path(machine.template).name, machine.logical_id) for machine in machines] == [
        ("Onceflow-dev-TaxiEtl.template.json", STATE_MACHINE),
        ("Onceflow-dev-TaxiEtl.template.json", BULK_STATE_MACHINE),
        ("Onceflow-prod-TaxiEtl.template.json", STATE_MACHINE),
        ("Onceflow-prod-TaxiEtl.template.json", BULK_STATE_MACHINE),
    ]
    per_batch = [machine for machine in machines if machine.logical_id == STATE_MACHINE]
    assert [machine.definition["States"]["Validation"]["Resource"] for machine in per_batch] == [VALIDATION_ARN, VALIDATION_ARN]
    # (the bulk machine's Distributed Map with its reader's partition and its child's function resolved too)
    bulk = [machine.definition["States"]["Chunks"] for machine in machines if machine.logical_id == BULK_STATE_MACHINE]
    assert [chunks["ItemReader"]["Resource"] for chunks in bulk] == ["arn:aws:states:::s3:getObject"] * 2
    assert [chunks["ItemProcessor"]["States"]["Chunk"]["Resource"] for chunks in bulk] == [CHUNK_ARN] * 2
    assert findings == []


def test_the_command_prints_one_line_per_finding_and_exits_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a good assembly and one with a missing Next target
    text, replacement = BREAKAGES["missing-next"]
    good = write_assembly(tmp_path / "good", {TAXI_ETL_STACK: taxi_etl_template()})
    broken = write_assembly(tmp_path / "broken", {TAXI_ETL_STACK: inject(taxi_etl_template(), text, replacement)})
    # When the command runs on both
    status = main([str(good), str(broken)])
    lines = capsys.readouterr().out.splitlines()
    # Then it exits 1, each finding's line names the template, the state machine, the state and the problem
    assert status == 1
    template = f"{broken}/{TAXI_ETL_STACK}.template.json"
    assert f'{template}: {STATE_MACHINE}: Validation: Next "ValidationRejected" names no state of its scope' in lines
    assert all(line.startswith(f"{template}: {STATE_MACHINE}: ") for line in lines[:-1])
    assert lines[-1] == f"asl_gate: 4 state machine(s) in {good}, {broken}: {len(lines) - 1} finding(s)"
    # And on the good assembly alone it exits 0
    assert main([str(good)]) == 0


def test_cfn_lint_lets_a_breakage_in_the_join_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the template with an unknown field injected into its joined definition
    text, replacement = BREAKAGES["unknown-state-field"]
    template = inject(taxi_etl_template(), text, replacement)
    # When cfn-lint (as `make cfn-lint` configures it) lints it, from a folder without the repository's
    # .cfnlintrc.yaml (cfn-lint reads it from the working directory, and its template globs fail
    # until the gate's own synth has written cdk.out/)
    monkeypatch.chdir(tmp_path)
    matches = lint(json.dumps(template), config=ManualArgs(regions=["us-east-1"], ignore_checks=["W3005"]))
    # Then it finds nothing, its state machine rule (E3601) included: the gate is what refuses it (below)
    assert resources_of_type(template, "AWS::StepFunctions::StateMachine").keys() == {STATE_MACHINE, BULK_STATE_MACHINE}
    assert [str(match) for match in matches] == []


def test_the_gates_state_fields_are_the_ones_asl_validator_accepts() -> None:
    # Given asl-validator's schema of each state type, its JSONPath and JSONata variants together
    schemas = PROJECT_ROOT / "node_modules" / "asl-validator" / "dist" / "src" / "schemas"
    accepted: dict[str, set[str]] = {}
    for state_type in STATE_FIELDS:
        variants = json.loads((schemas / f"{state_type.lower()}.json").read_text())["oneOf"]
        accepted[state_type] = {field for variant in variants for field in variant["properties"]}
    # Then the gate names the same fields unknown (it names them; asl-validator only refuses the state),
    # except End on a Choice state, which the ASL specification does not allow and asl-validator does
    assert "End" in accepted["Choice"]
    assert {state_type: set(fields) for state_type, fields in STATE_FIELDS.items()} == {**accepted, "Choice": accepted["Choice"] - {"End"}}


# --- each breakage fails the gate --------------------------------------------------------------------


def test_an_unknown_state_field_is_refused_by_asl_validator_and_named_by_the_gate(broken_findings: dict[str, list[Finding]]) -> None:
    # Given the breakage "TimeoutSecond" (for TimeoutSeconds) in the Validation task
    found = broken_findings["unknown-state-field"]
    # Then asl-validator refuses the state (without naming the field), and the gate's own check names it
    assert validator_problems(found) == {
        ("Validation", "asl-validator SCHEMA_VALIDATION_FAILED: /States/Validation is invalid. must match exactly one schema in oneOf")
    }
    assert ("Validation", 'unknown field "TimeoutSecond" for a Task state') in problems(found)


def test_an_unknown_catcher_field_is_refused_though_asl_validator_accepts_it(broken_findings: dict[str, list[Finding]]) -> None:
    # Given a retrier's MaxAttempts in the Validation task's last catcher
    found = broken_findings["unknown-catcher-field"]
    # Then asl-validator says nothing, and the gate refuses it
    assert validator_problems(found) == set()
    assert problems(found) == {("Validation", 'unknown field "MaxAttempts" in Catch[1]')}


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("catcher-without-next", "/States/Validation/Catch/1 is invalid. must have required property 'Next'"),
        ("catcher-errors-not-a-list", "/States/Validation/Catch/1/ErrorEquals is invalid. must be array"),
    ],
)
def test_an_invalid_catcher_is_refused(broken_findings: dict[str, list[Finding]], breakage: str, message: str) -> None:
    # Given a catcher without its Next, or with ErrorEquals a string
    found = broken_findings[breakage]
    # Then asl-validator refuses it, in the Validation state
    assert validator_problems(found) == {("Validation", f"asl-validator SCHEMA_VALIDATION_FAILED: {message}")}


@pytest.mark.parametrize(
    ("breakage", "state", "problem"),
    [
        ("missing-next", "Validation", 'Next "ValidationRejected" names no state of its scope'),
        ("missing-default", "ValidationRejects", 'Default "Transform" names no state of its scope'),
        ("missing-choice-next", "ValidationRejects", 'Choices[0].Next "FlagValidations" names no state of its scope'),
        ("missing-catch-next", "Validation", 'Catch[1].Next "FlagValidationn" names no state of its scope'),
    ],
)
def test_a_transition_to_a_missing_state_is_refused(
    broken_findings: dict[str, list[Finding]], breakage: str, state: str, problem: str
) -> None:
    # Given a Next, a Default, a Choice rule's Next or a catcher's Next naming no state
    found = broken_findings[breakage]
    # Then the gate names the state and the transition
    assert (state, problem) in problems(found)


def test_an_unreachable_state_is_refused(broken_findings: dict[str, list[Finding]]) -> None:
    # Given a Wait state that only itself transitions to
    found = broken_findings["unreachable-state"]
    # Then the gate finds it unreachable, where asl-validator's own check (any Next naming it) is satisfied
    assert problems(found) == {("Orphan", 'unreachable: no transition leads to it from StartAt "Validation"')}


@pytest.mark.parametrize(
    ("breakage", "problem"),
    [
        ("all-retrier-not-last", "Retry[0]: States.ALL must be in the last entry of Retry, not 1 of 4"),
        ("all-catcher-not-last", "Catch[1]: States.ALL must be in the last entry of Catch, not 2 of 3"),
        ("all-catcher-not-alone", 'Catch[1]: States.ALL must be alone in its ErrorEquals, not with ["States.ALL", "States.Timeout"]'),
    ],
)
def test_states_all_that_is_not_last_or_not_alone_is_refused(
    broken_findings: dict[str, list[Finding]], breakage: str, problem: str
) -> None:
    # Given States.ALL in the first of the Validation task's retriers, before its last catcher, or beside another error
    found = broken_findings[breakage]
    # Then the gate refuses exactly that (asl-validator accepts it)
    assert problems(found) == {("Validation", problem)}
