"""vGPU profile names, the rules for mixing profiles in one VM, GPU board data and MMIO sizing.

Profile grammar (docs/gpu-rules.md): `grid_<board>-[<slices>-]<fb><series>`, series one of a b c q.
`grid_a100-40c` is time-sliced (40 GB, compute); `grid_a100-3-20c` is MIG-backed (3 compute slices, 20 GB,
GPU instance profile 3g.20gb). Pure functions only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

PROFILE_RE = re.compile(
    r"^grid_(?P<board>[a-z][a-z0-9]*)-(?:(?P<slices>[1-9])-)?(?P<fb>[1-9][0-9]*)(?P<series>[abcq])$"
)
PROFILE_GRAMMAR = "grid_<board>-[<slices>-]<fb><series>, e.g. grid_a100-40c or grid_a100-3-20c"

# Series whose vGPUs expose a large BAR (compute): they need EFI firmware and 64-bit MMIO (DOMAIN.md).
LARGE_BAR_SERIES = frozenset({"c"})


class ProfileError(ValueError):
    """A string that is not a vGPU profile name."""


@dataclass(frozen=True, order=True)
class VgpuProfile:
    name: str
    board: str
    slices: int | None
    fb_gb: int
    series: str

    @property
    def is_mig(self) -> bool:
        return self.slices is not None

    @property
    def gi_profile(self) -> str | None:
        """The MIG GPU instance profile, `<slices>g.<fb>gb`, or None for a time-sliced profile."""
        return f"{self.slices}g.{self.fb_gb}gb" if self.slices is not None else None

    @property
    def large_bar(self) -> bool:
        return self.series in LARGE_BAR_SERIES


def parse_profile(name: str) -> VgpuProfile:
    """Parse a vSphere vGPU profile name; raise ProfileError when it does not follow the grammar."""
    if not isinstance(name, str):
        raise ProfileError(f"not a vGPU profile name: {name!r} (expected {PROFILE_GRAMMAR})")
    m = PROFILE_RE.match(name)
    if m is None:
        raise ProfileError(f"not a vGPU profile name: {name!r} (expected {PROFILE_GRAMMAR})")
    slices = int(m["slices"]) if m["slices"] else None
    if slices is not None and slices > 7:
        raise ProfileError(f"not a vGPU profile name: {name!r} (MIG slices are 1..7)")
    return VgpuProfile(name=name, board=m["board"], slices=slices, fb_gb=int(m["fb"]), series=m["series"])


def is_profile(name: str) -> bool:
    try:
        parse_profile(name)
    except ProfileError:
        return False
    return True


def mixing_problem(profiles: Iterable[str | VgpuProfile]) -> str | None:
    """Why these vGPUs cannot share one VM, or None. All vGPUs of a VM share board and series (DOMAIN.md);
    framebuffer sizes may differ."""
    parsed = [p if isinstance(p, VgpuProfile) else parse_profile(p) for p in profiles]
    if not parsed:
        return None
    boards = sorted({p.board for p in parsed})
    if len(boards) > 1:
        return f"vGPUs of one VM must share a board type (got {', '.join(boards)})"
    series = sorted({p.series for p in parsed})
    if len(series) > 1:
        return f"vGPUs of one VM must share a series (got {', '.join(s.upper() for s in series)})"
    return None


def compatible_in_one_vm(profiles: Iterable[str | VgpuProfile]) -> bool:
    return mixing_problem(profiles) is None


# ------------------------------------------------------------------------------------------- boards


@dataclass(frozen=True)
class MigGiProfile:
    """A GPU instance profile's fixed placements: `size` memory slots starting at one of `starts`."""

    name: str
    size: int
    starts: tuple[int, ...]


@dataclass(frozen=True)
class BoardInfo:
    board: str
    model: str
    fb_gb: int
    mig_slots: int = 0  # memory slots of a MIG-capable GPU; 0 when MIG is not supported
    gi_profiles: tuple[MigGiProfile, ...] = ()
    nvlink_capable: bool = False

    @property
    def mig_capable(self) -> bool:
        return self.mig_slots > 0

    def gi(self, name: str) -> MigGiProfile | None:
        return next((g for g in self.gi_profiles if g.name == name), None)


