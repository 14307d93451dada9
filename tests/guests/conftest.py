"""Test guests: Debian chroots running sshd in their own network namespaces (scripts/guests/guestctl.sh).

Needs root (CI runs as root), debootstrap (first run only: the root filesystem is cached as a tarball),
iproute2, util-linux's unshare, openssh-client and sshpass on the host.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from guestlib import (
    DRIVER_VERSION,
    ENV,
    FAKE_INSTALLER,
    GUESTCTL,
    TOKEN_CONTENT,
    Files,
    Guest,
    Guests,
    make_wheel,
    missing_tools,
)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("heavy") and os.environ.get("VGPUCTL_HEAVY") != "1":
        pytest.skip("heavy: set VGPUCTL_HEAVY=1 to run (long builds and downloads)")


@pytest.fixture(scope="session")
def guests(tmp_path_factory: pytest.TempPathFactory):
    if os.geteuid() != 0:
        pytest.skip("guest tests need root (network namespaces, chroot)")
    missing = missing_tools()
    if missing:
        pytest.fail(f"guest tests need these tools on the host: {', '.join(missing)}")
    # short path: unix socket paths (ssh control sockets) are limited to ~100 bytes
    work = Path(subprocess.check_output(["mktemp", "-d", "/tmp/vgpuctl-guests.XXXXXX"], text=True).strip())
    env = {**os.environ, **ENV}
    try:
        out = subprocess.run(
            [str(GUESTCTL), "up", str(work), "2"], env=env, capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            pytest.fail(f"guestctl up failed:\n{out.stdout}\n{out.stderr}")
        lines = [line.split() for line in (work / "guests").read_text().splitlines() if line.strip()]
        g = Guests(
            dir=work,
            key=work / "id_ed25519",
            known_hosts=work / "known_hosts",
            guests=[Guest(name, addr, work / name / "root") for name, addr in lines],
        )
        for guest in g.guests:
            g.install_fake_boot(guest)
        yield g
    finally:
        subprocess.run([str(GUESTCTL), "down", str(work)], env=env, check=False)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    d = tmp_path_factory.mktemp("guest-files")
    driver = d / f"NVIDIA-Linux-x86_64-{DRIVER_VERSION}-grid.run"
    driver.write_text(FAKE_INSTALLER.read_text().replace("@VERSION@", DRIVER_VERSION))
    token = d / "client_configuration_token_11-29-2026_10-00-00.tok"
    token.write_text(TOKEN_CONTENT + "\n")
    wheels = d / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "vgpuctl-probe", "0.1")
    return Files(d, driver, hashlib.sha256(driver.read_bytes()).hexdigest(), token, wheels)
