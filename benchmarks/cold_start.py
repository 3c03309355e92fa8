"""Cold start (`make bench --only latency`): each handler module's import, in a Lambda-like process, against bare boto3.

Every AWS::Lambda::Function of the synthesized templates whose handler lives in `runtime` is
measured in fresh interpreters, each with what that function gets in Lambda and nothing of this
shell's environment:
  - its own Environment.Variables from the template (references become placeholder names), the
    tracing mode among them (ONCEFLOW_TRACING: `active`, the default, imports no tracing SDK), and
  - the variables Lambda sets (function name, memory, version, region, AWS_EXECUTION_ENV,
    LAMBDA_TASK_ROOT, _HANDLER, the trace header, the X-Ray daemon address, credentials); no
    POWERTOOLS_TRACE_DISABLED, so in the `sdk` mode the Tracer is active as deployed;
  - the code from a copy of runtime/ in a temporary folder, run with PYTHONDONTWRITEBYTECODE=1
    (PYTHONPYCACHEPREFIX unset): the asset ships no bytecode and Lambda's file system is read-only,
    so the project's modules are compiled from source at every cold start, while the installed
    packages (boto3 in the Lambda runtime, Powertools in its layer) keep their .pyc.

Per handler module it prints the median over RUNS interpreters of the import's CPU time (process
time: the import is CPU-bound, and unlike wall time it is not inflated by whatever else this machine
runs; the wall-clock median is printed beside it), its ratio to bare `import boto3` measured in the
same rounds (targets interleaved), pass/fail against TARGET_RATIO, and the first invocation's extra
CPU time: the first call of the entry point minus a warm call, with `handle` stubbed out (no AWS
call is made) and `deps()` real (settings, wiring, client construction), so whatever an import
leaves to the first invocation is counted there; "import + 1st" is what a cold start pays in all.
The same is measured in the `sdk` tracing mode (Powertools' Tracer on the X-Ray SDK), in the same
rounds, for what that mode costs beside the default. Then `python -X importtime` of the slowest
handler module: the modules with the most self time (median of IMPORTTIME_RUNS interpreters) and the self time per package.

Measured with this machine's interpreter (not Lambda's python3.14 on arm64): the ratio to boto3
is the figure to compare, not the milliseconds.
"""

from __future__ import annotations

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.shared.contract import TRACING_MODE_VARIABLE, TracingMode

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RUNTIME_PACKAGE = "runtime"
TARGET_RATIO = 1.3  # each handler module's import at most this many times bare boto3's
RUNS = 9  # fresh interpreters per module; the median is reported
IMPORTTIME_RUNS = 3
TOP = 10
BASELINE = "boto3"
REGION = "us-east-1"
ACCOUNT = "123456789012"
TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
PROBE_PREFIX = "@@cold-start "
IMPORTTIME_MARK = "@@cold-start-importtime"

# Runs in the measured interpreter. argv: the module; then, for a handler, the entry point's name.
# The import is timed alone; then the entry point is called once cold and WARM_CALLS times warm.
WARM_CALLS = 3
PROBE = f"""
import importlib, os, sys, time
wall, cpu = time.perf_counter(), time.process_time()
module = importlib.import_module(sys.argv[1])
print({PROBE_PREFIX!r} + "import_ms=%.3f" % ((time.process_time() - cpu) * 1000), flush=True)
print({PROBE_PREFIX!r} + "import_wall_ms=%.3f" % ((time.perf_counter() - wall) * 1000), flush=True)
print({PROBE_PREFIX!r} + "file=" + str(getattr(module, "__file__", "")), flush=True)
print({PROBE_PREFIX!r} + "bytecode_written=" + str(not sys.dont_write_bytecode), flush=True)
if len(sys.argv) > 2:
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
    entry = getattr(module, sys.argv[2])
    module.handle = lambda event, context, deps: {{}}  # the entry point still builds deps() for real
    def call():
        cpu = time.process_time()
        entry({{}}, Context())
        return (time.process_time() - cpu) * 1000
    first = call()
    warm = sorted(call() for _ in range({WARM_CALLS}))[{WARM_CALLS} // 2]
    print({PROBE_PREFIX!r} + "first_extra_ms=%.3f" % (first - warm), flush=True)
"""
IMPORTTIME_PROBE = f"import importlib, sys; print({IMPORTTIME_MARK!r}, file=sys.stderr, flush=True); importlib.import_module(sys.argv[1])"
_IMPORTTIME_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)\s*$")


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
    first_extra_ms: float | None  # CPU time of the first call minus a warm call's; None for the baseline


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


