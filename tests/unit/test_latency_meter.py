"""The latency model the throughput benchmark stands on: every botocore call waits its delay in
its own thread, concurrent calls overlap, and the meter counts calls and the peak in flight."""

from __future__ import annotations

import threading
import time

import boto3
from botocore.stub import Stubber

from devtools.aws.latency import Latency, measure


def stubbed_sqs(responses: int) -> tuple[object, Stubber]:
    client = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    for _ in range(responses):
        stubber.add_response("list_queues", {"QueueUrls": []})
    stubber.activate()
    return client, stubber


def test_serial_calls_wait_one_after_another_and_count_as_depth() -> None:
    # Given a client whose answers are instant, and four calls made one after another
    client, _ = stubbed_sqs(8)

    def work() -> None:
        for _ in range(4):
            client.list_queues()  # type: ignore[attr-defined]

    # When they are measured at 0 and at 40 ms per call
    run = measure(work, lambda: None, delay_ms=40)
    # Then all four were counted, one at a time, and the serial depth is four calls
    assert (run.calls, run.calls_by_operation, run.peak_in_flight) == (4, {"ListQueues": 4}, 1)
    assert 3.5 <= run.serial_depth <= 5.5
    assert run.ceiling_per_second(work=100, call_ms=5) < 100 / (3.5 * 0.005)


def test_concurrent_calls_overlap_their_delays() -> None:
    # Given three threads that each make one call at the same moment
    client, _ = stubbed_sqs(3)
    barrier = threading.Barrier(3)
    meter = Latency(delay_ms=200)

    def one_call() -> None:
        barrier.wait()
        client.list_queues()  # type: ignore[attr-defined]

    # When they run under a 200 ms delay
    with meter.installed():
        started = time.perf_counter()
        threads = [threading.Thread(target=one_call) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
    # Then the three waited together: three in flight, about one delay of wall time, not three
    assert (meter.total_calls, meter.peak_in_flight) == (3, 3)
    assert 0.2 <= wall < 0.5


def test_the_patch_is_removed_afterwards() -> None:
    # Given a meter that was installed and removed
    meter = Latency(delay_ms=0)
    with meter.installed():
        pass
    client, _ = stubbed_sqs(1)
    # When a call is made afterwards
    client.list_queues()  # type: ignore[attr-defined]
    # Then the meter did not see it
    assert meter.total_calls == 0


def test_overlapping_calls_take_their_depth_between_two_larger_delays() -> None:
    # Given two threads that each make three calls one after another, at the same time
    client, _ = stubbed_sqs(6 * 4)

    def chain() -> None:
        for _ in range(3):
            client.list_queues()  # type: ignore[attr-defined]

    def work() -> None:
        threads = [threading.Thread(target=chain) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # When they are measured (calls overlapped, so also at two larger delays)
    run = measure(work, lambda: None, delay_ms=20, io_bound_delays_ms=(60, 120))
    # Then the chain is three calls long, not six, and the method says where it came from
    assert (run.calls, run.peak_in_flight) == (6, 2)
    assert run.io_bound is not None
    assert 2.5 <= run.serial_depth <= 3.8
    assert "wall at 120 ms - wall at 60 ms" in run.method
