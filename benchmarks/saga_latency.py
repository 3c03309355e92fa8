"""`python -m benchmarks.saga_latency`: how many DynamoDB round trips each taxi-saga task waits for
one after another (its serial depth), for a 100-row batch and for a single row.

moto answers in microseconds, so the phases' wall time on it says nothing about how their calls
line up. devtools.aws.latency delays every botocore call by L ms in its own thread; each task is
run from the same starting state at L = 0 and at L = 20 ms, and the extra wall time over L is the
number of calls on its longest chain. Where calls overlapped, moto's own CPU (a few ms per call,
which the threads share) hides 20 ms waits, and the tool takes the depth between two longer
delays (200 and 400 ms) instead. Target (issue 15): at most 10 per task per 100-row batch.

What runs is each task's real entry point, `<module>.handle(event, context, deps)`, with its
dependencies built through runtime/taxi_etl/wiring.py on a moto client (its DynamoDB calls atomic
across threads, as DynamoDB's are), and the very input the state machine gave it: one execution
per scenario runs first through the embedded saga (devtools.taxi_world, the synthesized
definition), which records each task's first input and its rows' items in the four tables at that
moment. Each measured run starts from those items again.

  validate / transform / store  a clean batch of real rows (tests/data/taxi_etl): every row passes
  flag, validation rejects      every row fails validation: one status table per row
  flag, transformation rejects  every row fails transformation: two status tables per row
  flag, store failed            the trips table refuses every put, Store's retries end in its Catch:
                                one read of the trips table, then three status tables per row

`phase_durations_ms()` turns the figures into Lambda durations per invocation (serial depth x
5 ms per DynamoDB call, plus the CPU the task spent outside the calls) for benchmarks/taxi_cost.py.
This prints figures; `main` answers whether the target is met.
"""

from __future__ import annotations

from benchmarks import environment

# Run alone (`python -m benchmarks.saga_latency`), it sets `make bench`'s environment before the
# handlers are imported (Powertools reads it at import); imported, it changes nothing.
if __name__ == "__main__":
    environment.apply(keep_existing=True)

import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from devtools.aws.lambda_context import FakeLambdaContext, as_lambda_context
from devtools.aws.latency import LatencyRun, measure
from devtools.aws.template_resources import find_function
from devtools.taxi_rows import bad_at_transformation, bad_at_validation, sample_lines
from devtools.taxi_world import FLAG_HANDLER, STORE_HANDLER, TRANSFORM_HANDLER, VALIDATE_HANDLER, TaxiWorld, client, embedded_saga_cloud
from runtime.shared.aws import Clients
from runtime.shared.observability import metrics
from runtime.taxi_etl import contract as taxi_etl_contract
from runtime.taxi_etl import flag_handler, store_handler, transform_handler, validate_handler, wiring
from runtime.taxi_etl.flag_wiring import FlagSettings
from runtime.taxi_etl.phase_wiring import PhaseSettings
from runtime.taxi_etl.requests import content_id
from runtime.taxi_etl.store_wiring import StoreSettings

DELAY_MS = 20.0
CALL_MS = 5.0  # what one DynamoDB call from Lambda costs, for the duration estimate
BATCH_ROWS = 100
TARGET_DEPTH = 10.0  # per task, per 100-row batch
REPEATS = 3  # a case is measured up to this many times and the run of median depth reported (moto's CPU is noisy)
FAR_OUTSIDE = 3 * TARGET_DEPTH  # a case whose first run is this deep (a serial loop) is measured once
TASKS = ("validate", "transform", "store", "flag")
_MODULES: dict[str, ModuleType] = {
    VALIDATE_HANDLER: validate_handler,
    TRANSFORM_HANDLER: transform_handler,
    STORE_HANDLER: store_handler,
    FLAG_HANDLER: flag_handler,
}
_TASK_OF = {VALIDATE_HANDLER: "validate", TRANSFORM_HANDLER: "transform", STORE_HANDLER: "store", FLAG_HANDLER: "flag"}
_TABLE_VARIABLES = (
    taxi_etl_contract.ENV_VALIDATION_STATUS_TABLE,
    taxi_etl_contract.ENV_TRANSFORMATION_STATUS_TABLE,
    taxi_etl_contract.ENV_STORE_STATUS_TABLE,
    taxi_etl_contract.ENV_FINAL_TABLE,
)


