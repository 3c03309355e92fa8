"""Cold start (`make bench --only latency`): each handler's import, as Lambda pays it, against bare boto3.

Every AWS::Lambda::Function of the synthesized templates whose handler lives in `runtime` is
measured in fresh interpreters of this interpreter's version (the functions' runtime, python3.13),
each with what that function gets in Lambda and nothing of this machine's environment:
  - the file system of a Lambda environment, staged in a temporary folder: the built code asset
    (onceflow/infra/lambda_assets.py: runtime/ with its unchecked-hash .pyc) as /var/task, the built
    SDK layer (boto3, botocore pruned to the functions' services, their dependencies, with .pyc)
    extracted into /opt with the Powertools layer (taken from this venv, as pip installed it), and
    the runtime's own folder with a stand-in of `snapshot_restore_py` (Lambda's module for the
    SnapStart hooks, which records them here). No .pyc may be written (-B, as on Lambda's
    read-only file system) and none may be compiled from source: both fail the run;
  - sys.path as the python3.13 runtime orders it: /var/task, /opt/python/lib/python3.13/site-packages,
    /opt/python, the runtime's folder, then the standard library; `python -I -S`, so neither this
    repository, this venv's site-packages nor any PYTHON* variable comes in. Every module loaded must
    come from one of these folders (else the run fails);
  - its own Environment.Variables from the template (references become placeholder names), the
    tracing mode among them (ONCEFLOW_TRACING: `active`, the default, imports no tracing SDK), and
    the variables Lambda sets (function name, memory, version, region, AWS_EXECUTION_ENV,
    LAMBDA_TASK_ROOT, _HANDLER, the trace header, the X-Ray daemon address, credentials); no
    POWERTOOLS_TRACE_DISABLED, so in the `sdk` mode the Tracer is active as deployed.

Per handler module it prints the median over RUNS interpreters of the import's CPU time (process
time: the import is CPU-bound, and unlike wall time it is not inflated by whatever else this machine
runs; the wall-clock median is printed beside it), its ratio to bare `import boto3` from the same
layer, pass/fail against TARGET_RATIO, and the
first invocation's extra CPU time: the first call of the entry point minus a warm call, with
`handle` stubbed out (no AWS call is made) and `deps()` real (settings, wiring, client
construction), so whatever an import leaves to the first invocation is counted there; "import +
1st" is what a cold start pays in all, against FIRST_CALL_TARGET_RATIO. Where it is above, the
first call of that handler is taken apart (median of BREAKDOWN_RUNS): the SDK modules it imports,
client construction, and within it the service models, endpoint rule sets and partitions loaded
and the endpoint rule trees built. For the handlers that register an after-restore hook, a
SnapStart restore is measured too: the hooks, then the first call after them. The same is
measured in the `sdk` tracing mode (Powertools' Tracer on the X-Ray SDK), in the same rounds, for
what that mode costs beside the default. Then `python -X importtime` of the slowest handler
module: the modules with the most self time (median of IMPORTTIME_RUNS interpreters) and the self
time per package.

The ratio is paired: a handler's interpreter imports boto3 first, timed apart, then the handler (every
handler imports boto3 at import, so the same modules load, boto3's first), and the median is taken of
each interpreter's own ratio, so a moment of load on this shared machine weighs on both sides. Beside
it: the handler's import beyond boto3 (ms), and the ratio against the separate bare-boto3 interpreters
of the same rounds (the estimate before, which the load between interpreters moved by up to 0.4x).

Measured on this machine's CPU (not Lambda's arm64): the ratio to boto3 is the figure to compare,
not the milliseconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from runtime.shared.contract import TRACING_MODE_VARIABLE, TracingMode

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RUNTIME_PACKAGE = "runtime"
PYTHON = f"python{sys.version_info.major}.{sys.version_info.minor}"
TARGET_RATIO = 1.2  # each handler module's import at most this many times bare boto3's
AIM_RATIO = 1.15
FIRST_CALL_TARGET_RATIO = 1.5  # import + first invocation, against bare boto3's import
RUNS = 9  # fresh interpreters per module; the median is reported
IMPORTTIME_RUNS = 3
BREAKDOWN_RUNS = 3
TOP = 10
BASELINE = "boto3"
REGION = "us-east-1"
ACCOUNT = "123456789012"
TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
PROBE_PREFIX = "@@cold-start "
IMPORTTIME_MARK = "@@cold-start-importtime"
# The AWS-managed Powertools layer: Powertools, its dependencies and its tracer extra's (the `sdk` mode).
POWERTOOLS_LAYER_DISTRIBUTIONS = ("aws-lambda-powertools", "aws-xray-sdk", "wrapt", "jmespath", "typing-extensions")
# Lambda's module for the SnapStart hooks, in the managed runtime's own folder; this stand-in records them.
SNAPSHOT_RESTORE_STAND_IN = '''"""Stand-in for Lambda's snapshot_restore_py (the cold-start benchmark's): it records the hooks."""

after_restore = []
before_snapshot = []


def register_after_restore(func, *args, **kwargs):
    after_restore.append((func, args, kwargs))
    return func


def register_before_snapshot(func, *args, **kwargs):
    before_snapshot.append((func, args, kwargs))
    return func
'''

# Runs in the measured interpreter (`python -I -S -B`). argv: sys.path's Lambda folders (os.pathsep-joined),
# the module, the entry point's name for a handler (else ""), and "breakdown" to take the first call apart.
# Every .py compiled from source is noted: a module without usable bytecode in the asset or a layer fails the run.
# The import is timed alone, a handler's in two parts: `import boto3` first (every handler imports it: the same
# modules load, in another order), then the rest, so each interpreter gives its own handler-to-boto3 ratio and a
# moment of load on this machine weighs on both. Then the entry point is called once cold and WARM_CALLS times warm; then, if
# the module registered after-restore hooks, a SnapStart restore: the hooks, and the first call after them.
WARM_CALLS = 3
# The SDK data files the breakdown names (by file name, without its extension); the others are "other SDK data".
SDK_DATA_PARTS = {
    "service-2": "service models",
    "endpoint-rule-set-1": "endpoint rule sets",
    "partitions": "partitions",
    "endpoints": "endpoints table",
}
PROBE = f"""
import _frozen_importlib_external, os, sys, time
LOADED = {SDK_DATA_PARTS!r}
lambda_folders = sys.argv[1].split(os.pathsep)
sys.path[:0] = lambda_folders
compiled = []
_source_to_code = _frozen_importlib_external.SourceLoader.source_to_code
def _noting_source_to_code(self, data, path, *args, **kwargs):
    compiled.append(path)
    return _source_to_code(self, data, path, *args, **kwargs)
