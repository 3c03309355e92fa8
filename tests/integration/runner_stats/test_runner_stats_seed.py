"""The seed's two scenarios, with its numbers."""

from __future__ import annotations

import copy
from decimal import Decimal

import pytest

from devtools.aws.clients import new_client
from devtools.aws.faults import SimulatedCrash, WriteBoundaryCrasher
from devtools.runner_world import RunnerStatsWorld
from runtime.runner_stats.models import RunKey
from runtime.shared.dynamo import to_attributes
from tests.events.loader import load_event

RUN = RunKey(3000, 3091019)


def given_seed_state(world: RunnerStatsWorld, previous_label: str) -> None:
    state = load_event("runner_stats/seed_state.json")
    tendency = copy.deepcopy(state["tendency_item"])
    tendency["previous_run"]["label"] = previous_label
    world.client.put_item(TableName=world.settings.tables.run_stats, Item=to_attributes(state["run_item"]))
    world.client.put_item(TableName=world.settings.tables.tendency, Item=to_attributes(tendency))


def then_run_has_seed_figures(world: RunnerStatsWorld, previous_label: str) -> None:
    view = world.view()
    run = view.runs[(RUN.user_id, RUN.run_id)]
    assert run.total_meters == Decimal(270)
    assert run.total_seconds == Decimal(600)  # 10 minutes
    assert [m.sequence_id for m in run.archived] == [5]  # one archived message
    assert run.high_water == 5 and run.gaps == ()
    assert view.tendencies[RUN.user_id] == (RUN.run_id, "good job", 3091018, previous_label)


def test_duplicate_with_a_different_timestamp_is_counted_once(world: RunnerStatsWorld) -> None:
    # Given the seed's run (sequence 4 applied, 150 m, started 10 minutes before message 5)
    given_seed_state(world, previous_label="fine")
    # When message 5 (120 m) arrives, and then again with another timestamp
    first = world.invoke(load_event("runner_stats/seed_message_5.json"))
    second = world.invoke(load_event("runner_stats/seed_message_5_resent.json"))
    # Then both batches succeed and the copy changes nothing
    assert first == {"batchItemFailures": []} and second == {"batchItemFailures": []}
    then_run_has_seed_figures(world, previous_label="fine")


@pytest.mark.parametrize(
    "when",
    [
        "before",  # just before the context (the run item) is written
        "after",  # the context is written, the process dies before the tendency push
    ],
)
def test_crash_at_the_context_write_then_retry(world: RunnerStatsWorld, when: str) -> None:
    # Given the seed's run, whose user's previous run ended "well done"
    given_seed_state(world, previous_label="well done")
    event = load_event("runner_stats/seed_message_5.json")
    # When the process dies at its first write, the run item (the context)
    crashing_client = new_client()
    crasher = WriteBoundaryCrasher(at=1, when=when).attach(crashing_client)
    with pytest.raises(SimulatedCrash):
        world.invoke(event, crashing_client)
    assert crasher.operations == [f"PutItem:{world.settings.tables.run_stats}"]
    expected_meters = Decimal(150) if when == "before" else Decimal(270)
    assert world.view().runs[(RUN.user_id, RUN.run_id)].total_meters == expected_meters
    # When Lambda retries the same record
    assert world.invoke(event) == {"batchItemFailures": []}
    # Then the figures are those of one clean pass
    then_run_has_seed_figures(world, previous_label="well done")