@dataclass(frozen=True)
class Captured:
    """A task's first input in one execution, and its rows' items in the four tables when it was invoked."""

    handler: str
    event: dict[str, Any]
    tables: dict[str, dict[str, dict[str, Any] | None]]  # table -> StoreRequestId -> raw item, or None


@dataclass(frozen=True)
class Case:
    task: str  # validate | transform | store | flag
    scenario: str
    rows: int
    captured: Captured


@dataclass(frozen=True)
class Measurement:
    task: str
    scenario: str
    rows: int
    run: LatencyRun  # the run of median serial depth among the repeats
    depths: tuple[float, ...]  # every repeat's
    output: str  # a digest of the task's output: the same before and after a change means the same state-machine data

    @property
    def serial_depth(self) -> float:
        return self.run.serial_depth

    def duration_ms(self, call_ms: float = CALL_MS) -> float:
        return self.run.duration_ms(call_ms)


# --- capturing what the state machine gives each task ---------------------------------------------


def _table_names(world: TaxiWorld) -> list[str]:
    environment = world.environment(FLAG_HANDLER)
    return [environment[variable] for variable in _TABLE_VARIABLES]


def event_ids(event: Mapping[str, Any]) -> list[str]:
    """The StoreRequestIds a task's input names: a phase's rows, or the rows and rejections a flag step is given."""
    state = event.get("state", event)
    documents = [*state.get("rows", []), *state.get("rejected", [])]
    return sorted({str(document[taxi_etl_contract.KEY_STORE_REQUEST_ID]) for document in documents})


def snapshot(world: TaxiWorld, ids: Sequence[str]) -> dict[str, dict[str, dict[str, Any] | None]]:
    """The items of these ids in the four tables (raw attributes), None where a table has none."""
    key = taxi_etl_contract.KEY_STORE_REQUEST_ID
    tables: dict[str, dict[str, dict[str, Any] | None]] = {name: dict.fromkeys(ids) for name in _table_names(world)}
    pending = [(name, store_request_id) for name in tables for store_request_id in ids]
    for start in range(0, len(pending), 100):
        request: dict[str, Any] = {}
        for name, store_request_id in pending[start : start + 100]:
            request.setdefault(name, {"Keys": [], "ConsistentRead": True})["Keys"].append({key: {"S": store_request_id}})
        while request:
            response = world.dynamodb.batch_get_item(RequestItems=request)
            for name, items in response["Responses"].items():
                for item in items:
                    tables[name][item[key]["S"]] = item
            request = response.get("UnprocessedKeys") or {}
    return tables


def restore(dynamodb: Any, tables: Mapping[str, Mapping[str, dict[str, Any] | None]]) -> None:
    """The snapshot's items back: each id's item put as it was, or deleted where it had none."""
    key = taxi_etl_contract.KEY_STORE_REQUEST_ID
    for name, items in tables.items():
        requests = [
            {"PutRequest": {"Item": item}} if item is not None else {"DeleteRequest": {"Key": {key: {"S": store_request_id}}}}
            for store_request_id, item in items.items()
        ]
        for start in range(0, len(requests), 25):
            dynamodb.batch_write_item(RequestItems={name: requests[start : start + 25]})


@contextmanager
def capturing(world: TaxiWorld, into: dict[str, Captured]) -> Iterator[None]:
    """Record the first input of each task (the flag step by its phase) and the tables at that moment."""
    original = dict(world.routes)
    handler_of = {find_function(world.template, handler): handler for handler in _MODULES}

    def recording(logical_id: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        invoke = original[logical_id]
        handler = handler_of[logical_id]

        def run(event: dict[str, Any]) -> dict[str, Any]:
            key = f"{handler}:{event.get('phase', '')}"
            if key not in into:
                into[key] = Captured(handler, json.loads(json.dumps(event)), snapshot(world, event_ids(event)))
            return invoke(event)

        return run

    world.routes = {logical_id: recording(logical_id) for logical_id in original}
    try:
        yield
    finally:
        world.routes = original


@contextmanager
def trips_refusing_puts(world: TaxiWorld) -> Iterator[None]:
    """Every PutItem into the trips table fails (an unavailable table): Store's retries end in its Catch."""
    from botocore.exceptions import ClientError

    trips = world.environment(FLAG_HANDLER)[taxi_etl_contract.ENV_FINAL_TABLE]

    def refuse(params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == trips:
            error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "the trips table refuses writes"}}
            raise ClientError(error, "PutItem")  # type: ignore[arg-type]

    events = world.dynamodb.meta.events
    events.register("before-parameter-build.dynamodb.PutItem", refuse)
    try:
        yield
    finally:
        events.unregister("before-parameter-build.dynamodb.PutItem", refuse)


