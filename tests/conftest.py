"""Shared fixtures: an embedded AWS (moto) built from the synthesized templates."""

from __future__ import annotations

import atexit
import fcntl
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.aws.template_resources import Template, load_assembly, synth_templates

AWS_TEST_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    # botocore 1.44 routes DynamoDB Streams to an account-based host moto does not serve.
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_NAMESPACE": "onceflow-tests",
    "POWERTOOLS_SERVICE_NAME": "tests",
}


# Also at import time: Powertools reads its variables when a handler module is first imported,
# which may happen while tests are collected, before any fixture runs.
for _name, _value in AWS_TEST_ENV.items():
    os.environ.setdefault(_name, _value)


def _share_botocore_data_loader() -> None:
    """One botocore data loader per data path for the whole process.

    moto gives each embedded cloud a new boto3 default session, and every new session would parse
    botocore's service models and endpoint rules (large JSON files) again: about a fifth of the fault
    suites' time. The loader only reads botocore's own files, so sharing its cache changes no answer.
    """
    import botocore.loaders
    import botocore.session

    botocore.session.create_loader = functools.cache(botocore.loaders.create_loader)  # type: ignore[attr-defined]


_share_botocore_data_loader()


@pytest.fixture(autouse=True)
def aws_test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(name, value)


_TEMPLATES: dict[str, dict[str, Template]] = {}
_ASSEMBLIES: dict[str, Path] = {}
_SHARED_TEMP: Path | None = None  # under xdist: the temp directory every worker of the run shares


# --- the embedded cloud's IAM: every call a function makes, checked against its role -----------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--iam-audit",
        choices=("report", "strict"),
        default="report",
        help="strict (make test): a grant no test exercised fails the run unless kept with a reason; denied calls fail either way",
    )


def pytest_configure(config: pytest.Config) -> None:
    from devtools.aws import call_audit

    global _SHARED_TEMP
    if _is_xdist_worker(config):
        # xdist gives each worker <the run's basetemp>/<worker id> as its own basetemp.
        _SHARED_TEMP = Path(config.option.basetemp).parent

    # The dev templates' roles (prod's grant the same actions on the same logical resources:
    # tests/unit/test_call_audit.py); synthesized only once a handler first calls AWS.
    call_audit.install(lambda: call_audit.CallAudit.from_templates(templates_for("dev")), _entry_points())


def _entry_points() -> list[str]:
    from tests.unit.test_entry_points import handler_paths

    return handler_paths()


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs `--dist loadgroup`), the tests of a module that share a
    module-scoped fixture (a synth of their own, an installed wheel) go to one worker, so each such
    fixture is built once per run; every other test goes wherever a worker is free."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if isinstance(item, pytest.Function) and _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def _uses_a_module_fixture(item: pytest.Function) -> bool:
    return any(definition.scope == "module" for definitions in item._fixtureinfo.name2fixturedefs.values() for definition in definitions)


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workeroutput")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from devtools.aws import call_audit

    audit = call_audit._active
    if _is_xdist_worker(session.config):
        # A worker saw only its share of the calls: the controller judges the merged records.
        if audit is not None:
            session.config.workeroutput["iam_audit"] = audit.recorded()  # type: ignore[attr-defined]
        return
    if audit is None:
        return
    if audit.denials:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if session.config.getoption("--iam-audit") == "strict" and audit.unexplained_unused():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object | None) -> None:
    """xdist's controller: fold in what the finished worker's tests called (a worker lost to a crash
    sends nothing; xdist fails that run anyway)."""
    from devtools.aws import call_audit

    record = getattr(node, "workeroutput", {}).get("iam_audit")
    if record is not None:
        call_audit.merge_recorded(record)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    from devtools.aws import call_audit

    audit = call_audit._active
    if audit is None or _is_xdist_worker(config):
        return
    write = terminalreporter.write_line
    terminalreporter.section("embedded IAM: AWS calls per function against its role")
    for line in audit.report().splitlines():
        write(line)
    for denial in dict.fromkeys(audit.denials):
        write(f"DENIED {denial.describe()}", red=True)
    if config.getoption("--iam-audit") == "strict":
        for handler, grant in audit.unexplained_unused():
            where = f"{grant.policy}[{grant.statement}]"
            write(f"UNUSED {handler}: {grant.describe()} ({where}) was never used: remove it, or keep it with a reason", red=True)
    report = Path("build/iam-audit.md")
    report.parent.mkdir(exist_ok=True)
    report.write_text(audit.report() + "\n")


