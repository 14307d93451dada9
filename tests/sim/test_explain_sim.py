"""`plan --explain HOST` against gpusim: the merged host entry beside what vCenter and the host's nvidia module
options say now, text and JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

H1 = "esx-01.gpu.sim"
FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "pairs",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
}  # fmt: skip
INVENTORY = f"""\
apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
hosts:
  - cluster: GPU-Cluster
    graphics: {{assignment_policy: performance}}
    nvlink: enabled
  - name: {H1}
    graphics: {{assignment_policy: consolidation}}
    nvlink: disabled
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


def run(sim: Any, tmp_path: Path, *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=sim.vgpuctl_env(tmp_path / "state"))


def test_explain_shows_merged_values_sources_and_vcenter(sim: Any, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    text = run(sim, tmp_path, "plan", "-f", str(inv), "--explain", H1)
    assert text.exit_code == 0, text.output
    out = text.stdout
    assert out.startswith(f"host {H1} (cluster GPU-Cluster): cluster GPU-Cluster then host {H1}")
    assert f"  graphics.assignment_policy  consolidation  performance  differs  {inv}:8 (host {H1})" in out
    assert f"  nvlink                      disabled       enabled      differs  {inv}:9 (host {H1})" in out
    assert "the plan changes:" in out and "nvlink: enabled -> disabled" in out

    doc = json.loads(run(sim, tmp_path, "plan", "-f", str(inv), "--explain", H1, "-o", "json").stdout)
    assert doc["kind"] == "explain" and doc["host"] == H1
    assert {s["setting"]: s["vcenter"] for s in doc["settings"]} == {
        "graphics.assignment_policy": "performance",
        "nvlink": "enabled",
    }
    unknown = run(sim, tmp_path, "plan", "-f", str(inv), "--explain", "nope")
    assert unknown.exit_code == 1 and "no such host in vCenter" in unknown.stderr
