"""The local stack (`make serve`) started in-process for the tests of this folder, and the one
socket rule that differs from the rest of the suite: these tests may talk to 127.0.0.1 (the moto
server and the two HTTP APIs on it), and to nothing else. Every other test stays socket-free
(--disable-socket in pyproject.toml).

`local_stack` (session scope) is a devtools.local.stack.LocalStack on ports the OS picks:

    event_log_url, taxi_url        the two HTTP APIs (http://127.0.0.1:<port>)
    api_key                        the taxi API key (read from the embedded secret)
    moto_endpoint                  the embedded cloud (http://127.0.0.1:<port>), for any SDK client
    region, access_key_id, secret_access_key    what a client of the embedded cloud uses
    outputs_file                   a cdk-outputs-local.json (in a tmp dir): Onceflow-local-<Kind> -> outputs, plus LocalEndpointUrl
    outputs                        the same, as a dict
    client(service)                a boto3 client of the embedded cloud
    aws_environment()              the AWS_* variables a subprocess needs
    snapshot_every                 events per snapshot: 10 here (SNAPSHOT_EVERY overridden), dev's is 1000

It is stopped after the last test of this folder (so no patch of moto outlives it), or at the end
of the session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.aws.template_resources import Template
from devtools.local.stack import LocalStack
from runtime.event_log import contract as event_log_contract

LOCAL_TESTS = Path(__file__).resolve().parent
LOCALHOST = ["127.0.0.1", "localhost"]
SNAPSHOT_EVERY = 10
_RUNNING: list[LocalStack] = []


def in_this_folder(item: pytest.Item | None) -> bool:
    return item is not None and LOCAL_TESTS in Path(item.path).resolve().parents


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Localhost only, for the tests of this folder (pytest-socket's allow_hosts marker); under
    pytest-xdist, all of them on one worker, one after the other, so the stack starts once and is
    stopped after the last of them (see pytest_runtest_teardown)."""
    parallel = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if in_this_folder(item):
            item.add_marker(pytest.mark.allow_hosts(LOCALHOST))
            if parallel:
                item.add_marker(pytest.mark.xdist_group("local-stack"))


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test of this folder, stop the stack: its servers, threads and moto patches."""
    if in_this_folder(item) and not in_this_folder(nextitem):
        while _RUNNING:
            _RUNNING.pop().stop()


@pytest.fixture(scope="session")
def local_stack(dev_templates: dict[str, Template], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    stack = LocalStack.start(dev_templates, overrides={event_log_contract.ENV_SNAPSHOT_EVERY: str(SNAPSHOT_EVERY)}, poll_interval=0.2)
    _RUNNING.append(stack)
    try:
        stack.write_outputs(tmp_path_factory.mktemp("local-stack") / "cdk-outputs-local.json")
        yield stack
    finally:
        stack.stop()
        if stack in _RUNNING:
            _RUNNING.remove(stack)


@pytest.fixture(scope="session")
def dev_assembly(dev_templates: dict[str, Template], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dev templates as a cloud assembly folder (what `cdk synth -o` writes and `make serve` reads)."""
    folder = tmp_path_factory.mktemp("dev-assembly")
    artifacts = {}
    for name, template in dev_templates.items():
        (folder / f"{name}.template.json").write_text(json.dumps(template))
        artifacts[name] = {"type": "aws:cloudformation:stack", "properties": {"templateFile": f"{name}.template.json"}}
    (folder / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    return folder
