"""`vgpuctl export` against gpusim: the written inventory validates, plans to no change against the same farm,
and one edited value makes plan show exactly that change."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim
from typer.testing import CliRunner
from vimfind import find_object

from vgpuctl.cli.main import app
from vgpuctl.esxi.ssh import EsxiShell, SshSettings
from vgpuctl.hosts.facts import load_host_map

pytestmark = pytest.mark.sim

A1, A2, H1, M1 = "esx-01.gpu.sim", "esx-02.gpu.sim", "esx-03.gpu.sim", "esx-04.gpu.sim"


def _vm(name: str, host: str, profiles: list[str], on: bool = True, cpus: int = 4) -> dict[str, Any]:
    return {"name": name, "host": host, "cpus": cpus, "memory_mb": 16384, "firmware": "efi", "memory_locked": True,
            "vgpus": profiles, "on": on}


VMS = [
    *[_vm(f"infer-0{i}", A1, ["grid_a100-10c"]) for i in range(1, 5)],
    _vm("train-a", A2, ["grid_a100-40c", "grid_a100-40c"], cpus=16),
    _vm("parked", A2, ["grid_a100-20c"], on=False),
    _vm("mig-01", H1, ["grid_h100-3-40c"]),
    _vm("mig-02", H1, ["grid_h100-1-10c"]),
    _vm("mixed-01", M1, ["grid_a100-20c"]),
    _vm("mixed-02", M1, ["grid_a100-10c"]),
]
FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [
        {"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 4, "model": "A100-40GB", "nvlink": "pairs",
         "graphics_type": "sharedDirect", "assignment_policy": "performance", "vgpu_mode": "sameSize"},
        {"name": "MIG-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "H100-80GB", "graphics_type": "sharedDirect",
         "mig": True, "nvidia_options": "NVreg_RegistryDwords=RmPVMRL=0x01"},
        {"name": "Mixed", "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB", "nvlink": "none",
         "graphics_type": "sharedDirect", "assignment_policy": "consolidation", "vgpu_mode": "mixedSize"},
    ],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [{k: v for k, v in vm.items() if k != "on"} for vm in VMS]
    + [{"name": "plain-01", "host": A1, "cpus": 2, "memory_mb": 4096, "firmware": "efi"}],
}


NVLINK_VM = """\
apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
vms:
  - {name: pair-01, template: ubuntu-22.04-ml, cluster: GPU-Cluster, vgpus: {profile: grid_a100-40c, count: 2},
     nvlink: required}
"""


@pytest.fixture(scope="module")
def sim(gpusim_session_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The farm as a team would have built it by hand (large-BAR settings set, the VMs powered on), plus one
    VM on an NVLink device group that vgpuctl created."""
    sim = gpusim_session_factory(FARM)
    conn = sim.connect()
    try:
        for vm in VMS:
            obj = find_object(conn, vm["name"])
            extra = [vim.option.OptionValue(key="pciPassthru.use64bitMMIO", value="TRUE"),
                     vim.option.OptionValue(key="pciPassthru.64bitMMIOSizeGB", value="1024")]
            WaitForTask(obj.ReconfigVM_Task(vim.vm.ConfigSpec(extraConfig=extra)))
            if vm["on"]:
                WaitForTask(obj.PowerOnVM_Task())
    finally:
        Disconnect(conn)
    inventory = tmp_path_factory.mktemp("nvlink") / "pair.yaml"
    inventory.write_text(NVLINK_VM)
    env = {"VGPUCTL_URL": sim.url, "VGPUCTL_USERNAME": sim.username, "VGPUCTL_PASSWORD": sim.password,
           "VGPUCTL_INSECURE": "1"}
    applied = vgpuctl(env, "apply", "-f", str(inventory), "--yes")
    assert applied.exit_code == 0, applied.output
    yield sim


@pytest.fixture
def env(sim: Any, no_vgpuctl_env: None) -> dict[str, str]:
    return sim.vgpuctl_env()


