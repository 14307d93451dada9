"""Ctrl-C during a real `vgpuctl apply` against gpusim with task delays: a subprocess receives SIGINT and the
test checks, in vCenter itself, which steps ran.

- at most --parallel VMs run at once; queued ones never start after Ctrl-C;
- a VM this run powered off is powered on again (its restoring step) and not reconfigured;
- a second Ctrl-C exits at once, naming the vCenter tasks that may still run, and starts nothing more.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim

pytestmark = pytest.mark.sim

FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 4, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [{"name": f"q-0{i}", "cpus": 2, "memory_mb": 4096, "firmware": "efi"} for i in range(1, 5)]
    + [{"name": "run-01", "cpus": 2, "memory_mb": 4096, "firmware": "efi"}],
}  # fmt: skip


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


def inventory(tmp_path: Path, vms: str) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text("apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms:\n" + textwrap.dedent(vms))
    return path


def start_apply(sim: Any, tmp_path: Path, path: Path, *extra: str, trace: bool = False) -> subprocess.Popen[str]:
    """`vgpuctl apply`; with `trace` (-vv) stderr also says when vCenter answered each request."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    env.update({**sim.env, "VGPUCTL_INSECURE": "1", "VGPUCTL_STATE_DIR": str(tmp_path / "state")})
    return subprocess.Popen(
        [sys.executable, "-m", "vgpuctl", *(["-vv"] if trace else []), "apply", "-f", str(path), "--yes", *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


STEP_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d (?P<subject>[^:]+): (?P<step>\S+)")


def step(line: str) -> tuple[str, str]:
    """(subject, step) of a progress line `DATE-TIME+OFFSET subject: step [detail]`; ("", "") for other lines."""
    m = STEP_LINE.match(line)
    return (m["subject"], m["step"]) if m else ("", "")


def read_until(proc: subprocess.Popen[str], seen: list[str], done: Callable[[list[str]], bool]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:  # progress lines, one per step change
        seen.append(line)
        if done(seen):
            return
    raise AssertionError("apply ended before the awaited step: " + "".join(seen))


def vm_state(sim: Any, name: str) -> tuple[list[str], str]:
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        vm = next(o for o in view.view if o.name == name)
        profiles = [
            d.backing.vgpu
            for d in vm.config.hardware.device
            if isinstance(d, vim.vm.device.VirtualPCIPassthrough) and hasattr(d.backing, "vgpu")
        ]
        return profiles, str(vm.runtime.powerState)
    finally:
        Disconnect(si)


def power_on(sim: Any, name: str) -> None:
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        WaitForTask(next(o for o in view.view if o.name == name).PowerOnVM_Task())
    finally:
        Disconnect(si)


QUEUED = "- name: q-{01..04}\n  vgpus: {profile: grid_a100-10c, count: 1}\n  power: 'off'\n"


def test_first_ctrl_c_finishes_running_steps_and_starts_no_queued_vm(sim: Any, tmp_path: Path) -> None:
    for name in ("q-01", "q-02"):
        sim.delay(name, "ReconfigVM_Task", 3.0)
    proc = start_apply(sim, tmp_path, inventory(tmp_path, QUEUED), "--parallel", "2")
    seen: list[str] = []
    read_until(proc, seen, lambda s: all(any(step(x) == (vm, "reconfigure") for x in s) for vm in ("q-01", "q-02")))
    started = {step(line)[0] for line in seen if step(line)[0].startswith("q-")}
    assert started == {"q-01", "q-02"}  # a bounded queue: the other two wait for a free worker
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    err = "".join(seen) + err
    assert proc.returncode == 130, err
    assert "interrupted: no new step starts" in err
    assert "q-01: done" in err and "q-02: done" in err  # the tasks in flight were waited for
    assert "q-03: check" not in err and "q-04: check" not in err
    assert "Apply interrupted: 2 changed, 0 failed, 0 skipped, 2 not started, 0 unchanged." in out
    assert "  not started: q-03, q-04" in out  # named once, not a line each
    assert "to continue: run the same apply again" in out
    assert vm_state(sim, "q-01")[0] == ["grid_a100-10c"] and vm_state(sim, "q-02")[0] == ["grid_a100-10c"]
    assert vm_state(sim, "q-03")[0] == [] and vm_state(sim, "q-04")[0] == []


def test_a_vm_this_run_powered_off_is_powered_on_again_not_reconfigured(sim: Any, tmp_path: Path) -> None:
    power_on(sim, "run-01")
    sim.delay("run-01", "PowerOffVM_Task", 3.0)
    path = inventory(tmp_path, "- name: run-01\n  vgpus: {profile: grid_a100-10c, count: 1}\n  power: restart\n")
    proc = start_apply(sim, tmp_path, path)
    seen: list[str] = []
    read_until(proc, seen, lambda s: any(step(x) in (("run-01", "power-off"), ("run-01", "shutdown")) for x in s))
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    err = "".join(seen) + err
    assert proc.returncode == 130, err
    assert "run-01: power-on (restore)" in err and "run-01: reconfigure" not in err
    assert vm_state(sim, "run-01") == ([], "poweredOn")  # as it was before the apply
    assert "left: run-01 (reconfigure)" in out


def test_second_ctrl_c_exits_at_once_naming_running_tasks(sim: Any, tmp_path: Path) -> None:
    for name in ("q-01", "q-02", "q-03", "q-04"):
        sim.delay(name, "ReconfigVM_Task", 6.0)
    proc = start_apply(sim, tmp_path, inventory(tmp_path, QUEUED), "--parallel", "2", trace=True)
    seen: list[str] = []
    read_until(proc, seen, lambda s: sum("SOAP <- ReconfigVM_Task: ok" in x for x in s) >= 2)  # both tasks exist
    proc.send_signal(signal.SIGINT)
    read_until(proc, seen, lambda s: any("interrupted: no new step starts" in x for x in s))
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    err = "".join(seen) + err
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: interrupted again: exiting now; these vCenter tasks may still be running: ")
    for vm in ("q-01", "q-02"):  # by its task id once the worker recorded it, "requested" a moment before
        assert re.search(rf"reconfigure {vm} \((task-\d+|requested)\)", last), last
    assert "Apply interrupted" not in out  # no summary: it did not wait
    time.sleep(7.0)  # let the delayed tasks end in gpusim, then see that nothing else was started
    assert vm_state(sim, "q-03")[0] == [] and vm_state(sim, "q-04")[0] == []


def test_second_ctrl_c_during_a_host_reboot_exits_without_waiting_for_it(sim: Any, tmp_path: Path) -> None:
    host = "esx-01.gpu.sim"
    sim.delay(host, "RebootHost_Task", 30.0)
    path = tmp_path / "inv.yaml"
    path.write_text(f"apiVersion: vgpuctl/v1\nvcenter: {{datacenter: DC0}}\nhosts:\n  - name: {host}\n"
                    "    scheduler: equal-share\n")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env.update({"VGPUCTL_URL": sim.url, "VGPUCTL_USERNAME": sim.username, "VGPUCTL_PASSWORD": sim.password,
                "VGPUCTL_INSECURE": "1", "VGPUCTL_STATE_DIR": str(tmp_path / "state"),
                "VGPUCTL_ESXI_HOSTS": sim.env["GPUSIM_SSH_HOSTS"],
                "VGPUCTL_ESXI_KNOWN_HOSTS": sim.env["GPUSIM_SSH_KNOWN_HOSTS"],
                "VGPUCTL_ESXI_PASSWORD": sim.password})  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "vgpuctl", "-vv", "apply", "-f", str(path), "--yes"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    seen: list[str] = []
    read_until(proc, seen, lambda s: any("SOAP <- RebootHost_Task: ok" in x for x in s))  # the task exists
    proc.send_signal(signal.SIGINT)
    read_until(proc, seen, lambda s: any("interrupted: no new step starts" in x for x in s))
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=300)
    err = "".join(seen) + err
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    running = "error: interrupted again: exiting now; these vCenter tasks may still be running: "
    assert re.fullmatch(rf"{running}reboot host {re.escape(host)} \((task-\d+|requested)\)", last), last
    # it did not wait for the reboot: the host is still in maintenance, no later step was logged
    assert sim.host(host)["inMaintenance"]
    assert not any(step(x)[1] in ("wait-reconnect", "verify", "exit-maintenance") for x in seen + err.splitlines())


def _lock_folders(sim: Any) -> list[str]:
    """The lock folders of host leases and VM claims under the root folder."""
    si = sim.connect()
    try:
        names = [f.name for f in si.content.rootFolder.childEntity]
        return [n for n in names if n.startswith(("vgpuctl-lease-", "vgpuctl-claim-"))]
    finally:
        Disconnect(si)


def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(2400):  # a bound on polls, not on time: each is one small control read
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def _started(sim: Any, hold: int) -> list[str]:
    return list(next(h for h in sim.holds() if h["id"] == hold)["started"])


def test_second_ctrl_c_names_held_reconfigures_vcenter_has_not_answered(sim: Any, tmp_path: Path) -> None:
    hold = sim.hold("ReconfigVM_Task", count=2)  # gpusim has both requests, and answers neither until released
    proc = start_apply(sim, tmp_path, inventory(tmp_path, QUEUED), "--parallel", "2")
    try:
        _until(lambda: len(_started(sim, hold)) == 2 or proc.poll() is not None, "two reconfigures reach gpusim")
        proc.send_signal(signal.SIGINT)
        seen: list[str] = []
        read_until(proc, seen, lambda s: any("interrupted: no new step starts" in x for x in s))
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=300)
    finally:
        sim.release(hold)
    assert proc.returncode == 130, "".join(seen) + err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: interrupted again: exiting now; these vCenter tasks may still be running: ")
    assert "reconfigure q-01 (requested)" in last and "reconfigure q-02 (requested)" in last, last
    assert _lock_folders(sim) == []  # the run dropped its claims on its way out: a rerun need not wait for them
    # the line was right: both requests ran in vCenter after vgpuctl exited, nothing else did
    _until(lambda: vm_state(sim, "q-01")[0] == ["grid_a100-10c"] == vm_state(sim, "q-02")[0], "both ran")
    assert vm_state(sim, "q-03")[0] == [] and vm_state(sim, "q-04")[0] == []


def test_second_ctrl_c_names_a_held_host_step(sim: Any, tmp_path: Path) -> None:
    host = "esx-01.gpu.sim"
    hold = sim.hold("EnterMaintenanceMode_Task", host)
    path = tmp_path / "inv.yaml"
    path.write_text(f"apiVersion: vgpuctl/v1\nvcenter: {{datacenter: DC0}}\nhosts:\n  - name: {host}\n"
                    "    scheduler: equal-share\n")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env |= sim.vgpuctl_env(tmp_path / "state")
    proc = subprocess.Popen([sys.executable, "-m", "vgpuctl", "-o", "json", "apply", "-f", str(path), "--yes"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:  # -o json: no live display, the line comes from what was sent all the same
        _until(lambda: bool(_started(sim, hold)) or proc.poll() is not None, "enter maintenance reaches gpusim")
        proc.send_signal(signal.SIGINT)
        seen: list[str] = []
        read_until(proc, seen, lambda s: any("interrupted: no new step starts" in x for x in s))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        sim.release(hold)
    assert proc.returncode == 130, "".join(seen) + err
    assert _lock_folders(sim) == []  # the host's lease was dropped on the way out
    assert json.loads(out)["error"]["message"] == (
        f"interrupted again: exiting now; these vCenter tasks may still be running: enter-maintenance host {host} "
        "(requested)"
    )
    _until(lambda: sim.host(host)["inMaintenance"], "the held request ran after vgpuctl exited")
