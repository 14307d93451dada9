"""Adoption and removal in the pure VM plan: `keep` leaves what an existing VM lacks as it is and warns with
NVIDIA's requirement; `state: absent` powers a VM off and destroys it (shown as - with its vGPUs), nothing for a
VM that does not exist, never a template; export writes `keep` for what a hand-made VM lacks."""

from __future__ import annotations

import pytest

from vgpuctl import pipeline
from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.plan import CliHooks
from vgpuctl.domain import Keep
from vgpuctl.errors import InventoryErrors
from vgpuctl.export import export_inventory, lacks
from vgpuctl.inventory import load_inventory_text, validate
from vgpuctl.model import Observed, ObservedGpu, ObservedHost, ObservedVgpu, ObservedVm, Op
from vgpuctl.planner import make_plan
from vgpuctl.reports.plan import plan_lines, plan_report, render_plan_text

pytestmark = pytest.mark.unit

A100 = {"device_name": "NVIDIA A100-PCIE-40GB", "memory_kb": 40 * 1024 * 1024, "graphics_type": "sharedDirect",
        "vgpu_mode": "sameSize"}


def farm() -> Observed:
    host = ObservedHost("esx-01", moid="host-1", cluster="C", gpus=[ObservedGpu("0000:3b:00.0", **A100)],
                        offered_profiles=["grid_a100-20c", "grid_a100-40c"])
    vms = {
        "hand": ObservedVm("hand", moid="vm-1", host="esx-01", power_state="poweredOn", firmware="bios",
                           memory_reservation_locked=False, vgpus=[ObservedVgpu(7, "grid_a100-20c")]),
        "tmpl": ObservedVm("tmpl", moid="vm-9", is_template=True),
        "other": ObservedVm("other", moid="vm-2", host="esx-01", power_state="poweredOn"),
    }
    return Observed(datacenter="DC0", hosts={"esx-01": host}, vms=vms, clusters={"C": ["esx-01"]})


def plan_of(vms: str) -> object:
    return make_plan(load_inventory_text(f"apiVersion: vgpuctl/v1\nvms:\n{vms}", "inv.yaml"), farm())


def test_keep_leaves_what_the_vm_lacks_and_warns() -> None:
    plan = plan_of("  - name: hand\n    vgpus: {profile: grid_a100-20c}\n    power: keep\n"
                   "    keep: [mmio, memory-lock, efi]\n")
    assert plan.errors == [] and plan.changes == []
    assert [w.split(" (keep")[0] for w in plan.warnings] == [
        "vm hand: keeps its memory reservation unlocked", "vm hand: keeps BIOS firmware",
        "vm hand: keeps its 64-bit MMIO settings"]
    assert "at least 128 GB" in plan.warnings[2]  # the A100's own MMIO (NVIDIA's per-GPU table)


def test_without_keep_the_same_vm_is_changed_or_refused() -> None:
    plan = plan_of("  - name: hand\n    vgpus: {profile: grid_a100-20c}\n    power: restart\n    keep: [efi]\n")
    assert plan.errors == []
    (change,) = plan.changes
    assert [f.field for f in change.fields] == ["memoryReservationLockedToMax"]
    assert change.extra_config == {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "128"}
    refused = plan_of("  - name: hand\n    vgpus: {profile: grid_a100-20c}\n    power: restart\n")
    assert any("need EFI firmware" in e and "keep: [efi]" in e for e in refused.errors)


def test_removal_powers_off_and_destroys_only_named_vms() -> None:
    plan = plan_of("  - name: hand\n    state: absent\n  - name: ghost\n    state: absent\n")
    (change,) = plan.changes
    assert change.vm == "hand" and change.destroy and change.power_off and not change.needs_reconfigure
    assert [(d.op, d.profile) for d in change.devices] == [(Op.REMOVE, "grid_a100-20c")]
    text = render_plan_text(plan)
    assert "- vm hand  (power off -> destroy)" in text and "  - vgpu grid_a100-20c (key 7)" in text
    assert "Plan: 0 to create, 0 to change, 1 to remove, 1 power-off." in text
    assert any("--allow-destroy" in w for w in plan.warnings)
    report = plan_report(plan)
    assert report.vm_changes[0].destroy and report.vm_changes[0].steps == ["power-off", "destroy"]
    assert report.summary.remove == 1
    assert "other" not in text  # a VM the inventory does not name is never touched
    template = plan_of("  - name: tmpl\n    state: absent\n")
    assert template.errors == ["vm tmpl: is a template in vCenter, not a VM: vgpuctl does not remove templates"]
    allowed = make_plan(load_inventory_text("apiVersion: vgpuctl/v1\nallow_destroy: true\nvms:\n"
                                            "  - name: hand\n    state: absent\n", "inv.yaml"), farm())
    assert not any("--allow-destroy" in w for w in allowed.warnings)


