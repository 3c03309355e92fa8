"""What the functions deploy, read from the built directories and the synthesized stacks: the code
asset and the SDK layer (onceflow/infra/lambda_assets.py) carry the lock's SDK and bytecode that
Lambda's python3.13 uses as it is, build the same bytes twice, and hold every service model the
handlers need; each function runs Powertools' layer, then the SDK layer."""

from __future__ import annotations

import email
import importlib.metadata
import importlib.util
import json
import marshal
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Annotations, Match, Template
from packaging.utils import canonicalize_name
from packaging.version import Version

from devtools.aws.template_resources import resources_of_type
from onceflow.constructs import CommonProps, ConfigError, RunnerStatsPipeline, RunnerStatsPipelineProps
from onceflow.infra import lambda_assets, lambda_factory
from onceflow.infra.lambda_assets import LAMBDA_PYTHON, SDK_VERSIONS, build_code_asset, build_sdk_layer, used_services
from tests.conftest import assembly_for
from tests.infra.template_queries import EVERY_HANDLER, sdk_layer_ref
from tests.unit.test_setup import lock_pins

HANDLERS = sorted(EVERY_HANDLER)
# importlib's flags word of a hash-based .pyc whose source is never checked (PEP 552).
UNCHECKED_HASH_FLAGS = 0b01


@pytest.fixture(scope="module")
def code_asset() -> Path:
    return build_code_asset()


@pytest.fixture(scope="module")
def sdk_layer() -> Path:
    return build_sdk_layer()


def files_with_bytes(directory: Path) -> dict[str, bytes]:
    return {path.relative_to(directory).as_posix(): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()}


def modules(top: Path) -> Iterator[Path]:
    return (path for path in sorted(top.rglob("*.py")) if "__pycache__" not in path.parts)


# --- the SDK layer's versions -----------------------------------------------------------------------


def test_the_layer_ships_exactly_the_locks_sdk(sdk_layer: Path) -> None:
    # Given the built layer's distributions, as its dist-info metadata names them
    shipped = {}
    for metadata in (sdk_layer / "python").glob("*.dist-info/METADATA"):
        message = email.message_from_bytes(metadata.read_bytes())
        shipped[canonicalize_name(message["Name"])] = Version(message["Version"])
    # Then they are the SDK distributions at the lock's versions, and nothing else
    pins = lock_pins()
    assert shipped == {canonicalize_name(name): pins[canonicalize_name(name)] for name in SDK_VERSIONS}
    # and the packages themselves are at the root of python/, where Lambda puts /opt/python on sys.path
    for package in ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3"):
        assert (sdk_layer / "python" / package / "__init__.py").is_file(), package
    assert (sdk_layer / "python" / "six.py").is_file()
    assert sorted(path.name for path in sdk_layer.iterdir()) == ["python"]


def test_botocore_data_is_kept_to_the_services_the_functions_call(sdk_layer: Path) -> None:
    # Given the layer's botocore data
    data = sdk_layer / "python" / "botocore" / "data"
    # Then it holds the models of exactly the services runtime/ builds clients of, and what every client reads
    assert sorted(path.name for path in data.iterdir() if path.is_dir()) == list(used_services())
    assert sorted(path.name for path in data.iterdir() if path.is_file()) == sorted(lambda_assets.BOTOCORE_SHARED_DATA)


# --- the endpoints table --------------------------------------------------------------------------

# The endpoints table's keys of used_services(): each model's endpointPrefix (Step Functions' is `states`).
USED_ENDPOINT_PREFIXES = ("dynamodb", "s3", "secretsmanager", "sqs", "states")
# A region of each partition a function may be deployed in; a service is checked where the full table lists it.
REGIONS = ("us-east-1", "eu-west-1", "ap-east-1", "cn-north-1", "us-gov-west-1", "us-iso-east-1")


def full_endpoints_table() -> bytes:
    """The endpoints table of the suite's own botocore (the lock's), all services."""
    return Path(str(importlib.metadata.distribution("botocore").locate_file("botocore/data/endpoints.json"))).read_bytes()


