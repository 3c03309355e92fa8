"""benchmarks/cold_start.py measures what Lambda runs: every function of the synthesized template, its
own environment plus Lambda's with tracing active, imported from the built code asset and SDK layer with
their bytecode on Lambda's sys.path, and refuses a run that compiled, wrote or loaded anything else."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import cold_start
from benchmarks.cold_start import PROJECT_ROOT, LambdaFiles
from devtools.aws.template_resources import Template
from runtime.shared.contract import TRACING_MODE_VARIABLE, TracingMode
from tests.unit.test_entry_points import handler_paths

LAMBDA = LambdaFiles(task_root=Path("/var/task"), opt=Path("/opt"), runtime_dir=Path("/var/runtime"))
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
    env = cold_start.lambda_environment(function, LAMBDA)
    # Then none of the shell's variables come in: tracing stays active, no PYTHON* variable at all
    assert "POWERTOOLS_TRACE_DISABLED" not in env
    assert not [name for name in env if name.startswith("PYTHON")]
    # And it has the function's own variables and those Lambda sets, for this interpreter's runtime
    assert env["POWERTOOLS_SERVICE_NAME"] == "event-log-snapshots"
    assert env["_HANDLER"] == "runtime.event_log.worker_handler.handler"
    assert env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "512"
    assert env["LAMBDA_TASK_ROOT"] == "/var/task"
    assert env["LAMBDA_RUNTIME_DIR"] == "/var/runtime"
    assert env["AWS_EXECUTION_ENV"] == f"AWS_Lambda_python{sys.version_info.major}.{sys.version_info.minor}" == "AWS_Lambda_python3.13"
    assert env["AWS_XRAY_DAEMON_ADDRESS"] == "169.254.79.129:2000"
    assert env["_X_AMZN_TRACE_ID"].endswith("Sampled=1")
    # And the tracing mode is the template's (the default: no SDK), unless the SDK mode is measured beside it
    assert env[TRACING_MODE_VARIABLE] == "active"
    assert cold_start.lambda_environment(function, LAMBDA, TracingMode.SDK)[TRACING_MODE_VARIABLE] == "sdk"
    # And sys.path's folders are in the order of Lambda's python3.13 runtime
    assert [str(folder) for folder in LAMBDA.search_path] == [
        "/var/task",
        "/opt/python/lib/python3.13/site-packages",
        "/opt/python",
        "/var/runtime",
    ]


def test_the_lambda_folders_hold_the_asset_and_the_layers_and_refuse_any_file_written(tmp_path: Path) -> None:
    # Given a code asset and an SDK layer as lambda_assets builds them (here, one module each, with bytecode)
    asset = tmp_path / "asset"
    (asset / "runtime").mkdir(parents=True)
    (asset / "runtime" / "__init__.py").write_text("")
    layer = tmp_path / "layer"
    (layer / "python" / "boto3").mkdir(parents=True)
    (layer / "python" / "boto3" / "__init__.py").write_text("__version__ = 'layer'\n")
    # When the benchmark stages a Lambda environment's folders from them
    with cold_start.lambda_files(asset, layer) as files:
        staged = {str(path.relative_to(files.task_root.parent.parent)) for path in cold_start.files_under(files.task_root.parent.parent)}
    # Then /var/task is the asset, /opt/python the Powertools layer with the SDK layer extracted over it (its boto3),
    # and the runtime's folder holds the snapshot_restore_py stand-in with its bytecode
    assert "var/task/runtime/__init__.py" in staged
    assert "opt/python/boto3/__init__.py" in staged
    assert "opt/python/aws_lambda_powertools/__init__.py" in staged
    assert "opt/python/aws_lambda_powertools/logging/__pycache__/logger.cpython-313.pyc" in staged
    assert "opt/python/typing_extensions.py" in staged
    assert "opt/python/__pycache__/typing_extensions.cpython-313.pyc" in staged
    assert "var/runtime/snapshot_restore_py.py" in staged
    assert "var/runtime/__pycache__/snapshot_restore_py.cpython-313.pyc" in staged
    assert not any(".dist-info" in path for path in staged if path.startswith("opt/python/aws_lambda_powertools"))
    # And a file written into them while measuring fails the run (those runs would not have been cold)
    with pytest.raises(RuntimeError, match="written into the Lambda folders"), cold_start.lambda_files(asset, layer) as files:
        (files.task_root / "runtime" / "__pycache__").mkdir()
        (files.task_root / "runtime" / "__pycache__" / "__init__.cpython-313.pyc").write_bytes(b"\0")


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


@pytest.fixture(scope="module")
def built_lambda() -> Iterator[LambdaFiles]:
    """The built code asset and SDK layer, staged once for this module's measurements."""
    with cold_start.lambda_files(*cold_start.built_assets()) as files:
        yield files


