"""A hung ESXi command against gpusim's SSH fault (`hang`): `plan`, `apply` and `status` end at the run's bound on
each shell command (--timeout, or VGPUCTL_ESXI_TIMEOUT alone), with one line naming the host and the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpusim import arm_ssh_fault

pytestmark = pytest.mark.sim

HOST = "esx-01.gpu.sim"
FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
}  # fmt: skip

MIG = f"""apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
hosts:
  - name: {HOST}
    gpus: [{{select: all, mode: mig}}]
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


def _vgpuctl(sim: Any, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    path = tmp_path / "inv.yaml"
    path.write_text(MIG)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    full |= sim.vgpuctl_env(tmp_path / "state") | (env or {})
    command = [sys.executable, "-m", "vgpuctl", *args]
    if args[-1] in ("plan", "apply", "--yes"):
        command += ["-f", str(path)]
    proc = subprocess.run(command, env=full, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def test_plan_ends_at_timeout_naming_the_host_and_the_command(sim: Any, tmp_path: Path) -> None:
    arm_ssh_fault(sim, "hang", host=HOST, match="nvidia-smi")
    code, out = _vgpuctl(sim, tmp_path, "--timeout", "2", "plan")
    assert code == 1, out
    line = next(x for x in out.splitlines() if "did not finish" in x and "cannot be carried out" in x)
    # the host's shell facts failed; the plan names the host, what needed the shell, and the command that hung,
    # under the host's changes
    assert line.startswith(f"    x cannot be carried out: host {HOST}: mig changes need ESXi SSH, which failed: "
                           "`nvidia-smi"), out
    assert "error: the plan has 1 problem (shown with it): nothing can be applied" in out
    assert "did not finish within 2 s" in line, out
    assert "--timeout or VGPUCTL_ESXI_TIMEOUT sets the limit" in line and "Traceback" not in out


def test_esxi_timeout_bounds_the_shell_alone(sim: Any, tmp_path: Path) -> None:
    arm_ssh_fault(sim, "hang", host=HOST, match="nvidia-smi")
    code, out = _vgpuctl(sim, tmp_path, "plan", env={"VGPUCTL_ESXI_TIMEOUT": "1.5"})
    assert code == 1 and "did not finish within 1.5 s" in out, out
    code, out = _vgpuctl(sim, tmp_path, "plan", env={"VGPUCTL_ESXI_TIMEOUT": "soon"})
    assert code == 1 and "VGPUCTL_ESXI_TIMEOUT" in out and "Traceback" not in out, out


def test_a_hang_during_apply_fails_that_host_in_time(sim: Any, tmp_path: Path) -> None:
    arm_ssh_fault(sim, "hang", host=HOST, match=" -mig ")  # the MIG switch itself; the plan's reads answer
    code, out = _vgpuctl(sim, tmp_path, "--timeout", "2", "apply", "--yes")
    assert code == 1, out
    assert f"{HOST}: `nvidia-smi" in out and "-mig 1` did not finish within 2 s" in out, out
    assert "Traceback" not in out


def test_status_reports_a_hung_host_in_time(sim: Any, tmp_path: Path) -> None:
    arm_ssh_fault(sim, "hang", host=HOST, match="nvidia-smi")
    _, out = _vgpuctl(sim, tmp_path, "--timeout", "2", "-o", "json", "status", "--shell")
    (host,) = json.loads(out.split("\nwarning:")[0])["hosts"]  # the document, then stderr's warnings
    assert host["host"] == HOST and "did not finish within 2 s" in host["shell_error"], out
