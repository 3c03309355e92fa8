"""`make serve`'s bulk route over real HTTP: a file put under incoming/ of the ingest bucket (through the moto
server, as the loader puts it) is loaded by its ObjectCreated event (moto's S3 -> the starter queue -> the load
starter, polled as its event source mapping would), the bulk state machine runs on moto's executor with its Plan,
Chunk and Report tasks routed to their entry points, and GET /loads/{LoadId} answers its progress, then its report.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from devtools.local.stack import LocalStack
from devtools.taxi_rows import sample_header, sample_lines
from runtime.taxi_etl import contract as taxi_etl_contract
from runtime.taxi_etl.loads import load_id
from tests.integration.local.test_local_round_trips import call, eventually

LINES = sample_lines()[:30]  # one chunk: dev's chunks are 2,000 lines


def test_a_file_put_under_incoming_is_loaded_and_its_report_read_over_http(local_stack: LocalStack) -> None:
    # Given the local stack's ingest bucket, and 30 real trip lines with the export's header
    bucket = local_stack.outputs["Onceflow-local-TaxiEtl"][taxi_etl_contract.OUTPUT_INGEST_BUCKET]
    key = f"{taxi_etl_contract.INGEST_PREFIX}local-{uuid.uuid4().hex[:12]}.csv"
    body = ("\n".join([sample_header(), *LINES]) + "\n").encode()
    auth = {"Authorization": local_stack.api_key}
    # When the file is put there (nothing else: its ObjectCreated event starts the load)
    version = local_stack.client("s3").put_object(Bucket=bucket, Key=key, Body=body)["VersionId"]
    loaded = load_id(bucket, key, version)

    # Then GET /loads/{LoadId} answers, and once the load has ended, with its report
    def reported() -> dict[str, Any] | None:
        status, answer = call("GET", f"{local_stack.taxi_url}/loads/{loaded}", None, auth)
        assert status in (200, 404), (status, answer)  # 404 until the starter's poll has started it
        return answer if status == 200 and "report" in answer else None

    answer = eventually(reported, timeout=60, what=f"the report of {loaded}")
    assert (answer["loadId"], answer["execution"], answer["status"]) == (loaded, loaded, "SUCCEEDED")
    report = answer["report"]
    assert (report["bucket"], report["key"], report["versionId"]) == (bucket, key, version)
    assert (report["chunks"], report["chunksDone"], report["lines"], report["rowsRead"]) == (1, 1, 31, 30)
    assert report["stored"] + report["alreadyStored"] == 30 and report["error"] is None
    # and POST /loads for the same file joins that load: the one execution, already SUCCEEDED
    status, again = call(
        "POST",
        f"{local_stack.taxi_url}{taxi_etl_contract.ROUTE_LOADS}",
        json.dumps({"key": key}).encode(),
        {**auth, "Content-Type": "application/json"},
    )
    assert (status, again) == (200, {"loadId": loaded, "execution": loaded, "status": "SUCCEEDED"})
