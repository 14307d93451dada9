"""VM identity against gpusim: two VMs named inv-01, in the root folder and in folder teamB.

vgpuctl runs as a real process with the environment a user would export; what happened to each VM is read
with pyVmomi directly, by its MoRef, not through vgpuctl's reader.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from planout import shown_problems
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim

from vgpuctl.vsphere.observe import observe
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.sim

FARM = {
    "datacenter": "DC0",
    "clusters": [
        {
            "name": "GPU-Cluster",
            "hosts": 1,
            "gpus_per_host": 4,
            "model": "A100-40GB",
            "nvlink": "pairs",
            "graphics_type": "sharedDirect",
            "vgpu_mode": "sameSize",
        }
    ],
    "vms": [
        {"name": "inv-01", "cpus": 2, "memory_mb": 4096, "firmware": "efi"},
        {
            "name": "teamb-vm",
            "cpus": 8,
            "memory_mb": 8192,
            "firmware": "efi",
            "vgpus": ["grid_a100-20c", "grid_a100-20c"],
            "memory_locked": True,
            "power_on": True,
        },
    ],
}


@pytest.fixture
def sim(gpusim_factory: Any) -> Any:
    """The farm, with teamb-vm moved into a new folder teamB and renamed inv-01; returns (sim, moids)."""
    sim = gpusim_factory(FARM)
    si = sim.connect()
    try:
        content = si.RetrieveContent()
        dc = next(e for e in content.rootFolder.childEntity if e.name == "DC0")
        team_b = dc.vmFolder.CreateFolder("teamB")
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        vms = {v.name: v for v in view.view}
        WaitForTask(team_b.MoveIntoFolder_Task([vms["teamb-vm"]]))
        WaitForTask(vms["teamb-vm"].Rename_Task("inv-01"))
        sim.moids = {"root": vms["inv-01"]._moId, "teamB": vms["teamb-vm"]._moId}
    finally:
        Disconnect(si)
    return sim


def state(sim: Any, moid: str) -> tuple[str, str, int, list[str]]:
    """(folder name, power state, CPUs, vGPU profiles) of one VM, read by MoRef."""
    si = sim.connect()
    try:
        vm = vim.VirtualMachine(moid, si._stub)
        profiles = sorted(
            d.backing.vgpu
            for d in vm.config.hardware.device
            if isinstance(d, vim.vm.device.VirtualPCIPassthrough)
            and isinstance(d.backing, vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo)
        )
        return vm.parent.name, str(vm.runtime.powerState), vm.config.hardware.numCPU, profiles
    finally:
        Disconnect(si)


def vgpuctl(sim: Any, tmp_path: Path, inventory: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "inv.yaml"
    path.write_text("apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms:\n" + inventory)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    env.update(VGPUCTL_URL=sim.url, VGPUCTL_USERNAME=sim.username, VGPUCTL_PASSWORD=sim.password,
               VGPUCTL_INSECURE="1", VGPUCTL_STATE_DIR=str(tmp_path / "state"))
    return subprocess.run([sys.executable, "-m", "vgpuctl", *args, "-f", str(path)], capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL, check=False)


def errors(run: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in run.stderr.splitlines() if not line.startswith("warning: TLS")]


def test_observe_keeps_both_vms_in_one_bulk_read(sim: Any) -> None:
    settings = ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)
    with open_session(settings) as session:
        observed = observe(session)
    assert observed.same_name == {"inv-01": ["/inv-01", "/teamB/inv-01"]}
    root, team_b = observed.vms["/inv-01"], observed.vms["/teamB/inv-01"]
    assert (root.moid, root.folder) == (sim.moids["root"], None)
    assert (team_b.moid, team_b.folder, team_b.name) == (sim.moids["teamB"], "teamB", "inv-01")
    assert "inv-01" not in observed.vms  # the bare name never picks one of them
    held = [vm for g in observed.hosts["esx-01.gpu.sim"].gpus for vm in g.vms]
    assert held == ["/teamB/inv-01", "/teamB/inv-01"]
    assert observed.round_trips == 5  # the folder paths came from the same read (hosts and VMs: reads of their own)
    assert observed.warnings == []


def test_a_shared_name_without_folder_is_refused_and_nothing_is_touched(sim: Any, tmp_path: Path) -> None:
    before = {k: state(sim, m) for k, m in sim.moids.items()}
    entry = "  - {name: inv-01, cpus: 4, vgpus: {profile: grid_a100-40c}}\n"
    plan = vgpuctl(sim, tmp_path, entry, "plan")
    assert plan.returncode == 1, plan.stderr
    message = "vm inv-01: the name matches 2 VMs, in folders /, teamB: set 'folder' to the one meant (/ for the root)"
    assert errors(plan) == ["error: the plan has 1 problem (shown with it): nothing can be applied"]
    assert shown_problems(plan.stdout) == [message]
    applied = vgpuctl(sim, tmp_path, entry, "-o", "json", "apply", "--yes")
    assert applied.returncode == 1, applied.stderr
    details = json.loads(applied.stdout)["error"]["details"]
    assert [d["message"] for d in details] == [message]
    assert {k: state(sim, m) for k, m in sim.moids.items()} == before


def test_the_folder_picks_the_vm(sim: Any, tmp_path: Path) -> None:
    root_before = state(sim, sim.moids["root"])
    done = vgpuctl(sim, tmp_path, "  - {name: inv-01, folder: teamB, cpus: 4}\n", "apply", "--yes")
    assert done.returncode == 0, done.stderr
    assert state(sim, sim.moids["teamB"]) == ("teamB", "poweredOn", 4, ["grid_a100-20c", "grid_a100-20c"])
    assert state(sim, sim.moids["root"]) == root_before
    again = vgpuctl(sim, tmp_path, "  - {name: inv-01, folder: /, cpus: 6, power: 'off'}\n", "apply", "--yes")
    assert again.returncode == 0, again.stderr
    assert state(sim, sim.moids["root"]) == (root_before[0], "poweredOff", 6, [])
    assert state(sim, sim.moids["teamB"])[2] == 4


def test_observe_warnings_reach_plan_and_apply_output(sim: Any, tmp_path: Path) -> None:
    # teamB's VM with its two vGPUs in one NVLink device group; then its host's NVLink sets cannot be read
    entry = "  - {name: inv-01, folder: teamB, nvlink: required, vgpus: {profile: grid_a100-40c, count: 2}}\n"
    first = vgpuctl(sim, tmp_path, entry, "apply", "--yes")
    assert first.returncode == 0, first.stderr
    assert "Warning" not in first.stdout
    warning = "host esx-01.gpu.sim: NVLink sets not read (HostCommunication: link lost)"
    sim.arm_fault("GPU-Cluster", "QueryConfigTarget", fault="HostCommunication", message="link lost")
    plan = vgpuctl(sim, tmp_path, entry, "plan")
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines() == [f"Warning: {warning}", "No changes: the farm matches the inventory."]
    sim.arm_fault("GPU-Cluster", "QueryConfigTarget", fault="HostCommunication", message="link lost")
    applied = vgpuctl(sim, tmp_path, entry, "-o", "json", "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout)["plan"]["warnings"] == [warning]
    assert f"Warning: {warning}" in applied.stderr  # the plan shown before applying


def test_vm_commands_refuse_a_shared_name(sim: Any, tmp_path: Path) -> None:
    before = state(sim, sim.moids["teamB"])
    done = vgpuctl(sim, tmp_path, "  - {name: other}\n", "vm", "vgpu", "add", "inv-01", "--profile", "grid_a100-20c",
                   "--yes")
    assert done.returncode == 1
    assert errors(done) == [
        "error: VM 'inv-01' names 2 VMs, in folders /, teamB: change it through an inventory entry with 'folder'"
    ]
    assert state(sim, sim.moids["teamB"]) == before
