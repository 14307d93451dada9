"""The JSON text of printed documents and run records (vgpuctl.jsontext): json.dumps(indent=2)'s layout, the same
values to a reader, UTF-8 on stdout whatever the terminal's encoding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vgpuctl import jsontext
from vgpuctl.model import CloneSpec, Plan, VmChange
from vgpuctl.reports.plan import plan_report

pytestmark = pytest.mark.unit

PLAN = plan_report(Plan(vm_changes=[VmChange(f"train-{i:02d}", clone=CloneSpec("ubuntu"), power_on=True)
                                    for i in range(3)], warnings=["a warning"]))


def test_a_document_is_laid_out_as_json_dumps_lays_it_out() -> None:
    document = PLAN.to_dict()
    assert jsontext.document(document).decode() == json.dumps(document, indent=2)
    empties = {"a": [], "b": {}, "c": [{}], "d": None, "e": True, "f": 0.5, "g": -3, "h": "x\"\\\n\t"}
    assert jsontext.document(empties).decode() == json.dumps(empties, indent=2)
    assert jsontext.compact(empties) == json.dumps(empties, separators=(",", ":"))


@pytest.mark.parametrize("value", [{"name": "gpu-ü-ß-雪", "line": "\u2028"}, [1e-5, 1e-7, 1e16, 2.5e-300, -0.0],
                                   {"control": "\x00\x1f\x7f"}])
def test_what_it_spells_otherwise_reads_back_the_same(value: object) -> None:
    """Non-ASCII characters as they are (UTF-8), a few small floats without the exponent's zero: the same values."""
    assert json.loads(jsontext.document(value)) == value
    assert json.loads(jsontext.compact(value)) == value


def test_a_document_is_utf8_on_a_terminal_that_is_not(tmp_path: Path) -> None:
    """The document goes to stdout as UTF-8 bytes, JSON's own encoding, also where the terminal's is another (here
    Latin-1)."""
    missing = tmp_path / "ünïcode" / "inventory.yaml"
    done = subprocess.run([sys.executable, "-m", "vgpuctl", "-o", "json", "plan", "-f", str(missing)],
                          capture_output=True, cwd=tmp_path, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "latin-1", "HOME": str(tmp_path),
                               "VGPUCTL_HISTORY": "off"})
    assert done.returncode == 1, done.stderr
    error = json.loads(done.stdout.decode("utf-8"))["error"]
    assert "ünïcode" in error["message"]
