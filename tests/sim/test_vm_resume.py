"""VM steps that survive faults and crashes, with real `vgpuctl` processes against gpusim:

- a running VM whose reconfigure fails is powered on again with its previous configuration, and the apply's
  text and JSON say so;
- kill -9 of `vgpuctl apply` at each VM step (clone, power-off, reconfigure, power-on), triggered when gpusim
  sees the step's task start (a hold on that task kind), then `plan` (not exit 0 while work is unfinished) and
  `apply` (converges, every VM that ran runs again).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim
from vimfind import find_object

pytestmark = pytest.mark.sim

TEMPLATE = "ubuntu-22.04-ml"
POLL_S = 0.05
WAIT_POLLS = 2400  # a bound on polls, not on time: each poll is one small control read

FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 4, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "templates": [{"name": TEMPLATE, "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [{"name": "run-01", "cpus": 2, "memory_mb": 4096, "firmware": "efi"}],
}  # fmt: skip

INVENTORY = f"""apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
vms:
  - name: run-01
    vgpus: {{profile: grid_a100-10c, count: 1}}
  - name: new-01
    template: {TEMPLATE}
    cluster: GPU-Cluster
    vgpus: {{profile: grid_a100-10c, count: 1}}
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    sim = gpusim_factory(FARM)
    conn = sim.connect()
    try:
        WaitForTask(find_object(conn, "run-01").PowerOnVM_Task())
    finally:
        Disconnect(conn)
    return sim


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _state(si: Any, name: str) -> tuple[list[str], str]:
    vm = find_object(si, name)
    assert vm is not None, f"{name} does not exist"
    vgpus = [
        d.backing.vgpu
        for d in vm.config.hardware.device
        if isinstance(d, vim.vm.device.VirtualPCIPassthrough) and hasattr(d.backing, "vgpu")
    ]
    return vgpus, str(vm.runtime.powerState)


