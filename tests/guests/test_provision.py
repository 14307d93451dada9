"""`vgpuctl provision` end to end: gpusim clones and powers on the VMs, the guest IPs are set through gpusim's
control endpoint to the namespace guests (as VMware Tools would report them), then the guest playbooks run.
Needs root (the guests) and gpusim (Go)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from guestlib import Files, Guests

pytestmark = pytest.mark.guests

FARM = {
    "datacenter": "DC0",
    "clusters": [
        {
            "name": "GPU-Cluster",
            "hosts": 2,
            "gpus_per_host": 4,
            "model": "A100-40GB",
            "nvlink": "pairs",
            "graphics_type": "sharedDirect",
            "assignment_policy": "performance",
            "vgpu_mode": "sameSize",
        }
    ],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
}


def feed_guest_ips(sim: Any, mapping: dict[str, str], stop: threading.Event, errors: list[str]) -> None:
    """Report each VM's guest IP once gpusim has it powered on, like VMware Tools after boot."""
    from pyVim.connect import Disconnect
    from pyVmomi import vim

    si = sim.connect()
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        done: set[str] = set()
        while not stop.is_set() and len(done) < len(mapping):
            for vm in view.view:
                if vm.name in mapping and vm.name not in done and vm.runtime.powerState == "poweredOn":
                    sim.set_guest(vm.name, ip=mapping[vm.name], state="running")
                    done.add(vm.name)
            stop.wait(0.3)
    except Exception as err:  # reported by the test
        errors.append(repr(err))
    finally:
        Disconnect(si)


def test_provision_goes_from_inventory_to_configured_guests(
    gpusim_factory: Any, guests: Guests, files: Files, tmp_path: Path
) -> None:
    sim = gpusim_factory(FARM)
    names = {g.name: f"train-{i:02d}" for i, g in enumerate(guests.guests, start=1)}
    for g in guests.guests:
        guests.set_vgpus(g, count=1, profile="A100-40C", nvlink=False)
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "vgpuctl/v1",
                "vcenter": {"datacenter": "DC0"},
                "vms": [
                    {
                        "name": "train-{01..02}",
                        "template": "ubuntu-22.04-ml",
                        "cluster": "GPU-Cluster",
                        "cpus": 8,
                        "memory_gb": 16,
                        "vgpus": {"profile": "grid_a100-40c", "count": 1},
                        "guest": {"group": "trainers"},
                    }
                ],
                "guests": {
                    "connection": {"user": "root", "key_file": str(guests.key)},
                    "groups": {
                        "trainers": {
                            "roles": ["vgpu_guest_driver", "vgpu_licensing", "nccl", "mpi_ssh_trust", "gpu_validate"],
                            "vars": {
                                "vgpu_driver_src": str(files.driver),
                                "vgpu_driver_sha256": files.driver_sha256,
                                "vgpu_guest_driver_install_build_deps": False,
                                "vgpu_license_token_src": str(files.token),
                                "vgpu_licensing_poll_s": 1,
                                "nccl_socket_ifname": "eth0",
                            },
                        }
                    },
                },
            },
            sort_keys=False,
        )
    )
    stop, errors = threading.Event(), []
    feeder = threading.Thread(
        target=feed_guest_ips,
        args=(sim, {names[g.name]: g.address for g in guests.guests}, stop, errors),
        daemon=True,
    )
    feeder.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    env.update(
        VGPUCTL_URL=sim.url,
        VGPUCTL_USERNAME=sim.username,
        VGPUCTL_PASSWORD=sim.password,
        VGPUCTL_INSECURE="1",
        VGPUCTL_STATE_DIR=str(tmp_path / "state"),
    )
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "vgpuctl",
                "-o",
                "json",
                "provision",
                "-f",
                str(inv),
                "--yes",
                "--ip-poll",
                "0.5",
                "--ip-timeout",
                "300",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=900,
        )
    finally:
        stop.set()
        feeder.join()
    assert not errors, errors
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    outcomes = {o["vm"]: o["status"] for o in doc["apply"]["vms"]}
    assert outcomes == {"train-01": "changed", "train-02": "changed"}
    hosts = {h["vm"]: h for h in doc["guests"]["guests"]}
    assert set(hosts) == {"train-01", "train-02"}
    assert all(h["status"] in ("ok", "changed") and h["failed"] == 0 for h in hosts.values()), hosts
    assert "guest IP addresses: 2/2" in proc.stderr
    # the guests were configured under their VM names, at the addresses vSphere reported
    for g in guests.guests:
        etc_hosts = guests.ssh(g, "cat /etc/hosts").stdout
        for other in guests.guests:
            assert f"{other.address} {names[other.name]}" in etc_hosts
        out = guests.ssh(g, f"ssh {names[guests.guests[0].name]} hostname </dev/null", check=False)
        assert out.returncode == 0, out.stderr
    # the VMs exist with their vGPU in gpusim
    assert sorted(a["vmName"] for a in sim.assignments() if a["vmName"].startswith("train-")) == [
        "train-01",
        "train-02",
    ]

    # `guest deploy` alone reads the same addresses from vCenter; the guests are already converged
    again = subprocess.run(
        [sys.executable, "-m", "vgpuctl", "-o", "json", "guest", "deploy", "-f", str(inv)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    rerun = {h["vm"]: (h["status"], h["changed"]) for h in json.loads(again.stdout)["guests"]}
    assert rerun == {"train-01": ("ok", 0), "train-02": ("ok", 0)}
