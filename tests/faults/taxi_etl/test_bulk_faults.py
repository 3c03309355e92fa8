"""A bulk chunk crashed at each write boundary (then run again, as the map's retry runs it), or whose write's response
is lost (botocore sends it again), ends as one clean pass: the same trips items and the same GET /trips/{id} answer
for every row. One chunk of real rows: six trips, a line Validate rejects and one Transform rejects."""

from __future__ import annotations

import dataclasses

from devtools.aws.faults import LostResponse, SimulatedCrash, WriteBoundaryCrasher
from devtools.taxi_world import TaxiWorld
from runtime.taxi_etl.requests import submission_rows
from tests.integration.taxi_etl.test_bulk_handlers import HEADER, LINES, TRANSFORMATION_REJECT, VALIDATION_REJECT, file_bytes, new_bulk

DATA = [*LINES[:3], VALIDATION_REJECT, TRANSFORMATION_REJECT, *LINES[3:6]]
IDS = [row.store_request_id for row in submission_rows(DATA)[1]]


def test_a_chunk_crashed_at_any_write_or_losing_any_response_ends_as_one_clean_pass(saga: TaxiWorld) -> None:
    # Given one clean load of the chunk, counting its writes (one at a time: each boundary is one write)
    bulk = new_bulk(saga)
    serial, clients = dataclasses.replace(bulk.chunk, concurrency=1), (saga.dynamodb, bulk.s3)
    event = bulk.event(bulk.upload(file_bytes([HEADER, *DATA])))
    plan, counter = bulk.plan_of(event), WriteBoundaryCrasher().attach(*clients)
    bulk.run_chunks(event, plan, serial)
    counter.detach(*clients)
    clean = (bulk.tables()["trips"], bulk.answers(IDS))
    assert counter.writes == 6 + 2 + 4 + 1  # six trips put; begin+flag, two begins+two flags; the summary
    faults = [WriteBoundaryCrasher(at, when) for at in range(1, counter.writes + 1) for when in ("before", "after")]
    for fault in [*faults, *(LostResponse(at) for at in range(1, counter.writes + 1))]:
        # When, from empty tables, the chunk meets the fault, then runs again (the map's retry; a chunk whose
        # response alone was lost is done, and returns at once)
        bulk.empty_tables()
        bulk.forget_summaries(event)
        fault.attach(*clients)
        try:
            bulk.run_chunks(event, plan, serial)
        except SimulatedCrash:
            pass
        finally:
            fault.detach(*clients)
        bulk.run_chunks(event, plan, serial)
        # Then the fault happened, and the trips and every row's answer are the clean pass's
        assert fault.crashed if isinstance(fault, WriteBoundaryCrasher) else fault.retried, fault
        assert (bulk.tables()["trips"], bulk.answers(IDS)) == clean, fault
