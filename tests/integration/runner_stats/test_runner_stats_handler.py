"""The deployed entry point, runtime.runner_stats.handler.handler, end to end on the embedded cloud.

Settings come from the synthesized function's environment (as Lambda would set it), the tables
from the synthesized template; the handler builds its own store and client like at a cold start.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from devtools.aws.esm import lambda_event, records_from_payloads
from devtools.aws.lambda_context import FakeLambdaContext
from devtools.aws.template_resources import Template
from devtools.runner_world import RunnerStatsWorld
from runtime.runner_stats import handler as handler_module
from runtime.runner_stats.models import RunKey
from runtime.runner_stats.store import RUN_STATS_PROJECTION
from runtime.shared import observability
from runtime.shared.dynamo import from_attributes, to_attributes
from tests.events.loader import load_event

RUN = RunKey(3000, 3091019)
BASE_TS = 1_509_547_364_734


def clear_cold_start_caches() -> None:
    """Forget the settings and the pipeline built at a 'cold start' (another test's environment)."""
    for cached in (getattr(handler_module, "settings", None), handler_module.deps):
        if cached is not None:
            cached.cache_clear()


@pytest.fixture
def deployed(moto_aws: None, runner_stats_template: Template, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunnerStatsWorld]:
    """Tables created, the function's environment set, and no service or client left from earlier tests."""
    world = RunnerStatsWorld.create(runner_stats_template)
    environment = world.environment()
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    # Powertools reads its namespace and service when the module is first imported (in a test
    # session, with the test environment); in Lambda the function's variables are set before that.
    monkeypatch.setattr(observability.metrics, "namespace", environment["POWERTOOLS_METRICS_NAMESPACE"])
    monkeypatch.setattr(observability.metrics, "service", environment["POWERTOOLS_SERVICE_NAME"])
    clear_cold_start_caches()
    yield world
    clear_cold_start_caches()


def event_of(*payloads: dict[str, Any] | bytes, first_sequence: int = 1) -> dict[str, Any]:
    encoded = [(str(p["user_id"]), json.dumps(p).encode()) if isinstance(p, dict) else ("0", p) for p in payloads]
    return lambda_event(records_from_payloads(encoded, first_sequence))


def device(seq: int, meters: int, key: RunKey = RUN) -> dict[str, Any]:
    return {
        "user_id": key.user_id,
        "run_id": key.run_id,
        "sequence_id": seq,
        "timestamp_utc": BASE_TS + seq * 60_000,
        "distance_meters": meters,
    }


def emf_metrics(stdout: str) -> dict[str, float]:
    """The metric values of the one EMF document the invocation printed (one data point each)."""
    documents = [json.loads(line) for line in stdout.splitlines() if line.startswith("{") and '"_aws"' in line]
    assert len(documents) == 1, stdout
    document = documents[0]
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "onceflow"
    assert directive["Dimensions"] == [["service"]] and document["service"] == "runner-stats"
    values: dict[str, float] = {}
    for metric in directive["Metrics"]:
        assert metric["Unit"] == "Count"
        points = document[metric["Name"]]
        points = points if isinstance(points, list) else [points]
        assert len(points) == 1, f"{metric['Name']} has {points}"
        values[metric["Name"]] = points[0]
    return values


def invoke(event: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], dict[str, float]]:
    capsys.readouterr()
    response = handler_module.handler(event, FakeLambdaContext(function_name="Onceflow-dev-RunnerStats-Handler"))
    return response, emf_metrics(capsys.readouterr().out)


