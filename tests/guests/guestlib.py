"""Shared by the guest tests: the guests, the files the roles get, the secrets that must not leak."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUESTCTL = ROOT / "scripts" / "guests" / "guestctl.sh"
FAKE_INSTALLER = Path(__file__).with_name("fake-nvidia-installer.sh")
FAKE_BOOT = Path(__file__).with_name("fake-boot.sh")
FAKE_EVENTS = "/var/log/vgpuctl-fake-events"
NOUVEAU_SYSFS = "sys/module/nouveau"  # in the guest's root: sysfs is not mounted in the chroot guests
DRIVER_VERSION = "550.90.07"
TOKEN_CONTENT = "vgpuctl-test-token-7f3a9c1e-CONTENT-do-not-leak"
GUEST_PASSWORD = "vgpuctl-test-guest-pw-51b2d8"
VCENTER_PASSWORD = "vgpuctl-test-vcenter-pw-93c4aa"
SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _run_network(pid: int, taken: str) -> dict[str, str]:
    """Names and a /24 of this test run's own, so neither a developer's guests from guestctl.sh (prefix vgg,
    10.213.0.x) nor a second test run on the same machine (which would tear down our namespaces) collide. The
    /24 is the first from the pid's on that no interface holds (`taken`: `ip -o -4 addr`): a run that was killed
    before its teardown leaves its bridge and its /24 behind."""
    third = next((n for n in (20 + (pid + i) % 200 for i in range(200)) if f" 10.213.{n}." not in taken),
                 20 + pid % 200)
    return {"VGPUCTL_GUEST_PREFIX": f"t{pid % 100000:05d}", "VGPUCTL_GUEST_NET": f"10.213.{third}"}


def _addresses() -> str:
    try:
        return subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=False).stdout
    except OSError:  # no iproute2: guestctl.sh says what is missing
        return ""


ENV = _run_network(os.getpid(), _addresses())


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

    def install_fake_boot(self, guest: Guest) -> None:
        """Reboots for a chroot guest (see fake-boot.sh): fake shutdown and update-initramfs, and a boot id file
        bind-mounted over /proc/sys/kernel/random/boot_id in the guest's own mount namespace."""
        state = guest.root / "var" / "lib" / "fake-boot"
        state.mkdir(parents=True, exist_ok=True)
        (state / "boot_id").write_text(Path("/proc/sys/kernel/random/uuid").read_text())
        for name in ("shutdown", "update-initramfs"):
            target = guest.root / "usr" / "sbin" / name
            target.unlink(missing_ok=True)
            shutil.copyfile(FAKE_BOOT, target)
            target.chmod(0o755)
        subprocess.run(
            [
                "nsenter",
                "-t",
                str(self.init_pid(guest)),
                "-m",
                "mount",
                "--bind",
                str(state / "boot_id"),
                str(guest.root / "proc" / "sys" / "kernel" / "random" / "boot_id"),
            ],
            check=True,
            capture_output=True,
        )

    def init_pid(self, guest: Guest) -> int:
        """The guest's PID 1 (as the host sees it): the child of the unshare process guestctl.sh recorded."""
        pid = (self.dir / guest.name / "pid").read_text().strip()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return int(children[0])

    def set_nouveau_loaded(self, guest: Guest, loaded: bool) -> None:
        """What the kernel shows for a loaded nouveau module: /sys/module/nouveau with initstate "live"."""
        module = guest.root / NOUVEAU_SYSFS
        if loaded:
            module.mkdir(parents=True, exist_ok=True)
            (module / "initstate").write_text("live\n")
        else:
            shutil.rmtree(module, ignore_errors=True)

    def events(self, guest: Guest) -> list[str]:
        """What the fake installer, update-initramfs and shutdown did, in order."""
        log = guest.root / FAKE_EVENTS.lstrip("/")
        return log.read_text().splitlines() if log.exists() else []

    def set_secure_boot(self, guest: Guest, enabled: bool) -> None:
        var = guest.root / SECURE_BOOT_VAR
        if enabled:
            var.parent.mkdir(parents=True, exist_ok=True)
            var.write_bytes(b"\x06\x00\x00\x00\x01")  # EFI attributes, then 1 = Secure Boot on
        else:
            var.unlink(missing_ok=True)


def missing_tools() -> list[str]:
    tools = ("ip", "unshare", "nsenter", "ssh", "ssh-keygen", "sshpass", "chroot")
    return [t for t in tools if shutil.which(t) is None]


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


def guest_pair() -> Iterator[Guests]:
    """Two fresh guests (Debian chroots with sshd in network namespaces), torn down afterwards."""
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
