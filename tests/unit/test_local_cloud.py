"""`--env local`: what the outputs file of `make serve` gives a tool or a client, and what still wins over it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from onceflow.clients.local import LocalCloud, LocalCloudError, local_cloud, missing_file

CLOUD = LocalCloud("http://127.0.0.1:8410", "us-east-1", "onceflow-local", "onceflow-local-secret")
FILE_KEYS = {"aws_access_key_id": "onceflow-local", "aws_secret_access_key": "onceflow-local-secret"}


@pytest.mark.parametrize(
    ("region", "profile", "environ", "expected"),
    [
        pytest.param(None, None, {}, {"region_name": "us-east-1", **FILE_KEYS}, id="nothing-given-the-file"),
        pytest.param("eu-west-1", None, {"AWS_DEFAULT_REGION": "us-west-2"}, {"region_name": "eu-west-1", **FILE_KEYS}, id="region-flag"),
        pytest.param(None, None, {"AWS_DEFAULT_REGION": "us-west-2"}, {"region_name": "us-west-2", **FILE_KEYS}, id="default-region"),
        pytest.param(None, None, {"AWS_REGION": "ap-south-1"}, {"region_name": "ap-south-1", **FILE_KEYS}, id="aws-region"),
        pytest.param(None, "ops", {}, {"region_name": "us-east-1", "profile_name": "ops"}, id="profile-flag"),
        pytest.param(None, None, {"AWS_PROFILE": "ops"}, {"region_name": "us-east-1"}, id="profile-variable"),
        pytest.param(None, None, {"AWS_ACCESS_KEY_ID": "AKIA"}, {"region_name": "us-east-1"}, id="key-variables"),
    ],
)
def test_flags_and_variables_win_over_the_file(
    region: str | None, profile: str | None, environ: dict[str, str], expected: dict[str, str]
) -> None:
    # When the session options are made with these flags and this environment
    options = CLOUD.session_options(region=region, profile=profile, environ=environ)
    # Then what is given explicitly wins; the file's region and key pair fill in the rest
    assert options == expected


def test_aws_endpoint_url_wins_over_the_files_endpoint() -> None:
    # When AWS_ENDPOINT_URL is set, Then it is the endpoint; else the file's
    assert CLOUD.endpoint({"AWS_ENDPOINT_URL": "http://127.0.0.1:9999"}) == "http://127.0.0.1:9999"
    assert CLOUD.endpoint({}) == "http://127.0.0.1:8410"


def test_the_outputs_of_make_serve_name_one_local_cloud_and_a_deployed_file_none() -> None:
    # Given the outputs `make serve` writes (the local cloud in every stack)
    document = {
        "Onceflow-local-EventLog": {"ApiUrl": "http://127.0.0.1:8411", **CLOUD.outputs()},
        "Onceflow-local-TaxiEtl": CLOUD.outputs(),
    }
    # Then it names that cloud; a deployed environment's file names none
    assert local_cloud(document, "f.json") == CLOUD
    assert local_cloud({"Onceflow-dev-EventLog": {"ApiUrl": "https://x.execute-api.eu-west-1.amazonaws.com/"}}, "f.json") is None


def test_a_file_of_an_older_serve_or_of_two_servers_is_refused_in_one_line() -> None:
    # Given a file with only the endpoint (before the region and key pair were written), or two endpoints
    older = {"Onceflow-local-EventLog": {"LocalEndpointUrl": "http://127.0.0.1:8410"}}
    mixed = {"A-EventLog": CLOUD.outputs(), "A-TaxiEtl": {**CLOUD.outputs(), "LocalEndpointUrl": "http://127.0.0.1:9410"}}
    # Then each is refused, saying to start `make serve`
    for document in (older, mixed):
        with pytest.raises(LocalCloudError, match="start `make serve`"):
            local_cloud(document, "f.json")


def test_a_cloud_that_does_not_answer_says_to_start_make_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a local cloud on a port nothing listens on (no socket in unit tests: the refusal the OS gives;
    # tests/integration/local/test_local_round_trips.py probes a real closed port)
    def refused(address: tuple[str, int], timeout: float) -> socket.socket:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refused)
    port = 8499
    stale = LocalCloud(f"http://127.0.0.1:{port}", "us-east-1", "k", "s")
    # When it is checked, Then the error is one line naming the file and saying to start `make serve`
    with pytest.raises(LocalCloudError) as refused:
        stale.check_running("cdk-outputs-local.json")
    assert "\n" not in str(refused.value)
    assert f"127.0.0.1:{port} named by cdk-outputs-local.json does not answer" in str(refused.value)
    assert "start `make serve`" in str(refused.value)


def test_a_missing_file_says_to_start_make_serve(tmp_path: Path) -> None:
    # When there is no outputs file, Then the line names where it was looked for and what writes it
    line = missing_file(tmp_path / "cdk-outputs-local.json")
    assert str(tmp_path / "cdk-outputs-local.json") in line and "start `make serve`" in line
