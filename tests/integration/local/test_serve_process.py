"""`make serve` as a process: from a second shell with nothing exported, the smoke test, an operator
tool and both clients run with `--env local` alone; and the server ends within 5 s of SIGTERM or
SIGINT, with work still in flight, leaving no process and no outputs file behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from devtools.taxi_rows import sample_header, sample_lines
from runtime.taxi_etl import contract as taxi_etl_contract
from tests.integration.local.serve_process import ROOT, ServedProcess, alive, descendants, served

STOP_LIMIT_SECONDS = 5.0


def run(server: ServedProcess, *command: str) -> subprocess.CompletedProcess[str]:
    """A command of the second shell: the server's clean environment (no AWS_* variable, an empty HOME)."""
    return subprocess.run(
        [sys.executable, "-m", *command, "--outputs-file", str(server.outputs_file)],
        cwd=ROOT,
        env=server.environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_from_a_second_shell_with_nothing_exported_the_tools_and_clients_reach_the_local_stack(dev_assembly: Path, tmp_path: Path) -> None:
    # Given `make serve` running, and a shell with no AWS variable and no ~/.aws
    with served(dev_assembly, tmp_path) as server:
        # When the smoke test runs with --env local
        smoke = run(server, "ops.smoke", "--env", "local")
        # Then its three steps pass
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr
        assert "3 of 3 passed" in smoke.stdout
        # When an operator tool runs with --env local, Then it reads the embedded cloud's table
        pending = run(server, "ops.event_log_pending", "--env", "local")
        assert pending.returncode == 0, pending.stdout + pending.stderr
        # When the event-log client appends a cell and reads the log back with --env local
        appended = run(server, "onceflow.clients.event_log", "--env", "local", "append", "second-shell", "B12", "42")
        assert appended.returncode == 0, appended.stderr
        read = run(server, "onceflow.clients.event_log", "--env", "local", "snapshot", "second-shell")
        # Then the append is signed with the file's key pair and read back
        assert read.returncode == 0, read.stderr
        assert [entry["position"] for entry in json.loads(read.stdout)["entries"]] == [json.loads(appended.stdout)["position"]]
        # When the taxi loader loads a few real rows with --env local (the API key read from the embedded secret)
        trips = tmp_path / "trips.csv"
        trips.write_text("\n".join([sample_header(), *sample_lines()[:5]]) + "\n")
        loaded = run(server, "onceflow.clients.taxi_loader", str(trips), "--env", "local", "--no-progress")
        # Then every row is stored
        assert loaded.returncode == 0, loaded.stdout + loaded.stderr
        assert "ALL STORED" in loaded.stdout


def post_batch(server: ServedProcess) -> int:
    """A batch of 100 real rows posted to the taxi API: its state machine execution starts and runs on."""
    url = server.value("taxi API") + taxi_etl_contract.ROUTE_TRIP_BATCH
    request = urllib.request.Request(
        url,
        data="\n".join(sample_lines()[:100]).encode(),
        method="POST",
        headers={"Authorization": server.value("API key"), "Content-Type": "text/csv"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:  # the local server's own URL
        return int(response.status)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_ends_within_5_seconds_of_a_signal_with_work_in_flight(dev_assembly: Path, tmp_path: Path, stop: signal.Signals) -> None:
    # Given the server with a batch of rows accepted and its execution under way
    with served(dev_assembly, tmp_path) as server:
        assert server.outputs_file.exists()
        assert post_batch(server) == 202
        children = descendants(server.process.pid)
        # When the signal is sent
        sent = time.monotonic()
        server.process.send_signal(stop)
        status = server.process.wait(timeout=60)
        took = time.monotonic() - sent
    # Then it ended within 5 s with exit status 0, after saying so
    assert took < STOP_LIMIT_SECONDS, f"took {took:.1f} s:\n{server.text()}"
    assert status == 0, server.text()
    assert "stopping..." in server.text() and "stopped" in server.text()
    # and it left no process behind, nor the outputs file naming an endpoint that no longer answers
    assert [pid for pid in children if alive(pid)] == []
    assert not server.outputs_file.exists()
