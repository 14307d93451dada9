"""Names vCenter gives reach people's terminals with their control and invisible characters escaped: a VM named
with a carriage return, an 8-bit control or a bidi override cannot hide or reorder what `status` prints, nor one
with a line break start a line of its own, while `-o json` keeps every name exactly."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

HOST = "esx-01.gpu.sim"
NAMES = {"cr-evil\rok-vm": "cr-evil\\rok-vm", "c1\u009b31mCSI": "c1\\x9b31mCSI", "rtl\u202eevil": "rtl\\u202eevil",
         "nl-evil\nwarning: none": "nl-evil\\nwarning: none"}


def test_status_shows_names_with_their_controls_escaped(gpusim_factory: Callable[..., Any]) -> None:
    vms = [{"name": name, "host": HOST, "memory_mb": 4096, "memory_locked": True, "vgpus": ["grid_a100-4c"],
            "power_on": True} for name in NAMES]
    sim = gpusim_factory({"datacenter": "DC0", "vms": vms, "clusters": [
        {"name": "C", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "graphics_type": "sharedDirect"}]})
    env = {"VGPUCTL_URL": sim.url, "VGPUCTL_USERNAME": sim.username, "VGPUCTL_PASSWORD": sim.password,
           "VGPUCTL_INSECURE": "1", "VGPUCTL_ESXI_HOSTS": "", "VGPUCTL_ESXI_PASSWORD": "", "VGPUCTL_ESXI_KEY_FILE": ""}

    text = CliRunner().invoke(app, ["status", "--no-shell"], env=env)
    assert text.exit_code == 0, text.output
    for shown in NAMES.values():
        assert shown in text.stdout
    assert not any(ch in text.stdout for ch in "\r\u009b\u202e")
    assert not [line for line in text.stdout.splitlines() if line.startswith("warning: none")]  # no line of its own

    document = CliRunner().invoke(app, ["-o", "json", "status", "--no-shell"], env=env)
    assert document.exit_code == 0, document.output
    report = json.loads(document.stdout)
    assert set(NAMES) <= {vm["vm"] for vm in report["vms"]}, report["vms"]
