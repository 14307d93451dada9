"""make_plan, table-driven from tests/fixtures/plan/*.yaml (files starting with `_` are shared bases).

A case file holds:
  description: what it shows
  inventory: the inventory document (as YAML)
  observed_from: _farm1.yaml   # optional base, deep-merged under `observed` (mappings merge, lists replace)
  observed: Observed.to_dict() shape
  expect:
    errors: [substring, ...]     # one per plan error, in order; [] = the plan has none
    warnings: [substring, ...]   # optional, same rule
    changes:                     # exactly the VMs with a non-empty change
      VM: {clone: {...}, fields: [[field, old, new]], devices: [[op, profile, key-or-group]],
           extra_config: {...}, power_off: bool, power_on: bool}   # listed keys are compared exactly
    text: |                      # optional: render_plan_text must equal it
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from vgpuctl.farm.placement import place_vm
from vgpuctl.farm.state import farm_from_observed
from vgpuctl.inventory import Inventory, load_inventory, load_inventory_text, validate
from vgpuctl.model import CloneSpec, Observed, ObservedVgpu, ObservedVm, Plan, VmChange
from vgpuctl.planner import make_plan
from vgpuctl.reports.plan import plan_to_json, render_plan_text
from vgpuctl.vms.plan import uvm_enabled

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plan"
EXAMPLE = Path(__file__).resolve().parents[2] / "inventory.example.yaml"
CASES = sorted(p for p in FIXTURES.glob("*.yaml") if not p.name.startswith("_"))


def _load(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v) if k in base else v
        return out
    return over


def _observed(case: dict[str, Any]) -> Observed:
    data: dict[str, Any] = {}
    if case.get("observed_from"):
        data = _load(FIXTURES / case["observed_from"])
    data = _merge(data, case.get("observed") or {})
    return Observed.from_dict(data)


def _device_rows(devices: list[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for d in devices:
        extra = d["key"] if d["op"] == "-" else d["nvlink_group"]
        rows.append([d["op"], d["profile"]] if extra is None else [d["op"], d["profile"], extra])
    return rows


def _check_messages(kind: str, actual: list[str], expected: list[str]) -> None:
    assert len(actual) == len(expected), f"{kind}: expected {expected}, got {actual}"
    for got, want in zip(actual, expected, strict=True):
        assert want in got, f"{kind}: {want!r} not in {got!r}"


@pytest.fixture(params=CASES, ids=[p.stem for p in CASES])
def case(request: pytest.FixtureRequest) -> dict[str, Any]:
    return _load(request.param)


def test_case_count() -> None:
    assert len(CASES) >= 20


def test_plan_case(case: dict[str, Any]) -> None:
    inv = load_inventory_text(case["inventory"], "case.yaml")
    validate(inv)
    plan = make_plan(inv, _observed(case))
    expect = case["expect"]
    _check_messages("errors", plan.errors, expect.get("errors", []))
    if "warnings" in expect:
        _check_messages("warnings", plan.warnings, expect["warnings"])
    data = plan_to_json(plan)
    json.dumps(data)  # JSON-serialisable
    got = {c["vm"]: c for c in data["vm_changes"]}
    want = expect.get("changes") or {}
    assert sorted(got) == sorted(want), f"changed VMs: {sorted(got)}"
    for vm, fields in want.items():
        change = got[vm]
        for key, value in fields.items():
            if key == "devices":
                assert _device_rows(change["devices"]) == value, vm
            elif key == "fields":
                assert [[f["field"], f["old"], f["new"]] for f in change["fields"]] == value, vm
            elif key == "clone" and value is None:
                assert change["clone"] is None, vm
            elif key == "clone":
                assert change["clone"] is not None, vm
                for ck, cv in value.items():
                    assert change["clone"][ck] == cv, (vm, ck)
            else:
                assert change[key] == value, (vm, key)
    if "text" in expect:
        assert render_plan_text(plan) == expect["text"]


def test_plan_is_deterministic() -> None:
    case = _load(FIXTURES / "clone-cluster-two-hosts.yaml")
    inv = load_inventory_text(case["inventory"])
    first = plan_to_json(make_plan(inv, _observed(case)))
    second = plan_to_json(make_plan(inv, _observed(case)))
    assert first == second


def test_plan_does_not_mutate_observed() -> None:
    case = _load(FIXTURES / "count-down-running.yaml")
    observed = _observed(case)
    before = observed.to_dict()
    make_plan(load_inventory_text(case["inventory"]), observed)
    assert observed.to_dict() == before


def apply_to_observed(observed: Observed, plan: Plan) -> None:
    """What apply does, done to the observed state by hand: clone, power off, reconfigure for every VM, then
    power on with GPU admission by the placement rules."""
    for change in plan.changes:
        if change.clone is not None:
            template = observed.vms[change.clone.template]
            vm = copy.deepcopy(template)
            vm.name, vm.is_template, vm.host = change.vm, False, change.clone.host
            vm.cpus = change.clone.cpus or vm.cpus
            vm.memory_mb = change.clone.memory_mb or vm.memory_mb
            observed.vms[change.vm] = vm
        vm = observed.vms[change.vm]
        host = observed.hosts[vm.host or ""]
        if change.power_off:
            vm.power_state = "poweredOff"
            for g in host.gpus:
                g.vms = [v for v in g.vms if v != vm.name]
        removed = {d.key for d in change.devices if d.op == "-"}
        vm.vgpus = [d for d in vm.vgpus if d.key not in removed]
        next_key = max([d.key for d in vm.vgpus] + [12999]) + 1
        for d in change.devices:
            if d.op == "+":
                vm.vgpus.append(ObservedVgpu(next_key, d.profile, 1 if d.group is not None else None))
                next_key += 1
        for f in change.fields:
            setattr(vm, FIELD_ATTRS[f.field], f.new)
        vm.extra_config.update({k: v for k, v in change.extra_config.items() if v is not None})
    for change in plan.changes:  # the plan's capacity check assumes every power-off lands before power-ons
        vm = observed.vms[change.vm]
        host = observed.hosts[vm.host or ""]
        if change.power_on:
            state = farm_from_observed(observed)
            placed = place_vm(state.gpus[host.name], vm.name, [d.profile for d in vm.vgpus],
                              host.assignment_policy, nvlink=any(d.device_group_key for d in vm.vgpus))
            assert placed.ok, placed.reason
            for pl in placed.placed:
                next(g for g in host.gpus if g.pci_id == pl.gpu).vms.append(vm.name)
            vm.power_state = "poweredOn"


FIELD_ATTRS = {"memoryReservationLockedToMax": "memory_reservation_locked", "numCPUs": "cpus", "memoryMB": "memory_mb"}


@pytest.mark.parametrize("name", ["count-up-running.yaml", "count-down-running.yaml", "profile-change.yaml",
                                  "clone-cluster-two-hosts.yaml", "nvlink-group.yaml", "remove-all.yaml",
                                  "power-off-frees-capacity.yaml", "cpus-memory.yaml", "mixed-sizes.yaml"])
def test_applied_plan_converges(name: str) -> None:
    """Apply a plan's changes to the observed state: planning again gives no change and no error."""
    case = _load(FIXTURES / name)
    inv = load_inventory_text(case["inventory"])
    observed = _observed(case)
    plan = make_plan(inv, observed)
    assert not plan.errors and plan.changes
    apply_to_observed(observed, plan)
    again = make_plan(inv, observed)
    assert again.errors == []
    assert again.is_empty, render_plan_text(again)