def vgpuctl(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def exported(env: dict[str, str], tmp_path: Path) -> Path:
    path = tmp_path / "farm.yaml"
    result = vgpuctl(env, "export", "--out", str(path))
    assert result.exit_code == 0, result.output
    return path


def _plan(env: dict[str, str], path: Path) -> tuple[int, dict[str, Any]]:
    result = vgpuctl(env, "-o", "json", "plan", "-f", str(path), "--detailed-exitcode")
    return result.exit_code, json.loads(result.stdout)


def test_export_validates_and_plans_to_no_change(env: dict[str, str], exported: Path) -> None:
    text = exported.read_text()
    assert vgpuctl(env, "validate", "-f", str(exported)).exit_code == 0
    code, doc = _plan(env, exported)
    assert code == 0, doc
    assert "name: infer-{01..04}" in text  # a range where the names form one
    assert "- cluster: GPU-Cluster" in text and "- cluster: MIG-Cluster" not in text  # one host: a name entry
    assert "plain-01" not in text and "1 VM without vGPUs left out" in text
    assert re.search(r"name: esx-03.gpu.sim\n.*\n    gpus:\n      - \{select: all, mode: mig", text)
    assert "scheduler: {policy: equal-share}" in text
    assert re.search(r"name: pair-01\n(    .*\n)*    nvlink: required", text)  # its device group
    assert "vgpu_mode: mixedSize" in text


def test_all_vms_writes_the_vms_without_vgpus(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "all.yaml"
    assert vgpuctl(env, "export", "--all-vms", "--cluster", "GPU-Cluster", "--out", str(path)).exit_code == 0
    text = path.read_text()
    assert "name: plain-01" in text and "mig-01" not in text
    code, doc = _plan(env, path)
    assert code == 0, doc


@pytest.mark.parametrize(
    ("old", "new", "expect"),
    [
        ("cluster: GPU-Cluster\n    graphics: {default_type: sharedDirect, assignment_policy: performance}",
         "cluster: GPU-Cluster\n    graphics: {default_type: sharedDirect, assignment_policy: consolidation}",
         {"host": [("graphics.assignment_policy", A1), ("graphics.assignment_policy", A2)]}),
        # a host change with running VMs needs an evacuation policy (evacuate: refuse is a plan error naming them)
        ("scheduler: {policy: equal-share}", "scheduler: {policy: best-effort}\n    maintenance: {evacuate: power-off}",
         {"host": [("scheduler", H1)]}),
        ("name: parked\n    cluster: GPU-Cluster\n    cpus: 4", "name: parked\n    cluster: GPU-Cluster\n    cpus: 6",
         {"vm": [("parked", "numCPUs", 4, 6)]}),
    ],
)
def test_one_edit_plans_exactly_that_change(env: dict[str, str], exported: Path, old: str, new: str,
                                            expect: dict[str, list[Any]]) -> None:
    text = exported.read_text()
    assert text.count(old) == 1, text
    exported.write_text(text.replace(old, new))
    code, doc = _plan(env, exported)
    assert code == 2, doc
    hosts = sorted((c.get("setting", c.get("kind")), c["host"]) for c in doc["host_changes"]
                   if c.get("setting") != "evacuate")
    assert {c["host"] for c in doc["host_changes"] if c.get("setting") == "evacuate"} <= {h for _, h in hosts}
    vms = [(c["vm"], f["field"], f["old"], f["new"]) for c in doc["vm_changes"] for f in c.get("fields", [])]
    assert hosts == sorted(expect.get("host", []))
    assert vms == expect.get("vm", [])
    assert all(not c.get("devices") for c in doc["vm_changes"])


def test_a_pending_mig_switch_is_exported_as_pending(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    """Last in the module (it leaves a MIG switch configured on A2): an A100 keeps `nvidia-smi -mig 1` pending
    until the host reboots; export reads that over SSH, writes the pending mode and says so, and plan shows
    exactly the reboot that completes it."""
    from gpusim import ssh_host_map_path, ssh_known_hosts

    settings = SshSettings(known_hosts=ssh_known_hosts(sim), password=sim.password, use_agent=False)
    with EsxiShell(load_host_map(str(ssh_host_map_path(sim)))[A2], settings) as sh:
        sh.run("nvidia-smi -i 3 -mig 1")
    path = tmp_path / "pending.yaml"
    assert vgpuctl(env, "export", "--out", str(path)).exit_code == 0
    text = path.read_text()
    found = re.search(r"# GPU (\S+): MIG is off with a switch to on pending \(nvidia-smi\): written as on", text)
    assert found, text
    code, doc = _plan(env, path)
    problems = [d["message"] for d in doc["error"]["details"]]
    assert code == 1 and any("maintenance.evacuate is refuse" in p for p in problems), doc  # VMs run on A2
    path.write_text(text.replace(f"  - name: {A2}\n", f"  - name: {A2}\n    maintenance: {{evacuate: power-off}}\n", 1))
    code, doc = _plan(env, path)
    assert code == 2, doc
    changes = [(c["host"], c["setting"], c["gpu"], c["old"], c["new"], c["needs_reboot"]) for c in doc["host_changes"]
               if c["setting"] != "evacuate"]
    assert changes == [(A2, "mig", found[1], "time-sliced (mig pending)", "mig", True)]
    assert doc["vm_changes"] == []
