"""Pure vGPU placement, following docs/gpu-rules.md (the simulator admits vGPUs by the same rules).

`place_vm` places one VM's vGPUs (all or nothing) on one host's GPUs; `place_farm` places many VMs over
many hosts, VMs already running first (they hold their GPUs), then the planned ones, and says for each VM
that does not fit which host lacks which capacity. Nothing here mutates its inputs unless it says so.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import field, fields
from functools import cache, lru_cache
from typing import TYPE_CHECKING

from vgpuctl.domain import AssignmentPolicy, GpuVgpuMode, GraphicsType
from vgpuctl.lazyclass import dataclass
from vgpuctl.profiles import (
    BOARDS,
    MigGiProfile,
    VgpuProfile,
    VgpuType,
    board_for_device,
    capped_max,
    gi_geometry,
    load_catalogue,
    parse_profile,
    same_size_any_type,
    try_parse,
)

if TYPE_CHECKING:
    from vgpuctl.model import ObservedGpu, ObservedHost

DEFAULT_API = "8.0.3.0"  # what a host reports when a caller does not say
INSUFFICIENT = (
    "The amount of graphics resource available in the parent resource pool is insufficient for the operation."
)
CONSERVATIVE_MIG = "under the conservative MIG start rule; it may fit if the host packs its GPU instances differently"
CONSERVATIVE_MIXED = (
    "under the conservative placement id rule; it may fit if the host chooses other placement ids for its vGPUs"
)


@dataclass
class Gpu:
    """One physical GPU as placement sees it. `vgpus` lists the profiles already on it, in placement order."""

    id: str  # PCI id; placement order
    board: str | None
    fb_gb: float
    vgpu_mode: str = GpuVgpuMode.SAME_SIZE  # a GpuVgpuMode
    graphics_type: str = GraphicsType.SHARED_DIRECT
    nvlink_set: int | None = None
    nvlink_up: bool = True
    vgpus: list[str] = field(default_factory=list)
    # sizes of the NVLink device groups the host reports for this GPU's set (empty: it reports none)
    nvlink_groups: tuple[int, ...] = ()
    # profiles the host's device groups over this GPU's set are offered for (empty: it names none)
    nvlink_profiles: tuple[str, ...] = ()
    # MIG only: occupied memory slots as (start, size); derived from `vgpus` when left empty.
    mig_used: list[tuple[int, int]] = field(default_factory=list)
    # Something we cannot identify holds this GPU: no new vGPU goes on it (`blocked_reason` says why).
    blocked: bool = False
    api_version: str = DEFAULT_API
    blocked_reason: str | None = None
    # mixed-size only: (placement id, placement size) of each vGPU placed by placement ids, in `vgpus` order
    # (None for a vGPU whose type has no published placement ids).
    mixed_used: list[tuple[int, int] | None] = field(default_factory=list)
    history_blocked: bool = False  # blocked because of what `vgpus` holds (re-checked when one leaves)
    types_may_mix: bool | None = None  # the host driver's word on different time-sliced types at once (None: unread)

    def __post_init__(self) -> None:
        if self.vgpu_mode in (GpuVgpuMode.NONE, "", None):
            self.vgpu_mode = GpuVgpuMode.SAME_SIZE  # hosts before 8.0.3 do not report a mode: same-size is the default
        self.check_history()
        if self.vgpu_mode == GpuVgpuMode.MIG and not self.mig_used and self.vgpus and not self.blocked:
            self.rebuild_mig()
        elif self.vgpu_mode == GpuVgpuMode.MIXED_SIZE and not self.blocked:
            self.rebuild_mixed()

    def check_history(self) -> None:
        """Block the GPU when it holds a vGPU whose profile no table explains (never raise on host data)."""
        for name in self.vgpus:
            if try_parse(name) is None:
                self.block(f"holds vGPU {name!r}, which no vGPU type table explains")
                return

    def block(self, reason: str, history: bool = True) -> None:
        self.blocked = True
        self.blocked_reason = self.blocked_reason or reason
        self.history_blocked = self.history_blocked or history

    def rebuild_mig(self) -> None:
        """Derive the occupied MIG slots from `vgpus`, each placed in order by the rule new instances follow
        (the conservative start). A history that does not fit blocks the GPU rather than guessing."""
        existing, self.vgpus, self.mig_used = self.vgpus, [], []
        for name in existing:
            profile = try_parse(name)
            start = _mig_start(self, profile) if profile is not None else None
            if profile is None or start is None:
                self.vgpus.append(name)
                self.block(f"holds vGPU {name!r}, which does not fit its MIG geometry")
                continue
            self._commit(profile, start)
        if self.blocked:
            self.mig_used = [(0, self.mig_slots)]

    def rebuild_mixed(self) -> None:
        """Derive the mixed-size placements from `vgpus`, each placed in order by the rule new vGPUs follow
        (the conservative placement id). A history that does not fit blocks the GPU rather than guessing."""
        existing, self.vgpus, self.mixed_used = self.vgpus, [], []
        for name in existing:
            profile = try_parse(name)
            placed = _mixed_placement(self, profile) if profile is not None else None
            self.vgpus.append(name)
            self.mixed_used.append(placed)
        unplaced = _unplaced_mixed(self)
        if unplaced is not None:
            packable = _mixed_fits_some_way(self, [])
            self.block(f"holds vGPU {unplaced!r}, which gets no free mixed-size placement id"
                       + (f" {CONSERVATIVE_MIXED}" if packable else ""))

    @property
    def mig_slots(self) -> int:
        info = BOARDS.get(self.board or "")
        return info.mig_slots if info and info.mig_slots else 8

    @property
    def same_size_any_type(self) -> bool:
        return same_size_any_type(self.api_version, self.types_may_mix)

    def _commit(self, profile: VgpuProfile, start: int | None) -> int:
        self.vgpus.append(profile.name)
        if self.vgpu_mode == GpuVgpuMode.MIXED_SIZE:
            self.mixed_used.append(_mixed_placement(self, profile))
        if start is None:
            return -1
        gi = _gi(self, profile)
        assert gi is not None
        self.mig_used.append((start, gi.size))
        return start


# Gpu's list fields hold immutable items (names, tuples): copying the lists copies the GPU.
_LIST_FIELDS = tuple(f.name for f in fields(Gpu) if f.default_factory is list)


def clone_gpu(gpu: Gpu) -> Gpu:
    """A copy of `gpu` whose lists are its own: what deepcopy gives, without its cost (placement copies
    every GPU of a host for every VM it tries)."""
    out = copy.copy(gpu)
    for name in _LIST_FIELDS:
        setattr(out, name, list(getattr(gpu, name)))
    return out


@dataclass(frozen=True)
class Placed:
    profile: str
    gpu: str
    start: int = -1  # MIG start slot; -1 for a time-sliced vGPU
    index: int = 0  # position of this vGPU in the request
    placement: int = -1  # mixed-size placement id; -1 when not placed by placement id


@dataclass
class Placement:
    """The outcome for one VM: `gpus` (one entry per vGPU) when it fits, else `reason`."""

    vm: str
    host: str | None = None
    placed: list[Placed] = field(default_factory=list)
    reason: str | None = None
    fitted: int = 0  # how many of the VM's vGPUs fitted before placement gave up
    nics: dict[int, str] = field(default_factory=dict)  # adapter index -> PCI id of its NIC (SR-IOV, passthrough)

    @property
    def ok(self) -> bool:
        return self.reason is None

    @property
    def assign(self) -> list[str]:
        """The GPU of each requested vGPU, in request order."""
        return [p.gpu for p in sorted(self.placed, key=lambda p: p.index)]

    @property
    def starts(self) -> list[int]:
        return [p.start for p in sorted(self.placed, key=lambda p: p.index)]

    @property
    def placements(self) -> list[int]:
        """The mixed-size placement id of each requested vGPU (-1 when not placed by id), in request order."""
        return [p.placement for p in sorted(self.placed, key=lambda p: p.index)]


# ---------------------------------------------------------------------------------------- one GPU


def _gi(gpu: Gpu, profile: VgpuProfile) -> MigGiProfile | None:
    info = BOARDS.get(gpu.board or "")
    if info is None or profile.gi_profile is None:
        return None
    return info.gi(profile.gi_profile)


def _free(used: list[tuple[int, int]], start: int, size: int, slots: int) -> bool:
    return start + size <= slots and all(start + size <= s or s + n <= start for s, n in used)


def _room(gpu: Gpu, used: list[tuple[int, int]]) -> int:
    """Free placements left for every GPU instance profile of the board: the room for further instances."""
    info = BOARDS.get(gpu.board or "")
    gis = info.gi_profiles if info else ()
    return sum(1 for g in gis for s in g.starts if _free(used, s, g.size, gpu.mig_slots))


def _mig_start(gpu: Gpu, profile: VgpuProfile) -> int | None:
    """Where a new GPU instance goes. vSphere does not document its choice, so assume the worst: of the
    allowed free starts, the one that leaves the least room for further instances; ties -> lowest start."""
    gi = _gi(gpu, profile)
    if gi is None:
        return None
    free = [s for s in gi.starts if _free(gpu.mig_used, s, gi.size, gpu.mig_slots)]
    if not free:
        return None
    return min(free, key=lambda s: (_room(gpu, [*gpu.mig_used, (s, gi.size)]), s))


def _mig_fits_some_way(gpu: Gpu, profile: VgpuProfile) -> bool:
    """Whether the GPU's instances plus one of `profile` fit with some choice of starts (any packing)."""
    wanted = [g for name in gpu.vgpus if (p := try_parse(name)) is not None and (g := _gi(gpu, p)) is not None]
    new = _gi(gpu, profile)
    if new is None or len(wanted) != len(gpu.vgpus):
        return False
    pending = sorted([*wanted, new], key=lambda g: (-g.size, len(g.starts)))

    def search(i: int, used: list[tuple[int, int]]) -> bool:
        if i == len(pending):
            return True
        g = pending[i]
        return any(search(i + 1, [*used, (s, g.size)]) for s in g.starts if _free(used, s, g.size, gpu.mig_slots))

    return search(0, [])


