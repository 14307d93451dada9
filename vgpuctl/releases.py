"""NVIDIA's vGPU software releases and the rule that pairs a host's vGPU Manager with a guest driver.

The release table (vgpuctl/data/vgpu-releases.yaml, each row with its source) lists the driver branches (550 in
550.90.05), their vGPU release and support track, and, where a source gives them, the releases of a branch with
their vGPU Manager, Linux and Windows guest driver versions.

NVIDIA, "Virtual GPU Software R580 for VMware vSphere Release Notes" 19.0, section 1.2 "Compatibility
Requirements for the NVIDIA vGPU Manager and Guest VM Driver": the releases must be compatible, else "the NVIDIA
vGPU fails to load"; compatible are (1) the vGPU Manager with guest VM drivers from the same release, (2) the
vGPU Manager from a later major release branch with guest VM drivers from the previous branch, (3) the vGPU
Manager from a later long-term support branch with guest VM drivers from the previous long-term support branch.
Older notes (R525, R418) also list different releases within one branch; a branch whose notes do so is marked
in the table (`mixes_releases`).

Two readings of the rule:
- `compatibility(manager branch, guest branch)`: the branch-level reading preflight reports (the same branch
  passes, the branch before or the LTS branch before is a warning);
- `pair(manager version, guest version)`: the reading a driver upgrade window holds every running VM to, where
  nothing NVIDIA does not list may happen: the same branch counts only as the same release (both versions in one
  row of the table) unless the branch's notes allow mixing its releases; a version the table cannot place is
  unknown, which the window treats like incompatible and says why.
Pure: no I/O beyond the packaged table.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import cache

from vgpuctl.datafiles import data_folder, load_yaml_data
from vgpuctl.domain import CheckStatus
from vgpuctl.lazyclass import dataclass

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
    mixes_releases: bool = False  # its notes list different releases within the branch as compatible

    @property
    def label(self) -> str:
        return f"R{self.branch} (vGPU {self.vgpu})"


@dataclass(frozen=True)
class Release:
    """One vGPU software release: its number (19.0) and the driver versions it ships."""

    vgpu: str
    branch: int
    manager: str
    linux: str
    windows: str

    @property
    def guests(self) -> tuple[str, str]:
        return self.linux, self.windows


def _table() -> dict[str, object]:
    data = load_yaml_data(data_folder() / "vgpu-releases.yaml")
    return data if isinstance(data, dict) else {}


@cache
def branches() -> tuple[Branch, ...]:
    """The branches of the release table, oldest first."""
    rows = _table()["branches"]
    assert isinstance(rows, list)
    return tuple(sorted((Branch(int(r["branch"]), int(r["vgpu"]), Track(r["track"]), bool(r.get("mixes_releases")))
                         for r in rows), key=lambda b: b.branch))


@cache
def releases() -> tuple[Release, ...]:
    """The releases of the table whose versions a source gives."""
    rows = _table().get("releases") or []
    assert isinstance(rows, list)
    return tuple(Release(str(r["vgpu"]), int(r["branch"]), str(r["manager"]), str(r["linux"]), str(r["windows"]))
                 for r in rows)


def branch_of(version: str) -> int | None:
    """The release branch of a driver version or a text that carries one: `550.90.05` -> 550,
    `550.54.10-1OEM.800.1.0.20613240` -> 550, `NVIDIA-Linux-x86_64-550.90.07-grid.run` -> 550; None without one."""
    m = _VERSION.search(version or "")
    return int(m.group(1)) if m else None


def driver_version(text: str) -> str | None:
    """The driver version in a VIB version or a file name: `550.54.10-1OEM.800...` -> `550.54.10`."""
    m = _VERSION.search(text or "")
    return m.group(0) if m else None


def is_version(text: str) -> bool:
    """A whole driver version: three digits, then one or two dotted numbers (`580.65.05`, `580.88`)."""
    return bool(re.fullmatch(r"\d{3}\.\d+(?:\.\d+)?", text or ""))


def known(branch: int) -> Branch | None:
    return next((b for b in branches() if b.branch == branch), None)


def manager_release(version: str) -> Release | None:
    """The release whose vGPU Manager this version is."""
    v = driver_version(version)
    return next((r for r in releases() if r.manager == v), None)


def guest_branch(version: str) -> int | None:
    """The branch of a guest driver: its release's where the table lists it (a Windows driver's number need not
    name its branch: vGPU 15.0's is 527.41, of R525), else its first number."""
    release = guest_release(version)
    return release.branch if release is not None else branch_of(version)


