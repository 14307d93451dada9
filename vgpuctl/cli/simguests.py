"""`vgpuctl sim up --guests`: a guest for each VM the simulator powers on, so that `provision` runs end to end.

The guests are those of the guest tests (scripts/guests/guestctl.sh): Debian chroots running sshd, each in a
network namespace of its own on a host bridge, their root an overlay of one shared root filesystem (built
once with debootstrap and cached). gpusim runs guestctl.sh as its guest hook (-guests, -guest-hook): a VM that
powers on gets its guest, and gpusim reports the guest's address and state as VMware Tools does; power-off
stops it, destroying the VM removes it. `sim down` stops them all and checks that nothing is left.

Root only: network namespaces, mounts and chroot need it. The guests' folder is `guests/` in the simulator's
state folder; the guests' SSH host keys are kept per address in `guest-host-keys/` beside it, so the
known_hosts files that saw a guest stay valid for the next session's guest at that address.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from vgpuctl.cli import common
from vgpuctl.errors import UsageError, VgpuctlError

NEEDS_ROOT = (
    "sim up --guests needs root: it runs a Debian guest for each VM the simulator powers on, each in a network "
    "namespace of its own (a chroot on an overlay mount, sshd on a host bridge: scripts/guests/guestctl.sh); "
    "run it as root, or leave out --guests"
)
TOOLS = ("ip", "unshare", "chroot", "mount", "tar", "ssh", "ssh-keygen")
DEFAULT_PREFIX = "vgs"  # namespaces vgs1.., links vgs1h/vgs1g, bridge vgsbr (the guest tests use others)
DEFAULT_NET = "10.213.1"  # guest i at .(10+i); the host's end of the bridge at .1
PREPARE_TIMEOUT_S = 1800.0  # the first one runs debootstrap
DOWN_TIMEOUT_S = 300.0


class GuestsError(VgpuctlError):
    """The simulator's guests could not be prepared, or were not all removed."""


def guestctl(checkout: Path) -> Path:
    """scripts/guests/guestctl.sh of the checkout the simulator is built from."""
    script = checkout / "scripts" / "guests" / "guestctl.sh"
    if not script.is_file():
        raise GuestsError(f"sim up --guests needs the checkout's scripts/guests/guestctl.sh: {script} is missing")
    return script


def check_can_run() -> None:
    """Root and the tools guestctl.sh uses, before anything starts."""
    if os.geteuid() != 0:
        raise UsageError(NEEDS_ROOT)
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise UsageError(f"sim up --guests needs these tools: {', '.join(missing)} (Debian: the packages in "
                         "scripts/guest-test-packages.txt)")


def hook_env(state: Path) -> dict[str, str]:
    """gpusim's environment for its guest hook: the guests' names and network (the user's, else ours), and
    where the host keys are kept."""
    return {
        "VGPUCTL_GUEST_PREFIX": os.environ.get("VGPUCTL_GUEST_PREFIX") or DEFAULT_PREFIX,
        "VGPUCTL_GUEST_NET": os.environ.get("VGPUCTL_GUEST_NET") or DEFAULT_NET,
        "VGPUCTL_GUEST_HOST_KEYS": str(state / "guest-host-keys"),
    }


def guests_dir(state: Path) -> Path:
    return state / "guests"


def prepare(script: Path, state: Path) -> list[str]:
    """`guestctl.sh prepare` (the shared root filesystem, built the first time; the bridge); returns gpusim's
    flags for the guests."""
    directory = guests_dir(state)
    common.info("preparing the guests (the first time, debootstrap builds their Debian root filesystem from the "
                "Debian mirror: a few minutes) ...")
    _run(script, ["prepare", str(directory)], state, PREPARE_TIMEOUT_S)
    return ["-guests", str(directory), "-guest-hook", str(script)]


def _run(script: Path, args: list[str], state: Path, timeout_s: float) -> None:
    try:
        proc = subprocess.run([str(script), *args], env={**os.environ, **hook_env(state)}, capture_output=True,
                              text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise GuestsError(f"guestctl.sh {args[0]} did not finish within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-10:])
        raise GuestsError(f"guestctl.sh {args[0]} failed: {tail}")


def tear_down(script: Path | None, state: Path) -> bool:
    """Stop and remove every guest of the state folder (what gpusim left, if it could not), then check that
    nothing is left: no process in a guest's root, no guest namespace or link, no mount under the folder.
    Returns whether there was a guests' folder; raises GuestsError naming what is left."""
    directory = guests_dir(state)
    if not directory.is_dir():
        return False
    prefix = _recorded_prefix(directory)
    if script is not None:
        _run(script, ["down", str(directory)], state, DOWN_TIMEOUT_S)
    left = leftovers(directory, prefix)
    if left:
        raise GuestsError(f"the simulator's guests left {'; '.join(left)}: see {directory}")
    shutil.rmtree(directory)
    return True


def _recorded_prefix(directory: Path) -> str | None:
    try:
        text = (directory / "network").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"^prefix=(\S+)$", text, re.M)
    return match.group(1) if match else None


def leftovers(directory: Path, prefix: str | None) -> list[str]:
    """What of the guests under `directory` still exists: processes, namespaces and links, mounts."""
    left = []
    processes = _processes_rooted_in(directory)
    if processes:
        left.append("processes " + ", ".join(map(str, processes)))
    if prefix:
        names = _guest_network_names(prefix)
        if names:
            left.append("network namespaces or links " + ", ".join(names))
    mounts = _mounts_under(directory)
    if mounts:
        left.append("mounts " + ", ".join(mounts))
    return left


def _processes_rooted_in(directory: Path) -> list[int]:
    """Processes whose root directory is inside the folder (a guest's chroot), or that name it on their command
    line (the process holding a guest's namespaces); zombies have neither."""
    inside = str(directory.resolve()) + "/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            root = os.readlink(entry / "root")
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if (root + "/").startswith(inside) or inside in command:
            found.append(int(entry.name))
    return sorted(found)


def _guest_network_names(prefix: str) -> list[str]:
    """The guests' namespaces (PREFIX1, ...) and links (PREFIX1h, PREFIXbr) still there."""
    pattern = re.compile(rf"{re.escape(prefix)}(\d+[hg]?|br)")
    names = []
    for command in (["ip", "netns", "list"], ["ip", "-o", "link", "show"]):
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
        for line in proc.stdout.splitlines():
            words = line.replace(":", " ").replace("@", " ").split()
            names += [w for w in words[:3] if pattern.fullmatch(w)]
    return sorted(set(names))


def _mounts_under(directory: Path) -> list[str]:
    inside = str(directory.resolve())
    try:
        lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    points = [line.split()[4] for line in lines if len(line.split()) > 4]
    return [p for p in points if p == inside or p.startswith(inside + "/")]
