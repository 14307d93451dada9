"""Adoption that holds, against gpusim: an estate of vGPU VMs made by hand (memory reservation not locked, no
64-bit MMIO keys, BIOS firmware) exports as it is, with `keep` naming what NVIDIA requires that each VM lacks and a
comment saying so; plan on that file plans no change and warns per kept item; dropping an item from `keep` plans
exactly that change. VM removal: `state: absent` is shown as `-` with the VM's vGPUs and applied only with
--allow-destroy (or allow_destroy: true); a VM the inventory does not name is never touched."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from gpusim import Gpusim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

FARM = {
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB",
                  "graphics_type": "sharedDirect"}],
    "vms": [
        {"name": "hand-01", "host": "esx-01.gpu.sim", "memory_mb": 8192, "memory_locked": True,
         "vgpus": ["grid_a100-20c"], "power_on": True},  # running: locked memory, no 64-bit MMIO
        {"name": "hand-02", "host": "esx-02.gpu.sim", "memory_mb": 8192, "firmware": "bios",
         "vgpus": ["grid_a100-40c"]},  # off: unlocked, BIOS, no MMIO
        {"name": "hand-03", "host": "esx-02.gpu.sim", "memory_mb": 8192, "memory_locked": True,
         "vgpus": ["grid_a100-10c"]},
        {"name": "bystander", "host": "esx-02.gpu.sim", "memory_mb": 4096},
    ],
}


@pytest.fixture
def sim(gpusim_factory: Any) -> Gpusim:
    return gpusim_factory(FARM)


@pytest.fixture
def runner(sim: Gpusim, no_vgpuctl_env: None) -> CliRunner:
    return CliRunner(env={**sim.vgpuctl_env(esxi=False), "SSH_AUTH_SOCK": ""})


def test_export_of_hand_made_vms_plans_no_change(runner: CliRunner, tmp_path: Path) -> None:
    farm = tmp_path / "farm.yaml"
    assert runner.invoke(app, ["export", "--out", str(farm)]).exit_code == 0
    text = farm.read_text()
    entries = {m["name"]: m["body"] for m in re.finditer(r"  - name: (?P<name>\S+)\n(?P<body>(?:    .*\n)+)", text)}
    assert "    keep: [mmio]\n" in entries["hand-01"]
    assert "    keep: [mmio, memory-lock, efi]\n" in entries["hand-02"]
    assert "    keep: [mmio]\n" in entries["hand-03"]  # every C-series vGPU has a large BAR
    assert "lacks 64-bit MMIO, which NVIDIA requires for vGPU VMs" in text
    plan = runner.invoke(app, ["-o", "json", "plan", "-f", str(farm), "--detailed-exitcode"])
    assert plan.exit_code == 0, plan.output
    warnings = json.loads(plan.stdout)["warnings"]
    assert any(w.startswith("vm hand-01: keeps its 64-bit MMIO settings (keep: mmio)") for w in warnings)
    assert any(w.startswith("vm hand-02: keeps BIOS firmware (keep: efi)") for w in warnings)
    assert any(w.startswith("vm hand-02: keeps its memory reservation unlocked") for w in warnings)


def test_dropping_an_item_from_keep_plans_that_change(runner: CliRunner, tmp_path: Path) -> None:
    farm = tmp_path / "farm.yaml"
    assert runner.invoke(app, ["export", "--out", str(farm)]).exit_code == 0
    text = farm.read_text()
    text = text.replace("    keep: [mmio]\n    power: keep\n", "    power: restart\n", 1)
    farm.write_text(text)
    plan = runner.invoke(app, ["-o", "json", "plan", "-f", str(farm)])
    assert plan.exit_code == 0, plan.output
    (change,) = json.loads(plan.stdout)["vm_changes"]
    assert change["vm"] == "hand-01" and change["steps"] == ["power-off", "reconfigure", "power-on"]
    assert change["extra_config"] == {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "128"}


REMOVE = """\
apiVersion: vgpuctl/v1
vms:
  - name: hand-01
    state: absent
  - name: never-existed
    state: absent
"""


def test_removal_is_planned_as_minus_and_applied_only_when_allowed(sim: Gpusim, runner: CliRunner,
                                                                 tmp_path: Path) -> None:
    inventory = tmp_path / "remove.yaml"
    inventory.write_text(REMOVE)
    plan = runner.invoke(app, ["plan", "-f", str(inventory)])
    assert plan.exit_code == 0, plan.output
    lines = plan.stdout.splitlines()
    assert "- vm hand-01  (power off -> destroy)" in lines
    assert any(line.strip().startswith("- vgpu grid_a100-20c") for line in lines)
    assert "never-existed" not in plan.stdout  # nothing to remove
    assert "apply does so only with --allow-destroy" in plan.stdout
    refused = runner.invoke(app, ["apply", "-f", str(inventory), "--yes"])
    assert refused.exit_code == 1
    assert "rerun apply with --allow-destroy" in refused.output
    assert any(a["vmName"] == "hand-01" for a in sim.assignments())  # nothing changed
    done = runner.invoke(app, ["-o", "json", "apply", "-f", str(inventory), "--yes", "--allow-destroy"])
    assert done.exit_code == 0, done.output
    outcome = {o["vm"]: o for o in json.loads(done.stdout)["vms"]}
    assert outcome["hand-01"]["steps"][-1] == "destroy"
    assert not any(a["vmName"] == "hand-01" for a in sim.assignments())  # its vGPU is released
    status = json.loads(runner.invoke(app, ["-o", "json", "status"]).stdout)
    names = {vm["vm"] for vm in status["vms"]}
    assert "hand-01" not in names and {"hand-02", "hand-03"} <= names
    again = runner.invoke(app, ["plan", "-f", str(inventory), "--detailed-exitcode"])
    assert again.exit_code == 0 and "No changes" in again.stdout


def test_allow_destroy_in_the_inventory(sim: Gpusim, runner: CliRunner, tmp_path: Path) -> None:
    inventory = tmp_path / "remove.yaml"
    inventory.write_text(REMOVE.replace("vms:\n", "allow_destroy: true\nvms:\n").replace("hand-01", "hand-02"))
    done = runner.invoke(app, ["apply", "-f", str(inventory), "--yes"])
    assert done.exit_code == 0, done.output
    si = sim.connect()
    try:
        from pyVmomi import vim

        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        names = {vm.name for vm in view.view}
    finally:
        from pyVim.connect import Disconnect

        Disconnect(si)
    assert "hand-02" not in names and {"hand-01", "hand-03", "bystander"} <= names
