"""One trip, one id, through the deployed API on the embedded cloud: real rows stored by a batch and
then sent again re-spelled, re-saved or alone are not stored twice, and a row re-sent alone starts
no execution. The saga's state machine runs for real (moto executes the synthesized definition).
"""

from __future__ import annotations

from decimal import Decimal

from devtools.taxi_rows import sample_lines
from devtools.taxi_world import TaxiWorld
from runtime.taxi_etl.trip_lines import line_columns

LINES = sample_lines()
ROWS = LINES[:20]


def respelled(line: str) -> str:
    """As a spreadsheet re-saves it: amounts with two places, TLC dates, every cell quoted."""
    cells = line_columns(line)
    for index in (1, 2):
        cells[index] = cells[index].replace("T", " ").removesuffix(".000")
    for index in range(10, len(cells)):
        cells[index] = format(Decimal(cells[index]).quantize(Decimal("0.01")), "f")
    return ",".join(f'"{cell}"' for cell in cells)


def test_a_re_saved_copy_and_single_re_sends_of_a_loaded_batch_store_nothing_new(saga: TaxiWorld) -> None:
    # Given 20 real rows stored by one batch
    status, first = saga.post("/trips/batch", "\n".join(ROWS))
    assert status == 202
    stored = saga.final_items()
    assert len(stored) == 20
    executions = len(saga.executions())
    # When a re-saved copy of the same rows (other spellings, CRLF) is posted as a batch under a header
    header = "VendorID,tpep_pickup_datetime,tpep_dropoff_datetime,passenger_count,trip_distance,RatecodeID,store_and_fwd_flag,"
    header += "PULocationID,DOLocationID,payment_type,fare_amount,extra,mta_tax,tip_amount,tolls_amount,improvement_surcharge,"
    header += "total_amount,congestion_surcharge"
    status, copy = saga.post("/trips/batch", "\r\n".join([header, *(respelled(row) for row in ROWS)]) + "\r\n")
    # Then it names the same rows: the same batch, so the same execution (a duplicate), and the trips table is unchanged
    assert (status, copy["StoreRequestIds"], copy["duplicate"], copy["execution"]) == (
        200,
        first["StoreRequestIds"],
        True,
        first["execution"],
    )
    assert saga.final_items() == stored
    # When each row is then posted alone, once as exported and once re-spelled
    answers = [saga.post("/trips", line) for row in ROWS for line in (row, respelled(row))]
    # Then each is a duplicate of the batch's row: 200, its state "stored", and no execution started
    assert {(status, body["duplicate"], body["state"], body["execution"]) for status, body in answers} == {(200, True, "stored", None)}
    assert [body["StoreRequestId"] for _, body in answers] == [sid for sid in first["StoreRequestIds"] for _ in range(2)]
    assert len(saga.executions()) == executions
    assert saga.final_items() == stored


def test_a_new_row_sent_alone_still_starts_its_execution(saga: TaxiWorld) -> None:
    # Given a row no route has seen
    row = LINES[100]
    # When it is posted alone
    status, body = saga.post("/trips", row)
    # Then it is started and stored as before
    assert (status, body["duplicate"]) == (202, False)
    assert body["execution"] == body["StoreRequestId"]
    assert list(saga.final_items()) == [body["StoreRequestId"]]


def with_cell(line: str, index: int, text: str) -> str:
    cells = line_columns(line)
    cells[index] = text
    return ",".join(cells)


PASSENGER_COUNT, PAYMENT_TYPE = 3, 9


def test_two_rows_that_differ_only_in_a_blanked_cell_are_two_stored_trips(saga: TaxiWorld) -> None:
    # Given a real 2019 row with passenger_count 10 stored (out of the dictionary's range: validation blanks it)
    status, first = saga.post("/trips", with_cell(LINES[200], PASSENGER_COUNT, "10"))
    assert (status, first["duplicate"]) == (202, False)
    # When the same row with passenger_count 11 is posted
    status, second = saga.post("/trips", with_cell(LINES[200], PASSENGER_COUNT, "11"))
    # Then it is a trip of its own, started and stored, not answered as a duplicate of the first
    assert (status, second["duplicate"]) == (202, False) and second["StoreRequestId"] != first["StoreRequestId"]
    assert sorted(saga.final_items()) == sorted([first["StoreRequestId"], second["StoreRequestId"]])
    assert "passenger_count" not in saga.final_items()[second["StoreRequestId"]]  # blanked: unknown, as before


def test_a_parquet_export_s_payment_0_re_sends_the_tlc_csv_s_empty_payment(saga: TaxiWorld) -> None:
    # Given a real 2019 row with payment_type empty (unknown), as a TLC CSV writes it, stored
    status, first = saga.post("/trips", with_cell(LINES[201], PAYMENT_TYPE, ""))
    assert status == 202
    stored = saga.final_items()
    # When the same trip is posted as a Parquet-derived CSV writes it, payment_type 0
    status, again = saga.post("/trips", with_cell(LINES[201], PAYMENT_TYPE, "0"))
    # Then it is the stored trip: a duplicate, and the trips table is unchanged
    assert (status, again["duplicate"], again["StoreRequestId"]) == (200, True, first["StoreRequestId"])
    assert saga.final_items() == stored