def guest_release(version: str) -> Release | None:
    """The release whose Linux or Windows guest driver this version is."""
    v = driver_version(version)
    return next((r for r in releases() if v in r.guests), None)


# ------------------------------------------------------------------------------------------ the branch rule


class BranchRule(StrEnum):
    """Which part of NVIDIA's rule decides a pair of branches."""

    SAME = "same branch"
    PREVIOUS = "previous branch"
    PREVIOUS_LTS = "previous LTS branch"
    GUEST_NEWER = "guest newer"
    TOO_OLD = "more than one branch older"
    UNKNOWN = "branch not in the table"


@dataclass(frozen=True)
class Verdict:
    status: CheckStatus
    reason: str


def branch_rule(manager: int, guest: int) -> BranchRule:
    """The part of NVIDIA's rule that decides a manager branch with a guest driver branch."""
    if manager == guest:
        return BranchRule.SAME
    m, g = known(manager), known(guest)
    if m is None or g is None:
        return BranchRule.UNKNOWN
    if guest > manager:
        return BranchRule.GUEST_NEWER
    order = [b.branch for b in branches()]
    if order.index(manager) - order.index(guest) == 1:
        return BranchRule.PREVIOUS
    lts = [b.branch for b in branches() if b.track == Track.LTS]
    if m.track == Track.LTS and g.track == Track.LTS and lts.index(manager) - lts.index(guest) == 1:
        return BranchRule.PREVIOUS_LTS
    return BranchRule.TOO_OLD


def compatibility(manager: int, guest: int) -> Verdict:
    """Whether a guest driver of branch `guest` runs under a vGPU Manager of branch `manager`, branch by branch
    (preflight's reading): the same branch passes, the branch before or the LTS branch before is a warning."""
    rule = branch_rule(manager, guest)
    m, g = known(manager), known(guest)
    if rule == BranchRule.SAME:
        return Verdict(CheckStatus.PASS, f"same release branch R{manager}")
    if rule == BranchRule.UNKNOWN or m is None or g is None:
        unknown = ", ".join(f"R{b}" for b in (manager, guest) if known(b) is None)
        return Verdict(CheckStatus.WARN, f"{unknown} is not in vgpuctl's release table: compare the releases in "
                                         "NVIDIA's release notes")
    if rule == BranchRule.GUEST_NEWER:
        return Verdict(CheckStatus.FAIL, f"the guest driver's {g.label} is newer than the vGPU Manager's {m.label}: "
                                         "NVIDIA supports guest drivers of the same or an older branch only")
    if rule == BranchRule.PREVIOUS:
        return Verdict(CheckStatus.WARN, f"guest {g.label} is the branch before the vGPU Manager's {m.label}: "
                                         "compatible, with the older branch's features")
    if rule == BranchRule.PREVIOUS_LTS:
        return Verdict(CheckStatus.WARN, f"guest {g.label} is the LTS branch before the vGPU Manager's LTS "
                                         f"{m.label}: compatible, with the older branch's features")
    return Verdict(CheckStatus.FAIL, f"guest {g.label} is more than one branch older than the vGPU Manager's "
                                     f"{m.label}: not a combination NVIDIA lists as compatible")


# ------------------------------------------------------------------------------------------ the pair rule


class Fit(StrEnum):
    """Whether NVIDIA lists a manager and a guest driver as compatible (`pair`)."""

    YES = "compatible"
    NO = "incompatible"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Pair:
    """The verdict on one vGPU Manager version with one guest driver version, and the rule that gave it (one line,
    naming both versions)."""

    fit: Fit
    rule: str

    @property
    def ok(self) -> bool:
        return self.fit == Fit.YES


