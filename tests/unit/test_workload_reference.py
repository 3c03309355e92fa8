"""The seeded workload is realistic and deterministic; the reference models compute what they claim."""

from __future__ import annotations

import base64
import itertools
import json
from collections import Counter, defaultdict
from decimal import Decimal

import pytest

from devtools.reference import (
    RunTotals,
    clean_pass,
    clean_tendencies,
    parse_message,
    seed_pass,
    tendency_label,
)
from devtools.workload import (
    BASE_EPOCH_MS,
    Delivery,
    DeliveryKind,
    DeviceMessage,
    batches,
    generate,
    kinesis_events,
)

MINUTE = 60_000


def _delivery(message: DeviceMessage, kind: DeliveryKind = "original", arrival: int | None = None) -> Delivery:
    at = message.timestamp_utc if arrival is None else arrival
    return Delivery(at, str(message.user_id), message.to_json(), kind)


def test_default_workload_has_the_documented_size() -> None:
    # Given / When the default workload
    workload = generate()
    kinds = Counter(d.kind for d in workload.deliveries)
    # Then 200 x 3 x 60 messages, each delivered once (original or late) plus 20 % resends
    assert len(workload.unique) == 36_000
    assert kinds == {"original": 34_200, "late": 1_800, "resend": 7_200}
    assert len(workload.deliveries) == 43_200


def test_generation_is_deterministic_per_seed() -> None:
    # Given two generations with one seed and one with another
    small = {"users": 4, "runs_per_user": 2, "messages_per_run": 8, "malformed": 3}
    first, again, other = generate(seed=11, **small), generate(seed=11, **small), generate(seed=12, **small)
    # Then the same seed reproduces byte for byte, another seed differs
    assert first == again
    assert first.deliveries != other.deliveries


def test_messages_follow_the_device_protocol() -> None:
    # Given a workload
    workload = generate(seed=3, users=20, runs_per_user=3, messages_per_run=12)
    runs: dict[tuple[int, int], list[DeviceMessage]] = defaultdict(list)
    for message in workload.unique:
        runs[(message.user_id, message.run_id)].append(message)
    # Then run ids are globally unique, sequences start at 1 and step by 1 every ~30 s
    assert len({run_id for _, run_id in runs}) == len(runs) == 60
    for messages in runs.values():
        assert [m.sequence_id for m in messages] == list(range(1, 13))
        gaps = [b.timestamp_utc - a.timestamp_utc for a, b in itertools.pairwise(messages)]
        assert all(28_000 <= gap <= 32_000 for gap in gaps)
        assert all(60 <= m.distance_meters <= 130 for m in messages)
    # Then users start staggered within 30 min and rest 5-30 min between runs
    by_user: dict[int, list[list[DeviceMessage]]] = defaultdict(list)
    for (user_id, _), messages in sorted(runs.items()):
        by_user[user_id].append(messages)
    starts = {user_runs[0][0].timestamp_utc for user_runs in by_user.values()}
    assert all(BASE_EPOCH_MS <= s < BASE_EPOCH_MS + 30 * MINUTE + 2_000 for s in starts)
    assert len(starts) == 20
    for user_runs in by_user.values():
        for done, nxt in itertools.pairwise(user_runs):
            assert 5 * MINUTE <= nxt[0].timestamp_utc - done[-1].timestamp_utc <= 30 * MINUTE + 2_000


def test_deliveries_model_resends_late_and_stream_order() -> None:
    # Given a workload
    workload = generate(seed=5, users=30, runs_per_user=2, messages_per_run=20)
    by_bytes = {m.to_json(): m for m in workload.unique}
    arrivals = [d.arrival_ms for d in workload.deliveries]
    # Then deliveries are in arrival order and keyed by user
    assert arrivals == sorted(arrivals)
    firsts: Counter[bytes] = Counter()
    for delivery in workload.deliveries:
        message = by_bytes[delivery.data]
        assert delivery.partition_key == str(message.user_id)
        lag = delivery.arrival_ms - message.timestamp_utc
        if delivery.kind == "original":
            assert lag == 0
        elif delivery.kind == "late":
            assert 60_000 <= lag <= 300_000
        else:
            assert delivery.kind == "resend" and 0 <= lag <= 120_000
        firsts[delivery.data] += delivery.kind != "resend"
    # Then every message arrives exactly once as original-or-late (a late one has no original)
    assert set(firsts.values()) == {1} and len(firsts) == len(workload.unique)


def test_malformed_payloads_cycle_and_are_all_rejected() -> None:
    # Given 14 malformed deliveries (two full cycles of 7 shapes)
    workload = generate(seed=9, users=3, runs_per_user=1, messages_per_run=5, malformed=14)
    bad = [d for d in workload.deliveries if d.kind == "malformed"]
    # Then they are spread through the stream, labelled, and every one is invalid
    assert sorted(d.partition_key for d in bad) == sorted(f"malformed-{n}" for n in range(14))
    assert all(parse_message(d.data) is None for d in bad)
    good = [d.arrival_ms for d in workload.deliveries if d.kind != "malformed"]
    assert all(min(good) <= d.arrival_ms <= max(good) for d in bad)
    shapes = {d.partition_key: d.data for d in bad}
    assert not shapes["malformed-0"].startswith(b"{")
    assert isinstance(json.loads(shapes["malformed-1"]), list)
    assert "distance_meters" not in json.loads(shapes["malformed-2"])
    assert isinstance(json.loads(shapes["malformed-3"])["user_id"], str)
    assert json.loads(shapes["malformed-4"])["distance_meters"] < 0
    assert json.loads(shapes["malformed-5"])["sequence_id"] == 0
    assert isinstance(json.loads(shapes["malformed-6"])["sequence_id"], float)
    # And good payloads round-trip
    assert all(parse_message(m.to_json()) == m for m in workload.unique)


