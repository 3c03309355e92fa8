"""`make bench`: DynamoDB request units per event for this handler against the seed design (and,
with the other sections, the saga's cost, the bulk route against /trips/batch, the snapshots and
throughput under latency).

Same seeded workload for every row (200 users x 3 runs x 60 messages, 20% re-sent, 5% late,
records in arrival order), delivered in batches in shard order:
  (a) this handler (combined run item, archive chunks, duplicate-filtering reads)
  (b) a faithful port of the seed: get context, three output puts, put context, per message
  (c) (b) wrapped in Powertools' idempotency utility
Request units are counted from the requests made (devtools.aws.capacity). Final states are checked:
(a) against one clean pass over the unique messages, (b) and (c) against the seed's own
semantics. This is a benchmark that prints figures, not a pass/fail test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from benchmarks import environment
from devtools import reference
from devtools.aws.capacity import CapacityMeter
from devtools.aws.esm import ShardRecord, lambda_event, records_from_payloads
from devtools.workload import Delivery, Workload, generate
from runtime.runner_stats import contract as runner_stats_contract


@dataclass
class Row:
    name: str
    wru: float
    rru: float
    events: int
    check: str

    @property
    def wru_per_event(self) -> float:
        return self.wru / self.events

    @property
    def rru_per_event(self) -> float:
        return self.rru / self.events


def windowed_batches(
    deliveries: Sequence[Delivery], records: Sequence[ShardRecord], max_size: int, window_ms: int
) -> Iterator[list[ShardRecord]]:
    """Batches as Lambda's batching window forms them: full, or `window_ms` after the first record arrived."""
    batch: list[ShardRecord] = []
    opened = 0
    for delivery, record in zip(deliveries, records, strict=True):
        if batch and (len(batch) >= max_size or delivery.arrival_ms - opened >= window_ms):
            yield batch
            batch = []
        if not batch:
            opened = delivery.arrival_ms
        batch.append(record)
    if batch:
        yield batch


def run_handler(workload: Workload, batches: list[list[ShardRecord]], template: dict[str, Any]) -> Row:
    from devtools.aws.clients import new_client
    from devtools.aws.moto_patches import embedded_aws
    from devtools.runner_world import RunnerStatsWorld

    with embedded_aws():
        world = RunnerStatsWorld.create(template)
        client = new_client()
        meter = CapacityMeter()
        meter.attach(client)
        service = world.service(client)
        for batch in batches:
            report = service.process(lambda_event(batch)["Records"])
            if report.failures:
                raise RuntimeError(f"the benchmark expects no failures, got {len(report.failures)}")
        view = world.view()
    problems = compare_clean(workload, view)
    return Row(
        "", meter.wru, meter.rru, len(workload.deliveries), "identical to a clean pass" if not problems else f"MISMATCH: {problems[:3]}"
    )


def compare_clean(workload: Workload, view: Any) -> list[str]:
    expected = reference.clean_pass(workload.unique)
    problems = []
    for key, totals in expected.items():
        run = view.runs.get(key)
        if run is None or run.total_meters != Decimal(totals.total_meters) or len(run.archived) != totals.message_count:
            problems.append(f"run {key}")
    tendencies = reference.clean_tendencies(expected)
    for user, t in tendencies.items():
        if view.tendencies.get(user) != (t.current_run_id, t.current, t.previous_run_id, t.previous):
            problems.append(f"tendency {user}")
    return problems


