"""What a host change does to the VMs on the host (vgpuctl.hosts.plan.plan_evacuation, pure): a VM the changed
host cannot run is a plan error, a VM the inventory re-profiles is handed to its VM change, the others are
powered off and on again with `evacuate: power-off`; and how make_plan orders the VM's own change after it.
"""

from __future__ import annotations

import copy

import kinds
import pytest
from hostfacts import host_facts

from vgpuctl import planner
from vgpuctl.domain import ChangeKind, EvacuationKind
from vgpuctl.hosts import plan as hostplan
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import EvacuationAction, Observed, ObservedGpu, ObservedHost, ObservedNic, ObservedVgpu, ObservedVm
from vgpuctl.planner import make_plan
from vgpuctl.reports.plan import disruptions
from vgpuctl.settings.base import HostPlan

pytestmark = pytest.mark.unit

HAND_OVER = EvacuationAction(EvacuationKind.HAND_OVER)
RESTORE_AFTER = EvacuationAction(EvacuationKind.RESTORE_AFTER)

HOST = "esx-a100"
A100 = {"device_name": "NVIDIA A100-PCIE-40GB", "device_id": 0x20F1, "memory_kb": 40 * 1024 * 1024}


def _observed(*vms: ObservedVm) -> Observed:
    host = ObservedHost(
        HOST,
        cluster="C1",
        default_graphics_type="sharedDirect",
        gpus=[
            ObservedGpu("0000:3b:00.0", vgpu_mode="sameSize", graphics_type="sharedDirect", **A100),
            ObservedGpu("0000:3c:00.0", vgpu_mode="sameSize", graphics_type="sharedDirect", **A100),
        ],
        offered_profiles=["grid_a100-10c", "grid_a100-20c", "grid_a100-40c"],
    )
    for vm in vms:
        vm.host = HOST
        if vm.vgpus and vm.power_state == "poweredOn":
            host.gpus[0].vms.append(vm.name)
    return Observed(hosts={HOST: host}, clusters={"C1": [HOST]}, vms={v.name: v for v in vms})


