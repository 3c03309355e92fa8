"""The house's import graph: infra/ and runtime/ import each other's modules without a loop, the
shared infra modules reach into no pipeline's slice, and infra takes from runtime/ only the
contract modules (constants), never code that ships in the Lambda asset.

infra/ is imported as `onceflow.infra` (and reaches the contracts as `onceflow.runtime.<p>.contract`),
the names it has in the installed wheel; runtime/ is `runtime` inside Lambda and in the tests."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("infra", "runtime")
PIPELINES = ("runner_stats", "event_log", "taxi_etl")
SHARED_INFRA = (
    "onceflow.infra.compliance",
    "onceflow.infra.monitoring",
    "onceflow.infra.lambda_factory",
    "onceflow.infra.resources",
    "onceflow.infra.common",
    "onceflow.infra.stacks",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return f"onceflow.{name}" if name.startswith("infra") else name


def graph_name(imported: str) -> str:
    """The contracts infra reaches as onceflow.runtime.<p>.contract are the modules runtime/ holds."""
    return imported.removeprefix("onceflow.") if imported.startswith("onceflow.runtime") else imported


def project_imports() -> dict[str, set[str]]:
    """Each module of infra/ and runtime/ and the project modules it imports (at any level, TYPE_CHECKING included)."""
    modules = {module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and (node.module or node.level):
                base = absolute_module(name, path, node)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            imported |= {graph_name(target) for target in targets if graph_name(target) in modules and graph_name(target) != name}
        graph[name] = imported
    return graph


def absolute_module(name: str, path: Path, node: ast.ImportFrom) -> str:
    """What `from .x import y` names, as the importing module's package sees it."""
    if node.level == 0:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop, if any (depth-first search with colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_there_is_no_import_loop_in_infra_or_runtime() -> None:
    # Given every import between the modules of infra/ and runtime/ (TYPE_CHECKING imports too: a design loop is a loop)
    graph = project_imports()
    assert len(graph) > 50
    # Then none leads back to where it started
    assert cycle(graph) is None


def test_the_cycle_search_finds_a_loop() -> None:
    # Given a graph with a loop a -> b -> c -> a
    # Then the search reports it
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_shared_infra_reaches_into_no_pipeline_slice() -> None:
    # Given the shared infra modules
    graph = project_imports()
    # Then none imports a pipeline's slice: each slice builds on them, never the other way round
    for shared in SHARED_INFRA:
        slices = {target for target in graph[shared] if any(target.startswith(f"onceflow.infra.{p}") for p in PIPELINES)}
        assert slices == set(), shared


def test_the_config_composes_only_each_slices_props() -> None:
    # Given the repository's per-environment config, the composition root of its own app
    graph = project_imports()
    # Then what it takes from the slices is their props (settings, thresholds, construct inputs), never a construct
    slices = {target for target in graph["onceflow.infra.config"] if any(target.startswith(f"onceflow.infra.{p}") for p in PIPELINES)}
    assert slices == {f"onceflow.infra.{p}.props" for p in PIPELINES}


def test_infra_takes_only_contract_modules_from_runtime() -> None:
    # Given every infra module
    graph = project_imports()
    # Then what it imports from runtime/ is a contract module (constants), nothing that runs in Lambda
    for name, imported in graph.items():
        if name.startswith("onceflow.infra"):
            from_runtime = {target for target in imported if target.startswith("runtime")}
            assert all(target.endswith(".contract") or target == "runtime" or target.count(".") == 1 for target in from_runtime), (
                name,
                from_runtime,
            )


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_infra_is_imported_by_its_installed_name_only() -> None:
    # Given every Python file of the repository outside the Lambda asset
    sources = [
        path
        for path in ROOT.rglob("*.py")
        if not {".venv", "node_modules", "cdk.out", "build", "onceflow"} & set(path.relative_to(ROOT).parts)
    ]
    assert len(sources) > 100
    for path in sources:
        imported = imports_of(path)
        # Then none imports the top-level name `infra`: the wheel installs it only as onceflow.infra, and a
        # team's app may have its own `infra` package
        assert not {name for name in imported if name == "infra" or name.startswith("infra.")}, path
        # and infra reaches runtime/ only as onceflow.runtime, so the wheel never needs a top-level `runtime`
        if path.relative_to(ROOT).parts[0] == "infra":
            assert not {name for name in imported if name == "runtime" or name.startswith("runtime.")}, path


def test_the_runtime_modules_the_clients_import_need_no_top_level_runtime() -> None:
    # Given the modules of runtime/ the API clients import (as onceflow.runtime.*), and what those import in turn
    graph = project_imports()
    clients = list((ROOT / "onceflow" / "clients").glob("*.py"))
    reached = {graph_name(name) for path in clients for name in imports_of(path) if name.startswith("onceflow.runtime.")}
    assert "runtime.taxi_etl.trip_lines" in reached
    pending = set(reached)
    while pending:
        pending = {target for module in pending for target in graph.get(module, set())} - reached
        reached |= pending
    # Then none of them imports the top-level name `runtime`: the installed wheel (and `make install`'s
    # editable install) has only onceflow.runtime, so such an import fails there
    for module in sorted(reached):
        path = ROOT / Path(*module.split(".")).with_suffix(".py")
        if not path.exists():
            path = ROOT / Path(*module.split(".")) / "__init__.py"
        assert not {name for name in imports_of(path) if name == "runtime" or name.startswith("runtime.")}, module
