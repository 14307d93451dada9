"""vGPU profile names and board data from the vGPU type catalogue; mixing rules, per-VM limits, MMIO sizing.

The catalogue (`vgpuctl/data/vgpu-catalogue.yaml`, docs/vgpu-catalogue.md) is transcribed from NVIDIA's
tables: boards with device names and ids, MIG geometry, NVLink topology, and every vGPU type with its
framebuffer, series, MIG instance and maxima. vSphere names a type `grid_` or `nvidia_` + its lower-case
NVIDIA name (`grid_a100-3-20c`, `nvidia_h100l-94c`, `grid_a100-1-5cme`). Names the catalogue does not list
still parse when they follow the grammar (`<prefix><board>-[<slices>-]<fb><series>[me]`), marked unknown.
What the host reports wins over the catalogue (vgpuctl.vsphere.gpu_types). Pure functions only.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from vgpuctl.domain import GpuVgpuMode, ProfileSharing
from vgpuctl.model import ObservedProfile

PREFIXES = ("grid_", "nvidia_")
_GRAMMAR_RE = re.compile(
    r"(?P<board>[a-z][a-z0-9]*)-(?:(?P<slices>[1-9])-)?(?P<fb>[1-9][0-9]*)(?P<series>[abcq])(?P<me>me)?"
)
PROFILE_GRAMMAR = "grid_<board>-[<slices>-]<fb><series>, e.g. grid_a100-40c or grid_a100-3-20c"

# Series whose vGPUs expose a large BAR (compute): they need EFI firmware and 64-bit MMIO.
LARGE_BAR_SERIES = frozenset({"c"})


class ProfileError(ValueError):
    """A string that is not a vGPU profile name."""


class CatalogueError(ValueError):
    """The catalogue file is unreadable or inconsistent (caught by the unit tests, never by a user)."""


# ------------------------------------------------------------------------------------------ catalogue


@dataclass(frozen=True)
class MigGiProfile:
    """A GPU instance profile's fixed placements: `size` memory slots starting at one of `starts`."""

    name: str
    size: int
    starts: tuple[int, ...]
    id: int = -1
    slices: int = 0
    memory_gb: float = 0


@dataclass(frozen=True)
class VgpuType:
    """One row of NVIDIA's vGPU type table for one board."""

    name: str  # NVIDIA's name, e.g. A100-3-20C
    board: str  # vGPU board token, e.g. a100
    fb_gb: float
    series: str  # upper case: A B C Q
    mig_gi: str | None = None
    media: bool = False
    max_equal: int | None = None  # None: not published
    max_mixed: int | None = None  # None: mixed-size not supported or not published
    placement_size: int | None = None
    placement_ids: tuple[int, ...] = ()
    source: str = ""

    @property
    def vsphere_names(self) -> tuple[str, ...]:
        return tuple(prefix + self.name.lower() for prefix in PREFIXES)


@dataclass(frozen=True)
class BoardInfo:
    board: str  # vGPU board token
    model: str  # gpusim / fixture model name
    fb_gb: float
    mig_slots: int = 0  # memory slots of a MIG-capable GPU; 0 when MIG is not supported
    gi_profiles: tuple[MigGiProfile, ...] = ()
    nvlink_capable: bool = False
    aliases: tuple[str, ...] = ()
    device_names: tuple[str, ...] = ()
    pci_device_ids: tuple[int, ...] = ()
    mig_apply: str | None = None  # reboot | immediate
    nvlink_topology: str = "none"  # bridge-pairs | bridge-quads | nvswitch | none
    nvlink_links: int | None = None
    mmio_gb: int | None = None  # 64-bit MMIO space a VM needs per vGPU on this GPU (NVIDIA's table); None: not listed
    uvm_disables_nvlink_p2p: bool = False  # UVM on a multi-vGPU VM turns NVLink P2P off (NVIDIA: A100)
    source: str = ""
    types: dict[str, VgpuType] = field(default_factory=dict, compare=False, hash=False)  # lower name -> row

    @property
    def mig_capable(self) -> bool:
        return self.mig_slots > 0

    @property
    def mig_needs_reboot(self) -> bool:
        return self.mig_apply != "immediate"

    def gi(self, name: str) -> MigGiProfile | None:
        return next((g for g in self.gi_profiles if g.name == name), None)

    def type(self, name: str) -> VgpuType | None:
        """The row of an NVIDIA type name (`A100-40C`) or a vSphere name (`grid_a100-40c`)."""
        return self.types.get(_strip_prefix(name.lower()) or name.lower())


