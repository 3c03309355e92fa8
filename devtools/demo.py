"""`make demo`: the pipelines end to end on an embedded (moto) cloud.

Runner stats below; the event log in devtools/event_log_demo.py; the taxi saga in devtools/taxi_demo.py.

No AWS account is needed. Tables, the on-failure queue and the stream come from the
synthesized dev template; device messages go into a moto Kinesis stream; the shard is polled
the way the event source mapping would (batch size, retries, bisect, batchItemFailures from
the template's mapping); the real Lambda handler runs in-process, with a crash and a throttle
injected along the way. The results are checked against an independent recomputation.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
import warnings
from collections import Counter
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

from devtools import reference
from devtools.aws.esm import EventSourceMapping, KinesisShard, ShardRecord
from devtools.aws.faults import ThrottledWrites, WriteBoundaryCrasher
from devtools.aws.lambda_context import FakeLambdaContext, as_lambda_context
from devtools.aws.template_resources import EmbeddedCloud, load_assembly, resources_of_type
from devtools.demo_progress import progress, section
from devtools.state import capture
from devtools.workload import generate
from runtime.runner_stats import contract as runner_stats_contract

# The default workload spans about 3 hours of device time; it starts this long before the replay.
REPLAY_LEAD_MS = 4 * 3600 * 1000
AWS_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "demo",
    "AWS_SECRET_ACCESS_KEY": "demo",
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
    "POWERTOOLS_TRACE_DISABLED": "true",
    # The handler's own logs would bury the report; metrics are read from its EMF output.
    "POWERTOOLS_LOG_LEVEL": "CRITICAL",
}
METRICS = {
    runner_stats_contract.METRIC_ACCEPTED_MESSAGES: "accepted",
    runner_stats_contract.METRIC_DUPLICATE_MESSAGES: "duplicates",
    runner_stats_contract.METRIC_STALE_MESSAGES: "stale",
    runner_stats_contract.METRIC_REJECTED_RECORDS: "rejected",
    runner_stats_contract.METRIC_COMMIT_RETRIES: "retried",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assembly", default="cdk.out/dev", help="cloud assembly written by `cdk synth -o`")
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--log-events", type=int, default=50_000, help="cell events of the event-log section")
    args = parser.parse_args(argv)
    # The progress lines go to stderr as they happen: the report's lines too, so a log of both stays in order.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    os.environ.update(AWS_ENV)
    # A crashed invocation flushes no metrics; Powertools warns about that, and it is expected here.
    warnings.filterwarnings("ignore", message="No application metrics to publish")

    from devtools.aws import call_audit
    from devtools.aws.moto_patches import embedded_aws

    templates = load_assembly(args.assembly)
    template = next(t for name, t in templates.items() if name.endswith("RunnerStats"))
    # The embedded stream stamps each record's arrival with the clock, and the handler rejects a
    # timestamp more than a day before its arrival: the workload is replayed as if sent just now.
    workload = generate(
        seed=args.seed,
        users=args.users,
        runs_per_user=args.runs,
        messages_per_run=args.messages,
        malformed=12,
        base_epoch_ms=int(time.time() * 1000) - REPLAY_LEAD_MS,
    )
    # Every call a function makes is checked against its synthesized role, as AWS would check it.
    # Each section says what it does when it starts, and its time when it ends (devtools/demo_progress.py).
    with call_audit.auditing(templates) as audit:
        with section(f"runner stats: {len(workload.deliveries):,} device messages through Kinesis, a crash and a throttle"), embedded_aws():
            runner_stats = run_demo(template, workload)
        from devtools.event_log_demo import run_event_log_demo  # after AWS_ENV: Powertools reads it at import

        log_template = next(t for name, t in templates.items() if name.endswith("EventLog"))
        with section(f"event log: {args.log_events:,} cell events, snapshots built through duplicates, delays and crashes"):
            event_log = run_event_log_demo(log_template, events=args.log_events, seed=args.seed)
        from devtools.taxi_demo import run_taxi_demo

        saga_template = next(t for name, t in templates.items() if name.endswith("TaxiEtl"))
        with section("taxi saga: 2,000 real rows through the API and the state machine"):
            saga = run_taxi_demo(saga_template, seed=args.seed)
    calls = sum(sum(counts.values()) for counts in audit.operations.values())
    print(f"\nembedded IAM: {calls:,} calls by {len(audit.operations)} functions checked against their roles, {len(audit.denials)} denied")
    for denial in dict.fromkeys(audit.denials):
        print(f"  DENIED {denial.describe()}")
    results = {"runner stats": runner_stats, "event log": event_log, "taxi saga": saga, "IAM": 1 if audit.denials else 0}
    print("\n" + ", ".join(f"{name}: {'OK' if status == 0 else 'MISMATCH'}" for name, status in results.items()))
    return max(results.values())


def run_demo(template: dict[str, Any], workload: Any, *, crash_after_write: int = 40, throttled_write: int = 75) -> int:
    import boto3

    cloud = EmbeddedCloud(template).create(dynamodb=boto3.client("dynamodb"), sqs=boto3.client("sqs"), kinesis=boto3.client("kinesis"))
    # As in Lambda, the function's environment exists before its module is imported
    # (Powertools reads its settings when Logger and Metrics are created).
    os.environ.update(cloud.function_environment(runner_stats_contract.HANDLER))
    os.environ.update(AWS_ENV)
    from runtime.runner_stats import handler as handler_module
    from runtime.runner_stats import wiring
    from runtime.runner_stats.settings import RunnerStatsSettings
    from runtime.shared.aws import Clients
    from runtime.shared.observability import instrumented

    stream = next(iter(resources_of_type(template, "AWS::Kinesis::Stream")))
    kinesis = boto3.client("kinesis")
    for start in range(0, len(workload.deliveries), 500):
        chunk = workload.deliveries[start : start + 500]
        kinesis.put_records(StreamName=stream, Records=[{"Data": d.data, "PartitionKey": d.partition_key} for d in chunk])

    # Faults: the process dies right after the 40th write landed, and the 75th write is throttled.
    dynamodb = boto3.client("dynamodb")
    crash = WriteBoundaryCrasher(at=crash_after_write, when="after").attach(dynamodb)
    throttle = ThrottledWrites(frozenset({throttled_write})).attach(dynamodb)
    # The deployed entry point's work (handle) with the same observability wrapper, on that client.
    settings = RunnerStatsSettings.from_env(cloud.function_environment(runner_stats_contract.HANDLER))
    deps = wiring.build(settings, Clients(dynamodb=dynamodb))

    def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        return handler_module.handle(event, context, deps)

    entry_point = instrumented(handle)

    mapping = cloud.event_source_mapping(runner_stats_contract.HANDLER)
    queue_url = cloud.names[f"{mapping['DestinationConfig']['OnFailure']['Destination']['Fn::GetAtt'][0]}.url"]
    sqs = boto3.client("sqs")
    counts: Counter[str] = Counter()

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        captured = io.StringIO()
        try:
            with contextlib.redirect_stdout(captured):
                return entry_point(event, as_lambda_context(FakeLambdaContext()))
        finally:
            counts.update(read_emf_counts(captured.getvalue()))

    def on_failure(records: list[ShardRecord]) -> None:
        sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps({"records": [r.sequence_number for r in records]}))

    esm = EventSourceMapping(
        invoke,
        batch_size=int(mapping["BatchSize"]),
        retry_attempts=int(mapping["MaximumRetryAttempts"]),
        bisect_on_error=bool(mapping["BisectBatchOnFunctionError"]),
        on_failure=on_failure,
    )
    with progress("runner stats: delivering", 0, "records (redeliveries included)") as delivered:

        def counted(event: dict[str, Any]) -> dict[str, Any]:
            delivered.update(len(event["Records"]))
            return invoke(event)

        esm.invoke = counted
        esm.drain(KinesisShard(kinesis, stream))

    view = capture(dynamodb, settings.tables)
    return report(workload, view, counts, esm, (crash_after_write, crash.crashed), (throttled_write, throttle.writes >= throttled_write))


def read_emf_counts(output: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in output.splitlines():
        with contextlib.suppress(ValueError):
            document = json.loads(line)
            if isinstance(document, dict) and "_aws" in document:
                for metric, name in METRICS.items():
                    value = document.get(metric, 0)
                    # EMF holds a list when a metric was added more than once in one flush.
                    counts[name] += int(sum(value) if isinstance(value, list) else value)
    return counts


def report(
    workload: Any, view: Any, counts: Counter[str], esm: EventSourceMapping, crash: tuple[int, bool], throttle: tuple[int, bool]
) -> int:
    (crash_at, crashed), (throttle_at, throttled) = crash, throttle
    expected = reference.clean_pass(workload.unique)
    tendencies = reference.clean_tendencies(expected)
    mismatches: list[str] = []
    for key, totals in expected.items():
        run = view.runs.get(key)
        if run is None:
            mismatches.append(f"run {key} missing")
            continue
        if run.total_meters != Decimal(totals.total_meters) or run.total_seconds != Decimal(str(totals.total_seconds)):
            mismatches.append(
                f"run {key}: stored {run.total_meters} m / {run.total_seconds} s, "
                f"expected {totals.total_meters} m / {totals.total_seconds} s"
            )
        if len(run.archived) != totals.message_count:
            mismatches.append(f"run {key}: {len(run.archived)} archived messages, expected {totals.message_count}")
    for user, tendency in tendencies.items():
        if view.tendencies.get(user) != (tendency.current_run_id, tendency.current, tendency.previous_run_id, tendency.previous):
            mismatches.append(f"user {user}: tendency {view.tendencies.get(user)} != {tendency}")
    malformed = sum(1 for d in workload.deliveries if d.kind == "malformed")
    if len(view.rejects) != malformed:
        mismatches.append(f"{len(view.rejects)} rejects stored, expected {malformed}")
    # A crashed invocation never flushes its metrics (as in Lambda), so the metric may undercount
    # what that invocation committed; it must never count a message twice.
    if counts["accepted"] > len(workload.unique):
        mismatches.append(f"accepted metric {counts['accepted']} exceeds the {len(workload.unique)} unique messages")
    if esm.stats.sent_to_on_failure:
        mismatches.append(f"{esm.stats.sent_to_on_failure} records went to the on-failure queue")
    # The demo claims a crash and a throttle: a run in which either did not happen proves less.
    if not (crashed and throttled):
        mismatches.append(f"the injected faults did not all happen (crash: {crashed}, throttle: {throttled})")

    kinds = Counter(d.kind for d in workload.deliveries)
    lines = [
        "onceflow demo: runner stats on an embedded AWS (moto), tables from the synthesized dev template",
        f"  messages in           {len(workload.deliveries):>7}  (unique {len(workload.unique)}, "
        f"re-sent {kinds['resend']}, late {kinds['late']}, malformed {kinds['malformed']})",
        f"  accepted              {counts['accepted']:>7}  (metric; the crashed invocation published none)",
        f"  duplicates            {counts['duplicates']:>7}  (re-sends plus records redelivered after faults)",
        f"  stale (gap closed)    {counts['stale']:>7}",
        f"  rejected              {counts['rejected']:>7}",
        f"  commit retries        {counts['retried']:>7}",
        f"  invocations           {esm.stats.invocations:>7}  "
        f"(function errors {esm.stats.function_errors}, partial failures {esm.stats.partial_failures})",
        f"  injected faults       crash after write {crash_at}: {'yes' if crashed else 'no'}, "
        f"throttled write {throttle_at}: {'yes' if throttled else 'no'}",
        f"  runs checked          {len(expected):>7}  against an independent in-memory recomputation",
        f"  total meters          {sum(r.total_meters for r in view.runs.values()):>7}  "
        f"(expected {sum(t.total_meters for t in expected.values())})",
    ]
    print("\n".join(lines))
    if mismatches:
        print("MISMATCH")
        for problem in mismatches[:20]:
            print(f"  - {problem}")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