def test_a_destroy_is_a_disruptive_step_listed_and_counted() -> None:
    """Every VM destroyed is a disruptive step of its own (action `destroy`), a stopped one too: listed under
    "Disruptive steps" and in `disruptions`, counted in the summary; a running one is powered off first."""
    observed = farm()
    observed.vms["other"].power_state = "poweredOff"
    plan = make_plan(load_inventory_text("apiVersion: vgpuctl/v1\nvms:\n  - name: other\n    state: absent\n"
                                         "  - name: hand\n    state: absent\n", "inv.yaml"), observed)
    report = plan_report(plan)
    assert [(d.action, d.vm, d.comes_back) for d in report.disruptions] == [
        ("power-off", "hand", False), ("destroy", "hand", False), ("destroy", "other", False)]
    lines = plan_lines(report)
    at = lines.index("Disruptive steps:")
    assert lines[at + 1:at + 4] == [
        "  ! vm hand: powered off for its own change; destroyed",
        "  ! vm hand: destroyed (state: absent): the VM and its disks are deleted",
        "  ! vm other: destroyed (state: absent): the VM and its disks are deleted"]
    assert (report.summary.remove, report.summary.power_off) == (2, 1)
    assert lines[-1] == "Plan: 0 to create, 0 to change, 2 to remove, 1 power-off."


def test_apply_asks_for_the_word_before_destroying_a_stopped_vm(monkeypatch: pytest.MonkeyPatch) -> None:
    observed = farm()
    observed.vms["other"].power_state = "poweredOff"
    inventory = load_inventory_text("apiVersion: vgpuctl/v1\nvms:\n  - name: other\n    state: absent\n")
    planned = pipeline.Planned(inventory, observed, make_plan(inventory, observed))
    asked: list[bool] = []
    monkeypatch.setattr(common, "confirm", lambda question, action="apply", word=False: asked.append(word))
    CliHooks(GlobalOptions()).confirm(planned)
    assert asked == [True] and planned.disruptive  # the word `yes`, not y/N; `vm vgpu` would ask too


def test_state_absent_with_power_keep_is_refused() -> None:
    """`keep` means the VM's power is never touched; a removal powers it off and destroys it."""
    text = "apiVersion: vgpuctl/v1\nvms:\n  - name: hand\n    state: absent\n    power: keep\n"
    with pytest.raises(InventoryErrors) as info:
        validate(load_inventory_text(text, "inv.yaml"))
    assert str(info.value) == ("inv.yaml:5:12: vms[0].power: power: keep never touches the VM, but state: absent "
                               "powers it off and destroys it: remove 'power: keep' to destroy the VM, or the "
                               "entry's 'state: absent' to keep it")
    plan = make_plan(load_inventory_text(text, "inv.yaml"), farm())  # an inventory not validated first
    assert plan.changes == [] and plan.errors == [str(info.value).replace("vms[0].power: ", "vm hand: ")]


def test_export_names_what_a_hand_made_vm_lacks() -> None:
    observed = farm()
    assert lacks(observed.vms["hand"]) == [Keep.MMIO, Keep.MEMORY_LOCK, Keep.EFI]
    observed.vms["hand"].extra_config = {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "128"}
    observed.vms["hand"].firmware = "efi"
    observed.vms["hand"].memory_reservation_locked = True
    assert lacks(observed.vms["hand"]) == []
    observed.vms["hand"].memory_reservation_locked = False
    text = export_inventory(observed)
    assert "    keep: [memory-lock]\n" in text and "lacks a locked memory reservation" in text
    plan = make_plan(load_inventory_text(text, "farm.yaml"), observed)
    assert plan.errors == [] and plan.changes == []