def test_a_handler_is_measured_as_lambda_loads_it_from_the_asset_bytecode(
    dev_templates: dict[str, Template], built_lambda: LambdaFiles
) -> None:
    # Given the runner-stats function and the staged asset and layers
    function = next(f for f in cold_start.lambda_functions(dev_templates) if f.module == "runtime.runner_stats.handler")
    env = cold_start.lambda_environment(function, built_lambda)
    # When one fresh interpreter imports it and calls its entry point (handle stubbed, deps built for real)
    seen = cold_start.run_probe(function.module, function.entry_point, env, built_lambda)
    # Then it was loaded from the asset's bytecode, nothing compiled, nothing written, on Lambda's sys.path
    assert seen["file"] == str(built_lambda.task_root / "runtime" / "runner_stats" / "handler.py")
    assert seen["cached"] == str(built_lambda.task_root / "runtime" / "runner_stats" / "__pycache__" / "handler.cpython-313.pyc")
    assert seen["compiled"] == []
    assert seen["bytecode_written"] is False
    assert seen["path"][:4] == [str(folder) for folder in built_lambda.search_path]
    # And every module came from Lambda's folders: the project's from /var/task, boto3 and Powertools from /opt/python,
    # the rest from the standard library; none from this repository or this venv
    assert seen["stray"] == []
    assert seen["loaded_from"][str(built_lambda.task_root)] > 10
    assert seen["loaded_from"][str(built_lambda.opt / "python")] > 100
    assert not [root for root in seen["loaded_from"] if str(PROJECT_ROOT) in root or ".venv" in root]
    # And the import and the first invocation's extra cost were measured; the bench accepts the run
    assert seen["import_ms"] > 0
    assert seen["first_extra_ms"] is not None
    assert cold_start.probe(function.module, function.entry_point, env, built_lambda).import_ms > 0


def test_bare_boto3_is_imported_from_the_sdk_layer(built_lambda: LambdaFiles) -> None:
    # Given the staged asset and layers
    # When the baseline is measured
    seen = cold_start.run_probe(cold_start.BASELINE, None, cold_start.lambda_environment(None, built_lambda), built_lambda)
    # Then boto3 and botocore came from the SDK layer, with its bytecode
    assert seen["file"] == str(built_lambda.opt / "python" / "boto3" / "__init__.py")
    assert seen["compiled"] == []
    assert seen["stray"] == []


def test_a_module_without_its_bytecode_in_the_asset_fails_the_run(dev_templates: dict[str, Template], tmp_path: Path) -> None:
    # Given a code asset one of whose modules lost its .pyc (Lambda would compile it at every cold start)
    code_asset, sdk_layer = cold_start.built_assets()
    asset = tmp_path / "asset"
    shutil.copytree(code_asset, asset)
    (asset / "runtime" / "runner_stats" / "__pycache__" / "logic.cpython-313.pyc").unlink()
    function = next(f for f in cold_start.lambda_functions(dev_templates) if f.module == "runtime.runner_stats.handler")
    # When the handler is measured, Then the run is refused, naming the module compiled from source
    with (
        cold_start.lambda_files(asset, sdk_layer) as files,
        pytest.raises(RuntimeError, match=r"compiled from source.*runner_stats/logic\.py"),
    ):
        cold_start.probe(function.module, function.entry_point, cold_start.lambda_environment(function, files), files)


@pytest.mark.parametrize(
    ("seen", "refusal"),
    [
        ({"file": "/elsewhere/runtime/x.py"}, "not from /var/task"),
        ({"path": ["/var/task", "/opt/python"]}, "sys.path was not Lambda's"),
        ({"stray": ["/work/.venv/lib/python3.13/site-packages/six.py"]}, "outside Lambda's folders"),
        ({"bytecode_written": True}, "would write bytecode"),
        ({"compiled": ["/var/task/runtime/x.py"]}, "compiled from source"),
    ],
)
def test_a_measurement_that_was_not_lambdas_cold_start_is_refused(seen: dict[str, Any], refusal: str) -> None:
    # Given what a probe of runtime.x saw, as Lambda's cold start but for one thing
    lambda_like = {
        "file": "/var/task/runtime/x.py",
        "path": [*[str(folder) for folder in LAMBDA.search_path], "/usr/lib/python3.13"],
        "stray": [],
        "bytecode_written": False,
        "compiled": [],
    }
    cold_start.check_probe("runtime.x", lambda_like, LAMBDA)
    # When the benchmark checks it, Then it is refused with the reason
    with pytest.raises(RuntimeError, match=refusal):
        cold_start.check_probe("runtime.x", {**lambda_like, **seen}, LAMBDA)


