"""apply_plan against gpusim: results are checked with pyVmomi directly, not through vgpuctl's reader."""

from __future__ import annotations

import threading
from typing import Any

import kinds
import pytest
from pyVim.connect import Disconnect
from pyVmomi import vim

from vgpuctl.errors import PlanError
from vgpuctl.inventory import load_inventory, load_inventory_text
from vgpuctl.model import CloneSpec, DeviceChange, FieldChange, HostChange, Op, Plan, VmChange
from vgpuctl.planner import make_plan
from vgpuctl.vms.apply import apply_plan
from vgpuctl.vsphere.observe import observe, set_nvlink_sets
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.sim

Vmiop = vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo

# 4 hosts x 4 A100-40GB (sharedDirect, time-sliced sameSize), an EFI template and two running VMs.
FARM = {
    "datacenter": "DC0",
    "clusters": [
        {
            "name": "GPU-Cluster",
            "hosts": 4,
            "gpus_per_host": 4,
            "model": "A100-40GB",
            "nvlink": "pairs",
            "graphics_type": "sharedDirect",
            "assignment_policy": "performance",
            "vgpu_mode": "sameSize",
        }
    ],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [
        {"name": "web-01", "cpus": 4, "memory_mb": 8192, "firmware": "efi", "power_on": True},
        {
            "name": "old-01",
            "cpus": 4,
            "memory_mb": 8192,
            "firmware": "efi",
            "vgpus": ["grid_a100-20c", "grid_a100-20c"],
            "memory_locked": True,
            "power_on": True,
        },
    ],
}

HEADER = """
apiVersion: vgpuctl/v1
vcenter: {url: https://127.0.0.1/sdk, datacenter: DC0}
vms:
"""

TRAIN = """
  - name: train-{01..03}
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    cpus: 16
    memory_gb: 64
    vgpus: {profile: grid_a100-40c, count: COUNT}
    power: restart
"""


@pytest.fixture
def sim(gpusim_factory):
    return gpusim_factory(FARM)


def settings(sim) -> ConnectionSettings:
    return ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)


def run(sim, inventory_text: str, **kwargs: Any):
    """observe -> plan -> apply; returns (plan, result, plan after apply)."""
    inv = load_inventory_text(HEADER + inventory_text)
    with open_session(settings(sim)) as session:
        observed = observe(session)
        plan = make_plan(inv, observed)
        result = apply_plan(session, plan, observed, **kwargs)
        replan = make_plan(inv, observe(session))
    return plan, result, replan


class Direct:
    """An independent pyVmomi connection to read what vCenter really has."""

    def __init__(self, sim):
        self.si = sim.connect()

    def vms(self) -> dict[str, Any]:
        content = self.si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        try:
            return {vm.name: vm for vm in view.view}
        finally:
            view.DestroyView()

    def close(self) -> None:
        Disconnect(self.si)


@pytest.fixture
def direct(sim):
    d = Direct(sim)
    yield d
    d.close()


def vgpus_of(vm) -> list[str]:
    out = []
    for dev in vm.config.hardware.device:
        if isinstance(dev, vim.vm.device.VirtualPCIPassthrough) and isinstance(dev.backing, Vmiop):
            out.append(dev.backing.vgpu)
    return sorted(out)


def extra(vm) -> dict[str, str]:
    return {o.key: str(o.value) for o in vm.config.extraConfig}


def statuses(result) -> dict[str, str]:
    return {o.vm: o.status for o in result.vms}


# --------------------------------------------------------------------------------------------- tests


def test_clone_and_attach_then_replan_is_empty(sim, direct) -> None:
    _plan, result, replan = run(sim, TRAIN.replace("COUNT", "4"))
    assert statuses(result) == {"train-01": "changed", "train-02": "changed", "train-03": "changed"}
    for outcome in result.vms:
        assert outcome.steps == ["clone", "reconfigure", "power-on"]
    vms = direct.vms()
    assert replan.is_empty and not replan.errors, (replan.errors, [c.vm for c in replan.changes],
                                                   {n: vms[n].config.firmware for n in vms})
    for name in ("train-01", "train-02", "train-03"):
        vm = vms[name]
        assert vgpus_of(vm) == ["grid_a100-40c"] * 4
        assert vm.config.memoryReservationLockedToMax is True
        assert vm.config.firmware == "efi"
        assert vm.config.hardware.numCPU == 16 and vm.config.hardware.memoryMB == 65536
        assert extra(vm)["pciPassthru.use64bitMMIO"].upper() == "TRUE"
        assert int(extra(vm)["pciPassthru.64bitMMIOSizeGB"]) >= 4 * 128
        assert vm.runtime.powerState == "poweredOn"
    # nothing else was touched: the running web VM and the VM with 2 vGPUs are as they were
    assert vms["web-01"].runtime.powerState == "poweredOn" and vgpus_of(vms["web-01"]) == []
    assert vgpus_of(vms["old-01"]) == ["grid_a100-20c"] * 2


