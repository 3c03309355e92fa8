"""The contract modules (runtime/<pipeline>/contract.py) hold every name that crosses layers:
handler paths, service names, environment variables, metric names, table keys and indexes, stack
outputs and the limits both sides enforce. No copy of those names may remain in infra/, ops/,
devtools/ or benchmarks/: they import them."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = ("runner_stats", "event_log", "taxi_etl")
SCANNED = ("infra", "ops", "devtools", "benchmarks")
# Every contract names at least one of each kind (KEY_ is a table key attribute; INDEX_ is optional).
REQUIRED_KINDS = ("HANDLER", "SERVICE", "ENV_", "METRIC_", "KEY_", "OUTPUT_")


def contract(pipeline: str) -> ModuleType:
    return importlib.import_module(f"runtime.{pipeline}.contract")


def strings_in(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (tuple, list, frozenset, set)):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)


def contract_literals(pipeline: str) -> dict[str, str]:
    """Each string the contract defines, with the constant that defines it."""
    module = contract(pipeline)
    literals: dict[str, str] = {}
    for name, value in vars(module).items():
        if name.isupper():
            for text in strings_in(value):
                literals.setdefault(text, name)
    return literals


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_the_contract_is_constants_only_and_imports_nothing_from_the_project(pipeline: str) -> None:
    # Given the contract module's source
    path = ROOT / "runtime" / pipeline / "contract.py"
    tree = ast.parse(path.read_text())
    # Then it imports only from the standard library's typing helpers
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.module in {"__future__", "typing", "enum"}, f"{path.name} imports {node.module}"
        assert not isinstance(node, ast.Import), f"{path.name} imports {[alias.name for alias in node.names]}"  # type: ignore[attr-defined]
    # and its top level is a docstring, imports and constant assignments (or classes of constants)
    for statement in tree.body:
        assert isinstance(statement, (ast.Expr, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.ClassDef)), ast.dump(statement)[:80]
    # and it names every kind of cross-layer name
    names = [name for name in vars(contract(pipeline)) if name.isupper()]
    for kind in REQUIRED_KINDS:
        assert any(name.startswith(kind) for name in names), f"{pipeline} contract names no {kind}*"


def copies(literals: dict[str, str]) -> list[str]:
    found = []
    for directory in SCANNED:
        for path in sorted((ROOT / directory).rglob("*.py")):
            if path.name == "contract.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in literals:
                    relative = path.relative_to(ROOT)
                    found.append(f"{relative}:{node.lineno}: {node.value!r} (contract: {literals[node.value]})")
    return found


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_no_contract_name_is_copied_outside_the_contract(pipeline: str) -> None:
    # Given every string the pipeline's contract defines
    literals = contract_literals(pipeline)
    assert literals
    # When infra/, ops/, devtools/ and benchmarks/ are searched for the same string literal
    # Then none is found: they import the name from the contract
    assert copies(literals) == []


def test_the_scan_finds_a_copy() -> None:
    # Given a name the runner-stats contract defines, copied into a scanned module
    literals = contract_literals("runner_stats")
    handler_path = contract("runner_stats").HANDLER
    # Then the scan would report it (the search is not vacuous)
    source = f"HANDLER = {handler_path!r}\n"
    assert any(isinstance(n, ast.Constant) and n.value in literals for n in ast.walk(ast.parse(source)))
