"""`python -m benchmarks.snapshot_latency`: how many AWS calls one snapshot build waits for one
after another (its serial depth), per 1,000 log entries it folds.

moto answers in microseconds, so a build's wall time on it hides how its calls line up.
devtools.aws.latency delays every botocore call by L ms in its own thread (concurrent calls overlap
their waits, as on the network); `measure` runs the same build from the same state at L = 0 and
at L = 20 ms, and the extra wall time over L is the number of calls on its longest chain (for a
build whose calls overlap, `measure` takes it between 200 and 400 ms, where the waits, not
moto's CPU, set the wall time; LatencyRun.method says which).

The build: snapshot 2 of a log of 2 x 10,000 `sheet_edits` events (prod's SNAPSHOT_EVERY) on a
4,000 x 26 sheet, appended through the API's service and routed by the world; snapshot 2 merges
snapshot 1's chunks with its 10,000 events and is three chunks at the shipped CHUNK_BYTES
(256 KiB; the dev template's other settings). It runs through the worker's entry point
(`worker_handler.handle`, via the world). Snapshot 1 is built first; before each measured run,
`prepare` undoes snapshot 2's build (no root on its entry, the pointer back on snapshot 1, no
objects under its prefix, no pending item), so every run does the same work, which the bench
checks (same calls, chunks, events read and root digest) along with a from-scratch replay.

moto spends about a millisecond of CPU on each item a Query returns (see devtools/aws/table_stream.py
on GetRecords): 10,000 events are seconds of CPU per build, and on a shared machine their noise
is larger than the 20 ms waits being measured. So the segment index's Query is answered from
the responses moto gave a warm-up build of the same snapshot (the index does not change under a
build: only cell events are in it). Every call still goes through botocore and the latency
model (delayed, counted, overlapped); only moto's work for the Query is taken out of the wall
time. Each figure is the median of REPEATS measurements.

Figures per 1,000 entries are per event of the snapshot's segment. `main` prints them against
the baseline (the worker before the overlap, measured with this module) and answers whether the
target is met: at most half the baseline's serial depth per 1,000 entries.
"""

from __future__ import annotations

import copy
import gc
import json
import statistics
import sys
import time
from dataclasses import dataclass
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

from benchmarks import environment
from devtools.aws.latency import LatencyRun, measure
from runtime.event_log import contract as event_log_contract

# `make bench`'s environment, set before the handlers are imported (inside the functions below:
# Powertools reads its variables at import). Variables already set are kept.
environment.apply(keep_existing=True)

LOG = "latency-sheet"
EVENTS_PER_SNAPSHOT = 10_000  # prod's SNAPSHOT_EVERY
SHEET_ROWS, SHEET_COLUMNS = 4_000, 26  # the sheet outgrows one 256 KiB chunk
SEED = 23
MEASURED = 2  # the snapshot whose build is measured: it merges snapshot 1's chunks with its segment
DELAY_MS = 20.0
REPEATS = 3

# The worker before the overlap (runtime/event_log as of commit 76e19d5, unchanged up to d1e8bde:
# every call waits for the one before), measured on 2026-11-25 with this module run against that
# code, same scenario, L = 20 ms: 37 calls for the 10,000-event build (Query 20, UpdateItem 6,
# PutObject 4, GetObject 3, GetItem 2, ListObjectsV2 1, DeleteItem 1), one in flight at a time, so
# its serial depth is its 37 calls; measured 36.9, 40.9 and 35.4 (medians of 5, 9 and 3 runs; on a
# loaded machine waking up after each wait costs a little). The baseline is the 37 calls.
BASELINE_CALLS_PER_1000 = 3.70
BASELINE_DEPTH_PER_1000 = 3.70
BASELINE_PEAK_IN_FLIGHT = 1
TARGET_DEPTH_PER_1000 = BASELINE_DEPTH_PER_1000 / 2


@dataclass(frozen=True)
class BuildRun:
    chunks_written: int
    events_read: int
    root: str
    digest: str


@dataclass(frozen=True)
class LatencyFigures:
    events: int
    chunks: int
    runs: list[LatencyRun]

    @property
    def calls(self) -> int:
        return self.runs[0].calls

    @property
    def calls_by_operation(self) -> dict[str, int]:
        return dict(sorted(self.runs[0].calls_by_operation.items()))

    @property
    def serial_depth(self) -> float:
        return statistics.median(run.serial_depth for run in self.runs)

    @property
    def peak_in_flight(self) -> int:
        return max(run.peak_in_flight for run in self.runs)

    def per_1000(self, value: float) -> float:
        return value * 1000 / self.events


