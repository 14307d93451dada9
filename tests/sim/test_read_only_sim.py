"""Read-only commands write nothing, against gpusim: `plan` (also with `ssh: {service: manage}` on hosts whose SSH
service is stopped, and with an SSH service a dead run left started in a host's work record), `show`, `status`
(also with `--usage`), `preflight`, `export`, `capacity`, `host show`, `profiles` and `report idle` leave vCenter
as they found it: its state as gpusim reports it (hosts and their SSH service, custom attribute definitions and
values, folders, VMs, tasks, and every call of a method that changes something, even one undone again) is the same
before and after each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gpusim import Gpusim
from pyVim.connect import Disconnect
from pyVmomi import vim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

HOSTS = ["esx-01.gpu.sim", "esx-02.gpu.sim"]
TEMPLATE = "ubuntu-22.04-ml"
FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB",
                  "graphics_type": "sharedDirect", "ssh": {"stopped": True}}],
    "templates": [{"name": TEMPLATE, "cpus": 8, "memory_mb": 16384, "firmware": "efi"}],
    "vms": [{"name": "web-01", "host": HOSTS[0], "cpus": 4, "memory_mb": 8192, "firmware": "efi",
             "power_on": True}],
}  # fmt: skip
INVENTORY = f"""\
apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
hosts:
  - cluster: GPU-Cluster
    scheduler: equal-share
    ssh: {{service: manage}}
vms:
  - name: web-01
    vgpus: {{profile: grid_a100-10c, count: 1}}
  - name: new-01
    template: {TEMPLATE}
    cluster: GPU-Cluster
    vgpus: {{profile: grid_a100-20c, count: 1}}
"""
# what a run that died left on the second host: its SSH service started, and the work record that says so
DEAD_RECORD = {"vms": [], "entered_maintenance": False, "phase": "", "message": "", "updated": 1.0, "run": "dead01",
               "steps": [], "ssh": {"running": False, "policy": "off"}}  # fmt: skip


@pytest.fixture
def sim(gpusim_factory: Any) -> Gpusim:
    return gpusim_factory(FARM)


@pytest.fixture
def env(sim: Gpusim, monkeypatch: pytest.MonkeyPatch, no_vgpuctl_env: None) -> dict[str, str]:
    values = {**sim.vgpuctl_env(), "SSH_AUTH_SOCK": ""}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def _leave_a_dead_runs_ssh_record(sim: Gpusim) -> None:
    sim.request("POST", f"/hosts/{HOSTS[1]}/access", {"ssh_running": True})
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.HostSystem], True)
        host = next(h for h in view.view if h.name == HOSTS[1])
        view.Destroy()
        cfm = si.content.customFieldsManager
        key = cfm.AddCustomFieldDef(name="vgpuctl.work", moType=vim.HostSystem).key
        cfm.SetField(entity=host, key=key, value=json.dumps(DEAD_RECORD))
    finally:
        Disconnect(si)


def _commands(tmp_path: Path) -> list[list[str]]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    saved = tmp_path / "tonight.plan"
    return [
        ["plan", "-f", str(inv)],
        ["plan", "-f", str(inv), "--out", str(saved)],
        ["show", str(saved)],
        ["-o", "json", "plan", "-f", str(inv), "--vm", "web-01"],
        ["status"],
        ["-o", "json", "status"],
        ["status", "--usage", "--since", "1d"],
        ["report", "idle", "--since", "7d", "--below", "5%"],
        ["preflight", "-f", str(inv)],
        ["export"],
        ["export", "--all-vms", "--out", str(tmp_path / "farm.yaml")],
        ["capacity"],
        ["host", "show", HOSTS[0]],
        ["host", "show", HOSTS[1]],
        ["profiles"],
        ["profiles", "--host", HOSTS[0], "--shell"],
    ]


def _differences(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {k: (before.get(k), after.get(k)) for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)}


def test_read_only_commands_leave_vcenter_as_they_found_it(sim: Gpusim, env: dict[str, str], tmp_path: Path) -> None:
    _leave_a_dead_runs_ssh_record(sim)
    before = sim.state()
    for args in _commands(tmp_path):
        result = CliRunner().invoke(app, args)
        # preflight finds what this farm lacks, `host show` cannot read a shell whose SSH service is stopped
        expected = (0, 1) if args[0] == "preflight" or args[:3] == ["host", "show", HOSTS[0]] else (0,)
        assert result.exit_code in expected, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
        assert _differences(before, sim.state()) == {}, (args, result.output)
    plan = CliRunner().invoke(app, ["plan", "-f", str(tmp_path / "inv.yaml"), "--detailed-exitcode"])
    assert plan.exit_code == 2, plan.output  # planned without writing: the scheduler, the vGPU, the clone
    assert f"~ host {HOSTS[0]} scheduler" in plan.stdout
    assert (f"host {HOSTS[0]}: its SSH service (TSM-SSH) is stopped: apply starts it for its run (ssh.service: "
            "manage), reads the ESXi shell then and stops it again at its end") in plan.output  # fmt: skip
    assert f"host {HOSTS[1]}: run dead01 started its SSH service and did not stop it: apply stops it" in plan.output
