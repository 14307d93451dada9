"""A clone is claimed from before its clone to its power-on, against gpusim. Between a clone's reconfigure and its
power-on the run waits for its turn on the host (the VMs ranked before it power on first); gpusim holds that gap
open by holding the host's power-on queue (the VM ahead in it), while everything else goes on:

- a second run applying another inventory to the same name in the gap is refused (the clone's claim, naming the
  run that has it), round after round (the soak), and each VM ends in exactly one inventory's state, read from
  gpusim's own state;
- something that is no vgpuctl run changing the clone in the gap (its changeVersion moves) keeps the run from
  powering it on, a change landing between the reconfigure and the run's read after it too; and from removing it
  when its power-on finds no room: a typed outcome, ChangedMeanwhile.

ROUNDS rounds, bounded by rounds (no clock): a few seconds a round on two shared cores.
"""

from __future__ import annotations

import json
import os
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

ROUNDS = 20
HOST = "esx-01.gpu.sim"
TEMPLATE = "ubuntu-22.04-ml"
FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "templates": [{"name": TEMPLATE, "cpus": 8, "memory_mb": 16384, "firmware": "efi"}],
}  # fmt: skip
POLL_S = 0.05
WAIT_POLLS = 2400  # a bound on polls, not on time: each is one small control or SOAP read

# what each inventory asks of a VM: (vGPU profile, vCPUs)
A_LEAD = ("grid_a100-20c", 2)  # the larger vGPU: first in the host's power-on queue
A_CLONE = ("grid_a100-10c", 2)
B_CLONE = ("grid_a100-8c", 4)


def _entry(name: str, wanted: tuple[str, int]) -> str:
    profile, cpus = wanted
    return (f"  - name: {name}\n    template: {TEMPLATE}\n    cluster: GPU-Cluster\n    cpus: {cpus}\n"
            f"    vgpus: {{profile: {profile}, count: 1}}\n")  # fmt: skip