_frozen_importlib_external.SourceLoader.source_to_code = _noting_source_to_code
entry_point = sys.argv[3]
wall, cpu = time.perf_counter(), time.process_time()
if entry_point:  # a handler: bare boto3 first, timed apart, then the rest of the handler's import
    import boto3
boto3_ms = (time.process_time() - cpu) * 1000
module = __import__(sys.argv[2], fromlist=["_"])
figures = {{"import_ms": (time.process_time() - cpu) * 1000, "import_wall_ms": (time.perf_counter() - wall) * 1000}}
figures["boto3_ms"] = boto3_ms if entry_point else figures["import_ms"]
import importlib.util
import json
import os
figures["modules"] = sorted(sys.modules)
figures["file"] = getattr(module, "__file__", "")
figures["cached"] = getattr(module, "__cached__", None)
figures["bytecode_written"] = not sys.dont_write_bytecode
figures["compiled"] = list(compiled)
figures["path"] = list(sys.path)
stray, loaded_from = [], {{}}
for name, loaded in list(sys.modules.items()):
    origin = getattr(loaded, "__file__", None)
    if not origin:
        continue
    root = next((folder for folder in sys.path if origin.startswith(folder + os.sep)), None)
    if root is None:
        stray.append(origin)
    else:
        loaded_from[root] = loaded_from.get(root, 0) + 1
