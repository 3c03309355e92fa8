"""`make bench --only latency`, runner stats with CPU counted: what one shard sustains, and what it costs.

Lambda gives a function a share of one vCPU in proportion to its memory (one full vCPU at
1,769 MB), so a batch takes its CPU divided by that share, plus the round trips its longest chain
of calls waits for. The CPU measured is the process's CPU less the embedded cloud's (moto's
request handler): the handler's own work and botocore's client side (building, signing and
parsing each request), the median of CPU_REPEATS fresh runs. Per shard, with parallelization
factor P (P batches of one shard at once, per-key order kept):

    records/s = P x records / (CPU / share + depth x CALL_MS)

where share = min(memory / 1,769 MB, 1): the handler's CPU runs under one interpreter lock, so a
second vCPU above 1,769 MB is not used. The $ per million records are Lambda's GB-seconds at that
memory (arm64) and requests, plus the DynamoDB request units the same batch was billed
(devtools/aws/capacity.py), at the prices of benchmarks/taxi_cost.py.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any
from unittest import mock

from benchmarks.latency import CALL_MS, DELAY_MS, KINESIS_SHARD_RECORDS_PER_SECOND, RUNNER_TARGET_PER_SHARD, MotoSession
from benchmarks.taxi_cost import PRICES
from devtools.aws.esm import ShardRecord, lambda_event
from devtools.aws.latency import LatencyRun, client_cpu, measure
from devtools.workload import generate
from devtools.workload import shard_records as workload_records
from runtime.runner_stats import contract as runner_stats_contract

FULL_VCPU_MB = 1769  # Lambda: one full vCPU at 1,769 MB, in proportion below
POWER_MEMORY_MB = (256, 512, 1024, 1769, 2048, 3008)
POWER_PARALLELIZATION = (1, 2, 5, 10)
CPU_REPEATS = 3
# Lambda's vCPU is not this machine's core: the independent measurement of the same batch
# was 0.65 s of CPU against about 0.42 s here. Defaults are sized to meet their target with the
# CPU measured here times this factor; the table shows the capacity at the CPU as measured.
CPU_HEADROOM = 1.5
# The seed's functions were x86_64 (benchmarks/taxi_cost.py prices them so); onceflow's are arm64.
SEED_GB_SECOND = PRICES["lambda_gb_second_x86"]
GB_SECOND = PRICES["lambda_gb_second_arm"]
REQUEST_MICROBENCH_CALLS = 2000


def vcpu_share(memory_mb: int) -> float:
    return min(memory_mb / FULL_VCPU_MB, 1.0)


@dataclass(frozen=True)
class BatchProfile:
    """One batch of one scenario: its size, calls, serial depth, client-side CPU and request units."""

    name: str
    records: int
    calls: int
    depth: float
    cpu_s: float
    wru: float
    rru: float
    gb_second_price: float = GB_SECOND

    def with_cpu_headroom(self) -> BatchProfile:
        return replace(self, cpu_s=self.cpu_s * CPU_HEADROOM)

    def batch_seconds(self, memory_mb: int) -> float:
        return self.cpu_s / vcpu_share(memory_mb) + self.depth * CALL_MS / 1000

    def per_shard(self, memory_mb: int, parallelization: int) -> float:
        """Records per second one shard sustains at this memory and parallelization factor."""
        return parallelization * self.records / self.batch_seconds(memory_mb)

    def dollars_per_million(self, memory_mb: int) -> float:
        """Lambda (GB-seconds and one request per batch) plus DynamoDB, per million records."""
        batches = 1e6 / self.records
        lambda_cost = batches * (self.batch_seconds(memory_mb) * memory_mb / 1024 * self.gb_second_price + PRICES["lambda_request"])
        dynamodb = 1e6 * (self.wru * PRICES["wru"] + self.rru * PRICES["rru"]) / self.records
        return lambda_cost + dynamodb


# --- the batches measured -------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    label: str  # the name in one or two words
    history: list[list[ShardRecord]]
    batch: list[ShardRecord]


@functools.cache
def scenarios() -> tuple[Scenario, ...]:
    from benchmarks.latency import full_shard_records

    history, typical = full_shard_records()
    # Every device's first message: 1,000 runs created, no history to read back.
    clean = functools.partial(generate, messages_per_run=1, resend_rate=0.0, late_rate=0.0)
    first = workload_records(list(clean(seed=31, users=1000, runs_per_user=1).deliveries))
    # One user's backlog of 1,000 one-message runs: one thread, one tendency record.
    backlog = workload_records(list(clean(seed=37, users=1, runs_per_user=1000).deliveries))
    return (
        Scenario("typical: 1,000 records of about 840 runs, after 5,000", "typical", history, typical),
        Scenario("1,000 runners, one record each (new runs)", "1,000 runners", [], first[:1000]),
        Scenario("one user, 1,000 runs", "one user", [], backlog[:1000]),
    )


@contextmanager
def generic_serializers() -> Iterator[None]:
    """The store's attribute values through boto3's generic TypeSerializer/TypeDeserializer (before)."""
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

    serializer, deserializer = TypeSerializer(), TypeDeserializer()
    with ExitStack() as stack:
        stack.enter_context(mock.patch("runtime.shared.attributes._attribute", serializer.serialize))
        stack.enter_context(mock.patch("runtime.shared.attributes._value", deserializer.deserialize))
        yield


@dataclass(frozen=True)
class Variant:
    """A client-side configuration of the handler: the one deployed, or an earlier one."""

    name: str
    validate_parameters: bool
    direct_attributes: bool
    tendencies_up_front: bool = True
    backlog_commits_at_once: bool = True


BEFORE = Variant("botocore defaults: validation on, generic serializers (before)", True, False)
VALIDATION_OFF = Variant("+ parameter validation off", False, False)
DEPLOYED = Variant("+ attribute values built directly (deployed)", False, True)
VARIANTS = (BEFORE, VALIDATION_OFF, DEPLOYED)
TENDENCY_PER_PUSH = Variant("a GetItem per tendency push (before)", False, True, tendencies_up_front=False)
BACKLOG_IN_ORDER = Variant("a user's runs committed one at a time (before)", False, True, backlog_commits_at_once=False)


def session_for(
    template: dict[str, Any], scenario: Scenario, variant: Variant, *, io_concurrency: int | None = None
) -> tuple[MotoSession, Callable[[], None]]:
    """A fresh embedded cloud with the scenario's history applied, and the measured run (with the
    synthesized settings, or another IO_CONCURRENCY)."""
    from devtools.runner_world import RunnerStatsWorld
    from runtime.runner_stats import wiring
    from runtime.runner_stats.service import RunnerStatsService
    from runtime.shared.aws import Clients

    def setup() -> tuple[RunnerStatsWorld, Any]:
        overrides = {} if io_concurrency is None else {runner_stats_contract.ENV_IO_CONCURRENCY: str(io_concurrency)}
        world = RunnerStatsWorld.create(template, settings_overrides=overrides)
        # The client the handler builds (wiring.clients_for), or one with botocore's validation on.
        clients = wiring.clients_for(world.settings) if not variant.validate_parameters else Clients(world.settings.options.io_concurrency)
        client = clients.dynamodb
        for earlier in scenario.history:
            if world.invoke(lambda_event(earlier), client)["batchItemFailures"]:
                raise RuntimeError("the history must apply without failures")
        return world, client

    session = MotoSession(setup)

    def run() -> None:
        world, client = session.state
        with ExitStack() as stack:
            if not variant.direct_attributes:
                stack.enter_context(generic_serializers())
            if not variant.tendencies_up_front:
                stack.enter_context(mock.patch.object(RunnerStatsService, "_known_tendencies", lambda *_: {}))
            if not variant.backlog_commits_at_once:
                stack.enter_context(mock.patch.object(RunnerStatsService, "_commit_keys", one_at_a_time(RunnerStatsService._commit_keys)))
            if world.invoke(lambda_event(scenario.batch), client)["batchItemFailures"]:
                raise RuntimeError("the measured batch must apply without failures")

    return session, run


def one_at_a_time(commit_keys: Callable[..., Any]) -> Callable[..., Any]:
    """RunnerStatsService._commit_keys with a user's keys committed in order, as before the backlog change."""

    def in_order(service: Any, results: Any, contexts: Any, report: Any, concurrency: int = 1) -> Any:
        return commit_keys(service, results, contexts, report, 1)

    return in_order


