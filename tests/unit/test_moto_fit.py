"""Every reach of the embedded cloud into moto's internals fails loudly when moto changes under it
(devtools/aws/moto_fit.py): each declared reach, broken in turn, stops its patch with a message that
names the patch, the name and moto's version; and no module reaches into moto without declaring it."""

from __future__ import annotations

import ast
import enum
import importlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.aws import moto_fit
from devtools.aws.moto_fit import MOTO_VERSION, InstanceAttribute, MotoDoesNotFit, MotoPatch, Reach, reaches_into_moto

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("devtools", "benchmarks")
# moto's public API: what its documentation tells users to import.
PUBLIC = {("moto", "mock_aws"), ("moto.core.config", "DefaultConfig")}

PATCHES = list(moto_fit.declared_patches())
CASES = [
    pytest.param(patch, reach, id=f"{patch.name.rsplit('.', 1)[-1]}:{reach.describe()}") for patch in PATCHES for reach in patch.reaches
]


def owner_and_attribute(reach: Reach) -> tuple[Any, str]:
    """The object holding the reach's last name, and that name."""
    *parents, last = reach.name.split(".")
    owner: Any = importlib.import_module(reach.module)
    for part in parents:
        owner = getattr(owner, part)
    return owner, last


def break_reach(reach: Reach, monkeypatch: pytest.MonkeyPatch) -> str:
    """Change moto the way an upgrade could, so that this reach no longer fits; says how."""
    owner, name = owner_and_attribute(reach)
    if isinstance(reach, InstanceAttribute):
        monkeypatch.setattr(owner, name, type(name, (), {}))
        return f"{name} replaced by a class without {reach.attribute}"
    if reach.parameters is not None:

        def renamed(changed: Any, /, *arguments: Any, required: Any, **keywords: Any) -> None: ...

        monkeypatch.setattr(owner, name, renamed)
        return f"{name} now takes (changed, /, *arguments, required, **keywords)"
    if reach.keys:
        monkeypatch.setattr(owner, name, {})
        return f"{name} emptied"
    if isinstance(owner, enum.EnumMeta):  # an enum's member cannot be deleted: the enum loses it instead
        parent: Any = importlib.import_module(reach.module)
        for part in reach.name.split(".")[:-2]:
            parent = getattr(parent, part)
        monkeypatch.setattr(parent, owner.__name__, enum.Enum(owner.__name__, {"Other": "other"}))
        return f"{owner.__name__} without {name}"
    monkeypatch.delattr(owner, name)
    return f"{name} removed"


def test_every_declared_patch_fits_the_locked_moto() -> None:
    # Given every patch the embedded cloud declares
    # When each is checked against the moto installed from the lock
    # Then none is refused
    for patch in PATCHES:
        patch.check()


