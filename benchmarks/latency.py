"""`make bench --only latency`: throughput under real network latency, through the real entry points.

moto answers in microseconds; each DynamoDB call from Lambda takes milliseconds. Every botocore
call of the code under test is delayed by L ms (devtools/aws/latency.py), and the same work is
measured at L = 0 and at L = DELAY_MS:
  serial depth = extra wall time / L   (calls on the longest chain that wait for each other)
  ceiling      = work / (depth x 5 ms) (what one invocation chain sustains at 5 ms per call)
  duration     = depth x 5 ms + CPU outside the calls (the Lambda duration the cost tables use)

Sections: runner stats in the full-shard regime (a 1,000-record batch of about 1,000 distinct
runs, with the seed design side by side), the taxi saga's phases (benchmarks/saga_latency.py),
the snapshot worker (benchmarks/snapshot_latency.py), and the handlers' cold start
(benchmarks/cold_start.py). Figures, not a pass/fail test; it says whether each target is met.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

from devtools.aws.esm import ShardRecord, lambda_event
from devtools.aws.latency import LatencyRun, measure
from devtools.workload import Workload, generate
from devtools.workload import shard_records as workload_records

DELAY_MS = 20.0
CALL_MS = 5.0  # a DynamoDB call from Lambda in the same region
KINESIS_SHARD_RECORDS_PER_SECOND = 1000  # what one shard accepts
RUNNER_TARGET_PER_SHARD = 2 * KINESIS_SHARD_RECORDS_PER_SECOND

# The full-shard regime: 1,000 devices, all on the air, each sending every 30 s with staggered
# starts, so one 1,000-record batch (30 s of the shard) holds about 1,000 distinct runs. The batch
# measured follows 5,000 records already applied: every run has its item, and past 200 m its
# tendency label is settled ("good job" until 5 km), as in the steady state of a run.
DEVICES = 1000
MESSAGES_PER_RUN = 8
BATCH = 1000
HISTORY = 5000
# The seed design does the same five calls per message one after another, so a sample of the
# batch (with its devices' history) gives its rate; the whole batch would take minutes at 20 ms.
SEED_SAMPLE = 250


@functools.cache
def full_shard_workload() -> Workload:
    return generate(seed=29, users=DEVICES, runs_per_user=1, messages_per_run=MESSAGES_PER_RUN, start_spread_ms=30_000)


def full_shard_records() -> tuple[list[list[ShardRecord]], list[ShardRecord]]:
    """The history (in batches of 1,000) and the one batch measured."""
    records = workload_records(list(full_shard_workload().deliveries))
    history = [records[start : start + BATCH] for start in range(0, HISTORY, BATCH)]
    return history, records[HISTORY : HISTORY + BATCH]


def distinct_runs(batch: list[ShardRecord]) -> int:
    return len({record.partition_key for record in batch})


class MotoSession:
    """A fresh embedded cloud per measured run: `prepare` opens it and applies the history."""

    def __init__(self, setup: Callable[[], Any]) -> None:
        self._setup = setup
        self._stack: ExitStack | None = None
        self.state: Any = None

    def prepare(self) -> None:
        from devtools.aws.moto_patches import embedded_aws

        self.close()
        self._stack = ExitStack()
        self._stack.enter_context(embedded_aws())
        self.state = self._setup()

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None


def runner_stats_run(template: dict[str, Any], io_concurrency: int | None = None) -> LatencyRun:
    """onceflow's handler, through its entry point and on the client it builds, on the batch after
    the history (with the synthesized settings, or another IO_CONCURRENCY)."""
    from benchmarks.runner_capacity import DEPLOYED, scenarios, session_for

    session, run = session_for(template, scenarios()[0], DEPLOYED, io_concurrency=io_concurrency)
    try:
        return measure(run, session.prepare, DELAY_MS)
    finally:
        session.close()


def seed_run() -> tuple[LatencyRun, int, tuple[float, float]]:
    """The seed design (benchmarks/seed_baseline.py), one record at a time, on the first records of
    the same batch after its devices' own history; the run, the records it measured, and the
    WRU and RRU they were billed (a metered run of its own)."""
    import boto3

    from benchmarks.seed_baseline import create_seed_tables, seed_handler

    full_history, full_batch = full_shard_records()
    batch = full_batch[:SEED_SAMPLE]
    devices = {record.partition_key for record in batch}
    history = [[record for record in earlier if record.partition_key in devices] for earlier in full_history]

    def setup() -> tuple[Any, Any]:
        client = boto3.client("dynamodb")
        tables = create_seed_tables(client)
        for earlier in history:
            seed_handler(lambda_event(earlier), client, tables)
        return client, tables

    session = MotoSession(setup)

    def run() -> None:
        client, tables = session.state
        seed_handler(lambda_event(batch), client, tables)

    from devtools.aws.capacity import CapacityMeter

    try:
        measured = measure(run, session.prepare, DELAY_MS)
        session.prepare()
        meter = CapacityMeter()
        meter.attach(session.state[0])
        run()
        return measured, len(batch), (meter.wru, meter.rru)
    finally:
        session.close()


def runner_table(rows: list[tuple[str, LatencyRun, int]]) -> Iterator[str]:
    yield (
        f"{'design':<40} {'records':>7} {'calls':>6} {'calls/rec':>9} {'depth':>6} {'depth/rec':>9} {'in flight':>9} "
        f"{'client CPU ms':>13} {'records/s per shard at 5 ms, CPU not counted':>45}"
    )
    for name, run, records in rows:
        yield (
            f"{name:<40} {records:>7} {run.calls:>6} {run.calls / records:>9.2f} {run.serial_depth:>6.0f} "
            f"{run.serial_depth / records:>9.3f} {run.peak_in_flight:>9} {run.client_cpu_s * 1000:>13.0f} "
            f"{run.ceiling_per_second(records, CALL_MS):>45,.0f}"
        )


def runner_stats_section(templates: dict[str, dict[str, Any]]) -> bool:
    from benchmarks import runner_capacity

    template = templates["Onceflow-dev-RunnerStats"]
    _, batch = full_shard_records()
    print(
        f"\n== runner stats: one {len(batch)}-record batch of {distinct_runs(batch)} distinct runs "
        f"({DEVICES} devices every 30 s, after {HISTORY} records), every AWS call delayed {DELAY_MS:.0f} ms =="
    )
    ours = runner_stats_run(template)
    one_at_a_time = runner_stats_run(template, io_concurrency=1)
    seed, sampled, seed_units = seed_run()
    rows = [
        ("onceflow handler (pool of users)", ours, len(batch)),
        ("onceflow, users one at a time (before)", one_at_a_time, len(batch)),
        ("seed design (one record at a time)", seed, sampled),
    ]
    for line in runner_table(rows):
        print("  " + line)
    for name, run in (("onceflow", ours), ("one at a time", one_at_a_time), ("seed", seed)):
        by_operation = ", ".join(f"{op} {count}" for op, count in sorted(run.calls_by_operation.items()))
        print(f"  {name} calls: {by_operation}; depth {run.method}")
    print(
        f"  network only (one full vCPU, CPU not counted): onceflow {ours.ceiling_per_second(len(batch), CALL_MS):,.0f} records/s "
        f"per shard, the seed design {seed.ceiling_per_second(sampled, CALL_MS):,.0f}; with CPU counted, below"
    )
    return runner_capacity.main(templates, ours, seed, sampled, seed_units)


def main(templates: dict[str, dict[str, Any]]) -> bool:
    """Every latency section; True when every target is met."""
    from benchmarks import cold_start, saga_latency, snapshot_latency

    results = {"runner stats": runner_stats_section(templates)}
    print("\n== taxi saga phases ==")
    results["taxi saga"] = saga_latency.main(templates["Onceflow-dev-TaxiEtl"])
    print("\n== snapshot worker ==")
    results["snapshot worker"] = snapshot_latency.main(templates["Onceflow-dev-EventLog"])
    print("\n== cold start ==")
    results["cold start"] = cold_start.main(templates)
    print("\nlatency targets: " + ", ".join(f"{name} {'met' if ok else 'NOT met'}" for name, ok in results.items()))
    return all(results.values())
