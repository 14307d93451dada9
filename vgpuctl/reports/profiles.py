"""`vgpuctl profiles`' document: the vGPU profiles each host offers, with framebuffer, series, sharing and the most per
GPU in the GPU's mode (the host's own figure when it reports one)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

from vgpuctl.domain import GpuVgpuMode, ProfileSharing, VgpuMode
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import ObservedGpu, ObservedHost
from vgpuctl.profiles import (
    ProfileError,
    VgpuProfile,
    board_for_device,
    capped_max,
    observed_profile,
    parse_profile,
    try_parse,
)
from vgpuctl.profiles import max_per_gpu as profiles_max
from vgpuctl.profiles import published_max_per_gpu as profiles_published
from vgpuctl.reports.base import TERMINAL, Rendered, Report, TextLayout, optional, whole
from vgpuctl.visible import visible

if TYPE_CHECKING:
    from rich.console import RenderableType


@dataclass
class ProfileRow:
    profile: str
    fb_gb: float | None
    series: str | None
    board: str | None
    sharing: str  # timeSliced | mig
    profile_class: str | None  # compute | quadro
    max_per_gpu: int | None
    # NVIDIA's published maximum where it is more than the framebuffer holds (max_per_gpu is then the cap)
    published_max: int | None = optional()


@dataclass
class HostProfiles:
    host: str
    profiles: list[ProfileRow]


@dataclass
class ProfilesReport(Report):
    kind: ClassVar[str] = "profiles"
    hosts: list[HostProfiles]
    round_trips: int | None = optional()

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        """One table per distinct set of profiles, titled with the hosts that offer it (64 equal hosts: one); in
        a pipe, one plain line per host and profile (every host named, nothing cut)."""
        from rich.text import Text

        if layout.plain:
            return "\n".join(f"host {h.host}  " + _profile_line(r) for h in self.hosts for r in h.profiles) or \
                "no vGPU profiles offered"
        groups: dict[str, tuple[list[str], list[ProfileRow]]] = {}
        for h in self.hosts:
            groups.setdefault(repr(h.profiles), ([], h.profiles))[0].append(h.host)
        out: list[RenderableType] = []
        for names, rows in groups.values():
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            out.append(_profiles_table(shown, rows) if rows else Text(f"{shown}: no vGPU profiles offered"))
        return out


def _profile_cells(r: ProfileRow) -> tuple[str, str, str, str, str]:
    fb = f"{r.fb_gb} GB" if r.fb_gb is not None else "?"
    sharing = "MIG" if r.sharing == ProfileSharing.MIG else "time-sliced"
    limit = str(r.max_per_gpu) if r.max_per_gpu is not None else "?"
    if r.published_max is not None:
        limit += f" (NVIDIA lists {r.published_max}, more than the framebuffer holds)"
    return r.profile, fb, r.series or "?", sharing, limit


def _profile_line(r: ProfileRow) -> str:
    profile, fb, series, sharing, limit = _profile_cells(r)
    return f"profile {profile}  framebuffer {fb}  series {series}  sharing {sharing}  max per GPU {limit}"


def _profiles_table(shown: str, rows: list[ProfileRow]) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"Profiles on {shown}", title_justify="left")
    for col in ("profile", "framebuffer", "series", "sharing", "max per GPU"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(*(Text(visible(cell, False)) for cell in _profile_cells(r)))
    return table


def max_per_gpu(profile: VgpuProfile, sharing: str, host: ObservedHost) -> int | None:
    """How many vGPUs of this profile one GPU of the host holds at most in its current mode: what the host reports
    for the type, else NVIDIA's maximum from the catalogue (profiles.max_per_gpu) for the mode of the host's GPUs
    of the type's board that can serve it (MIG ones for a MIG-backed type, time-sliced ones otherwise). GPUs in
    both equal-size and mixed-size mode: the smaller maximum."""
    reported = host.profiles.get(profile.name)
    if reported is not None and reported.max_per_gpu is not None:
        return reported.max_per_gpu
    mig = sharing == ProfileSharing.MIG or profile.is_mig
    gpus = [g for g in host.gpus if (g.vgpu_mode == GpuVgpuMode.MIG) == mig
            and board_for_device(g.device_name, gpu_gb(g), g.device_id, host.offered_profiles) == profile.board]
    maxima = {profiles_max(profile, g.vgpu_mode, gpu_gb(g)) for g in gpus}
    maxima = maxima or {profiles_max(profile, VgpuMode.SAME_SIZE)}
    known = [m for m in maxima if m is not None]
    return min(known) if known and len(known) == len(maxima) else None


def published_beyond(profile: VgpuProfile, host: ObservedHost) -> int | None:
    """NVIDIA's published maximum of the type for a mode of the host's GPUs when it is more than the framebuffer
    holds (profiles.capped_max cut it), and the host reported no maximum of its own; else None."""
    reported = host.profiles.get(profile.name)
    if reported is not None and reported.max_per_gpu is not None:
        return None
    modes = {g.vgpu_mode for g in host.gpus if g.vgpu_mode != GpuVgpuMode.MIG} or {str(VgpuMode.SAME_SIZE)}
    published = [p for m in modes if (p := profiles_published(profile, m)) is not None]
    beyond = [p for p in published if (capped_max(p, profile) or p) < p]
    return max(beyond) if beyond else None


def _profile_row(name: str, host: ObservedHost) -> ProfileRow:
    info = host.profiles.get(name)
    try:
        parsed: VgpuProfile | None = parse_profile(name)
    except ProfileError:
        parsed = None
    mig = parsed is not None and parsed.is_mig
    sharing = info.sharing if info else str(ProfileSharing.MIG if mig else ProfileSharing.TIME_SLICED)
    return ProfileRow(
        profile=name,
        fb_gb=profile_fb(name, host) if info or parsed else None,
        series=parsed.series.upper() if parsed else None,
        board=parsed.board if parsed else None,
        sharing=sharing,
        profile_class=info.profile_class if info else None,
        max_per_gpu=max_per_gpu(parsed, sharing, host) if parsed else None,
        published_max=published_beyond(parsed, host) if parsed and not mig else None,
    )


def host_profiles(host: ObservedHost) -> list[ProfileRow]:
    """The profiles the host's GPUs offer in their current modes, by board and sharing, then by size (5, 10,
    20, 40 GB, not as the names sort); names no table explains last."""
    rows = [_profile_row(name, host) for name in host.offered_profiles]
    return sorted(rows, key=lambda r: (r.board is None, r.board or "", r.sharing, r.fb_gb is None, r.fb_gb or 0,
                                       r.series or "", r.profile))


def with_reported_maxima(host: ObservedHost, instance_totals: dict[str, int]) -> None:
    """Record what the host reports as the most vGPUs of its offered MIG-backed types per GPU: the total
    instances of each type's GPU instance profile (`nvidia-smi mig -lgip`, GPU instance name -> total, the
    smallest over the host's MIG GPUs). The host's figure then wins over the catalogue's in `profiles`."""
    for name in host.offered_profiles:
        parsed = try_parse(name)
        gi = parsed.gi_profile if parsed is not None and parsed.is_mig else None
        if gi is None or gi not in instance_totals:
            continue
        known = host.profiles.get(name) or observed_profile(name)
        host.profiles[name] = dataclasses.replace(known, max_per_gpu=instance_totals[gi])


def profiles_report(hosts: list[ObservedHost], round_trips: int | None = None) -> ProfilesReport:
    return ProfilesReport([HostProfiles(h.name, host_profiles(h)) for h in hosts], round_trips)


KB_PER_GB = 1024 * 1024


def gpu_gb(gpu: ObservedGpu) -> int:
    return round(gpu.memory_kb / KB_PER_GB)


def profile_fb(name: str, host: ObservedHost | None) -> float:
    """A profile's framebuffer as the host describes it, else from its name (0 when neither knows)."""
    if host is not None and name in host.profiles:
        return whole(host.profiles[name].fb_gb)
    try:
        return whole(parse_profile(name).fb_gb)
    except ProfileError:
        return 0