class QueryReplay:
    """Answers DynamoDB Query calls from the responses recorded for the same request.

    A `before-call` handler that answers ends the call before it is sent (botocore's own
    short-circuit), so moto does no work for it; the call itself (and the latency model's delay
    around it) happens as before."""

    def __init__(self) -> None:
        self.responses: dict[bytes, dict[str, Any]] = {}
        self.replaying = False
        self.answered = 0
        self.missed = 0

    def attach(self, client: Any) -> QueryReplay:
        client.meta.events.register("before-call.dynamodb.Query", self._answer)
        client.meta.events.register("after-call.dynamodb.Query", self._record)
        return self

    def detach(self, client: Any) -> None:
        client.meta.events.unregister("before-call.dynamodb.Query", self._answer)
        client.meta.events.unregister("after-call.dynamodb.Query", self._record)

    def _answer(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]] | None:
        key = bytes(params["body"])
        context["replay_key"] = key
        if not self.replaying:
            return None
        if key not in self.responses:
            self.missed += 1
            return None
        self.answered += 1
        return SimpleNamespace(status_code=200, headers={}), copy.deepcopy(self.responses[key])

    def _record(self, http_response: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if not self.replaying and http_response.status_code == 200 and "replay_key" in context:
            self.responses[context["replay_key"]] = copy.deepcopy(parsed)


def measure_build(template: dict[str, Any], *, events: int = EVENTS_PER_SNAPSHOT, repeats: int = REPEATS) -> LatencyFigures:
    """Snapshot 2's build through the worker's entry point, `repeats` times at 0 and at DELAY_MS per call."""
    from devtools.aws.moto_patches import VirtualClock
    from devtools.aws.sqs_esm import sqs_event
    from devtools.event_log_world import EventLogWorld, embedded_event_log_cloud
    from devtools.sheet_workload import sheet_edits

    overrides = {event_log_contract.HANDLER_API: {event_log_contract.ENV_SNAPSHOT_EVERY: str(events)}}
    clock = VirtualClock()
    with embedded_event_log_cloud(clock):
        world = EventLogWorld.create(template, clock, overrides=overrides, seed=SEED)
        world.append_edits(LOG, sheet_edits(seed=SEED, count=MEASURED * events, rows=SHEET_ROWS, columns=SHEET_COLUMNS))
        world.route()
        messages = _receive_all(world)
        if len(messages) != MEASURED:
            raise RuntimeError(f"expected {MEASURED} snapshot messages, got {len(messages)}")
        queue_arn = world.queue_arn(world.worker.options.queue_url)
        first, measured = (sqs_event([message], queue_arn) for message in messages)
        if world.invoke_worker(first) != {"batchItemFailures": []}:
            raise RuntimeError("snapshot 1 was not built")
        before = _build_state(world, Decimal(json.loads(messages[1]["Body"])[event_log_contract.KEY_SEQ]))
        progress: list[tuple[int, int]] = []
        builds: list[BuildRun] = []

        def run() -> None:  # the measured work: the worker's invocation, nothing else
            worker = world.snapshot_worker()
            if world.invoke_worker(measured, worker=worker) != {"batchItemFailures": []} or len(worker.progress.build_seconds) != 1:
                raise RuntimeError("the measured build did not finish")
            progress.append((worker.progress.chunks_written, worker.progress.events_read))

        def prepare() -> None:
            if progress:  # what the run before built, read outside the measured time
                builds.append(BuildRun(*progress[-1], *_root(world, before)))
            _undo_build(world, before)
            # The embedded cloud holds a large heap (the whole log); collecting it mid-run would
            # add pauses of its own to the wall time. What exists now is exempted from collection.
            gc.collect()
            gc.freeze()

        replay = QueryReplay().attach(world.clients.dynamodb)
        try:
            prepare()
            run()  # the warm-up: records the index's answers
            replay.replaying = True
            runs = [measure(run, prepare, DELAY_MS) for _ in range(repeats)]
        finally:
            replay.detach(world.clients.dynamodb)
            gc.unfreeze()
        builds.append(BuildRun(*progress[-1], *_root(world, before)))
        problems = world.verify(LOG)
        if problems:
            raise RuntimeError(f"the snapshot differs from a replay: {problems[:3]}")
        if len(set(builds)) != 1 or len({(run.calls, tuple(sorted(run.calls_by_operation.items()))) for run in runs}) != 1:
            raise RuntimeError(f"the measured runs did different work: {set(builds)}")
        if builds[0].events_read != events or replay.missed or not replay.answered:
            raise RuntimeError(f"read {builds[0].events_read} events of {events}; {replay.missed} Query calls not replayed")
        return LatencyFigures(events=events, chunks=builds[0].chunks_written, runs=runs)


# --- the state snapshot 2's build changes, and undoing it ---------------------------------------


@dataclass(frozen=True)
class _Before:
    built: int
    built_seq: Decimal
    built_root: str
    measured_seq: Decimal


def _build_state(world: Any, measured_seq: Decimal) -> _Before:
    head = world.log_store().read_head(LOG)
    if head.built != MEASURED - 1 or head.built_seq is None or head.built_root is None:
        raise RuntimeError(f"the pointer is on snapshot {head.built}, expected {MEASURED - 1}")
    return _Before(head.built, head.built_seq, head.built_root, measured_seq)


def _root(world: Any, before: _Before) -> tuple[str, str]:
    """The measured snapshot's root key and digest, as its entry names it."""
    marker = world.log_store().read_marker(LOG, before.measured_seq)
    if marker is None or not marker.root:
        raise RuntimeError(f"snapshot {MEASURED} has no root")
    return marker.root, str(json.loads(world.clients.s3.get_object(Bucket=world.worker.bucket, Key=marker.root)["Body"].read())["digest"])


def _undo_build(world: Any, before: _Before) -> None:
    """Back to the state before snapshot 2's build: no root, pointer on 1, no objects, no pending item."""
    from runtime.event_log.logic import snapshot_prefix
    from runtime.event_log.objects import S3Objects
    from runtime.shared.dynamo import to_attributes

    dynamodb = world.clients.dynamodb
    dynamodb.update_item(
        TableName=world.api.log_table,
        Key=to_attributes({event_log_contract.KEY_LOG_ID: LOG, event_log_contract.KEY_SEQ: before.measured_seq}),
        UpdateExpression="REMOVE #root, built_at",
        ExpressionAttributeNames={"#root": "root"},
    )
    dynamodb.update_item(
        TableName=world.api.log_table,
        Key=to_attributes({event_log_contract.KEY_LOG_ID: LOG, event_log_contract.KEY_SEQ: 0}),
        UpdateExpression="SET built = :built, built_seq = :seq, built_root = :root",
        ExpressionAttributeValues=to_attributes({":built": before.built, ":seq": before.built_seq, ":root": before.built_root}),
    )
    dynamodb.delete_item(
        TableName=world.worker.pending_table,
        Key=to_attributes({event_log_contract.KEY_LOG_ID: LOG, event_log_contract.KEY_SEQ: before.measured_seq}),
    )
    objects = S3Objects(world.worker.bucket, client=world.clients.s3)
    for key in list(objects.keys(snapshot_prefix(LOG, MEASURED))):
        objects.delete(key)


def _receive_all(world: Any) -> list[dict[str, Any]]:
    url = world.worker.options.queue_url
    messages: list[dict[str, Any]] = []
    while batch := world.clients.sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"]
    ).get("Messages", []):
        messages.extend(batch)
    return sorted(messages, key=lambda message: Decimal(json.loads(message["Body"])[event_log_contract.KEY_SEQ]))