def test_the_layers_endpoints_table_keeps_every_partition_and_the_used_services_entries_alone(sdk_layer: Path) -> None:
    # Given botocore's full endpoints table and the layer's
    full_bytes = full_endpoints_table()
    full, pruned = json.loads(full_bytes), json.loads((sdk_layer / "python" / lambda_assets.ENDPOINTS_TABLE).read_bytes())
    # Then every partition is there, in the same order, and the table's own fields are unchanged
    assert [partition["partition"] for partition in pruned["partitions"]] == [partition["partition"] for partition in full["partitions"]]
    assert {key: value for key, value in pruned.items() if key != "partitions"} == {
        key: value for key, value in full.items() if key != "partitions"
    }
    for kept, original in zip(pruned["partitions"], full["partitions"], strict=True):
        # and each partition's metadata (regions, regionRegex, dnsSuffix, defaults with their variants) is as it was
        assert {key: value for key, value in kept.items() if key != "services"} == {
            key: value for key, value in original.items() if key != "services"
        }
        # and its services are the used services' entries alone, each exactly as the full table has it
        assert kept["services"] == {
            prefix: original["services"][prefix] for prefix in USED_ENDPOINT_PREFIXES if prefix in original["services"]
        }
    assert list(pruned["partitions"][0]["services"]) == list(USED_ENDPOINT_PREFIXES)
    # and what a cold start parses is a small part of the full table
    assert len((sdk_layer / "python" / lambda_assets.ENDPOINTS_TABLE).read_bytes()) * 20 < len(full_bytes)


ENDPOINT_PROBE = """
import json, sys
sys.path[:0] = json.loads(sys.argv[1])
import botocore.session
from botocore.exceptions import UnknownServiceError
from runtime.shared.aws import client_config

cases, not_kept = json.loads(sys.argv[2]), json.loads(sys.argv[3])
CALLS = {"dynamodb": ("list_tables", {}), "s3": ("list_objects_v2", {"Bucket": "bucket"}), "secretsmanager": ("list_secrets", {}),
         "sqs": ("list_queues", {}), "stepfunctions": ("list_state_machines", {})}
KEYS = {"aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": "dummy"}


class Sent(Exception):
    pass


def stop(request, **_):
    raise Sent(request.url, request.headers["Authorization"].decode())


session = botocore.session.get_session()
resolved = []
for service, region, config in cases:
    client = session.create_client(service, region_name=region, config=client_config(service) if config == "functions" else None, **KEYS)
    client.meta.events.register("before-send", stop)
    operation, parameters = CALLS[service]
    try:
        getattr(client, operation)(**parameters)
        raise AssertionError("the request was not stopped before it was sent")
    except Sent as sent:
        url, authorization = sent.args
    scope = authorization.split("Credential=")[1].split(",")[0].split("/")
    case = {"case": [service, region, config], "url": url, "signing_region": scope[2], "signing_name": scope[3]}
    if service == "s3":
        presigned = client.generate_presigned_url("get_object", Params={"Bucket": "bucket", "Key": "key"})
        base, query = presigned.split("?")
        fields = dict(field.split("=", 1) for field in query.split("&"))
        case["presigned"] = {"url": base, "fields": sorted(fields), "scope": fields.get("X-Amz-Credential", "").split("%2F")[2:4]}
    resolved.append(case)
refused = {}
for service in not_kept:
    try:
        session.create_client(service, region_name="eu-west-1", **KEYS)
        refused[service] = None
    except UnknownServiceError as error:
        refused[service] = type(error).__name__
print(json.dumps({"botocore": botocore.__file__, "builtin_data": session.get_component("endpoint_resolver").uses_builtin_data,
                  "resolved": resolved, "refused": refused}))
"""


