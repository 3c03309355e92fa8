"""`make test`'s coverage measures with sys.monitoring (pyproject.toml, [tool.coverage.run]).

On the suite's Python (3.13) sys.monitoring measures lines but not branches; asking for branches
silently moves coverage to the C tracer on sys.settrace, which costs the suite about 40 % more CPU
and a fault sweep 3.2 times (docs/development.md, "Coverage"). This keeps that from coming back
unnoticed, and says when branches can be measured cheaply again.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import coverage

ROOT = Path(__file__).resolve().parents[2]

# Starts coverage from the project's configuration in a fresh interpreter (the suite's own coverage,
# when it runs, must not be disturbed) and prints the measuring core and whether branches are measured.
PROBE = """
import coverage
measured = coverage.Coverage(config_file="pyproject.toml", data_file=None)
measured.start()
info = dict(measured.sys_info())
measured.stop()
print(info["core"], measured.get_option("run:branch"))
"""


def measuring_core() -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-I", "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    core, branch = done.stdout.split()
    assert "no-sysmon" not in done.stderr, done.stderr
    return core, branch


def test_the_suite_s_coverage_measures_lines_with_sys_monitoring() -> None:
    # Given the project's coverage configuration, on the suite's interpreter
    # When coverage starts from it
    core, branch = measuring_core()
    # Then it measures with sys.monitoring, lines only: the C tracer's sys.settrace would cost the suite
    # about 40 % more CPU on this Python
    assert (core, branch) == ("SysMonitor", "False")


def test_branches_are_off_only_because_this_python_cannot_monitor_them() -> None:
    # Given the interpreter and coverage the suite runs on
    # Then sys.monitoring cannot measure branches here; when it can (Python 3.14 with this coverage),
    # this fails, so that `branch = true` comes back in pyproject.toml at no cost
    assert not coverage.env.PYBEHAVIOR.branch_right_left, "sys.monitoring measures branches on this Python: set branch = true"
