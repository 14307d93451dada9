"""Shared by the guest tests: the guests, the files the roles get, the secrets that must not leak."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUESTCTL = ROOT / "scripts" / "guests" / "guestctl.sh"
FAKE_INSTALLER = Path(__file__).with_name("fake-nvidia-installer.sh")
DRIVER_VERSION = "550.90.07"
TOKEN_CONTENT = "vgpuctl-test-token-7f3a9c1e-CONTENT-do-not-leak"
GUEST_PASSWORD = "vgpuctl-test-guest-pw-51b2d8"
VCENTER_PASSWORD = "vgpuctl-test-vcenter-pw-93c4aa"
SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _run_network(pid: int) -> dict[str, str]:
    """Names and a /24 of this test run's own, so neither a developer's guests from guestctl.sh (prefix vgg,
    10.213.0.x) nor a second test run on the same machine (which would tear down our namespaces) collide."""
    return {"VGPUCTL_GUEST_PREFIX": f"t{pid % 100000:05d}", "VGPUCTL_GUEST_NET": f"10.213.{20 + pid % 200}"}


ENV = _run_network(os.getpid())


@dataclass
class Guest:
    name: str
    address: str
    root: Path


@dataclass
class Guests:
    dir: Path
    key: Path
    known_hosts: Path
    guests: list[Guest] = field(default_factory=list)

    def ssh(self, guest: Guest, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "ssh",
                "-q",
                "-i",
                str(self.key),
                "-o",
                "BatchMode=yes",
                "-o",
                f"UserKnownHostsFile={self.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                f"root@{guest.address}",
                command,
            ],
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    def set_vgpus(self, guest: Guest, count: int, profile: str, nvlink: bool) -> None:
        """The hypervisor's side: what the fake nvidia-smi in this guest reports."""
        conf = guest.root / "etc" / "fake-nvidia" / "vgpu.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(f"COUNT={count}\nPROFILE={profile}\nNVLINK={int(nvlink)}\n")

    def set_secure_boot(self, guest: Guest, enabled: bool) -> None:
        var = guest.root / SECURE_BOOT_VAR
        if enabled:
            var.parent.mkdir(parents=True, exist_ok=True)
            var.write_bytes(b"\x06\x00\x00\x00\x01")  # EFI attributes, then 1 = Secure Boot on
        else:
            var.unlink(missing_ok=True)


def missing_tools() -> list[str]:
    return [t for t in ("ip", "unshare", "ssh", "ssh-keygen", "sshpass", "chroot") if shutil.which(t) is None]


@dataclass
class Files:
    dir: Path
    driver: Path
    driver_sha256: str
    token: Path
    wheels: Path


def make_wheel(directory: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel, so ml_stack installs from a wheel directory without a network."""
    module = name.replace("-", "_")
    dist = f"{module}-{version}.dist-info"
    files = {
        f"{module}.py": "VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: vgpuctl-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, content in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(content.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(content)}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    out = directory / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, content in files.items():
            zf.writestr(path, content)
    return out
