"""The host side of training across hosts against gpusim: SR-IOV virtual functions turned on by a host change
(maintenance mode and a reboot, as a host without device rebind needs) before the training pair's VMs are given
one each, and the PVRDMA prerequisites (the VMkernel adapter tagged in Net.PVRDMAVmknic, the pvrdma firewall
ruleset) set online. vgpuctl runs through its CLI with the ESXi shells configured; what vCenter has is read
with pyVmomi directly.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVmomi import vim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

HOSTS = ("esx-01.gpu.sim", "esx-02.gpu.sim")
FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [
        {
            "name": "GPU-Cluster",
            "hosts": 2,
            "gpus_per_host": 4,
            "model": "A100-40GB",
            "graphics_type": "sharedDirect",
            "nics": [{"model": "ConnectX-7"}, {"model": "ConnectX-7", "passthrough": True}],  # no VFs yet
        }
    ],
    "networks": [{"name": "mgmt"}, {"name": "roce-fabric", "kind": "distributed", "switch": "dvs-roce",
                                    "vmknic": "vmk1"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi", "network": ["mgmt"]}],
}

PAIR = """\
  - name: train-{01..02}
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    memory_gb: 64
    vgpus: {profile: grid_a100-40c, count: 4}
    network:
      - {portgroup: mgmt}
      - {type: sriov, device: vmnic4, portgroup: roce-fabric}
"""


@pytest.fixture
def sim(gpusim_factory: Any) -> Any:
    return gpusim_factory(FARM)


@pytest.fixture
def env(sim: Any, no_vgpuctl_env: None) -> dict[str, str]:
    return sim.vgpuctl_env()


def vgpuctl(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def inventory(tmp_path: Path, hosts: str, vms: str = "") -> Path:
    path = tmp_path / "inv.yaml"
    text = "apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nhosts:\n" + textwrap.dedent(hosts)
    path.write_text(text + ("vms:\n" + textwrap.dedent(vms) if vms else ""))
    return path


def host_state(sim: Any) -> dict[str, dict[str, Any]]:
    """Per host: boot time, Net.PVRDMAVmknic, the pvrdma ruleset, by pyVmomi."""
    si = sim.connect()
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem], True)
        out = {}
        for h in view.view:
            option = h.configManager.advancedOption.QueryOptions("Net.PVRDMAVmknic")[0].value
            rules = {r.key: r.enabled for r in h.configManager.firewallSystem.firewallInfo.ruleset}
            out[h.name] = {"boot": h.runtime.bootTime, "vmknic": option, "ruleset": rules["pvrdma"]}
        view.DestroyView()
        return out
    finally:
        Disconnect(si)


def test_sriov_is_turned_on_in_maintenance_with_a_reboot_then_the_pair_gets_its_vfs(
        sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    too_many = inventory(tmp_path, "  - cluster: GPU-Cluster\n    sriov: [{device: vmnic4, vfs: 64}]\n")
    refused = vgpuctl(env, "plan", "-f", str(too_many))
    assert refused.exit_code == 1
    assert "sriov: vmnic4: 0000:18:00.0 (vmnic4) supports at most 16 virtual functions, not 64" in refused.output

    inv = inventory(tmp_path, "  - cluster: GPU-Cluster\n    sriov: [{device: vmnic4, vfs: 4}]\n", PAIR)
    plan = vgpuctl(env, "plan", "-f", str(inv))
    assert plan.exit_code == 0, plan.output
    for host in HOSTS:
        assert f"~ host {host} sriov 0000:18:00.0: off -> 4 VFs  (disruptive, reboot)" in plan.output
    assert "after the host changes on" in plan.output
    before = host_state(sim)
    result = vgpuctl(env, "apply", "-f", str(inv), "--yes")
    assert result.exit_code == 0, result.output
    after = host_state(sim)
    shown = vgpuctl(env, "-o", "json", "host", "show", HOSTS[0])
    assert shown.exit_code == 0, shown.output
    settings = {s["setting"]: s["value"] for s in json.loads(shown.stdout)["settings"]}
    assert settings["sriov[vmnic4]"] == "4 VFs"
    for host in HOSTS:
        assert after[host]["boot"] > before[host]["boot"]  # rebooted
        cx7 = sim.nics(host)[0]
        assert (cx7["pciId"], cx7["numVirtualFunction"], sum(cx7["vfHolders"].values())) == ("0000:18:00.0", 4, 1)
        assert not sim.host(host)["inMaintenance"]
    again = vgpuctl(env, "plan", "-f", str(inv), "--detailed-exitcode")
    assert again.exit_code == 0, again.output


def test_pvrdma_prerequisites_are_set_online(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    wrong = inventory(tmp_path, "  - cluster: GPU-Cluster\n    pvrdma: {vmknic: vmk9}\n")
    refused = vgpuctl(env, "plan", "-f", str(wrong))
    assert refused.exit_code == 1
    assert "host esx-01.gpu.sim: pvrdma.vmknic: no VMkernel adapter vmk9 (vmk0, vmk1)" in refused.output

    inv = inventory(tmp_path, "  - cluster: GPU-Cluster\n    pvrdma: {vmknic: vmk1}\n")
    plan = vgpuctl(env, "plan", "-f", str(inv))
    assert plan.exit_code == 0, plan.output
    for host in HOSTS:
        assert f"~ host {host} pvrdma.vmknic: (none) -> vmk1\n" in plan.output
        assert f"~ host {host} pvrdma.firewall: disabled -> enabled\n" in plan.output
    assert "Disruptive steps" not in plan.output
    before = host_state(sim)
    result = vgpuctl(env, "apply", "-f", str(inv), "--yes")
    assert result.exit_code == 0, result.output
    after = host_state(sim)
    for host in HOSTS:
        assert (after[host]["vmknic"], after[host]["ruleset"]) == ("vmk1", True)
        assert after[host]["boot"] == before[host]["boot"]  # online: no reboot
    again = vgpuctl(env, "plan", "-f", str(inv), "--detailed-exitcode")
    assert again.exit_code == 0, again.output
    shown = vgpuctl(env, "-o", "json", "host", "show", HOSTS[0], "-f", str(inv))
    assert shown.exit_code == 0, shown.output
    settings = {s["setting"]: s["value"] for s in json.loads(shown.stdout)["settings"]}
    assert (settings["pvrdma.vmknic"], settings["pvrdma.firewall"]) == ("vmk1", "enabled")
