"""Under xdist, each environment is synthesized once per run and read by every worker from its cloud
assembly (tests/conftest.py, templates_for): the first worker to ask synthesizes, the others read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tests.conftest as suite_conftest

STACK = "Onceflow-test-Stack"


def fake_synth(calls: list[str]) -> Any:
    """A synth that writes a one-stack cloud assembly, as CDK lays it out, and counts itself."""

    def synth_templates(env_name: str, outdir: str) -> dict[str, Any]:
        calls.append(env_name)
        template = {"Resources": {"Table": {"Type": "AWS::DynamoDB::Table", "Properties": {"env": env_name}}}}
        (Path(outdir)).mkdir(parents=True, exist_ok=True)
        (Path(outdir) / f"{STACK}.template.json").write_text(json.dumps(template))
        artifact = {"type": "aws:cloudformation:stack", "properties": {"templateFile": f"{STACK}.template.json"}}
        (Path(outdir) / "manifest.json").write_text(json.dumps({"artifacts": {STACK: artifact}}))
        return {STACK: template}

    return synth_templates


def test_the_second_worker_of_a_run_reads_the_first_one_s_assembly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(suite_conftest, "synth_templates", fake_synth(calls))
    monkeypatch.setattr(suite_conftest, "_SHARED_TEMP", tmp_path)
    # Given one worker that synthesized dev into the run's shared temp
    first = suite_conftest._synthesized_assembly("dev")
    # When another worker of the run asks for dev, and then for prod
    second = suite_conftest._synthesized_assembly("dev")
    prod = suite_conftest._synthesized_assembly("prod")
    # Then dev was synthesized once, both read the same assembly, and prod has its own
    assert calls == ["dev", "prod"]
    assert first == second != prod
    assert suite_conftest.load_assembly(second)[STACK]["Resources"]["Table"]["Properties"] == {"env": "dev"}


def test_an_assembly_left_half_written_is_synthesized_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(suite_conftest, "synth_templates", fake_synth(calls))
    monkeypatch.setattr(suite_conftest, "_SHARED_TEMP", tmp_path)
    # Given a worker that died while synthesizing: files there, no mark that the synth finished
    (tmp_path / "onceflow-dev-assembly").mkdir()
    (tmp_path / "onceflow-dev-assembly" / "manifest.json").write_text("{")
    # When a worker asks for dev
    outdir = suite_conftest._synthesized_assembly("dev")
    # Then it synthesizes afresh, and the assembly reads back whole
    assert calls == ["dev"]
    assert STACK in suite_conftest.load_assembly(outdir)