def _rows(lines: Sequence[str]) -> list[dict[str, str]]:
    return [{taxi_etl_contract.KEY_STORE_REQUEST_ID: content_id(line), "tuple": line} for line in lines]


def capture_cases(world: TaxiWorld, rows: int, offset: int) -> list[Case]:
    """One execution per scenario, each of `rows` real rows (lines from `offset` on, distinct per scenario)."""
    lines = sample_lines()
    chunk = [lines[offset + index * rows : offset + (index + 1) * rows] for index in range(4)]
    scenarios: list[tuple[str, list[str], bool]] = [
        ("clean batch", chunk[0], False),
        ("validation rejects", [bad_at_validation(line) for line in chunk[1]], False),
        ("transformation rejects", [bad_at_transformation(line) for line in chunk[2]], False),
        ("store failed", chunk[3], True),
    ]
    cases: list[Case] = []
    for number, (scenario, scenario_lines, refuse) in enumerate(scenarios):
        captured: dict[str, Captured] = {}
        with capturing(world, captured), trips_refusing_puts(world) if refuse else _nothing():
            world.start(f"bench-{rows}-{number}", _rows(scenario_lines))
        if scenario == "clean batch":
            for handler in (VALIDATE_HANDLER, TRANSFORM_HANDLER, STORE_HANDLER):
                cases.append(Case(_TASK_OF[handler], scenario, rows, captured[f"{handler}:"]))
        else:
            (flagged,) = [entry for key, entry in captured.items() if key.startswith(f"{FLAG_HANDLER}:")]
            cases.append(Case("flag", scenario, rows, flagged))
    return cases


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# --- measuring ------------------------------------------------------------------------------------


def _deps(world: TaxiWorld, handler: str, clients: Clients) -> Any:
    environment = world.environment(handler)
    if handler == FLAG_HANDLER:
        return wiring.build(FlagSettings.from_env(environment), clients)
    if handler == STORE_HANDLER:
        return wiring.build(StoreSettings.from_env(environment), clients)
    return wiring.build(PhaseSettings.from_env(environment), clients)


def _digest(output: Any) -> str:
    return hashlib.sha256(json.dumps(output).encode()).hexdigest()[:12]


