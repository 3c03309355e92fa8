"""The docs cannot drift from the code: each props page's tables name exactly the fields of the
dataclasses they document, every props or config dataclass of the public API has a table, and the
README stays a short front page (the rest lives in docs/) whose links reach their files.

Pure file parsing plus imports of the dataclasses: no mkdocs build (`make docs` does that).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import onceflow.constructs
from onceflow.infra.common import CommonProps, TableOptions
from onceflow.infra.config import EnvConfig, MonitoringConfig
from onceflow.infra.event_log.monitoring import EventLogMonitoringProps
from onceflow.infra.event_log.props import EventLogAlarms, EventLogConfig, EventLogProps
from onceflow.infra.monitoring import AlarmTopicProps
from onceflow.infra.runner_stats.monitoring import RunnerStatsMonitoringProps
from onceflow.infra.runner_stats.props import RunnerStatsAlarms, RunnerStatsConfig, RunnerStatsPipelineProps
from onceflow.infra.taxi_etl.monitoring import TaxiEtlMonitoringProps
from onceflow.infra.taxi_etl.props import TaxiEtlAlarms, TaxiEtlConfig, TaxiEtlSagaProps

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README_MAX_LINES = 250

# The page that holds each dataclass's props table.
PROPS_PAGES: dict[str, tuple[type, ...]] = {
    "runner-stats.md": (RunnerStatsPipelineProps, RunnerStatsConfig, RunnerStatsAlarms, RunnerStatsMonitoringProps),
    "event-log.md": (EventLogProps, EventLogConfig, EventLogAlarms, EventLogMonitoringProps),
    "taxi-etl.md": (TaxiEtlSagaProps, TaxiEtlConfig, TaxiEtlAlarms, TaxiEtlMonitoringProps),
    "use-in-your-stack.md": (CommonProps, TableOptions, AlarmTopicProps),
    "deploying.md": (EnvConfig, MonitoringConfig),
}
DOCUMENTED = [pytest.param(page, cls, id=cls.__name__) for page, classes in PROPS_PAGES.items() for cls in classes]
TABLE_HEADER = "| name | type | default | what it changes |"
# A table's first cell names the field in backticks.
ROW_NAME = re.compile(r"^\|\s*`([A-Za-z_][A-Za-z0-9_]*)`\s*\|")


def props_table(page: str, class_name: str) -> list[str]:
    """The rows of the table under the heading `` `ClassName` `` of a docs page."""
    lines = (DOCS / page).read_text().splitlines()
    heading = re.compile(rf"^#{{2,4}} `{class_name}`$")
    starts = [index for index, line in enumerate(lines) if heading.match(line)]
    assert len(starts) == 1, f"{page}: {len(starts)} headings for {class_name}, expected exactly one"
    table = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith("|"):
            table.append(line)
        elif table or line.startswith("#"):
            break
    assert table, f"{page}: no table under the heading of {class_name}"
    assert table[0] == TABLE_HEADER, f"{page}: {class_name}'s table header is {table[0]!r}"
    return table[2:]


@pytest.mark.parametrize(("page", "cls"), DOCUMENTED)
def test_props_table_names_exactly_the_dataclass_fields(page: str, cls: type) -> None:
    # Given the props table of a dataclass on its page
    rows = props_table(page, cls.__name__)

    # When its rows are read by the field they name
    names = []
    for row in rows:
        match = ROW_NAME.match(row)
        assert match is not None, f"{page}: a row of {cls.__name__}'s table names no field: {row!r}"
        names.append(match.group(1))
        assert row.count(" | ") >= 3 and not row.rstrip().endswith("|  |"), f"{page}: {row!r} lacks a type, default or description"

    # Then each field has one row, in the order the class declares them, and no row names a field the class lacks
    fields = [field.name for field in dataclasses.fields(cls)]
    assert sorted(set(names) - set(fields)) == [], f"{page}: {cls.__name__} has no such fields"
    assert sorted(set(fields) - set(names)) == [], f"{page}: {cls.__name__}'s fields missing from its table"
    assert names == fields


def test_every_public_props_dataclass_has_a_table() -> None:
    # Given every dataclass that onceflow.constructs exports (the props, settings and thresholds a team passes)
    exported = {name for name in onceflow.constructs.__all__ if dataclasses.is_dataclass(getattr(onceflow.constructs, name))}

    # Then each is documented on a page
    documented = {cls.__name__ for classes in PROPS_PAGES.values() for cls in classes}
    assert exported - documented == set()


def test_readme_is_a_short_front_page() -> None:
    # Given the README
    lines = (ROOT / "README.md").read_text().splitlines()

    # Then it stays within its budget; everything else lives in docs/
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_readme_links_reach_files() -> None:
    # Given the README's relative links (the docs site checks its own; the README is outside it)
    text = (ROOT / "README.md").read_text()
    targets = [target for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text) if "://" not in target]

    # Then each names a file of the repository
    assert targets, "README.md links to no docs page"
    assert [target for target in targets if not (ROOT / target).is_file()] == []
