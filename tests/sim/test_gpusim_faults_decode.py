"""Every fault gpusim's control endpoint can arm decodes in pyVmomi as its vim type, with the armed message.

Faults whose vim type has required fields (DuplicateName.object/name, TaskInProgress.task, FileFault.file,
InvalidPowerState.existingState, ...) must carry them, or pyVmomi's deserializer fails (KeyError on an empty
managed object type) instead of raising the fault.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from gpusim import Gpusim
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import VmomiSupport, vim, vmodl

pytestmark = pytest.mark.sim

FARM = {
    "clusters": [{"name": "C", "hosts": 1, "gpus_per_host": 1, "model": "L40S", "nvlink": "none"}],
    "templates": [],
    "vms": [{"name": "app-1", "host": "esx-01.gpu.sim"}],
}
HOST = "esx-01.gpu.sim"


@pytest.fixture(scope="module")
def sim(gpusim_session_factory: Any) -> Gpusim:
    return gpusim_session_factory(FARM, args=["-no-ssh"])


@pytest.fixture(scope="module")
def objects(sim: Gpusim) -> Iterator[dict[str, Any]]:
    si = sim.connect()
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine, vim.HostSystem], True)
    found = {obj.name: obj for obj in view.view}
    yield found
    Disconnect(si)


@pytest.fixture(autouse=True)
def no_faults_left(sim: Gpusim) -> Iterator[None]:
    sim.clear_faults()
    yield
    sim.clear_faults()


def known_faults(sim: Gpusim) -> list[str]:
    return sorted(sim.request("GET", "/faults")["known"])


def vim_type(name: str) -> type:
    return VmomiSupport.GetWsdlType("urn:vim25", name)


def test_every_known_fault_decodes_as_a_task_error(sim: Gpusim, objects: dict[str, Any]) -> None:
    vm = objects["app-1"]
    names = known_faults(sim)
    assert {"DuplicateName", "TaskInProgress", "FileFault", "InvalidPowerState"} <= set(names)
    for name in names:
        message = f"{name} armed by test <1>"
        sim.arm_fault("app-1", "PowerOnVM_Task", fault=name, message=message)
        with pytest.raises(vim_type(name)) as err:
            WaitForTask(vm.PowerOnVM_Task())
        assert type(err.value) is vim_type(name), name
        assert err.value.msg == message, name
    assert vm.runtime.powerState == "poweredOff"


def test_every_known_fault_decodes_as_a_soap_fault(sim: Gpusim, objects: dict[str, Any]) -> None:
    modules = objects[HOST].configManager.kernelModuleSystem
    for name in known_faults(sim):
        message = f"{name} on QueryModules & more"
        sim.arm_fault(HOST, "QueryModules", fault=name, message=message)
        with pytest.raises(vim_type(name)) as err:
            modules.QueryModules()
        assert type(err.value) is vim_type(name), name
        assert err.value.msg == message, name
    assert modules.QueryModules()[0].name == "nvidia"  # each fault fired once


def test_required_fields_name_the_target(sim: Gpusim, objects: dict[str, Any]) -> None:
    vm = objects["app-1"]
    sim.arm_fault("app-1", "PowerOnVM_Task", fault="DuplicateName", message="name taken")
    with pytest.raises(vim.fault.DuplicateName) as dup:
        WaitForTask(vm.PowerOnVM_Task())
    assert dup.value.name == "app-1" and dup.value.object._moId == vm._moId
    assert isinstance(dup.value.object, vim.VirtualMachine)

    sim.arm_fault("app-1", "PowerOnVM_Task", fault="InvalidPowerState")
    with pytest.raises(vim.fault.InvalidPowerState) as ips:
        WaitForTask(vm.PowerOnVM_Task())
    assert (ips.value.existingState, ips.value.requestedState) == ("poweredOff", "poweredOn")

    sim.arm_fault("app-1", "PowerOnVM_Task", fault="FileFault", message="disk gone")
    with pytest.raises(vim.fault.FileFault) as ff:
        WaitForTask(vm.PowerOnVM_Task())
    assert ff.value.file == "[datastore1] app-1/app-1.vmx"

    sim.arm_fault(HOST, "QueryModules", fault="TaskInProgress", message="busy")
    with pytest.raises(vim.fault.TaskInProgress) as tip:
        objects[HOST].configManager.kernelModuleSystem.QueryModules()
    assert isinstance(tip.value.task, vim.Task) and tip.value.task._moId

    sim.arm_fault(HOST, "EnterMaintenanceMode_Task", fault="SystemError")
    with pytest.raises(vmodl.fault.SystemError) as se:
        WaitForTask(objects[HOST].EnterMaintenanceMode_Task(0))
    assert se.value.reason  # required; a default names the armed fault
    assert not objects[HOST].runtime.inMaintenanceMode


def test_insufficient_graphics_gets_vspheres_message(sim: Gpusim, objects: dict[str, Any]) -> None:
    sim.arm_fault("app-1", "PowerOnVM_Task", fault="InsufficientGraphicsResourcesFault")
    with pytest.raises(vim.fault.InsufficientGraphicsResourcesFault) as err:
        WaitForTask(objects["app-1"].PowerOnVM_Task())
    assert "graphics resource available in the parent resource pool is insufficient" in err.value.msg
