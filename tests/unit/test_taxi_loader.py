"""The taxi loader (onceflow/clients/taxi_loader.py) against a fake loads API and the embedded cloud's S3: the
content-addressed key, one upload per file (joined when the object is there), boto3's managed transfer of the
file's CSV lines, the progress and the report it prints, and every exit status. The Parquet files are built here
from the real rows of tests/data/taxi_etl (tests/trip_parquet.py)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from boto3.s3.transfer import TransferConfig

from devtools.aws.clients import new_client
from devtools.aws.moto_patches import embedded_aws
from onceflow.clients import taxi_loader
from onceflow.clients.local import LocalCloud
from onceflow.clients.taxi_loader import Answer, Console, HttpLoadsApi, LoadOptions, load_file
from onceflow.clients.trip_files import TripStream, trip_lines
from runtime.taxi_etl import contract
from runtime.taxi_etl.requests import content_id
from tests.trip_parquet import sample_cells, sample_lines, trip_table, write_parquet

BUCKET = "onceflow-dev-ingest"
HEADER = (
    "VendorID,tpep_pickup_datetime,tpep_dropoff_datetime,passenger_count,trip_distance,RatecodeID,store_and_fwd_flag,"
    "PULocationID,DOLocationID,payment_type,fare_amount,extra,mta_tax,tip_amount,tolls_amount,improvement_surcharge,"
    "total_amount,congestion_surcharge"
)
ROWS = sample_lines()[:40]
CLEAN_ARGS = ["--url", "https://api.test", "--bucket", BUCKET, "--api-key", "k", "--no-progress"]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def report(**changes: Any) -> dict[str, Any]:
    """A report.json of the spec: a clean load of the 40 rows unless changed."""
    document: dict[str, Any] = {
        "loadId": "load-1",
        "bucket": BUCKET,
        "key": "incoming/x/trips.csv",
        "versionId": "v",
        "status": "SUCCEEDED",
        "chunks": 1,
        "chunksDone": 1,
        "chunksMissing": [],
        "lines": 41,
        "rowsRead": 40,
        "stored": 40,
        "alreadyStored": 0,
        "flagged": {},
        "flaggedByDetail": {},
        "findings": {},
        "refusedLines": 0,
        "refused": [],
        "error": None,
    }
    return document | changes


def finished(document: Mapping[str, Any]) -> Answer:
    return Answer(200, {"loadId": "load-1", "execution": "load-1", "status": document["status"], "report": dict(document)})


def running(chunks: int | None = None, done: int = 0, **extra: Any) -> Answer:
    return Answer(
        200, {"loadId": "load-1", "execution": "load-1", "status": "RUNNING", "progress": {"chunks": chunks, "chunksDone": done, **extra}}
    )


class FakeLoadsApi:
    """POST /loads and GET /loads/{LoadId} as the spec answers them: a start names an object version that must be in
    the bucket (HeadObject, as the API does) and answers 202 with the load's id; each GET answers the next of
    `answers` (the last one again and again)."""

    url = "https://api.test"

    def __init__(self, s3: Any, answers: list[Answer] | None = None, start: Answer | None = None) -> None:
        self.s3 = s3
        self.answers = answers or [finished(report())]
        self.start = start
        self.starts: list[tuple[str, str | None]] = []
        self.gets: list[str] = []

    def start_load(self, key: str, version_id: str | None) -> Answer:
        head = self.s3.head_object(Bucket=BUCKET, Key=key, **({"VersionId": version_id} if version_id else {}))
        self.starts.append((key, version_id))
        load_id = "load-" + hashlib.sha256(f"{BUCKET}/{key}/{head['VersionId']}".encode()).hexdigest()[:40]
        return self.start or Answer(202, {"loadId": load_id, "execution": load_id, "status": "RUNNING"})

    def get_load(self, load_id: str) -> Answer:
        self.gets.append(load_id)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class RecordingS3:
    """The embedded cloud's S3 client, recording the managed transfers it is asked for."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.transfers: list[tuple[Any, str, str, dict[str, Any]]] = []

    def upload_fileobj(self, stream: Any, bucket: str, key: str, **options: Any) -> None:
        self.transfers.append((stream, bucket, key, options))
        self._client.upload_fileobj(stream, bucket, key, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class InterruptedUpload(RecordingS3):
    """Ctrl-C while the file goes up: nothing reaches the bucket."""

    def upload_fileobj(self, stream: Any, bucket: str, key: str, **options: Any) -> None:
        raise KeyboardInterrupt


@pytest.fixture
def s3() -> Iterator[RecordingS3]:
    with embedded_aws():
        client = new_client("s3")
        client.create_bucket(Bucket=BUCKET)
        client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        yield RecordingS3(client)


def quiet() -> Console:
    return Console(io.StringIO(), io.StringIO(), False)


def printed(console: Console) -> str:
    return console.out.getvalue()  # type: ignore[attr-defined, no-any-return]


def object_lines(s3: Any, key: str) -> list[str]:
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode().splitlines()  # type: ignore[no-any-return]


class Clock:
    """A monotonic clock that moves only when the loader sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


# --- the key -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "stem"),
    [("trips.csv", "trips"), ("Yellow 2019-10.CSV.GZ", "Yellow_2019-10"), ("yellow_tripdata_2024-01.parquet", "yellow_tripdata_2024-01")],
)
def test_the_key_is_the_sha256_of_the_files_bytes_and_its_stem_as_csv(tmp_path: Path, name: str, stem: str) -> None:
    # Given a trip file of each format (its bytes are what is hashed, not its CSV lines)
    path = tmp_path / name
    path.write_bytes(b"the file's bytes")
    # When its key is derived
    key = taxi_loader.ingest_key(path, taxi_loader.file_digest(path))
    # Then it is incoming/<sha256 of the bytes>/<the name without its suffix, safe for a key>.csv
    assert key == "incoming/" + hashlib.sha256(b"the file's bytes").hexdigest() + f"/{stem}.csv"


def test_the_same_bytes_under_another_name_are_the_same_content_and_other_bytes_are_not(tmp_path: Path) -> None:
    # Given a file, a copy under another name, and a file one byte different
    first = write(tmp_path / "a.csv", [HEADER, *ROWS])
    copy = tmp_path / "b.csv"
    copy.write_bytes(first.read_bytes())
    other = write(tmp_path / "c.csv", [HEADER, *ROWS[:-1], ROWS[-1] + " "])
    # When their digests are taken, Then the copy's is the file's and the other's differs
    assert taxi_loader.file_digest(first) == taxi_loader.file_digest(copy) != taxi_loader.file_digest(other)


def test_a_file_of_another_format_has_no_key(tmp_path: Path) -> None:
    with pytest.raises(taxi_loader.UsageError, match=r"one of \.csv, \.csv\.gz, \.parquet"):
        taxi_loader.ingest_key(tmp_path / "trips.json", "0" * 64)


# --- the upload ----------------------------------------------------------------------------------


def test_a_new_file_goes_up_as_csv_lines_through_the_managed_transfer_and_its_version_is_loaded(s3: RecordingS3, tmp_path: Path) -> None:
    # Given a gzipped CSV of 40 real rows, not in the bucket
    path = tmp_path / "october.csv.gz"
    path.write_bytes(gzip.compress("".join(f"{line}\n" for line in [HEADER, *ROWS]).encode()))
    api = FakeLoadsApi(s3)
    console = quiet()
    # When it is loaded
    outcome = load_file(path, api, s3, BUCKET, LoadOptions(part_bytes=5 * 1024 * 1024), console=console)
    # Then one managed transfer took the file's CSV line stream, with the part size as threshold and part size
    key = f"incoming/{hashlib.sha256(path.read_bytes()).hexdigest()}/october.csv"
    ((stream, bucket, sent_key, options),) = s3.transfers
    assert (bucket, sent_key) == (BUCKET, key) and isinstance(stream.raw, TripStream)
    config = options["Config"]
    assert isinstance(config, TransferConfig) and config.multipart_threshold == config.multipart_chunksize == 5 * 1024 * 1024
    # and the object is the file's lines, decompressed
    assert object_lines(s3, key) == [HEADER, *ROWS]
    # and the load was started for that object's version, followed to its report, and all rows are stored
    version = s3.head_object(Bucket=BUCKET, Key=key)["VersionId"]
    assert api.starts == [(key, version)] and outcome.uploaded and outcome.key == key
    assert outcome.exit_status == 0 and "ALL STORED (exit 0)" in printed(console)
    assert len(api.gets) == 1 and api.gets[0].startswith("load-")


def test_a_file_already_in_the_bucket_is_not_uploaded_again_and_its_load_is_joined(s3: RecordingS3, tmp_path: Path) -> None:
    # Given a file loaded once
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS])
    api = FakeLoadsApi(s3)
    first = load_file(path, api, s3, BUCKET, console=quiet())
    versions = s3.list_object_versions(Bucket=BUCKET)["Versions"]
    # When it is loaded again (a rerun, or a second loader at once)
    console = quiet()
    again = load_file(path, api, s3, BUCKET, console=console)
    # Then nothing went up the second time: one transfer, one version of the one object
    assert len(s3.transfers) == 1 and s3.list_object_versions(Bucket=BUCKET)["Versions"] == versions
    # and the same object version was named to POST /loads both times (the API joins it: one load)
    assert api.starts[0] == api.starts[1] and api.gets[0] == api.gets[1]
    assert (first.uploaded, again.uploaded) == (True, False) and again.exit_status == 0
    assert f"already uploaded: {path} as s3://{BUCKET}/{first.key}" in printed(console)


def test_a_parquet_file_and_its_csv_are_two_objects_of_the_same_canonical_lines(s3: RecordingS3, tmp_path: Path) -> None:
    # Given 40 real rows as a CSV file and the same rows as a Parquet file with TLC's types
    csv_path = write(tmp_path / "october.csv", [HEADER, *ROWS])
    parquet_path = write_parquet(tmp_path / "october.parquet", trip_table(sample_cells()[: len(ROWS)]))
    api = FakeLoadsApi(s3)
    # When both are loaded
    from_csv = load_file(csv_path, api, s3, BUCKET, console=quiet())
    from_parquet = load_file(parquet_path, api, s3, BUCKET, console=quiet())
    # Then each file has its own key (its own bytes' digest), and the Parquet file went up as CSV lines
    assert from_csv.key != from_parquet.key and from_parquet.key.endswith("/october.csv")
    csv_lines, parquet_lines = object_lines(s3, from_csv.key), object_lines(s3, from_parquet.key)
    assert parquet_lines == list(trip_lines(parquet_path))
    # and both objects hold the same trips: every row has the same content id from either
    assert [content_id(line) for line in parquet_lines[1:]] == [content_id(line) for line in csv_lines[1:]]
    assert len(set(content_id(line) for line in csv_lines[1:])) == len(ROWS)


def test_a_file_loaded_before_is_answered_with_its_report(s3: RecordingS3, tmp_path: Path) -> None:
    # Given a file whose object version was loaded before (POST /loads answers 200 SUCCEEDED, no new execution)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS])
    api = FakeLoadsApi(s3, [finished(report(stored=0, alreadyStored=40))], start=Answer(200, {"loadId": "load-1", "status": "SUCCEEDED"}))
    console = quiet()
    # When it is loaded
    outcome = load_file(path, api, s3, BUCKET, console=console)
    # Then the loader read that load's report once and says so: every row is stored (by the earlier load)
    assert api.gets == ["load-1"] and outcome.exit_status == 0
    assert "load load-1: loaded before" in printed(console) and "already stored             40" in printed(console)


# --- progress and the report --------------------------------------------------------------------


def test_the_progress_bar_counts_the_chunks_done_of_the_plans_chunks_until_the_report(s3: RecordingS3, tmp_path: Path) -> None:
    # Given a load that is planned, then 1, 3 and 4 of its 4 chunks done, then reported
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS])
    answers = [running(None), running(4, 1), running(4, 3), running(4, 3, itemCounts={"succeeded": 4}), finished(report(chunks=4))]
    api = FakeLoadsApi(s3, answers)
    clock = Clock()
    console = Console(io.StringIO(), io.StringIO(), True)
    # When it is loaded with the bars drawn
    outcome = load_file(path, api, s3, BUCKET, LoadOptions(poll_seconds=2.0), console=console, sleep=clock.sleep, clock=clock)
    # Then GET /loads was asked until the report, 2 s apart, and the bar reached 4 of 4 chunks
    assert len(api.gets) == 5 and clock.sleeps == [2.0] * 4
    bars = console.err.getvalue()  # type: ignore[attr-defined]
    assert "chunks: 100%" in bars and "4/4" in bars and "upload" in bars
    # and the report went to stdout, above the bars
    assert "ALL STORED (exit 0)" in printed(console) and outcome.exit_status == 0


def test_the_report_shows_the_counts_the_flagged_rows_by_reason_and_the_first_refused_lines(s3: RecordingS3, tmp_path: Path) -> None:
    # Given a load whose report has flagged rows and 60 refused lines, of which it lists 55
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS])
    refused = [{"line": 100 + index, "reason": f"line {100 + index} has 17 columns, the file's layout 18"} for index in range(55)]
    document = report(
        rowsRead=2000,
        stored=1200,
        alreadyStored=737,
        flagged={"VALIDATION": 2, "STORE": 1},
        flaggedByDetail={"invalid_pickup_time": 2, "error:StoreConflict": 1},
        findings={"total_amount_mismatch": 3, "dropoff_equals_pickup": 1},
        refusedLines=60,
        refused=refused,
    )
    console = quiet()
    # When it is loaded
    outcome = load_file(path, FakeLoadsApi(s3, [finished(document)]), s3, BUCKET, console=console)
    # Then the counts, the flagged rows by reason and by detail, and the first 50 refused lines are printed
    text = printed(console)
    for line in (
        "rows read               2,000",
        "stored                  1,200",
        "already stored            737\n  with findings: dropoff_equals_pickup 1, total_amount_mismatch 3\n",
        "flagged                     3",
    ):
        assert line in text
    assert "by reason: VALIDATION: 2" in text and "by reason: STORE: 1" in text and "by detail: error:StoreConflict: 1" in text
    assert "refused lines              60" in text
    assert "\n  line 100 has 17 columns, the file's layout 18\n" in text and "\n  line 149 has" in text and "line 150 has" not in text
    assert f"... and 10 more (s3://{BUCKET}/loads/{outcome.load_id}/report.json lists the first 55)" in text
    # and the verdict: every line's fate is known, not all stored
    assert outcome.exit_status == 1 and "NOT ALL STORED (exit 1)" in text


# --- exit statuses -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "status", "verdict"),
    [
        ([finished(report())], 0, "ALL STORED (exit 0)"),
        ([finished(report(stored=10, alreadyStored=30))], 0, "ALL STORED (exit 0)"),
        ([finished(report(stored=39, flagged={"VALIDATION": 1}))], 1, "NOT ALL STORED (exit 1)"),
        ([finished(report(refusedLines=1, refused=[{"line": 7, "reason": "not UTF-8 text"}]))], 1, "  line 7: not UTF-8 text"),
        (
            [finished(report(status="FAILED", chunks=None, error={"error": contract.ERROR_LOAD_INPUT, "cause": "no trip layout"}))],
            1,
            "FILE REFUSED (exit 1)",
        ),
        ([finished(report(status="FAILED", chunksDone=0, chunksMissing=[0]))], 3, "INCOMPLETE (exit 3): the load failed"),
        ([Answer(200, {"status": "ABORTED", "progress": {"chunks": 4, "chunksDone": 2}})], 3, "ended ABORTED without a report"),
        ([running(4, 2)], 3, "still RUNNING after --wait 0 s"),
        ([Answer(404, {"error": "no such load"})], 3, "answered 404: no such load"),
    ],
    ids=["stored", "already-stored", "flagged", "refused", "file-refused", "failed", "aborted", "still-running", "gone"],
)
def test_the_exit_status_follows_the_report(
    s3: RecordingS3, tmp_path: Path, capsys: Any, answers: list[Answer], status: int, verdict: str
) -> None:
    # Given a file, and a load that ends (or does not) as the API answers
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS])
    # When the CLI loads it, following it for no longer than --wait 0
    code = taxi_loader.main([str(path), *CLEAN_ARGS, "--wait", "0"], api=FakeLoadsApi(s3, answers), s3=s3)
    # Then the exit status is the report's, and the verdict says it
    assert code == status
    assert verdict in capsys.readouterr().out


def test_a_refused_key_or_an_api_that_does_not_answer_is_incomplete(s3: RecordingS3, tmp_path: Path, capsys: Any) -> None:
    # Given a file
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS])
    # When the API refuses the key, Then the load is incomplete (exit 3) and the answer is named
    refused = FakeLoadsApi(s3, start=Answer(403, {"message": "Forbidden"}))
    assert taxi_loader.main([str(path), *CLEAN_ARGS], api=refused, s3=s3) == 3
    assert "POST /loads answered 403: Forbidden" in capsys.readouterr().out and refused.gets == []

    # When the API gives no answer after every retry
    class Unreachable(FakeLoadsApi):
        def start_load(self, key: str, version_id: str | None) -> Answer:
            raise taxi_loader.ApiUnavailable("POST /loads: no answer after 6 attempts (HTTP 503: busy)")

    # Then it is incomplete too, and says to run it again
    assert taxi_loader.main([str(path), *CLEAN_ARGS], api=Unreachable(s3), s3=s3) == 3
    assert "no answer after 6 attempts" in capsys.readouterr().out


def test_a_run_killed_while_uploading_leaves_no_object_and_a_rerun_uploads_and_loads_the_file(
    s3: RecordingS3, tmp_path: Path, capsys: Any
) -> None:
    # Given a file, and Ctrl-C while it goes up
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS])
    api = FakeLoadsApi(s3)
    # When the loader is interrupted, Then it exits 130, says to run it again, and nothing is in the bucket or started
    assert taxi_loader.main([str(path), *CLEAN_ARGS], api=api, s3=InterruptedUpload(s3._client)) == 130
    assert "run it again" in capsys.readouterr().err
    assert "Versions" not in s3.list_object_versions(Bucket=BUCKET) and api.starts == []
    # When it is run again, Then the file goes up and is loaded
    assert taxi_loader.main([str(path), *CLEAN_ARGS], api=api, s3=s3) == 0
    assert len(s3.transfers) == 1 and len(api.starts) == 1


def test_a_run_killed_while_following_the_load_joins_it_when_run_again(s3: RecordingS3, tmp_path: Path, capsys: Any) -> None:
    # Given a file whose load was started, and Ctrl-C while the loader follows it
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS])

    class InterruptedFollow(FakeLoadsApi):
        def get_load(self, load_id: str) -> Answer:
            raise KeyboardInterrupt

    first = InterruptedFollow(s3)
    assert taxi_loader.main([str(path), *CLEAN_ARGS], api=first, s3=s3) == 130
    # When it is run again
    again = FakeLoadsApi(s3)
    assert taxi_loader.main([str(path), *CLEAN_ARGS], api=again, s3=s3) == 0
    # Then it did not upload again, and named the same object version (the API joins the load)
    assert len(s3.transfers) == 1 and again.starts == first.starts


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--url", "https://api.test", "--api-key", "k"], "--url and --bucket go together"),
        (["--bucket", BUCKET, "--env", "dev"], "--url and --bucket go together"),
        (["--api-key", "k"], "one of the arguments --url --env is required"),
        (["--url", "https://api.test", "--env", "dev"], "not allowed with argument"),
        (["--url", "https://api.test", "--bucket", BUCKET, "--outputs-file", "x.json"], "--outputs-file goes with --env"),
        (["--url", "https://api.test", "--bucket", BUCKET, "--wait", "-1"], "--wait must be 0 or more"),
        (["--url", "https://api.test", "--bucket", BUCKET], "no API key"),
        (["--url", "ftp://api.test", "--bucket", BUCKET, "--api-key", "k"], "must start with https://"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    tmp_path: Path, argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Given no key in the environment and a file
    monkeypatch.delenv(taxi_loader.API_KEY_VARIABLE, raising=False)
    path = write(tmp_path / "trips.csv", [HEADER, ROWS[0]])
    # When the command line is wrong, Then it stops with exit 2 and a message naming the problem
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(path), *argv])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("trips.json", b"{}", "a trip file is one of .csv, .csv.gz, .parquet"),
        ("empty.csv", b"", "the file has no CSV line"),
        ("broken.parquet", b"not parquet", "not a Parquet file"),
    ],
)
def test_a_file_that_is_no_trip_file_is_a_usage_error_and_nothing_goes_up(
    s3: RecordingS3, tmp_path: Path, capsys: Any, name: str, content: bytes, message: str
) -> None:
    # Given a file of another format, an empty CSV, or a broken Parquet file
    path = tmp_path / name
    path.write_bytes(content)
    api = FakeLoadsApi(s3)
    # When it is loaded, Then exit 2 names the problem; no object, no load
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(path), *CLEAN_ARGS], api=api, s3=s3)
    assert stopped.value.code == 2 and message in capsys.readouterr().err
    assert "Versions" not in s3.list_object_versions(Bucket=BUCKET) and api.starts == []


def test_a_missing_file_is_a_usage_error(tmp_path: Path, capsys: Any) -> None:
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(tmp_path / "nope.csv"), *CLEAN_ARGS])
    assert stopped.value.code == 2 and "is not a file" in capsys.readouterr().err


def test_the_exit_statuses_are_in_the_help(capsys: Any) -> None:
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main(["--help"])
    assert stopped.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 every data line was stored" in text and "3 incomplete" in text and "130 interrupted" in text


# --- the API over HTTP ---------------------------------------------------------------------------


class Response(io.BytesIO):
    status = 202

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_the_http_api_posts_the_key_and_version_with_the_api_key_and_retries_a_503(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an API that answers 503 once, then 202
    sent: list[urllib.request.Request] = []

    def urlopen(request: urllib.request.Request, timeout: float) -> Response:
        sent.append(request)
        if len(sent) == 1:
            raise urllib.error.HTTPError(request.full_url, 503, "busy", {}, io.BytesIO(b'{"message": "busy"}'))  # type: ignore[arg-type]
        return Response(b'{"loadId": "load-1", "status": "RUNNING"}')

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    pauses: list[float] = []
    api = HttpLoadsApi("https://api.test/", "the-key", sleep=pauses.append)
    # When a load is started
    answer = api.start_load("incoming/abc/trips.csv", "v1")
    # Then the same request went twice, after a pause, to POST /loads with the key and the object version
    assert answer == Answer(202, {"loadId": "load-1", "status": "RUNNING"}) and len(pauses) == 1
    assert [(request.get_method(), request.full_url) for request in sent] == [("POST", "https://api.test/loads")] * 2
    assert all(request.data == sent[0].data for request in sent)
    assert json.loads(sent[0].data) == {"key": "incoming/abc/trips.csv", "versionId": "v1"}  # type: ignore[arg-type]
    assert sent[0].get_header("Authorization") == "the-key"


def test_the_http_api_reads_a_load_by_its_id_and_gives_up_after_its_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an API that never answers
    urls: list[str] = []

    def urlopen(request: urllib.request.Request, timeout: float) -> Response:
        urls.append(request.full_url)
        raise urllib.error.URLError("connection refused")

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    api = HttpLoadsApi("https://api.test", "k", attempts=3, sleep=lambda _: None)
    # When a load is read, Then GET /loads/{LoadId} was tried 3 times, then ApiUnavailable
    with pytest.raises(taxi_loader.ApiUnavailable, match="no answer after 3 attempts"):
        api.get_load("load-abc")
    assert urls == ["https://api.test/loads/load-abc"] * 3


# --- the stack's outputs -------------------------------------------------------------------------


def outputs(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "cdk-outputs-dev.json"
    path.write_text(json.dumps(document))
    return path


def test_env_reads_the_url_the_bucket_and_the_secret_from_the_taxi_stacks_outputs(tmp_path: Path, moto_aws: None) -> None:
    # Given a deployed environment's outputs file and the key in Secrets Manager
    import boto3

    arn = boto3.client("secretsmanager", region_name="eu-west-1").create_secret(Name="taxi-key", SecretString="the-key")["ARN"]
    stack_outputs = {
        contract.OUTPUT_API_URL: "https://abc.execute-api.eu-west-1.amazonaws.com/",
        contract.OUTPUT_API_KEY_SECRET_ARN: arn,
        contract.OUTPUT_INGEST_BUCKET: BUCKET,
    }
    path = outputs(tmp_path, {"Onceflow-dev-EventLog": {"LogTableName": "t"}, "Onceflow-dev-TaxiEtl": stack_outputs})
    # When the loader resolves --env
    stack = taxi_loader.api_from_outputs(path, "dev")
    # Then it has the API's URL, the ingest bucket, the stack's region and the key from the secret (no local endpoint)
    assert (stack.api_url, stack.bucket, stack.region, stack.local) == (stack_outputs[contract.OUTPUT_API_URL], BUCKET, "eu-west-1", None)
    assert taxi_loader.read_api_key(stack.secret_arn) == "the-key"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"Onceflow-dev-EventLog": {}}, "has 0 stacks ending in -TaxiEtl"),
        ({"Onceflow-dev-TaxiEtl": {"ApiUrl": "https://x/", "ApiKeySecretArn": "arn"}}, "has no outputs ['IngestBucketName']"),
        ([], "is not a CDK outputs file"),
    ],
)
def test_an_outputs_file_without_what_the_loader_needs_is_a_usage_error(tmp_path: Path, document: Any, message: str, capsys: Any) -> None:
    # Given an outputs file without the taxi stack, or of a stack deployed before the bulk route
    path = outputs(tmp_path, document)
    data = write(tmp_path / "trips.csv", [HEADER, ROWS[0]])
    # When the loader runs with --env, Then it stops with exit 2 and says what is missing
    with pytest.raises(SystemExit) as stopped:
        taxi_loader.main([str(data), "--env", "dev", "--outputs-file", str(path), "--api-key", "k"])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_on_the_local_cloud_s3_is_its_endpoint_with_its_key_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given `make serve`'s cloud as its outputs file names it, and no AWS variable set
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    local = LocalCloud("http://127.0.0.1:4566", "eu-central-1", "dummy-id", "dummy-secret")
    # When the loader makes its S3 client
    client = taxi_loader._client("s3", None, None, local)
    # Then it talks to the local endpoint, in its region, with its dummy key pair
    credentials = client._request_signer._credentials
    assert (client.meta.endpoint_url, client.meta.region_name) == ("http://127.0.0.1:4566", "eu-central-1")
    assert (credentials.access_key, credentials.secret_key) == ("dummy-id", "dummy-secret")


def test_the_key_comes_from_the_environment_when_not_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the key in ONCEFLOW_API_KEY and a region for the S3 client
    monkeypatch.setenv(taxi_loader.API_KEY_VARIABLE, "from-env")
    args = taxi_loader.build_parser().parse_args([str(tmp_path), "--url", "https://api.test/", "--bucket", BUCKET])
    # When the target is built, Then the API client has it, and the bucket is --bucket
    bucket, api, _ = taxi_loader._target(args)
    assert bucket == BUCKET and api.url == "https://api.test" and api._key == "from-env"


def test_without_tqdm_the_loader_runs_without_bars(s3: RecordingS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the library installed without tqdm
    monkeypatch.setitem(sys.modules, "tqdm", None)
    path = write(tmp_path / "trips.csv", [HEADER, *ROWS])
    console = Console(io.StringIO(), io.StringIO(), True)
    # When a file is loaded with bars asked for, Then it loads, with no bar, and says why once
    assert load_file(path, FakeLoadsApi(s3), s3, BUCKET, console=console).exit_status == 0
    assert console.err.getvalue() == (  # type: ignore[attr-defined]
        "onceflow-taxi-load: no progress bars: tqdm is not installed (pip install 'onceflow[clients]')\n"
    )
