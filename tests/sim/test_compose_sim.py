"""A composed inventory against gpusim: included files, an overlay (--env) and a values file (--values) plan
exactly as the flat inventory they stand for, and as the merged inventory `validate --show-merged` prints; a plan
saved from it keeps the inventory as merged, so `apply PLANFILE` applies what was planned after the files moved."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVmomi import vim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
}  # fmt: skip
FILES = {
    "lab.yaml": """\
apiVersion: vgpuctl/v1
include: [common/hosts.yaml, common/vms.yaml]
vms:
  - {name: infer-01, template: ubuntu-22.04-ml, cluster: GPU-Cluster, vgpus: {profile: grid_a100-10c}, power: 'off'}
overlays:
  prod:
    hosts:
      - cluster: GPU-Cluster
        graphics: {assignment_policy: consolidation}
    vms:
      - name: train-{01..02}
        cpus: 8
        vgpus: {profile: grid_a100-40c, count: 1}
    add:
      vms:
        - {name: prod-01, template: ubuntu-22.04-ml, cluster: GPU-Cluster, vgpus: {profile: grid_a100-20c},
           power: 'off'}
""",
    "common/hosts.yaml": """\
apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
hosts:
  - cluster: GPU-Cluster
    graphics: {default_type: sharedDirect, assignment_policy: performance}
""",
    "common/vms.yaml": """\
vms:
  - name: train-{01..02}
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    cpus: 4
    memory_gb: 16
    vgpus: {profile: grid_a100-20c, count: 1}
    power: 'off'
""",
    "site.yaml": "vms:\n  - name: infer-01\n    memory_gb: 8\n",
    # what lab.yaml --env prod --values site.yaml stands for, written out by hand
    "flat.yaml": """\
apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
hosts:
  - cluster: GPU-Cluster
    graphics: {default_type: sharedDirect, assignment_policy: consolidation}
vms:
  - name: train-{01..02}
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    cpus: 8
    memory_gb: 16
    vgpus: {profile: grid_a100-40c, count: 1}
    power: 'off'
  - {name: infer-01, template: ubuntu-22.04-ml, cluster: GPU-Cluster, vgpus: {profile: grid_a100-10c}, power: 'off',
     memory_gb: 8}
  - {name: prod-01, template: ubuntu-22.04-ml, cluster: GPU-Cluster, vgpus: {profile: grid_a100-20c}, power: 'off'}
""",
}  # fmt: skip
PROD = ("--env", "prod", "--values", "site.yaml")


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def vgpuctl(sim: Any, folder: Path, *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=sim.vgpuctl_env(folder / "state"))


def plan_document(sim: Any, folder: Path, *args: str) -> dict[str, Any]:
    result = vgpuctl(sim, folder, "plan", *args, "-o", "json")
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def vgpus_of(sim: Any, name: str) -> list[str] | None:
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        vm = next((o for o in view.view if o.name == name), None)
        if vm is None:
            return None
        return [d.backing.vgpu for d in vm.config.hardware.device
                if isinstance(getattr(d, "backing", None), vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo)]
    finally:
        Disconnect(si)


def test_a_composed_inventory_plans_as_its_flat_equivalent(sim: Any, folder: Path) -> None:
    composed = plan_document(sim, folder, "-f", "lab.yaml", *PROD)
    assert composed == plan_document(sim, folder, "-f", "flat.yaml")
    assert sorted(c["vm"] for c in composed["vm_changes"]) == ["infer-01", "prod-01", "train-01", "train-02"]
    assert [(h["host"], h["setting"]) for h in composed["host_changes"]] == [
        ("esx-01.gpu.sim", "graphics.assignment_policy"), ("esx-02.gpu.sim", "graphics.assignment_policy")]
    shown = vgpuctl(sim, folder, "validate", "-f", "lab.yaml", *PROD, "--show-merged")
    assert shown.exit_code == 0, shown.output
    (folder / "merged.yaml").write_text(shown.stdout)
    assert plan_document(sim, folder, "-f", "merged.yaml") == composed
    assert plan_document(sim, folder, "-f", "lab.yaml") != composed  # without the overlay: the lab's own plan


def test_a_saved_plan_of_a_composed_inventory_applies_what_was_planned(sim: Any, folder: Path) -> None:
    saved = vgpuctl(sim, folder, "plan", "-f", "lab.yaml", *PROD, "--out", "tonight.plan")
    assert saved.exit_code == 0, saved.output
    (folder / "common" / "vms.yaml").write_text(FILES["common/vms.yaml"].replace("grid_a100-20c", "grid_a100-10c"))
    (folder / "site.yaml").unlink()  # the files moved on since: the plan file holds the inventory as merged
    shown = vgpuctl(sim, folder, "show", "tonight.plan")
    assert "the plan of lab.yaml (merged from 4 file(s), overlay prod)" in shown.stderr
    applied = vgpuctl(sim, folder, "apply", "tonight.plan", "--yes")
    assert applied.exit_code == 0, applied.output
    assert vgpus_of(sim, "train-01") == ["grid_a100-40c"] and vgpus_of(sim, "prod-01") == ["grid_a100-20c"]
    again = vgpuctl(sim, folder, "apply", "tonight.plan", "--yes")
    assert again.exit_code == 1 and "the farm changed since tonight.plan was made" in again.stderr
