"""`vgpuctl show PLANFILE`: a saved plan shown exactly as `plan` showed it, text and JSON, from the report the
file holds; the report comes back from its JSON document whole (every plan fixture, a scoped plan, VM classes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vgpuctl import planfile
from vgpuctl.cli.main import app
from vgpuctl.inventory import load_inventory_text, validate
from vgpuctl.planner import make_plan
from vgpuctl.reports.base import TextLayout, from_json
from vgpuctl.reports.plan import PlanReport, plan_report
from vgpuctl.scope import Scope

sys.path.insert(0, str(Path(__file__).parent))
from test_plan import CASES, _load, _observed
from test_schemas import REPORT_CASES
from test_scope import scoped

pytestmark = pytest.mark.unit


def fixture_report(path: Path) -> PlanReport:
    case = _load(path)
    inventory = load_inventory_text(case["inventory"], "case.yaml")
    validate(inventory)
    return plan_report(make_plan(inventory, _observed(case)))


def plain(report: PlanReport) -> str:
    return str(report.render_text(TextLayout(200, True)))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_every_fixture_plan_comes_back_from_its_document(path: Path) -> None:
    report = fixture_report(path)
    again = from_json(PlanReport, json.loads(json.dumps(report.to_dict())))
    assert again == report and plain(again) == plain(report)


def test_a_scoped_plan_and_vm_classes_come_back_too() -> None:
    the_plan, scope = scoped(Scope(vms=["train-01"]))
    for report in (plan_report(the_plan, scope=scope), REPORT_CASES["plan"](Path("."))):
        again = from_json(PlanReport, json.loads(json.dumps(report.to_dict())))
        assert again == report and plain(again) == plain(report)


def test_a_document_that_does_not_fit_is_refused() -> None:
    doc = REPORT_CASES["plan"](Path(".")).to_dict()
    with pytest.raises(ValueError, match="unknown keys"):
        from_json(PlanReport, {**doc, "surprise": 1})
    with pytest.raises(ValueError):
        from_json(PlanReport, {**doc, "vm_changes": "none"})


@pytest.mark.parametrize(("path", "value", "says"), [
    (("vm_changes", 0), None, "expected VmDiff, got null"),
    (("summary",), None, "expected PlanSummary, got null"),
    (("vm_changes", 0, "clone"), [], "expected"),
    (("vm_changes", 0, "vm"), 7, "expected str, got int"),
    (("vm_changes", 0, "power_off"), "yes", "expected bool, got str"),
])
def test_a_document_edited_to_other_types_is_refused(path: tuple[Any, ...], value: Any, says: str) -> None:
    """A saved plan edited by hand (its digest made again) is refused where it differs, not shown until it fails as a
    bug: a null, a list or a number where the report has an object, a string or a flag."""
    doc = json.loads(json.dumps(REPORT_CASES["plan"](Path(".")).to_dict()))
    where = doc
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    with pytest.raises(ValueError, match=says):
        from_json(PlanReport, doc)


def saved(tmp_path: Path, report: PlanReport) -> Path:
    path = tmp_path / "plan.json"
    document = report.to_dict()
    planfile.save(path, planfile.SavedPlan("apiVersion: vgpuctl/v1\n", "inv.yaml", "https://vc/sdk", "farm:x",
                                           document))
    return path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_show_prints_the_plan_as_plan_printed_it(tmp_path: Path) -> None:
    the_plan, scope = scoped(Scope(vms=["train-01"]))
    report = plan_report(the_plan, scope=scope)
    path = saved(tmp_path, report)
    text = invoke("show", str(path))
    assert text.exit_code == 0, text.output
    assert text.stdout.rstrip("\n") == plain(report)  # piped: the plain lines plan prints
    assert "Scope: --vm train-01" in text.stdout and "pulled in by train-01" in text.stdout
    assert f"vgpuctl apply {path}" in text.stderr
    as_json = invoke("show", str(path), "-o", "json")
    assert json.loads(as_json.stdout) == report.to_dict()


def test_show_refuses_what_is_not_a_plan(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    content = {"format": "vgpuctl-plan/v1", "version": planfile.VERSION, "vcenter": "v", "inventory_path": "i",
               "basis": "b", "plan": {"kind": "plan", "hosts": []}, "inventory": ""}
    bad.write_text(json.dumps({**content, "digest": planfile.content_digest(content)}))  # whole, but no plan
    result = invoke("show", str(bad))
    assert result.exit_code == 1 and "the saved plan cannot be read" in result.stderr
    assert "Traceback" not in result.output
    assert invoke("show", str(tmp_path / "missing.json")).exit_code == 1