def _mixed_row(profile: VgpuProfile) -> VgpuType | None:
    """The type's catalogue row when NVIDIA publishes its mixed-size placement size and ids, else None."""
    row = profile.vgpu_type
    return row if row is not None and row.placement_ids and row.placement_size else None


def _mixed_rows(gpu: Gpu) -> list[VgpuType | None]:
    return [_mixed_row(p) if (p := try_parse(name)) is not None else None for name in gpu.vgpus]


def _placed_ranges(gpu: Gpu) -> list[tuple[int, int]] | None:
    """The placement ranges of the GPU's vGPUs, or None when a vGPU there has none (its type publishes no ids,
    or it got no free id: then the GPU is blocked)."""
    taken = gpu.mixed_used
    return None if any(t is None for t in taken) else [t for t in taken if t is not None]


def _unplaced_mixed(gpu: Gpu) -> str | None:
    """The first vGPU that got no placement id although every vGPU on the GPU has published ids."""
    rows = _mixed_rows(gpu)
    if not rows or any(r is None for r in rows):
        return None
    return next((name for name, t in zip(gpu.vgpus, gpu.mixed_used, strict=True) if t is None), None)


def _clear(ranges: list[tuple[int, int]], pid: int, size: int) -> bool:
    return all(pid + size <= s or s + n <= pid for s, n in ranges)


