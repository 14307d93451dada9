"""What keeps a host's GPUs from taking vGPUs now, and the fix: `capacity` names it instead of counting zeros.

A host out of the answer: disconnected (or not responding), powered off, in maintenance mode, or without a GPU.
GPUs that cannot take vGPUs: a graphics type other than Shared Direct (vSGA `shared`, or another type: vGPUs
need `sharedDirect`, docs/gpu-rules.md "Physical GPU state"), or something holds them that vgpuctl cannot
identify (placement blocks them). Pure functions over observed data.
"""

from __future__ import annotations

from vgpuctl.domain import ConnectionState, GraphicsType, HostPowerState
from vgpuctl.farm.placement import Gpu
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import ObservedHost

GRAPHICS_FIX = ("set the GPUs' graphics type to Shared Direct (inventory: graphics: {default_type: sharedDirect} "
                "or gpus: [{graphics_type: sharedDirect}]; the host reboots), or add `graphics` to the demand's "
                "allow (hosts that run no VM)")


@dataclass(frozen=True)
class Blocker:
    """Why a host (or some of its GPUs) takes no vGPUs, and what makes it take them."""

    what: str
    fix: str

    def text(self) -> str:
        return f"{self.what}; fix: {self.fix}"


def host_blocker(host: ObservedHost) -> Blocker | None:
    """What keeps the whole host out: its connection, power state, maintenance mode, no GPU."""
    if host.connection_state != ConnectionState.CONNECTED:
        return Blocker(f"{host.connection_state} in vCenter", "reconnect the host in vCenter")
    if host.power_state != HostPowerState.ON:
        return Blocker(f"powered off ({host.power_state})", "power the host on")
    if host.in_maintenance:
        return Blocker("in maintenance mode", "take the host out of maintenance mode")
    if not host.gpus:
        return Blocker("has no GPU vSphere reports", "none: the host has no adapter for vGPUs")
    return None


def graphics_blocker(gpus: list[Gpu]) -> Blocker | None:
    """GPUs whose graphics type is not Shared Direct (vGPUs need it), or None when every GPU has it."""
    wrong = [g for g in gpus if g.graphics_type != GraphicsType.SHARED_DIRECT]
    if not wrong:
        return None
    types = " or ".join(sorted({_label(g.graphics_type) for g in wrong}))
    which = "all its GPUs" if len(wrong) == len(gpus) else "GPU " + ", ".join(g.id for g in wrong)
    return Blocker(f"the graphics type of {which} is {types}; vGPUs need Shared Direct", GRAPHICS_FIX)


def held_blocker(gpus: list[Gpu]) -> Blocker | None:
    """GPUs something holds that vgpuctl cannot identify (no free adapter for new vGPUs), or None."""
    held = [g for g in gpus if g.blocked and g.graphics_type == GraphicsType.SHARED_DIRECT]
    if not held:
        return None
    which = "all its GPUs are" if len(held) == len(gpus) else "GPU " + ", ".join(g.id for g in held) + (
        " is" if len(held) == 1 else " are")
    reasons = "; ".join(sorted({g.blocked_reason or "held" for g in held}))
    return Blocker(f"no free adapter: {which} held ({reasons})",
                   "power off or remove what holds them, or give their vGPUs profiles vgpuctl knows")


def _label(graphics_type: str) -> str:
    return {"shared": "Shared (vSGA)", "sharedDirect": "Shared Direct", "direct": "Direct (passthrough)",
            "basic": "Basic"}.get(graphics_type, graphics_type)


def gpu_blockers(gpus: list[Gpu]) -> list[Blocker]:
    """Everything that keeps some of these GPUs (one host's) from new vGPUs."""
    return [b for b in (graphics_blocker(gpus), held_blocker(gpus)) if b is not None]


def usable(gpu: Gpu) -> bool:
    return gpu.graphics_type == GraphicsType.SHARED_DIRECT and not gpu.blocked
