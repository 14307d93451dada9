"""Test guests: Debian chroots running sshd in their own network namespaces (scripts/guests/guestctl.sh).

Needs root (CI runs as root), debootstrap (first run only: the root filesystem is cached as a tarball),
iproute2, util-linux's unshare, openssh-client and sshpass on the host.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

import pytest
from guestlib import (
    DRIVER_VERSION,
    FAKE_INSTALLER,
    TOKEN_CONTENT,
    Files,
    Guests,
    guest_pair,
    make_wheel,
)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("heavy") and os.environ.get("VGPUCTL_HEAVY") != "1":
        pytest.skip("heavy: set VGPUCTL_HEAVY=1 to run (long builds and downloads)")


@pytest.fixture(scope="session")
def guests() -> Iterator[Guests]:
    """The guests most tests share, in test order (a module that must not see their state takes its own pair)."""
    yield from guest_pair()


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