figures["stray"] = stray
figures["loaded_from"] = loaded_from
if entry_point:
    class Context:
        function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
        function_version = os.environ["AWS_LAMBDA_FUNCTION_VERSION"]
        memory_limit_in_mb = int(os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"])
        invoked_function_arn = "arn:aws:lambda:{REGION}:{ACCOUNT}:function:" + function_name
        aws_request_id = "c6af9ac6-7b61-11e6-9a41-93e812345678"
        log_group_name = "/aws/lambda/" + function_name
        log_stream_name = "2026/01/01/[$LATEST]0123456789abcdef"
        def get_remaining_time_in_millis(self):
            return 30000
    entry = getattr(module, entry_point)
    module.handle = lambda event, context, deps: {{}}  # the entry point still builds deps() for real
    def call():
        cpu = time.process_time()
        entry({{}}, Context())
        return (time.process_time() - cpu) * 1000
    spent, clients = {{}}, []
    if sys.argv[4:] == ["breakdown"]:
        cpu = time.process_time()
        import boto3, botocore.client, botocore.endpoint_provider, botocore.loaders
        spent["SDK modules imported"] = (time.process_time() - cpu) * 1000
        active = set()
        def timed(label_of, function):
            def wrapper(*args, **kwargs):
                label = label_of(*args, **kwargs)
                if label is None or label in active:
                    return function(*args, **kwargs)
                active.add(label)
                cpu = time.process_time()
                try:
                    return function(*args, **kwargs)
                finally:
                    spent[label] = spent.get(label, 0.0) + (time.process_time() - cpu) * 1000
                    active.discard(label)
            return wrapper
        def constructing(service, *args, **kwargs):
            clients.append(service)
            return "client construction"
        def loaded(loader, name):
            kind = name.rpartition("/")[2]
            return LOADED.get(kind, "other SDK data")
        Loader, Provider = botocore.loaders.Loader, botocore.endpoint_provider.EndpointProvider
        boto3.client = timed(constructing, boto3.client)
        boto3.setup_default_session = timed(lambda *a, **k: "default session", boto3.setup_default_session)
        Loader.load_data_with_path = timed(loaded, Loader.load_data_with_path)  # where every data file is read
        Provider.__init__ = timed(lambda *a, **k: "endpoint rules built", Provider.__init__)
    first = call()
    warm = sorted(call() for _ in range({WARM_CALLS}))[{WARM_CALLS} // 2]
    figures["first_extra_ms"] = first - warm
    figures["first_spent"] = spent
    figures["clients"] = clients
    hooks = getattr(sys.modules.get("snapshot_restore_py"), "after_restore", [])
    if hooks and sys.argv[4:] != ["breakdown"]:
        cpu = time.process_time()
        for hook, args, kwargs in hooks:
            hook(*args, **kwargs)
        figures["restore_hooks_ms"] = (time.process_time() - cpu) * 1000
        figures["restore_first_extra_ms"] = call() - warm
print({PROBE_PREFIX!r} + json.dumps(figures), flush=True)
"""
IMPORTTIME_PROBE = (
    "import os, sys; sys.path[:0] = sys.argv[1].split(os.pathsep); "
    f"print({IMPORTTIME_MARK!r}, file=sys.stderr, flush=True); __import__(sys.argv[2])"
)
_IMPORTTIME_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)\s*$")
# The measured interpreter: isolated (no PYTHON* variables, no user site, no script folder on sys.path), no
# site-packages of this venv (-S), and no bytecode written (-B: Lambda's file system is read-only).
INTERPRETER_FLAGS = ("-I", "-S", "-B")


@dataclass(frozen=True)
class LambdaFiles:
    """A Lambda environment's read-only folders, staged: /var/task, /opt and the runtime's own."""

    task_root: Path  # the code asset
    opt: Path  # the layers, extracted into one folder as Lambda does
    runtime_dir: Path  # the managed runtime's modules (here only the snapshot_restore_py stand-in)

    @property
    def search_path(self) -> list[Path]:
        """sys.path's folders before the standard library, in the python3.13 runtime's order."""
        return [self.task_root, self.opt / "python" / "lib" / PYTHON / "site-packages", self.opt / "python", self.runtime_dir]


@dataclass(frozen=True)
class LambdaFunction:
    stack: str
    logical_id: str
    handler: str  # runtime.<pipeline>.<module>.<function>
    memory_mb: int
    environment: dict[str, str]

    @property
    def module(self) -> str:
        return self.handler.rpartition(".")[0]

    @property
    def entry_point(self) -> str:
        return self.handler.rpartition(".")[2]


@dataclass(frozen=True)
class Figures:
    import_ms: float  # CPU time of the import (process time: what other load on this machine does not inflate)
    import_wall_ms: float
    boto3_ms: float  # of import_ms, bare `import boto3`'s part (a handler's probe imports it first); all of it for the baseline
    first_extra_ms: float | None  # CPU time of the first call minus a warm call's; None for the baseline
    first_spent: dict[str, float] = field(default_factory=dict)  # CPU ms per part of the first call (breakdown only)
    clients: tuple[str, ...] = ()  # the clients the first call built (breakdown only)
    restore_hooks_ms: float | None = None  # CPU time of the after-restore hooks, for a module that registers any
    restore_first_extra_ms: float | None = None  # the first call after them, minus a warm call's


@dataclass(frozen=True)
class ImportRow:
    module: str
    self_us: float
    cumulative_us: float


def placeholder(name: str, value: Any) -> str:
    """A template value as the function would see it: a reference becomes a plausible name."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and "Ref" in value:
        ref = str(value["Ref"])
        if name.endswith("_QUEUE_URL"):
            return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{ref}"
        if name.endswith("_ARN"):
            return f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{ref}"
        return ref
    return f"placeholder-{name.lower()}"


def lambda_functions(templates: Mapping[str, Mapping[str, Any]]) -> list[LambdaFunction]:
    """Every function of the templates whose code is the runtime package, one per handler module."""
    found: dict[str, LambdaFunction] = {}
    for stack, template in sorted(templates.items()):
        for logical_id, resource in sorted(template.get("Resources", {}).items()):
            if resource.get("Type") != "AWS::Lambda::Function":
                continue
            properties = resource["Properties"]
            handler = str(properties.get("Handler", ""))
            if not handler.startswith(f"{RUNTIME_PACKAGE}."):
                continue
            variables = properties.get("Environment", {}).get("Variables", {})
            function = LambdaFunction(
                stack=stack,
                logical_id=logical_id,
                handler=handler,
                memory_mb=int(properties.get("MemorySize", 128)),
                environment={name: placeholder(name, value) for name, value in variables.items()},
            )
            found.setdefault(function.module, function)
    return sorted(found.values(), key=lambda function: function.module)


def lambda_environment(function: LambdaFunction | None, files: LambdaFiles, mode: TracingMode | None = None) -> dict[str, str]:
    """What the interpreter of this function gets in Lambda; the baseline gets the same without a function.
    `mode` replaces the template's tracing mode."""
    name = f"{function.stack}-{function.logical_id}" if function else "Onceflow-dev-Baseline"
    variables = {
        "AWS_LAMBDA_FUNCTION_NAME": name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory_mb if function else 256),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{PYTHON}",
        "LAMBDA_TASK_ROOT": str(files.task_root),
        "LAMBDA_RUNTIME_DIR": str(files.runtime_dir),
        "_HANDLER": function.handler if function else "",
        "_X_AMZN_TRACE_ID": TRACE_HEADER,
        "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        "AWS_XRAY_DAEMON_ADDRESS": "169.254.79.129:2000",
        "AWS_ACCESS_KEY_ID": "ASIACOLDSTARTBENCH00",
        "AWS_SECRET_ACCESS_KEY": "cold-start-bench-secret",
        "AWS_SESSION_TOKEN": "cold-start-bench-token",
        # No shared config files in Lambda: keep this machine's ~/.aws out of the clients built at the first invocation.
        "AWS_CONFIG_FILE": str(files.task_root / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(files.task_root / "no-aws-credentials"),
        "LANG": "C.UTF-8",
        "TZ": ":UTC",
    }
    own = {**(function.environment if function else {}), **({TRACING_MODE_VARIABLE: mode.value} if mode else {})}
    return {**own, **variables}


def built_assets() -> tuple[Path, Path]:
    """The code asset and the SDK layer as `cdk synth` builds them (onceflow/infra/lambda_assets.py)."""
    from onceflow.infra.lambda_assets import build_code_asset, build_sdk_layer

    return build_code_asset(), build_sdk_layer()


def copy_powertools_layer(python_folder: Path) -> None:
    """The Powertools layer's packages, as installed in this venv: every file its RECORD lists (sources
    and extensions), and each module's bytecode beside it, which RECORD lists when pip compiled it but
    not when uv did (`make install`'s --compile-bytecode)."""
    for distribution in POWERTOOLS_LAYER_DISTRIBUTIONS:
        for file in metadata.distribution(distribution).files or ():
            source = Path(str(file.locate()))
            if str(file).startswith("..") or ".dist-info" in str(file) or not source.is_file():
                continue
            target = python_folder / str(file)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)  # keeps the modification time the installer's bytecode was checked against
            if source.suffix == ".py":
                bytecode = Path(importlib.util.cache_from_source(str(source)))
                if bytecode.is_file():
                    copied = Path(importlib.util.cache_from_source(str(target)))
                    copied.parent.mkdir(exist_ok=True)
                    shutil.copy2(bytecode, copied)


def files_under(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*") if path.is_file()}


@contextmanager
def lambda_files(code_asset: Path, sdk_layer: Path) -> Iterator[LambdaFiles]:
    """A Lambda environment's folders in a temporary folder: the asset, the layers (Powertools', then the SDK's
    extracted over it) and the runtime's; removed afterwards. Any file written while measuring fails the run."""
    with tempfile.TemporaryDirectory(prefix="onceflow-cold-start-") as folder:
        root = Path(folder)
        files = LambdaFiles(task_root=root / "var" / "task", opt=root / "opt", runtime_dir=root / "var" / "runtime")
        shutil.copytree(code_asset, files.task_root)
        (files.opt / "python").mkdir(parents=True)
        copy_powertools_layer(files.opt / "python")
        shutil.copytree(sdk_layer, files.opt, dirs_exist_ok=True)
        files.runtime_dir.mkdir(parents=True)
        (files.runtime_dir / "snapshot_restore_py.py").write_text(SNAPSHOT_RESTORE_STAND_IN)
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash", str(files.runtime_dir)],
            check=True,
            capture_output=True,
        )
        staged = files_under(root)
        yield files
        written = sorted(str(path.relative_to(root)) for path in files_under(root) - staged)
        if written:
            raise RuntimeError(f"files were written into the Lambda folders, so later runs were not cold: {written[:3]}")


def interpreter(*options: str) -> list[str]:
    return [sys.executable, *INTERPRETER_FLAGS, *options]


def search_path_argument(files: LambdaFiles) -> str:
    return os.pathsep.join(str(folder) for folder in files.search_path)


def run_probe(
    module: str, entry_point: str | None, env: Mapping[str, str], files: LambdaFiles, *, breakdown: bool = False
) -> dict[str, Any]:
    """What one fresh interpreter measured and saw (the PROBE's figures), unchecked."""
    argv = [*interpreter(), "-c", PROBE, search_path_argument(files), module, entry_point or ""] + (["breakdown"] if breakdown else [])
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), cwd=files.task_root, timeout=120, check=False)
    results = [line[len(PROBE_PREFIX) :] for line in done.stdout.splitlines() if line.startswith(PROBE_PREFIX)]
    if done.returncode != 0 or len(results) != 1:
        raise RuntimeError(f"measuring {module} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(results[0])  # type: ignore[no-any-return]


def probe(module: str, entry_point: str | None, env: Mapping[str, str], files: LambdaFiles, *, breakdown: bool = False) -> Figures:
    """One fresh interpreter's figures, refused unless it was a cold start as Lambda's (check_probe)."""
    values = run_probe(module, entry_point, env, files, breakdown=breakdown)
    check_probe(module, values, files)
    first = values.get("first_extra_ms")
    return Figures(
        import_ms=float(values["import_ms"]),
        import_wall_ms=float(values["import_wall_ms"]),
        boto3_ms=float(values["boto3_ms"]),
        first_extra_ms=float(first) if first is not None else None,
        first_spent={str(part): float(ms) for part, ms in values.get("first_spent", {}).items()},
        clients=tuple(values.get("clients", ())),
        restore_hooks_ms=values.get("restore_hooks_ms"),
        restore_first_extra_ms=values.get("restore_first_extra_ms"),
    )


def check_probe(module: str, values: Mapping[str, Any], files: LambdaFiles) -> None:
    """Refuses a measurement that was not Lambda's cold start: the module from elsewhere than the asset (or, for
    boto3, the layer), sys.path not Lambda's, a module loaded from outside its folders, bytecode written or compiled."""
    home = files.task_root if module.startswith(f"{RUNTIME_PACKAGE}.") else files.opt / "python"
    if not str(values["file"]).startswith(f"{home}/"):
        raise RuntimeError(f"{module} was imported from {values['file']}, not from {home}")
    if values["path"][: len(files.search_path)] != [str(folder) for folder in files.search_path]:
        raise RuntimeError(f"sys.path was not Lambda's: {values['path']}")
    if values["stray"]:
        raise RuntimeError(f"modules were loaded from outside Lambda's folders: {values['stray'][:3]}")
    if values["bytecode_written"]:
        raise RuntimeError("the measured interpreter would write bytecode")
    if values["compiled"]:
        raise RuntimeError(f"modules were compiled from source, not loaded from their bytecode: {values['compiled'][:3]}")


COMPARED_MODE = TracingMode.SDK  # measured beside each function's own (the template's) mode


def measure(
    functions: Sequence[LambdaFunction], files: LambdaFiles, runs: int = RUNS
) -> tuple[list[float], dict[str, list[Figures]], dict[str, list[Figures]]]:
    """RUNS rounds, each a fresh interpreter for bare boto3 and for every handler module in its template's
    mode and in COMPARED_MODE, in the same order."""
    baseline: list[float] = []
    samples: dict[str, list[Figures]] = defaultdict(list)
    compared: dict[str, list[Figures]] = defaultdict(list)
    for _ in range(runs):
        baseline.append(probe(BASELINE, None, lambda_environment(None, files), files).import_ms)
        for function in functions:
            samples[function.module].append(probe(function.module, function.entry_point, lambda_environment(function, files), files))
            compared[function.module].append(
                probe(function.module, function.entry_point, lambda_environment(function, files, COMPARED_MODE), files)
            )
    return baseline, samples, compared


def first_call_breakdown(function: LambdaFunction, files: LambdaFiles, runs: int = BREAKDOWN_RUNS) -> tuple[dict[str, float], list[str]]:
    """Per part of the first call, its median CPU ms over `runs` interpreters (the parts nest: see print_first_call),
    and the clients it built."""
    parts: dict[str, list[float]] = defaultdict(list)
    clients: list[str] = []
    for _ in range(runs):
        figures = probe(function.module, function.entry_point, lambda_environment(function, files), files, breakdown=True)
        parts["first call"].append(figures.first_extra_ms or 0.0)
        for part, ms in figures.first_spent.items():
            parts[part].append(ms)
        clients = list(figures.clients)
    return {part: statistics.median(values) for part, values in parts.items()}, clients


def parse_importtime(stderr: str) -> list[ImportRow]:
    """The `-X importtime` lines after the probe's mark: what importing the module itself loaded."""
    rows: list[ImportRow] = []
    marked = False
    for line in stderr.splitlines():
        if line.strip() == IMPORTTIME_MARK:
            marked = True
            continue
        match = _IMPORTTIME_LINE.match(line)
        if marked and match:
            rows.append(ImportRow(match.group(4), float(match.group(1)), float(match.group(2))))
    return rows


def import_breakdown(function: LambdaFunction, files: LambdaFiles, runs: int = IMPORTTIME_RUNS) -> list[ImportRow]:
    """Per module, the median self and cumulative µs over `runs` interpreters."""
    self_us: dict[str, list[float]] = defaultdict(list)
    cumulative_us: dict[str, list[float]] = defaultdict(list)
    for _ in range(runs):
        argv = [*interpreter("-X", "importtime"), "-c", IMPORTTIME_PROBE, search_path_argument(files), function.module]
        env = lambda_environment(function, files)
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=files.task_root, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"-X importtime of {function.module} failed: {done.stderr.strip()[-2000:]}")
        for row in parse_importtime(done.stderr):
            self_us[row.module].append(row.self_us)
            cumulative_us[row.module].append(row.cumulative_us)
    return [ImportRow(module, statistics.median(self_us[module]), statistics.median(cumulative_us[module])) for module in self_us]


