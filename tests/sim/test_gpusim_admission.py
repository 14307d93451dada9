"""vSphere's vGPU rules as gpusim enforces them, seen through pyVmomi: reconfigure and power-on admission."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from gpusim import Gpusim
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim

pytestmark = pytest.mark.sim

INSUFFICIENT = (
    "The amount of graphics resource available in the parent resource pool is insufficient for the operation."
)
HOST = "esx-01.gpu.sim"

FARM = {
    "clusters": [
        {
            "name": "GPU-Cluster",
            "hosts": 1,
            "gpus_per_host": 2,
            "model": "A100-40GB",
            "nvlink": "pairs",
            "graphics_type": "sharedDirect",
        }
    ],
    "templates": [{"name": "tmpl-gpu", "memory_mb": 4096, "memory_locked": True, "vgpus": ["grid_a100-20c"]}],
    "vms": [{"name": f"vm-{i}", "memory_mb": 4096, "memory_locked": True} for i in range(1, 4)]
    + [{"name": "unlocked", "memory_mb": 4096}],
}


@pytest.fixture
def sim(gpusim_factory: Any) -> Gpusim:
    return gpusim_factory(FARM, args=["-no-ssh"])


@pytest.fixture
def vms(sim: Gpusim) -> Iterator[dict[str, Any]]:
    si = sim.connect()
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    yield {vm.name: vm for vm in view.view}
    Disconnect(si)


def vgpu_spec(*profiles: str, op: str = "add") -> vim.vm.ConfigSpec:
    changes = []
    for i, profile in enumerate(profiles):
        backing = vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile)
        device = vim.vm.device.VirtualPCIPassthrough(key=-100 - i, backing=backing)
        changes.append(vim.vm.device.VirtualDeviceSpec(operation=op, device=device))
    return vim.vm.ConfigSpec(deviceChange=changes)


def vgpus(vm: Any) -> list[str]:
    return [
        d.backing.vgpu
        for d in vm.config.hardware.device
        if isinstance(d.backing, vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo)
    ]


def test_power_on_admits_and_power_off_releases(sim: Gpusim, vms: dict[str, Any]) -> None:
    vm = vms["vm-1"]
    WaitForTask(vm.ReconfigVM_Task(vgpu_spec("grid_a100-40c", "grid_a100-40c")))
    WaitForTask(vm.PowerOnVM_Task())
    placed = [a for a in sim.assignments() if a["vmName"] == "vm-1"]
    assert sorted(a["gpu"] for a in placed) == ["0000:3b:00.0", "0000:3c:00.0"]
    host = vm.runtime.host
    assert [[v.name for v in g.vm] for g in host.config.graphicsInfo] == [["vm-1"], ["vm-1"]]
    WaitForTask(vm.PowerOffVM_Task())
    assert sim.assignments() == []


def test_insufficient_graphics_leaves_nothing_assigned(sim: Gpusim, vms: dict[str, Any]) -> None:
    WaitForTask(vms["vm-1"].ReconfigVM_Task(vgpu_spec("grid_a100-40c")))
    WaitForTask(vms["vm-2"].ReconfigVM_Task(vgpu_spec("grid_a100-40c", "grid_a100-40c")))
    WaitForTask(vms["vm-1"].PowerOnVM_Task())
    with pytest.raises(vim.fault.InsufficientGraphicsResourcesFault) as err:
        WaitForTask(vms["vm-2"].PowerOnVM_Task())
    assert err.value.msg == INSUFFICIENT
    assert vms["vm-2"].runtime.powerState == "poweredOff"
    assert [a["vmName"] for a in sim.assignments()] == ["vm-1"]


def test_memory_must_be_reserved(vms: dict[str, Any]) -> None:
    vm = vms["unlocked"]
    WaitForTask(vm.ReconfigVM_Task(vgpu_spec("grid_a100-10c")))
    with pytest.raises(vim.fault.GenericVmConfigFault, match="memory reservation"):
        WaitForTask(vm.PowerOnVM_Task())
    WaitForTask(vm.ReconfigVM_Task(vim.vm.ConfigSpec(memoryReservationLockedToMax=True)))
    WaitForTask(vm.PowerOnVM_Task())


def test_vgpu_changes_need_power_off(vms: dict[str, Any]) -> None:
    vm = vms["vm-3"]
    WaitForTask(vm.PowerOnVM_Task())
    with pytest.raises(vim.fault.DeviceHotPlugNotSupported):
        WaitForTask(vm.ReconfigVM_Task(vgpu_spec("grid_a100-20c")))
    assert vgpus(vm) == []


@pytest.mark.parametrize(
    ("profiles", "fault"),
    [
        (["grid_a100-4c"] * 9, vim.fault.TooManyDevices),
        (["grid_a100-3-20c"], vim.fault.InvalidDeviceSpec),  # MIG profile, GPUs are time-sliced
        (["grid_h100-80c"], vim.fault.InvalidDeviceSpec),  # another board
        ([""], vim.fault.InvalidDeviceSpec),
    ],
)
def test_reconfigure_refuses_bad_vgpus(vms: dict[str, Any], profiles: list[str], fault: type) -> None:
    vm = vms["vm-1"]
    with pytest.raises(fault):
        WaitForTask(vm.ReconfigVM_Task(vgpu_spec(*profiles)))
    assert vgpus(vm) == []


def test_eight_vgpus_are_allowed_on_8_0(vms: dict[str, Any]) -> None:
    WaitForTask(vms["vm-1"].ReconfigVM_Task(vgpu_spec(*["grid_a100-4c"] * 8)))
    assert len(vgpus(vms["vm-1"])) == 8


def test_clone_template_with_vgpus(sim: Gpusim, vms: dict[str, Any]) -> None:
    template = vms["tmpl-gpu"]
    host = vms["vm-1"].runtime.host
    spec = vim.vm.CloneSpec(location=vim.vm.RelocateSpec(pool=host.parent.resourcePool, host=host), powerOn=True)
    task = template.CloneVM_Task(folder=template.parent, name="from-template", spec=spec)
    WaitForTask(task)
    si_vm = task.info.result
    assert isinstance(si_vm, vim.VirtualMachine)
    assert vgpus(si_vm) == ["grid_a100-20c"]
    assert si_vm.config.memoryReservationLockedToMax is True
    assert si_vm.runtime.powerState == "poweredOn"
    assert [a["vmName"] for a in sim.assignments()] == ["from-template"]


def test_maintenance_mode_and_reboot(sim: Gpusim, vms: dict[str, Any]) -> None:
    host = vms["vm-1"].runtime.host
    WaitForTask(vms["vm-1"].PowerOnVM_Task())
    with pytest.raises(vim.fault.InvalidState):
        WaitForTask(host.EnterMaintenanceMode_Task(timeout=0))
    with pytest.raises(vim.fault.InvalidState):
        WaitForTask(host.RebootHost_Task(force=False))
    WaitForTask(vms["vm-1"].PowerOffVM_Task())
    WaitForTask(host.EnterMaintenanceMode_Task(timeout=0))
    WaitForTask(host.RebootHost_Task(force=False))
    assert host.runtime.connectionState == "notResponding"
    assert sim.host(HOST)["rebooting"] is True
