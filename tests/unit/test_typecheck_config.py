"""`make typecheck` follows only the aws-cdk-lib modules the project imports (pyproject.toml, [tool.mypy]).

aws-cdk-lib's modules import one another, so following every import made mypy analyse all 679 of them:
about 100 s of CPU from a fresh clone, against 27 s with only the imported ones followed. A module that
is not followed is Any to mypy, so a new import of one would go unchecked: the list must be exactly the
modules the checked sources import, which is what this keeps true.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MYPY = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def checked_sources() -> list[Path]:
    """The files `make typecheck` checks: [tool.mypy] files, less its excludes."""
    excluded = [re.compile(pattern) for pattern in MYPY["exclude"]]
    sources = []
    for entry in MYPY["files"]:
        path = ROOT / entry
        # (walked through links: onceflow/infra is the repository's infra/, as mypy reads it)
        for source in [path] if path.is_file() else sorted(path.rglob("*.py", recurse_symlinks=True)):
            relative = source.relative_to(ROOT).as_posix()
            if not any(pattern.search(relative) for pattern in excluded):
                sources.append(source)
    return sources


def cdk_modules_imported(source: str) -> set[str]:
    """The aws_cdk modules a source imports: `import aws_cdk.x`, `from aws_cdk.x import y`, and
    `from aws_cdk import aws_x` (a submodule) or `from aws_cdk import Stack` (the root)."""
    modules = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names if alias.name.split(".")[0] == "aws_cdk"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "aws_cdk":
            if node.module == "aws_cdk":
                modules |= {f"aws_cdk.{alias.name}" if alias.name.startswith("aws_") else "aws_cdk" for alias in node.names}
            else:
                modules.add(node.module)
    return modules


def follow_imports_of(pattern: str) -> tuple[str, list[str]]:
    """The follow_imports of the override whose module list holds `pattern`, and that list."""
    overrides: list[dict[str, Any]] = MYPY["overrides"]
    [override] = [override for override in overrides if pattern in override["module"]]
    return override["follow_imports"], override["module"]


def test_aws_cdk_lib_is_skipped_but_for_the_modules_the_checked_sources_import() -> None:
    # Given the aws_cdk modules imported anywhere in the sources mypy checks
    imported = set().union(*(cdk_modules_imported(source.read_text()) for source in checked_sources()))
    assert {"aws_cdk", "aws_cdk.aws_lambda", "aws_cdk.aws_stepfunctions"} <= imported
    # When the mypy configuration is read
    rest, _ = follow_imports_of("aws_cdk.*")
    followed_imports, followed = follow_imports_of("aws_cdk.aws_lambda")
    # Then the library as a whole is skipped, and exactly the imported modules are followed: none is
    # left unchecked, and none is followed that nothing imports
    assert rest == "skip"
    assert followed_imports == "normal"
    assert set(followed) == imported


def test_the_import_reader_finds_each_spelling_of_a_cdk_import() -> None:
    # Given each way a source can import from aws-cdk-lib, and imports that are not aws-cdk-lib's
    source = "\n".join(
        [
            "import aws_cdk",
            "import aws_cdk.aws_kms as kms",
            "from aws_cdk import Duration, aws_sqs as sqs",
            "from aws_cdk.aws_s3 import IBucket",
            "from aws_cdk_extra import aws_nothing",
            "import constructs",
        ]
    )
    # Then each aws_cdk module is named once, and nothing else is
    assert cdk_modules_imported(source) == {"aws_cdk", "aws_cdk.aws_kms", "aws_cdk.aws_sqs", "aws_cdk.aws_s3"}
