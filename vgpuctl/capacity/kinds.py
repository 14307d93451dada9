"""What a GPU can still take, derived from vgpuctl.farm.placement and nothing else.

`addition_patterns(gpu, profiles)` lists the maximal multisets of `profiles` that placement lets us add to
`gpu` as it is (mode, occupants, MIG slots) when they arrive in the order plan places and apply powers on VMs
(placement.profile_order: largest first). The walk tries every multiset in that order (each has one such
sequence, and a prefix that does not fit ends it), so the patterns are exhaustive for that order; the unit tests
compare them with every multiset of every board and mode. Every smaller multiset fits too (tested likewise), so
"fits on this GPU" is "is dominated by one of these patterns". Under the conservative MIG start rule some
multisets fit only in another order (small instances first); apply never powers on in that order, so they are
not patterns. Results are cached per GPU state, so a farm of identical GPUs costs one enumeration per kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields
from functools import lru_cache

from vgpuctl.domain import TIME_SLICED_MODES, GpuVgpuMode
from vgpuctl.farm.placement import Gpu, add_vgpu, clone_gpu, fits, profile_order

Pattern = tuple[tuple[str, int], ...]  # sorted (profile, count) pairs, counts > 0
MAX_PATTERNS = 4000
MODES = (*TIME_SLICED_MODES, GpuVgpuMode.MIG)


# What an idle GPU keeps across a mode switch; every other field of placement's Gpu starts afresh.
# The NVLink device groups the host reports stay with the GPU: they are the host's, not the mode's.
_KEPT_FIELDS = frozenset({"id", "board", "fb_gb", "graphics_type", "nvlink_set", "nvlink_up", "nvlink_groups",
                          "nvlink_profiles", "api_version"})


def gpu_kind_key(gpu: Gpu) -> tuple[object, ...]:
    """Everything placement knows about the GPU except its name: GPUs with equal keys behave the same."""
    return tuple(_hashable(getattr(gpu, f.name)) for f in fields(gpu) if f.name != "id")


def _hashable(value: object) -> object:
    return tuple(_hashable(v) for v in value) if isinstance(value, list | tuple) else value


def addition_patterns(gpu: Gpu, profiles: Iterable[str]) -> list[dict[str, int]]:
    """Maximal multisets of `profiles` that fit on `gpu` together (empty list: none fits at all)."""
    return [dict(p) for p in _enumerate(gpu, profiles)[0]]


def patterns_complete(gpu: Gpu, profiles: Iterable[str]) -> bool:
    """False when the walk stopped at MAX_PATTERNS maximal multisets: then the patterns miss packings. Only
    mixed-size GPUs without published placement ids asked for many sizes at once get there (an H200 with all
    nine C-series sizes has 5,875); the answer says so."""
    return _enumerate(gpu, profiles)[1]


def _enumerate(gpu: Gpu, profiles: Iterable[str]) -> tuple[tuple[Pattern, ...], bool]:
    ordered = tuple(sorted(set(profiles), key=profile_order))  # the order vGPUs arrive on a GPU (power_on_key)
    return _patterns(gpu_kind_key(gpu), ordered, _Frozen(gpu))


class _Frozen:
    """Carries the GPU into the cache without making it part of the key (the key describes it)."""

    def __init__(self, gpu: Gpu):
        self.gpu = gpu

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Frozen)


@lru_cache(maxsize=4096)
def _patterns(_key: tuple[object, ...], ordered: tuple[str, ...], holder: _Frozen) -> tuple[tuple[Pattern, ...], bool]:
    found: list[dict[str, int]] = []
    truncated = False

    def walk(gpu: Gpu, floor: int, counts: dict[str, int]) -> None:
        nonlocal truncated
        if len(found) >= MAX_PATTERNS:
            truncated = True
            return
        grew = False
        for i in range(floor, len(ordered)):
            p = ordered[i]
            if not fits(gpu, p):
                continue
            grew = True
            nxt = clone_gpu(gpu)
            add_vgpu(nxt, p)
            walk(nxt, i, {**counts, p: counts.get(p, 0) + 1})
        if not grew and counts:
            found.append(counts)

    walk(clone_gpu(holder.gpu), 0, {})
    return tuple(tuple(sorted(c.items())) for c in _maximal(found)), not truncated


def _maximal(patterns: Sequence[dict[str, int]]) -> list[dict[str, int]]:
    unique = {tuple(sorted(p.items())): p for p in patterns}
    items = sorted(unique.values(), key=lambda p: -sum(p.values()))
    kept: list[dict[str, int]] = []
    for p in items:
        if not any(all(q.get(k, 0) >= v for k, v in p.items()) for q in kept):
            kept.append(p)
    return kept


def capacity(gpu: Gpu, profile: str) -> int:
    """How many more vGPUs of one profile fit on `gpu`."""
    pats = addition_patterns(gpu, [profile])
    return pats[0].get(profile, 0) if pats else 0


def in_mode(gpu: Gpu, mode: str) -> Gpu:
    """An idle copy of `gpu` switched to `mode` (what placement sees after the mode change)."""
    kept = {f.name: getattr(gpu, f.name) for f in fields(gpu) if f.name in _KEPT_FIELDS}
    return Gpu(**kept, vgpu_mode=mode)


def is_idle(gpu: Gpu) -> bool:
    return not gpu.vgpus and not gpu.blocked
