"""`provision` against gpusim when the guests never report an address (no VMware Tools, no guest attached): the
wait prints which VMs it waits for and how long it has waited, as dated lines when piped; when the timeout
passes, its last line and the error name the VMs still without an address, and provision fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.sim

STAMP = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{2}:\d{2}"


def test_the_wait_names_the_vms_without_an_address_and_the_timeout_fails(gpusim_factory: Any, tmp_path: Path) -> None:
    sim = gpusim_factory()
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({
        "apiVersion": "vgpuctl/v1",
        "vcenter": {"datacenter": "DC0"},
        "vms": [{"name": "quiet-{01..02}", "template": "ubuntu-22.04-ml", "cluster": "GPU-Cluster", "cpus": 2,
                 "memory_gb": 8, "vgpus": {"profile": "grid_a100-10c", "count": 1}, "guest": {"group": "workers"}}],
        "guests": {"connection": {"user": "root"}, "groups": {"workers": {"roles": ["mpi_ssh_trust"]}}},
    }, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    env.update(sim.vgpuctl_env(tmp_path / "state", esxi=False))
    proc = subprocess.run(
        [sys.executable, "-m", "vgpuctl", "provision", "-f", str(inv), "--yes", "--ip-timeout", "2", "--ip-poll",
         "0.5"],
        capture_output=True, text=True, env=env, check=False, timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    waiting = [line for line in lines if "guest IP addresses:" in line]
    assert re.fullmatch(rf"{STAMP} guest IP addresses: 0/2, waiting for quiet-01, quiet-02 \(waited 0 s\)",
                        waiting[0]), waiting
    assert waiting[-1] == "guest IP addresses: 0/2 after 2 s: no address for quiet-01, quiet-02"
    assert lines[-1] == ("error: no guest IP address after 2 s for quiet-01, quiet-02 (powered off, or VMware Tools "
                         "not running in the guest): not configured")
    assert "Traceback" not in proc.stderr
    # the VMs were made and run, with their vGPUs: only the guests were missing
    assert sorted(a["vmName"] for a in sim.assignments()) == ["quiet-01", "quiet-02"]