def package_of(module: str) -> str:
    """The top-level package, with the project's modules by slice (runtime.shared, runtime.taxi_etl, ...)."""
    parts = module.split(".")
    if parts[0] == RUNTIME_PACKAGE and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def by_package(rows: Sequence[ImportRow]) -> list[tuple[str, float]]:
    totals: dict[str, float] = defaultdict(float)
    for row in rows:
        totals[package_of(row.module)] += row.self_us
    return sorted(totals.items(), key=lambda item: -item[1])


def print_breakdown(function: LambdaFunction, rows: Sequence[ImportRow]) -> None:
    total = sum(row.self_us for row in rows)
    print(f"\nslowest imports of {function.module} (python -X importtime, median of {IMPORTTIME_RUNS}; all: {total / 1000:.1f} ms)")
    print(f"  {'module':<58} {'self µs':>9} {'cumul. µs':>10}")
    for row in sorted(rows, key=lambda row: -row.self_us)[:TOP]:
        print(f"  {row.module:<58} {row.self_us:>9.0f} {row.cumulative_us:>10.0f}")
    print(f"  by package (self µs, top {TOP}):")
    for package, self_us in by_package(rows)[:TOP]:
        print(f"  {package:<58} {self_us:>9.0f} {100 * self_us / total:>9.0f} %")


