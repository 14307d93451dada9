"""vgpuctl's own bookkeeping refused by vCenter for want of a privilege, with real `vgpuctl apply` processes against
gpusim's armed NoPermission faults: the lock folder of a host lease or a VM claim (Folder.Create), the custom
attributes that describe them (Global.ManageCustomFields, Global.SetCustomField). Each is one line naming the
privilege, never a traceback or a fault dump, and nothing is changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.sim

HOST = "esx-01.gpu.sim"
FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "vms": [{"name": f"web-0{i}", "cpus": 2, "memory_mb": 4096, "firmware": "efi"} for i in (1, 2)],
}  # fmt: skip

VMS = """apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
vms:
  - name: web-{01..02}
    vgpus: {profile: grid_a100-10c, count: 1}
    power: 'off'
"""

HOSTS = f"""apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
hosts:
  - name: {HOST}
    graphics: {{assignment_policy: consolidation}}
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


def _apply(sim: Any, tmp_path: Path, text: str, *first: str, parallel: int = 8) -> tuple[int, str, str]:
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env |= sim.vgpuctl_env(esxi=False)
    proc = subprocess.run([sys.executable, "-m", "vgpuctl", *first, "apply", "--yes", "--parallel", str(parallel),
                           "-f", str(path)], env=env,
                          capture_output=True, text=True)  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def _root_folder(sim: Any) -> str:
    from pyVim.connect import Disconnect

    si = sim.connect()
    try:
        return str(si.content.rootFolder._moId)
    finally:
        Disconnect(si)


def test_a_vm_claim_without_folder_create_is_one_line_and_no_vm_starts(sim: Any, tmp_path: Path) -> None:
    sim.arm_fault(_root_folder(sim), "CreateFolder", "NoPermission", count=10)  # refused every time, as vCenter does
    code, out, err = _apply(sim, tmp_path, VMS, parallel=1)
    assert code == 1, out + err
    assert "Traceback" not in out + err and "(vim.fault.NoPermission)" not in out + err
    failed = [line for line in out.splitlines() if line.startswith("  failed: ")]
    assert len(failed) == 1, out
    assert "cannot take the claim (its lock folder vgpuctl-claim-vm-" in failed[0]
    assert "vCenter refused CreateFolder: this user lacks the privilege Folder.Create" in failed[0]
    assert "What a real vCenter needs" in failed[0]
    assert "1 failed, 0 skipped, 1 not started" in out and "not started: web-02" in out  # the same for all
    assert sim.assignments() == [] and [h["name"] for h in sim.hosts()] == [HOST]


def test_json_says_the_missing_privilege_in_its_document(sim: Any, tmp_path: Path) -> None:
    sim.arm_fault(_root_folder(sim), "CreateFolder", "NoPermission", count=10)
    code, out, err = _apply(sim, tmp_path, VMS, "-o", "json", parallel=1)
    assert code == 1, out + err
    failed = [vm for vm in json.loads(out)["vms"] if vm["status"] == "failed"]
    assert [vm["fault_type"] for vm in failed] == ["BookkeepingError"]
    assert "lacks the privilege Folder.Create" in failed[0]["message"]


REFUSED = [
    ("CreateFolder", "Folder.Create"),
    ("AddCustomFieldDef", "Global.ManageCustomFields"),
    ("SetField", "Global.SetCustomField"),
]


@pytest.mark.parametrize(("method", "privilege"), REFUSED)
def test_a_host_lease_without_its_privilege_is_one_line(sim: Any, tmp_path: Path, method: str, privilege: str) -> None:
    target = _root_folder(sim) if method == "CreateFolder" else "CustomFieldsManager"
    sim.arm_fault(target, method, "NoPermission")
    code, out, err = _apply(sim, tmp_path, HOSTS)
    assert code == 1, out + err
    assert "Traceback" not in out + err and "(vim.fault.NoPermission)" not in out + err
    assert f"vCenter refused {method}: this user lacks the privilege {privilege}" in out + err, out + err
    assert sim.host(HOST)["assignmentPolicy"] != "consolidation"  # nothing was changed
