"""The client commands without the `clients` extra (boto3, botocore, tqdm): --help still works, and
any command ends with one line saying how to install the extra, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Imported first by the subprocess (sitecustomize on PYTHONPATH): every import of the extra's modules fails,
# as in an environment where `pip install onceflow` ran without `[clients]`.
BLOCKER = """
import sys

class WithoutTheClientsExtra:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("boto3", "botocore", "tqdm"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, WithoutTheClientsExtra())
"""
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
COMMANDS = {
    "onceflow-event-log": ["snapshot", "budget-2027", "--url", "http://127.0.0.1:9/"],
    "onceflow-taxi-load": ["trips.csv", "--url", "http://127.0.0.1:9/", "--bucket", "b", "--api-key", "k"],
}


def run_script(name: str, args: list[str], blocker_dir: Path) -> subprocess.CompletedProcess[str]:
    """The console script `name` as its wrapper runs it (import the entry point, call it), without the extra."""
    module, _, function = SCRIPTS[name].partition(":")
    code = f"import sys; sys.argv[0] = {name!r}; from {module} import {function}; sys.exit({function}())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env={"PYTHONPATH": f"{blocker_dir}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def blocker_dir(tmp_path: Path) -> Path:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    return tmp_path


def test_the_blocker_hides_the_extra(blocker_dir: Path) -> None:
    # Given the subprocess environment of these tests, When it imports boto3, Then it fails as if not installed
    result = subprocess.run(
        [sys.executable, "-c", "import boto3"], env={"PYTHONPATH": str(blocker_dir)}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1 and "No module named 'boto3'" in result.stderr


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_without_the_extra_says_in_one_line_how_to_install_it(name: str, blocker_dir: Path) -> None:
    # Given the console script's entry point, without the extra installed
    assert name in SCRIPTS
    # When a command is run
    result = run_script(name, COMMANDS[name], blocker_dir)
    # Then it ends with exit status 2 and one line naming the extra and how to install it; no traceback
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{name} needs the clients extra (missing: boto3, botocore, tqdm): pip install 'onceflow[clients]' ")
    assert "[clients]')" in line and "Traceback" not in result.stderr


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_works_without_the_extra(name: str, blocker_dir: Path) -> None:
    # When --help is asked for without the extra, Then the usage is printed and the exit status is 0
    result = run_script(name, ["--help"], blocker_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {name}") and result.stderr == ""
