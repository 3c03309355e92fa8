"""Every reach of the embedded cloud into moto's internals, checked when the patch is applied.

The embedded cloud (devtools/aws/) replaces or reads about thirty of moto's private names: methods
it wraps, module functions it swaps, attributes of moto's models it reads. moto renames them
without notice (`moto/core/serialize.py` alone had 25 commits in a year), and a patch that no
longer fits does not always fail: `setattr` on a module creates a new name that nothing calls, so a
speed cache or a service limit would silently stop applying.

So each patch declares what it reaches, with `@reaches_into_moto(Reach(...), ...)` on the function
that applies it. Before the patch runs, every reach is checked:
- the module imports and the dotted name resolves in it;
- a callable's leading parameter names are the ones the patch relies on (the patch passes them on
  positionally, or replaces the function with one of that signature);
- an instance attribute (`InstanceAttribute`) is assigned as `self.<name>` somewhere in the class or
  its bases, or defined on the class (a property, say).
If one does not fit, the run stops with `MotoDoesNotFit`, naming the patch, the reach and moto's
version. A patch that fits is not checked again in the process (moto cannot change under it).

`tests/unit/test_moto_fit.py` breaks every declared reach in turn and checks the failure, and scans
devtools/ and benchmarks/ so that a new `from moto... import` outside a declaration fails the suite.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import inspect
import textwrap
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

MOTO_VERSION = importlib.metadata.version("moto")


class MotoDoesNotFit(RuntimeError):
    """A patch of the embedded cloud reaches a name of moto that is gone or has changed shape."""


@dataclass(frozen=True)
class Reach:
    """A name in one of moto's modules that a patch replaces or reads.

    `name` is dotted from the module (`"DynamoDBBackend.transact_write_items"`). `parameters`, for a
    callable, are the leading parameter names the patch relies on, in order (`self` included for a
    method); None checks only that the name exists. `keys`, for a mapping the patch updates, are
    the keys it relies on (a patched dict would silently grow a key moto no longer reads)."""

    module: str
    name: str
    parameters: tuple[str, ...] | None = None
    keys: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.module}.{self.name}"

    def resolve(self) -> Any:
        """The object the name refers to; MotoDoesNotFit's reason (a str) is raised as _Misfit."""
        try:
            found: Any = importlib.import_module(self.module)
        except ImportError as error:
            raise _Misfit(f"module {self.module} does not import ({error})") from error
        walked = self.module
        for part in self.name.split("."):
            # A class's own attribute as written (a staticmethod stays one), else what getattr finds.
            owner = found
            found = inspect.getattr_static(owner, part, _MISSING) if inspect.isclass(owner) else getattr(owner, part, _MISSING)
            if found is _MISSING:
                raise _Misfit(f"{walked} has no {part!r}")
            if isinstance(found, (staticmethod, classmethod)):
                found = found.__func__
            walked = f"{walked}.{part}"
        if self.parameters is not None:
            self._check_parameters(found)
        if self.keys:
            missing = [key for key in self.keys if not isinstance(found, Mapping) or key not in found]
            if missing:
                raise _Misfit(f"has no key {', '.join(map(repr, missing))}")
        return found

    def _check_parameters(self, found: Any) -> None:
        if not callable(found):
            raise _Misfit(f"is {type(found).__name__}, not callable")
        try:
            parameters = list(inspect.signature(found).parameters.values())
        except (TypeError, ValueError) as error:
            raise _Misfit(f"has no readable signature ({error})") from error
        wanted = self.parameters or ()
        names = tuple(parameter.name for parameter in parameters)
        # The patch gives exactly these: any parameter after them must be one moto can leave out.
        required_after = [
            parameter.name
            for parameter in parameters[len(wanted) :]
            if parameter.default is inspect.Parameter.empty and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        ]
        if names[: len(wanted)] != wanted or required_after:
            raise _Misfit(f"takes ({', '.join(names)}), the patch relies on ({', '.join(wanted)}) and nothing more required")