def _mask(ranges: Iterable[tuple[int, int]]) -> int:
    """The placement units (GB from the start of the placement region) the ranges cover, as a bit mask."""
    out = 0
    for pid, size in ranges:
        out |= ((1 << size) - 1) << pid
    return out


@lru_cache(maxsize=256)
def _series_masks(board: str, series: str) -> tuple[int, ...]:
    """One bit mask per placement id of every mixed-size type of the board in `series` that has published ids."""
    info = BOARDS.get(board)
    rows = [t for t in info.types.values() if t.series == series and t.max_mixed is not None] if info else []
    return tuple(_mask([(pid, t.placement_size)]) for t in rows if t.placement_size for pid in t.placement_ids)


def _mixed_room(gpu: Gpu, series: str, used: int) -> int:
    """Free placement ids left, with the units in mask `used` taken, for every vGPU type of the board in
    `series` that has published ids: the room for further vGPUs on a mixed-size GPU (one series per GPU)."""
    return sum(1 for m in _series_masks(gpu.board or "", series) if not m & used)


def _mixed_placement(gpu: Gpu, profile: VgpuProfile) -> tuple[int, int] | None:
    """Where a new mixed-size vGPU goes. The vGPU Manager chooses and vSphere does not let us say, so assume
    the worst: of the type's placement ids whose range overlaps no placed vGPU, the one that leaves the fewest
    free placement ids for the board's types of its series; ties -> lowest id. None when no id is free, or
    when the type (or a vGPU already there) has no published placement ids."""
    row = _mixed_row(profile)
    ranges = _placed_ranges(gpu)
    if row is None or row.placement_size is None or ranges is None:
        return None
    size = row.placement_size
    free = [pid for pid in row.placement_ids if _clear(ranges, pid, size)]
    if not free:
        return None
    taken = _mask(ranges)
    best = min(free, key=lambda pid: (_mixed_room(gpu, row.series, taken | _mask([(pid, size)])), pid))
    return (best, size)