def request_units(template: dict[str, Any], scenario: Scenario) -> tuple[float, float]:
    """WRU and RRU the batch is billed (a metered run of its own: the meter's CPU is not the handler's)."""
    from devtools.aws.capacity import CapacityMeter

    session, run = session_for(template, scenario, DEPLOYED)
    try:
        session.prepare()
        meter = CapacityMeter()
        meter.attach(session.state[1])
        run()
        return meter.wru, meter.rru
    finally:
        session.close()


def profile(template: dict[str, Any], scenario: Scenario, measured: LatencyRun | None = None, variant: Variant = DEPLOYED) -> BatchProfile:
    """The scenario's batch as deployed (or as `variant`): calls and depth (from `measured` when the section
    already has them), CPU as the median of CPU_REPEATS runs (the measured one's included), request units."""
    session, run = session_for(template, scenario, variant)
    try:
        # A chain of about a thousand calls waits 20 s at DELAY_MS, beside which moto's CPU is noise; at the
        # io-bound delays it would wait ten minutes.
        long_chain = not variant.backlog_commits_at_once
        latency = measured or measure(run, session.prepare, DELAY_MS, io_bound_delays_ms=None if long_chain else (200.0, 400.0))
        cpu = statistics.median([latency.client_cpu_s, *(client_cpu(run, session.prepare, 1) for _ in range(CPU_REPEATS - 1))])
    finally:
        session.close()
    wru, rru = request_units(template, scenario)
    return BatchProfile(scenario.name, len(scenario.batch), latency.calls, latency.serial_depth, cpu, wru, rru)


