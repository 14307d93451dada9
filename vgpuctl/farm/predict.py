"""The hosts as vSphere will show them once planned host changes are applied: each setting predicts its part
(graphics types, vGPU modes), then the profiles the GPUs offer follow from their modes. Pure: no I/O.

VMs are planned against the predicted hosts (vgpuctl.vms.plan), so a GPU switched to MIG offers its MIG
profiles in the same plan; what the host already offers is kept, profiles of a newly entered mode come from the
board's catalogue.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from vgpuctl.domain import ChangeKind, GpuVgpuMode
from vgpuctl.model import HostChange, Observed, ObservedHost
from vgpuctl.profiles import BOARDS, gpu_board, observed_profile, try_parse
from vgpuctl.settings import SETTINGS


def mig_profile_names(board: str, prefix: str = "grid_") -> list[str]:
    """The MIG-backed C-series types of a board from the vGPU type catalogue, smallest first (grid_a100-1-5c
    ...); types with media extensions are left out (a host offers them too, nobody asks for them by default)."""
    info = BOARDS.get(board)
    if info is None:
        return []
    rows = [t for t in info.types.values() if t.mig_gi and t.series == "C" and not t.media]
    return [prefix + t.name.lower() for t in sorted(rows, key=lambda t: (str(t.mig_gi)[0], t.fb_gb))]


def time_sliced_profile_names(board: str, prefix: str = "grid_") -> list[str]:
    """The time-sliced C-series types of a board from the vGPU type catalogue, smallest first."""
    info = BOARDS.get(board)
    if info is None:
        return []
    rows = [t for t in info.types.values() if not t.mig_gi and t.series == "C"]
    return [prefix + t.name.lower() for t in sorted(rows, key=lambda t: t.fb_gb)]


def predict_host(host: ObservedHost, changes: Sequence[HostChange]) -> ObservedHost:
    """The host as vSphere will show it once `changes` are applied (graphics types, vGPU modes, offered
    profiles)."""
    out = copy.deepcopy(host)
    mine = [c for c in changes if c.host == host.name]
    for setting in SETTINGS:
        setting.predict(out, [c for c in mine if c.kind in setting.kinds])
    if any(c.kind == ChangeKind.RESUME for c in mine):  # apply finishes the host's work, maintenance included
        out.in_maintenance = False
    out.offered_profiles = _offered_after(host, out)
    out.profiles = {p: host.profiles.get(p) or observed_profile(p) for p in out.offered_profiles}
    return out


def _offered_after(before: ObservedHost, after: ObservedHost) -> list[str]:
    offered = set()
    prefix = "nvidia_" if any(p.startswith("nvidia_") for p in before.offered_profiles) else "grid_"
    for g in after.gpus:
        board = gpu_board(g, before.offered_profiles)
        if board is None:
            continue
        mig = g.vgpu_mode == GpuVgpuMode.MIG
        own = [
            p
            for p in before.offered_profiles
            if (q := try_parse(p)) is not None and q.board == board and q.is_mig == mig
        ]
        offered.update(own or (mig_profile_names(board, prefix) if mig else time_sliced_profile_names(board, prefix)))
    return sorted(offered)


def predict_observed(observed: Observed, changes: Sequence[HostChange]) -> Observed:
    """A copy of `observed` with every changed host replaced by its prediction (for placing VMs)."""
    out = copy.copy(observed)
    out.hosts = dict(observed.hosts)
    for name in {c.host for c in changes}:
        if name in out.hosts:
            out.hosts[name] = predict_host(observed.hosts[name], changes)
    return out