def _mixed_fits_some_way(gpu: Gpu, extra: list[VgpuProfile]) -> bool:
    """Whether the GPU's vGPUs plus `extra` get pairwise disjoint placement ids with some choice of ids (any
    packing), every one of them having published ids. Placements are intervals on one line, so walk it from
    the low end: at each placement id either start a vGPU still to place there or skip to the next id."""
    rows = [*_mixed_rows(gpu), *(_mixed_row(p) for p in extra)]
    if any(r is None for r in rows):
        return False
    types = sorted({r.name: r for r in rows if r is not None}.values(), key=lambda r: r.name)
    wanted = tuple(sum(1 for r in rows if r is not None and r.name == t.name) for t in types)
    starting: dict[int, list[int]] = {}
    for i, t in enumerate(types):
        for pid in t.placement_ids:
            starting.setdefault(pid, []).append(i)
    positions = sorted(starting)

    @cache
    def fill(k: int, left: tuple[int, ...]) -> bool:  # k: index into positions; left: vGPUs still to place
        if not any(left):
            return True
        if k == len(positions):
            return False
        for i in starting[positions[k]]:
            if left[i]:
                after = positions[k] + (types[i].placement_size or 0)
                rest = (*left[:i], left[i] - 1, *left[i + 1:])
                if fill(bisect.bisect_left(positions, after), rest):
                    return True
        return fill(k + 1, left)

    return fill(0, wanted)