def _inventory(*entries: str) -> str:
    return "apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms:\n" + "".join(entries)


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _vgpuctl(sim: Any, work: Path, text: str) -> subprocess.Popen[str]:
    work.mkdir(parents=True, exist_ok=True)
    path = work / "inv.yaml"
    path.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env |= sim.vgpuctl_env(esxi=False)
    return subprocess.Popen([sys.executable, "-m", "vgpuctl", "-o", "json", "apply", "--yes", "-f", str(path)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _finish(proc: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str]:
    out, err = proc.communicate()
    try:
        document = json.loads(out)
    except ValueError:
        document = {}
    return proc.returncode, {o["vm"]: o for o in document.get("vms", [])}, out + err


def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(WAIT_POLLS):
        if check():
            return
        time.sleep(POLL_S)
    raise AssertionError(f"never happened: {what}")


def _profiles(vm: Any) -> list[str]:
    return [d.backing.vgpu for d in vm.config.hardware.device
            if isinstance(d, vim.vm.device.VirtualPCIPassthrough) and hasattr(d.backing, "vgpu")]  # fmt: skip


def _reconfigured(si: Any, name: str, profile: str) -> bool:
    vm = find_object(si, name)
    return vm is not None and _profiles(vm) == [profile]


def _waiting(sim: Any, hold: int) -> bool:
    return next(h for h in sim.holds() if h["id"] == hold)["waiting"] == 1


def _as_gpusim_has_it(sim: Any, si: Any, name: str) -> tuple[str, int, str] | None:
    """A VM as gpusim holds it: the profile placed for it on a GPU (running) or configured (off), its vCPUs
    (through the API) and its power state from gpusim's state; None when it does not exist."""
    state = sim.state()["vms"]
    entry = next(((moid, v) for moid, v in state.items() if v["name"] == name), None)
    if entry is None:
        return None
    moid, vm_state = entry
    placed = [a["profile"] for a in sim.assignments() if a["vm"] == moid]
    vm = find_object(si, name)
    assert vm is not None
    profiles = placed if vm_state["power"] == "poweredOn" else _profiles(vm)
    return (profiles[0] if len(profiles) == 1 else ",".join(profiles)), vm.config.hardware.numCPU, vm_state["power"]


def _remove(si: Any, *names: str) -> None:
    for name in names:
        vm = find_object(si, name)
        if vm is None:
            continue
        if vm.runtime.powerState == "poweredOn":
            WaitForTask(vm.PowerOffVM_Task())
        WaitForTask(vm.Destroy_Task())


def test_a_second_inventory_in_the_gap_before_the_clone_powers_on_is_refused_twenty_rounds(
    sim: Any, si: Any, tmp_path: Path
) -> None:
    for n in range(ROUNDS):
        _round(sim, si, tmp_path / f"round-{n:02d}", f"lead-{n:02d}", f"x-{n:02d}")


def _round(sim: Any, si: Any, work: Path, lead: str, clone: str) -> None:
    """One round: A clones `lead` and `clone`; B applies its inventory to `clone` in the gap before its power-on;
    the VMs end in A's state alone, and B says it was refused, naming A's run. Then both VMs are removed."""
    hold = sim.hold_queue(HOST)  # the host's next power-on: the lead's, so the clone waits for its turn
    first = _vgpuctl(sim, work / "a", _inventory(_entry(lead, A_LEAD), _entry(clone, A_CLONE)))
    try:
        _until(lambda: _waiting(sim, hold) or first.poll() is not None, "the lead's power-on reaches gpusim")
        _until(lambda: _reconfigured(si, clone, A_CLONE[0]) or first.poll() is not None,
               "the clone is reconfigured and waits for its turn")  # fmt: skip
        assert first.poll() is None, _finish(first)
        second = _vgpuctl(sim, work / "b", _inventory(_entry(clone, B_CLONE)))
        code_b, outcomes_b, out_b = _finish(second)  # all of it in the gap: the queue is held meanwhile
    finally:
        sim.release(hold)
    code_a, outcomes_a, out_a = _finish(first)
    assert code_a == 0, (clone, out_a)
    assert code_b == 1 and outcomes_b[clone]["status"] == "failed", (clone, out_b)
    message = outcomes_b[clone]["message"]
    assert message.startswith(f"{clone}: run ") and "is changing this VM; not touched" in message, (clone, out_b)
    assert outcomes_a[clone]["status"] == "changed" and "power-on" in outcomes_a[clone]["steps"], (clone, out_a)
    wanted = {"a": {lead: A_LEAD, clone: A_CLONE}, "b": {clone: B_CLONE}}
    for name in (lead, clone):
        profile, cpus, power = _as_gpusim_has_it(sim, si, name) or ("", 0, "")
        holders = [team for team, vms in wanted.items() if vms.get(name) == (profile, cpus)]
        assert holders == ["a"] and power == "poweredOn", (name, profile, cpus, power, out_a, out_b)
    _remove(si, lead, clone)


def test_a_clone_changed_in_the_gap_is_not_powered_on(sim: Any, si: Any, tmp_path: Path) -> None:
    hold = sim.hold_queue(HOST)
    run = _vgpuctl(sim, tmp_path / "a", _inventory(_entry("lead", A_LEAD), _entry("x", A_CLONE)))
    try:
        _until(lambda: _waiting(sim, hold) or run.poll() is not None, "the lead's power-on reaches gpusim")
        _until(lambda: _reconfigured(si, "x", A_CLONE[0]) or run.poll() is not None, "the clone waits for its turn")
        vm = find_object(si, "x")
        assert vm is not None and run.poll() is None
        WaitForTask(vm.ReconfigVM_Task(vim.vm.ConfigSpec(numCPUs=6)))  # no vgpuctl run: no claim stops it
    finally:
        sim.release(hold)
    code, outcomes, out = _finish(run)
    assert code == 1, out
    assert outcomes["x"]["status"] == "failed" and outcomes["x"]["fault_type"] == "ChangedMeanwhile", out
    assert "changed by something else since this run's last step on it" in outcomes["x"]["message"]
    assert "not powered on" in outcomes["x"]["message"] and "power-on" not in outcomes["x"]["steps"]
    assert _as_gpusim_has_it(sim, si, "x") == (A_CLONE[0], 6, "poweredOff")  # the other change stands, off
    assert outcomes["lead"]["status"] == "changed"


def test_a_change_landing_between_the_reconfigure_and_its_read_is_not_taken_for_this_runs(
    sim: Any, si: Any, tmp_path: Path
) -> None:
    """The read after the reconfigure gives the version the power-on is conditional on: a change gpusim makes
    right after the reconfigure's own work, before the task reports, moves that version too, so only what the VM
    shows tells it apart from this run's."""
    hold = sim.hold_queue(HOST, method="ReconfigVM_Task")  # the clone's reconfigure: the clone exists by then
    run = _vgpuctl(sim, tmp_path / "a", _inventory(_entry("x", A_CLONE)))
    try:
        _until(lambda: _waiting(sim, hold) or run.poll() is not None, "the clone's reconfigure reaches gpusim")
        assert run.poll() is None
        sim.followup("x", 6)
    finally:
        sim.release(hold)
    code, outcomes, out = _finish(run)
    assert code == 1, out
    assert outcomes["x"]["status"] == "failed" and outcomes["x"]["fault_type"] == "ChangedMeanwhile", out
    message = outcomes["x"]["message"]
    assert "changed by something else since this run's last step on it" in message, out
    assert "numCPUs is 6, it was 2 before this run's last step" in message and "not powered on" in message, out
    assert outcomes["x"]["steps"] == ["clone", "reconfigure"], out
    assert _as_gpusim_has_it(sim, si, "x") == (A_CLONE[0], 6, "poweredOff")  # the other change stands, off


def test_a_change_landing_between_the_clone_and_its_read_stops_the_reconfigure(
    sim: Any, si: Any, tmp_path: Path
) -> None:
    sim.followup(TEMPLATE, 6, method="CloneVM_Task")  # the new VM's vCPUs, after the clone's own work
    code, outcomes, out = _finish(_vgpuctl(sim, tmp_path / "a", _inventory(_entry("x", A_CLONE))))
    assert code == 1, out
    assert outcomes["x"]["fault_type"] == "ChangedMeanwhile", out
    assert "(numCPUs is 6, this run set 2); not reconfigured, plan again" in outcomes["x"]["message"], out
    assert outcomes["x"]["steps"] == ["clone"], out
    assert _as_gpusim_has_it(sim, si, "x") == ("", 6, "poweredOff")  # no vGPU: the reconfigure was not made


def test_a_clone_changed_before_its_failed_power_on_is_not_removed(sim: Any, si: Any, tmp_path: Path) -> None:
    hold = sim.hold_queue(HOST)  # the clone's own power-on: after the run's check, before vCenter's answer
    run = _vgpuctl(sim, tmp_path / "a", _inventory(_entry("x", A_CLONE)))
    try:
        _until(lambda: _waiting(sim, hold) or run.poll() is not None, "the clone's power-on reaches gpusim")
        vm = find_object(si, "x")
        assert vm is not None and run.poll() is None
        sim.arm_fault("x", "PowerOnVM_Task", "InsufficientResourcesFault", message="no room")
        WaitForTask(vm.ReconfigVM_Task(vim.vm.ConfigSpec(numCPUs=6)))
    finally:
        sim.release(hold)
    code, outcomes, out = _finish(run)
    assert code == 1, out
    assert outcomes["x"]["fault_type"] == "ChangedMeanwhile", out
    assert "not removed" in outcomes["x"]["message"] and "no room" in outcomes["x"]["message"], out
    assert "remove clone" not in outcomes["x"]["steps"]
    assert _as_gpusim_has_it(sim, si, "x") == (A_CLONE[0], 6, "poweredOff")


def test_a_clone_that_finds_no_room_is_removed_and_its_claim_goes(sim: Any, si: Any, tmp_path: Path) -> None:
    hold = sim.hold_queue(HOST)  # x does not exist before the run clones it: its fault is armed once it does
    run = _vgpuctl(sim, tmp_path / "a", _inventory(_entry("x", A_CLONE)))
    try:
        _until(lambda: _waiting(sim, hold) or run.poll() is not None, "the clone's power-on reaches gpusim")
        sim.arm_fault("x", "PowerOnVM_Task", "InsufficientResourcesFault", message="no room")
    finally:
        sim.release(hold)
    code, outcomes, out = _finish(run)
    assert code == 1 and "remove clone" in outcomes["x"]["steps"], out
    assert find_object(si, "x") is None
    assert not [f for f in sim.state()["folders"] if " vgpuctl-" in f]  # the clone's claim went with it
