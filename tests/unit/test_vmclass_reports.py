"""VM classes in the other documents: the plan's class and namespace diff, saved plans refusing changed classes,
`status` listing classes with vGPUs (or a warning when they could not be read), and `validate`'s one pass."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vgpuctl import planfile
from vgpuctl.cli.main import app
from vgpuctl.cli.status import reads_vm_classes
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import ApplyResult, Observed, ObservedHost, Plan, VmChange
from vgpuctl.records.classes import ClassState, NamespaceState, SupervisorState
from vgpuctl.reports.apply import apply_report
from vgpuctl.reports.plan import plan_report, with_class_plan
from vgpuctl.reports.status import plain_status, render_status, status_report, with_supervisor
from vgpuctl.supervisor.vmclasses import SupervisorPlan, plan_supervisor

pytestmark = pytest.mark.unit

INVENTORY = """\
apiVersion: vgpuctl/v1
vm_classes:
  - {name: gpu-big, cpus: 16, memory_gb: 128, vgpus: {profile: grid_a100-40c, count: 2}}
  - {name: gpu-small, cpus: 4, memory_gb: 32, vgpus: {profile: grid_a100-10c}}
  - {name: old, state: absent}
namespaces:
  - {name: ml-team, vm_classes: [gpu-big, gpu-small]}