def run_seed(workload: Workload, batches: list[list[ShardRecord]], *, idempotent: bool) -> Row:
    import boto3

    from benchmarks.seed_baseline import (
        compare_with_reference,
        create_idempotency_table,
        create_seed_tables,
        idempotent_seed_handler_factory,
        seed_handler,
    )
    from devtools.aws.moto_patches import embedded_aws

    with embedded_aws():
        client = boto3.client("dynamodb")
        tables = create_seed_tables(client)
        handle: Callable[[dict[str, Any]], None]
        if idempotent:
            create_idempotency_table(client, "seed-idempotency")
            handle = idempotent_seed_handler_factory(client, tables, "seed-idempotency")
        else:
            handle = lambda event: seed_handler(event, client, tables)  # noqa: E731
        meter = CapacityMeter()
        meter.attach(client)
        for batch in batches:
            handle(lambda_event(batch))
        meter_wru, meter_rru = meter.wru, meter.rru
        problems = compare_with_reference(client, tables, reference.seed_pass(workload.deliveries))
    return Row(
        "",
        meter_wru,
        meter_rru,
        len(workload.deliveries),
        "as the seed's own semantics predict" if not problems else f"MISMATCH: {problems[:3]}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="DynamoDB request units per event, against the seed design")
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-idempotent", action="store_true", help="skip row (c), the slowest on moto")
    # The runner-stats section is named after the pipeline's service.
    parser.add_argument("--only", choices=[runner_stats_contract.SERVICE, "snapshots", "saga", "latency", "bulk"], help="run one section")
    parser.add_argument("--bulk-rows", type=int, default=100_000, help="rows of the bulk section's file (default 100,000)")
    parser.add_argument(
        "--http-rows",
        type=int,
        default=5_000,
        help="of those, the first N the bulk section also sends through /trips/batch (default 5,000)",
    )
    args = parser.parse_args(argv)
    environment.apply()

    from devtools.aws.template_resources import synth_templates
    from onceflow.infra.config import load_config

    started = time.perf_counter()
    templates = synth_templates("dev")
    template = templates["Onceflow-dev-RunnerStats"]
    snapshots_ok = saga_ok = latency_ok = bulk_ok = True
    if args.only in (None, "latency"):
        from benchmarks import latency

        latency_ok = latency.main(templates)
    if args.only == "latency":
        print(f"benchmark took {time.perf_counter() - started:.0f} s")
        return 0 if latency_ok else 1
    if args.only in (None, "saga"):
        from benchmarks import taxi_cost

        saga_ok = taxi_cost.main(templates["Onceflow-dev-TaxiEtl"])
    if args.only in (None, "bulk"):
        from benchmarks import bulk_load

        bulk_ok = bulk_load.main(templates["Onceflow-dev-TaxiEtl"], bulk_rows=args.bulk_rows, http_rows=args.http_rows)
    if args.only in (None, "snapshots"):
        from benchmarks import snapshots

        snapshots_ok = snapshots.main(templates["Onceflow-dev-EventLog"])
    if args.only in ("snapshots", "saga", "bulk"):
        print(f"benchmark took {time.perf_counter() - started:.0f} s")
        return 0 if snapshots_ok and saga_ok and bulk_ok else 1
    prod = load_config("prod").runner_stats
    workload = generate(seed=args.seed, users=args.users, runs_per_user=args.runs, messages_per_run=args.messages)
    records = records_from_payloads([(d.partition_key, d.data) for d in workload.deliveries])
    issue_batches = [list(records[i : i + 100]) for i in range(0, len(records), 100)]
    prod_batches = list(windowed_batches(workload.deliveries, records, prod.batch_size, prod.batching_window_seconds * 1000))

    kinds = {kind: sum(1 for d in workload.deliveries if d.kind == kind) for kind in ("original", "resend", "late")}
    print(
        f"workload: {args.users} users x {args.runs} runs x {args.messages} messages = {len(workload.unique)} unique, "
        f"{len(workload.deliveries)} deliveries (re-sent {kinds['resend']}, late {kinds['late']})"
    )
    rows: list[Row] = []
    seed_row = run_seed(workload, issue_batches, idempotent=False)
    seed_row.name = "(b) seed algorithm, batch 100"
    rows.append(seed_row)
    if not args.skip_idempotent:
        row = run_seed(workload, issue_batches, idempotent=True)
        row.name = "(c) seed + Powertools idempotency, batch 100"
        rows.append(row)
    row = run_handler(workload, issue_batches, template)
    row.name = "(a) onceflow handler, batch 100"
    rows.append(row)
    ours_100 = row
    row = run_handler(workload, prod_batches, template)
    row.name = f"(a) onceflow handler, prod: batch {prod.batch_size}, window {prod.batching_window_seconds} s"
    rows.append(row)

    print(f"\n{'design':<58} {'WRU/event':>10} {'RRU/event':>10} {'WRU vs (b)':>11}  final state")
    for r in rows:
        print(
            f"{r.name:<58} {r.wru_per_event:>10.3f} {r.rru_per_event:>10.3f} {r.wru_per_event / seed_row.wru_per_event:>10.2f}x  {r.check}"
        )
    lost = reference.seed_pass(workload.deliveries).lost_meters
    total = sum(t.total_meters for t in reference.clean_pass(workload.unique).values())
    print(f"\nmeters the seed design loses on this workload (late messages dropped): {lost} of {total} ({100 * lost / total:.2f}%)")
    mean_prod = statistics.mean(len(b) for b in prod_batches)
    print(
        f"prod batching: {len(prod_batches)} batches, mean {mean_prod:.0f} records; each record waits up to "
        f"{prod.batching_window_seconds} s longer before it is applied"
    )
    target = 0.40
    verdict = "within" if ours_100.wru_per_event <= target * seed_row.wru_per_event else "OUTSIDE"
    print(
        f"target: (a) <= {target:.2f}x of (b) WRU/event at batch 100 -> "
        f"{ours_100.wru_per_event / seed_row.wru_per_event:.2f}x, {verdict} target"
    )

    print(f"benchmark took {time.perf_counter() - started:.0f} s")
    return 0 if latency_ok and snapshots_ok and saga_ok and bulk_ok and all("MISMATCH" not in r.check for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