def test_clients_on_the_layers_table_resolve_every_endpoint_as_on_the_full_one(code_asset: Path, sdk_layer: Path) -> None:
    # Given each used service in a region of each partition where the full table lists it, with botocore's
    # defaults and with the functions' own config (regional S3 addressing, SigV4 presigning)
    full = json.loads(full_endpoints_table())
    partitions = {partition["partition"]: partition for partition in full["partitions"]}
    cases = []
    for service, prefix in zip(used_services(), USED_ENDPOINT_PREFIXES, strict=True):
        for region in REGIONS:
            partition = next(partition for partition in partitions.values() if region in partition["regions"])
            if region in partition["services"].get(prefix, {}).get("endpoints", {}):
                cases += [[service, region, "defaults"], [service, region, "functions"]]
    assert {region for _, region, _ in cases} == set(REGIONS)
    assert len(cases) >= 2 * len(REGIONS) * 3
    not_kept = ["sts", "lambda"]
    # When a fresh interpreter on the layer alone (and the code asset, for the config) and one on the suite's
    # botocore each build those clients, stop each request before it is sent, and presign an S3 GET
    environment = {"PATH": os.environ.get("PATH", ""), "AWS_EC2_METADATA_DISABLED": "true"}
    environment |= {"AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    arguments = [json.dumps(cases), json.dumps(not_kept)]
    on_layer = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", ENDPOINT_PROBE, json.dumps([str(code_asset), str(sdk_layer / "python")]), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    on_full = subprocess.run(
        [sys.executable, "-I", "-c", ENDPOINT_PROBE, json.dumps([str(code_asset)]), *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )
    layer_out, layer_err = on_layer.communicate(timeout=120)
    assert on_layer.returncode == 0, layer_err[-3000:]
    assert on_full.returncode == 0, on_full.stderr[-3000:]
    pruned, unpruned = json.loads(layer_out), json.loads(on_full.stdout)
    # Then each botocore is the one meant, and both read their table as botocore's own data (no custom-endpoint path)
    assert pruned["botocore"].startswith(str(sdk_layer / "python")) and not unpruned["botocore"].startswith(str(sdk_layer))
    assert pruned["builtin_data"] is unpruned["builtin_data"] is True
    # and every request went to the same URL, signed for the same service and region, and every presigned URL is the same
    assert [case["case"] for case in pruned["resolved"]] == cases
    assert pruned["resolved"] == unpruned["resolved"]
    # (in every partition of REGIONS: each one's DNS suffix ends some request's host)
    hosts = [case["url"].split("/")[2] for case in pruned["resolved"]]
    for region in REGIONS:
        suffix = next(partition["dnsSuffix"] for partition in partitions.values() if region in partition["regions"])
        assert any(host.endswith(f".{region}.{suffix}") for host in hosts), (region, suffix)
    # and a service whose models and entries the layer does not keep is refused by name, not resolved some other way
    assert pruned["refused"] == {service: "UnknownServiceError" for service in not_kept}
    assert unpruned["refused"] == {service: None for service in not_kept}


# --- bytecode ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("built", "deployed_at"), [("code_asset", "/var/task"), ("sdk_layer", "/opt/python")])
def test_every_module_has_bytecode_python313_uses_without_checking_the_source(
    built: str, deployed_at: str, request: pytest.FixtureRequest
) -> None:
    # Given the built directory and the suite's interpreter, which is the functions' Python
    assert sys.version_info[:2] == LAMBDA_PYTHON
    directory: Path = request.getfixturevalue(built)
    top = directory / "python" if built == "sdk_layer" else directory
    sources = list(modules(top))
    assert len(sources) > 50
    tag = "cpython-{}{}".format(*LAMBDA_PYTHON)
    for source in sources:
        # When we read each module's .pyc
        pyc = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        assert pyc.is_file(), f"no bytecode for {source}"
        data = pyc.read_bytes()
        # Then it is 3.13's bytecode, hash-based and unchecked, of this very source
        assert data[:4] == importlib.util.MAGIC_NUMBER, pyc
        assert int.from_bytes(data[4:8], "little") == UNCHECKED_HASH_FLAGS, pyc
        assert data[8:16] == importlib.util.source_hash(source.read_bytes()), pyc
        # and tracebacks name the file where Lambda puts it
        code = marshal.loads(data[16:])
        assert code.co_filename == f"{deployed_at}/{source.relative_to(top).as_posix()}"
    # and there is no bytecode without its source
    compiled = {pyc.parent.parent / (pyc.name.split(".")[0] + ".py") for pyc in top.rglob("*.pyc")}
    assert compiled == set(sources)


def test_two_builds_give_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given two empty caches
    builds = []
    for name in ("first", "second"):
        monkeypatch.setenv("ONCEFLOW_CACHE_DIR", str(tmp_path / name))
        # When the asset and the layer are built into each
        builds.append((files_with_bytes(build_code_asset()), files_with_bytes(build_sdk_layer())))
    # Then every file, bytecode included, is byte for byte the same (so is the CDK asset hash)
    (first_code, first_layer), (second_code, second_layer) = builds
    assert any(name.endswith(".pyc") for name in first_code) and any(name.endswith(".pyc") for name in first_layer)
    assert first_code == second_code
    assert first_layer == second_layer


def test_every_file_is_readable_by_lambdas_user(code_asset: Path, sdk_layer: Path) -> None:
    # Given the built directories
    for directory in (code_asset, sdk_layer):
        # Then files are 644 and directories 755 (Lambda runs the handler as another user than the owner)
        for path in directory.rglob("*"):
            assert path.stat().st_mode & 0o777 == (0o755 if path.is_dir() else 0o644), path


# --- the handlers on the asset and layer alone ----------------------------------------------------------

HANDLER_PROBE = """
import json, sys
asset, layer, powertools = sys.argv[1:4]
sys.path[:0] = [asset, layer, powertools]
import importlib
for module in json.loads(sys.argv[4]):
    importlib.import_module(module)
from aws_lambda_powertools.utilities.parameters import SecretsProvider
from runtime.shared.aws import Clients
clients = Clients()
names = sorted(name for name, member in vars(Clients).items() if isinstance(member, property))
built = {name: type(getattr(clients, name)).__name__ for name in names}
SecretsProvider(boto3_client=clients.secretsmanager)
import boto3, botocore, runtime
print(json.dumps({"clients": built, "botocore": botocore.__file__, "boto3": boto3.__file__, "runtime": runtime.__file__,
                  "versions": [boto3.__version__, botocore.__version__], "path": sys.path}))
"""


def powertools_only(directory: Path) -> Path:
    """What the Powertools layer provides beside the SDK: the package and its one other dependency."""
    directory.mkdir()
    for module in ("aws_lambda_powertools", "typing_extensions"):
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None
        origin = Path(spec.origin)
        target = origin.parent if origin.name == "__init__.py" else origin
        (directory / target.name).symlink_to(target)
    return directory


def test_every_handler_imports_and_builds_every_client_from_the_asset_and_layer_alone(
    code_asset: Path, sdk_layer: Path, tmp_path: Path
) -> None:
    # Given a fresh interpreter without site-packages: the asset, the SDK layer and Powertools only, as on Lambda
    environment = {"PATH": os.environ.get("PATH", ""), "AWS_DEFAULT_REGION": "eu-west-1"}
    environment |= {"AWS_ACCESS_KEY_ID": "AKIDUMMY", "AWS_SECRET_ACCESS_KEY": "dummy", "AWS_EC2_METADATA_DISABLED": "true"}
    handler_modules = [handler.rsplit(".", 1)[0] for handler in HANDLERS]
    paths = [str(code_asset), str(sdk_layer / "python"), str(powertools_only(tmp_path / "pt"))]
    # When it imports every handler module and builds every client the functions build (no call is made)
    command = [sys.executable, "-I", "-S", "-c", HANDLER_PROBE, *paths, json.dumps(handler_modules)]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    probe = json.loads(result.stdout)
    # Then each service's model was in the pruned layer
    assert probe["clients"] == {
        "dynamodb": "DynamoDB",
        "s3": "S3",
        "secretsmanager": "SecretsManager",
        "sqs": "SQS",
        "stepfunctions": "SFN",
    }
    # and the SDK and the code came from the layer and the asset, at the pinned versions
    assert probe["botocore"].startswith(str(sdk_layer / "python")) and probe["boto3"].startswith(str(sdk_layer / "python"))
    assert probe["runtime"].startswith(str(code_asset))
    assert probe["versions"] == [SDK_VERSIONS["boto3"], SDK_VERSIONS["botocore"]]
    assert not [entry for entry in probe["path"] if "site-packages" in entry]


# --- the synthesized stacks ---------------------------------------------------------------------------


def zip_assets(assembly: Path, stack: str) -> dict[str, Path]:
    """A stack's zip assets: object key -> the staged directory."""
    files = json.loads((assembly / f"{stack}.assets.json").read_text())["files"]
    return {
        destination["objectKey"]: assembly / asset["source"]["path"]
        for asset in files.values()
        if asset["source"]["packaging"] == "zip"
        for destination in asset["destinations"].values()
    }


def test_each_stack_has_one_sdk_layer_built_from_the_lock_and_every_function_runs_it_after_powertools(
    dev_templates: dict[str, Any], code_asset: Path, sdk_layer: Path
) -> None:
    assembly = assembly_for("dev")
    for stack, template in dev_templates.items():
        # the project's functions (CDK's inline deploy-time handlers, the taxi stack's bucket notifications', take no layer)
        functions = {
            logical_id: function
            for logical_id, function in resources_of_type(template, "AWS::Lambda::Function").items()
            if str(function["Properties"]["Handler"]).startswith("runtime.")
        }
        layers = resources_of_type(template, "AWS::Lambda::LayerVersion")
        if not functions:
            assert layers == {}, stack
            continue
        # Given the stack's one layer version
        ((layer_id, layer),) = layers.items()
        properties = layer["Properties"]
        # Then it is for python3.13 on arm64 and says which SDK it holds
        assert properties["CompatibleRuntimes"] == ["python3.13"]
        assert properties["CompatibleArchitectures"] == ["arm64"]
        for name, version in SDK_VERSIONS.items():
            assert f"{name} {version}" in properties["Description"]
        # and its content is the built layer, and every function's code the built asset
        staged = zip_assets(assembly, stack)
        assert files_with_bytes(staged[properties["Content"]["S3Key"]]) == files_with_bytes(sdk_layer)
        for function in functions.values():
            assert files_with_bytes(staged[function["Properties"]["Code"]["S3Key"]]) == files_with_bytes(code_asset)
            # and each function runs Powertools' layer first, the SDK layer last (its files win)
            layers_of_function = function["Properties"]["Layers"]
            assert set(layers_of_function[0]) == {"Ref"} and "powertools" in template["Parameters"][layers_of_function[0]["Ref"]]["Default"]
            assert layers_of_function[-1] == {"Ref": layer_id} == sdk_layer_ref(template)


def runner_stats_stack(common: CommonProps, outdir: Path) -> Stack:
    stack = Stack(App(outdir=str(outdir)), "Team")
    RunnerStatsPipeline(stack, "Runs", RunnerStatsPipelineProps(common=common))
    return stack


def test_without_the_sdk_layer_the_functions_run_the_runtimes_boto3(tmp_path: Path) -> None:
    # Given a construct whose CommonProps turn the SDK layer off
    template = Template.from_stack(runner_stats_stack(CommonProps(sdk_layer=False), tmp_path)).to_json()
    # Then there is no layer version, and the function runs Powertools' layer alone
    assert resources_of_type(template, "AWS::Lambda::LayerVersion") == {}
    ((_, function),) = resources_of_type(template, "AWS::Lambda::Function").items()
    (powertools,) = function["Properties"]["Layers"]
    assert "powertools" in template["Parameters"][powertools["Ref"]]["Default"]


def test_sdk_layer_must_be_a_bool(tmp_path: Path) -> None:
    # Given CommonProps with a string for sdk_layer, When a construct is built with it, Then synth stops
    with pytest.raises(ConfigError, match="sdk_layer must be True or False"):
        runner_stats_stack(CommonProps(sdk_layer="no"), tmp_path)  # type: ignore[arg-type]


def test_without_a_313_interpreter_the_assets_ship_sources_and_the_stack_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given no interpreter of the functions' Python to compile with
    monkeypatch.setenv("ONCEFLOW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(lambda_assets, "bytecode_compiler", lambda: None)
    monkeypatch.setattr(lambda_factory, "bytecode_compiler", lambda: None)
    # When a stack is built
    stack = runner_stats_stack(CommonProps(), tmp_path / "out")
    # Then the stack warns that cold starts will compile, and how to fix it
    Annotations.from_stack(stack).has_warning("/Team", Match.string_like_regexp("No python3.13 interpreter.*every cold start compiles"))
    Annotations.from_stack(stack).has_warning("/Team", Match.string_like_regexp("Put python3.13 on PATH"))
    # and the asset and the layer hold sources alone
    for built in (build_code_asset(), build_sdk_layer()):
        assert built.is_relative_to(tmp_path / "cache")
        assert any(built.rglob("*.py")) and not any(built.rglob("*.pyc"))