def test_handler_applies_a_batch_and_publishes_its_counts(deployed: RunnerStatsWorld, capsys: pytest.CaptureFixture[str]) -> None:
    # Given an empty run, and a batch with 3 new messages, one copy, and a record that is not JSON
    event = event_of(device(1, 100), device(2, 80), b"{not json", device(2, 80), device(3, 40))
    # When the deployed handler is invoked with it
    response, metrics = invoke(event, capsys)
    # Then no record is reported, the run holds the 3 messages once, and the counts are published
    assert response == {"batchItemFailures": []}
    assert metrics["AcceptedMessages"] == 3
    assert metrics["DuplicateMessages"] == 1
    assert metrics["RejectedRecords"] == 1
    assert metrics["StaleMessages"] == 0 and metrics["CommitRetries"] == 0 and metrics["GapsClosed"] == 0
    view = deployed.view()
    run = view.runs[(RUN.user_id, RUN.run_id)]
    assert run.total_meters == Decimal(220) and run.message_count == 3
    assert run.total_seconds == Decimal(120)
    assert [m.sequence_id for m in run.archived] == [1, 2, 3]
    assert view.rejects == {event["Records"][2]["eventID"]: "not_json"}
    assert view.tendencies[RUN.user_id] == (RUN.run_id, "good job", None, None)
    # and a reader's projected read (docs/runner-stats.md, "Data model and readers") sees the totals and none of the dedup record
    response = deployed.client.get_item(
        TableName=deployed.settings.tables.run_stats,
        Key=to_attributes({"user_id": RUN.user_id, "run_id": RUN.run_id}),
        ProjectionExpression=", ".join(RUN_STATS_PROJECTION),
        ConsistentRead=True,
    )
    stats = from_attributes(response["Item"])
    assert set(stats) == set(RUN_STATS_PROJECTION) and stats["total_meters"] == Decimal(220)


def test_a_redelivered_batch_changes_nothing_and_counts_duplicates(deployed: RunnerStatsWorld, capsys: pytest.CaptureFixture[str]) -> None:
    event = event_of(device(1, 100), device(2, 80))
    first, _ = invoke(event, capsys)
    before = deployed.view()
    # When Lambda delivers the same records again (a retry after a timeout, say)
    again, metrics = invoke(event, capsys)
    # Then the stored figures are unchanged and every message counts as a duplicate
    assert first == again == {"batchItemFailures": []}
    assert deployed.view() == before
    assert metrics["AcceptedMessages"] == 0 and metrics["DuplicateMessages"] == 2 and metrics["RejectedRecords"] == 0


def test_the_seed_messages_through_the_handler(deployed: RunnerStatsWorld, capsys: pytest.CaptureFixture[str]) -> None:
    # Given the seed's message 5 and its copy with another timestamp, on an empty table
    response, metrics = invoke(load_event("runner_stats/seed_message_5.json"), capsys)
    resent, resent_metrics = invoke(load_event("runner_stats/seed_message_5_resent.json"), capsys)
    # Then the message is counted once
    assert response == resent == {"batchItemFailures": []}
    assert metrics["AcceptedMessages"] == 1 and resent_metrics["DuplicateMessages"] == 1
    run = deployed.view().runs[(RUN.user_id, RUN.run_id)]
    assert run.total_meters == Decimal(120) and run.high_water == 5 and run.gaps == ((1, 4),)


def test_a_failing_store_is_reported_as_batch_item_failures(deployed: RunnerStatsWorld, capsys: pytest.CaptureFixture[str]) -> None:
    # Given the run stats table is gone (every read of contexts fails)
    deployed.client.delete_table(TableName=deployed.settings.tables.run_stats)
    other = RunKey(3001, 1)
    event = event_of(device(1, 10), device(1, 10, other), device(2, 10))
    # When the handler runs
    response, metrics = invoke(event, capsys)
    # Then each key is reported at its first record, and nothing is counted as accepted
    records = event["Records"]
    assert response == {"batchItemFailures": [{"itemIdentifier": records[i]["kinesis"]["sequenceNumber"]} for i in (0, 1)]}
    assert metrics["AcceptedMessages"] == 0


def test_base64_garbage_in_the_event_is_rejected_not_raised(deployed: RunnerStatsWorld, capsys: pytest.CaptureFixture[str]) -> None:
    event = event_of(device(1, 10), device(2, 10))
    event["Records"][0]["kinesis"]["data"] = "%%%" + base64.b64encode(b"x").decode()
    response, metrics = invoke(event, capsys)
    assert response == {"batchItemFailures": []}
    assert metrics["RejectedRecords"] == 1 and metrics["AcceptedMessages"] == 1
