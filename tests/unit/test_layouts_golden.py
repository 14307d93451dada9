"""Every report's text at 80, 140 and 200 columns and piped, against golden files (tests/fixtures/golden/
layouts/): built from the same documents as the schema tests. Tables fit the width and nothing is cut (`…`);
piped output has no table borders. Regenerate after an intended change with VGPUCTL_UPDATE_GOLDEN=1 and review
the diff.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest
from rich.console import Console

from vgpuctl.reports.base import TextLayout

sys.path.insert(0, str(Path(__file__).parent))
from test_schemas import REPORT_CASES

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "layouts"
WIDTHS = (80, 140, 200)
BORDERS = set("│┃━─┏┓┗┛┡┩└┘╇╈")
# Cases whose documents name a temporary folder (their text changes with every run) are left to the text tests.
NAMES_A_FOLDER = {"export#file", "k8s_manifests#written", "sim-env", "experiment-validate", "experiment-run",
                  "experiment-restore", "experiment-report", "sim-down"}  # fmt: skip
CASES = sorted(name for name in REPORT_CASES if name not in NAMES_A_FOLDER)


def text_at(name: str, width: int | None, tmp_path: Path) -> str:
    report = REPORT_CASES[name](tmp_path)
    rendered = report.render_text(TextLayout(width or 200, plain=width is None))
    if rendered is None:
        return ""
    if isinstance(rendered, str):
        return rendered.rstrip("\n") + "\n"
    console = Console(width=width or 200, record=True, file=io.StringIO(), color_system=None)
    for item in rendered if isinstance(rendered, list) else [rendered]:
        console.print(item)
    return console.export_text()


@pytest.mark.parametrize("width", [*WIDTHS, None], ids=[*(str(w) for w in WIDTHS), "piped"])
@pytest.mark.parametrize("name", CASES)
def test_layout_matches_its_golden_file(name: str, width: int | None, tmp_path: Path) -> None:
    got = text_at(name, width, tmp_path)
    path = GOLDEN / f"{name.replace('#', '-')}-{width or 'piped'}.txt"
    if os.environ.get("VGPUCTL_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")
    assert "…" not in got  # wrapped, never cut
    if width is None:
        assert not BORDERS & set(got), "piped output is plain lines"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", CASES)
def test_tables_fit_the_width(name: str, width: int, tmp_path: Path) -> None:
    got = text_at(name, width, tmp_path)
    if BORDERS & set(got):  # a table: rich laid it out for the width
        assert max(len(line) for line in got.splitlines()) <= width
