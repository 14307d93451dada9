"""The JSON documents and their schemas: the committed schemas are the ones the report types generate, real
documents produced by the code validate against them, and a renamed or extra key does not."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from vgpuctl.cli.common import error_report
from vgpuctl.cli.guest import guest_run_report
from vgpuctl.cli.main import app
from vgpuctl.cli.vm import vm_vgpus_report
from vgpuctl.domain import CheckStatus, Outcome
from vgpuctl.errors import InventoryError, InventoryErrors, PlanError, UsageError
from vgpuctl.guest.runner import DeployResult, GuestOutcome
from vgpuctl.hosts.facts import GpuFacts, HostFacts
from vgpuctl.hosts.status import host_status, merge_status
from vgpuctl.model import (
    ApplyResult,
    CloneSpec,
    DeviceChange,
    FieldChange,
    HostApplyResult,
    HostChange,
    HostOutcome,
    Observed,
    ObservedGpu,
    ObservedHost,
    ObservedProfile,
    ObservedVgpu,
    ObservedVm,
    Op,
    Plan,
    VmChange,
    VmOutcome,
)
from vgpuctl.reports import schemas
from vgpuctl.reports.base import VgpuCount
from vgpuctl.reports.guests import ProvisionReport
from vgpuctl.reports.plan import AffectedVm, HostChangeReport, apply_report, host_diff, plan_report, with_class_plan
from vgpuctl.reports.preflight import PreflightCheck, preflight_report
from vgpuctl.reports.schemas import REPORTS
from vgpuctl.reports.status import profiles_report, status_report, with_supervisor
from vgpuctl.supervisor.vmclasses import (
    ClassChange,
    ClassState,
    NamespaceChange,
    NamespaceState,
    SupervisorPlan,
    SupervisorState,
)

pytestmark = pytest.mark.unit

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
GPU0, GPU1 = "0000:3b:00.0", "0000:5e:00.0"


def _schema(kind: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{kind}.schema.json").read_text(encoding="utf-8"))


def _valid(kind: str, doc: dict[str, Any]) -> dict[str, Any]:
    jsonschema.validate(json.loads(json.dumps(doc)), _schema(kind))
    return doc


@pytest.mark.parametrize("report", REPORTS, ids=schemas.kind_of)
def test_committed_schema_is_generated_from_the_types(report: type[Any]) -> None:
    path = SCHEMAS / f"{schemas.kind_of(report)}.schema.json"
    assert path.read_text(encoding="utf-8") == schemas.render(report), "run: python -m vgpuctl.schemas docs/schemas"


def test_every_object_forbids_unknown_keys() -> None:
    def objects(node: Any) -> Any:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                yield node
            for value in node.values():
                yield from objects(value)
        elif isinstance(node, list):
            for value in node:
                yield from objects(value)

    for report in REPORTS:
        found = list(objects(schemas.schema_for(report)))
        assert found and all(o["additionalProperties"] is False for o in found), schemas.kind_of(report)


# ------------------------------------------------------------------------------------------ documents


def farm() -> Observed:
    a100 = {"device_name": "NVIDIA A100-PCIE-40GB", "memory_kb": 40 * 1024 * 1024, "graphics_type": "sharedDirect"}
    host = ObservedHost(
        name="esx-01",
        cluster="GPU",
        module_options="NVreg_NvLinkDisable=1",
        gpus=[
            ObservedGpu(pci_id=GPU0, vgpu_mode="sameSize", vms=["a"], nvlink_set=0, **a100),
            ObservedGpu(pci_id=GPU1, vgpu_mode="multiInstanceGpu", **a100),
        ],
        offered_profiles=["grid_a100-20c", "grid_a100-3-20c", "not-a-profile"],
        profiles={"grid_a100-3-20c": ObservedProfile("grid_a100-3-20c", 20, "mig")},
    )
    vms = {
        "a": ObservedVm(
            "a", host="esx-01", folder="ml", power_state="poweredOn", vgpus=[ObservedVgpu(1, "grid_a100-20c", 7)]
        ),
        "idle": ObservedVm("idle"),
    }
    return Observed(datacenter="DC0", hosts={"esx-01": host}, vms=vms)


def a_plan() -> Plan:
    return Plan(
        vm_changes=[
            VmChange(
                "a",
                fields=[FieldChange("numCPUs", 4, 8), FieldChange("memoryReservationLockedToMax", False, True)],
                devices=[DeviceChange(Op.ADD, "grid_a100-20c", group=0), DeviceChange(Op.REMOVE, "grid_a100-10c", 9)],
                extra_config={"pciPassthru.use64bitMMIO": "TRUE", "old": None},
                power_off=True,
                power_on=True,
                depends_on_hosts=["esx-01"],
            ),
            VmChange("b", clone=CloneSpec("tmpl", cluster="GPU", memory_mb=4096), power_on=True),
        ],
        host_changes=[
            HostChange("esx-01", "mig", GPU0, "time-sliced", "mig", True, True),
            HostChange("esx-01", "nvlink", "host", "enabled", "disabled", True, True),
        ],
        warnings=["vm b: something to know"],
    )


def host_outcomes() -> HostApplyResult:
    failed = HostOutcome("esx-02", Outcome.FAILED, steps=["enter-maintenance"], phase="reboot", message="timeout")
    failed.in_maintenance, failed.vms_to_restore = True, ["a"]
    return HostApplyResult([HostOutcome("esx-01", Outcome.CHANGED, steps=["reboot"], rebooted=True), failed])


def apply_document(verbose: int = 0, vm: str | None = None) -> dict[str, Any]:
    vms = ApplyResult(
        [VmOutcome("a", Outcome.CHANGED, ["reconfigure"]), VmOutcome("b", Outcome.FAILED, [], "InvalidState", "no")],
        hosts_not_ready=["esx-02"],
    )
    return apply_report(a_plan(), vms, hosts=host_outcomes(), vm_errors=["vm c: cannot power on"], vm=vm,
                        round_trips=12 if verbose else None).to_dict()


def host_document() -> dict[str, Any]:
    facts = HostFacts("esx-01", shell=True, options_effective="")
    facts.gpus[GPU0] = GpuFacts(GPU0, mig_current=False, mig_pending=True, nvlink_links=12, nvlink_active=12)
    return host_status(farm().hosts["esx-01"], facts, shell_error=None).to_dict()


def status_document() -> dict[str, Any]:
    observed = farm()
    facts = HostFacts("esx-01", shell=True, gpus={GPU0: GpuFacts(GPU0, mig_current=True, mig_pending=True)})
    rows = {"esx-01": host_status(observed.hosts["esx-01"], facts, shell_error="ssh: refused")}
    supervisor = SupervisorState(
        classes={"gpu": ClassState("gpu", 8, 65536, vgpus=["grid_a100-20c"])},
        namespaces={"ml": NamespaceState("ml", "domain-c1", ["gpu"])},
        supervisor_clusters={"domain-c1": "GPU"},
    )
    return with_supervisor(merge_status(status_report(observed, round_trips=5), rows), supervisor).to_dict()


def class_plan() -> SupervisorPlan:
    want = ClassState("gpu", 8, 65536, memory_reservation=100, vgpus=["grid_a100-20c"])
    return SupervisorPlan(
        class_changes=[
            ClassChange(Op.ADD, "gpu", vgpus_added=["grid_a100-20c"], desired=want),
            ClassChange(Op.CHANGE, "small", [FieldChange("cpus", 2, 4)], ["grid_a100-10c"], ["grid_a100-4c"],
                        {"pciPassthru.64bitMMIOSizeGB": None}, want),
        ],
        namespace_changes=[NamespaceChange("ml", ["gpu"], ["old"])],
    )


def plan_document(round_trips: int | None = None) -> dict[str, Any]:
    return with_class_plan(plan_report(a_plan(), round_trips), class_plan()).to_dict()


def guest_result() -> DeployResult:
    return DeployResult(
        [GuestOutcome("a", "trainers", "changed", ok=5, changed=2), GuestOutcome("b", "trainers", "unreachable")],
        Path("/tmp/artifacts"),
        "failed",
        2,
    )


def provision_document() -> dict[str, Any]:
    vms = ApplyResult([VmOutcome("a", Outcome.CHANGED, ["power-on"])])
    applied = apply_report(a_plan(), vms)
    return ProvisionReport(applied, guest_run_report(guest_result())).to_dict()


def cli_validate(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "inv.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["-o", "json", "validate", "-f", str(path)])
    return dict(json.loads(result.stdout))


GOOD = "apiVersion: vgpuctl/v1\nvms:\n  - name: a\n    vgpus: {profile: grid_a100-20c, count: 2}\n"
BAD = GOOD.replace("count: 2", "count: 9") + "  - name: b\n    cpus: x\n"

DOCUMENTS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "plan": lambda _t: plan_document(),
    "plan-verbose": lambda _t: plan_document(round_trips=4),
    "apply": lambda _t: apply_document(),
    "apply-vm-verbose": lambda _t: apply_document(verbose=1, vm="a"),
    "host": lambda _t: host_document(),
    "host-change": lambda _t: HostChangeReport(
        "esx-01",
        [host_diff(c) for c in a_plan().host_changes],
        [AffectedVm("a", [VgpuCount("grid_a100-20c", 1)])],
        host_outcomes().hosts[1],
    ).to_dict(),
    "status": lambda _t: status_document(),
    "profiles": lambda _t: profiles_report(list(farm().hosts.values()), round_trips=2).to_dict(),
    "vm-vgpus": lambda _t: vm_vgpus_report(farm(), farm().vms["a"]).to_dict(),
    "guests": lambda _t: guest_run_report(guest_result()).to_dict(),
    "provision": lambda _t: provision_document(),
    "validate": lambda t: cli_validate(t, GOOD),
    "preflight": lambda _t: preflight_report("https://vc/sdk", [
        PreflightCheck("host.ssh", CheckStatus.FAIL, "refused", "esx-01", "start it"),
        PreflightCheck("vcenter.version", CheckStatus.PASS, "8.0.3")]).to_dict(),
    "error": lambda t: cli_validate(t, BAD),
    "error-plan": lambda _t: error_report(PlanError(["vm a: no GPU", "vm b: no host"])).to_dict(),
    "error-usage": lambda _t: error_report(UsageError("--yes needed")).to_dict(),
    "error-located": lambda _t: error_report(InventoryErrors([InventoryError("bad", "f.yaml", 3, 4)])).to_dict(),
}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_documents_validate_against_their_schema(name: str, tmp_path: Path) -> None:
    doc = DOCUMENTS[name](tmp_path)
    kind = "error" if name.startswith("error") else doc["kind"]
    assert kind == name.removesuffix("-verbose").removesuffix("-vm") or name.startswith("error")
    _valid(kind, doc)


def _rename_first_key(doc: Any, old: str, new: str) -> bool:
    """Rename `old` to `new` in the first object (depth first) that has it."""
    if isinstance(doc, dict):
        if old in doc:
            doc[new] = doc.pop(old)
            return True
        return any(_rename_first_key(v, old, new) for v in doc.values())
    if isinstance(doc, list):
        return any(_rename_first_key(v, old, new) for v in doc)
    return False


@pytest.mark.parametrize(
    ("name", "old", "new"),
    [
        ("status", "host", "name"),  # a host is `host` in every document
        ("status", "fb_gb", "memory_gb"),
        ("status", "nvlink_group", "nvlink_set"),
        ("vm-vgpus", "vm", "name"),
        ("plan", "nvlink_group", "group"),
        ("plan", "vm_class", "name"),  # a VM class is `vm_class` in every document
        ("plan", "vgpus_added", "vgpus"),
        ("plan", "namespace", "name"),
        ("status", "vm_class", "name"),
        ("apply", "failed", "errors_seen"),
        ("error", "details", "problems"),
        ("host", "gpu", "pci_id"),
        ("profiles", "profile", "name"),
    ],
)
def test_a_renamed_key_fails_validation(name: str, old: str, new: str, tmp_path: Path) -> None:
    doc = copy.deepcopy(DOCUMENTS[name](tmp_path))
    kind = "error" if name == "error" else doc["kind"]
    _valid(kind, doc)
    assert _rename_first_key(doc, old, new), (name, old)
    with pytest.raises(jsonschema.ValidationError):
        _valid(kind, doc)


def test_vgpus_are_always_profile_counts() -> None:
    doc = status_document()
    listed = vm_vgpus_report(farm(), farm().vms["a"]).to_dict()["vgpus"]
    assert doc["vms"][0]["vgpus"] == doc["hosts"][0]["gpus"][0]["vgpus"] == listed
    assert listed == [{"profile": "grid_a100-20c", "count": 1}]
    bad = copy.deepcopy(doc)
    bad["vms"][0]["vgpus"] = ["grid_a100-20c"]
    with pytest.raises(jsonschema.ValidationError):
        _valid("status", bad)


def test_round_trips_only_when_asked() -> None:
    assert "round_trips" not in apply_document() and apply_document(verbose=1)["round_trips"] == 12
    assert "round_trips" not in plan_report(a_plan()).to_dict()
