"""benchmarks/cold_start.py measures what Lambda runs: every function of the synthesized template, its
own environment plus Lambda's with tracing active, and the project's modules compiled from source."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import cold_start
from devtools.aws.template_resources import Template
from runtime.shared.contract import TRACING_MODE_VARIABLE, TracingMode
from tests.unit.test_entry_points import handler_paths

IMPORTTIME_STDERR = f"""import time: self [us] | cumulative | imported package
import time:       150 |        150 | encodings
{cold_start.IMPORTTIME_MARK}
import time:       120 |        120 |     runtime.shared.settings
import time:      2500 |       2620 |   runtime.taxi_etl.settings
import time:        80 |       2700 | runtime.taxi_etl.validate_handler
"""


def test_every_function_of_the_dev_templates_is_measured_once(dev_templates: dict[str, Template]) -> None:
    # Given the synthesized dev templates
    # When the benchmark lists what it measures
    functions = cold_start.lambda_functions(dev_templates)
    # Then it is every handler the contracts name, one function per handler module
    assert sorted(function.handler for function in functions) == handler_paths()
    assert len({function.module for function in functions}) == len(functions)
    # And each function's environment is the template's, with every reference resolved to a string
    runner = next(function for function in functions if function.module == "runtime.runner_stats.handler")
    assert runner.environment["POWERTOOLS_SERVICE_NAME"] == "runner-stats"
    assert all(isinstance(value, str) and value for function in functions for value in function.environment.values())


def test_the_measured_environment_is_lambdas_with_tracing_active(
    dev_templates: dict[str, Template], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a shell that disables tracing (as the tests do) and keeps bytecode elsewhere
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "/tmp/elsewhere")
    function = next(f for f in cold_start.lambda_functions(dev_templates) if f.module == "runtime.event_log.worker_handler")
    # When the benchmark builds the worker's environment
    env = cold_start.lambda_environment(function, Path("/var/task"))
    # Then none of the shell's variables come in: tracing stays active, bytecode is neither written nor redirected
    assert "POWERTOOLS_TRACE_DISABLED" not in env
    assert "PYTHONPYCACHEPREFIX" not in env
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    # And it has the function's own variables and those Lambda sets
    assert env["POWERTOOLS_SERVICE_NAME"] == "event-log-snapshots"
    assert env["_HANDLER"] == "runtime.event_log.worker_handler.handler"
    assert env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "512"
    assert env["LAMBDA_TASK_ROOT"] == env["PYTHONPATH"] == "/var/task"
    assert env["AWS_EXECUTION_ENV"] == "AWS_Lambda_python3.13"
    assert env["AWS_XRAY_DAEMON_ADDRESS"] == "169.254.79.129:2000"
    assert env["_X_AMZN_TRACE_ID"].endswith("Sampled=1")
    # And the tracing mode is the template's (the default: no SDK), unless the SDK mode is measured beside it
    assert env[TRACING_MODE_VARIABLE] == "active"
    assert cold_start.lambda_environment(function, Path("/var/task"), TracingMode.SDK)[TRACING_MODE_VARIABLE] == "sdk"


def test_the_asset_copy_has_no_bytecode_and_refuses_any_written_during_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a project whose runtime/ has compiled bytecode beside its source
    package = tmp_path / "runtime" / "shared"
    (package / "__pycache__").mkdir(parents=True)
    (package / "settings.py").write_text("VALUE = 1\n")
    (package / "__pycache__" / "settings.cpython-311.pyc").write_bytes(b"\0")
    monkeypatch.setattr(cold_start, "PROJECT_ROOT", tmp_path)
    # When the benchmark copies it
    with cold_start.asset_copy() as task_root:
        copied = sorted(str(path.relative_to(task_root)) for path in task_root.rglob("*"))
    # Then the copy is the source alone, as the asset ships it
    assert copied == ["runtime", "runtime/shared", "runtime/shared/settings.py"]
    # And bytecode written into the copy while measuring fails the run (those runs would not have been cold)
    with pytest.raises(RuntimeError, match="bytecode was written"), cold_start.asset_copy() as task_root:
        (task_root / "runtime" / "shared" / "settings.cpython-311.pyc").write_bytes(b"\0")


def test_importtime_lines_after_the_mark_are_the_modules_import() -> None:
    # Given `python -X importtime` output with the interpreter's start-up before the mark
    # When it is parsed
    rows = cold_start.parse_importtime(IMPORTTIME_STDERR)
    # Then only the module's own imports remain, with their self and cumulative µs
    assert [(row.module, row.self_us, row.cumulative_us) for row in rows] == [
        ("runtime.shared.settings", 120.0, 120.0),
        ("runtime.taxi_etl.settings", 2500.0, 2620.0),
        ("runtime.taxi_etl.validate_handler", 80.0, 2700.0),
    ]
    # And the project's modules are grouped by slice
    assert cold_start.by_package(rows) == [("runtime.taxi_etl", 2580.0), ("runtime.shared", 120.0)]


def test_a_handler_is_measured_from_the_copy_with_its_first_invocation(dev_templates: dict[str, Template]) -> None:
    # Given the runner-stats function and a copy of the asset
    function = next(f for f in cold_start.lambda_functions(dev_templates) if f.module == "runtime.runner_stats.handler")
    with cold_start.asset_copy() as task_root:
        # When one fresh interpreter imports it and calls its entry point (handle stubbed, deps built for real)
        figures = cold_start.probe(function.module, function.entry_point, cold_start.lambda_environment(function, task_root), task_root)
    # Then the import took some time and the first invocation's extra cost was measured
    assert figures.import_ms > 0
    assert figures.import_wall_ms > 0
    assert figures.first_extra_ms is not None
