"""A VM whose re-plan after the host changes fails fails alone: the other VMs of the apply are still created.

The test renames one VM's template while the host it changes reboots (a gpusim delay on RebootHost_Task keeps
the host in maintenance long enough), so the VM plan made after the host changes cannot clone that VM.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVmomi import vim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

H1 = "esx-01.gpu.sim"
FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "pairs",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "templates": [{"name": "tmpl-a", "cpus": 2, "memory_mb": 4096, "firmware": "efi"},
                  {"name": "tmpl-b", "cpus": 2, "memory_mb": 4096, "firmware": "efi"}],
}  # fmt: skip
INVENTORY = f"""\
apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
hosts:
  - name: {H1}
    scheduler: equal-share
vms:
  - name: ok-{{01..03}}
    template: tmpl-a
    cluster: GPU-Cluster
    vgpus: {{profile: grid_a100-10c, count: 1}}
    power: 'off'
  - name: late-01
    template: tmpl-b
    cluster: GPU-Cluster
    vgpus: {{profile: grid_a100-10c, count: 1}}
    power: 'off'
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


def vgpuctl(sim: Any, tmp_path: Path, *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=sim.vgpuctl_env(tmp_path / "state"))


def vm_names(sim: Any) -> set[str]:
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        return {o.name for o in view.view}
    finally:
        Disconnect(si)


def rename_when_in_maintenance(sim: Any, old: str, new: str, done: threading.Event, stop: threading.Event) -> None:
    while not sim.host(H1)["inMaintenance"]:
        if stop.is_set():  # the apply ended without putting the host in maintenance: the test fails below
            return
        time.sleep(0.05)
    try:
        sim.rename_vm(old, new)
    finally:
        done.set()


def test_a_vm_whose_replan_fails_fails_alone(sim: Any, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    sim.delay(H1, "RebootHost_Task", 2.0)
    renamed, stop = threading.Event(), threading.Event()
    watcher = threading.Thread(target=rename_when_in_maintenance, args=(sim, "tmpl-b", "tmpl-b-gone", renamed, stop))
    watcher.start()
    applied = vgpuctl(sim, tmp_path, "apply", "-f", str(inv), "--yes")
    stop.set()
    watcher.join()
    assert renamed.is_set()
    assert applied.exit_code == 1, applied.output
    out = applied.stdout
    assert "Apply incomplete: 3 changed, 1 failed, 0 skipped, 0 not started, 0 unchanged." in out
    assert "failed: late-01: PlanError: plan after the host changes: template 'tmpl-b' not found" in out
    assert {"ok-01", "ok-02", "ok-03"} <= vm_names(sim) and "late-01" not in vm_names(sim)
    assert applied.stderr.strip().splitlines()[-1] == "error: apply failed for 1 of 4 VM(s): late-01"