# --- the report ---------------------------------------------------------------------------------


def main(template: dict[str, Any]) -> bool:
    """Print the snapshot build's latency figures (`template`: the synthesized dev EventLog stack); True when the target is met."""
    started = time.perf_counter()
    figures = measure_build(template)
    depth = figures.per_1000(figures.serial_depth)
    depths = sorted(figures.per_1000(run.serial_depth) for run in figures.runs)
    met = depth <= TARGET_DEPTH_PER_1000
    print(
        f"\nsnapshots: serial depth of one build (embedded cloud, every call delayed {DELAY_MS:.0f} ms; snapshot {MEASURED} "
        f"of {MEASURED} x {figures.events:,} events, {figures.chunks} chunks of the shipped size; median of {len(figures.runs)})"
    )
    print(f"  {'per 1,000 entries':<30} {'baseline':>10} {'now':>10}")
    print(f"  {'calls':<30} {BASELINE_CALLS_PER_1000:>10.2f} {figures.per_1000(figures.calls):>10.2f}")
    print(f"  {'serial depth':<30} {BASELINE_DEPTH_PER_1000:>10.2f} {depth:>10.2f}   (runs: {', '.join(f'{d:.2f}' for d in depths)})")
    print(f"  {'peak calls in flight':<30} {BASELINE_PEAK_IN_FLIGHT:>10} {figures.peak_in_flight:>10}")
    print(
        f"  the build: {figures.calls} calls, serial depth {figures.serial_depth:.1f}; "
        + ", ".join(f"{name} {count}" for name, count in figures.calls_by_operation.items())
    )
    middle = sorted(figures.runs, key=lambda run: run.serial_depth)[len(figures.runs) // 2]
    print(
        f"  depth taken as {middle.method}; wall time {middle.wall_at_zero_s:.2f} s at 0 ms, "
        f"{middle.wall_at_delay_s:.2f} s at {DELAY_MS:.0f} ms; CPU outside the calls {middle.cpu_s:.2f} s"
    )
    print(
        f"  target: serial depth per 1,000 entries <= {TARGET_DEPTH_PER_1000:.2f} (half the baseline): "
        f"{'met' if met else 'NOT MET'} ({depth / BASELINE_DEPTH_PER_1000:.2f}x the baseline)"
    )
    print(f"  (took {time.perf_counter() - started:.0f} s)")
    return met


if __name__ == "__main__":
    from devtools.aws.template_resources import synth_templates

    sys.exit(0 if main(synth_templates("dev")["Onceflow-dev-EventLog"]) else 1)