@dataclass(frozen=True)
class Catalogue:
    boards: dict[str, BoardInfo]  # board token -> board
    sources: dict[str, dict[str, str]]
    path: Path


def catalogue_path() -> Path:
    """The catalogue file this package reads (package data; gpusim is given the same path)."""
    return Path(str(resources.files("vgpuctl").joinpath("data", "vgpu-catalogue.yaml")))


def catalogue_digest(path: Path | None = None) -> str:
    """sha256 of the catalogue file's bytes: the Python and Go sides compare it to prove they read one file."""
    return hashlib.sha256((path or catalogue_path()).read_bytes()).hexdigest()


@cache
def load_catalogue(path: Path | None = None) -> Catalogue:
    import yaml

    file = path or catalogue_path()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(file.read_text(), Loader=loader)
    except (OSError, yaml.YAMLError) as err:
        raise CatalogueError(f"cannot read the vGPU type catalogue {file}: {err}") from err
    boards = {}
    for raw in data.get("boards") or []:
        board = _board(raw)
        boards[board.board] = board
    return Catalogue(boards=boards, sources=dict(data.get("sources") or {}), path=file)


def _board(raw: dict[str, Any]) -> BoardInfo:
    token = str(raw["vgpu_board"])
    mig = raw.get("mig") or {}
    nvlink = raw.get("nvlink") or {}
    types = {str(t["name"]).lower(): _type(token, t) for t in raw.get("vgpu_types") or []}
    return BoardInfo(
        board=token,
        model=str(raw["model"]),
        fb_gb=raw["framebuffer_gb"],
        mig_slots=int(mig.get("memory_slots", 0)),
        gi_profiles=tuple(
            MigGiProfile(str(g["name"]), int(g["size"]), tuple(g["starts"]), int(g["id"]), int(g["slices"]),
                         g["memory_gb"])
            for g in mig.get("gi_profiles") or []
        ),
        nvlink_capable=nvlink.get("topology", "none") != "none",
        aliases=tuple(raw.get("aliases") or ()),
        device_names=tuple(raw.get("device_names") or ()),
        pci_device_ids=tuple(int(i) for i in raw.get("pci_device_ids") or ()),
        mig_apply=mig.get("apply"),
        nvlink_topology=str(nvlink.get("topology", "none")),
        nvlink_links=nvlink.get("links"),
        mmio_gb=(raw.get("mmio") or {}).get("gb"),
        uvm_disables_nvlink_p2p=bool((raw.get("uvm") or {}).get("disables_nvlink_p2p")),
        source=str(raw.get("source", "")),
        types=types,
    )


def _type(token: str, t: dict[str, Any]) -> VgpuType:
    return VgpuType(
        name=str(t["name"]),
        board=token,
        fb_gb=t["fb_gb"],
        series=str(t["series"]),
        mig_gi=t.get("mig_gi"),
        media=bool(t.get("media", False)),
        max_equal=t.get("max_equal"),
        max_mixed=t.get("max_mixed"),
        placement_size=t.get("placement_size"),
        placement_ids=tuple(t.get("placement_ids") or ()),
        source=str(t.get("source", "")),
    )


class _Boards(Mapping[str, BoardInfo]):
    """Board token -> board, read from the catalogue on first use (keeps the file off the CLI's start)."""

    def _data(self) -> dict[str, BoardInfo]:
        return load_catalogue().boards

    def __getitem__(self, key: str) -> BoardInfo:
        return self._data()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._data())

    def __contains__(self, key: object) -> bool:
        return key in self._data()

    def get(self, key: str, default: Any = None) -> Any:
        return self._data().get(key, default)

    def values(self) -> ValuesView[BoardInfo]:  # the dict's own views: Mapping's would look each key up again
        return self._data().values()

    def items(self) -> ItemsView[str, BoardInfo]:
        return self._data().items()


BOARDS: Mapping[str, BoardInfo] = _Boards()


