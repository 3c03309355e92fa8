"""What the functions run, built as Lambda runs it: the code asset and the SDK layer, each with bytecode.

build_code_asset(): runtime/ (the only package the functions need of the project) and its bytecode.
build_sdk_layer(): the SDK the suite is tested with (SDK_VERSIONS, the lock's pins), copied from the
synthesizing environment's installed distributions, botocore's data kept to the services the
functions call (their models, and their entries of the endpoints table: botocore parses all of
endpoints.json, 1.25 MB, at each cold start's first client), and its bytecode. Lambda's own boto3
is whatever the runtime ships that month.

Bytecode: each module's `__pycache__/<name>.cpython-313.pyc`, compiled by an interpreter of the
functions' Python with invalidation mode UNCHECKED_HASH, so Lambda's read-only file system uses it as
it is and never compiles at a cold start; the paths inside name /var/task/... and /opt/python/... as
Lambda places them (tracebacks). It is compiled in a subprocess with a fixed PYTHONHASHSEED, so two
builds give the same bytes, hence the same CDK asset hash (nothing redeploys when nothing changed).
Without an interpreter of that version (this one, else `python3.13` on PATH), the directories hold
the sources alone and the functions compile at each cold start (bytecode_compiler() says so).

Both are built once per content into a cache directory outside the repository (onceflow_cache_dir()),
atomically (a temporary directory renamed into place), so parallel builds do not race and a later
synth only hashes its inputs. Nothing here imports the CDK: the cold-start bench uses it as it is.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Final

__all__ = [
    "LAMBDA_PYTHON",
    "SDK_VERSIONS",
    "BytecodeCompiler",
    "SdkVersionMismatch",
    "build_code_asset",
    "build_sdk_layer",
    "bytecode_compiler",
    "check_sdk_versions",
    "endpoint_prefixes",
    "find_compiler",
    "installed_sdk_versions",
    "pruned_endpoints_table",
    "used_services",
]

# The functions' Python (lambda_factory.PYTHON_RUNTIME is python3.13; tests/infra/test_interpreter.py ties them).
LAMBDA_PYTHON: Final = (3, 13)
# The SDK the functions ship in their layer: the versions the suite runs (requirements-dev.lock; a unit
# test compares them), the whole closure of boto3 on Python 3.13.
SDK_VERSIONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "boto3": "1.44.8",
        "botocore": "1.44.8",
        "s3transfer": "0.19.3",
        "jmespath": "1.1.0",
        "python-dateutil": "2.9.0.post0",
        "six": "1.17.0",
        "urllib3": "2.8.0",
    }
)
RUNTIME_PACKAGE: Final = Path(__file__).resolve().parent.parent / "runtime"
TASK_ROOT: Final = "/var/task"  # where Lambda unpacks the code asset
LAYER_ROOT: Final = "/opt/python"  # where a Python layer's python/ lands, on sys.path
# What botocore reads for any client of any service, beside the service's own directory.
BOTOCORE_SHARED_DATA: Final = ("_retry.json", "endpoints.json", "partitions.json", "sdk-default-configuration.json")
ENDPOINTS_TABLE: Final = PurePosixPath("botocore", "data", "endpoints.json")
# Written by the installer, not part of the distribution (RECORD would list bytecode and data not shipped).
_INSTALLER_FILES: Final = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})
# A change to what is built or how: a new cache key for everything.
_BUILD_FORMAT: Final = "2"
_HASH_SEED: Final = "0"
_COMPILE = """
import compileall, py_compile, sys
root, ddir = sys.argv[1], sys.argv[2]
ok = compileall.compile_dir(root, ddir=ddir, quiet=1, workers=1, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
sys.exit(0 if ok else 1)
"""


class SdkVersionMismatch(RuntimeError):
    """The synthesizing environment's boto3 (or one of its dependencies) is not the version the functions are tested with."""


@dataclass(frozen=True)
class BytecodeCompiler:
    """An interpreter of the functions' Python version, and its bytecode magic number."""

    executable: str
    magic: bytes


def onceflow_cache_dir() -> Path:
    """$ONCEFLOW_CACHE_DIR, else onceflow/ in the user's cache directory ($XDG_CACHE_HOME or ~/.cache)."""
    explicit = os.environ.get("ONCEFLOW_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "onceflow"


@functools.cache
def bytecode_compiler() -> BytecodeCompiler | None:
    """The interpreter that compiles the assets' bytecode (find_compiler), looked for once per process."""
    return find_compiler(sys.version_info[:2], os.environ.get("PATH", ""))


def find_compiler(running: tuple[int, int], search_path: str) -> BytecodeCompiler | None:
    """This interpreter if it is the functions' Python, else `python3.13` on search_path if it runs and
    is 3.13; None if there is neither (the assets then ship sources alone)."""
    if running == LAMBDA_PYTHON:
        candidate: str | None = sys.executable
    else:
        candidate = shutil.which("python{}.{}".format(*LAMBDA_PYTHON), path=search_path)
    if candidate is None:
        return None
    probe = "import importlib.util, sys; print(sys.version_info[0], sys.version_info[1], importlib.util.MAGIC_NUMBER.hex())"
    try:
        result = subprocess.run([candidate, "-I", "-c", probe], capture_output=True, text=True, timeout=60, check=True)
        major, minor, magic = result.stdout.split()
    except (OSError, subprocess.SubprocessError, ValueError):
        return None  # a pyenv shim of a version not selected, say
    if (int(major), int(minor)) != LAMBDA_PYTHON:
        return None
    return BytecodeCompiler(executable=candidate, magic=bytes.fromhex(magic))


def installed_sdk_versions() -> dict[str, str | None]:
    """The installed version of each SDK_VERSIONS distribution (None: not installed)."""
    versions: dict[str, str | None] = {}
    for name in SDK_VERSIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def check_sdk_versions() -> None:
    """Refuses to build the layer from an SDK other than the tested one."""
    installed = installed_sdk_versions()
    wrong = {name: found for name, found in installed.items() if found != SDK_VERSIONS[name]}
    if wrong:
        found = ", ".join(f"{name} {version or 'not installed'}" for name, version in wrong.items())
        pins = " ".join(f"'{name}=={version}'" for name, version in SDK_VERSIONS.items())
        raise SdkVersionMismatch(
            f"the functions' SDK layer is built from this environment's installed SDK, and the functions are tested with "
            f"{', '.join(f'{name} {version}' for name, version in SDK_VERSIONS.items())}; found {found}. "
            f"Install those versions (pip install {pins}), or set CommonProps(sdk_layer=False) to run on the Lambda runtime's own boto3."
        )


def used_services(runtime_package: Path = RUNTIME_PACKAGE) -> tuple[str, ...]:
    """The AWS services the functions build clients of: every `_client("<service>")` in runtime/
    (runtime/shared/aws.Clients, the one place the functions make SDK clients)."""
    services: set[str] = set()
    for path in sorted(runtime_package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "_client"
                and len(node.args) == 1
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                services.add(node.args[0].value)
    return tuple(sorted(services))


def endpoint_prefixes(services: Iterable[str]) -> tuple[str, ...]:
    """The endpoints table's keys of the services: each model's endpointPrefix (stepfunctions is
    `states`), read from the installed botocore's own data (not ~/.aws/models)."""
    from botocore.loaders import Loader  # the synthesizing environment's SDK, checked by then: only when building

    data = importlib.metadata.distribution("botocore").locate_file("botocore/data")
    loader = Loader(extra_search_paths=[str(data)], include_default_search_paths=False)
    return tuple(sorted({loader.load_service_model(service, "service-2")["metadata"]["endpointPrefix"] for service in services}))


def pruned_endpoints_table(table: bytes, prefixes: Collection[str]) -> bytes:
    """botocore's endpoints table (data/endpoints.json) with each partition's services kept to the
    entries of prefixes; everything else as it is: every partition in order, with its regions,
    regionRegex, dnsSuffix and defaults (variants included), which botocore reads for any client.
    Compact JSON in the table's own order, so the same table gives the same bytes. A client of a
    service not kept cannot be built anyway: its model is not in the layer (UnknownServiceError)."""
    endpoints = json.loads(table)
    for partition in endpoints["partitions"]:
        partition["services"] = {prefix: entry for prefix, entry in partition["services"].items() if prefix in prefixes}
    return json.dumps(endpoints, separators=(",", ":")).encode()


def build_code_asset() -> Path:
    """The functions' code asset: a directory holding runtime/ and its bytecode (cached by content)."""
    copies = [(RUNTIME_PACKAGE / path, PurePosixPath("runtime", *path.parts)) for path in sorted(_files_of(RUNTIME_PACKAGE))]
    inputs = [(str(relative), source.read_bytes()) for source, relative in copies]
    return _cached_build("code", inputs, lambda root: _fill(root, copies, TASK_ROOT))


def build_sdk_layer() -> Path:
    """The SDK layer: a directory holding python/ with SDK_VERSIONS' packages and their dist-info,
    botocore's data kept to used_services(), and their bytecode (cached by versions and services).
    SdkVersionMismatch when the installed SDK is not SDK_VERSIONS."""
    check_sdk_versions()
    services = used_services()
    inputs = [(name, version.encode()) for name, version in SDK_VERSIONS.items()]
    inputs.append(("services", " ".join(services).encode()))
    return _cached_build("sdk", inputs, lambda root: _fill(root, _sdk_files(services), LAYER_ROOT, into="python"))


def _files_of(directory: Path) -> Iterator[Path]:
    """The files under a directory, relative to it, without bytecode."""
    for path in directory.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path.relative_to(directory)


def _sdk_files(services: Collection[str]) -> Iterator[tuple[Path | bytes, PurePosixPath]]:
    """(installed file or the content to write, path in python/) of every SDK file the layer ships."""
    kept_services = set(services)
    for name in SDK_VERSIONS:
        distribution = importlib.metadata.distribution(name)
        for file in distribution.files or ():
            parts = PurePosixPath(file).parts
            if parts[0] == ".." or "__pycache__" in parts or file.suffix == ".pyc":
                continue  # scripts outside site-packages, and the installer's bytecode
            if parts[0].endswith(".dist-info") and parts[-1] in _INSTALLER_FILES:
                continue
            if parts[:2] == ("botocore", "data") and len(parts) > 3 and parts[2] not in kept_services:
                continue  # another service's models
            if parts[:2] == ("botocore", "data") and len(parts) == 3 and parts[2] not in BOTOCORE_SHARED_DATA:
                continue
            installed = Path(str(distribution.locate_file(file)))
            if PurePosixPath(*parts) == ENDPOINTS_TABLE:
                yield pruned_endpoints_table(installed.read_bytes(), endpoint_prefixes(kept_services)), ENDPOINTS_TABLE
                continue
            yield installed, PurePosixPath(*parts)


def _cached_build(kind: str, inputs: list[tuple[str, bytes]], build: Callable[[Path], None]) -> Path:
    """The directory `build` fills, built once per inputs (named contents) and compiler into the cache."""
    compiler = bytecode_compiler()
    key = hashlib.sha256()
    for name, content in [("format", _BUILD_FORMAT.encode()), ("magic", compiler.magic if compiler else b"none"), *inputs]:
        for part in (name.encode(), content):
            key.update(len(part).to_bytes(8, "big"))
            key.update(part)
    cache = onceflow_cache_dir() / "lambda-assets"
    target = cache / f"{kind}-{key.hexdigest()[:32]}"
    if target.is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=cache))
    try:
        build(building)
        building.chmod(0o755)
        try:
            building.rename(target)
        except OSError:
            if not target.is_dir():  # not another builder's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def _fill(root: Path, copies: Iterable[tuple[Path | bytes, PurePosixPath]], deployed_at: str, into: str = "") -> None:
    """Copies the files or writes the contents given (readable by every user, as Lambda needs) and
    compiles them as found at deployed_at."""
    top = root / into if into else root
    for source, relative in copies:
        destination = top.joinpath(*relative.parts)
        destination.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, bytes):
            destination.write_bytes(source)
        else:
            shutil.copyfile(source, destination)
    compiler = bytecode_compiler()
    if compiler is not None:
        _compile(compiler, top, deployed_at)
    for path in top.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _compile(compiler: BytecodeCompiler, top: Path, deployed_at: str) -> None:
    """Compiles every module under top in a fresh interpreter with a fixed hash seed (same bytes each build)."""
    environment = {"PYTHONHASHSEED": _HASH_SEED, "PATH": os.environ.get("PATH", "")}
    # -S, not -I: isolated mode would ignore PYTHONHASHSEED; compileall needs nothing beyond the standard library.
    command = [compiler.executable, "-S", "-c", _COMPILE, str(top), deployed_at]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, env=environment)
    if result.returncode != 0:
        raise RuntimeError(f"compiling {top} with {compiler.executable} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