def _geometry(unit_gb: int) -> tuple[MigGiProfile, ...]:
    """A100/H100 MIG geometry (8 memory slots); `unit_gb` is the memory of one slot (5 or 10)."""
    u = unit_gb
    return (
        MigGiProfile(f"1g.{u}gb", 1, (0, 1, 2, 3, 4, 5, 6)),
        MigGiProfile(f"1g.{2 * u}gb", 2, (0, 2, 4, 6)),
        MigGiProfile(f"2g.{2 * u}gb", 2, (0, 2, 4)),
        MigGiProfile(f"3g.{4 * u}gb", 4, (0, 4)),
        MigGiProfile(f"4g.{4 * u}gb", 4, (0,)),
        MigGiProfile(f"7g.{8 * u}gb", 8, (0,)),
    )


# Fallback data used when the host does not say (docs/gpu-rules.md). The host's own data wins.
BOARDS: dict[str, BoardInfo] = {
    "a100": BoardInfo("a100", "A100-40GB", 40, 8, _geometry(5), True),
    "a100d": BoardInfo("a100d", "A100-80GB", 80, 8, _geometry(10), True),
    "h100": BoardInfo("h100", "H100-80GB", 80, 8, _geometry(10), True),
    "l40s": BoardInfo("l40s", "L40S", 48),
    "a40": BoardInfo("a40", "A40", 48, nvlink_capable=True),
}

_MODEL_ALIASES = {b.model.lower(): b.board for b in BOARDS.values()}


def board_for_model(model: str) -> str | None:
    """Board of a GPU model name as used in fixtures (`A100-40GB`) or a board name itself (`a100`)."""
    key = model.strip().lower()
    if key in BOARDS:
        return key
    return _MODEL_ALIASES.get(key)


def board_for_device(device_name: str, memory_gb: int | None = None) -> str | None:
    """Board of a physical GPU from the name the host reports (`NVIDIA A100-PCIE-40GB`, `NVIDIA L40S`)."""
    name = device_name.lower().replace(" ", "").replace("-", "")
    if "h100" in name:
        return "h100"
    if "a100" in name:
        big = "80gb" in name or (memory_gb is not None and memory_gb > 40)
        return "a100d" if big else "a100"
    if "l40s" in name:
        return "l40s"
    if "a40" in name:
        return "a40"
    return None


def gi_geometry(board: str, gi_profile: str) -> MigGiProfile | None:
    info = BOARDS.get(board)
    return info.gi(gi_profile) if info else None


# ------------------------------------------------------------------------------------------- limits


def max_vgpus_per_vm(api_version: str) -> int:
    """vGPUs per VM allowed by vSphere: 4 before 8.0, 8 from 8.0 (docs/gpu-rules.md)."""
    try:
        major = int(str(api_version).split(".")[0])
    except ValueError:
        return 4
    return 8 if major >= 8 else 4


# --------------------------------------------------------------------------------------------- MMIO

MMIO_GB_PER_40GB_FB = 128  # DOMAIN.md: 128 GB per A100-40GB, 256 GB per 80 GB GPU (VMware KB 2142307)
MMIO_MIN_GB = 64


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def mmio_size_gb(fb_gbs: Iterable[int]) -> int:
    """pciPassthru.64bitMMIOSizeGB for vGPUs with these framebuffers.

    Rule: the DOMAIN.md guideline scaled to the VM's total vGPU framebuffer (128 GB of MMIO per 40 GB of
    framebuffer, i.e. 3.2 x the total), rounded up to a power of two, at least 64. One A100-40C -> 128,
    one A100D-80C -> 256, 4 x A100-40C -> 512, 3 x A100-40C -> 512, 8 x H100-80C -> 2048, 1 x A100-10C -> 64.
    """
    total = sum(fb_gbs)
    if total <= 0:
        return MMIO_MIN_GB
    guideline = math.ceil(total * MMIO_GB_PER_40GB_FB / 40)
    return max(MMIO_MIN_GB, next_pow2(guideline))