def pair(manager: str, guest: str) -> Pair:
    """Whether a guest driver version runs under a vGPU Manager version by NVIDIA's list (module docstring): the
    same release, the previous branch, or the previous LTS branch under an LTS manager; within one branch, other
    releases only where that branch's notes allow them; what the table cannot place is unknown."""
    mb, gb = branch_of(manager), guest_branch(guest)
    if mb is None or gb is None:
        bad = manager if mb is None else guest
        return Pair(Fit.UNKNOWN, f"manager {manager} with guest driver {guest}: {bad!r} is not a driver version")
    if mb == gb:
        return _same_branch(manager, guest, mb)
    rule = branch_rule(mb, gb)
    text = f"manager {manager} (R{mb}) with guest driver {guest} (R{gb})"
    if rule == BranchRule.PREVIOUS:
        return Pair(Fit.YES, f"{text}: the guest's is the branch before the manager's (NVIDIA: a later major "
                             "release branch with guest drivers from the previous branch)")
    if rule == BranchRule.PREVIOUS_LTS:
        return Pair(Fit.YES, f"{text}: the guest's is the LTS branch before the manager's LTS branch (NVIDIA: a later "
                             "long-term support branch with drivers from the previous long-term support branch)")
    if rule == BranchRule.UNKNOWN:
        missing = ", ".join(f"R{b}" for b in (mb, gb) if known(b) is None)
        return Pair(Fit.UNKNOWN, f"{text}: {missing} is not in vgpuctl's release table, so whether NVIDIA lists the "
                                 "pair is unknown")
    why = "the guest's branch is newer than the manager's" if rule == BranchRule.GUEST_NEWER else (
        "the guest's branch is more than one branch (and not the LTS branch) before the manager's")
    return Pair(Fit.NO, f"{text}: {why}; NVIDIA lists the same release, the previous branch and the previous LTS "
                        "branch as compatible, nothing else")


def _same_branch(manager: str, guest: str, branch: int) -> Pair:
    text = f"manager {manager} with guest driver {guest}"
    mr, gr = manager_release(manager), guest_release(guest)
    if mr is not None and gr is not None and mr.vgpu == gr.vgpu:
        return Pair(Fit.YES, f"{text}: the same release (vGPU {mr.vgpu})")
    info = known(branch)
    if info is not None and info.mixes_releases:
        return Pair(Fit.YES, f"{text}: releases of one branch R{branch}, which NVIDIA's R{branch} notes list as "
                             "compatible")
    if mr is not None and gr is not None:
        return Pair(Fit.NO, f"{text}: different releases of R{branch} (vGPU {mr.vgpu} and {gr.vgpu}); NVIDIA's "
                            "notes for this branch list only the same release")
    unplaced = ", ".join(v for v, r in ((manager, mr), (guest, gr)) if r is None)
    return Pair(Fit.UNKNOWN, f"{text}: vgpuctl's release table does not list {unplaced}, so whether both are of "
                             f"one release (what NVIDIA's notes for R{branch} ask) is unknown")


# ------------------------------------------------------------------------------------------ the VIB


# NVIDIA's vGPU Manager VIB names seen on ESXi 6.7 to 8: NVD-AIE_ESXi_8.0.0_Driver (vGPU for Compute / NVIDIA AI
# Enterprise), NVD-VMware_ESXi_8.0.0_Driver, NVIDIA-VMware_ESXi_7.0.2_Driver, NVIDIA-AIE_ESXi_7.0.2_Driver,
# NVIDIA-VMware_ESXi_6.7_Host_Driver (docs/preflight.md, "The vGPU Manager"); matched by name, never by vendor
_MANAGER_VIB = re.compile(r"^(NVD|NVIDIA)[-_](AIE|VMware)[-_].*driver$", re.IGNORECASE)


def is_manager_vib(name: str) -> bool:
    return bool(_MANAGER_VIB.match(name.strip()))


def manager_in(packages: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The vGPU Manager among installed packages (name, version): (name, version) or None."""
    return next(((n, v) for n, v in packages if is_manager_vib(n)), None)