def one(profile: str, count: int) -> str:
    return (
        "\n  - name: solo-01\n    template: ubuntu-22.04-ml\n    cluster: GPU-Cluster\n"
        f"    vgpus: {{profile: {profile}, count: {count}}}\n"
    )


def test_counts_up_down_profile_change_and_remove_all(sim, direct) -> None:
    run(sim, one("grid_a100-40c", 2))
    assert vgpus_of(direct.vms()["solo-01"]) == ["grid_a100-40c"] * 2
    first_keys = sorted(d.key for d in direct.vms()["solo-01"].config.hardware.device if isinstance(d.backing, Vmiop))

    plan, result, replan = run(sim, one("grid_a100-40c", 3))
    (change,) = plan.changes
    assert [d.op for d in change.devices] == [Op.ADD]  # the two existing vGPUs are kept
    assert result.failed == [] and replan.is_empty
    vm = direct.vms()["solo-01"]
    assert vgpus_of(vm) == ["grid_a100-40c"] * 3
    keys = sorted(d.key for d in vm.config.hardware.device if isinstance(d.backing, Vmiop))
    assert set(first_keys) < set(keys)

    plan, result, replan = run(sim, one("grid_a100-40c", 1))
    assert result.failed == [] and replan.is_empty
    vm = direct.vms()["solo-01"]
    assert vgpus_of(vm) == ["grid_a100-40c"]
    assert vm.runtime.powerState == "poweredOn"
    assert int(extra(vm)["pciPassthru.64bitMMIOSizeGB"]) >= 128

    plan, result, replan = run(sim, one("grid_a100-20c", 2))
    assert result.failed == [] and replan.is_empty
    assert vgpus_of(direct.vms()["solo-01"]) == ["grid_a100-20c"] * 2

    plan, result, replan = run(sim, "\n  - name: solo-01\n    vgpus: []\n")
    assert result.failed == [] and replan.is_empty
    assert vgpus_of(direct.vms()["solo-01"]) == []


def test_existing_running_vm_is_shut_down_reconfigured_and_started(sim, direct) -> None:
    sim.request("POST", "/vms/web-01/guest", {"ip": "10.0.0.5", "state": "running"})
    text = "\n  - name: web-01\n    vgpus: {profile: grid_a100-10c, count: 2}\n    power: restart\n"
    _plan, result, replan = run(sim, text)
    (outcome,) = result.vms
    assert outcome.status == "changed"
    assert outcome.steps[0] in ("shutdown", "power-off")
    assert outcome.steps[1:] == ["reconfigure", "power-on"]
    assert replan.is_empty
    vm = direct.vms()["web-01"]
    assert vgpus_of(vm) == ["grid_a100-10c"] * 2
    assert vm.runtime.powerState == "poweredOn"


def test_failed_clone_is_reported_and_a_second_run_converges(sim, direct) -> None:
    sim.arm_fault("ubuntu-22.04-ml", "CloneVM_Task", "FileFault")
    _plan, result, replan = run(sim, TRAIN.replace("COUNT", "2"))
    by_vm = {o.vm: o for o in result.vms}
    failed = [o for o in result.vms if o.status == "failed"]
    assert len(failed) == 1
    assert failed[0].fault_type == "vim.fault.FileFault"
    assert failed[0].steps == []
    assert sum(1 for o in by_vm.values() if o.status == "changed") == 2  # the others went on
    assert not replan.is_empty

    _plan, result, replan = run(sim, TRAIN.replace("COUNT", "2"))
    assert result.failed == []
    assert [o.vm for o in result.vms] == [failed[0].vm]
    assert replan.is_empty


