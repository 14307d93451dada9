"""A newcomer's first commands against the simulator's default farm (what `vgpuctl sim up` starts): preflight of
the bundled inventory.example.yaml is green once `sim up` has written its stand-ins for the guest files the example
names (the farm's hosts have the vGPU Manager and an RDMA device each), and a VM on "VM Network", which govmomi's
simulator lists only on the hosts' side, is placed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from gpusim import Gpusim
from typer.testing import CliRunner

from vgpuctl.cli.main import app
from vgpuctl.cli.sim import write_stand_ins

pytestmark = pytest.mark.sim

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner(gpusim: Gpusim, no_vgpuctl_env: None) -> CliRunner:
    return CliRunner(env=gpusim.vgpuctl_env())


def test_the_example_inventory_passes_preflight(runner: CliRunner, tmp_path: Path) -> None:
    shutil.copy(ROOT / "inventory.example.yaml", tmp_path / "inventory.example.yaml")
    written = write_stand_ins(tmp_path)
    assert sorted(p.name for p in written) == ["NVIDIA-Linux-x86_64-550.90.07-grid.run",
                                               "client_configuration_token.tok"]
    assert write_stand_ins(tmp_path) == []  # never overwritten
    result = runner.invoke(app, ["-o", "json", "preflight", "-f", str(tmp_path / "inventory.example.yaml")])
    assert result.exit_code == 0, result.output
    checks: list[dict[str, Any]] = json.loads(result.stdout)["checks"]
    assert not [c for c in checks if c["status"] in ("fail", "warn")], checks
    assert {c["id"] for c in checks} >= {"host.rdma", "guest.driver-file", "guest.license-token", "host.vgpu-manager"}


def test_a_vm_on_vm_network_is_placed_on_the_default_farm(runner: CliRunner, tmp_path: Path) -> None:
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(
        "apiVersion: vgpuctl/v1\nvms:\n"
        "  - name: net-01\n    template: ubuntu-22.04-ml\n    cluster: GPU-Cluster\n"
        "    vgpus: {profile: grid_a100-10c, count: 1}\n"
        "    network: [{portgroup: VM Network, type: vmxnet3}]\n"
    )
    result = runner.invoke(app, ["-o", "json", "plan", "-f", str(inventory)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert "reaches every port group" not in result.output
    assert [c["vm"] for c in doc["vm_changes"]] == ["net-01"] and not doc["errors"], doc
