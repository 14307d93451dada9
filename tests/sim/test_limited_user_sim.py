"""A read-only vCenter role against gpusim (a farm file user with no privilege beyond System.Read): status,
export, capacity and plan read every host they can; the nvidia module options (Host.Config.Settings) become
unknown with one warning naming the hosts; export then plan plans no change; plan refuses only what it cannot
decide, naming what it could not read, and what the role lacks for the apply."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gpusim import Gpusim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

HOSTS = ["esx-01.gpu.sim", "esx-02.gpu.sim"]
FARM = {
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB",
                  "graphics_type": "sharedDirect", "nvidia_options": "NVreg_NvLinkDisable=1"}],
    "vms": [{"name": "train-01", "host": "esx-01.gpu.sim", "memory_mb": 8192, "memory_locked": True,
             "vgpus": ["grid_a100-20c", "grid_a100-20c"], "power_on": True}],
    "users": [{"name": "reader", "password": "secret", "privileges": []}],
}
UNKNOWN = (f"the nvidia module options are unknown on 2 hosts {', '.join(HOSTS)}: NoPermission: Host.Config.Settings "
           "missing")


@pytest.fixture(scope="module")
def sim(gpusim_session_factory: Any) -> Gpusim:
    return gpusim_session_factory(FARM)


@pytest.fixture
def runner(sim: Gpusim, no_vgpuctl_env: None) -> CliRunner:
    env = {**sim.vgpuctl_env(esxi=False), "VGPUCTL_USERNAME": "reader", "VGPUCTL_PASSWORD": "secret",
           "SSH_AUTH_SOCK": ""}
    return CliRunner(env=env)


def test_status(runner: CliRunner) -> None:
    result = runner.invoke(app, ["-o", "json", "status"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert sorted(h["host"] for h in doc["hosts"]) == HOSTS
    assert all(h["nvlink"] == "unknown" for h in doc["hosts"])
    assert [w for w in doc["warnings"] if "module options" in w] == [UNKNOWN]
    assert any(vm["vm"] == "train-01" for vm in doc["vms"])  # what System.Read shows is all there


def test_export_then_plan_plans_no_change(runner: CliRunner, tmp_path: Path) -> None:
    farm = tmp_path / "farm.yaml"
    result = runner.invoke(app, ["export", "--out", str(farm)])
    assert result.exit_code == 0, result.output
    assert f"warning: {UNKNOWN}" in result.stderr
    text = farm.read_text()
    assert "nvlink and scheduler left out: the nvidia module options were not read" in text
    plan = runner.invoke(app, ["plan", "-f", str(farm), "--detailed-exitcode"])
    assert plan.exit_code == 0, plan.output


def test_capacity(runner: CliRunner) -> None:
    result = runner.invoke(app, ["-o", "json", "capacity"])
    assert result.exit_code == 0, result.output
    assert sorted(h["host"] for h in json.loads(result.stdout)["hosts"]) == HOSTS


def test_plan_refuses_what_it_cannot_read_and_what_the_role_lacks(runner: CliRunner, tmp_path: Path) -> None:
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("""\
apiVersion: vgpuctl/v1
hosts:
  - cluster: GPU-Cluster
    scheduler: equal-share
vms:
  - name: train-01
    vgpus: {profile: grid_a100-20c, count: 1}
""")
    result = runner.invoke(app, ["-o", "json", "plan", "-f", str(inventory)])
    assert result.exit_code == 1
    details = json.loads(result.stdout)["errors"]  # the plan document, with its problems beside its changes
    assert any(d.startswith(f"host {HOSTS[0]}: the nvidia module options are unknown") and
               d.endswith("nvlink and scheduler cannot be planned") for d in details), details
    assert any(d.startswith("privileges.vm-reconfigure: missing VirtualMachine.Config.AddRemoveDevice on vm train-01")
               for d in details), details
    assert any(d.startswith("privileges.vm-power: missing VirtualMachine.Interact.PowerOn on vm train-01, "
                            "VirtualMachine.Interact.PowerOff on vm train-01") or
               "VirtualMachine.Interact.PowerOff on vm train-01" in d for d in details), details