def test_failed_reconfig_and_power_on_faults(sim, direct) -> None:
    sim.arm_fault("web-01", "ReconfigVM_Task", "GenericVmConfigFault", message="boom")
    sim.arm_fault("old-01", "PowerOnVM_Task", "InsufficientResourcesFault")
    text = (
        "\n  - name: web-01\n    vgpus: {profile: grid_a100-10c, count: 1}\n"
        "\n  - name: old-01\n    vgpus: {profile: grid_a100-20c, count: 3}\n"
    )
    _plan, result, replan = run(sim, text)
    by_vm = {o.vm: o for o in result.vms}
    assert by_vm["web-01"].status == "failed"
    assert by_vm["web-01"].fault_type == "vim.fault.GenericVmConfigFault"
    assert "boom" in by_vm["web-01"].message
    assert by_vm["web-01"].steps == ["power-off", "power-on"]  # powered on again as it was
    assert "powered on again with its previous configuration" in by_vm["web-01"].message
    assert by_vm["old-01"].status == "failed"
    assert by_vm["old-01"].fault_type == "vim.fault.InsufficientResourcesFault"
    assert by_vm["old-01"].steps == ["power-off", "reconfigure", "reconfigure (revert)", "power-on"]
    vms = direct.vms()
    assert vgpus_of(vms["web-01"]) == []  # the failed reconfigure changed nothing
    assert vms["web-01"].runtime.powerState == "poweredOn"
    assert vgpus_of(vms["old-01"]) == ["grid_a100-20c"] * 2  # its vGPUs before, running again
    assert vms["old-01"].runtime.powerState == "poweredOn"

    _plan, result, replan = run(sim, text)  # faults are spent: the second run converges
    assert result.failed == [] and replan.is_empty
    vms = direct.vms()
    assert vgpus_of(vms["web-01"]) == ["grid_a100-10c"]
    assert vms["old-01"].runtime.powerState == "poweredOn"


def test_expired_session_during_apply_logs_in_again(sim, direct) -> None:
    sim.request("POST", "/vms/web-01/guest", {"state": "running"})
    sim.request("POST", "/faults", {"object": "web-01", "method": "ShutdownGuest", "fault": "NotAuthenticated"})
    inv = load_inventory_text(HEADER + "\n  - name: web-01\n    vgpus: {profile: grid_a100-10c, count: 1}\n")
    with open_session(settings(sim)) as session:
        observed = observe(session)
        result = apply_plan(session, make_plan(inv, observed), observed)
        assert session._generation == 1  # exactly one new login
        assert make_plan(inv, observe(session)).is_empty
    assert result.failed == []
    assert result.vms[0].steps == ["shutdown", "reconfigure", "power-on"]
    assert not sim.request("GET", "/faults")["faults"]  # the armed fault was consumed by the first try
    assert vgpus_of(direct.vms()["web-01"]) == ["grid_a100-10c"]


def test_drift_aborts_only_that_vm(sim, direct) -> None:
    inv = load_inventory_text(
        HEADER
        + "\n  - name: web-01\n    vgpus: {profile: grid_a100-10c, count: 1}\n"
        + "\n  - name: old-01\n    vgpus: {profile: grid_a100-20c, count: 1}\n"
    )
    with open_session(settings(sim)) as session:
        observed = observe(session)
        plan = make_plan(inv, observed)
        direct.vms()["web-01"].PowerOffVM_Task()  # someone changes the VM after the plan
        _wait_power(direct, "web-01", "poweredOff")
        result = apply_plan(session, plan, observed)
    by_vm = {o.vm: o for o in result.vms}
    assert by_vm["web-01"].status == "failed"
    assert by_vm["web-01"].fault_type == "DriftError"
    assert "power state" in by_vm["web-01"].message
    assert by_vm["old-01"].status == "changed"
    assert vgpus_of(direct.vms()["web-01"]) == []


def test_cancel_starts_nothing(sim, direct) -> None:
    stop = threading.Event()
    stop.set()
    _plan, result, _replan = run(sim, TRAIN.replace("COUNT", "1"), cancel=stop)
    assert result.interrupted
    assert set(statuses(result).values()) == {"not-started"}
    assert all(o.left for o in result.vms) and result.not_started == [o.vm for o in result.vms]
    assert "train-01" not in direct.vms()


def test_plan_with_errors_is_refused(sim) -> None:
    inv = load_inventory_text(HEADER + "\n  - name: web-01\n    vgpus: {profile: grid_h100-80c, count: 1}\n")
    with open_session(settings(sim)) as session:
        observed = observe(session)
        plan = make_plan(inv, observed)
        assert plan.errors
        with pytest.raises(PlanError):
            apply_plan(session, plan, observed)