@pytest.mark.parametrize(("patch", "reach"), CASES)
def test_a_reach_that_no_longer_fits_stops_its_patch_naming_it_and_the_moto_version(
    patch: MotoPatch, reach: Reach, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given moto changed so that one name this patch reaches is gone or has another shape
    how = break_reach(reach, monkeypatch)
    # When the patch is checked
    with pytest.raises(MotoDoesNotFit) as raised:
        patch.check()
    # Then it is refused, naming the patch, the name and moto's version
    message = str(raised.value)
    assert patch.name in message and reach.describe() in message and f"moto {MOTO_VERSION}" in message, (how, message)


def test_a_declared_patch_checks_before_it_runs_and_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a patch declared on a function that records its runs, reaching moto's DynamoHandler.call_action
    runs: list[str] = []
    monkeypatch.setattr(moto_fit, "PATCHES", dict(moto_fit.PATCHES))

    @reaches_into_moto(Reach("moto.dynamodb.responses", "DynamoHandler.call_action", ("self",)))
    def patch_under_test() -> str:
        runs.append("ran")
        return "applied"

    # When it is applied while the name fits
    # Then it runs
    assert patch_under_test() == "applied" and runs == ["ran"]
    # When moto changes afterwards in the same process
    from moto.dynamodb.responses import DynamoHandler

    monkeypatch.setattr(DynamoHandler, "call_action", lambda handler, extra: None)
    # Then the fit already checked is kept (moto cannot change under a running process) ...
    assert patch_under_test() == "applied"
    # ... but a fresh process (fits forgotten) refuses it before the patch's body runs
    moto_fit.forget_fits()
    with pytest.raises(MotoDoesNotFit, match="patch_under_test"):
        patch_under_test()
    assert runs == ["ran", "ran"]


def test_every_declaration_is_on_a_function_of_the_reaching_modules() -> None:
    # Given every function of the reaching modules that carries a declaration (the decorator makes each a checked wrapper)
    wrapped = {
        function.moto_patch.name
        for module_name in moto_fit.REACHING_MODULES
        for function in _functions(importlib.import_module(module_name))
        if hasattr(function, "moto_patch")
    }
    # Then each declared patch is one of them: its declaration wraps the function that applies it
    assert wrapped == set(moto_fit.PATCHES)


def _functions(module: Any) -> Iterator[Any]:
    for value in vars(module).values():
        if callable(value) and getattr(value, "__module__", None) == module.__name__:
            yield value
            if isinstance(value, type):
                yield from (member for member in vars(value).values() if callable(member))


def _moto_module_of(node: ast.AST) -> tuple[str, str] | None:
    """(module, dotted name) when `node` is `import_module("moto...")`, or an attribute chain on one."""
    attributes: list[str] = []
    while isinstance(node, ast.Attribute):
        attributes.insert(0, node.attr)
        node = node.value
    if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module" and node.args:
        argument = node.args[0]
        if isinstance(argument, ast.Constant) and str(argument.value).split(".")[0] == "moto":
            return str(argument.value), ".".join(attributes)
    return None


def _moto_uses(tree: ast.Module) -> set[tuple[str, str]]:
    """(module, dotted name) of every moto name a source imports, each attribute of it that it reads, and
    each name it patches on it (`mock.patch.object(X, "name", ...)`, `setattr(X, "name", ...)`)."""
    imported: dict[str, tuple[str, str]] = {}
    uses: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "moto":
            for alias in node.names:
                # `from moto.core import serialize` imports a module: its names are that module's
                submodule = f"{node.module}.{alias.name}"
                found = (submodule, "") if _is_module(submodule) else (str(node.module), alias.name)
                imported[alias.asname or alias.name] = found
                uses.add(found)
        elif isinstance(node, ast.Import):
            uses.update((alias.name, "") for alias in node.names if alias.name.split(".")[0] == "moto")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            found = _moto_module_of(node.value)
            if found is not None:  # `parser: Any = importlib.import_module("moto...").Name`
                uses.add(found)
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                imported.update({target.id: found for target in targets if isinstance(target, ast.Name)})
        elif isinstance(node, ast.Call):
            found = _moto_module_of(node)
            if found is not None:
                uses.add(found)
    for node in ast.walk(tree):
        dunder = isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr.endswith("__")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported and not dunder:
            module, name = imported[node.value.id]
            uses.add((module, f"{name}.{node.attr}" if name else node.attr))
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and _patches_by_name(node.func):
            owner, attribute = node.args[0], node.args[1]
            if isinstance(owner, ast.Name) and owner.id in imported and isinstance(attribute, ast.Constant):
                module, name = imported[owner.id]
                uses.add((module, f"{name}.{attribute.value}" if name else str(attribute.value)))
    return uses


def _patches_by_name(function: ast.expr) -> bool:
    """`setattr`, `mock.patch.object` or `monkeypatch.setattr`: a call that replaces an attribute named by a string."""
    if isinstance(function, ast.Name):
        return function.id == "setattr"
    return isinstance(function, ast.Attribute) and function.attr in ("object", "setattr")


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # the parent is a module, not a package
        return False


def _covered(module: str, name: str, reaches: list[Reach]) -> bool:
    def covers(reach: Reach) -> bool:
        return not name or reach.name == name or reach.name.startswith(f"{name}.") or name.startswith(f"{reach.name}.")

    return any(reach.module == module and covers(reach) for reach in reaches)


def test_no_module_reaches_into_moto_without_declaring_it() -> None:
    # Given every source file of the embedded cloud, the worlds and the benchmarks
    reaches = [reach for patch in PATCHES for reach in patch.reaches]
    undeclared: list[str] = []
    reaching: set[str] = set()
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if module == "devtools.aws.moto_fit":
                continue
            # When the moto names it imports, and the attributes of them it reads, are listed
            uses = {use for use in _moto_uses(ast.parse(path.read_text())) if (use[0], use[1].split(".")[0]) not in PUBLIC}
            if uses:
                reaching.add(module)
            undeclared += [f"{module}: {name or '(module)'} of {moto}" for moto, name in sorted(uses) if not _covered(moto, name, reaches)]
    # Then each is declared by a patch, and every module that reaches into moto is one the fit checks list
    assert undeclared == []
    assert reaching <= set(moto_fit.REACHING_MODULES), reaching - set(moto_fit.REACHING_MODULES)


def test_the_scan_sees_an_undeclared_reach() -> None:
    # Given a source that imports a moto internal and reads a method of it, patches another by name, and reads a
    # function of a module it imports by name, with no declaration
    source = (
        "import importlib\nfrom unittest import mock\nfrom moto.sqs.models import SQSBackend\n\n"
        "def f():\n"
        "    models = importlib.import_module('moto.sqs.models')\n"
        "    with mock.patch.object(SQSBackend, '_private', None):\n"
        "        return SQSBackend.delete_queue, models.unix_time\n"
    )
    uses = _moto_uses(ast.parse(source))
    # Then the scan lists the class, the method, the patched name and the module's function
    assert uses == {
        ("moto.sqs.models", "SQSBackend"),
        ("moto.sqs.models", "SQSBackend.delete_queue"),
        ("moto.sqs.models", "SQSBackend._private"),
        ("moto.sqs.models", ""),
        ("moto.sqs.models", "unix_time"),
    }
    # and none of the names is covered by an unrelated reach (the bare module is: a reach into it)
    unrelated = [Reach("moto.sqs.models", "SQSBackend.send_message")]
    for name in ("SQSBackend.delete_queue", "SQSBackend._private", "unix_time"):
        assert not _covered("moto.sqs.models", name, unrelated), name
    assert _covered("moto.sqs.models", "SQSBackend", unrelated) and _covered("moto.sqs.models", "", unrelated)
