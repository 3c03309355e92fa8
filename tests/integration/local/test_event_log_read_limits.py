"""The issue's log, tried as a new user would on `make serve` with the dev defaults (a snapshot every
1,000 events): 360 appends of 2,697 control characters each (16 KB bodies, each a 201). Before,
`GET /logs/{id}/snapshot` answered 500: the function's result was 6,466,362 bytes, past Lambda's
6 MB (each stored control character is 7 bytes there), and the log stayed unreadable. Now every
page is cut to fit, and the client reads all 360 values back."""

from __future__ import annotations

import json
from pathlib import Path

import boto3

from onceflow.clients.event_log import EventLogClient, api_url_from_outputs_file
from onceflow.clients.local import local_cloud
from tests.integration.local.serve_process import served

APPENDS = 360
VALUE = "\x01" * 2697
DEV_MAX_BODY_BYTES = 16_384


def test_a_log_of_360_control_character_values_reads_back_in_full_through_make_serve(dev_assembly: Path, tmp_path: Path) -> None:
    # Given `make serve` with the dev defaults, and a client signing with the key pair of its outputs file
    with served(dev_assembly, tmp_path) as server:
        cloud = local_cloud(json.loads(server.outputs_file.read_text()), server.outputs_file)
        assert cloud is not None
        session = boto3.session.Session(**cloud.session_options(environ={}))
        with EventLogClient(api_url_from_outputs_file(server.outputs_file), session=session) as client:
            # When 360 values of 2,697 control characters are appended (a body of 16,2xx bytes each, under dev's 16 KiB)
            body = json.dumps({"request_id": "x" * 36, "position": APPENDS, "event": {"kind": "SetCell", "cell": "A360", "value": VALUE}})
            assert 16_000 < len(body.encode()) <= DEV_MAX_BODY_BYTES
            appended = [client.append("issue-34", f"A{position}", VALUE, position=position) for position in range(1, APPENDS + 1)]
            # and the whole log is read back, page by page
            pages = list(client.snapshot_pages("issue-34"))
            latest = client.read_snapshot("issue-34")
        output = server.text()
    # Then every append was new, and every page was answered: more than one, as one would have been 6.5 MB
    assert [result.duplicate for result in appended] == [False] * APPENDS
    assert len(pages) >= 2 and all(page.entries for page in pages)
    # and the log reads back in full: no snapshot yet, and all 360 values, in order
    assert latest.snapshot is None and latest.next_position == APPENDS + 1
    assert [(entry["position"], entry["value"]) for entry in latest.entries] == [(position, VALUE) for position in range(1, APPENDS + 1)]
    # and the server logged no oversized response, nor any other failure
    assert "LambdaResponseTooLarge" not in output and "Traceback" not in output, output[-2000:]