def _vm(name: str, *profiles: str, on: bool = True) -> ObservedVm:
    return ObservedVm(
        name,
        power_state="poweredOn" if on else "poweredOff",
        firmware="efi",
        memory_reservation_locked=True,
        extra_config={"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "128"},
        vgpus=[ObservedVgpu(4000 + i, p) for i, p in enumerate(profiles)],
    )


def _inventory(hosts: str, vms: str = "") -> object:
    return load_inventory_text(f"apiVersion: vgpuctl/v1\nhosts:\n{hosts}" + (f"vms:\n{vms}" if vms else ""))


MIG = f"  - name: {HOST}\n    gpus: [{{select: all, mode: mig}}]\n    maintenance: {{evacuate: power-off}}\n"


def test_a_running_vm_the_new_mode_cannot_run_is_an_error_naming_what_would_be_offered() -> None:
    inv = _inventory(MIG)
    result = hostplan.plan_hosts(inv.hosts, _observed(_vm("train-01", "grid_a100-40c")), vms=inv.vms)
    assert len(result.errors) == 1
    error = result.errors[0]
    assert error.startswith(f"host {HOST}: VM train-01 uses grid_a100-40c, which the host will not offer after ")
    offered = error.split("(offered then: ")[1].split(")")[0].split(", ")
    assert "grid_a100-3-20c" in offered and "grid_a100-7-40c" in offered and "grid_a100-40c" not in offered
    assert not any(c.kind == ChangeKind.EVACUATE for c in result.changes)


def test_a_listed_vm_asking_for_an_unoffered_profile_is_an_error_too() -> None:
    inv = _inventory(MIG, "  - name: train-01\n    vgpus: {profile: grid_a100-20c}\n")
    result = hostplan.plan_hosts(inv.hosts, _observed(_vm("train-01", "grid_a100-40c")), vms=inv.vms)
    assert [e.split(" after ")[0] for e in result.errors] == [
        f"host {HOST}: VM train-01 the inventory asks for grid_a100-20c, which the host will not offer"
    ]


def test_a_listed_vm_moved_to_an_offered_profile_is_handed_to_its_own_change() -> None:
    inv = _inventory(MIG, "  - name: train-01\n    vgpus: {profile: grid_a100-3-20c}\n    power: restart\n")
    observed = _observed(_vm("train-01", "grid_a100-40c"), _vm("web-01"))
    result = hostplan.plan_hosts(inv.hosts, observed, vms=inv.vms)
    assert not result.errors, result.errors
    assert [(c.kind, c.target, c.new) for c in result.changes if c.kind == ChangeKind.EVACUATE] == [
        (ChangeKind.EVACUATE, "train-01", HAND_OVER),
        (ChangeKind.EVACUATE, "web-01", RESTORE_AFTER),  # no vGPUs: it always runs again
    ]
    assert result.changes[0].kind == ChangeKind.EVACUATE  # listed before the host change it makes room for
    assert planner.changed_hosts(result.changes) == {HOST}


def test_make_plan_orders_power_off_host_change_reconfigure_power_on() -> None:
    inv = _inventory(MIG, "  - name: train-01\n    vgpus: {profile: grid_a100-3-20c}\n    power: restart\n")
    plan = make_plan(inv, _observed(_vm("train-01", "grid_a100-40c")))
    assert not plan.errors, plan.errors
    assert [c.kind for c in plan.host_changes] == [ChangeKind.EVACUATE, kinds.MIG, kinds.MIG]
    (change,) = plan.changes
    assert change.power_off and change.power_on and change.depends_on_hosts == [HOST]
    assert [(d.op.value, d.profile) for d in change.devices] == [("-", "grid_a100-40c"), ("+", "grid_a100-3-20c")]


def test_refuse_evacuates_only_what_the_inventory_re_profiles() -> None:
    refuse = MIG.replace("power-off", "refuse")
    inv = _inventory(refuse, "  - name: train-01\n    vgpus: {profile: grid_a100-3-20c}\n")
    result = hostplan.plan_hosts(inv.hosts, _observed(_vm("train-01", "grid_a100-40c"), _vm("web-01")), vms=inv.vms)
    assert [(c.target, c.new) for c in result.changes if c.kind == ChangeKind.EVACUATE] == [
        ("train-01", HAND_OVER)
    ]


def test_powered_off_vms_that_lose_their_profile_are_a_warning_and_untouched() -> None:
    inv = _inventory(MIG)
    result = hostplan.plan_hosts(inv.hosts, _observed(_vm("old-01", "grid_a100-40c", on=False)), vms=inv.vms)
    assert not result.errors
    assert result.warnings == [
        f"host {HOST}: VM old-01 (powered off) uses grid_a100-40c, which the host will not offer after the change: "
        "it cannot power on there"
    ]
    assert not any(c.kind == ChangeKind.EVACUATE for c in result.changes)


def test_a_change_that_keeps_the_profiles_restores_every_running_vm() -> None:
    nvlink = f"  - name: {HOST}\n    nvlink: disabled\n    maintenance: {{evacuate: power-off}}\n"
    inv = _inventory(nvlink)
    observed = _observed(_vm("train-01", "grid_a100-40c"), _vm("web-01"), _vm("off-01", on=False))
    result = hostplan.plan_hosts(inv.hosts, observed, vms=inv.vms)
    assert not result.errors and not result.warnings
    assert [(c.target, c.new) for c in result.changes if c.kind == ChangeKind.EVACUATE] == [
        ("train-01", RESTORE_AFTER),
        ("web-01", RESTORE_AFTER),
    ]


def test_an_nvlink_group_cannot_run_once_nvlink_is_disabled() -> None:
    nvlink = f"  - name: {HOST}\n    nvlink: disabled\n    maintenance: {{evacuate: power-off}}\n"
    vm = _vm("nv-01", "grid_a100-40c", "grid_a100-40c")
    for d in vm.vgpus:
        d.device_group_key = -1
    inv = _inventory(nvlink)
    result = hostplan.plan_hosts(inv.hosts, _observed(vm), vms=inv.vms)
    assert len(result.errors) == 1 and "uses an NVLink device group" in result.errors[0]


def test_a_host_already_in_maintenance_evacuates_nothing() -> None:
    inv = _inventory(MIG)
    observed = _observed(_vm("train-01", "grid_a100-40c", on=False))
    observed.hosts[HOST].in_maintenance = True
    result = hostplan.plan_hosts(inv.hosts, observed, vms=inv.vms)
    assert not result.errors and not any(c.kind == ChangeKind.EVACUATE for c in result.changes)


# ------------------------------------------------------------------------------------------ evacuate: migrate

OTHER = "esx-b"
MIGRATE = f"  - name: {HOST}\n    nvlink: disabled\n    maintenance: {{evacuate: migrate}}\n"


def _two_hosts(*vms: ObservedVm, busy: int = 0) -> Observed:
    observed = _observed(*vms)
    other = copy.deepcopy(observed.hosts[HOST])
    other.name = OTHER
    for gpu in other.gpus:
        gpu.vms = []
    observed.hosts[OTHER] = other
    observed.clusters["C1"].append(OTHER)
    for i in range(busy):  # VMs that fill the other host's GPUs
        name = f"busy-{i}"
        observed.vms[name] = ObservedVm(
            name, host=OTHER, power_state="poweredOn", vgpus=[ObservedVgpu(1, "grid_a100-40c")]
        )
        other.gpus[i].vms.append(name)
    return observed


def _moves(result: HostPlan) -> list[tuple[str, EvacuationAction]]:
    return [(c.target, c.new) for c in result.changes if c.kind == ChangeKind.EVACUATE]


def _migrate(destination: str) -> EvacuationAction:
    return EvacuationAction(EvacuationKind.MIGRATE, destination)


def test_migrate_moves_vms_to_a_host_that_can_run_them() -> None:
    inv = _inventory(MIGRATE)
    observed = _two_hosts(_vm("train-01", "grid_a100-40c"), _vm("web-01"))
    result = hostplan.plan_hosts(inv.hosts, observed, vms=inv.vms, vgpu_migration=True)
    assert not result.errors and not result.warnings, result.errors
    assert _moves(result) == [("train-01", _migrate(OTHER)), ("web-01", _migrate(OTHER))]
    assert str(_moves(result)[0][1]) == f"migrate to {OTHER}"  # how plans show it


def test_without_vgpu_migration_a_vgpu_vm_falls_back_to_power_off_only_when_listed() -> None:
    observed = _two_hosts(_vm("train-01", "grid_a100-40c"), _vm("web-01"))
    inv = _inventory(MIGRATE)
    result = hostplan.plan_hosts(inv.hosts, observed, vms=inv.vms, vgpu_migration=False)
    assert _moves(result) == [("web-01", _migrate(OTHER))]  # no vGPUs: always
    assert result.errors == [
        f"host {HOST}: VM train-01 cannot migrate (vCenter does not allow vMotion of running vGPU VMs "
        "(vgpu.hotmigrate.enabled is not true)); list it in the inventory with power: restart to allow powering it "
        "off instead, or move or stop it first"
    ]
    listed = _inventory(MIGRATE, "  - name: train-01\n    power: restart\n")
    result = hostplan.plan_hosts(listed.hosts, observed, vms=listed.vms, vgpu_migration=False)
    assert not result.errors
    assert ("train-01", RESTORE_AFTER) in _moves(result)
    assert result.warnings and "powered off and on again instead" in result.warnings[0]


def test_vms_vsphere_cannot_move_are_refused_or_powered_off_where_listed() -> None:
    """SR-IOV adapters and DirectPath I/O devices keep a running VM on its host (vSphere Networking, SR-IOV
    "Availability of Features", DirectPath I/O); PVRDMA moves. Unlisted: a plan error naming the VM; listed with a
    power policy that allows it: powered off and on again instead, with a warning."""
    sriov, direct, pvrdma, web = _vm("roce-01"), _vm("dp-01"), _vm("pv-01"), _vm("web-01")
    sriov.nics = [ObservedNic(4000, "vmxnet3", "VM Network"), ObservedNic(4001, "sriov", "roce", device="0000:5e:00.0")]
    direct.other_passthrough = 1
    pvrdma.nics = [ObservedNic(4000, "pvrdma", "roce-dvpg", protocol="rocev2")]
    observed = _two_hosts(sriov, direct, pvrdma, web)
    inv = _inventory(MIGRATE)
    result = hostplan.plan_hosts(inv.hosts, observed, vms=inv.vms, vgpu_migration=True)
    assert _moves(result) == [("pv-01", _migrate(OTHER)), ("web-01", _migrate(OTHER))]
    assert result.errors == [
        f"host {HOST}: VM dp-01 cannot migrate (it has a DirectPath I/O device, and vSphere does not migrate such VMs "
        "across hosts); list it in the inventory with power: restart to allow powering it off instead, or move or "
        "stop it first",
        f"host {HOST}: VM roce-01 cannot migrate (it has an SR-IOV network adapter, and vSphere does not vMotion "
        "such VMs); list it in the inventory with power: restart to allow powering it off instead, or move or stop it "
        "first",
    ]
    listed = _inventory(MIGRATE, "  - name: roce-01\n    power: restart\n  - name: dp-01\n    power: restart\n")
    result = hostplan.plan_hosts(listed.hosts, observed, vms=listed.vms, vgpu_migration=True)
    assert not result.errors
    assert ("roce-01", RESTORE_AFTER) in _moves(result) and ("dp-01", RESTORE_AFTER) in _moves(result)
    assert len(result.warnings) == 2


def test_migrate_needs_room_and_an_unchanged_destination() -> None:
    inv = _inventory(MIGRATE)
    full = _two_hosts(_vm("train-01", "grid_a100-40c"), busy=2)
    result = hostplan.plan_hosts(inv.hosts, full, vms=inv.vms, vgpu_migration=True)
    assert len(result.errors) == 1 and "no room on esx-b" in result.errors[0], result.errors
    both = _inventory(MIGRATE + MIGRATE.replace(HOST, OTHER))
    result = hostplan.plan_hosts(both.hosts, _two_hosts(_vm("web-01")), vms=both.vms, vgpu_migration=True)
    assert len(result.errors) == 1 and "that this plan leaves unchanged" in result.errors[0], result.errors


# ------------------------------------------------------------------------------------------ through make_plan


def test_make_plan_hands_the_host_planner_vgpu_migration_and_keeps_every_warning() -> None:
    """make_plan passes vgpu_migration (False unless vCenter allows vGPU vMotion) to the host planner; its errors
    become plan errors and its warnings follow observe's."""
    observed = _two_hosts(_vm("train-01", "grid_a100-40c"), _vm("web-01"))
    observed.warnings = ["host esx-b: NVLink sets not read (HostCommunication)"]
    inv = _inventory(MIGRATE)
    plan = make_plan(inv, observed)
    assert plan.errors == [f"host {HOST}: VM train-01 cannot migrate (vCenter does not allow vMotion of running "
                           "vGPU VMs (vgpu.hotmigrate.enabled is not true)); list it in the inventory with power: "
                           "restart to allow powering it off instead, or move or stop it first"]
    assert plan.warnings == observed.warnings
    moved = make_plan(inv, observed, vgpu_migration=True)
    assert moved.errors == []
    assert _moves(HostPlan(changes=moved.host_changes)) == [("train-01", _migrate(OTHER)), ("web-01", _migrate(OTHER))]
    listed = make_plan(_inventory(MIGRATE, "  - name: train-01\n    power: restart\n"), observed)
    assert listed.warnings[0] == observed.warnings[0] and len(listed.warnings) == 2
    assert "powered off and on again instead" in listed.warnings[1]


def test_make_plan_hands_the_host_planner_the_shell_facts() -> None:
    """The scheduler lives in the nvidia module options, which the ESXi shell reads: with the host's facts saying
    equal-share is set there is nothing to change, without them the host planner sees best effort."""
    inv = _inventory(f"  - name: {HOST}\n    scheduler: {{policy: equal-share}}\n")
    observed = _observed()
    options = "NVreg_RegistryDwords=RmPVMRL=0x01"
    facts = {HOST: host_facts(HOST, options_configured=options, options_effective=options)}
    assert make_plan(inv, observed, host_facts=facts).host_changes == []
    assert [(c.kind, c.old, c.new) for c in make_plan(inv, observed).host_changes] == [
        (kinds.SCHEDULER, "best-effort", "equal-share")]


# ------------------------------------------------------------------------------------------ plans that apply

REFUSE = f"  - name: {HOST}\n    gpus: [{{select: all, mode: mig}}]\n"  # evacuate: refuse (the default)
NVLINK_OFF = f"  - name: {HOST}\n    nvlink: disabled\n"


def test_refuse_with_running_vms_is_a_plan_error_naming_them() -> None:
    inv = _inventory(NVLINK_OFF)
    observed = _observed(_vm("train-01", "grid_a100-40c"), _vm("web-01"), _vm("idle-01", on=False))
    facts = {HOST: host_facts(HOST, options_configured="", options_effective="", shell=True)}
    result = hostplan.plan_hosts(inv.hosts, observed, facts, vms=inv.vms)
    assert result.errors == [
        f"host {HOST}: its nvlink change needs maintenance mode, and these VMs run there: train-01 (grid_a100-40c), "
        "web-01; maintenance.evacuate is refuse: stop them, set evacuate: power-off or migrate, or list them with "
        "power: off"]
    # a `host` command: the evacuation is its --evacuate, and the message names the flag, not the inventory key
    by_flag = hostplan.plan_hosts(inv.hosts, observed, facts, vms=inv.vms, evacuate_by_flag=True)
    assert by_flag.errors == [
        f"host {HOST}: its nvlink change needs maintenance mode, and these VMs run there: train-01 (grid_a100-40c), "
        "web-01; --evacuate is refuse: stop them, or run again with --evacuate power-off or --evacuate migrate"]


def test_power_off_in_the_inventory_satisfies_the_power_off_a_change_needs() -> None:
    """A running VM in an NVLink device group whose host turns NVLink off: its entry's power: off is the
    power-off it needs, planned as its evacuation (no error); a plain running VM with power: off likewise."""
    grouped = _vm("pair-01", "grid_a100-40c", "grid_a100-40c")
    for d in grouped.vgpus:
        d.device_group_key = 1
    inv = _inventory(NVLINK_OFF, "  - name: pair-01\n    power: off\n  - name: web-01\n    power: off\n")
    facts = {HOST: host_facts(HOST, options_configured="", options_effective="", shell=True)}
    result = hostplan.plan_hosts(inv.hosts, _observed(grouped, _vm("web-01")), facts, vms=inv.vms)
    assert result.errors == []
    assert sorted((c.target, c.new.kind) for c in result.changes if c.kind == ChangeKind.EVACUATE) == [
        ("pair-01", EvacuationKind.STAYS_OFF), ("web-01", EvacuationKind.STAYS_OFF)]
    refused = hostplan.plan_hosts(_inventory(NVLINK_OFF).hosts, _observed(copy.deepcopy(grouped)), facts)
    assert any("NVLink device group" in e and "or with power: off" in e for e in refused.errors)


def test_the_plan_shows_a_stays_off_evacuation_as_left_off() -> None:
    inv = _inventory(NVLINK_OFF, "  - name: web-01\n    power: off\n")
    observed = _observed(_vm("web-01"))
    facts = {HOST: host_facts(HOST, options_configured="", options_effective="", shell=True)}
    plan = make_plan(inv, observed, host_facts=facts)
    assert plan.errors == []
    (vm,) = [d for d in disruptions(plan) if d.vm == "web-01"]
    assert (vm.cause, vm.comes_back, vm.detail) == ("evacuation", False, "left off (its entry has power: off)")