def measure_case(world: TaxiWorld, case: Case, *, delay_ms: float = DELAY_MS, repeats: int = REPEATS) -> Measurement:
    dynamodb = client("dynamodb")  # the task's own client, as a Lambda function has its own
    handler = case.captured.handler
    deps = _deps(world, handler, Clients(dynamodb=dynamodb))
    module = _MODULES[handler]
    context = as_lambda_context(FakeLambdaContext())
    outputs: list[str] = []
    event: list[dict[str, Any]] = []

    def prepare() -> None:
        restore(world.dynamodb, case.captured.tables)
        event[:] = [json.loads(json.dumps(case.captured.event))]  # a fresh copy, as each invocation gets

    def run() -> None:
        try:
            outputs.append(_digest(module.handle(event[0], context, deps)))
        finally:
            metrics.clear_metrics()

    runs = [measure(run, prepare, delay_ms)]
    while len(runs) < repeats and runs[0].serial_depth < FAR_OUTSIDE:
        runs.append(measure(run, prepare, delay_ms))
    runs.sort(key=lambda r: r.serial_depth)
    if len(set(outputs)) != 1:
        raise AssertionError(f"{case.task} ({case.scenario}) answered differently from the same start: {outputs}")
    return Measurement(case.task, case.scenario, case.rows, runs[len(runs) // 2], tuple(r.serial_depth for r in runs), outputs[0])


def measure_phases(template: dict[str, Any], *, delay_ms: float = DELAY_MS, repeats: int = REPEATS) -> list[Measurement]:
    """Every case for a 100-row batch and for a single row, on a fresh embedded saga."""
    with embedded_saga_cloud() as waits:
        world = TaxiWorld.create(template)
        world.retry_waits = waits
        cases = capture_cases(world, BATCH_ROWS, offset=0) + capture_cases(world, 1, offset=4 * BATCH_ROWS)
        return [measure_case(world, case, delay_ms=delay_ms, repeats=repeats) for case in cases]


def phase_durations_ms(template: dict[str, Any], measurements: Sequence[Measurement] | None = None) -> dict[str, dict[int, float]]:
    """Estimated Lambda duration of one invocation, in ms, by task and rows per invocation (100 and 1):
    serial depth x 5 ms per DynamoDB call, plus the CPU spent outside the calls (LatencyRun.duration_ms).

    `flag` is the flag step's costliest case, after a failed Store (one read, three status tables per
    row). Measures on a fresh embedded saga unless `measurements` (from `measure_phases`) are given.
    """
    measured = list(measurements) if measurements is not None else measure_phases(template)
    durations: dict[str, dict[int, float]] = {}
    for task in TASKS:
        for rows in (BATCH_ROWS, 1):
            durations.setdefault(task, {})[rows] = max(m.duration_ms() for m in measured if m.task == task and m.rows == rows)
    return durations


# --- the report -----------------------------------------------------------------------------------


def _operations(run: LatencyRun) -> str:
    return ", ".join(f"{operation} {count}" for operation, count in sorted(run.calls_by_operation.items()))


def main(template: dict[str, Any]) -> bool:
    started = time.perf_counter()
    measured = measure_phases(template)
    print(f"\n== taxi saga: serial depth of each task's DynamoDB calls (L = {DELAY_MS:.0f} ms per call; median of the runs) ==")
    print(
        f"{'task':<10} {'scenario':<24} {'rows':>4} {'calls':>5} {'runs':>4} {'serial depth':>12} "
        f"{'peak in flight':>14} {'est. ms':>8} {'output':>12}  calls by operation"
    )
    for m in measured:
        print(
            f"{m.task:<10} {m.scenario:<24} {m.rows:>4} {m.run.calls:>5} {len(m.depths):>4} {m.serial_depth:>12.1f} "
            f"{m.run.peak_in_flight:>14} {m.duration_ms():>8.0f} {m.output:>12}  {_operations(m.run)}"
        )
    methods = sorted({m.run.method for m in measured})
    print(
        "serial depth: " + "; or ".join(methods) + " (the latter where calls overlapped: moto's CPU, a few ms per call and "
        "shared by the threads, hides waits as short as 20 ms); peak in flight at 20 ms"
    )
    durations = phase_durations_ms(template, measured)
    print(
        f"duration estimate per invocation (serial depth x {CALL_MS:.0f} ms + CPU outside the calls): "
        + "; ".join(
            f"{task} {by_rows[BATCH_ROWS]:.0f} ms per {BATCH_ROWS} rows, {by_rows[1]:.0f} ms per row" for task, by_rows in durations.items()
        )
    )
    ok = True
    for task in TASKS:
        worst = max((m for m in measured if m.task == task and m.rows == BATCH_ROWS), key=lambda m: m.serial_depth)
        within = worst.serial_depth <= TARGET_DEPTH
        ok = ok and within
        print(
            f"target: {task} <= {TARGET_DEPTH:.0f} per {BATCH_ROWS}-row batch -> {worst.serial_depth:.1f} ({worst.scenario}; "
            f"{'within' if within else 'OUTSIDE'} target)"
        )
    print(f"saga latency took {time.perf_counter() - started:.0f} s")
    return ok


if __name__ == "__main__":
    from devtools.aws.template_resources import synth_templates

    _template = synth_templates("dev")["Onceflow-dev-TaxiEtl"]
    sys.exit(0 if main(_template) else 1)
