"""Types of one size on one equal-size GPU, as the host's driver says (nvidia-smi -q, vGPU Device Capability,
Heterogeneous Time-Slice Profiles) where its ESXi shell is read: gpusim's farm option `single_type_driver` makes a
host's driver say Not Supported, and then the plan refuses a second type beside the first on that host only,
as gpusim (vCenter) refuses it at power-on; the other host, whose driver runs both, takes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from planout import refused
from pyVim.connect import Disconnect
from pyVmomi import vim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

SINGLE, MULTI = "esx-01.gpu.sim", "esx-02.gpu.sim"
VM = {"cpus": 4, "memory_mb": 8192, "firmware": "efi", "memory_locked": True}
FARM = {
    "datacenter": "DC0",
    "clusters": [
        {"name": "Single", "hosts": 1, "gpus_per_host": 1, "model": "L40S", "graphics_type": "sharedDirect",
         "vgpu_mode": "sameSize", "single_type_driver": True},
        {"name": "Multi", "hosts": 1, "gpus_per_host": 1, "model": "L40S", "graphics_type": "sharedDirect",
         "vgpu_mode": "sameSize"},
    ],
    "vms": [
        {"name": "q-1", "host": SINGLE, "vgpus": ["grid_l40s-24q"], "power_on": True, **VM},
        {"name": "q-2", "host": MULTI, "vgpus": ["grid_l40s-24q"], "power_on": True, **VM},
        {"name": "c-1", "host": SINGLE, "vgpus": ["grid_l40s-24c"], **VM},
        {"name": "c-2", "host": MULTI, "vgpus": ["grid_l40s-24c"], **VM},
    ],
}  # fmt: skip

INVENTORY = """\
apiVersion: vgpuctl/v1
hosts:
  - cluster: Single
  - cluster: Multi
vms:
  - {name: c-1, cpus: 4, memory_gb: 8, vgpus: {profile: grid_l40s-24c}, power: restart}
  - {name: c-2, cpus: 4, memory_gb: 8, vgpus: {profile: grid_l40s-24c}, power: restart}
"""


def _power_on(sim: Any, name: str) -> Any:
    from pyVim.task import WaitForTask

    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        vm = next(v for v in view.view if v.name == name)
        view.Destroy()
        try:
            WaitForTask(vm.PowerOnVM_Task())
        except vim.fault.InsufficientGraphicsResourcesFault as fault:
            return fault
        return None
    finally:
        Disconnect(si)


def test_the_drivers_word_decides_where_two_types_of_one_size_share_a_gpu(
    gpusim_factory: Any, tmp_path: Path
) -> None:
    sim = gpusim_factory(FARM)
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    env = sim.vgpuctl_env(tmp_path / "state")
    plan = CliRunner().invoke(app, ["plan", "-f", str(path)], env=env)
    problems = refused(plan)
    assert [p for p in problems if "the host's driver runs one type per GPU" in p], problems
    assert all("c-1" in p for p in problems), problems  # c-2's host's driver runs both types

    # vCenter agrees: the single-type host refuses the second type at power-on, the other host takes it
    assert isinstance(_power_on(sim, "c-1"), vim.fault.InsufficientGraphicsResourcesFault)
    assert _power_on(sim, "c-2") is None