@cache
def _board_index() -> tuple[dict[int, list[str]], dict[str, list[str]]]:
    """Boards by PCI device id and by lower-case device name, in catalogue order."""
    by_id: dict[int, list[str]] = {}
    by_name: dict[str, list[str]] = {}
    for b in BOARDS.values():
        for device_id in dict.fromkeys(b.pci_device_ids):
            by_id.setdefault(device_id, []).append(b.board)
        for name in dict.fromkeys(d.lower() for d in b.device_names):
            by_name.setdefault(name, []).append(b.board)
    return by_id, by_name


@cache
def _type_index() -> dict[str, VgpuType]:
    """Lower-case NVIDIA type name -> row, over all boards (type names carry their board token)."""
    return {key: t for b in BOARDS.values() for key, t in b.types.items()}


# ------------------------------------------------------------------------------------------ names


@dataclass(frozen=True, order=True)
class VgpuProfile:
    name: str  # as given (vSphere spelling)
    board: str
    slices: int | None
    fb_gb: float
    series: str  # lower case
    gi: str | None = field(default=None, compare=False)  # GPU instance profile from the catalogue
    media: bool = field(default=False, compare=False)
    known: bool = field(default=True, compare=False)  # listed in the catalogue

    @property
    def is_mig(self) -> bool:
        return self.slices is not None

    @property
    def gi_profile(self) -> str | None:
        """The MIG GPU instance profile (`3g.20gb`, `1g.5gb+me`), or None for a time-sliced profile."""
        if self.gi is not None:
            return self.gi
        if self.slices is None:
            return None
        return f"{self.slices}g.{_num(self.fb_gb)}gb" + ("+me" if self.media else "")

    @property
    def large_bar(self) -> bool:
        return self.series in LARGE_BAR_SERIES

    @property
    def type_name(self) -> str:
        """NVIDIA's name of the type: `grid_a100-3-20c` -> `A100-3-20C`."""
        return (_strip_prefix(self.name) or self.name).upper()

    @property
    def vgpu_type(self) -> VgpuType | None:
        return _type_index().get(_strip_prefix(self.name) or "")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _strip_prefix(name: str) -> str | None:
    for prefix in PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return None


def _bad(name: object, why: str = "") -> ProfileError:
    return ProfileError(f"not a vGPU profile name: {name!r} ({why or 'expected ' + PROFILE_GRAMMAR})")


def parse_profile(name: str) -> VgpuProfile:
    """Parse a vSphere vGPU profile name; raise ProfileError when it is neither in the catalogue nor follows the
    grammar. Names the catalogue lists take its framebuffer, series and MIG instance."""
    if not isinstance(name, str):
        raise _bad(name)
    return _parse_name(name)


@lru_cache(maxsize=4096)  # placement asks for the same few names hundreds of thousands of times on large farms
def _parse_name(name: str) -> VgpuProfile:
    rest = _strip_prefix(name)
    if rest is None:
        raise _bad(name)
    row = _type_index().get(rest)
    if row is not None:
        m = _GRAMMAR_RE.fullmatch(rest)
        slices = int(m["slices"]) if m and m["slices"] else (int(row.mig_gi[0]) if row.mig_gi else None)
        return VgpuProfile(name, row.board, slices, row.fb_gb, row.series.lower(), row.mig_gi, row.media, True)
    m = _GRAMMAR_RE.fullmatch(rest)
    if m is None:
        raise _bad(name)
    slices = int(m["slices"]) if m["slices"] else None
    if slices is not None and slices > 7:
        raise _bad(name, "MIG slices are 1..7")
    if m["me"] and slices is None:
        raise _bad(name, "media extensions exist only on MIG-backed types")
    return VgpuProfile(name, m["board"], slices, int(m["fb"]), m["series"], None, bool(m["me"]), False)


def try_parse(name: str) -> VgpuProfile | None:
    """parse_profile, or None for a name no table explains: for code that must never raise on host data."""
    try:
        return parse_profile(name)
    except ProfileError:
        return None


def is_profile(name: str) -> bool:
    return try_parse(name) is not None


def spellings(name: str) -> tuple[str, ...]:
    """Every vSphere spelling of the type a profile name names (`grid_a100-40c` -> grid_ and nvidia_ forms)."""
    bare = _strip_prefix(name)
    return tuple(prefix + bare for prefix in PREFIXES) if bare else (name,)


