"""`python -m devtools.serve`'s command line: what it refuses before starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import serve
from devtools.aws.template_resources import Template
from devtools.local.stack import check_overrides, local_stack_name
from runtime.event_log import contract as event_log_contract


@pytest.fixture(autouse=True)
def process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve.main sets these for the handlers it imports; keep this process's as they were."""
    for name, value in serve.PROCESS_ENV.items():
        monkeypatch.setenv(name, value)


def test_a_missing_assembly_says_to_synthesize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # When serve is pointed at a folder with no cloud assembly
    with pytest.raises(SystemExit) as ended:
        serve.main(["--assembly", str(tmp_path / "nothing")])
    # Then it ends with exit 2 and names the command that writes one
    assert ended.value.code == 2
    assert "make synth ENV=dev" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--set", "SNAPSHOT_EVERY"], ["--set", "=10"], ["--port-base", "65534"]])
def test_malformed_options_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # When an override has no NAME=VALUE form, or the ports would not fit
    with pytest.raises(SystemExit) as ended:
        serve.main(argv)
    # Then argparse refuses it (exit 2) before anything starts
    assert ended.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_an_override_no_function_has_is_refused(dev_templates: dict[str, Template]) -> None:
    # Given the synthesized templates, When a known and a misspelt variable are overridden
    check_overrides(dev_templates, {event_log_contract.ENV_SNAPSHOT_EVERY: "10"})
    with pytest.raises(ValueError, match="SNAPSHOT_EVRY"):
        check_overrides(dev_templates, {"SNAPSHOT_EVRY": "10"})
    # Then only the misspelt one is an error


@pytest.mark.parametrize(
    ("deployed", "local"),
    [("Onceflow-dev-EventLog", "Onceflow-local-EventLog"), ("Onceflow-prod-TaxiEtl", "Onceflow-local-TaxiEtl")],
)
def test_local_stack_names_keep_the_kind(deployed: str, local: str) -> None:
    # When a deployed stack name is turned into its local one, Then only the environment changes
    assert local_stack_name(deployed) == local
