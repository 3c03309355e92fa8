"""Re-enqueue the event log's missing side effects, from a date or a position onwards.

The manual fallback when side effects were lost (a stream record past its age, a message
deleted from a DLQ, a worker that died with no message left):
- a Snapshot entry with no root and no live build  -> a build_snapshot message
- a LargePayload entry whose object is still tagged -> a finalize_payload message
Cell events have no side effect. Every message carries the router's deterministic request id,
and the workers drop repeats, so running the tool twice (or while the pipeline is catching up)
changes nothing but the number of duplicates the workers skip.

    python -m ops.event_log_reprocess --stack Onceflow-prod-EventLog --log-id sheet-1 --from-date 2026-11-01 --dry-run
    python -m ops.event_log_reprocess --env prod --log-id sheet-1 --from-date 2026-11-01 --dry-run   # cdk-outputs-prod.json
    python -m ops.event_log_reprocess --log-table T --pending-table P --bucket B \\
        --snapshot-queue-url URL --payload-queue-url URL --log-id sheet-1 --from-position 1000
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from ops.cli import AwsSession, StackKind, add_aws_options, add_target, resolve_target, usage_errors
from ops.event_log_store import LogRepairStore
from ops.progress import Bar, progress_bar
from runtime.event_log import contract as event_log_contract
from runtime.event_log.entries import LOG_ID, EntryKind
from runtime.event_log.errors import ObjectMissing
from runtime.event_log.messages import SideEffect, SideEffectMessage, side_effect_request_id
from runtime.event_log.objects import S3Objects, SqsQueue
from runtime.event_log.store import DynamoPendingStore

EVENT_LOG = StackKind(
    "EventLog",
    {
        event_log_contract.OUTPUT_LOG_TABLE: "log_table",
        event_log_contract.OUTPUT_PENDING_TABLE: "pending_table",
        event_log_contract.OUTPUT_BUCKET: "bucket",
        event_log_contract.OUTPUT_SNAPSHOT_QUEUE_URL: "snapshot_queue_url",
        event_log_contract.OUTPUT_PAYLOAD_QUEUE_URL: "payload_queue_url",
    },
)


@dataclass(frozen=True)
class Resources:
    log_table: str
    pending_table: str
    bucket: str
    snapshot_queue_url: str
    payload_queue_url: str


@dataclass
class Report:
    scanned: int = 0
    missing: list[SideEffectMessage] = field(default_factory=list)
    in_progress: list[str] = field(default_factory=list)
    lost_payloads: list[str] = field(default_factory=list)
    enqueued: int = 0


def first_position_at(log: LogRepairStore, log_id: str, since: str) -> int:
    """The first event appended at or after `since` (ISO-8601): events are in time order, so a
    binary search over positions needs log2(n) reads instead of a scan."""
    low, high = 1, log.read_head(log_id).next_position  # answer in [low, high]; high = past the end
    while low < high:
        middle = (low + high) // 2
        if (log.created_at(log_id, middle) or "") >= since:
            high = middle
        else:
            low = middle + 1
    return low


class Reprocessor:
    def __init__(self, resources: Resources, *, dynamodb: Any = None, s3: Any = None, sqs: Any = None, lease_seconds: float = 1200) -> None:
        aws = AwsSession()
        self.resources = resources
        self.log = LogRepairStore(resources.log_table, client=dynamodb or aws.client("dynamodb"))
        self.pending = DynamoPendingStore(resources.pending_table, client=self.log.client)
        self.objects = S3Objects(resources.bucket, client=s3 or aws.client("s3"))
        self.queue = SqsQueue(client=sqs or aws.client("sqs"))
        self.lease_seconds = lease_seconds

    def scan(self, log_id: str, from_position: int, progress: Bar | None = None) -> Report:
        report = Report()
        for item in self._entries(log_id, from_position):
            report.scanned += 1
            if progress:
                progress.update()
            kind = item["kind"]
            seq = Decimal(item[event_log_contract.KEY_SEQ])
            if kind == EntryKind.SNAPSHOT.value and not item.get("root"):
                holder = self.pending.get(log_id, seq)
                if holder is not None and holder.active and holder.modified >= time.time() - self.lease_seconds:
                    report.in_progress.append(f"snapshot {item['snapshot']} (held by {holder.active})")
                    continue
                effect = SideEffect.BUILD_SNAPSHOT
                report.missing.append(SideEffectMessage(effect, log_id, seq, side_effect_request_id(effect, log_id, seq)))
            elif kind == EntryKind.LARGE_PAYLOAD.value:
                key = str(item["payload_key"])
                try:
                    tags = self.objects.tags(key)
                except ObjectMissing:
                    report.lost_payloads.append(key)
                    continue
                if tags:
                    effect = SideEffect.FINALIZE_PAYLOAD
                    report.missing.append(SideEffectMessage(effect, log_id, seq, side_effect_request_id(effect, log_id, seq), key))
        return report

    def _entries(self, log_id: str, from_position: int) -> Iterator[dict[str, Any]]:
        # Position p starts the scan; the Snapshot entry at p - 0.5 closes the segment before it.
        return self.log.scan_log(log_id, Decimal(from_position) - 1)

    def enqueue(self, report: Report) -> None:
        for effect, url in (
            (SideEffect.BUILD_SNAPSHOT, self.resources.snapshot_queue_url),
            (SideEffect.FINALIZE_PAYLOAD, self.resources.payload_queue_url),
        ):
            messages = [message for message in report.missing if message.effect == effect]
            failed = self.queue.send(url, messages) if messages else []
            if failed:
                raise SystemExit(f"SQS refused {len(failed)} messages; nothing is lost, run the tool again")
            report.enqueued += len(messages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Re-enqueue the event log's missing side effects (snapshots, payload finalization).")
    parser.add_argument("--log-id", required=True)
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-date", help="ISO date or time (UTC), e.g. 2026-11-01 or 2026-11-01T12:00:00")
    start.add_argument("--from-position", type=int, default=1, help="first event position to scan (default 1)")
    parser.add_argument("--dry-run", action="store_true", help="list what is missing; enqueue nothing")
    add_target(parser, EVENT_LOG)
    add_aws_options(parser)
    parser.add_argument("--lease-seconds", type=float, default=1200, help="the deployed lease; younger claims count as in progress")
    parser.add_argument("--progress", action="store_true", help="draw the progress bar even when stderr is not a terminal")
    args = parser.parse_args(argv)
    if not LOG_ID.fullmatch(args.log_id):
        parser.error("--log-id must be 1-64 letters, digits, '_' or '-'")
    aws = AwsSession.from_args(args)
    with usage_errors(parser):
        resources = Resources(**resolve_target(args, EVENT_LOG, None, aws))
        tool = Reprocessor(
            resources, dynamodb=aws.client("dynamodb"), s3=aws.client("s3"), sqs=aws.client("sqs"), lease_seconds=args.lease_seconds
        )
        head = tool.log.read_head(args.log_id)
        if not head.exists:
            print(f"log {args.log_id} does not exist", file=sys.stderr)
            return 2
        from_position = args.from_position
        if args.from_date:
            since = datetime.fromisoformat(args.from_date).replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%S")
            from_position = first_position_at(tool.log, args.log_id, since)
        progress = progress_bar(max(head.next_position - from_position, 0) + head.snapshots, f"scanning {args.log_id}", force=args.progress)
        report = tool.scan(args.log_id, from_position, progress)
        progress.close()

    print(f"log {args.log_id}: scanned {report.scanned} entries from position {from_position}")
    for message in report.missing:
        print(f"  missing {message.effect.value} at {message.seq}" + (f" ({message.payload_key})" if message.payload_key else ""))
    for held in report.in_progress:
        print(f"  in progress: {held}")
    for key in report.lost_payloads:
        print(f"  LOST: payload object {key} is gone (expired or deleted); the entry cannot be finalized")
    if args.dry_run:
        print(f"dry run: would enqueue {len(report.missing)} messages")
    else:
        tool.enqueue(report)
        print(f"enqueued {report.enqueued} messages")
    return 1 if report.lost_payloads else 0


if __name__ == "__main__":
    sys.exit(main())
