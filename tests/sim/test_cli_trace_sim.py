"""`-v` and `-vv` against gpusim: round trips with -v; with -vv a trace of every SOAP call and ESXi shell command,
with the vCenter password, the ESXi password and the session cookie never in it."""

from __future__ import annotations

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
    "clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "pairs",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
}  # fmt: skip
INVENTORY = f"""\
apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
hosts:
  - name: {H1}
    scheduler: best-effort
vms:
  - name: traced-01
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    vgpus: {{profile: grid_a100-20c, count: 1}}
    power: off
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


def run(sim: Any, tmp_path: Path, *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=sim.vgpuctl_env(tmp_path / "state"))


def test_vv_traces_soap_and_ssh_without_secrets(sim: Any, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    quiet = run(sim, tmp_path, "plan", "-f", str(inv), "-v")
    assert quiet.exit_code == 0, quiet.output
    assert "round trips:" in quiet.stderr and "SOAP ->" not in quiet.stderr

    loud = run(sim, tmp_path, "plan", "-f", str(inv), "-vv")
    assert loud.exit_code == 0, loud.output
    err = loud.stderr
    login = next(line for line in err.splitlines() if "SOAP -> SessionManager:SessionManager.Login(" in line)
    assert f"userName='{sim.username}'" in login and "=***" in login
    assert "SOAP -> PropertyCollector:" in err and "SOAP <- RetrievePropertiesEx: ok" in err
    assert f"SSH {H1} $ " in err and f"SSH {H1} exit 0" in err  # host facts read over the ESXi shell
    assert sim.password not in err and sim.password not in loud.stdout
    assert "vmware_soap_session" not in err
    assert "traced-01" in loud.stdout  # the plan itself is unchanged