def test_a_snapstart_handler_is_measured_after_a_restore_and_the_first_call_taken_apart(
    dev_templates: dict[str, Template], built_lambda: LambdaFiles
) -> None:
    # Given the taxi authorizer, which registers an after-restore hook, and the runner-stats handler, which does not
    functions = {f.module: f for f in cold_start.lambda_functions(dev_templates)}
    authorizer, runner = functions["runtime.taxi_etl.authorizer_handler"], functions["runtime.runner_stats.handler"]
    # When each is measured
    restored = cold_start.probe(
        authorizer.module, authorizer.entry_point, cold_start.lambda_environment(authorizer, built_lambda), built_lambda
    )
    plain = cold_start.probe(runner.module, runner.entry_point, cold_start.lambda_environment(runner, built_lambda), built_lambda)
    # Then the authorizer's hooks ran (through the snapshot_restore_py stand-in) and the first call after them was timed
    assert restored.restore_hooks_ms is not None and restored.restore_first_extra_ms is not None
    assert plain.restore_hooks_ms is None and plain.restore_first_extra_ms is None
    # And the runner's first call, taken apart, built its DynamoDB client and read its service model and endpoint rules
    parts, clients = cold_start.first_call_breakdown(runner, built_lambda, runs=1)
    assert clients == ["dynamodb"]
    assert 0 < parts["service models"] < parts["client construction"] <= parts["first call"]
    assert parts["endpoint rule sets"] > 0


def test_a_handlers_import_is_split_in_its_own_bare_boto3_and_the_rest(
    dev_templates: dict[str, Template], built_lambda: LambdaFiles
) -> None:
    # Given a handler and the staged asset and layers
    function = next(f for f in cold_start.lambda_functions(dev_templates) if f.module == "runtime.event_log.router_handler")
    env = cold_start.lambda_environment(function, built_lambda)
    # When one interpreter measures it, and another the baseline
    handler = cold_start.probe(function.module, function.entry_point, env, built_lambda)
    baseline = cold_start.probe(cold_start.BASELINE, None, cold_start.lambda_environment(None, built_lambda), built_lambda)
    # Then the handler's import holds its own bare boto3 part and more; the baseline is that part alone
    assert 0 < handler.boto3_ms < handler.import_ms
    assert baseline.boto3_ms == baseline.import_ms
    # And the paired ratio is each interpreter's own: the median of import / boto3 part
    figures = [
        cold_start.Figures(import_ms=120.0, import_wall_ms=0.0, first_extra_ms=30.0, boto3_ms=100.0),
        cold_start.Figures(import_ms=260.0, import_wall_ms=0.0, first_extra_ms=20.0, boto3_ms=200.0),
        cold_start.Figures(import_ms=110.0, import_wall_ms=0.0, first_extra_ms=40.0, boto3_ms=100.0),
    ]
    assert cold_start.paired_ratio(figures) == pytest.approx(1.2)
    assert cold_start.paired_ratio(figures, with_first_call=True) == pytest.approx(1.5)


# What a handler's cold start must not load, beyond another function's entry point or wiring: what only other
# paths of its slice use (each frozen dataclass of a slice's models costs about a millisecond at import).
NOT_ON_THE_COLD_PATH = {
    "runtime.event_log.router_handler": ("runtime.event_log.models", "runtime.event_log.parsing", "runtime.event_log.store"),
    "runtime.event_log.finalizer_handler": ("runtime.event_log.models", "runtime.event_log.parsing", "runtime.event_log.store"),
    "runtime.event_log.worker_handler": ("runtime.event_log.service", "runtime.event_log.parsing"),
    "runtime.taxi_etl.row_state_handler": ("runtime.taxi_etl.requests", "runtime.taxi_etl.trip_lines", "runtime.taxi_etl.state_budget"),
}
# Another function's wiring that a handler composes: the taxi API answers a re-sent row from its state, read as GET does.
COMPOSED_WIRING = {"runtime.taxi_etl.api_handler": {"runtime.taxi_etl.row_state_wiring"}}


def wiring_of(handler_module: str) -> str:
    package, _, name = handler_module.rpartition(".")
    return f"{package}.{name.removesuffix('handler')}wiring"


def test_a_handlers_cold_start_loads_only_its_own_function_and_no_tracing_sdk(
    dev_templates: dict[str, Template], built_lambda: LambdaFiles
) -> None:
    # Given every function of the dev templates, tracing in the default mode, and the staged asset and layers
    functions = cold_start.lambda_functions(dev_templates)
    assert {f.environment.get(TRACING_MODE_VARIABLE, TracingMode.ACTIVE.value) for f in functions} == {TracingMode.ACTIVE.value}
    assert set(NOT_ON_THE_COLD_PATH) | set(COMPOSED_WIRING) <= {f.module for f in functions}
    for function in functions:
        # When a fresh interpreter imports its handler module from the asset's bytecode
        seen = cold_start.run_probe(function.module, None, cold_start.lambda_environment(function, built_lambda), built_lambda)
        cold_start.check_probe(function.module, seen, built_lambda)
        loaded = set(seen["modules"])
        assert function.module in loaded
        # Then no other function's handler module or wiring was loaded (but the one it composes)
        others = {f.module for f in functions if f is not function}
        assert not loaded & others, function.module
        assert not loaded & ({wiring_of(module) for module in others} - COMPOSED_WIRING.get(function.module, set())), function.module
        # And nothing its cold path does not use, and no X-Ray SDK (Lambda traces in the `active` mode)
        assert not loaded & set(NOT_ON_THE_COLD_PATH.get(function.module, ())), function.module
        assert not [name for name in loaded if name.split(".")[0] == "aws_xray_sdk"], function.module