def templates_for(env_name: str) -> dict[str, Template]:
    """Synthesized once per run and environment (synth runs cdk-nag too): under xdist, by the first worker
    that asks, into a directory every worker of the run shares, and read from its cloud assembly by the
    others (the same tree and context give the same templates; about 12 s of CPU a worker saves)."""
    if env_name not in _TEMPLATES:
        _ASSEMBLIES[env_name] = outdir = _synthesized_assembly(env_name)
        _TEMPLATES[env_name] = load_assembly(outdir)
    return _TEMPLATES[env_name]


def _synthesized_assembly(env_name: str) -> Path:
    """The cloud assembly of `env_name`: synthesized here, unless another worker of this run has done it.
    Every worker reads the templates from the assembly's files, so each sees the same JSON."""
    if _SHARED_TEMP is None:
        outdir = Path(tempfile.mkdtemp(prefix=f"onceflow-{env_name}-assembly-"))
        atexit.register(shutil.rmtree, outdir, ignore_errors=True)
        synth_templates(env_name, outdir=str(outdir))
        return outdir
    # The run's shared temp (the parent of each worker's basetemp), which pytest's retention cleans.
    outdir = _SHARED_TEMP / f"onceflow-{env_name}-assembly"
    with (_SHARED_TEMP / f"onceflow-{env_name}-assembly.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        synthesized = outdir / ".synthesized"
        if not synthesized.exists():
            shutil.rmtree(outdir, ignore_errors=True)
            synth_templates(env_name, outdir=str(outdir))
            synthesized.touch()
    return outdir


def assembly_for(env_name: str) -> Path:
    """The directory of that same synth: its cloud assembly (manifest, assets, cdk-nag's validation
    report), for the tests that read it on disk instead of synthesizing the app once more."""
    templates_for(env_name)
    return _ASSEMBLIES[env_name]


@pytest.fixture(scope="session")
def dev_templates() -> dict[str, Template]:
    return templates_for("dev")


@pytest.fixture(scope="session")
def prod_templates() -> dict[str, Template]:
    return templates_for("prod")


@pytest.fixture
def runner_stats_template(dev_templates: dict[str, Template]) -> Template:
    return dev_templates["Onceflow-dev-RunnerStats"]


@pytest.fixture
def moto_aws() -> Iterator[None]:
    from devtools.aws.moto_patches import embedded_aws

    # Handlers run their DynamoDB calls on a pool: moto must take them as DynamoDB does.
    with embedded_aws():
        yield


def dynamodb_client() -> Any:
    import boto3

    return boto3.client("dynamodb", region_name="us-east-1")


# --- the event log on the embedded cloud ------------------------------------------------------

EVENT_LOG_STACK = "Onceflow-dev-EventLog"
# Small enough that a few dozen events give several snapshots of several chunks each.
SMALL_LOG = {
    "runtime.event_log.api_handler.handler": {"SNAPSHOT_EVERY": "20"},
    "runtime.event_log.worker_handler.handler": {"CHUNK_BYTES": "256"},
}


@pytest.fixture
def event_log_template(dev_templates: dict[str, Template]) -> Template:
    return dev_templates[EVENT_LOG_STACK]


@pytest.fixture
def log_world(event_log_template: Template) -> Iterator[Any]:
    """The dev event log on moto, with a virtual clock, small snapshots and small chunks."""
    from devtools.aws.moto_patches import VirtualClock
    from devtools.event_log_world import EventLogWorld, embedded_event_log_cloud

    clock = VirtualClock()
    with embedded_event_log_cloud(clock):
        yield EventLogWorld.create(event_log_template, clock, overrides=SMALL_LOG)


# --- the taxi ETL saga on the embedded cloud --------------------------------------------------

TAXI_ETL_STACK = "Onceflow-dev-TaxiEtl"


@pytest.fixture
def taxi_etl_template(dev_templates: dict[str, Template]) -> Template:
    return dev_templates[TAXI_ETL_STACK]


@pytest.fixture
def saga(taxi_etl_template: Template) -> Iterator[Any]:
    """The dev saga on moto: its state machine really executes, with the API function's environment set."""
    from devtools.taxi_world import TaxiWorld, embedded_saga_cloud

    with embedded_saga_cloud() as waits:
        world = TaxiWorld.create(taxi_etl_template)
        world.retry_waits = waits
        with world.serving_api():
            yield world