@dataclass(frozen=True)
class InstanceAttribute(Reach):
    """An attribute the patch reads on instances of the class `name`: the class's source (or a base's)
    must use `self.<attribute>`, or the class define or annotate it (a property, a dataclass field)."""

    attribute: str = ""

    def describe(self) -> str:
        return f"{self.module}.{self.name} instances' .{self.attribute}"

    def resolve(self) -> Any:
        cls = super().resolve()
        if not inspect.isclass(cls):
            raise _Misfit(f"{self.name} is not a class")
        for klass in cls.__mro__:
            declared = vars(klass)
            annotated = declared.get("__annotations__", {})
            if self.attribute in declared or self.attribute in annotated or self.attribute in _used_on_self(klass):
                return cls
        raise _Misfit(f"{self.name} no longer uses self.{self.attribute}")


class _Misfit(Exception):
    """Why a reach does not fit (internal: the patch's name is added to it)."""


_MISSING = object()


@functools.cache
def _used_on_self(cls: type) -> frozenset[str]:
    """The names a class's own source uses as `self.<name>` (empty for a class with no source)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return frozenset()
    return frozenset(
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    )


@dataclass(frozen=True)
class MotoPatch:
    """One patch of the embedded cloud (the function that applies it) and the names it reaches."""

    name: str
    reaches: tuple[Reach, ...]

    def check(self) -> None:
        """Every reach resolves and has the shape the patch relies on, or MotoDoesNotFit."""
        problems = []
        for reach in self.reaches:
            try:
                reach.resolve()
            except _Misfit as misfit:
                problems.append(f"{reach.describe()}: {misfit}")
        if problems:
            raise MotoDoesNotFit(
                f"the embedded cloud's patch {self.name} does not fit moto {MOTO_VERSION}: {'; '.join(problems)}. "
                "Adapt the patch to this moto (docs/embedded-cloud.md lists what each patch does and why), "
                "or install the moto version of requirements-dev.lock."
            )


# Every declared patch, by name; `tests/unit/test_moto_fit.py` breaks each reach of each.
PATCHES: dict[str, MotoPatch] = {}
_fitting: set[str] = set()
_fitting_lock = threading.Lock()

P = ParamSpec("P")
R = TypeVar("R")


def ensure_fits(patch: MotoPatch) -> None:
    """Check `patch` once per process (a fit cannot change while the process runs)."""
    if patch.name in _fitting:
        return
    patch.check()
    with _fitting_lock:
        _fitting.add(patch.name)


def forget_fits() -> None:
    """Check every patch again at its next use (for the tests that break a reach)."""
    with _fitting_lock:
        _fitting.clear()


def reaches_into_moto(*reaches: Reach) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Declare what the decorated function (a patch, or a reader of moto's models) reaches in moto;
    every call checks the reaches first (once per process), so a misfit stops the run before the
    patch is applied."""

    def declare(function: Callable[P, R]) -> Callable[P, R]:
        patch = MotoPatch(f"{function.__module__}.{function.__qualname__}", tuple(reaches))
        if patch.name in PATCHES:
            raise ValueError(f"the patch {patch.name} is declared twice")
        PATCHES[patch.name] = patch

        @functools.wraps(function)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            ensure_fits(patch)
            return function(*args, **kwargs)

        checked.__dict__["moto_patch"] = patch
        return checked

    return declare


def declared_patches() -> Iterator[MotoPatch]:
    """Every patch declared by the modules that reach into moto (imported here, so all are listed)."""
    for module in REACHING_MODULES:
        importlib.import_module(module)
    yield from PATCHES.values()


# The modules that reach into moto's internals (the test's scan checks that this list is complete).
REACHING_MODULES = (
    "devtools.aws.capacity",
    "devtools.aws.moto_patches",
    "devtools.aws.moto_server",
    "devtools.aws.moto_state",
    "devtools.aws.service_limits",
    "devtools.aws.sqs_esm",
    "devtools.aws.table_stream",
    "devtools.local.cloud",
    "devtools.taxi_world",
    "benchmarks.seed_saga",
)
