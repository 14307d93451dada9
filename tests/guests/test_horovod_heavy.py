"""Horovod as the guests really get it: the horovod role builds the pinned Horovod from source in each guest
against TensorFlow (CPU) from PyPI, then a 2-process Horovod job runs across the two guests over SSH.

Heavy (VGPUCTL_HEAVY=1): it downloads about 450 MB of wheels and the guests' compilers, and compiles Horovod
twice. TensorFlow's CPU wheel because the build needs no GPU and PyPI's PyTorch wheels pull the CUDA
libraries (gigabytes); the pin matches the role's README. The harness, not the role, gives the offline guests
their compilers (apt inside each chroot, run from the host's network namespace) and the wheels (a directory
in each guest that ml_stack_wheel_dir points at), as a VM template that already carries them would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from guestlib import Guest, Guests

from vgpuctl.guest.runner import deploy
from vgpuctl.inventory import load_inventory

pytestmark = [pytest.mark.guests, pytest.mark.heavy]

FRAMEWORK = "tensorflow-cpu==2.12.1"
HOROVOD = "0.28.1"
# Bookworm's venv starts with setuptools 66; wheel 0.46+ needs setuptools 70.1 (the role pins it too).
BUILD_TOOLS = ["wheel<0.46"]
BUILD_PACKAGES = ["build-essential", "cmake", "python3-dev"]
GUEST_PYTHON = "3.11"  # Debian bookworm
WHEEL_DIR = "/opt/vgpuctl-wheels"
RESULT = "/var/tmp/vgpuctl-hvd-result.json"

JOB = f"""\
import json, socket
import tensorflow as tf
import horovod.tensorflow as hvd

hvd.init()
total = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)
with open({RESULT!r}, "w") as out:
    json.dump({{"rank": hvd.rank(), "size": hvd.size(), "host": socket.gethostname(),
               "sum": float(total.numpy()[0])}}, out)
"""


def wheel_cache() -> Path:
    base = Path(os.environ.get("VGPUCTL_GUEST_CACHE", "/var/cache/vgpuctl-guests"))
    return base / f"heavy-wheels-py{GUEST_PYTHON}"


def download_wheels(dest: Path) -> None:
    """Wheels for the guests' Python (not the host's), plus Horovod's source."""
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "-d", str(dest)]
    target = ["--only-binary=:all:", "--python-version", GUEST_PYTHON, "--implementation", "cp"]
    target += ["--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64"]
    deps = [FRAMEWORK, *BUILD_TOOLS, "cloudpickle", "psutil", "pyyaml", "packaging"]
    subprocess.run([*pip, *target, *deps], check=True)
    subprocess.run([*pip, "--no-deps", "--no-binary=:all:", f"horovod=={HOROVOD}"], check=True)


def install_build_packages(guest: Guest) -> None:
    """apt inside the guest's chroot from the host's network namespace (the guests themselves are offline)."""
    root = guest.root
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    try:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
        for args in (["update"], ["install", "-y", "--no-install-recommends", *BUILD_PACKAGES]):
            subprocess.run(["chroot", str(root), "apt-get", "-q", *args], env=env, check=True, capture_output=True)
    finally:
        subprocess.run(["umount", str(root / "proc")], check=True)


@pytest.fixture(scope="module")
def horovod_guests(guests: Guests, tmp_path_factory) -> dict:
    cache = wheel_cache()
    download_wheels(cache)
    for g in guests.guests:
        install_build_packages(g)
        shutil.copytree(cache, g.root / WHEEL_DIR.lstrip("/"), dirs_exist_ok=True)
        (g.root / "root" / "hvd_job.py").write_text(JOB)
    tmp = tmp_path_factory.mktemp("horovod")
    inv = tmp / "inv.yaml"
    inv.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "vgpuctl/v1",
                "vms": [
                    {
                        "name": g.name,
                        "template": "t",
                        "vgpus": {"profile": "grid_a100-40c", "count": 1},
                        "guest": {"group": "trainers"},
                    }
                    for g in guests.guests
                ],
                "guests": {
                    "connection": {"user": "root", "key_file": str(guests.key)},
                    "groups": {
                        "trainers": {
                            "roles": ["ml_stack", "mpi_ssh_trust", "horovod", "train_launcher"],
                            "vars": {
                                "ml_stack_frameworks": ["tensorflow"],
                                "ml_stack_tensorflow_packages": [FRAMEWORK],
                                "ml_stack_wheel_dir": WHEEL_DIR,
                                "ml_stack_install_system_packages": False,
                                "horovod_gpu_operations": "",  # no CUDA in the guests
                                "horovod_with_mpi": False,  # Gloo: horovodrun over SSH
                                "train_launcher_default": "horovodrun",
                                "nccl_socket_ifname": "eth0",
                            },
                        }
                    },
                },
            },
            sort_keys=False,
        )
    )
    state = tmp / "state"
    addresses = {g.name: g.address for g in guests.guests}
    first = deploy(load_inventory(inv), addresses, state=state)
    second = deploy(load_inventory(inv), addresses, state=state)
    return {"first": first, "second": second}


def test_pinned_horovod_builds_in_every_guest(horovod_guests, guests: Guests):
    first, second = horovod_guests["first"], horovod_guests["second"]
    assert [(h.status, h.message) for h in first.hosts] == [("changed", "")] * 2, first.hosts
    assert [(h.status, h.changed) for h in second.hosts] == [("ok", 0)] * 2, second.hosts
    for g in guests.guests:
        build = guests.ssh(g, "/opt/vgpuctl/venv/bin/horovodrun --check-build").stdout
        assert f"Horovod v{HOROVOD}" in build and "[X] TensorFlow" in build and "[X] Gloo" in build, build


def test_two_process_job_runs_across_both_guests_over_ssh(horovod_guests, guests: Guests):
    g1, _ = guests.guests
    for g in guests.guests:
        guests.ssh(g, f"rm -f {RESULT}")
        # Gloo advertises the address the worker's own name resolves to: its real one, not 127.0.1.1
        assert guests.ssh(g, f"getent ahostsv4 {g.name}").stdout.split()[0] == g.address
    run = guests.ssh(g1, "cd /root && vgpuctl-train /root/hvd_job.py </dev/null", check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    results = [json.loads(guests.ssh(g, f"cat {RESULT}").stdout) for g in guests.guests]
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert {r["host"] for r in results} == {g.name for g in guests.guests}
    assert all(r["size"] == 2 and r["sum"] == 3.0 for r in results), results