_HOST_SPELLING_RE = re.compile(r"(?:grid|nvidia)_[a-z0-9]+(?:-[a-z0-9]+)+")


def is_host_spelling(name: str) -> bool:
    """Spelled like a vSphere vGPU profile (`grid_`/`nvidia_`, lower-case words joined by hyphens), whether or not
    a table explains it: a host with a newer driver may offer it, so only the host can say it does not exist."""
    return bool(_HOST_SPELLING_RE.fullmatch(name))


def mixing_problem(profiles: Iterable[str | VgpuProfile]) -> str | None:
    """Why these vGPUs cannot share one VM, or None. All vGPUs of a VM share board and series;
    framebuffer sizes may differ."""
    parsed = [p if isinstance(p, VgpuProfile) else parse_profile(p) for p in profiles]
    if len(parsed) < 2:  # one vGPU mixes with nothing
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


def board_for_model(model: str) -> str | None:
    """Board token of a catalogue model name (`A100-40GB`), one of its aliases, or a board token (`a100`)."""
    key = model.strip().lower()
    if key in BOARDS:
        return key
    for b in BOARDS.values():
        if key == b.model.lower() or key in (a.lower() for a in b.aliases):
            return b.board
    return None


def known_models() -> list[str]:
    return [b.model for b in BOARDS.values()]


def board_for_device(
    device_name: str, memory_gb: float | None = None, device_id: int | None = None, offered: Iterable[str] = ()
) -> str | None:
    """Board of a physical GPU: by PCI device id, else by the exact device name the host reports, else by the
    boards of the profiles the host offers (narrowed by the GPU's memory). Never by substrings of the name."""
    ids, names = _board_index()
    if device_id:
        by_id = ids.get(device_id, [])
        if len(by_id) == 1:
            return by_id[0]
    by_name = names.get(device_name.strip().lower(), [])
    if len(by_name) == 1:
        return by_name[0]
    return board_from_offered(offered, memory_gb)


def board_from_offered(offered: Iterable[str], memory_gb: float | None = None) -> str | None:
    """The one catalogue board the host's offered profile names belong to (narrowed by GPU memory), or None."""
    boards = {p.board for name in offered if (p := try_parse(name)) is not None and p.board in BOARDS}
    if memory_gb:
        sized = {b for b in boards if _memory_matches(BOARDS[b].fb_gb, memory_gb)}
        boards = sized or boards
    return next(iter(boards)) if len(boards) == 1 else None


def _memory_matches(board_gb: float, reported_gb: float) -> bool:
    # graphicsInfo.memorySizeInKB is the usable memory, a little below the nominal size.
    return board_gb * 0.9 <= reported_gb <= board_gb * 1.05


def gi_geometry(board: str, gi_profile: str) -> MigGiProfile | None:
    info = BOARDS.get(board)
    return info.gi(gi_profile) if info else None


def offered_alternatives(wanted: str, offered: Iterable[str], limit: int = 6) -> list[str]:
    """Offered profile names closest to `wanted`: same board first, then by framebuffer distance."""
    want = try_parse(wanted)
    names = sorted(set(offered))

    def rank(name: str) -> tuple[int, float, str]:
        p = try_parse(name)
        if p is None or want is None:
            return (2, 0.0, name)
        return (0 if p.board == want.board else 1, abs(p.fb_gb - want.fb_gb), name)

    return sorted(names, key=rank)[:limit]


# ------------------------------------------------------------------------------------------- limits


def max_vgpus_per_vm(api_version: str) -> int:
    """vGPUs per VM allowed by vSphere: 4 before 8.0, 8 from 8.0 (docs/gpu-rules.md)."""
    try:
        major = int(str(api_version).split(".")[0])
    except ValueError:
        return 4
    return 8 if major >= 8 else 4


def api_at_least(api_version: str | None, wanted: tuple[int, ...]) -> bool:
    """Whether a vSphere API version string (`8.0.1.0`) is at least `wanted`; False when unreadable."""
    parts = tuple(int(p) for p in re.findall(r"\d+", api_version or "")[: len(wanted)])
    return bool(parts) and parts >= wanted


# ---------------------------------------------------------------------------------------- maxima


