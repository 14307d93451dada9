"""nvidia module options checked before they are written, against gpusim: an option the host's module does not
declare (farm option `undeclared_module_params`) is refused with the parameter and the host, nothing written;
without ESXi SSH, NVLink and scheduler changes are refused with a line saying SSH is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

H1, H2 = "esx-01.gpu.sim", "esx-02.gpu.sim"

FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [
        {"name": "Old", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "pairs",
         "graphics_type": "sharedDirect", "nvidia_options": "NVreg_EnableMSI=1",
         "undeclared_module_params": ["NVreg_NvLinkDisable"]},
        {"name": "New", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "pairs",
         "graphics_type": "sharedDirect", "nvidia_options": "NVreg_EnableMSI=1"},
    ],
}  # fmt: skip


def _run(sim: Any, tmp_path: Path, inventory: str, *args: str, ssh: bool = True) -> Any:
    env = sim.vgpuctl_env(tmp_path / "state") | {"VGPUCTL_ESXI_KEY_FILE": "", "SSH_AUTH_SOCK": ""}  # no agent either
    if not ssh:
        env |= {"VGPUCTL_ESXI_HOSTS": "", "VGPUCTL_ESXI_PASSWORD": ""}
    path = tmp_path / "inv.yaml"
    path.write_text("apiVersion: vgpuctl/v1\nhosts:\n" + inventory)
    return CliRunner().invoke(app, [*args, "-f", str(path)], env=env)


def test_an_undeclared_parameter_is_refused_and_nothing_is_written(
    gpusim_factory: Callable[..., Any], tmp_path: Path
) -> None:
    sim = gpusim_factory(FARM)
    inv = "  - cluster: Old\n    nvlink: disabled\n  - cluster: New\n    nvlink: disabled\n"
    plan = _run(sim, tmp_path, inv, "plan")
    assert plan.exit_code == 1, plan.output
    assert f"host {H1}: the nvidia module does not declare NVreg_NvLinkDisable" in plan.output
    assert f"host {H2}: the nvidia module does not declare" not in plan.output  # its module declares it
    applied = _run(sim, tmp_path, inv, "apply", "--yes")
    assert applied.exit_code == 1, applied.output
    for host in (H1, H2):
        assert sim.host(host)["modules"]["nvidia"]["configured"] == "NVreg_EnableMSI=1"
        assert not sim.host(host)["inMaintenance"]

    applied = _run(sim, tmp_path, "  - cluster: New\n    nvlink: disabled\n", "apply", "--yes")
    assert applied.exit_code == 0, applied.output  # the declared parameter goes through
    assert sim.host(H2)["modules"]["nvidia"]["configured"] == "NVreg_EnableMSI=1 NVreg_NvLinkDisable=1"


def test_without_ssh_nvlink_and_scheduler_changes_say_ssh_is_needed(
    gpusim_factory: Callable[..., Any], tmp_path: Path
) -> None:
    sim = gpusim_factory(FARM)
    inv = "  - cluster: New\n    nvlink: disabled\n    scheduler: equal-share\n"
    plan = _run(sim, tmp_path, inv, "plan", ssh=False)
    assert plan.exit_code == 1, plan.output
    assert f"host {H2}: nvlink, scheduler changes need ESXi SSH" in plan.output
    graphics = _run(sim, tmp_path, "  - cluster: New\n    graphics: {assignment_policy: consolidation}\n", "plan",
                    "--detailed-exitcode", ssh=False)  # fmt: skip
    assert graphics.exit_code == 2, graphics.output  # what needs no shell is planned without it
    assert sim.host(H2)["modules"]["nvidia"]["configured"] == "NVreg_EnableMSI=1"