def test_example_inventory_fits_default_farm() -> None:
    """inventory.example.yaml applies cleanly to gpusim's default farm, and converges."""
    inv = load_inventory(EXAMPLE)
    validate(inv)
    observed = Observed.from_dict(_load(FIXTURES / "_default_farm.yaml"))
    plan = make_plan(inv, observed)
    assert plan.errors == []
    assert plan.warnings == []
    assert sorted(c.vm for c in plan.changes) == [
        "infer-01", "infer-02", "infer-03", "infer-04", "pair-01", "train-01", "train-02",
    ]
    assert all(c.clone is not None and c.clone.host and c.power_on for c in plan.changes)
    hosts = {c.vm: c.clone.host for c in plan.changes if c.clone}
    assert len({hosts["pair-01"], hosts["train-01"], hosts["train-02"], hosts["infer-01"]}) == 4
    apply_to_observed(observed, plan)
    again = make_plan(inv, observed)
    assert again.errors == [] and again.is_empty, render_plan_text(again)


def test_plan_checks_mixing_without_validate() -> None:
    inv = Inventory.model_validate({"apiVersion": "vgpuctl/v1", "vms": [
        {"name": "a", "vgpus": [{"profile": "grid_a100-40c"}, {"profile": "grid_h100-80c"}]},
        {"name": "b", "vgpus": [{"profile": "nonsense"}]},
    ]})
    plan = make_plan(inv, _observed({"observed_from": "_farm1.yaml"}))
    assert plan.errors == [
        "vm a: vGPUs of one VM must share a board type (got a100, h100)",
        "vm b: not a vGPU profile name: 'nonsense' (expected grid_<board>-[<slices>-]<fb><series>, "
        "e.g. grid_a100-40c or grid_a100-3-20c); offered there: grid_a100-10c, grid_a100-20c, grid_a100-40c, "
        "grid_a100-4c, grid_a100-5c, grid_a100-8c",
    ]