def test_progress_reports_steps_and_parallel_bound(sim) -> None:
    events: list[tuple[str, str, int | None]] = []
    lock = threading.Lock()

    class Progress:
        def vm_step(self, vm: str, step: str, percent: int | None) -> None:
            with lock:
                events.append((vm, step, percent))

    _plan, result, _replan = run(sim, TRAIN.replace("COUNT", "1"), parallel=1, progress=Progress())
    assert result.failed == []
    steps = [(vm, step) for vm, step, _ in events]
    for name in ("train-01", "train-02", "train-03"):
        mine = [s for v, s in steps if v == name]
        assert mine[0] == "check" and mine[-1] == "done"
        assert {"clone", "reconfigure", "power-on"} <= set(mine)
    # parallel=1: one VM runs from check to done before the next starts
    order = [vm for vm, step in steps if step in ("check", "done")]
    assert order == [v for name in ("train-01", "train-02", "train-03") for v in (name, name)]


def _wait_power(direct: Direct, name: str, state: str) -> None:
    for _ in range(200):
        if direct.vms()[name].runtime.powerState == state:
            return
        threading.Event().wait(0.05)
    raise AssertionError(f"{name} did not reach {state}")


def test_nvlink_device_group_is_attached_in_one_request(sim, direct) -> None:
    with open_session(settings(sim)) as session:
        observed = observe(session)
        host = sorted(observed.hosts)[0]
        change = VmChange(
            vm="nv-01",
            clone=CloneSpec(template="ubuntu-22.04-ml", cluster="GPU-Cluster", host=host),
            devices=[DeviceChange(Op.ADD, "grid_a100-40c", group=0) for _ in range(2)],
            fields=[FieldChange("memoryReservationLockedToMax", False, True)],
            power_on=True,
        )
        result = apply_plan(session, Plan(vm_changes=[change]), observed)
        assert result.failed == [], result.vms
        again = observe(session).vms["nv-01"]
    vm = direct.vms()["nv-01"]
    groups = vm.config.deviceGroups.deviceGroup
    assert len(groups) == 1 and groups[0].deviceGroupName.startswith("Nvidia:2@grid_a100-40c")
    members = [d for d in vm.config.hardware.device if isinstance(getattr(d, "backing", None), Vmiop)]
    assert len(members) == 2
    assert {d.deviceGroupInfo.groupInstanceKey for d in members} == {groups[0].groupInstanceKey}
    assert vm.runtime.powerState == "poweredOn"
    assert {v.device_group_key for v in again.vgpus} == {groups[0].groupInstanceKey}


def test_vms_waiting_for_host_changes(sim, direct) -> None:
    inv = load_inventory_text(
        HEADER
        + "\n  - name: web-01\n    vgpus: {profile: grid_a100-10c, count: 1}\n"
        + "\n  - name: old-01\n    vgpus: {profile: grid_a100-20c, count: 1}\n"
    )
    with open_session(settings(sim)) as session:
        observed = observe(session)
        plan = make_plan(inv, observed)
        web_host = observed.vms["web-01"].host
        plan.host_changes.append(HostChange(web_host, kinds.DEFAULT_TYPE, "host", "shared", "sharedDirect"))
        next(c for c in plan.changes if c.vm == "web-01").depends_on_hosts.append(web_host)
        result = apply_plan(session, plan, observed)  # host changes still in the plan have not landed
    by_vm = {o.vm: o for o in result.vms}
    assert by_vm["web-01"].status == "skipped" and web_host in by_vm["web-01"].message
    assert by_vm["old-01"].status == "changed"
    assert result.hosts_not_ready == [web_host] and not result.ok
    assert vgpus_of(direct.vms()["web-01"]) == []


