"""benchmarks/runner_capacity.py's sizing model: records per shard with CPU counted, $ per million
records, and the choice of the cheapest cell. Pure arithmetic, checked by hand."""

from __future__ import annotations

import pytest

from benchmarks.runner_capacity import CPU_HEADROOM, GB_SECOND, BatchProfile, choose, vcpu_share
from benchmarks.taxi_cost import PRICES


def batch(cpu_s: float = 0.5, depth: float = 30) -> BatchProfile:
    return BatchProfile("typical", records=1000, calls=900, depth=depth, cpu_s=cpu_s, wru=1000, rru=900)


def test_the_vcpu_share_grows_with_memory_up_to_one_core() -> None:
    # Given Lambda's one vCPU at 1,769 MB
    # When the share is asked below, at and above it
    # Then it is proportional below and capped at one core (the handler's CPU runs under one lock)
    assert vcpu_share(1769) == 1.0 and vcpu_share(3008) == 1.0
    assert vcpu_share(512) == pytest.approx(512 / 1769)


def test_records_per_shard_are_parallelization_times_records_over_cpu_by_share_plus_the_chain() -> None:
    # Given a batch of 1,000 records with 0.5 s of CPU and 30 serial calls
    profile = batch()
    # When the capacity per shard is taken at 512 MB with P = 2
    # Then it is 2 x 1000 / (0.5 / (512/1769) + 30 x 5 ms)
    assert profile.per_shard(512, 2) == pytest.approx(2 * 1000 / (0.5 / (512 / 1769) + 0.150))


def test_dollars_per_million_are_lambda_gb_seconds_and_requests_plus_dynamodb() -> None:
    # Given the same batch at 1,024 MB
    profile = batch()
    seconds = 0.5 / (1024 / 1769) + 0.150
    lambda_cost = 1000 * (seconds * 1.0 * GB_SECOND + PRICES["lambda_request"])
    dynamodb = 1000 * (1000 * PRICES["wru"] + 900 * PRICES["rru"])
    # When its $ per million records are taken
    # Then they are 1,000 batches of Lambda plus the batches' request units
    assert profile.dollars_per_million(1024) == pytest.approx(lambda_cost + dynamodb)


def test_the_chosen_cell_meets_the_target_with_headroom_at_the_fewest_batches_among_equal_cents() -> None:
    # Given a batch whose CPU, times the headroom, still lets 1,769 MB reach 2,000 records/s at P = 2
    profile = batch(cpu_s=0.4)
    # When the cheapest cell for 2,000 records/s is chosen
    memory, parallelization = choose(profile, 2000)
    # Then it meets the target with the headroom, and no cell of equal cost needs fewer concurrent batches
    assert profile.with_cpu_headroom().per_shard(memory, parallelization) >= 2000
    assert CPU_HEADROOM > 1
    assert parallelization == min(
        p
        for m in (256, 512, 1024, 1769, 2048, 3008)
        for p in (1, 2, 5, 10)
        if profile.with_cpu_headroom().per_shard(m, p) >= 2000
        and round(profile.dollars_per_million(m), 2) == round(profile.dollars_per_million(memory), 2)
    )


def test_a_target_no_cell_reaches_is_an_error() -> None:
    # Given a batch far too slow for the grid
    # When a cell is chosen for 100,000 records/s
    # Then it says so rather than picking one
    with pytest.raises(RuntimeError, match="no cell"):
        choose(batch(cpu_s=5.0, depth=1000), 100_000)