# ------------------------------------------------------------------------------------------- VM identity


def _same_name_plan(inventory: str) -> tuple[Observed, Plan]:
    observed = Observed.from_dict(_load(FIXTURES / "_same-name.yaml"))
    return observed, make_plan(load_inventory_text(inventory), observed)


def test_the_change_names_the_vm_of_its_folder() -> None:
    observed, plan = _same_name_plan(
        "apiVersion: vgpuctl/v1\nvms:\n  - {name: inv-01, folder: teamB, cpus: 4}\n"
    )
    (change,) = plan.changes
    assert change.observed_key == "/teamB/inv-01"
    vm = observed.vm_for(change)
    assert vm is not None and vm.moid == "vm-teamb"


def test_a_unique_name_matches_in_any_folder_when_the_entry_names_none() -> None:
    observed = Observed.from_dict(_load(FIXTURES / "_same-name.yaml"))
    observed.vms = {"inv-02": observed.vms.pop("/teamB/inv-01")}
    observed.vms["inv-02"].name = "inv-02"
    observed.same_name = {}
    observed.hosts["esx-01.gpu.sim"].gpus[0].vms = ["inv-02", "inv-02"]
    plan = make_plan(load_inventory_text("apiVersion: vgpuctl/v1\nvms:\n  - {name: inv-02, cpus: 4}\n"), observed)
    assert not plan.errors
    (change,) = plan.changes
    assert change.observed_key is None and observed.vm_for(change) is observed.vms["inv-02"]


def test_a_clone_is_never_matched_to_a_vm_of_that_name_elsewhere() -> None:
    observed = Observed.from_dict(_load(FIXTURES / "_same-name.yaml"))
    observed.vms["solo"] = observed.vms["/inv-01"]
    change = VmChange("solo", clone=CloneSpec("ubuntu-22.04-ml", folder="teamA"))
    assert observed.vm_for(change) is None
    assert observed.vm_for(VmChange("solo", clone=CloneSpec("ubuntu-22.04-ml"))) is observed.vms["solo"]


def test_a_template_name_two_vms_share_is_an_error() -> None:
    _, plan = _same_name_plan(
        "apiVersion: vgpuctl/v1\nvms:\n  - {name: new-01, template: inv-01, cluster: GPU-Cluster}\n"
    )
    assert plan.errors == [
        "<inventory>:3:30: vm new-01: template 'inv-01' names VMs in folders /, teamB: give the template a name of "
        "its own"
    ]


def test_observe_warnings_reach_the_plan() -> None:
    observed = Observed.from_dict(_load(FIXTURES / "_same-name.yaml"))
    observed.warnings = ["host esx-01.gpu.sim: NVLink sets not read (HostCommunication)"]
    plan = make_plan(load_inventory_text("apiVersion: vgpuctl/v1\nvms:\n  - {name: inv-01, folder: /}\n"), observed)
    assert plan.warnings == observed.warnings
    assert "Warning: host esx-01.gpu.sim: NVLink sets not read" in render_plan_text(plan)
    assert plan_to_json(plan)["warnings"] == observed.warnings


def test_named_lists_the_vms_of_a_name_in_a_folder() -> None:
    observed = Observed.from_dict(_load(FIXTURES / "_same-name.yaml"))
    assert observed.named("inv-01") == ["/inv-01", "/teamB/inv-01"]
    assert observed.named("inv-01", "") == ["/inv-01"]
    assert observed.named("inv-01", "teamB") == ["/teamB/inv-01"]
    assert observed.named("inv-01", "teamA") == []
    assert observed.named("ubuntu-22.04-ml") == ["ubuntu-22.04-ml"] and observed.named("nope") == []


# ------------------------------------------------------------------------------------- unexplained names


