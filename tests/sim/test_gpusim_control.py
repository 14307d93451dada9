"""gpusim's control endpoint and launcher: faults, delays, guest state, host down/up, bad requests."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import gpusim as launcher
import pytest
from gpusim import ControlError, Gpusim
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim, vmodl

pytestmark = pytest.mark.sim

FARM = {
    "clusters": [
        {
            "name": "C",
            "hosts": 2,
            "gpus_per_host": 2,
            "model": "L40S",
            "nvlink": "none",
            "graphics_type": "sharedDirect",
        }
    ],
    "templates": [],
    "vms": [{"name": "web-1", "host": "esx-01.gpu.sim"}, {"name": "web-2", "host": "esx-02.gpu.sim"}],
}


@pytest.fixture(scope="module")
def sim(gpusim_session_factory: Any) -> Gpusim:
    return gpusim_session_factory(FARM, args=["-no-ssh"])


@pytest.fixture
def vms(sim: Gpusim) -> Iterator[dict[str, Any]]:
    sim.clear_faults()
    si = sim.connect()
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    found = {vm.name: vm for vm in view.view}
    yield found
    for vm in found.values():
        if vm.runtime.powerState != "poweredOff":
            WaitForTask(vm.PowerOffVM_Task())
    Disconnect(si)


def test_armed_fault_fails_the_next_call_only(sim: Gpusim, vms: dict[str, Any]) -> None:
    sim.arm_fault("web-1", "PowerOnVM_Task", fault="InvalidState", message="armed by test")
    with pytest.raises(vim.fault.InvalidState) as err:
        WaitForTask(vms["web-1"].PowerOnVM_Task())
    assert err.value.msg == "armed by test"
    WaitForTask(vms["web-1"].PowerOnVM_Task())
    assert sim.request("GET", "/faults")["faults"] is None


def test_armed_fault_on_a_host_covers_its_managers(sim: Gpusim, vms: dict[str, Any]) -> None:
    host = vms["web-1"].runtime.host
    sim.arm_fault("esx-01.gpu.sim", "QueryModules", fault="HostCommunication", count=2)
    for _ in range(2):
        with pytest.raises(vmodl.fault.HostCommunication):
            host.configManager.kernelModuleSystem.QueryModules()
    assert host.configManager.kernelModuleSystem.QueryModules()[0].name == "nvidia"


def test_delay_slows_a_task(sim: Gpusim, vms: dict[str, Any]) -> None:
    sim.delay("web-2", "PowerOnVM_Task", seconds=0.5)
    task = vms["web-2"].PowerOnVM_Task()
    assert task.info.state in ("queued", "running")
    WaitForTask(task)
    assert vms["web-2"].runtime.powerState == "poweredOn"


def test_set_guest(sim: Gpusim, vms: dict[str, Any]) -> None:
    sim.set_guest("web-1", ip="10.1.2.3", state="running", hostname="web-1.lab")
    vm = vms["web-1"]
    assert vm.guest.ipAddress == "10.1.2.3"
    assert vm.guest.guestState == "running"
    assert vm.summary.guest.ipAddress == "10.1.2.3"
    sim.set_guest("web-1", state="notRunning")
    assert vm.guest.guestState == "notRunning"


def test_host_down_and_up(sim: Gpusim, vms: dict[str, Any]) -> None:
    host = vms["web-2"].runtime.host
    assert sim.host_down("esx-02.gpu.sim")["connectionState"] == "notResponding"
    try:
        assert host.runtime.connectionState == "notResponding"
        with pytest.raises(vmodl.fault.HostNotConnected):
            vms["web-2"].PowerOnVM_Task()
    finally:
        sim.host_up("esx-02.gpu.sim")
    assert host.runtime.connectionState == "connected"
    WaitForTask(vms["web-2"].PowerOnVM_Task())


@pytest.mark.parametrize(
    ("call", "status", "text"),
    [
        (lambda s: s.arm_fault("no-such-vm", "PowerOnVM_Task"), 400, "unknown object"),
        (lambda s: s.arm_fault("web-1", "PowerOnVM_Task", fault="NoSuchFault"), 400, "unknown fault"),
        (lambda s: s.set_guest("no-such-vm", ip="1.2.3.4"), 400, "unknown VM"),
        (lambda s: s.set_guest("web-1", state="dancing"), 400, "unknown guest state"),
        (lambda s: s.host_down("no-such-host"), 400, "no-such-host"),
        (lambda s: s.delay("web-1", "PowerOnVM_Task", seconds=0), 400, "seconds"),
        (lambda s: s.request("GET", "/nope"), 404, "unknown control endpoint"),
    ],
)
def test_bad_control_requests(sim: Gpusim, call: Any, status: int, text: str) -> None:
    with pytest.raises(ControlError) as err:
        call(sim)
    assert err.value.status == status
    assert text in err.value.message


def test_assignments_report_vgpus(sim: Gpusim, vms: dict[str, Any]) -> None:
    vm = vms["web-1"]
    backing = vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu="grid_l40s-24q")
    device = vim.vm.device.VirtualPCIPassthrough(key=-1, backing=backing)
    spec = vim.vm.ConfigSpec(
        deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="add", device=device)],
        memoryReservationLockedToMax=True,
    )
    WaitForTask(vm.ReconfigVM_Task(spec))
    WaitForTask(vm.PowerOnVM_Task())
    placed = sim.assignments()
    assert [(a["vmName"], a["host"], a["gpu"], a["model"], a["profile"]) for a in placed] == [
        ("web-1", "esx-01.gpu.sim", "0000:3b:00.0", "L40S", "grid_l40s-24q")
    ]


def test_parse_export_line() -> None:
    env = launcher.parse_export_line("export A=1 B='x y' C=")
    assert env == {"A": "1", "B": "x y", "C": ""}
    with pytest.raises(launcher.GpusimError):
        launcher.parse_export_line("hello")


def test_binary_rejects_bad_flags_with_exit_2() -> None:
    binary = launcher.build()
    for args in (["-no-such-flag"], ["-model", "V100"]):
        proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip()


def test_stop_is_clean(gpusim_factory: Any) -> None:
    sim = gpusim_factory(
        {"clusters": [{"name": "C", "hosts": 1, "gpus_per_host": 1, "model": "L40S"}], "templates": []},
        args=["-no-ssh"],
    )
    started = time.monotonic()
    sim.stop()
    assert sim.process.returncode == 0
    assert time.monotonic() - started < launcher.STOP_TIMEOUT_S