def lambda_environment(function: LambdaFunction | None, task_root: Path, mode: TracingMode | None = None) -> dict[str, str]:
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
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "LAMBDA_TASK_ROOT": str(task_root),
        "_HANDLER": function.handler if function else "",
        "_X_AMZN_TRACE_ID": TRACE_HEADER,
        "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        "AWS_XRAY_DAEMON_ADDRESS": "169.254.79.129:2000",
        "AWS_ACCESS_KEY_ID": "ASIACOLDSTARTBENCH00",
        "AWS_SECRET_ACCESS_KEY": "cold-start-bench-secret",
        "AWS_SESSION_TOKEN": "cold-start-bench-token",
        # No shared config files in Lambda: keep this machine's ~/.aws out of the clients built at the first invocation.
        "AWS_CONFIG_FILE": str(task_root / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(task_root / "no-aws-credentials"),
        "LANG": "C.UTF-8",
        "TZ": ":UTC",
        "PYTHONPATH": str(task_root),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    own = {**(function.environment if function else {}), **({TRACING_MODE_VARIABLE: mode.value} if mode else {})}
    return {**own, **variables}


@contextmanager
def asset_copy() -> Iterator[Path]:
    """runtime/ as the asset has it (no __pycache__, no .pyc), in a folder of its own; removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="onceflow-cold-start-") as folder:
        task_root = Path(folder)
        shutil.copytree(PROJECT_ROOT / RUNTIME_PACKAGE, task_root / RUNTIME_PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        yield task_root
        written = sorted(str(path.relative_to(task_root)) for path in task_root.rglob("*.pyc"))
        if written:
            raise RuntimeError(f"bytecode was written into the asset copy, so later runs were not cold: {written[:3]}")


def probe(module: str, entry_point: str | None, env: Mapping[str, str], task_root: Path) -> Figures:
    argv = [sys.executable, "-c", PROBE, module] + ([entry_point] if entry_point else [])
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), cwd=task_root, timeout=120, check=False)
    values: dict[str, str] = {}
    for line in done.stdout.splitlines():
        if line.startswith(PROBE_PREFIX):
            name, _, value = line[len(PROBE_PREFIX) :].partition("=")
            values[name] = value
    if done.returncode != 0 or "import_ms" not in values or (entry_point and "first_extra_ms" not in values):
        raise RuntimeError(f"measuring {module} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    if module.startswith(f"{RUNTIME_PACKAGE}.") and not values["file"].startswith(str(task_root)):
        raise RuntimeError(f"{module} was imported from {values['file']}, not from the asset copy")
    if values["bytecode_written"] != "False":
        raise RuntimeError("the measured interpreter would write bytecode")
    first = values.get("first_extra_ms")
    return Figures(float(values["import_ms"]), float(values["import_wall_ms"]), float(first) if first is not None else None)


COMPARED_MODE = TracingMode.SDK  # measured beside each function's own (the template's) mode


def measure(
    functions: Sequence[LambdaFunction], task_root: Path, runs: int = RUNS
) -> tuple[list[float], dict[str, list[Figures]], dict[str, list[Figures]]]:
    """RUNS rounds, each a fresh interpreter for bare boto3 and for every handler module in its template's
    mode and in COMPARED_MODE, in the same order."""
    baseline: list[float] = []
    samples: dict[str, list[Figures]] = defaultdict(list)
    compared: dict[str, list[Figures]] = defaultdict(list)
    for _ in range(runs):
        baseline.append(probe(BASELINE, None, lambda_environment(None, task_root), task_root).import_ms)
        for function in functions:
            own_mode = lambda_environment(function, task_root)
            samples[function.module].append(probe(function.module, function.entry_point, own_mode, task_root))
            compared[function.module].append(
                probe(function.module, function.entry_point, lambda_environment(function, task_root, COMPARED_MODE), task_root)
            )
    return baseline, samples, compared


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


def import_breakdown(function: LambdaFunction, task_root: Path, runs: int = IMPORTTIME_RUNS) -> list[ImportRow]:
    """Per module, the median self and cumulative µs over `runs` interpreters."""
    self_us: dict[str, list[float]] = defaultdict(list)
    cumulative_us: dict[str, list[float]] = defaultdict(list)
    for _ in range(runs):
        argv = [sys.executable, "-X", "importtime", "-c", IMPORTTIME_PROBE, function.module]
        env = lambda_environment(function, task_root)
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=task_root, timeout=120, check=False)
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


def main(templates: dict[str, dict[str, Any]]) -> bool:
    """Prints the figures; True when every handler module imports within TARGET_RATIO of bare boto3."""
    started = time.perf_counter()
    functions = lambda_functions(templates)
    if not functions:
        raise ValueError("the templates have no function whose handler is in the runtime package")
    with asset_copy() as task_root:
        baseline, samples, compared = measure(functions, task_root)
        boto3_ms = statistics.median(baseline)
        modes = sorted({function.environment.get(TRACING_MODE_VARIABLE, TracingMode.ACTIVE.value) for function in functions})
        print(
            f"cold start: each handler module's import, median of {RUNS} fresh interpreters in a Lambda-like environment "
            f"(tracing mode {', '.join(modes)} as the template sets it, the project's modules compiled from source), CPU ms; "
            f"python {sys.version.split()[0]}"
        )
        print(f"  bare `import boto3`: {boto3_ms:.1f} ms; target: each handler module at most {TARGET_RATIO}x")
        sdk = f"{COMPARED_MODE.value} mode"
        header = (
            f"{'import ms':>9} {'x boto3':>8} {'target':>7} {'wall ms':>8} {'1st call +ms':>13} {'import + 1st':>13} "
            f"{sdk + ' x':>11} {sdk + ' 1st +ms':>16}"
        )
        print(f"  {'handler module':<42} {header}")
        ok = True
        medians: dict[str, float] = {}
        for function in functions:
            figures = samples[function.module]
            import_ms = statistics.median(figure.import_ms for figure in figures)
            wall_ms = statistics.median(figure.import_wall_ms for figure in figures)
            first_extra = statistics.median(figure.first_extra_ms for figure in figures if figure.first_extra_ms is not None)
            ratio = import_ms / boto3_ms
            compared_ratio = statistics.median(figure.import_ms for figure in compared[function.module]) / boto3_ms
            compared_first = statistics.median(figure.first_extra_ms or 0.0 for figure in compared[function.module])
            passed = ratio <= TARGET_RATIO
            ok = ok and passed
            medians[function.module] = import_ms
            verdict = "pass" if passed else "FAIL"
            print(
                f"  {function.module:<42} {import_ms:>9.1f} {ratio:>7.2f}x {verdict:>7} {wall_ms:>8.1f} {first_extra:>13.1f} "
                f"{import_ms + first_extra:>13.1f} {compared_ratio:>10.2f}x {compared_first:>16.1f}"
            )
        print("  (1st call +ms: the first call of the entry point minus a warm one, handle() stubbed, deps() built)")
        print(f"  ({sdk}: the same function with Powertools' Tracer on the X-Ray SDK, measured in the same rounds; not the target)")
        slowest = max(functions, key=lambda function: medians[function.module])
        print_breakdown(slowest, import_breakdown(slowest, task_root))
    summary = "every handler module within" if ok else "NOT every handler module within"
    print(f"cold start: {summary} {TARGET_RATIO}x of bare boto3 ({time.perf_counter() - started:.0f} s)")
    return ok


if __name__ == "__main__":
    from devtools.aws.template_resources import synth_templates

    sys.exit(0 if main(synth_templates("dev")) else 1)
