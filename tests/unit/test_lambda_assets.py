"""The pieces of the code asset and SDK layer builder (onceflow/infra/lambda_assets.py) that need no
build: the pinned SDK, the refusal of another installed SDK, the services the functions call, the
choice of the interpreter that compiles, and the cache."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

from onceflow.infra import lambda_assets
from onceflow.infra.lambda_assets import (
    LAMBDA_PYTHON,
    SDK_VERSIONS,
    SdkVersionMismatch,
    check_sdk_versions,
    endpoint_prefixes,
    find_compiler,
    pruned_endpoints_table,
    used_services,
)
from runtime.shared import aws
from tests.unit.test_setup import lock_pins

# --- the pinned SDK ------------------------------------------------------------------------------


def test_sdk_versions_are_the_locks_pins() -> None:
    # Given the SDK versions the library ships in its layer and the dev environment's lock
    pins = lock_pins()
    # Then each is pinned in the lock at exactly that version
    assert {canonicalize_name(name): Version(version) for name, version in SDK_VERSIONS.items()} == {
        canonicalize_name(name): pins[canonicalize_name(name)] for name in SDK_VERSIONS
    }


def test_sdk_versions_are_the_whole_closure_of_boto3() -> None:
    # Given the requirements of every SDK distribution as installed
    import importlib.metadata

    from packaging.requirements import Requirement

    required = set()
    for name in SDK_VERSIONS:
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                required.add(canonicalize_name(requirement.name))
    # Then every one of them is in the layer too: the layer never falls back to the runtime's copy
    assert required <= {canonicalize_name(name) for name in SDK_VERSIONS}
    assert "boto3" in SDK_VERSIONS and "botocore" in SDK_VERSIONS


def test_the_installed_sdk_is_accepted() -> None:
    # Given the dev environment, installed from the lock
    # When the layer's versions are checked, Then nothing is refused
    check_sdk_versions()


def test_another_installed_sdk_is_refused_with_the_versions_and_a_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an environment whose botocore is newer and which has no six
    installed = dict(SDK_VERSIONS) | {"botocore": "1.99.0", "six": None}
    monkeypatch.setattr(lambda_assets, "installed_sdk_versions", lambda: installed)
    # When the layer's versions are checked
    with pytest.raises(SdkVersionMismatch) as refused:
        check_sdk_versions()
    # Then the message names what was found, what is needed, how to install it and how to opt out
    message = str(refused.value)
    assert "found botocore 1.99.0, six not installed" in message
    assert f"botocore {SDK_VERSIONS['botocore']}" in message
    assert f"pip install 'boto3=={SDK_VERSIONS['boto3']}' 'botocore=={SDK_VERSIONS['botocore']}'" in message
    assert "CommonProps(sdk_layer=False)" in message


# --- the services whose models the layer keeps -----------------------------------------------------


def test_used_services_are_every_client_the_functions_build() -> None:
    # Given the client properties of runtime/shared/aws.Clients, the one place the functions build SDK clients
    properties = sorted(name for name, member in vars(aws.Clients).items() if isinstance(member, property))
    # When the builder lists the services from runtime/'s source
    services = used_services()
    # Then they are the same services
    assert list(services) == properties == ["dynamodb", "s3", "secretsmanager", "sqs", "stepfunctions"]


def test_used_services_reads_literal_client_calls_only(tmp_path: Path) -> None:
    # Given a package with a client call, a call of another method, and a computed service name
    (tmp_path / "a.py").write_text('c._client("kinesis")\nc.client("sns")\nc._client(name)\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text('x = self._client("sqs")\n')
    # When the services are listed, Then only the literal _client calls count
    assert used_services(tmp_path) == ("kinesis", "sqs")


# --- the endpoints table ---------------------------------------------------------------------------


def test_endpoint_prefixes_are_the_keys_of_the_used_services_in_the_endpoints_table() -> None:
    # Given the services the functions call
    # When their keys in botocore's endpoints table are read from the installed models
    # Then each is the service's own name, except Step Functions' (`states`)
    assert endpoint_prefixes(used_services()) == ("dynamodb", "s3", "secretsmanager", "sqs", "states")


def partition(name: str, services: dict[str, object]) -> dict[str, object]:
    return {
        "defaults": {
            "hostname": "{service}.{region}.{dnsSuffix}",
            "variants": [{"hostname": "{service}-fips.{region}.{dnsSuffix}", "tags": ["fips"]}],
        },
        "dnsSuffix": f"{name}.example",
        "partition": name,
        "regionRegex": "^(us)\\-\\w+\\-\\d+$",
        "regions": {"us-east-1": {"description": "East"}},
        "services": services,
    }


def test_pruning_keeps_every_partition_as_it_is_and_the_given_services_entries_alone() -> None:
    # Given a table of two partitions, the first with services in an order of its own, the second with none kept
    sqs = {"endpoints": {"us-east-1": {"variants": [{"hostname": "sqs-fips.us-east-1.aws.example", "tags": ["fips"]}]}}}
    dynamodb = {"defaults": {"protocols": ["https"]}, "endpoints": {"local": {"hostname": "localhost:8000"}, "us-east-1": {}}}
    lambda_ = {"endpoints": {"us-east-1": {}}}
    table = {
        "partitions": [partition("aws", {"sqs": sqs, "lambda": lambda_, "dynamodb": dynamodb}), partition("aws-cn", {"lambda": lambda_})],
        "version": 3,
    }
    # When it is kept to dynamodb and sqs
    pruned = pruned_endpoints_table(json.dumps(table).encode(), ["dynamodb", "sqs"])
    # Then both partitions are there with their metadata, and only those services' entries, unchanged
    assert json.loads(pruned) == {
        "partitions": [partition("aws", {"sqs": sqs, "dynamodb": dynamodb}), partition("aws-cn", {})],
        "version": 3,
    }
    # and the table's own key order is kept (the order botocore iterates), whatever order the services are given in
    assert list(json.loads(pruned)["partitions"][0]["services"]) == ["sqs", "dynamodb"]
    assert pruned_endpoints_table(json.dumps(table).encode(), ["sqs", "dynamodb"]) == pruned
    # and it is compact JSON
    assert b" " not in pruned


# --- the interpreter that compiles ------------------------------------------------------------------


def test_the_running_interpreter_compiles_when_it_is_the_functions_python() -> None:
    # Given the suite's interpreter, which is the functions' Python (tests/infra/test_interpreter.py)
    import importlib.util

    # When the compiler is looked for with an empty PATH
    compiler = find_compiler(LAMBDA_PYTHON, "")
    # Then it is this interpreter, with its magic number
    assert compiler is not None
    assert compiler.executable == sys.executable
    assert compiler.magic == importlib.util.MAGIC_NUMBER


def make_executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_another_interpreter_finds_python313_on_path(tmp_path: Path) -> None:
    # Given a synthesizing interpreter of another version, and python3.13 on PATH
    import importlib.util

    name = "python{}.{}".format(*LAMBDA_PYTHON)
    (tmp_path / name).symlink_to(sys.executable)
    # When the compiler is looked for
    compiler = find_compiler((3, 11), str(tmp_path))
    # Then it is that python3.13, with its magic number
    assert compiler is not None
    assert compiler.executable == str(tmp_path / name)
    assert compiler.magic == importlib.util.MAGIC_NUMBER


def test_no_compiler_when_python313_is_missing_or_is_not_313(tmp_path: Path) -> None:
    # Given an interpreter of another version and nothing on PATH
    # Then there is no compiler
    assert find_compiler((3, 11), str(tmp_path)) is None
    # Given a python3.13 on PATH that says it is 3.12, and one that does not run (a pyenv shim of a version not selected)
    name = "python{}.{}".format(*LAMBDA_PYTHON)
    liar = tmp_path / "liar"
    liar.mkdir()
    make_executable(liar / name, "#!/bin/sh\necho 3 12 f30d0d0a\n")
    broken = tmp_path / "broken"
    broken.mkdir()
    make_executable(broken / name, "#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    # Then neither compiles
    assert find_compiler((3, 11), str(liar)) is None
    assert find_compiler((3, 11), str(broken)) is None


# --- the cache ------------------------------------------------------------------------------------


def test_a_second_build_is_a_cache_hit_that_builds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an empty cache and a first build of the code asset
    monkeypatch.setenv("ONCEFLOW_CACHE_DIR", str(tmp_path))
    first = lambda_assets.build_code_asset()
    assert first.parent == tmp_path / "lambda-assets"

    # When it is built again with building made impossible
    def no_build(*_: object, **__: object) -> None:
        raise AssertionError("rebuilt on a cache hit")

    monkeypatch.setattr(lambda_assets, "_fill", no_build)
    # Then the same directory comes back, and no temporary directory is left behind
    assert lambda_assets.build_code_asset() == first
    assert [path.name for path in (tmp_path / "lambda-assets").iterdir()] == [first.name]


def test_a_build_that_fails_leaves_nothing_in_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an empty cache and a build that fails half-way
    monkeypatch.setenv("ONCEFLOW_CACHE_DIR", str(tmp_path))

    def failing(root: Path, *_: object, **__: object) -> None:
        (root / "half-written").write_text("")
        raise OSError("disk full")

    monkeypatch.setattr(lambda_assets, "_fill", failing)
    # When the code asset is built
    with pytest.raises(OSError, match="disk full"):
        lambda_assets.build_code_asset()
    # Then the cache holds neither the half-built directory nor its temporary copy
    assert list((tmp_path / "lambda-assets").iterdir()) == []


def test_a_build_that_loses_the_race_returns_the_winners_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given another builder (a parallel test worker) that finishes the same asset while this one builds
    monkeypatch.setenv("ONCEFLOW_CACHE_DIR", str(tmp_path))
    real_fill = lambda_assets._fill
    winner: list[Path] = []

    def racing(root: Path, *args: object, **kwargs: object) -> None:
        real_fill(root, *args, **kwargs)  # type: ignore[arg-type]
        target = root.parent / root.name.split(".")[1]
        target.mkdir()
        (target / "winner").write_text("")
        winner.append(target)

    monkeypatch.setattr(lambda_assets, "_fill", racing)
    # When this build tries to move its copy into place
    built = lambda_assets.build_code_asset()
    # Then it returns the winner's directory, and its own copy is gone
    assert built == winner[0]
    assert (built / "winner").exists()
    assert [path.name for path in (tmp_path / "lambda-assets").iterdir()] == [built.name]
