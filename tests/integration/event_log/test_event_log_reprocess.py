"""The operator's fallback, `python -m ops.event_log_reprocess`, against the embedded cloud."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.event_log_world import EventLogWorld
from devtools.sheet_workload import sheet_edits
from ops import event_log_reprocess
from runtime.event_log.entries import EntryKind
from runtime.event_log.models import AppendRequest, CellEvent, PayloadRef
from runtime.event_log.service import payload_key

LOG = "sheet-ops"


def arguments(world: EventLogWorld, *extra: str) -> list[str]:
    return [
        "--log-id",
        LOG,
        "--log-table",
        world.worker.log_table,
        "--pending-table",
        world.worker.pending_table,
        "--bucket",
        world.worker.bucket,
        "--snapshot-queue-url",
        world.worker.options.queue_url,
        "--payload-queue-url",
        world.finalizer.queue_url,
        *extra,
    ]


def lose_side_effects(world: EventLogWorld) -> None:
    """The router ran, but its messages are gone (say, deleted from a DLQ by mistake)."""
    world.route()
    for url in (world.worker.options.queue_url, world.finalizer.queue_url):
        world.clients.sqs.purge_queue(QueueUrl=url)


def test_missing_snapshots_are_listed_by_a_dry_run_and_enqueued_once_by_a_real_run(log_world: EventLogWorld, capsys: Any) -> None:
    # Given 45 events (Snapshot entries after 20 and 40) whose side-effect messages were lost
    log_world.append_edits(LOG, sheet_edits(seed=21, count=45))
    lose_side_effects(log_world)
    # When the tool runs as a dry run
    assert event_log_reprocess.main(arguments(log_world, "--dry-run")) == 0
    out = capsys.readouterr().out
    # Then it lists both snapshots and sends nothing
    assert "missing build_snapshot at 20.5" in out and "missing build_snapshot at 40.5" in out
    assert "would enqueue 2 messages" in out
    assert log_world.depth(log_world.worker.options.queue_url) == 0
    # When it runs for real, and the workers drain the queue
    assert event_log_reprocess.main(arguments(log_world)) == 0
    assert "enqueued 2 messages" in capsys.readouterr().out
    log_world.drain()
    # Then both snapshots are built and equal the replay
    assert log_world.verify(LOG) == []
    # and a second run finds nothing missing and sends nothing
    assert event_log_reprocess.main(arguments(log_world)) == 0
    assert "enqueued 0 messages" in capsys.readouterr().out


def test_running_twice_before_the_workers_catch_up_changes_nothing(log_world: EventLogWorld, capsys: Any) -> None:
    # Given lost side effects, and the tool run twice in a row
    log_world.append_edits(LOG, sheet_edits(seed=22, count=45))
    lose_side_effects(log_world)
    for _ in range(2):
        assert event_log_reprocess.main(arguments(log_world)) == 0
    capsys.readouterr()
    # When the workers drain the duplicates
    source = log_world.snapshot_source()
    log_world.drain([source, log_world.payload_source()])
    # Then every snapshot was built once; the repeats were recognised and dropped
    assert log_world.verify(LOG) == []
    assert source.stats.delivered == 4


def test_a_payload_still_tagged_is_finalized(log_world: EventLogWorld, capsys: Any) -> None:
    # Given a completed large payload whose finalize message was lost
    key = payload_key(LOG, "upload-req-0009")
    log_world.clients.s3.put_object(Bucket=log_world.worker.bucket, Key=key, Body=b"large", Tagging=log_world.api.options.pending_tag)
    log_world.service().append(
        AppendRequest(LOG, "upload-req-0009", 1, CellEvent(EntryKind.LARGE_PAYLOAD, "A1", payload=PayloadRef(key, 5)))
    )
    lose_side_effects(log_world)
    # When the tool runs and the finalizer drains its queue
    assert event_log_reprocess.main(arguments(log_world)) == 0
    assert f"missing finalize_payload at 1 ({key})" in capsys.readouterr().out
    log_world.drain()
    # Then the object is untagged and the log verifies
    assert log_world.clients.s3.get_object_tagging(Bucket=log_world.worker.bucket, Key=key)["TagSet"] == []
    assert log_world.verify(LOG) == []


def test_a_payload_object_that_is_gone_is_reported_as_lost(log_world: EventLogWorld, capsys: Any) -> None:
    # Given a LargePayload entry whose object no longer exists
    key = payload_key(LOG, "upload-req-0010")
    log_world.service().append(
        AppendRequest(LOG, "upload-req-0010", 1, CellEvent(EntryKind.LARGE_PAYLOAD, "A1", payload=PayloadRef(key, 5)))
    )
    lose_side_effects(log_world)
    # When the tool runs
    status = event_log_reprocess.main(arguments(log_world))
    # Then it says the payload is lost and exits non-zero
    assert status == 1
    assert f"LOST: payload object {key} is gone" in capsys.readouterr().out


def test_a_scan_from_a_date_starts_at_the_first_event_of_that_date(log_world: EventLogWorld, capsys: Any) -> None:
    # Given 20 events on one day and 25 on the next, with every side effect lost
    edits = sheet_edits(seed=23, count=45)
    log_world.append_edits(LOG, edits[:20])
    log_world.clock.advance(86_400)
    log_world.append_edits(LOG, edits[20:])
    lose_side_effects(log_world)
    from datetime import UTC, datetime

    second_day = datetime.fromtimestamp(log_world.clock(), UTC).strftime("%Y-%m-%d")
    # When the tool scans from the second day
    assert event_log_reprocess.main(arguments(log_world, "--from-date", second_day, "--dry-run")) == 0
    out = capsys.readouterr().out
    # Then it starts at event 21 (the Snapshot entry closing the first day's segment included)
    assert "from position 21" in out
    assert "scanned 27 entries" in out  # 20.5, 21..45 and 40.5


@pytest.mark.parametrize(
    ("argv", "message"), [(["--log-id", "bad id!"], "--log-id must be"), (["--log-id", LOG], "give --stack, or every one of")]
)
def test_bad_arguments_are_refused_with_a_message(argv: list[str], message: str, capsys: Any) -> None:
    # Given a bad log id, or no way to find the resources
    # When the tool starts
    with pytest.raises(SystemExit) as stopped:
        event_log_reprocess.main(argv)
    # Then it stops with usage error 2 and says what is wrong
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