def max_per_gpu(profile: VgpuProfile, vgpu_mode: str, gpu_fb_gb: float | None = None) -> int | None:
    """NVIDIA's maximum of vGPUs of this type per GPU in the GPU's mode (the catalogue row's table): `max_equal`
    for a MIG-backed type (per GPU in MIG mode) and in equal-size mode, `max_mixed` in mixed-size mode (None: not
    published, vgpuctl refuses the type there). A type outside the catalogue in equal-size mode: framebuffer /
    size, an upper bound (the tables cap some types below it: L40S-1B 32 on 48 GB). None when nothing says."""
    row = profile.vgpu_type
    if profile.is_mig:
        return row.max_equal if row is not None else None
    if vgpu_mode == GpuVgpuMode.MIXED_SIZE:
        return row.max_mixed if row is not None else None
    if row is not None and row.max_equal is not None:
        return row.max_equal
    return int(gpu_fb_gb // profile.fb_gb) if gpu_fb_gb and profile.fb_gb else None


# --------------------------------------------------------------------------------------------- MMIO

MMIO_GB_PER_40GB_FB = 128  # 128 GB per A100-40GB, 256 GB per 80 GB GPU (VMware KB 2142307)
MMIO_MIN_GB = 64  # "The VM's MMIO space must be increased 64GB or more" (NVIDIA, Using NVIDIA vGPU (C-Series))
VM_OPERATOR_MMIO_GB = 512  # vm-operator's pciPassthru.64bitMMIOSizeGB for VMs with PCI devices (v1.9 to v1.10)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def gpu_mmio_gb(profile: VgpuProfile) -> int:
    """MMIO space one vGPU of this profile needs: what NVIDIA's table requires for its physical GPU (catalogue
    `mmio.gb`: A100 40GB 128, A100 80GB and H100 256, H200 512, ...), whatever the vGPU's own framebuffer. A
    board the table does not list (L40S, A16) or a type outside the catalogue: the KB 2142307 guideline scaled to
    the physical GPU's framebuffer (128 GB per 40 GB; the vGPU's when the board is unknown), rounded up to a
    power of two, at least 64 (conservative: more MMIO space costs address space only)."""
    info = BOARDS.get(profile.board)
    if info is not None and info.mmio_gb:
        return info.mmio_gb
    fb = info.fb_gb if info is not None else profile.fb_gb
    return max(MMIO_MIN_GB, next_pow2(math.ceil(fb * MMIO_GB_PER_40GB_FB / 40)))


def mmio_size_gb(profiles: Iterable[VgpuProfile]) -> int:
    """pciPassthru.64bitMMIOSizeGB for a VM with these vGPUs: the sum of what each vGPU's physical GPU needs
    (each vGPU of a VM sits on its own GPU), rounded up to a power of two, at least 64. One A100-10C -> 128 (its
    GPU's), one A100D-80C -> 256, 4 x A100-40C -> 512, 3 x A100-40C -> 512, 8 x H100-80C -> 2048, 2 x H200-141C
    -> 1024."""
    total = sum(gpu_mmio_gb(p) for p in profiles)
    return max(MMIO_MIN_GB, next_pow2(total)) if total else MMIO_MIN_GB


def class_mmio_size_gb(profiles: Iterable[VgpuProfile]) -> int | None:
    """pciPassthru.64bitMMIOSizeGB a VM class must set, or None to leave vm-operator's own default alone:
    vm-operator sets 512 GB (and 64-bit MMIO) on VMs with PCI devices unless the class sets a value, so a class
    needs its own only when its vGPUs need more (2 x H200 -> 1024); it never goes below vm-operator's."""
    need = mmio_size_gb(profiles)
    return need if need > VM_OPERATOR_MMIO_GB else None


def observed_profile(name: str) -> ObservedProfile:
    """A profile's facts when the host cannot describe it: the catalogue row, else the name's grammar; a name
    neither explains gets framebuffer 0 (and blocks any GPU that holds it in placement)."""
    p = try_parse(name)
    if p is None:
        return ObservedProfile(name=name, fb_gb=0)
    return ObservedProfile(
        name=name,
        fb_gb=int(p.fb_gb),
        sharing=ProfileSharing.MIG if p.is_mig else ProfileSharing.TIME_SLICED,
        profile_class="quadro" if p.series == "q" else "compute",
    )