def print_first_call(function: LambdaFunction, parts: Mapping[str, float], clients: Sequence[str], boto3_ms: float) -> None:
    """Where the first call's time goes; the parts nest: the loads and rule trees are within client construction."""
    total = parts["first call"] + parts.get("SDK modules imported", 0.0)
    construction = parts.get("client construction", 0.0)
    print(f"  first call of {function.module}: {total:.1f} ms ({total / boto3_ms:.2f}x boto3), median of {BREAKDOWN_RUNS}")
    print(f"    SDK modules it imports (boto3, botocore's client, loaders, endpoints): {parts.get('SDK modules imported', 0.0):>6.1f} ms")
    print(f"    client construction ({len(clients)}: {', '.join(clients) or 'none'}): {construction:>6.1f} ms, of which")
    print("      (a file read while the default session is made counts in both)")
    for part in ("default session", *SDK_DATA_PARTS.values(), "other SDK data", "endpoint rules built"):
        print(f"      {part + (' read' if part in SDK_DATA_PARTS.values() else ''):<30} {parts.get(part, 0.0):>6.1f} ms")
    print(f"    the rest (settings, wiring, the handler's own first-call work): {parts['first call'] - construction:>6.1f} ms")


def paired_ratio(figures: Sequence[Figures], *, with_first_call: bool = False) -> float:
    """The median over interpreters of each one's import (plus its first call's extra) against its own bare-boto3 part:
    what load this machine was under at that moment weighs on both sides of each ratio."""
    return statistics.median(
        (figure.import_ms + ((figure.first_extra_ms or 0.0) if with_first_call else 0.0)) / figure.boto3_ms for figure in figures
    )


