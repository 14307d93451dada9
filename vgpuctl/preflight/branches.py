"""The NVIDIA vGPU Manager (host) / guest driver compatibility rule, and the driver versions it compares.

NVIDIA, "Virtual GPU Software R580 for VMware vSphere Release Notes" 19.0, section 1.2 "Compatibility
Requirements for the NVIDIA vGPU Manager and Guest VM Driver": the releases must be compatible, else "the NVIDIA
vGPU fails to load"; compatible are (1) the vGPU Manager with guest VM drivers from the same release, (2) the
vGPU Manager from a later major release branch with guest VM drivers from the previous branch, (3) the vGPU
Manager from a later long-term support branch with guest VM drivers from the previous long-term support branch.

vgpuctl compares release branches (the first number of a driver version: 550 in 550.90.05): a manager and a
guest driver of one release carry different versions (550.90.05 and 550.90.07), so whole versions are never
compared. Conservative where the notes leave room (docs/preflight.md): the same branch passes; a guest one
branch older, or the previous LTS branch under an LTS manager, is compatible with a warning (NVIDIA limits it
to the older branch's features); anything else fails, a guest driver newer than the manager in particular. A
branch the release table does not list is a warning: vgpuctl cannot tell. Pure: no I/O beyond the packaged
table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources

from vgpuctl.domain import CheckStatus

_VERSION = re.compile(r"(?<![\d.])(\d{3})\.(\d+)(?:\.(\d+))?(?![\d])")


class Track(StrEnum):
    LTS = "lts"
    PRODUCTION = "production"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Branch:
    branch: int  # 550
    vgpu: int  # the vGPU software release: 17
    track: Track

    @property
    def label(self) -> str:
        return f"R{self.branch} (vGPU {self.vgpu})"


@cache
def branches() -> tuple[Branch, ...]:
    """The release table (vgpuctl/data/vgpu-releases.yaml), oldest branch first."""
    import yaml

    text = resources.files("vgpuctl").joinpath("data", "vgpu-releases.yaml").read_text(encoding="utf-8")
    rows = yaml.safe_load(text)["branches"]
    return tuple(sorted((Branch(int(r["branch"]), int(r["vgpu"]), Track(r["track"])) for r in rows),
                        key=lambda b: b.branch))


def branch_of(version: str) -> int | None:
    """The release branch of a driver version or a text that carries one: `550.90.05` -> 550,
    `550.54.10-1OEM.800.1.0.20613240` -> 550, `NVIDIA-Linux-x86_64-550.90.07-grid.run` -> 550; None without one."""
    m = _VERSION.search(version or "")
    return int(m.group(1)) if m else None


def driver_version(text: str) -> str | None:
    """The driver version in a VIB version or a file name: `550.54.10-1OEM.800...` -> `550.54.10`."""
    m = _VERSION.search(text or "")
    return m.group(0) if m else None


def known(branch: int) -> Branch | None:
    return next((b for b in branches() if b.branch == branch), None)


@dataclass(frozen=True)
class Verdict:
    status: CheckStatus
    reason: str


def compatibility(manager: int, guest: int) -> Verdict:
    """Whether a guest driver of branch `guest` runs under a vGPU Manager of branch `manager` (module docstring)."""
    table = branches()
    m, g = known(manager), known(guest)
    if manager == guest:
        return Verdict(CheckStatus.PASS, f"same release branch R{manager}")
    if m is None or g is None:
        unknown = ", ".join(f"R{b}" for b in (manager, guest) if known(b) is None)
        return Verdict(CheckStatus.WARN, f"{unknown} is not in vgpuctl's release table: compare the releases in "
                                         "NVIDIA's release notes")
    if guest > manager:
        return Verdict(CheckStatus.FAIL, f"the guest driver's {g.label} is newer than the vGPU Manager's {m.label}: "
                                         "NVIDIA supports guest drivers of the same or an older branch only")
    order = [b.branch for b in table]
    if order.index(manager) - order.index(guest) == 1:
        return Verdict(CheckStatus.WARN, f"guest {g.label} is the branch before the vGPU Manager's {m.label}: "
                                         "compatible, with the older branch's features")
    lts = [b.branch for b in table if b.track == Track.LTS]
    if m.track == Track.LTS and g.track == Track.LTS and lts.index(manager) - lts.index(guest) == 1:
        return Verdict(CheckStatus.WARN, f"guest {g.label} is the LTS branch before the vGPU Manager's LTS "
                                         f"{m.label}: compatible, with the older branch's features")
    return Verdict(CheckStatus.FAIL, f"guest {g.label} is more than one branch older than the vGPU Manager's "
                                     f"{m.label}: not a combination NVIDIA lists as compatible")


# NVIDIA's vGPU Manager VIB names seen on ESXi 6.7 to 8: NVD-AIE_ESXi_8.0.0_Driver (vGPU for Compute / NVIDIA AI
# Enterprise), NVD-VMware_ESXi_8.0.0_Driver, NVIDIA-VMware_ESXi_7.0.2_Driver, NVIDIA-AIE_ESXi_7.0.2_Driver,
# NVIDIA-VMware_ESXi_6.7_Host_Driver (docs/preflight.md, "The vGPU Manager"); matched by name, never by vendor
_MANAGER_VIB = re.compile(r"^(NVD|NVIDIA)[-_](AIE|VMware)[-_].*driver$", re.IGNORECASE)


def is_manager_vib(name: str) -> bool:
    return bool(_MANAGER_VIB.match(name.strip()))


def manager_in(packages: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The vGPU Manager among installed packages (name, version): (name, version) or None."""
    return next(((n, v) for n, v in packages if is_manager_vib(n)), None)