"""


def observed() -> Observed:
    host = ObservedHost("esx-01", cluster="WL", offered_profiles=["grid_a100-10c", "grid_a100-20c", "grid_a100-40c"])
    return Observed(datacenter="DC0", hosts={"esx-01": host}, clusters={"WL": ["esx-01"]})


def state(small_profile: str = "grid_a100-20c") -> SupervisorState:
    """vCenter: gpu-small exists with another profile, `old` exists, ml-team uses gpu-small and old."""
    small = ClassState("gpu-small", 4, 32768, memory_reservation=100, vgpus=[small_profile],
                       extra_config={"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "128"})
    return SupervisorState(
        classes={"gpu-small": small, "old": ClassState("old", 2, 4096)},
        namespaces={"ml-team": NamespaceState("ml-team", "domain-c1", ["gpu-small", "old"])},
        supervisor_clusters={"domain-c1": "WL"},
    )


def class_plan(small_profile: str = "grid_a100-20c") -> SupervisorPlan:
    inventory = load_inventory_text(INVENTORY, "inv.yaml")
    return plan_supervisor(inventory, state(small_profile), observed())


# ------------------------------------------------------------------------------------------ plan document


def test_plan_document_carries_the_class_and_namespace_diff_in_apply_order() -> None:
    doc = with_class_plan(plan_report(Plan()), class_plan()).to_dict()
    assert [(c["vm_class"], c["op"]) for c in doc["vm_classes"]] == [("gpu-big", "+"), ("gpu-small", "~"),
                                                                     ("old", "-")]
    big, small, old = doc["vm_classes"]
    assert big["vgpus_added"] == [{"profile": "grid_a100-40c", "count": 2}] and big["vgpus_removed"] == []
    assert {f["field"]: (f["op"], f["old"], f["new"]) for f in big["fields"]}["memory_reservation"] == ("+", None, 100)
    assert big["extra_config"] == {}  # 2 x 128 GB of MMIO: vm-operator's 512 GB default covers them
    assert small["vgpus_added"] == [{"profile": "grid_a100-10c", "count": 1}]
    assert small["vgpus_removed"] == [{"profile": "grid_a100-20c", "count": 1}]
    assert small["fields"] == [] and old["fields"] == [] and old["vgpus_added"] == []
    assert doc["namespaces"] == [{"namespace": "ml-team", "add": ["gpu-big"], "remove": ["old"]}]
    assert (doc["summary"]["vm_classes"], doc["summary"]["namespaces"]) == (3, 1)


def test_plan_document_without_classes_has_empty_lists() -> None:
    doc = with_class_plan(plan_report(Plan()), None).to_dict()
    assert doc["vm_classes"] == [] and doc["namespaces"] == [] and doc["summary"]["vm_classes"] == 0


# ------------------------------------------------------------------------------------------ saved plans


def saved(tmp_path: Path, classes: SupervisorPlan | None) -> tuple[Path, planfile.SavedPlan]:
    path = tmp_path / "p.plan"
    basis = planfile.basis_of(observed(), Plan(vm_changes=[VmChange("a", power_on=True)]), classes)
    planfile.save(path, planfile.SavedPlan("apiVersion: vgpuctl/v1\n", "inv.yaml", "https://vc/sdk", basis, {}))
    return path, planfile.load(path)


def check(path: Path, loaded: planfile.SavedPlan, classes: SupervisorPlan | None) -> None:
    plan = Plan(vm_changes=[VmChange("a", power_on=True)])
    planfile.check_still_valid(path, loaded, "https://vc/sdk", observed(), plan, classes)


def test_saved_plan_accepts_the_same_class_plan_and_refuses_another(tmp_path: Path) -> None:
    path, loaded = saved(tmp_path, class_plan())
    assert " classes:" in loaded.basis
    check(path, loaded, class_plan())  # planned again the same: accepted
    with pytest.raises(planfile.PlanFileError, match="the VM classes or namespaces changed since"):
        check(path, loaded, class_plan(small_profile="grid_a100-40c"))  # someone edited gpu-small meanwhile
    with pytest.raises(planfile.PlanFileError, match="the VM classes or namespaces changed since"):
        check(path, loaded, None)


def test_saved_plan_without_classes(tmp_path: Path) -> None:
    path, loaded = saved(tmp_path, None)
    assert "classes:" not in loaded.basis
    check(path, loaded, None)
    with pytest.raises(planfile.PlanFileError, match="the VM classes or namespaces changed since"):
        check(path, loaded, class_plan())  # a plan file that left the classes out is not applied with them


# ------------------------------------------------------------------------------------------ status


def test_status_lists_classes_with_vgpus_and_their_namespaces() -> None:
    have = state()
    have.namespaces["data-team"] = NamespaceState("data-team", "domain-c1", ["gpu-small"])
    report = with_supervisor(status_report(observed()), have)
    doc = report.to_dict()
    assert doc["vm_classes"] == [{"vm_class": "gpu-small", "vgpus": [{"profile": "grid_a100-20c", "count": 1}],
                                  "cpus": 4, "memory_mb": 32768, "namespaces": ["data-team", "ml-team"]}]
    assert doc["supervisor_clusters"] == ["WL"] and doc["warnings"] == []
    assert plain_status(report).splitlines()[-1] == (
        "vm class gpu-small  vgpus grid_a100-20c  cpus 4  memory MB 32768  namespaces data-team, ml-team")


def test_status_rest_failure_is_a_warning_and_no_supervisor_lists_nothing() -> None:
    failed = with_supervisor(status_report(observed()), None, "vSphere REST GET /api/x: 503 server error")
    assert failed.to_dict()["vm_classes"] == []
    assert failed.to_dict()["warnings"] == ["VM classes not read: vSphere REST GET /api/x: 503 server error"]
    assert plain_status(failed).splitlines()[-1] == (
        "warning: VM classes not read: vSphere REST GET /api/x: 503 server error")
    none = with_supervisor(status_report(observed()), SupervisorState())
    assert "vm class" not in plain_status(none) and "VM class" not in plain_status(none)
    no_gpu = state()
    no_gpu.classes = {"old": ClassState("old", 2, 4096)}
    assert plain_status(with_supervisor(status_report(observed()), no_gpu)).endswith("No VM class has vGPUs.")


@pytest.mark.parametrize(
    ("flag", "api", "expected"),
    [(None, "8.0.3.0", True), (None, "7.0", True), (None, "6.7.3", False), (False, "8.0.3.0", False),
     (True, "6.7", True), (None, "weird", True)],
)
def test_status_reads_vm_classes_from_vsphere_7(flag: bool | None, api: str, expected: bool) -> None:
    assert reads_vm_classes(flag, api) is expected


# ------------------------------------------------------------------------------------------ validate


def test_validate_reports_vm_and_class_problems_in_one_pass(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent("""\
        apiVersion: vgpuctl/v1
        vms:
          - {name: a, cpus: 2, memory_gb: 8}
          - {name: a, cpus: 2, memory_gb: 8}
        vm_classes:
          - {name: c, cpus: 1, memory_gb: 4}
          - {name: c, cpus: 1, memory_gb: 4}
        """))
    result = CliRunner().invoke(app, ["-o", "json", "validate", "-f", str(path)])
    assert result.exit_code == 1
    messages = [d["message"] for d in json.loads(result.stdout)["error"]["details"]]
    assert any("duplicate VM name 'a'" in m for m in messages), messages
    assert any("VM class 'c' is defined twice" in m for m in messages), messages


def test_validate_counts_classes_and_namespaces(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    result = CliRunner().invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{path}: valid (0 host entries, 0 VMs, 3 VM classes, 1 namespaces)"
    doc = json.loads(CliRunner().invoke(app, ["-o", "json", "validate", "-f", str(path)]).stdout)
    assert (doc["vm_classes"], doc["namespaces"]) == (3, 1)


def test_apply_document_carries_the_class_plan_it_applied() -> None:
    doc = apply_report(Plan(), ApplyResult(), classes=class_plan()).to_dict()
    assert [c["vm_class"] for c in doc["plan"]["vm_classes"]] == ["gpu-big", "gpu-small", "old"]
    assert doc["plan"]["namespaces"][0]["namespace"] == "ml-team"


@pytest.mark.parametrize("width", [200, 80])
def test_status_tables_show_the_classes_and_the_warnings(width: int) -> None:
    import io

    from rich.console import Console

    report = with_supervisor(status_report(observed()), state(), "REST went away")
    console = Console(width=width, file=io.StringIO())
    for renderable in render_status(report, width):
        console.print(renderable)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "VM classes with vGPUs (supervisor clusters: WL)" in text
    assert "gpu-small" in text and "grid_a100-20c" in text and "ml-team" in text
    assert "warning: VM classes not read: REST went away" in text
