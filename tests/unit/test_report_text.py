"""Text and JSON come from the same report: every value the text shows is a value of the report.

For each report a command prints (built as the command builds it, from the fixtures of test_schemas), the
text is rendered; then every string the report holds that the text shows is replaced by a sentinel of its
own, the text rendered again: each sentinel shows where its value did, and no value shown before is left.
A renderer that drew on anything but the report (the plan, the model, a global) would keep the old value.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from vgpuctl.reports.base import Rendered, Report, TextLayout
from vgpuctl.reports.schemas import REPORTS

pytestmark = pytest.mark.unit

sys.path.insert(0, str(Path(__file__).parent))
from test_schemas import REPORT_CASES, kind_of_case  # noqa: E402

# Reports without a text form: their commands show their progress and summary while they run (apply,
# provision), or say what they did on stderr (sim down, export into a file).
NO_TEXT = {"apply", "apply#vm-verbose", "apply#failed", "apply#stopped", "provision", "sim-down", "export#file",
           "fleet-apply", "fleet-export"}
# Values that are also words of the text's own labels (a guest's status is a column of the table).
LABELS = {
    "guests": {"changed", "unreachable", "failed"},
    "host": {"nvlink", "scheduler"},  # the settings' names are also the lines' labels
    "host-change": {"failed", "reboot", "maintenance"},
    "status": {"nvlink", "scheduler"},
    "capacity-demand": {"greedy"},  # the method, told in words
    "supervisor_apply": {"changed", "failed", "skipped"},
    "supervisor_plan": {"cpus"},  # a changed field, and "+ cpus N" of a new class
    "plan": {"clone", "cpus", "memoryMB", "maintenance", "reboot", "power-off", "own change", "evacuate",
             "host change", "before", "after",  # steps, flags and the words of the disruption lines
             "host"},  # a problem's subject, also the word its host lines start with
    "preflight": {"pass", "warn", "fail", "skip"},  # a check's status, and the summary's "N fail, N warn, ..."
}
# a run's record: its plan's words, and the command, states and event types its lines name
LABELS["run"] = LABELS["plan"] | {"apply", "plan", "changed", "failed", "summary", "finished", "step-start",
                                  "step-end", "run-start", "warning", "note", "host"}
LABELS["runs"] = {"apply", "plan", "failed"}
# A fleet's sections are the documents of each vCenter: their labels are theirs.
LABELS |= {"fleet-plan": LABELS["plan"], "fleet-status": LABELS["status"], "fleet-preflight": LABELS["preflight"]}
LAYOUTS = {"status": [TextLayout(200, False), TextLayout(80, False), TextLayout(200, True)]}
MIN_LENGTH = 4  # shorter strings (+, ~, ok, on) match inside unrelated words


def shows(text: str, value: str) -> bool:
    """`value` stands in `text` as a whole (not inside a longer word: a100 in grid_a100-20c does not count)."""
    return re.search(rf"(?<![\w]){re.escape(value.strip())}(?![\w])", text) is not None


def text_of(rendered: Rendered) -> str:
    if rendered is None:
        return ""
    if isinstance(rendered, str):
        return rendered
    console = Console(width=400, record=True, file=io.StringIO(), color_system=None)
    for item in rendered if isinstance(rendered, list) else [rendered]:
        console.print(item)
    return console.export_text()


def strings(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, value) of every string a report holds: dataclass fields, list items, dict keys and values."""
    if isinstance(node, str):
        yield path, node
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            yield from strings(getattr(node, f.name), f"{path}.{f.name}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from strings(item, f"{path}[{i}]")
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from strings(key, f"{path}{{{key}}}")
            yield from strings(value, f"{path}[{key}]")


def replaced(node: Any, sentinels: dict[str, str], path: str = "") -> Any:
    """A copy of `node` with the strings at the paths in `sentinels` replaced."""
    if isinstance(node, str):
        return sentinels.get(path, node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        out = copy.copy(node)
        for f in dataclasses.fields(node):
            setattr(out, f.name, replaced(getattr(node, f.name), sentinels, f"{path}.{f.name}"))
        return out
    if isinstance(node, list):
        return [replaced(item, sentinels, f"{path}[{i}]") for i, item in enumerate(node)]
    if isinstance(node, dict):
        return {replaced(k, sentinels, f"{path}{{{k}}}"): replaced(v, sentinels, f"{path}[{k}]")
                for k, v in node.items()}
    return node


# Reports whose text shows none of their strings; a field they do show is changed instead.
FLAGS = {"experiment-restore": "restored"}
TEXT_CASES = sorted(set(REPORT_CASES) - NO_TEXT - set(FLAGS))


def test_every_report_with_a_text_form_is_checked() -> None:
    kinds = {kind_of_case(name) for name in [*TEXT_CASES, *FLAGS]}
    without = {kind_of_case(name) for name in NO_TEXT} - kinds
    assert kinds | without == {r.kind for r in REPORTS if issubclass(r, Report)}
    for report in REPORTS:
        if issubclass(report, Report):
            assert report.render_text is not Report.render_text, f"{report.kind} has no render_text"


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_a_flag_the_text_shows_comes_from_the_report(name: str, tmp_path: Path) -> None:
    report = REPORT_CASES[name](tmp_path)
    flipped = dataclasses.replace(report, **{FLAGS[name]: not getattr(report, FLAGS[name])})  # type: ignore[type-var]
    assert text_of(report.render_text()) != text_of(flipped.render_text())


@pytest.mark.parametrize("name", sorted(NO_TEXT))
def test_reports_without_a_text_form_print_nothing(name: str, tmp_path: Path) -> None:
    assert REPORT_CASES[name](tmp_path).render_text() is None


@pytest.mark.parametrize("name", TEXT_CASES)
def test_the_text_shows_only_values_of_the_report(name: str, tmp_path: Path) -> None:
    report = REPORT_CASES[name](tmp_path)
    labels = LABELS.get(kind_of_case(name), set())
    for layout in LAYOUTS.get(name, [TextLayout()]):
        before = text_of(report.render_text(layout))
        shown = {path: value for path, value in strings(report)
                 if len(value.strip()) >= MIN_LENGTH and value.strip() not in labels and shows(before, value)}
        assert shown, f"{name}: the text shows none of the report's values"
        marks = {value: f"Zq{i:03d}qZ" for i, value in enumerate(sorted(set(shown.values())))}
        sentinels = {path: marks[value] for path, value in shown.items()}  # equal values stay equal
        after = text_of(replaced(report, sentinels).render_text(layout))
        left = sorted({value for value in shown.values() if shows(after, value)})
        assert left == [], f"{name} ({layout}): shown, but not from the report"
        for value in set(shown.values()):
            if any(value != other and shows(other, value) for other in shown.values()):
                continue  # shown as part of a longer value (sameSize in "time-sliced (sameSize)")
            assert marks[value] in after, f"{name} ({layout}): {value!r} no longer shown"
