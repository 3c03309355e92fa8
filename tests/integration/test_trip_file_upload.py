"""A trip file uploaded as CSV lines through boto3's managed transfer (onceflow/clients/trip_files.upload_trip_file),
on the embedded cloud: a Parquet month becomes a CSV object without a temporary file, in one PUT or one multipart
upload. The Parquet files are built here from the real rows of tests/data/taxi_etl."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from devtools.aws.clients import new_client
from devtools.aws.moto_patches import embedded_aws
from onceflow.clients.trip_files import trip_lines, upload_trip_file
from tests.trip_parquet import sample_cells, trip_table, write_parquet

BUCKET = "trip-ingest"
MIN_PART_BYTES = 5 * 1024 * 1024  # S3's smallest part but the last


@pytest.fixture
def s3() -> Iterator[Any]:
    with embedded_aws():
        client = new_client("s3")
        client.create_bucket(Bucket=BUCKET)
        client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        yield client


def expected_body(path: Path) -> bytes:
    return "".join(f"{line}\n" for line in trip_lines(path)).encode("utf-8")


def test_a_parquet_file_under_the_part_size_is_one_put_of_its_csv_lines(s3: Any, tmp_path: Path) -> None:
    # Given the 2,000 real rows as a 2022-layout Parquet file (about 200 KB of CSV)
    cells = sample_cells()
    path = write_parquet(tmp_path / "month.parquet", trip_table(cells, fees={"Airport_fee": [0.0] * len(cells)}))

    # When it is uploaded with parts of 5 MiB, counting the bytes sent
    sent: list[int] = []
    uploaded = upload_trip_file(s3, path, BUCKET, "loads/month.csv", part_size=MIN_PART_BYTES, on_bytes=sent.append)

    # Then the object is the file's CSV lines, put whole (a plain MD5 ETag), in a version of its own
    stored = s3.get_object(Bucket=BUCKET, Key="loads/month.csv", VersionId=uploaded["VersionId"])
    assert stored["Body"].read() == expected_body(path)
    # and the counts add up to its size (what the loader's progress bar shows)
    assert sum(sent) == len(expected_body(path))
    assert "-" not in uploaded["ETag"] and stored["ETag"] == uploaded["ETag"]


def test_a_parquet_file_over_the_part_size_is_one_multipart_upload(s3: Any, tmp_path: Path) -> None:
    # Given a Parquet file whose CSV lines are just over one 5 MiB part: the real rows repeated, several row groups
    rows = trip_table(sample_cells())
    once = expected_body(write_parquet(tmp_path / "once.parquet", rows))
    copies = MIN_PART_BYTES // len(once) + 1
    path = write_parquet(tmp_path / "month.parquet", pa.concat_tables([rows] * copies), row_group_size=20_000)
    header = once[: once.index(b"\n") + 1]
    body = header + once.removeprefix(header) * copies  # the month's lines: one header, then the rows again and again
    assert MIN_PART_BYTES < len(body) < 2 * MIN_PART_BYTES

    # When it is uploaded with parts of 5 MiB
    uploaded = upload_trip_file(s3, path, BUCKET, "loads/big.csv", part_size=MIN_PART_BYTES)

    # Then it went up as a multipart upload of two parts (S3's ETag of a multipart object ends in "-<parts>"),
    # and the object is the file's CSV lines, in order
    assert uploaded["ETag"].endswith('-2"')
    stored = s3.get_object(Bucket=BUCKET, Key="loads/big.csv", VersionId=uploaded["VersionId"])
    assert stored["Body"].read() == body