def _two_clusters() -> Observed:
    observed = _observed({"observed_from": "_farm2.yaml"})
    observed.clusters = {"GPU-Cluster": ["esx-01.gpu.sim"], "MIG-Cluster": ["esx-02.gpu.sim"]}
    observed.hosts["esx-02.gpu.sim"].cluster = "MIG-Cluster"
    observed.hosts["esx-02.gpu.sim"].offered_profiles = ["grid_a100-1-5c", "grid_a100-3-20c", "nvidia_a100-1-5cme2"]
    return observed


def test_an_unexplained_name_is_answered_with_what_is_offered_where_the_vm_may_run() -> None:
    """The offered profiles named are those of the VM's host, else of its cluster's hosts, else of every host; a
    name the host offers but no table explains is said to be one; the first unexplained name of the VM is the one
    answered."""
    inv = Inventory.model_validate({"apiVersion": "vgpuctl/v1", "vms": [
        {"name": "by-cluster", "cluster": "MIG-Cluster", "vgpus": [{"profile": "grid_a100-3-20x"}]},
        {"name": "by-host", "host": "esx-01.gpu.sim", "vgpus": [{"profile": "grid_a100-20x"}]},
        {"name": "offered", "cluster": "MIG-Cluster", "vgpus": [{"profile": "grid_a100-1-5c"},
                                                                {"profile": "nvidia_a100-1-5cme2"}]},
    ]})
    syntax = "(expected grid_<board>-[<slices>-]<fb><series>, e.g. grid_a100-40c or grid_a100-3-20c)"
    assert make_plan(inv, _two_clusters()).errors == [
        f"vm by-cluster: not a vGPU profile name: 'grid_a100-3-20x' {syntax}; offered there: grid_a100-1-5c, "
        "grid_a100-3-20c",
        f"vm by-host: not a vGPU profile name: 'grid_a100-20x' {syntax}; offered there: grid_a100-10c, "
        "grid_a100-20c, grid_a100-40c, grid_a100-4c, grid_a100-5c, grid_a100-8c",
        "vm offered: asks for nvidia_a100-1-5cme2, which the host offers but no vGPU type table explains (framebuffer "
        "and maxima unknown: vgpuctl does not place it); offered there: grid_a100-1-5c, grid_a100-3-20c",
    ]
    nothing = _two_clusters()
    nothing.hosts["esx-01.gpu.sim"].offered_profiles = []
    only = Inventory.model_validate({"apiVersion": "vgpuctl/v1", "vms": [
        {"name": "by-host", "host": "esx-01.gpu.sim", "vgpus": [{"profile": "grid_a100-20x"}]}]})
    assert make_plan(only, nothing).errors == [f"vm by-host: not a vGPU profile name: 'grid_a100-20x' {syntax}"]


@pytest.mark.parametrize(
    ("extra_config", "keys"),
    [
        ({"pciPassthru0.cfg.enable_uvm": "1", "pciPassthru1.cfg.enable_uvm": "0"}, ["pciPassthru0.cfg.enable_uvm"]),
        ({"pciPassthru1.cfg.enable_uvm": "TRUE", "pciPassthru0.cfg.enable_uvm": " true "},
         ["pciPassthru0.cfg.enable_uvm", "pciPassthru1.cfg.enable_uvm"]),
        ({"PCIPASSTHRU2.CFG.ENABLE_UVM": "True"}, ["PCIPASSTHRU2.CFG.ENABLE_UVM"]),  # extraConfig keys: any case
        ({"pciPassthru0.cfg.enable_uvm": "yes", "pciPassthru.cfg.enable_uvm": "1", "enable_uvm": "1"}, []),
    ],
)
def test_uvm_is_enabled_by_1_or_true_on_a_vgpus_key(extra_config: dict[str, str], keys: list[str]) -> None:
    assert uvm_enabled(extra_config) == keys


def test_a_scoped_plan_plans_only_the_vms_it_names() -> None:
    observed = _observed({"observed_from": "_same-name.yaml"})
    observed.vms["solo"] = ObservedVm("solo", host="esx-01.gpu.sim", cpus=2)
    inv = load_inventory_text("apiVersion: vgpuctl/v1\nvms:\n  - {name: solo, cpus: 4}\n"
                              "  - {name: inv-01, folder: /, cpus: 4}\n")
    assert [c.vm for c in make_plan(inv, observed, only_vms={"solo"}).changes] == ["solo"]
    assert sorted(c.vm for c in make_plan(inv, observed).changes) == ["inv-01", "solo"]