def main(templates: dict[str, dict[str, Any]]) -> bool:
    """Prints the figures; True when every handler module imports within TARGET_RATIO of bare boto3."""
    started = time.perf_counter()
    functions = lambda_functions(templates)
    if not functions:
        raise ValueError("the templates have no function whose handler is in the runtime package")
    code_asset, sdk_layer = built_assets()
    with lambda_files(code_asset, sdk_layer) as files:
        baseline, samples, compared = measure(functions, files)
        boto3_ms = statistics.median(baseline)
        modes = sorted({function.environment.get(TRACING_MODE_VARIABLE, TracingMode.ACTIVE.value) for function in functions})
        print(
            f"cold start: each handler module's import, median of {RUNS} fresh interpreters in a Lambda-like environment "
            f"(the built code asset and SDK layer with their bytecode, Lambda's sys.path, tracing mode {', '.join(modes)} "
            f"as the template sets it), CPU ms; python {sys.version.split()[0]}"
        )
        print(
            f"  bare `import boto3` from the SDK layer: {boto3_ms:.1f} ms; targets: import at most {TARGET_RATIO}x "
            f"(aim {AIM_RATIO}x), import + first call at most {FIRST_CALL_TARGET_RATIO}x"
        )
        sdk = f"{COMPARED_MODE.value} mode"
        header = (
            f"{'import ms':>9} {'x boto3':>8} {'target':>7} {'+boto3 ms':>9} {'x sep.':>7} {'wall ms':>8} {'1st call +ms':>13} "
            f"{'import + 1st':>13} {'target':>7} {sdk + ' x':>11} {sdk + ' 1st +ms':>16}"
        )
        print(f"  {'handler module':<42} {header}")
        ok = True
        medians: dict[str, float] = {}
        over_first_call: list[LambdaFunction] = []
        for function in functions:
            figures = samples[function.module]
            import_ms = statistics.median(figure.import_ms for figure in figures)
            wall_ms = statistics.median(figure.import_wall_ms for figure in figures)
            first_extra = statistics.median(figure.first_extra_ms for figure in figures if figure.first_extra_ms is not None)
            ratio = paired_ratio(figures)
            beyond_ms = statistics.median(figure.import_ms - figure.boto3_ms for figure in figures)
            separate_ratio = import_ms / boto3_ms
            first_ratio = paired_ratio(figures, with_first_call=True)
            compared_ratio = paired_ratio(compared[function.module])
            compared_first = statistics.median(figure.first_extra_ms or 0.0 for figure in compared[function.module])
            passed = ratio <= TARGET_RATIO
            first_passed = first_ratio <= FIRST_CALL_TARGET_RATIO
            ok = ok and passed and first_passed
            medians[function.module] = ratio
            if not first_passed:
                over_first_call.append(function)
            print(
                f"  {function.module:<42} {import_ms:>9.1f} {ratio:>7.2f}x {'pass' if passed else 'FAIL':>7} {beyond_ms:>9.1f} "
                f"{separate_ratio:>6.2f}x {wall_ms:>8.1f} {first_extra:>13.1f} {first_ratio:>12.2f}x "
                f"{'pass' if first_passed else 'FAIL':>7} {compared_ratio:>10.2f}x {compared_first:>16.1f}"
            )
        print(
            "  (x boto3: the median over the interpreters of each one's import against its own `import boto3`, which the"
            " handler's import begins with; +boto3 ms: the rest; x sep.: the median import against the separate bare-boto3"
            " interpreters' median, steadier on an idle machine only)"
        )
        print("  (1st call +ms: the first call of the entry point minus a warm one, handle() stubbed, deps() built)")
        print(f"  ({sdk}: the same function with Powertools' Tracer on the X-Ray SDK, measured in the same rounds; not the target)")
        restored = [function for function in functions if samples[function.module][0].restore_hooks_ms is not None]
        if restored:
            print("\nSnapStart (opt-in): a restore instead of the init phase; the after-restore hooks, then the first call, CPU ms")
            for function in restored:
                hooks = statistics.median(figure.restore_hooks_ms or 0.0 for figure in samples[function.module])
                first = statistics.median(figure.restore_first_extra_ms or 0.0 for figure in samples[function.module])
                print(
                    f"  {function.module:<42} hooks {hooks:>5.1f} + first call after them {first:>6.1f} "
                    f"= {(hooks + first) / boto3_ms:.2f}x boto3 (import not paid: it is in the snapshot)"
                )
        if over_first_call:
            print(f"\nwhere the first call's time goes, for the handlers above {FIRST_CALL_TARGET_RATIO}x (CPU ms)")
            for function in over_first_call:
                parts, clients = first_call_breakdown(function, files)
                print_first_call(function, parts, clients, boto3_ms)
        slowest = max(functions, key=lambda function: medians[function.module])
        print_breakdown(slowest, import_breakdown(slowest, files))
    summary = "every handler module within" if ok else "NOT every handler module within"
    print(
        f"cold start: {summary} {TARGET_RATIO}x of bare boto3 for the import and {FIRST_CALL_TARGET_RATIO}x for import + "
        f"first call ({time.perf_counter() - started:.0f} s)"
    )
    return ok


if __name__ == "__main__":
    from devtools.aws.template_resources import synth_templates

    sys.exit(0 if main(synth_templates("dev")) else 1)