def variant_cpu(template: dict[str, Any], scenario: Scenario, variant: Variant) -> float:
    session, run = session_for(template, scenario, variant)
    try:
        return client_cpu(run, session.prepare, CPU_REPEATS)
    finally:
        session.close()


# --- botocore's client side per request, with no emulator at all ----------------------------


def request_microseconds(variant: Variant, calls: int = REQUEST_MICROBENCH_CALLS) -> float:
    """CPU per PutItem of a run item, as the store sends it, against a canned response: botocore's
    client side and the store's own encoding, nothing else (median of 5 rounds)."""
    import boto3
    from botocore.awsrequest import AWSResponse, HTTPHeaders

    from runtime.runner_stats.models import RunContext, RunKey
    from runtime.runner_stats.store import DynamoRunStatsStore, RunStatsTables
    from runtime.shared.aws import client_config

    class Body:
        def stream(self, **_: Any) -> Iterator[bytes]:
            yield b"{}"

    def answer(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, 200, HTTPHeaders.from_dict({"x-amzn-requestid": "bench"}), Body())

    client = boto3.client("dynamodb", config=client_config("dynamodb", validate_parameters=variant.validate_parameters))
    hooks: Any = client.meta.events  # the stub types a handler as returning None; before-send's may answer
    hooks.register_first("before-send.dynamodb.*", answer)
    store = DynamoRunStatsStore(RunStatsTables("runs", "tendency", "messages", "rejects"), client=client)
    context = RunContext(
        RunKey(1_700_000_123, 42),
        version=8,
        high_water=8,
        total_meters=Decimal("1234.567"),
        first_ts=1_764_000_000_000,
        last_ts=1_764_000_210_000,
        message_count=8,
        tendency="good job",
    )
    rounds = []
    with ExitStack() as stack:
        if not variant.direct_attributes:
            stack.enter_context(generic_serializers())
        for _ in range(100):
            store.commit(context, None)
        for _ in range(5):
            started = time.process_time()
            for _ in range(calls):
                store.commit(context, None)
            rounds.append((time.process_time() - started) / calls * 1e6)
    return statistics.median(rounds)


# --- the report ------------------------------------------------------------------------------


def choose(profile_: BatchProfile, target: float) -> tuple[int, int]:
    """The cheapest (memory, P) of the power-tuning grid sustaining `target` with CPU_HEADROOM: lowest
    $ per million to the cent, then the fewest concurrent batches (P > 1 needs the producer contract),
    then the least memory."""
    sized = profile_.with_cpu_headroom()
    cells = [(m, p) for m in POWER_MEMORY_MB for p in POWER_PARALLELIZATION if sized.per_shard(m, p) >= target]
    if not cells:
        raise RuntimeError(f"no cell of the grid sustains {target:,.0f} records/s")
    return min(cells, key=lambda cell: (round(profile_.dollars_per_million(cell[0]), 2), cell[1], cell[0]))


def power_table(profile_: BatchProfile, seed: BatchProfile) -> Iterator[str]:
    header = "".join(f"{f'P={p}':>9}" for p in POWER_PARALLELIZATION)
    yield f"{'memory':>8} {'vCPU':>5} {'batch s':>8}{header}  {'$/M records':>11}  {'seed $/M':>9} {'seed rec/s P=1':>15}"
    for memory in POWER_MEMORY_MB:
        cells = "".join(f"{profile_.per_shard(memory, p):>9,.0f}" for p in POWER_PARALLELIZATION)
        yield (
            f"{memory:>5} MB {vcpu_share(memory):>5.2f} {profile_.batch_seconds(memory):>8.2f}{cells}  "
            f"{profile_.dollars_per_million(memory):>11.3f}  {seed.dollars_per_million(memory):>9.3f} {seed.per_shard(memory, 1):>15,.0f}"
        )


