"""The house's import graph: infra/ and runtime/ import each other's modules without a loop, the
shared infra modules reach into no pipeline's slice, and infra takes from runtime/ only the
contract modules (constants), never code that ships in the Lambda asset."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("infra", "runtime")
PIPELINES = ("runner_stats", "event_log", "taxi_etl")
SHARED_INFRA = ("infra.compliance", "infra.monitoring", "infra.lambda_factory", "infra.resources", "infra.config", "infra.stacks")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports() -> dict[str, set[str]]:
    """Each module of infra/ and runtime/ and the project modules it imports (at any level, TYPE_CHECKING included)."""
    modules = {module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            imported |= {target for target in targets if target in modules and target != name}
        graph[name] = imported
    return graph


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
        slices = {target for target in graph[shared] if any(target.startswith(f"infra.{p}") for p in PIPELINES)}
        assert slices == set(), shared


def test_infra_takes_only_contract_modules_from_runtime() -> None:
    # Given every infra module
    graph = project_imports()
    # Then what it imports from runtime/ is a contract module (constants), nothing that runs in Lambda
    for name, imported in graph.items():
        if name.startswith("infra"):
            from_runtime = {target for target in imported if target.startswith("runtime")}
            assert all(target.endswith(".contract") or target == "runtime" or target.count(".") == 1 for target in from_runtime), (
                name,
                from_runtime,
            )
