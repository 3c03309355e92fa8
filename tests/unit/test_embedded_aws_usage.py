"""Every embedded cloud is moto with atomic DynamoDB requests (devtools/aws/moto_patches.embedded_aws).

The handlers run their DynamoDB calls on a pool, and moto's tables are not safe across threads: a
transaction deep-copies a table while another thread writes it ("dictionary changed size during
iteration"), and a condition can pass twice. A bare mock_aws made CI fail that way once.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("benchmarks", "devtools", "ops", "tests")
# moto_patches defines embedded_aws; test_moto_patches checks the patches against unpatched moto;
# this file names what it looks for.
ALLOWED = {Path("devtools/aws/moto_patches.py"), Path("tests/integration/test_moto_patches.py"), Path(__file__).resolve().relative_to(ROOT)}
BARE_MOCK = re.compile(r"\bmock_aws\s*\(")


def bare_mock_aws_uses() -> list[str]:
    uses = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative in ALLOWED:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if BARE_MOCK.search(line):
                    uses.append(f"{relative}:{number}: {line.strip()}")
    return uses


def test_no_embedded_cloud_is_a_bare_mock_aws() -> None:
    # Given every Python file of the tools, the benchmarks and the tests
    # When they are searched for mock_aws( outside the patches and their own tests
    uses = bare_mock_aws_uses()
    # Then there is none: each goes through embedded_aws
    assert uses == [], "use devtools.aws.moto_patches.embedded_aws instead of mock_aws:\n" + "\n".join(uses)


def test_the_scan_finds_a_bare_mock_aws(tmp_path: Path) -> None:
    # Given a line as a test would write it
    line = "    with mock_aws(), other():"
    # When it is matched
    # Then the scan catches it (and not the helper's own name)
    assert BARE_MOCK.search(line)
    assert not BARE_MOCK.search("    with embedded_aws():")
