"""The set-up files agree with each other: every .PHONY target of the Makefile is in `make help`,
requirements-dev.lock (what `make install` installs, hashes checked) pins every requirement of
requirements-dev.txt (and of requirements.txt, which it includes) within its specifier, and
package-lock.json (what `npm ci` installs) has every package of package.json at its exact pin.

Pure file parsing: no make, no pip, no network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "Makefile"
LOCK = ROOT / "requirements-dev.lock"
UV_LOCK = ROOT / "requirements-uv.lock"
PACKAGE_JSON = ROOT / "package.json"
PACKAGE_LOCK = ROOT / "package-lock.json"

# The very pattern `make help`'s awk matches: a rule line carrying `## what it does`.
HELP_LINE = re.compile(r"^([a-zA-Z_-]+):.*## (.*)$")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def makefile_lines() -> list[str]:
    # Backslash-newline continues a line in make, as in the .PHONY list or a long recipe.
    return MAKEFILE.read_text().replace("\\\n", " ").splitlines()


def phony_targets() -> set[str]:
    targets: set[str] = set()
    for line in makefile_lines():
        if line.startswith(".PHONY:"):
            targets.update(line.removeprefix(".PHONY:").split("#", 1)[0].split())
    return targets


def help_lines() -> dict[str, str]:
    found = (HELP_LINE.match(line) for line in makefile_lines())
    return {m.group(1): m.group(2).strip() for m in found if m}


def requirements(path: Path) -> list[Requirement]:
    found: list[Requirement] = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            found += requirements(path.parent / line.split(maxsplit=1)[1])
            continue
        found.append(Requirement(line))
    return found


def lock_pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in LOCK.read_text().splitlines():
        m = PIN.match(line)
        if m:
            pins[canonicalize_name(m.group(1))] = Version(m.group(2))
    return pins


# --- make help -----------------------------------------------------------------------------------


def test_every_phony_target_has_a_help_line() -> None:
    # Given the targets the Makefile declares .PHONY
    phony = phony_targets()
    assert "help" in phony
    # When the lines `make help` prints are read
    documented = help_lines()
    # Then each phony target has one, with some text
    assert sorted(phony - documented.keys()) == []
    assert [name for name in phony if not documented[name]] == []


def test_make_alone_still_installs() -> None:
    # Given the Makefile, When `make` runs without a target, Then it installs (not `help`)
    assert ".DEFAULT_GOAL := install" in makefile_lines()


# --- requirements-dev.lock -----------------------------------------------------------------------


def test_the_lock_pins_every_requirement_within_its_specifier() -> None:
    # Given the pins of the lock and the requirements it was compiled from (requirements.txt included)
    pins = lock_pins()
    wanted = requirements(ROOT / "requirements-dev.txt")
    assert any(canonicalize_name(r.name) == "aws-cdk-lib" for r in wanted)  # the -r include was followed
    # When each requirement is looked up in the lock
    locked = {str(r): pins.get(canonicalize_name(r.name)) for r in wanted}
    missing = [req for req, version in locked.items() if version is None]
    outside = [f"{req} (locked {version})" for req, version in locked.items() if version and version not in Requirement(req).specifier]
    # Then every one is pinned, within its specifier: otherwise run `make lock`
    assert missing == [], "not in requirements-dev.lock; run `make lock`"
    assert outside == [], "locked outside requirements-dev.txt; run `make lock`"


def test_every_pin_of_the_lock_has_hashes_and_the_build_backend_is_pinned() -> None:
    # Given the lock, one pin per block of `name==version \` followed by its `--hash=` lines
    blocks = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text())
    pinned = [b for b in blocks if PIN.match(b)]
    # Then every pin carries at least one sha256 (pip --require-hashes refuses anything else)
    assert pinned
    assert [b.split()[0] for b in pinned if "--hash=sha256:" not in b] == []
    # And setuptools (>= 70) and wheel are pinned, for the offline `pip wheel --no-build-isolation`
    pins = lock_pins()
    assert pins["setuptools"] >= Version("70")
    assert "wheel" in pins
    # And the lock names no index or find-links of the machine that compiled it
    index_options = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links")
    assert [line for line in LOCK.read_text().splitlines() if line.startswith(index_options)] == []


def test_uv_is_locked_at_the_makefile_s_version_with_its_hashes_and_installs_the_lock_checking_them() -> None:
    # Given the uv version the Makefile names and requirements-uv.lock, which pip installs uv from
    [version] = [line.split(":=")[1].strip() for line in makefile_lines() if line.startswith("UV_VERSION :=")]
    text = UV_LOCK.read_text()
    # Then the lock pins uv alone, at that version, with the hashes of its wheels (one per platform)
    assert {canonicalize_name(m.group(1)): m.group(2) for m in map(PIN.match, text.splitlines()) if m} == {"uv": version}
    assert text.count("--hash=sha256:") > 1
    # And `make install` installs uv and then the lock with hashes required, resolving nothing
    recipe = [line.strip() for line in makefile_lines()]
    assert "$(PY) -m pip install --quiet --require-hashes --no-deps -r $(UV_LOCK)" in recipe
    [uv_install] = [line for line in recipe if line.startswith("$(UV) pip install")]
    assert {"--require-hashes", "--no-deps"} <= set(uv_install.split())
    assert uv_install.endswith("-r $(LOCK)")
    assert "$(PY) -m pip check" in recipe
    # And then compiles the bytecode: compileall on every core for all but aws-cdk-lib, and of aws-cdk-lib what
    # importing the app writes, with PYTHONDONTWRITEBYTECODE (which these machines set) lifted for that import
    [bytecode] = [line for line in recipe if "-m compileall" in line]
    assert "-m compileall -q -j0 -x '/aws_cdk/' $(SITE_PACKAGES)" in bytecode
    assert "env -u PYTHONDONTWRITEBYTECODE $(PY) -c 'import aws_cdk.assertions, app'" in bytecode


# --- package.json and package-lock.json ----------------------------------------------------------


def test_every_npm_package_is_pinned_exactly_and_locked_at_that_version() -> None:
    # Given package.json's devDependencies (the CDK CLI, asl-validator for the definition gate)
    wanted: dict[str, str] = json.loads(PACKAGE_JSON.read_text())["devDependencies"]
    assert {"aws-cdk", "asl-validator"} <= wanted.keys()
    # Then each is an exact version, no range (`npm install --save-exact`)
    assert [f"{name}@{version}" for name, version in wanted.items() if not re.fullmatch(r"\d+\.\d+\.\d+", version)] == []
    # And package-lock.json, which `npm ci` installs, has the same pins and installs each at its pin
    lock = json.loads(PACKAGE_LOCK.read_text())["packages"]
    assert lock[""]["devDependencies"] == wanted, "package-lock.json is stale: run `npm install`"
    assert {name: lock[f"node_modules/{name}"]["version"] for name in wanted} == wanted