def main(
    templates: dict[str, dict[str, Any]], typical_run: LatencyRun, seed: LatencyRun, seed_records: int, seed_units: tuple[float, float]
) -> bool:
    """Prints CPU, capacity per shard at dev's and prod's configuration, and the power-tuning
    table; True when prod sustains RUNNER_TARGET_PER_SHARD and dev a shard's ingest. `typical_run`
    is the typical batch as deployed, already measured under latency by the section before."""
    from onceflow.infra.config import load_config

    template = templates["Onceflow-dev-RunnerStats"]
    print("\n== runner stats with CPU counted (process CPU less the embedded cloud's, median of 3 fresh runs) ==")
    micro = {variant: request_microseconds(variant) for variant in VARIANTS}
    print(f"  one PutItem of a run item, CPU per request, canned response (no emulator), median of 5 x {REQUEST_MICROBENCH_CALLS}:")
    for variant, micro_s in micro.items():
        print(f"    {variant.name:<64} {micro_s:>6.0f} us  {micro_s / micro[BEFORE]:.2f}x")
    typical = scenarios()[0]
    by_variant = {variant: variant_cpu(template, typical, variant) for variant in (BEFORE, VALIDATION_OFF)}
    profiles = [profile(template, scenario, typical_run if scenario is typical else None) for scenario in scenarios()]
    by_variant[DEPLOYED] = profiles[0].cpu_s
    print(f"  the typical batch's client-side CPU, same run ({profiles[0].calls} calls):")
    for variant, cpu in by_variant.items():
        print(f"    {variant.name:<64} {cpu * 1000:>6.0f} ms  {cpu / by_variant[BEFORE]:.2f}x")
    print(f"\n  {'batch':<52} {'calls':>6} {'depth':>6} {'CPU ms':>7} {'us/record':>9} {'us/call':>8} {'WRU':>6} {'RRU':>6}")
    befores = [
        replace(profile(template, scenario, variant=variant), name=f"{scenario.label}: {variant.name}")
        for scenario, variant in ((scenarios()[1], TENDENCY_PER_PUSH), (scenarios()[2], BACKLOG_IN_ORDER))
    ]
    for measured in [*befores, *profiles]:
        print(
            f"  {measured.name:<52} {measured.calls:>6} {measured.depth:>6.0f} {measured.cpu_s * 1000:>7.0f} "
            f"{measured.cpu_s / measured.records * 1e6:>9.0f} {measured.cpu_s / measured.calls * 1e6:>8.0f} "
            f"{measured.wru:>6.0f} {measured.rru:>6.0f}"
        )
    seed_profile = BatchProfile(
        "seed design", seed_records, seed.calls, seed.serial_depth, seed.client_cpu_s, *seed_units, gb_second_price=SEED_GB_SECOND
    )
    met = True
    print(f"\n  records/s per shard = P x records / (CPU / vCPU share + depth x {CALL_MS:.0f} ms), at each environment's configuration:")
    for env, target in (("dev", KINESIS_SHARD_RECORDS_PER_SECOND), ("prod", RUNNER_TARGET_PER_SHARD)):
        settings = load_config(env).runner_stats
        memory, parallelization = settings.memory_mb, settings.parallelization_factor
        figures = ", ".join(
            f"{scenario.label} {m.per_shard(memory, parallelization):,.0f}" for scenario, m in zip(scenarios(), profiles, strict=True)
        )
        sized = profiles[0].with_cpu_headroom().per_shard(memory, parallelization)
        ok = sized >= target
        met &= ok
        cheapest = choose(profiles[0], target)
        print(
            f"    {env}: {memory} MB ({vcpu_share(memory):.2f} vCPU), parallelization {parallelization}: {figures}; "
            f"target >= {target:,} for the typical batch, also at {CPU_HEADROOM}x the CPU ({sized:,.0f}): "
            f"{'met' if ok else 'NOT met'}; the grid's cheapest for it: {cheapest[0]} MB x P={cheapest[1]} "
            f"(${profiles[0].dollars_per_million(cheapest[0]):.3f}/M)"
        )
    print("\n  power tuning, typical batch: records/s per shard by memory and parallelization factor P;")
    print("  $ per million records (Lambda arm64 + DynamoDB)")
    print(f"  beside the seed design's (one record at a time, x86_64, {seed_records} records sampled), same run:")
    for line in power_table(profiles[0], seed_profile):
        print("    " + line)
    return met
