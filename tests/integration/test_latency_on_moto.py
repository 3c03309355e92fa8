"""The latency meter on the embedded cloud: its botocore event handlers see every call a client makes
on moto, delay it, and split the CPU between the calls and moto answering them."""

from __future__ import annotations

import time

from devtools.aws.clients import new_client
from devtools.aws.latency import Latency
from devtools.aws.moto_patches import embedded_aws


def test_calls_on_moto_are_counted_delayed_and_their_cpu_split_between_botocore_and_moto() -> None:
    # Given the embedded cloud with a queue, and a client built inside it after the meter's module was imported
    with embedded_aws():
        sqs = new_client("sqs")
        queue_url = sqs.create_queue(QueueName="latency")["QueueUrl"]
        meter = Latency(delay_ms=50)
        # When three messages are sent one after another under a 50 ms delay
        with meter.installed():
            started = time.perf_counter()
            for number in range(3):
                sqs.send_message(QueueUrl=queue_url, MessageBody=f"message {number}")
            wall = time.perf_counter() - started
        # Then each call was counted and waited its delay in turn
        assert dict(meter.calls) == {"SendMessage": 3} and meter.peak_in_flight == 1
        assert wall >= 0.15
        # and moto's CPU answering them is part of, and less than, the calls' own CPU (botocore's client side too)
        assert 0 < meter.emulator_cpu_s < meter.call_cpu_s
        # When a call is made after the meter was removed
        sqs.send_message(QueueUrl=queue_url, MessageBody="after")
    # Then the meter did not see it
    assert meter.total_calls == 3


def test_presigning_a_url_is_no_call_to_count_or_delay() -> None:
    # Given the embedded cloud's S3 and a meter delaying every call by 200 ms
    with embedded_aws():
        s3 = new_client("s3")
        meter = Latency(delay_ms=200)
        # When three URLs are presigned (botocore builds them through the same events as a call, but sends nothing)
        with meter.installed():
            started = time.perf_counter()
            urls = [s3.generate_presigned_url("get_object", Params={"Bucket": "bucket", "Key": f"key-{n}"}) for n in range(3)]
            wall = time.perf_counter() - started
    # Then none was counted or delayed
    assert len(urls) == 3 and meter.total_calls == 0 and meter.call_cpu_s == 0
    assert wall < 0.2
