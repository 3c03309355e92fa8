"""Bad input to the taxi API: each request gets a 4xx with a message that says what to fix, and
nothing is started or stored. Runs the deployed entry point on the embedded cloud.
"""

from __future__ import annotations

import pytest

from devtools.taxi_rows import sample_lines
from devtools.taxi_world import API_HANDLER, TaxiWorld

LINES = sample_lines()
GOOD = LINES[0]


def assert_nothing_happened(world: TaxiWorld) -> None:
    assert world.executions() == []
    assert world.invocations.calls == []
    assert all(rows == {} for rows in world.status_rows().values())
    assert world.final_items() == {}


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/trips", None, 400, "the request body is empty"),
        ("/trips", "", 400, "the request body is empty"),
        ("/trips", "\n\r\n", 400, "has no CSV line"),
        ("/trips", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", 400, "not UTF-8 text"),
        ("/trips", b"2,2019-10-23\x00,x", 400, "control characters"),
        ("/trips", "2,2019-10-23T16:39:42.000,2019-10-23T17:14:10.000,1,7.93", 400, "line 1 has 5 columns"),
        ("/trips", GOOD + "\n" + LINES[1], 400, "send several to /trips/batch"),
        ("/trips", "vendorid,tpep_pickup_datetime," + ",".join(["x"] * 16), 400, "is a CSV header"),
        ("/trips", GOOD + "," * 1024 * 1024, 413, "the limit is 4098"),
        ("/trips/batch", "\n".join(LINES[:101]), 413, "the batch has 101 lines; the limit is 100"),
        ("/trips/batch", "\n".join([GOOD] * 50 + ["x" * 4000] * 20), 413, "the limit is 65536"),
        ("/trips/batch", "\n".join([GOOD, "1,2,3,4,5", GOOD, "a;b;c"]), 400, "2 of 4 lines cannot be trips, nothing was accepted"),
        ("/trips/batch", "vendorid,tpep_pickup_datetime\n", 400, "the batch has no CSV line"),
        (
            "/trips/batch",
            "\n".join([GOOD.rsplit(",", 1)[0], *LINES[1:4]]),  # a headerless batch whose first line was cut to 17 fields
            400,
            "1 of 4 lines cannot be trips, nothing was accepted: line 1 has 17 columns, but most lines (3 of 4) have 18",
        ),
    ],
)
def test_bad_input_gets_a_clear_4xx_and_stores_nothing(
    saga: TaxiWorld, path: str, body: str | bytes | None, status: int, message: str
) -> None:
    # Given a request the API cannot turn into trips
    # When it is posted
    got_status, got = saga.post(path, body)
    # Then the response names the problem with a 4xx status
    assert got_status == status
    assert message in got["error"]
    # and no execution was started and no table was written
    assert_nothing_happened(saga)


def test_a_batch_refusal_names_the_lines_to_fix(saga: TaxiWorld) -> None:
    # Given a batch with a 5-column line at line 2
    # When it is posted
    status, body = saga.post("/trips/batch", "\n".join([GOOD, "1,2,3,4,5", LINES[1]]))
    # Then the message says which line and why
    assert status == 400
    assert "line 2 has 5 columns; a yellow-taxi trip has 17 to 20" in body["error"]
    assert_nothing_happened(saga)


@pytest.mark.parametrize("key", ["", "has space", "x" * 65, "semi;colon"])
def test_an_unusable_idempotency_key_is_refused(saga: TaxiWorld, key: str) -> None:
    # Given a good line with an Idempotency-Key that cannot name an execution
    # When it is posted
    status, body = saga.post("/trips", GOOD, idempotency_key=key)
    # Then it is refused before anything starts
    assert status == 400
    assert "Idempotency-Key must be 1-64 letters" in body["error"]
    assert_nothing_happened(saga)


def test_the_limits_come_from_the_synthesized_function(saga: TaxiWorld) -> None:
    # Given the API function's synthesized environment
    environment = saga.environment(API_HANDLER)
    # When we read its limits
    # Then they are the ones the refusals above quote (100 lines, 64 KiB, 4096-byte lines) and Standard
    assert (environment["BATCH_MAX_LINES"], environment["BATCH_MAX_BYTES"], environment["MAX_LINE_BYTES"]) == ("100", "65536", "4096")
    assert environment["WORKFLOW_TYPE"] == "STANDARD"


def test_a_full_batch_at_the_limit_is_accepted(saga: TaxiWorld) -> None:
    # Given exactly 100 real lines
    # When they are posted as one batch
    status, body = saga.post("/trips/batch", "\n".join(LINES[:100]))
    # Then all are accepted under one execution and all 100 are stored
    assert status == 202
    assert len(body["StoreRequestIds"]) == 100
    assert len(saga.executions()) == 1
    assert len(saga.final_items()) == 100