def test_parallel_apply_after_session_expiry_logs_in_once(gpusim_factory) -> None:
    farm = dict(FARM)
    farm["vms"] = [
        {"name": f"par-{i:02d}", "cpus": 2, "memory_mb": 4096, "firmware": "efi", "power_on": True} for i in range(12)
    ]
    sim = gpusim_factory(farm)
    d = Direct(sim)
    try:
        for i in range(6):  # half of them shut down through the guest, half are powered off hard
            sim.request("POST", f"/vms/par-{i:02d}/guest", {"state": "running"})
        inv = load_inventory_text(HEADER + "\n  - name: par-{00..11}\n    vgpus: {profile: grid_a100-4c, count: 1}\n")
        with open_session(settings(sim)) as session:
            observed = observe(session)
            plan = make_plan(inv, observed)
            key = session.content.sessionManager.currentSession.key
            d.si.content.sessionManager.TerminateSession([key])  # expires while the plan is shown
            result = apply_plan(session, plan, observed, parallel=8)
            # eight workers hit the expired session at once; they share one new login
            assert session._generation == 1
            assert make_plan(inv, observe(session)).is_empty
        assert statuses(result) == {f"par-{i:02d}": "changed" for i in range(12)}
        assert {o.steps[0] for o in result.vms} == {"shutdown", "power-off"}
        vms = d.vms()
        for i in range(12):
            vm = vms[f"par-{i:02d}"]
            assert vgpus_of(vm) == ["grid_a100-4c"]
            assert vm.runtime.powerState == "poweredOn"
    finally:
        d.close()


def test_vm_deleted_after_the_plan_is_drift(sim, direct) -> None:
    inv = load_inventory_text(HEADER + "\n  - name: web-01\n    vgpus: {profile: grid_a100-10c, count: 1}\n")
    with open_session(settings(sim)) as session:
        observed = observe(session)
        plan = make_plan(inv, observed)
        vm = direct.vms()["web-01"]
        _wait_task(vm.PowerOffVM_Task())
        _wait_task(vm.Destroy_Task())
        result = apply_plan(session, plan, observed)
    (outcome,) = result.vms
    assert outcome.status == "failed" and outcome.fault_type == "DriftError"
    assert "no longer exists" in outcome.message


def _wait_task(task) -> None:
    from pyVim.task import WaitForTask

    WaitForTask(task)


def test_example_inventory_applies_and_converges(gpusim_factory) -> None:
    """inventory.example.yaml on the demo farm; NVLink sets come from the simulator (as the ESXi shell would)."""
    from pathlib import Path

    sim = gpusim_factory()
    inv = load_inventory(Path(__file__).resolve().parents[2] / "inventory.example.yaml")
    sets: dict[str, list[list[str]]] = {}
    for h in sim.hosts():
        by_set: dict[int, list[str]] = {}
        for g in h["gpus"]:
            if g["nvlinkSet"] >= 0 and g["nvlinkUp"]:
                by_set.setdefault(g["nvlinkSet"], []).append(g["pciId"])
        sets[h["name"]] = [sorted(v) for _, v in sorted(by_set.items())]

    def observed_with_nvlink(session):
        observed = observe(session, inv.vcenter.datacenter)
        for host, groups in sets.items():
            set_nvlink_sets(observed, host, groups)
        return observed

    with open_session(settings(sim)) as session:
        observed = observed_with_nvlink(session)
        plan = make_plan(inv, observed)
        assert not plan.errors, plan.errors
        result = apply_plan(session, plan, observed)
        assert result.failed == [], [(o.vm, o.fault_type, o.message) for o in result.vms]
        assert make_plan(inv, observed_with_nvlink(session)).is_empty
    d = Direct(sim)
    try:
        vms = d.vms()
        for spec in inv.vms:
            vm = vms[spec.name]
            assert vgpus_of(vm) == sorted(spec.vgpu_profiles)
            assert vm.config.memoryReservationLockedToMax is True
            assert extra(vm)["pciPassthru.use64bitMMIO"].upper() == "TRUE"
            assert vm.runtime.powerState == "poweredOn"
            groups = vm.config.deviceGroups.deviceGroup if vm.config.deviceGroups else []
            assert len(groups) == (1 if spec.nvlink == "required" else 0)
    finally:
        d.close()
    placed = {(a["vmName"], a["host"]) for a in sim.assignments()}
    assert {vm for vm, _ in placed} == {spec.name for spec in inv.vms}


def test_guest_that_refuses_shutdown_is_powered_off(sim, direct) -> None:
    sim.set_guest("web-01", state="running")
    sim.arm_fault("web-01", "ShutdownGuest", "InvalidState")
    text = "\n  - name: web-01\n    vgpus: {profile: grid_a100-10c, count: 1}\n"
    _plan, result, replan = run(sim, text)
    (outcome,) = result.vms
    assert outcome.status == "changed"
    assert outcome.steps == ["power-off", "reconfigure", "power-on"]
    assert replan.is_empty
    assert vgpus_of(direct.vms()["web-01"]) == ["grid_a100-10c"]
