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
from dataclasses import field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from vgpuctl.datafiles import data_folder, load_yaml_data
from vgpuctl.domain import GpuVgpuMode, ProfileSharing
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import ObservedGpu, ObservedProfile

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
    pci_names: tuple[str, ...] = ()  # pci.ids names (`GA100 [A100 PCIe 40GB]`), as esxcli and lspci print them
    pci_device_ids: tuple[int, ...] = ()
    mig_apply: str | None = None  # reboot | immediate
    nvlink_topology: str = "none"  # bridge-pairs | bridge-quads | nvswitch | none
    nvlink_links: int | None = None  # links per GPU its bridge or baseboard wires (None: not published)
    nvlink_listed: int | None = None  # links per GPU `nvidia-smi nvlink -s` lists, wired or not
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
    # vSphere API version from which an equal-size GPU takes vGPUs of different types with one size (`vsphere:`)
    same_size_any_type_since: tuple[int, ...] = (8, 0, 2)


def catalogue_path() -> Path:
    """The catalogue file this package reads (package data; gpusim is given the same path)."""
    return data_folder() / "vgpu-catalogue.yaml"


def catalogue_digest(path: Path | None = None) -> str:
    """sha256 of the catalogue file's bytes: the Python and Go sides compare it to prove they read one file."""
    return hashlib.sha256((path or catalogue_path()).read_bytes()).hexdigest()


@cache
def load_catalogue(path: Path | None = None) -> Catalogue:
    import yaml

    file = path or catalogue_path()
    try:
        data = load_yaml_data(file)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise CatalogueError(f"cannot read the vGPU type catalogue {file}: {err}") from err
    boards = {}
    for raw in data.get("boards") or []:
        board = _board(raw)
        boards[board.board] = board
    since = str((data.get("vsphere") or {}).get("same_size_any_type_since") or "")
    if not re.fullmatch(r"\d+(\.\d+)*", since):
        raise CatalogueError(f"{file}: vsphere.same_size_any_type_since must be a vSphere API version (got {since!r})")
    return Catalogue(boards=boards, sources=dict(data.get("sources") or {}), path=file,
                     same_size_any_type_since=tuple(int(p) for p in since.split(".")))


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
        pci_names=tuple(raw.get("pci_names") or ()),
        pci_device_ids=tuple(int(i) for i in raw.get("pci_device_ids") or ()),
        mig_apply=mig.get("apply"),
        nvlink_topology=str(nvlink.get("topology", "none")),
        nvlink_links=nvlink.get("links"),
        nvlink_listed=nvlink.get("listed", nvlink.get("links")),
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
    """Boards by PCI device id and by device name (the names NVML reports and the pci.ids names, as _name_key
    spells them), in catalogue order."""
    by_id: dict[int, list[str]] = {}
    by_name: dict[str, list[str]] = {}
    for b in BOARDS.values():
        for device_id in dict.fromkeys(b.pci_device_ids):
            by_id.setdefault(device_id, []).append(b.board)
        for name in dict.fromkeys(_name_key(d) for d in (*b.device_names, *b.pci_names)):
            by_name.setdefault(name, []).append(b.board)
    return by_id, by_name


def _name_key(name: str) -> str:
    """A device name for lookup: lower case, runs of blanks as one, none before `[` (pci.ids has spelled
    `GH100[H100 SXM5 80GB]` and `GH100 [H100 SXM5 80GB]`)."""
    return re.sub(r"\s+", " ", name.strip().lower()).replace(" [", "[")


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


# The last part of every vGPU type name is its frame buffer in GB and then its series letter (A, B, C, Q; MIG
# media types add `me`): NVIDIA's vGPU type tables (docs/vgpu-catalogue.md). A newer driver may add boards, sizes
# and suffixes, but a name whose last part has no letter after the size (`grid_a100-40`) names no type.
_HOST_SPELLING_RE = re.compile(r"(?:grid|nvidia)_[a-z0-9]+(?:-[a-z0-9]+)*-[0-9]+[a-z][a-z0-9]*")


def is_host_spelling(name: str) -> bool:
    """Spelled like a vSphere vGPU profile (`grid_`/`nvidia_`, lower-case words joined by hyphens, the last one a
    frame buffer size and a series letter), whether or not a table explains it: a host with a newer driver may
    offer it, so only the host can say it does not exist."""
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
    """Board of a physical GPU: by PCI device id, else by the whole device name the host reports (NVML's, or the
    pci.ids name `esxcli graphics device list` prints: `GA100 [A100 PCIe 40GB]`), else by the boards of the
    profiles the host offers (narrowed by the GPU's memory). Never by substrings of the name."""
    ids, names = _board_index()
    if device_id:
        by_id = ids.get(device_id, [])
        if len(by_id) == 1:
            return by_id[0]
    by_name = names.get(_name_key(device_name), [])
    if len(by_name) == 1:
        return by_name[0]
    return board_from_offered(offered, memory_gb)