def _max_equal(gpu: Gpu, profile: VgpuProfile) -> int:
    """NVIDIA's equal-size maximum of the type capped at what the framebuffer holds (capped_max); framebuffer
    division when the table gives none (an upper bound)."""
    row = profile.vgpu_type
    if row is not None and row.max_equal is not None:
        return capped_max(row.max_equal, profile) or 0
    return int(gpu.fb_gb // profile.fb_gb) if profile.fb_gb else 0


def why_not(gpu: Gpu, profile: VgpuProfile) -> str | None:
    """None when one more vGPU of `profile` fits on `gpu`, else a short reason."""
    if gpu.blocked:
        return gpu.blocked_reason or "held by a vGPU of unknown profile"
    if gpu.graphics_type != GraphicsType.SHARED_DIRECT:
        return f"graphics type is {gpu.graphics_type}, vGPUs need sharedDirect"
    if gpu.board != profile.board:
        return f"board {gpu.board} does not take {profile.board} profiles"
    if profile.is_mig:
        return _why_not_mig(gpu, profile)
    if gpu.vgpu_mode == GpuVgpuMode.MIG:
        return "in MIG mode (time-sliced profiles need MIG off)"
    existing = [parse_profile(p) for p in gpu.vgpus]  # parseable: check_history blocks the GPU otherwise
    if any(p.is_mig for p in existing):
        return "holds MIG-backed vGPUs"
    if gpu.vgpu_mode == GpuVgpuMode.MIXED_SIZE:
        return _why_not_mixed(gpu, profile, existing)
    return _why_not_same_size(gpu, profile, existing)


def _why_not_mig(gpu: Gpu, profile: VgpuProfile) -> str | None:
    if gpu.vgpu_mode != GpuVgpuMode.MIG:
        return "not in MIG mode"
    if _gi(gpu, profile) is None:
        return f"no MIG instance profile {profile.gi_profile}"
    row = profile.vgpu_type
    same = sum(1 for name in gpu.vgpus if (p := try_parse(name)) is not None and p.type_name == profile.type_name)
    limit = capped_max(row.max_equal, profile) if row is not None else None
    if limit is not None and same >= limit:
        return f"holds the maximum of {profile.type_name} ({limit})"
    if _mig_start(gpu, profile) is not None:
        return None
    if _mig_fits_some_way(gpu, profile):
        return f"no free MIG placement {CONSERVATIVE_MIG}"
    return "no free MIG placement"


def _why_not_same_size(gpu: Gpu, profile: VgpuProfile, existing: list[VgpuProfile]) -> str | None:
    for e in existing:
        if e.fb_gb != profile.fb_gb:
            return "holds another profile (same-size mode)"
        if e.type_name != profile.type_name and not gpu.same_size_any_type:
            why = ("the host's driver runs one type per GPU" if gpu.types_may_mix is False
                   else f"before vSphere API {_since()} only the identical type")
            return f"holds another profile (same-size mode; {why})"
    limit = min(_max_equal(gpu, p) for p in [*existing, profile])
    return None if len(existing) < limit else "full"


def _why_not_mixed(gpu: Gpu, profile: VgpuProfile, existing: list[VgpuProfile]) -> str | None:
    row = profile.vgpu_type
    if row is None or row.max_mixed is None:
        return f"{profile.type_name} has no published mixed-size maximum"
    if any(p.series != profile.series for p in existing):
        return "holds vGPUs of another series"
    if any(p.vgpu_type is None or p.vgpu_type.max_mixed is None for p in existing):
        return "holds a vGPU type without a published mixed-size maximum"
    same = sum(1 for p in existing if p.type_name == profile.type_name)
    limit = capped_max(row.max_mixed, profile) or 0
    if same >= limit:
        return f"holds the mixed-size maximum of {profile.type_name} ({limit})"
    if sum(p.fb_gb for p in existing) + profile.fb_gb > gpu.fb_gb:
        return "framebuffer full"
    ranges = _placed_ranges(gpu)
    by_ids = _mixed_row(profile)
    size = by_ids.placement_size if by_ids is not None else None
    if by_ids is None or not size or ranges is None or any(_clear(ranges, p, size) for p in by_ids.placement_ids):
        return None
    if _mixed_fits_some_way(gpu, [profile]):
        return f"no free mixed-size placement id {CONSERVATIVE_MIXED}"
    return "no free mixed-size placement id"


def fits(gpu: Gpu, profile: VgpuProfile | str) -> bool:
    p = profile if isinstance(profile, VgpuProfile) else try_parse(profile)
    return p is not None and why_not(gpu, p) is None


def add_vgpu(gpu: Gpu, profile: VgpuProfile | str) -> int:
    """Put one vGPU on `gpu` (mutates it); returns its MIG start slot or -1. The caller checked `fits`."""
    p = profile if isinstance(profile, VgpuProfile) else parse_profile(profile)
    return gpu._commit(p, _mig_start(gpu, p) if p.is_mig else None)


def remove_vgpu(gpu: Gpu, profile: str) -> None:
    """Take one vGPU of `profile` off `gpu` (mutates it); MIG slots are recomputed from what stays."""
    if profile in gpu.vgpus:
        index = gpu.vgpus.index(profile)
        del gpu.vgpus[index]
        if index < len(gpu.mixed_used):
            del gpu.mixed_used[index]
    if gpu.history_blocked:
        gpu.blocked, gpu.blocked_reason, gpu.history_blocked = False, None, False
        gpu.mig_used = []
        gpu.check_history()
    if gpu.vgpu_mode == GpuVgpuMode.MIG and not gpu.blocked:
        gpu.rebuild_mig()
    elif gpu.vgpu_mode == GpuVgpuMode.MIXED_SIZE and not gpu.blocked:
        gpu.rebuild_mixed()


# ----------------------------------------------------------------------------------------- one VM


def _pick(cands: list[Gpu], policy: str) -> Gpu:
    # Candidates come in PCI id order; min/max keep the first of equals, i.e. the lowest PCI id.
    if policy == AssignmentPolicy.CONSOLIDATION:
        most = max(len(g.vgpus) for g in cands)
        return next(g for g in cands if len(g.vgpus) == most)
    return min(cands, key=lambda g: len(g.vgpus))


def _ordered(profiles: Sequence[str]) -> list[tuple[int, VgpuProfile]]:
    parsed = list(enumerate(parse_profile(p) for p in profiles))
    return sorted(parsed, key=lambda ip: -ip[1].fb_gb)  # sorted() is stable: equal sizes keep their order


def _place_on(gpus: list[Gpu], profiles: list[tuple[int, VgpuProfile]], policy: str) -> tuple[list[Placed], int]:
    """Greedy placement on a working copy (mutated); returns the placements and how many fitted."""
    used: set[str] = set()
    placed: list[Placed] = []
    for index, p in profiles:
        cands = [g for g in gpus if g.id not in used and why_not(g, p) is None]
        if not cands:
            return placed, len(placed)
        g = _pick(cands, policy)
        start = add_vgpu(g, p)
        used.add(g.id)
        at = g.mixed_used[-1] if g.vgpu_mode == GpuVgpuMode.MIXED_SIZE and g.mixed_used else None
        placed.append(Placed(p.name, g.id, start, index, at[0] if at else -1))
    return placed, len(placed)


NVSWITCH_GROUP_SIZES = (2, 4, 8)  # the NVLink device groups an NVSwitch host offers (docs/gpu-rules.md)


@dataclass(frozen=True)
class GroupSizes:
    """The NVLink device group sizes one set offers, and whether the host reported them (else the board's
    catalogue topology gave them)."""

    sizes: tuple[int, ...]
    reported: bool
    topology: str = ""

    def text(self) -> str:
        sizes = [str(n) for n in self.sizes]
        listed = " or ".join(filter(None, [", ".join(sizes[:-1]), sizes[-1]])) if sizes else "none"
        if self.reported:
            return f"the host offers groups of {listed}"
        return f"the host reported no NVLink device groups; by the board's topology ({self.topology}): {listed}"


def catalogue_group_sizes(board: str | None, members: int) -> tuple[int, ...]:
    """The fallback when a host reports no device groups: NVSwitch offers 2, 4 and 8 GPUs (as far as the set
    has them); a bridge set (pair or quad) is one group of all its GPUs."""
    info = BOARDS.get(board or "")
    topology = info.nvlink_topology if info is not None else "none"
    if topology == "nvswitch":
        return tuple(n for n in NVSWITCH_GROUP_SIZES if n <= members)
    return (members,) if topology.startswith("bridge") and members >= 2 else ()


def group_sizes(nvlink_set: list[Gpu]) -> GroupSizes:
    """What a set offers: the sizes the host reports for it, else the board's catalogue topology."""
    reported = sorted({n for g in nvlink_set for n in g.nvlink_groups if 2 <= n <= len(nvlink_set)})
    if reported:
        return GroupSizes(tuple(reported), True)
    board = nvlink_set[0].board
    info = BOARDS.get(board or "")
    return GroupSizes(catalogue_group_sizes(board, len(nvlink_set)), False,
                      info.nvlink_topology if info is not None else "none")


def group_profiles(nvlink_set: list[Gpu]) -> tuple[tuple[str, ...], bool]:
    """The vGPU types (NVIDIA names, `A100-40C`) a set's device groups are offered for, and whether the host
    named them: the group names it reports first, else the board's whole-GPU C-series types (NVLink P2P needs
    time-sliced C-series vGPUs that each take a whole GPU)."""
    reported = sorted({_type_key(n) for g in nvlink_set for n in g.nvlink_profiles})
    if reported:
        return tuple(reported), True
    return whole_gpu_compute_types(nvlink_set[0].board), False


def whole_gpu_compute_types(board: str | None) -> tuple[str, ...]:
    """The board's largest time-sliced C-series type when it takes the whole framebuffer (the catalogue; gpusim
    names its device groups by the same type)."""
    info = BOARDS.get(board or "")
    rows = [t for t in info.types.values() if not t.mig_gi and t.series == "C"] if info is not None else []
    best = max(rows, key=lambda t: t.fb_gb, default=None)
    return (best.name,) if info is not None and best is not None and best.fb_gb + 0.5 >= info.fb_gb else ()


def _type_key(profile: str) -> str:
    parsed = try_parse(profile)
    return parsed.type_name if parsed is not None else profile.upper()


def nvlink_sets(gpus: Iterable[Gpu]) -> list[list[Gpu]]:
    """NVLink sets with every link up, by lowest PCI id. A MIG GPU is in no device group (NVLink P2P needs
    time-sliced vGPUs)."""
    sets: dict[int, list[Gpu]] = {}
    for g in gpus:
        if g.nvlink_set is not None and g.vgpu_mode != GpuVgpuMode.MIG:
            sets.setdefault(g.nvlink_set, []).append(g)
    return sorted((s for s in sets.values() if all(g.nvlink_up for g in s)), key=lambda s: s[0].id)


def group_refusal(nvlink_set: list[Gpu], profiles: Sequence[str]) -> str | None:
    """Why this set offers no device group for a VM of these vGPUs, or None: the VM's vGPU count must be a
    group size the set offers, and every vGPU's type one the groups are offered for."""
    offered, named = group_profiles(nvlink_set)
    wanted = sorted({_type_key(p) for p in profiles})
    missing = [p for p in profiles if _type_key(p) not in offered]
    if missing:
        spelled = ", ".join(_spelled(t, profiles[0]) for t in offered) or "no profile"
        source = "the host's group names" if named else "by the catalogue: the board's whole-GPU C-series types"
        return (f"has NVLink device groups only for {spelled} ({source}), not for "
                f"{', '.join(_spelled(t, profiles[0]) for t in wanted if t not in offered)}")
    if len(profiles) not in group_sizes(nvlink_set).sizes:
        return f"has no NVLink device group of {len(profiles)} GPUs ({group_sizes(nvlink_set).text()})"
    return None


def _spelled(type_name: str, like: str) -> str:
    """A type name spelled as vSphere spells `like` (its `grid_` or `nvidia_` prefix)."""
    prefix = like[: like.index("_") + 1] if "_" in like else "grid_"
    return prefix + type_name.lower()


def _no_group_reason(sets: list[list[Gpu]], profiles: Sequence[str]) -> str:
    if not sets:
        return f"has no NVLink-connected set of {len(profiles)} GPUs with links up"
    reasons = sorted({r for s in sets if (r := group_refusal(s, profiles))})
    if all(r.startswith("has no NVLink device group of") for r in reasons):
        offers = sorted({group_sizes(s).text() for s in sets})
        return f"has no NVLink device group of {len(profiles)} GPUs ({'; '.join(offers)})"
    return "; ".join(reasons)


def nvlink_refusal(gpus: Iterable[Gpu], profiles: Sequence[str]) -> str | None:
    """Why no NVLink set of these GPUs (one host) offers a device group for a VM of these vGPUs, or None when
    one does (whether its GPUs have room is placement's next question)."""
    sets = nvlink_sets(gpus)
    if any(group_refusal(s, profiles) is None for s in sets):
        return None
    return _no_group_reason(sets, profiles)


def _place_nvlink(ordered: list[Gpu], vm: str, wanted: list[tuple[int, VgpuProfile]], policy: str,
                  host: str | None) -> Placement:
    """vSphere attaches a device group whole: the VM's vGPU count must be a group size its set offers, its
    vGPUs of a type the groups are offered for, and that many GPUs of the set take one vGPU each. Sets are tried
    by lowest PCI id; the first that fits wins."""
    names = [p.name for _, p in wanted]
    usable = [s for s in nvlink_sets(ordered) if group_refusal(s, names) is None]
    if not usable:
        return Placement(vm, host, reason=nvlink_refusal(ordered, names))
    best = 0
    for s in usable:
        placed, n = _place_on([clone_gpu(g) for g in s], wanted, policy)
        if n == len(wanted):
            return Placement(vm, host, placed=placed, fitted=n)
        best = max(best, n)
    return Placement(vm, host, fitted=best, reason=_shortfall(ordered, [p for _, p in wanted], best, nvlink=True))


def place_vm(
    gpus: Sequence[Gpu],
    vm: str,
    profiles: Sequence[str],
    policy: str = AssignmentPolicy.PERFORMANCE,
    *,
    nvlink: bool = False,
    host: str | None = None,
) -> Placement:
    """Place all vGPUs of one VM on these GPUs (one host), or none. Does not mutate `gpus`."""
    unknown = [p for p in profiles if try_parse(p) is None]
    if unknown:
        return Placement(vm, host, reason=f"asks for {', '.join(unknown)}, which no vGPU type table explains")
    ordered = sorted((clone_gpu(g) for g in gpus), key=lambda g: g.id)
    wanted = _ordered(profiles)
    if not wanted:
        return Placement(vm, host)
    if nvlink:
        return _place_nvlink(ordered, vm, wanted, policy, host)
    placed, n = _place_on(ordered, wanted, policy)
    if n < len(wanted):
        return Placement(vm, host, fitted=n, reason=_shortfall(ordered, [p for _, p in wanted], n))
    return Placement(vm, host, placed=placed, fitted=n)


def _summary(profiles: Sequence[VgpuProfile]) -> str:
    counts: dict[str, int] = {}
    for p in profiles:
        counts[p.name] = counts.get(p.name, 0) + 1
    return " + ".join(f"{n} x {name}" for name, n in counts.items())


def _shortfall(gpus: list[Gpu], wanted: list[VgpuProfile], fitted: int, nvlink: bool = False) -> str:
    what = _summary(wanted)
    where = " on one NVLink-connected set" if nvlink else " on separate GPUs"
    text = f"lacks GPU capacity for {what}{where if len(wanted) > 1 else ''}: {fitted} of {len(wanted)} fit"
    first_missing = wanted[fitted]  # both callers call it only when some vGPU did not fit
    reasons = sorted({r for g in gpus if (r := why_not(g, first_missing))})
    if not gpus:
        return f"{text} (no GPUs)"
    if reasons and not any(why_not(g, first_missing) is None for g in gpus):
        return f"{text} ({first_missing.name}: {'; '.join(reasons)})"
    return text


# ------------------------------------------------------------------------------------- from observe


def gpus_from_observed(host: ObservedHost, vm_profiles: Mapping[str, Sequence[str]],
                       stopped: Collection[str] = ()) -> list[Gpu]:
    """Placement GPUs from an ObservedHost; `vm_profiles` maps VM name -> its vGPU profiles; a GPU's entries
    for the VMs in `stopped` (read powered off after the host was read) hold nothing.

    vSphere lists which VMs use a GPU, not which of a VM's vGPUs sits where; we give each GPU one of the
    VM's vGPUs, preferring one that matches what the GPU already holds (same-size GPUs hold one profile).
    A VM we know nothing about blocks the GPU (we cannot tell what it holds).
    """
    on_host = {vm for og in host.gpus for vm in og.vms}  # only these are looked up: linear in the farm
    remaining = {vm: sorted(vm_profiles[vm], key=lambda p: (-_fb(p), p)) for vm in on_host if vm in vm_profiles}
    api = host.api_version or DEFAULT_API
    return [_gpu_from_observed(og, host.offered_profiles, api, remaining, stopped)
            for og in sorted(host.gpus, key=lambda g: g.pci_id)]


def _gpu_from_observed(og: ObservedGpu, offered: Sequence[str], api: str, remaining: dict[str, list[str]],
                       stopped: Collection[str] = ()) -> Gpu:
    mem = og.memory_kb / (1024 * 1024) if og.memory_kb else None
    board = board_for_device(og.device_name, mem, og.device_id, offered)
    info = BOARDS.get(board) if board is not None else None
    fb = info.fb_gb if info is not None else int(mem or 0)
    profs: list[str] = []
    unread: list[str] = []
    for vm in og.vms:
        if vm in stopped:
            continue
        left = remaining.get(vm)
        if not left:
            unread.append(vm)
            continue
        same = [p for p in left if p in profs]
        choice = same[0] if same else left[0]
        left.remove(choice)
        profs.append(choice)
    gpu = Gpu(og.pci_id, board, fb, og.vgpu_mode, og.graphics_type, og.nvlink_set, vgpus=profs, api_version=api,
              nvlink_groups=tuple(og.nvlink_groups), nvlink_profiles=tuple(og.nvlink_profiles),
              types_may_mix=og.types_may_mix)
    # what blocks these GPUs is not their history: a VM leaving does not unblock them
    if unread:
        gpu.block(f"used by {', '.join(sorted(set(unread)))}, whose vGPUs were not read", history=False)
    if board is None and og.vms:
        gpu.block(f"GPU {og.device_name or og.pci_id} is not a board any vGPU type table lists", history=False)
    return gpu


def _since() -> str:
    return ".".join(map(str, load_catalogue().same_size_any_type_since))


def _fb(profile: str) -> float:
    parsed = try_parse(profile)
    return parsed.fb_gb if parsed is not None else 0


# ----------------------------------------------------------------------------------- power-on order


def profile_order(profile: str) -> tuple[float, int, str]:
    """Where a vGPU of this profile comes when vGPUs arrive one after the other: larger framebuffer first; among
    equal sizes the MIG instance with fewer allowed starts first (a 4g.20gb, start 0 only, before a 3g.20gb,
    starts 0 and 4, which still fits beside it), then by name. Under the conservative MIG start and placement id
    rules where a vGPU lands depends on what came before it, so plan, apply and capacity use this one order."""
    p = try_parse(profile)
    if p is None:
        return (0.0, 0, profile)
    gi = gi_geometry(p.board, p.gi_profile or "") if p.is_mig else None
    return (-p.fb_gb, len(gi.starts) if gi is not None else 0, profile)


def power_on_key(vm: str, profiles: Sequence[str], *, exists: bool = False) -> tuple[object, ...]:
    """The order in which `vgpuctl plan` places, and `apply` powers on, the VMs of one host: VMs that exist before
    new clones, then largest first (the VM's largest vGPU by `profile_order`, then more vGPUs first), then by
    name. On each GPU its vGPUs then arrive largest first, the order capacity's per-GPU patterns assume."""
    largest = min((profile_order(p) for p in profiles), default=(0.0, 0, ""))
    return (not exists, largest, -len(profiles), vm)
