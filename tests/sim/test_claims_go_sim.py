"""Claims go, against gpusim: a claim's lock folder is removed on every way out, a destroyed VM's too (its
description is released before the destroy, nothing writes to the VM after it), and the claims of runs that are
gone (kill -9) are collected by the next run that touches the VM or its host, by the rules of leases."""

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
from pyVmomi import vim, vmodl
from vimfind import find_object

from vgpuctl.vsphere.claims import VmClaims
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.sim

TEMPLATE = "ubuntu-22.04-ml"
FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "templates": [{"name": TEMPLATE, "cpus": 8, "memory_mb": 16384, "firmware": "efi"}],
    "vms": [{"name": "web-01", "cpus": 4, "memory_mb": 8192, "firmware": "efi", "power_on": True},
            {"name": "off-01", "cpus": 4, "memory_mb": 8192, "firmware": "efi"}],
}  # fmt: skip
POLL_S = 0.05
WAIT_POLLS = 2400


def inventory(vm: str, profile: str, extra: str = "") -> str:
    return (f"apiVersion: vgpuctl/v1\nvcenter: {{datacenter: DC0}}\nvms:\n  - name: {vm}\n"
            f"    vgpus: {{profile: {profile}, count: 1}}\n{extra}")  # fmt: skip


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _lock_folders(sim: Any) -> list[str]:
    """The names of the lock folders gpusim holds (its state: `moid name parent`)."""
    return sorted(f.split(" ")[1] for f in sim.state()["folders"] if f.split(" ")[1].startswith("vgpuctl-"))