def _vgpuctl(sim: Any, tmp_path: Path, *args: str, inventory: str = INVENTORY) -> subprocess.Popen[str]:
    path = tmp_path / "inv.yaml"
    path.write_text(inventory)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env.update(VGPUCTL_URL=sim.url, VGPUCTL_USERNAME=sim.username, VGPUCTL_PASSWORD=sim.password,
               VGPUCTL_INSECURE="1", VGPUCTL_STATE_DIR=str(tmp_path / "state"))  # fmt: skip
    cmd = [sys.executable, "-m", "vgpuctl", *args, "-f", str(path)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(sim: Any, tmp_path: Path, *args: str, inventory: str = INVENTORY) -> tuple[int, str, str]:
    proc = _vgpuctl(sim, tmp_path, *args, inventory=inventory)
    out, err = proc.communicate()
    return proc.returncode, out, err


def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(WAIT_POLLS):
        if check():
            return
        time.sleep(POLL_S)
    raise AssertionError(f"never happened: {what}")


def _hold(sim: Any, hold: int) -> dict[str, Any]:
    return next(h for h in sim.holds() if h["id"] == hold)


# ------------------------------------------------------------------------------------------ failed reconfigure


@pytest.mark.parametrize("output", ["text", "json"])
def test_a_running_vm_whose_reconfigure_fails_runs_again_as_before(
    sim: Any, si: Any, tmp_path: Path, output: str
) -> None:
    sim.arm_fault("run-01", "ReconfigVM_Task", "GenericVmConfigFault", message="device refused")
    inventory = INVENTORY.split("  - name: new-01")[0]
    args = ("-o", "json", "apply", "--yes") if output == "json" else ("apply", "--yes")
    code, out, err = _run(sim, tmp_path, *args, inventory=inventory)
    assert code == 1, out + err
    assert _state(si, "run-01") == ([], "poweredOn")  # running again, without the vGPU it could not get
    if output == "json":
        outcome = next(v for v in json.loads(out)["vms"] if v["vm"] == "run-01")
        assert outcome["status"] == "failed" and outcome["steps"] == ["power-off", "power-on"]
        assert outcome["message"] == "device refused; powered on again with its previous configuration"
    else:
        assert "failed: run-01: vim.fault.GenericVmConfigFault: device refused; powered on again with its " \
               "previous configuration" in out, out  # fmt: skip
    code, out, err = _run(sim, tmp_path, "apply", "--yes", inventory=inventory)  # the fault is spent
    assert code == 0, out + err
    assert _state(si, "run-01") == (["grid_a100-10c"], "poweredOn")


def test_a_failed_power_on_after_a_failed_reconfigure_is_said(sim: Any, si: Any, tmp_path: Path) -> None:
    sim.arm_fault("run-01", "ReconfigVM_Task", "GenericVmConfigFault", message="device refused")
    sim.arm_fault("run-01", "PowerOnVM_Task", "InsufficientResourcesFault", message="no memory left")
    inventory = INVENTORY.split("  - name: new-01")[0]
    code, out, err = _run(sim, tmp_path, "apply", "--yes", inventory=inventory)
    assert code == 1, out + err
    assert "device refused; left powered off: powering it on again failed: no memory left" in out, out
    assert _state(si, "run-01") == ([], "poweredOff")


# ------------------------------------------------------------------------------------------ kill -9 at each step

STEPS = {  # step -> (task kind, the object it runs on; "" the first of any VM: with --parallel 1 the other VM waits)
    "clone": ("CloneVM_Task", TEMPLATE),
    "power-off": ("PowerOffVM_Task", "run-01"),
    "reconfigure": ("ReconfigVM_Task", "run-01"),
    "power-on": ("PowerOnVM_Task", ""),
}


@pytest.mark.parametrize("step", list(STEPS))
def test_kill_at_a_vm_step_then_plan_and_apply_resume(sim: Any, si: Any, tmp_path: Path, step: str) -> None:
    method, obj = STEPS[step]
    hold = sim.hold(method, obj)
    proc = _vgpuctl(sim, tmp_path, "apply", "--yes", "--parallel", "1")  # run-01 first, then new-01
    try:
        _until(lambda: _hold(sim, hold)["started"] or proc.poll() is not None, f"{method} starts")
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sim.release(hold)
    _until(lambda: _hold(sim, hold)["waiting"] == 0, f"the held {method} ends")

    code, out, err = _run(sim, tmp_path, "plan", "--detailed-exitcode")
    assert code == 2, out + err  # never "no changes" while work is unfinished
    code, out, err = _run(sim, tmp_path, "apply", "--yes")
    assert code == 0, out + err
    assert _state(si, "run-01") == (["grid_a100-10c"], "poweredOn")
    assert _state(si, "new-01") == (["grid_a100-10c"], "poweredOn")
    code, out, err = _run(sim, tmp_path, "plan", "--detailed-exitcode")
    assert code == 0, out + err


def test_a_running_vm_whose_new_vgpus_find_no_room_runs_again_with_its_old_ones(
    sim: Any, si: Any, tmp_path: Path
) -> None:
    inventory = INVENTORY.split("  - name: new-01")[0]
    assert _run(sim, tmp_path, "apply", "--yes", inventory=inventory)[0] == 0  # running with one 10C
    sim.arm_fault("run-01", "PowerOnVM_Task", "InsufficientGraphicsResourcesFault")  # taken meanwhile
    bigger = inventory.replace("grid_a100-10c", "grid_a100-20c")
    code, out, err = _run(sim, tmp_path, "-o", "json", "apply", "--yes", inventory=bigger)
    assert code == 1, out + err
    outcome = next(v for v in json.loads(out)["vms"] if v["vm"] == "run-01")
    assert outcome["steps"] == ["power-off", "reconfigure", "reconfigure (revert)", "power-on"]
    assert outcome["message"].endswith("; powered on again with its previous vGPUs"), outcome
    assert _state(si, "run-01") == (["grid_a100-10c"], "poweredOn")