def test_batches_and_kinesis_events_keep_stream_order() -> None:
    # Given 25 deliveries
    deliveries = generate(seed=1, users=5, runs_per_user=1, messages_per_run=5, resend_rate=0).deliveries
    # When cut into batches of 10
    chunks = list(batches(deliveries, 10))
    events = list(kinesis_events(deliveries, 10))
    # Then chunks are consecutive, and events carry the same bytes with increasing sequence numbers
    assert [len(c) for c in chunks] == [10, 10, 5]
    assert [d for c in chunks for d in c] == list(deliveries)
    records = [r for e in events for r in e["Records"]]
    assert [base64.b64decode(r["kinesis"]["data"]) for r in records] == [d.data for d in deliveries]
    numbers = [int(r["kinesis"]["sequenceNumber"]) for r in records]
    assert numbers == sorted(set(numbers))
    with pytest.raises(ValueError):
        next(batches(deliveries, 0))


def test_tendency_label_boundaries() -> None:
    # Given / When / Then the thresholds are < 200 and < 5000
    assert [tendency_label(v) for v in (0, 199, 200, 4999, 5000)] == [
        "fine",
        "fine",
        "good job",
        "good job",
        "well done",
    ]
    assert tendency_label(Decimal("199.9")) == "fine"


def test_clean_pass_dedupes_and_counts_late_messages() -> None:
    # Given a run with a duplicate and an out-of-order message, and a second user's run
    m1 = DeviceMessage(3000, 10, 1, 1_000, 100)
    m2 = DeviceMessage(3000, 10, 2, 31_000, 90)
    m3 = DeviceMessage(3000, 10, 3, 61_500, 80)
    other = DeviceMessage(3001, 11, 1, 5_000, 70)
    twin = DeviceMessage(3000, 10, 2, 31_000, 999)  # same identity, later copy: ignored
    # When
    totals = clean_pass([m1, m3, m2, twin, other])
    # Then
    assert totals == {
        (3000, 10): RunTotals(3000, 10, 270, 60.5, 1_000, 61_500, 3),
        (3001, 11): RunTotals(3001, 11, 70, 0.0, 5_000, 5_000, 1),
    }


def test_clean_tendencies_orders_runs_by_start() -> None:
    # Given a user whose higher run id started first, and a single-run user
    totals = {
        (1, 20): RunTotals(1, 20, 6000, 1.0, 100, 200, 2),
        (1, 30): RunTotals(1, 30, 150, 1.0, 50, 60, 2),
        (1, 25): RunTotals(1, 25, 300, 1.0, 900, 950, 2),
        (2, 40): RunTotals(2, 40, 10, 0.0, 5, 5, 1),
    }
    # When
    tendencies = clean_tendencies(totals)
    # Then current is the latest-starting run, previous the one before
    assert tendencies[1].current_run_id == 25 and tendencies[1].current == "good job"
    assert tendencies[1].previous_run_id == 20 and tendencies[1].previous == "well done"
    assert (tendencies[2].current, tendencies[2].previous, tendencies[2].previous_run_id) == ("fine", None, None)


def test_seed_pass_loses_late_messages_and_drops_resends() -> None:
    # Given seq 2 arrives late (after seq 3), seq 1 is re-sent, and junk is mixed in
    m1 = DeviceMessage(7, 70, 1, 0, 150)
    m2 = DeviceMessage(7, 70, 2, 30_000, 100)
    m3 = DeviceMessage(7, 70, 3, 60_000, 110)
    stream = [
        _delivery(m1),
        Delivery(10_000, "junk", b"{oops", "malformed"),
        _delivery(m1, "resend", 20_000),
        _delivery(m3),
        _delivery(m2, "late", 90_000),
    ]
    # When
    outcome = seed_pass(stream)
    # Then only seq 1 and 3 were applied; seq 2's 100 m are lost
    assert outcome.runs == {(7, 70): RunTotals(7, 70, 260, 60.0, 0, 60_000, 2)}
    assert outcome.archived == {(7, 70, 1), (7, 70, 3)}
    assert outcome.lost_meters == 100
    # Then the tendency row holds the last applied label and that run's label before it
    assert outcome.tendencies == {7: ("good job", "fine")}


def test_seed_pass_on_a_workload_loses_exactly_the_late_overtaken_meters() -> None:
    # Given a workload with late messages, resends and junk
    workload = generate(seed=4, users=10, runs_per_user=2, messages_per_run=15, malformed=7)
    # When
    outcome = seed_pass(workload.deliveries)
    clean = clean_pass(workload.unique)
    # Then every message is archived except those overtaken before they arrived
    unique_ids = {(m.user_id, m.run_id, m.sequence_id) for m in workload.unique}
    missing = unique_ids - outcome.archived
    assert outcome.archived <= unique_ids and missing
    by_id = {(m.user_id, m.run_id, m.sequence_id): m for m in workload.unique}
    assert outcome.lost_meters == sum(by_id[i].distance_meters for i in missing) > 0
    assert sum(r.total_meters for r in outcome.runs.values()) + outcome.lost_meters == sum(r.total_meters for r in clean.values())
    assert set(outcome.runs) == set(clean)