def gpu_board(gpu: ObservedGpu, offered: Iterable[str] = ()) -> str | None:
    """A host GPU's catalogue board by device id, exact device name, or the host's offered profiles (never
    substrings); None when the catalogue has none."""
    board = board_for_device(gpu.device_name, gpu.memory_kb / (1024 * 1024) or None, gpu.device_id, offered)
    return board if board in BOARDS else None


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


# ------------------------------------------------------------------------------------------- NVLink


def nvlink_links_problem(enabled: bool, active: int, listed: int, wired: int | None) -> str | None:
    """Whether a GPU's NVLinks are as its host's NVLink setting asks (None) or why not, from `nvidia-smi nvlink -s`:
    `active` links up of `listed`, and `wired`, what the board's bridge or baseboard connects (catalogue `links`;
    None: not published). A GPU lists links its bridge does not wire (an H100 PCIe lists 18, its bridge wires 12:
    docs/vgpu-catalogue.md), so enabled means the wired ones up, never all listed ones. A GPU with none up passes:
    nvidia-smi shows a GPU without a bridge and one whose bridge did not come up alike, and vgpuctl cannot tell
    which the host has (docs/host-changes.md). Disabled means none up."""
    if not enabled:
        return f"{active} of {listed} links up, expected none" if active else None
    if active == 0 or wired is None or active >= wired:
        return None
    return f"{active} links up, expected the {wired} its NVLink bridge or baseboard wires (nvidia-smi lists {listed})"


def nvlink_wired(board: str | None) -> int | None:
    """NVLinks per GPU the board's bridge or baseboard wires (catalogue `links`); None: unknown board or count."""
    info = BOARDS.get(board or "")
    return info.nvlink_links if info is not None else None


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


def same_size_any_type(api_version: str | None, driver_says: bool | None) -> bool:
    """Whether an equal-size GPU takes vGPUs of different types with one framebuffer size: from the catalogue's
    vSphere API version (docs/gpu-rules.md), and never where the host's driver says it does not run them
    (`driver_says`: nvidia-smi -q's Heterogeneous Time-Slice Profiles; None: not read)."""
    return api_at_least(api_version, load_catalogue().same_size_any_type_since) and driver_says is not False


# ---------------------------------------------------------------------------------------- maxima


def published_max_per_gpu(profile: VgpuProfile, vgpu_mode: str) -> int | None:
    """NVIDIA's published maximum of vGPUs of this type per GPU in the GPU's mode (the catalogue row's table):
    `max_equal` for a MIG-backed type (per GPU in MIG mode) and in equal-size mode, `max_mixed` in mixed-size mode;
    None: not published (or a type outside the catalogue)."""
    row = profile.vgpu_type
    if row is None:
        return None
    if vgpu_mode == GpuVgpuMode.MIXED_SIZE and not profile.is_mig:
        return row.max_mixed
    return row.max_equal


def framebuffer_holds(profile: VgpuProfile) -> int | None:
    """How many vGPUs of the type its board's framebuffer holds (catalogue framebuffer / type framebuffer); None
    for a board outside the catalogue."""
    return _holds(profile.board, profile.fb_gb)


@lru_cache(maxsize=1024)  # placement asks for it for every GPU it tries
def _holds(board: str, fb_gb: float) -> int | None:
    info = BOARDS.get(board)
    if info is None or not fb_gb:
        return None
    return math.floor(info.fb_gb / fb_gb + 1e-9)


def capped_max(published: int | None, profile: VgpuProfile) -> int | None:
    """A time-sliced type's published maximum capped at what the board's framebuffer holds: NVIDIA AI Enterprise 7
    lists 6 x H100-16C per 80 GB GPU, which 6 x 16 GB cannot fit (vGPU 17 said 5), so vgpuctl plans with 5
    (docs/vgpu-catalogue.md). A MIG-backed type's maximum stands: the MIG geometry holds it, and its name rounds
    the instance memory up (2 x H200-3-71C on 141 GB). The host's own report still wins where vgpuctl reads one."""
    holds = None if profile.is_mig else framebuffer_holds(profile)
    return published if published is None or holds is None else min(published, holds)


def max_per_gpu(profile: VgpuProfile, vgpu_mode: str, gpu_fb_gb: float | None = None) -> int | None:
    """How many vGPUs of this type one GPU holds at most in the GPU's mode: NVIDIA's published maximum
    (published_max_per_gpu) capped at what the framebuffer holds (capped_max); None in mixed-size mode without a
    published maximum (vgpuctl refuses the type there). A type outside the catalogue in equal-size mode:
    framebuffer / size, an upper bound (the tables cap some types below it: L40S-1B 32 on 48 GB). None when
    nothing says."""
    published = published_max_per_gpu(profile, vgpu_mode)
    if published is not None or profile.is_mig or vgpu_mode == GpuVgpuMode.MIXED_SIZE:
        return capped_max(published, profile)
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
