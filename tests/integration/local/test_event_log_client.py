"""onceflow.clients.event_log against the local server (`make serve`; the session fixture
`local_stack`): real HTTP on localhost, SigV4-signed, through the default transport.

Two writers racing on one log both land, at distinct positions, by rebasing; a retry after a
timeout whose request was served appends nothing more; a large payload goes through the presigned
upload; the latest snapshot is read with its paging."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from onceflow.clients.event_log import (
    AppendResult,
    EventLogClient,
    HttpClientTransport,
    HttpRequest,
    HttpResponse,
    LogNotFoundError,
    PayloadConflictError,
    main,
)
from onceflow.runtime.event_log import contract


def new_log_id() -> str:
    return f"client-{uuid.uuid4().hex[:12]}"


def session_of(local_stack: Any) -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id=local_stack.access_key_id,
        aws_secret_access_key=local_stack.secret_access_key,
        region_name=local_stack.region,
    )


def client_of(local_stack: Any, **options: Any) -> EventLogClient:
    return EventLogClient(local_stack.event_log_url, session=session_of(local_stack), **options)


def event_log_outputs(local_stack: Any) -> dict[str, str]:
    document = json.loads(Path(local_stack.outputs_file).read_text())
    (outputs,) = [outputs for stack, outputs in document.items() if stack.endswith("-EventLog")]
    return {str(key): str(value) for key, value in outputs.items()}


@dataclass
class SendThenTimeout:
    """A transport that sends the request for real, then raises a timeout instead of returning the
    answer, for the first `times` requests that `matches` selects."""

    inner: HttpClientTransport
    times: int = 1
    matches: Callable[[HttpRequest], bool] = lambda request: True
    lost: int = 0

    def __call__(self, request: HttpRequest, *, timeout: float) -> HttpResponse:
        answer = self.inner(request, timeout=timeout)
        if self.lost < self.times and self.matches(request):
            self.lost += 1
            raise TimeoutError(f"timed out (the answer {answer.status} was lost)")
        return answer


def test_two_concurrent_writers_both_land_at_distinct_positions_by_rebasing(local_stack: Any) -> None:
    # Given two writers (each its own client and connection) starting together on a new log, for
    # fewer events than a snapshot covers (so that every event stays readable after the snapshot)
    log_id = new_log_id()
    per_writer = (local_stack.snapshot_every - 1) // 2
    start = threading.Barrier(2)
    results: dict[str, list[AppendResult]] = {"left": [], "right": []}
    failures: list[BaseException] = []

    def write(name: str) -> None:
        try:
            with client_of(local_stack) as client:
                start.wait(timeout=30)
                for index in range(per_writer):
                    results[name].append(client.append(log_id, f"A{index + 1}", f"{name}-{index}"))
        except BaseException as err:  # reported below, with the thread's name
            failures.append(err)

    threads = [threading.Thread(target=write, args=(name,), name=name) for name in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    # Then every append succeeded once, at distinct positions 1..n, with no duplicate
    landed = [result for name in results for result in results[name]]
    assert sorted(result.position for result in landed) == list(range(1, 2 * per_writer + 1))
    assert not any(result.duplicate for result in landed)
    # and both started at position 1 without knowing the log, so at least one rebased
    assert sum(result.rebases for result in landed) >= 1
    # and the log holds exactly these events, each once, each writer's in its own order
    with client_of(local_stack) as reader:
        latest = reader.read_snapshot(log_id)
    assert [entry["position"] for entry in latest.entries] == list(range(1, 2 * per_writer + 1))
    by_request = {entry["request_id"]: entry for entry in latest.entries}
    assert len(by_request) == 2 * per_writer
    for name, written in results.items():
        assert [by_request[result.request_id]["value"] for result in written] == [f"{name}-{index}" for index in range(per_writer)]
        assert [result.position for result in written] == sorted(result.position for result in written)


def test_a_retry_after_a_timeout_whose_request_was_served_appends_nothing_more(local_stack: Any) -> None:
    # Given a transport that loses the answer of the first append (the API did append it)
    log_id = new_log_id()
    transport = SendThenTimeout(HttpClientTransport())
    with client_of(local_stack, transport=transport, backoff=0.01) as client:
        # When the client appends
        result = client.append(log_id, "B2", "once")
        # Then the retry with the same request was answered as the duplicate it is
        assert (transport.lost, result.retries, result.duplicate, result.position) == (1, 1, True, 1)
        # and the log holds the event once
        latest = client.read_snapshot(log_id)
    assert [(entry["position"], entry["request_id"], entry["value"]) for entry in latest.entries] == [(1, result.request_id, "once")]
    assert latest.next_position == 2


def test_a_large_payload_round_trip(local_stack: Any) -> None:
    # Given a value of 300 kB (far over the 4 KB an entry takes)
    log_id = new_log_id()
    data = os.urandom(300_000)
    # whose complete loses its first answer (it was appended)
    transport = SendThenTimeout(HttpClientTransport(), matches=lambda request: request.url.endswith("/payloads/complete"))
    with client_of(local_stack, transport=transport, backoff=0.01) as client:
        # When the client appends it through the presigned upload
        result = client.append_large(log_id, "C3", data)
        assert (result.position, result.duplicate, transport.lost) == (1, True, 1)
        # Then the log names the object once, with its size
        latest = client.read_snapshot(log_id)
        (entry,) = latest.entries
        assert (entry["kind"], entry["cell"], entry["payload_key"]) == ("LargePayload", "C3", result.payload_key)
        assert entry["payload_bytes"] == len(data)
        # and the object holds exactly the bytes
        bucket = event_log_outputs(local_stack)[contract.OUTPUT_BUCKET]
        stored = local_stack.client("s3").get_object(Bucket=bucket, Key=result.payload_key)["Body"].read()
        assert stored == data
        # and an upload URL for the same request id is refused: a payload never changes
        with pytest.raises(PayloadConflictError, match="already uploaded"):
            client.create_payload(log_id, result.request_id)


def test_reading_the_latest_snapshot_before_one_is_built(local_stack: Any) -> None:
    # Given a log of four events
    log_id = new_log_id()
    with client_of(local_stack) as client:
        written = [client.append(log_id, cell, value) for cell, value in (("A1", "1"), ("A2", "2"), ("A1", "3"))]
        client.clear(log_id, "A2")
        # When the client reads its latest snapshot
        latest = client.read_snapshot(log_id)
        # Then there is no snapshot (fewer events than SNAPSHOT_EVERY), and every entry comes in order
        assert latest.snapshot is None
        assert [entry["position"] for entry in latest.entries] == [1, 2, 3, 4]
        assert [entry.get("value") for entry in latest.entries] == ["1", "2", "3", None]
        assert [entry["request_id"] for entry in latest.entries][:3] == [result.request_id for result in written]
        assert latest.next_position == 5
        # and a log without entries is not found
        with pytest.raises(LogNotFoundError):
            client.read_snapshot(new_log_id())


def test_the_cli_appends_and_reads_through_the_outputs_file(
    local_stack: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the local stack's credentials in the environment and its outputs file
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", local_stack.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", local_stack.secret_access_key)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    log_id = new_log_id()
    target = ["--env", "local", "--outputs-file", str(local_stack.outputs_file), "--region", local_stack.region]
    # When the CLI appends and reads
    assert main([*target, "append", log_id, "D4", "via-cli"]) == 0
    appended = json.loads(capsys.readouterr().out)
    assert main([*target, "snapshot", log_id]) == 0
    latest = json.loads(capsys.readouterr().out)
    # Then it printed the append and the entry it wrote
    assert (appended["position"], appended["duplicate"]) == (1, False)
    assert [(entry["request_id"], entry["value"]) for entry in latest["entries"]] == [(appended["request_id"], "via-cli")]


def test_reading_a_built_snapshot_and_its_cells(local_stack: Any) -> None:
    # Given a log with two events more than a snapshot covers: sets, overwrites and clears
    log_id = new_log_id()
    every = local_stack.snapshot_every
    events: list[tuple[str, str | None]] = [(f"{'ABC'[index % 3]}{index % 4 + 1}", f"v{index}") for index in range(every + 2)]
    events[3] = (events[0][0], None)  # a clear of a cell set before
    with client_of(local_stack) as client:
        for cell, value in events:
            if value is None:
                client.clear(log_id, cell)
            else:
                client.append(log_id, cell, value)
        # When the snapshot of the first `every` events is built (by the local event sources)
        deadline = time.monotonic() + 60
        latest = client.read_snapshot(log_id)
        while latest.snapshot is None and time.monotonic() < deadline:
            time.sleep(0.2)
            latest = client.read_snapshot(log_id)
        # Then the reader gets snapshot 1 at cut `every`, and the two events after it
        assert latest.snapshot is not None, "snapshot 1 was not built within 60 s"
        assert (latest.snapshot.number, latest.snapshot.cut) == (1, every)
        assert [entry["position"] for entry in latest.entries] == [every + 1, every + 2]
        assert latest.next_position == every + 3
        # and its cells (downloaded from the presigned URLs, checked against the digest) are a replay of the first events
        replay: dict[str, str] = {}
        for cell, value in events[:every]:
            if value is None:
                replay.pop(cell, None)
            else:
                replay[cell] = value
        cells = client.snapshot_cells(latest.snapshot)
        assert {cell["cell"]: cell["value"] for cell in cells} == replay
        assert len(cells) == latest.snapshot.cells
