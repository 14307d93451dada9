"""Two operators on one VM, against gpusim: every reconfigure is conditional on the VM's configuration version
(vCenter refuses it with ConcurrentAccess once the VM changed), and a run claims each VM it changes, so two runs
never interleave power-off, reconfigure and power-on on one VM; the run that loses fails that VM, naming it and
the run that has it, and the VM ends in exactly one inventory's state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim
from vimfind import find_object

from vgpuctl.inventory import load_inventory_text
from vgpuctl.planner import make_plan
from vgpuctl.vms.apply import apply_plan
from vgpuctl.vsphere.claims import VmClaims
from vgpuctl.vsphere.observe import observe
from vgpuctl.vsphere.session import ConnectionSettings, open_session
from vgpuctl.vsphere.workrecord import WAIT_POLL_S

pytestmark = pytest.mark.sim

FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "vms": [{"name": "web-01", "cpus": 4, "memory_mb": 8192, "firmware": "efi", "power_on": True},
            {"name": "off-01", "cpus": 4, "memory_mb": 8192, "firmware": "efi"}],
}  # fmt: skip

POLL_S = 0.05
WAIT_POLLS = 2400  # a bound on polls, not on time: each is one small control or SOAP read


def inventory(vm: str, profile: str) -> str:
    return f"apiVersion: vgpuctl/v1\nvcenter: {{datacenter: DC0}}\nvms:\n  - name: {vm}\n" \
           f"    vgpus: {{profile: {profile}, count: 1}}\n"  # fmt: skip


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _vgpus(vm: Any) -> list[str]:
    return [d.backing.vgpu for d in vm.config.hardware.device
            if isinstance(d, vim.vm.device.VirtualPCIPassthrough) and hasattr(d.backing, "vgpu")]  # fmt: skip


def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(WAIT_POLLS):
        if check():
            return
        time.sleep(POLL_S)
    raise AssertionError(f"never happened: {what}")


def _started(sim: Any, hold: int) -> list[str]:
    return list(next(h for h in sim.holds() if h["id"] == hold)["started"])


def _vgpuctl(sim: Any, work: Path, *args: str, text: str, ttl_s: float = 60) -> subprocess.Popen[str]:
    work.mkdir(exist_ok=True)
    path = work / "inv.yaml"
    path.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env |= sim.vgpuctl_env(esxi=False) | {"VGPUCTL_LEASE_TTL_S": str(ttl_s)}
    return subprocess.Popen([sys.executable, "-m", "vgpuctl", *args, "-f", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def _run(sim: Any, work: Path, *args: str, text: str, ttl_s: float = 60) -> tuple[int, str]:
    proc = _vgpuctl(sim, work, *args, text=text, ttl_s=ttl_s)
    out, _ = proc.communicate()
    return proc.returncode, out


def settings(sim: Any) -> ConnectionSettings:
    return ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)


def test_two_applies_on_one_vm_one_changes_it_the_other_names_that_run(sim: Any, si: Any, tmp_path: Path) -> None:
    hold = sim.hold("ReconfigVM_Task", "web-01", count=2)  # what the winner sends waits until the loser ended
    wanted = {"a": "grid_a100-20c", "b": "grid_a100-10c"}
    barrier = threading.Barrier(2)
    procs: dict[str, subprocess.Popen[str]] = {}

    def one(team: str) -> None:
        barrier.wait()
        procs[team] = _vgpuctl(sim, tmp_path / team, "apply", "--yes", text=inventory("web-01", wanted[team]))

    threads = [threading.Thread(target=one, args=(team,)) for team in wanted]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        _until(lambda: any(p.poll() is not None for p in procs.values()), "one apply ends")
    finally:
        sim.release(hold)
    loser = next(team for team, p in procs.items() if p.poll() is not None)
    winner = next(team for team in procs if team != loser)
    lost, won = procs[loser].communicate()[0], procs[winner].communicate()[0]
    assert (procs[loser].returncode, procs[winner].returncode) == (1, 0), lost + won
    assert "web-01: run " in lost and f"pid {procs[winner].pid} " in lost, lost  # the VM and the other run
    assert "is changing this VM; not touched" in lost and "failed: 1" not in won, lost
    assert len(_started(sim, hold)) == 1  # the loser never sent a reconfigure
    vm = find_object(si, "web-01")
    assert _vgpus(vm) == [wanted[winner]] and vm.runtime.powerState == "poweredOn"
    code, out = _run(sim, tmp_path / winner, "plan", "--detailed-exitcode", text=inventory("web-01", wanted[winner]))
    assert code == 0, out


def test_a_configuration_changed_since_the_plan_is_drift_and_untouched(sim: Any, si: Any) -> None:
    inv = load_inventory_text(inventory("off-01", "grid_a100-10c").replace("count: 1}", "count: 1}\n    power: 'off'"))
    with open_session(settings(sim)) as session:
        observed = observe(session)
        plan = make_plan(inv, observed)
        # not a vGPU: only its version
        WaitForTask(find_object(si, "off-01").ReconfigVM_Task(vim.vm.ConfigSpec(numCPUs=6)))
        result = apply_plan(session, plan, observed)
    (outcome,) = result.vms
    assert outcome.status == "failed" and outcome.fault_type == "DriftError", outcome
    assert "its configuration changed" in outcome.message and "not touched, plan again" in outcome.message
    vm = find_object(si, "off-01")
    assert _vgpus(vm) == [] and vm.config.hardware.numCPU == 6


def test_a_reconfigure_is_refused_once_the_vm_changed_meanwhile(sim: Any, si: Any) -> None:
    inv = load_inventory_text(inventory("off-01", "grid_a100-10c").replace("count: 1}", "count: 1}\n    power: 'off'"))
    hold = sim.hold("ReconfigVM_Task", "off-01")  # only the run's reconfigure: the one below is not held
    box: dict[str, Any] = {}
    with open_session(settings(sim)) as session:
        observed = observe(session)
        plan = make_plan(inv, observed)
        worker = threading.Thread(target=lambda: box.update(result=apply_plan(session, plan, observed)))
        worker.start()
        try:
            _until(lambda: bool(_started(sim, hold)), "the run's reconfigure reaches gpusim")
            WaitForTask(find_object(si, "off-01").ReconfigVM_Task(vim.vm.ConfigSpec(numCPUs=6)))
        finally:
            sim.release(hold)
            worker.join()
    (outcome,) = box["result"].vms
    assert outcome.status == "failed" and outcome.fault_type == "DriftError", outcome
    assert "was changed by something else while this run worked on it" in outcome.message
    assert "ConcurrentAccess" not in outcome.fault_type and "changed by another operation" in outcome.message
    vm = find_object(si, "off-01")
    assert _vgpus(vm) == [] and vm.config.hardware.numCPU == 6  # only the other change landed


def test_a_killed_runs_claim_does_not_hold_up_the_rerun_on_its_machine(sim: Any, si: Any, tmp_path: Path) -> None:
    text = inventory("web-01", "grid_a100-20c")
    hold = sim.hold("ReconfigVM_Task", "web-01")
    proc = _vgpuctl(sim, tmp_path / "op", "apply", "--yes", text=text)  # a time to live of a minute
    try:
        _until(lambda: bool(_started(sim, hold)) or proc.poll() is not None, "the reconfigure reaches gpusim")
        assert proc.poll() is None, proc.communicate()[0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        sim.release(hold)
    code, out = _run(sim, tmp_path / "op", "apply", "--yes", text=text)  # its process is gone: taken over at once
    assert code == 0, out
    vm = find_object(si, "web-01")
    assert _vgpus(vm) == ["grid_a100-20c"] and vm.runtime.powerState == "poweredOn"
    assert _run(sim, tmp_path / "op", "plan", "--detailed-exitcode", text=text)[0] == 0


ELSEWHERE_TTL_S = 8


def _claim_from_elsewhere(si: Any, name: str) -> None:
    """What a run on another machine leaves while it changes the VM: the lock folder and its description."""
    vm = find_object(si, name)
    folder = si.content.rootFolder.CreateFolder(f"vgpuctl-claim-{vm._moId}")
    cfm = si.content.customFieldsManager
    key = next((f.key for f in cfm.field or [] if f.name == "vgpuctl.claim"), None)
    if key is None:
        key = cfm.AddCustomFieldDef(name="vgpuctl.claim", moType=vim.VirtualMachine).key
    now = si.CurrentTime().timestamp()
    info = {"run": "far0ff", "holder": "ops@far pid 9", "since": now, "renewed": now, "ttl_s": ELSEWHERE_TTL_S,
            "folder": folder._moId, "pid": 9, "machine": "another-boot/1"}  # fmt: skip
    cfm.SetField(entity=vm, key=key, value=json.dumps(info))


def test_a_claim_of_a_run_elsewhere_holds_the_vm_until_it_expires(sim: Any, si: Any, tmp_path: Path) -> None:
    text = inventory("web-01", "grid_a100-20c")
    _claim_from_elsewhere(si, "web-01")
    code, out = _run(sim, tmp_path / "op", "apply", "--yes", text=text)
    assert code == 1, out
    assert "web-01: run far0ff by ops@far pid 9 since " in out and "is changing this VM; not touched" in out, out
    assert "if that run is gone, its claim expires at " in out
    assert _vgpus(find_object(si, "web-01")) == []
    time.sleep(ELSEWHERE_TTL_S)  # nobody renews it
    code, out = _run(sim, tmp_path / "op", "apply", "--yes", text=text)
    assert code == 0, out
    assert _vgpus(find_object(si, "web-01")) == ["grid_a100-20c"]


def test_lock_timeout_waits_for_the_run_that_has_the_vm_with_a_progress_line(sim: Any, si: Any, tmp_path: Path) -> None:
    """B waits for the VM A has, saying so; A's reconfigure fails and leaves the VM as it was, so B's plan still
    holds and B applies it once it has the VM."""
    hold = sim.hold("ReconfigVM_Task", "off-01")
    first = _vgpuctl(sim, tmp_path / "a", "apply", "--yes", text=inventory("off-01", "grid_a100-20c"))
    try:
        _until(lambda: bool(_started(sim, hold)) or first.poll() is not None, "A's reconfigure reaches gpusim")
        second = _vgpuctl(sim, tmp_path / "b", "--lock-timeout", "5m", "apply", "--yes",
                          text=inventory("off-01", "grid_a100-10c"))  # fmt: skip
        assert second.stdout is not None
        seen = []
        for line in second.stdout:  # progress lines, then the summary
            seen.append(line)
            if "off-01: waiting for run " in line:
                break
        assert any(f"pid {first.pid}" in line for line in seen), "".join(seen)
        time.sleep(2.5 * WAIT_POLL_S)  # two more of its polls: still one line for the one run that has the VM
        sim.arm_fault("off-01", "ReconfigVM_Task", "GenericVmConfigFault", message="device refused")
    finally:
        sim.release(hold)
    lost, won = first.communicate()[0], "".join(seen) + second.communicate()[0]
    assert first.returncode == 1 and "device refused" in lost, lost
    assert second.returncode == 0, won
    assert won.count("off-01: waiting for run ") == 1, won
    vm = find_object(si, "off-01")
    assert _vgpus(vm) == ["grid_a100-10c"] and vm.runtime.powerState == "poweredOn"


def test_a_claim_taken_after_waiting_names_the_run_that_let_go_meanwhile(sim: Any, si: Any) -> None:
    """A run that finds the VM's lock folder still undescribed waits for its creator; when that run describes it,
    changes the VM and lets go meanwhile, the claim taken afterwards knows it as the run that changed the VM last
    (read once the folder is its own, not before it waited)."""
    vm = find_object(si, "web-01")
    folder = si.content.rootFolder.CreateFolder(f"vgpuctl-claim-{vm._moId}")  # created, not yet described
    with open_session(settings(sim)) as session:
        claims = VmClaims(session, "late01")
        taker = threading.Thread(target=claims.claim, args=("web-01", vm._moId))
        taker.start()
        time.sleep(1.0)  # it sees the undescribed folder and waits for its creator
        cfm = si.content.customFieldsManager
        key = next((f.key for f in cfm.field or [] if f.name == "vgpuctl.claim"), None)
        if key is None:
            key = cfm.AddCustomFieldDef(name="vgpuctl.claim", moType=vim.VirtualMachine).key
        now = si.CurrentTime().timestamp()
        released = {"run": "first1", "holder": "ops@here pid 1", "since": now, "renewed": now, "ttl_s": 60,
                    "folder": "", "pid": 0, "machine": ""}  # fmt: skip
        cfm.SetField(entity=vm, key=key, value=json.dumps(released))  # the first run let go: its description,
        WaitForTask(folder.Destroy_Task())  # then its folder
        taker.join(timeout=120)
        assert not taker.is_alive()
        assert claims.held() == ["web-01"]
        assert claims.last_run(vm._moId).startswith("run first1 by ops@here pid 1 until ")
        claims.release_all()