def _vgpuctl(sim: Any, work: Path, *args: str, text: str) -> subprocess.Popen[str]:
    work.mkdir(parents=True, exist_ok=True)
    path = work / "inv.yaml"
    path.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env |= sim.vgpuctl_env(esxi=False)
    return subprocess.Popen([sys.executable, "-m", "vgpuctl", *args, "-f", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def _run(sim: Any, work: Path, *args: str, text: str) -> tuple[int, str]:
    proc = _vgpuctl(sim, work, *args, text=text)
    out, _ = proc.communicate()
    return proc.returncode, out


def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(WAIT_POLLS):
        if check():
            return
        time.sleep(POLL_S)
    raise AssertionError(f"never happened: {what}")


def _killed_while_held(sim: Any, work: Path, method: str, obj: str, text: str) -> None:
    """Start `vgpuctl apply`, kill -9 it once its `method` call reaches gpusim (its claims held)."""
    hold = sim.hold(method, obj)
    proc = _vgpuctl(sim, work, "apply", "--yes", text=text)
    try:
        _until(lambda: bool(next(h for h in sim.holds() if h["id"] == hold)["started"]) or proc.poll() is not None,
               f"{method} reaches gpusim")  # fmt: skip
        assert proc.poll() is None, proc.communicate()[0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        sim.release(hold)


def test_destroying_a_running_vm_leaves_no_claim(sim: Any, si: Any, tmp_path: Path) -> None:
    text = "apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms:\n  - name: web-01\n    state: absent\n"
    code, out = _run(sim, tmp_path / "op", "apply", "--yes", "--allow-destroy", text=text)
    assert code == 0, out
    assert find_object(si, "web-01") is None
    assert _lock_folders(sim) == [], out
    assert "could not" not in out, out  # nothing wrote to the destroyed VM


def test_a_vm_changed_between_its_power_off_and_the_destroy_is_not_removed(sim: Any, si: Any, tmp_path: Path) -> None:
    """The destroy is conditional on the version read after the power-off: a change landing before that read
    (gpusim makes it after the power-off's own work, before the task reports) shows in the VM's settings."""
    sim.followup("web-01", 6, method="PowerOffVM_Task")
    text = "apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms:\n  - name: web-01\n    state: absent\n"
    code, out = _run(sim, tmp_path / "op", "apply", "--yes", "--allow-destroy", text=text)
    assert code == 1, out
    assert "web-01 was changed by something else since this run's last step on it" in out, out
    assert "numCPUs is 6, it was 4 before this run's last step" in out and "not removed" in out, out
    vm = find_object(si, "web-01")
    assert vm is not None and vm.runtime.powerState == "poweredOff" and vm.config.hardware.numCPU == 6
    assert _lock_folders(sim) == [], out


def test_a_claim_whose_vm_was_destroyed_underneath_is_removed_on_release(sim: Any, si: Any) -> None:
    vm = find_object(si, "web-01")
    settings = ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)
    with open_session(settings) as session:
        claims = VmClaims(session, "gone01")
        claims.claim("web-01", vm._moId)
        assert _lock_folders(sim) == [f"vgpuctl-claim-{vm._moId}"]
        WaitForTask(vm.PowerOffVM_Task())
        WaitForTask(vm.Destroy_Task())  # by someone else, while this run holds its claim
        cfm = si.content.customFieldsManager
        key = next(f.key for f in cfm.field if f.name == "vgpuctl.claim")
        with pytest.raises(vmodl.fault.ManagedObjectNotFound):  # vCenter's answer, not an internal error
            cfm.SetField(entity=vm, key=key, value="")
        claims.release_all()
    assert _lock_folders(sim) == []


def test_a_killed_runs_claim_is_collected_by_the_next_run_on_its_host(sim: Any, si: Any, tmp_path: Path) -> None:
    web = find_object(si, "web-01")._moId
    _killed_while_held(sim, tmp_path / "a", "ReconfigVM_Task", "web-01", inventory("web-01", "grid_a100-20c"))
    assert _lock_folders(sim) == [f"vgpuctl-claim-{web}"]
    code, out = _run(sim, tmp_path / "b", "apply", "--yes", text=inventory("off-01", "grid_a100-10c"))
    assert code == 0, out  # another VM on the same host: the dead run's claim goes
    assert _lock_folders(sim) == []


def test_a_killed_cloning_runs_claim_is_collected_by_the_next_run_on_the_host(
    sim: Any, si: Any, tmp_path: Path
) -> None:
    # the clone alone: a claim of another VM could be caught half made (its folder not yet described), which
    # only a run touching that VM or its host collects
    clone = (f"apiVersion: vgpuctl/v1\nvcenter: {{datacenter: DC0}}\nvms:\n  - name: new-01\n"
             f"    template: {TEMPLATE}\n    cluster: GPU-Cluster\n    vgpus: {{profile: grid_a100-10c, count: 1}}\n")
    _killed_while_held(sim, tmp_path / "a", "CloneVM_Task", "", clone)
    assert [f for f in _lock_folders(sim) if f.startswith("vgpuctl-clone-")], _lock_folders(sim)
    code, out = _run(sim, tmp_path / "b", "apply", "--yes", text=inventory("web-01", "grid_a100-20c"))
    assert code == 0, out
    assert _lock_folders(sim) == []


def test_the_claim_of_a_vm_that_is_gone_is_collected(sim: Any, si: Any, tmp_path: Path) -> None:
    vm = find_object(si, "off-01")
    folder = si.content.rootFolder.CreateFolder(f"vgpuctl-claim-{vm._moId}")  # a run elsewhere, then the VM went
    cfm = si.content.customFieldsManager
    key = cfm.AddCustomFieldDef(name="vgpuctl.claim", moType=vim.VirtualMachine).key
    now = si.CurrentTime().timestamp()
    info = {"run": "far0ff", "holder": "ops@far pid 9", "since": now, "renewed": now, "ttl_s": 3600,
            "folder": folder._moId, "pid": 9, "machine": "another-boot/1"}  # fmt: skip
    cfm.SetField(entity=vm, key=key, value=json.dumps(info))
    WaitForTask(vm.Destroy_Task())
    code, out = _run(sim, tmp_path / "b", "apply", "--yes", text=inventory("web-01", "grid_a100-20c"))
    assert code == 0, out
    assert _lock_folders(sim) == []


def test_a_live_claim_elsewhere_is_not_collected(sim: Any, si: Any, tmp_path: Path) -> None:
    vm = find_object(si, "web-01")
    folder = si.content.rootFolder.CreateFolder(f"vgpuctl-claim-{vm._moId}")
    cfm = si.content.customFieldsManager
    key = cfm.AddCustomFieldDef(name="vgpuctl.claim", moType=vim.VirtualMachine).key
    now = si.CurrentTime().timestamp()
    info = {"run": "far0ff", "holder": "ops@far pid 9", "since": now, "renewed": now, "ttl_s": 3600,
            "folder": folder._moId, "pid": 9, "machine": "another-boot/1"}  # fmt: skip
    cfm.SetField(entity=vm, key=key, value=json.dumps(info))
    code, out = _run(sim, tmp_path / "b", "apply", "--yes", text=inventory("off-01", "grid_a100-10c"))
    assert code == 0, out  # same host: collection judged the claim live and kept it
    assert _lock_folders(sim) == [f"vgpuctl-claim-{vm._moId}"]
