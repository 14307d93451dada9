"""A driver upgrade window as the plan document and its text show it (vgpuctl.hosts.window): the guest drivers moved
first, the hosts batch by batch with their vGPU Manager before and after and where their running VMs go, then the
guest drivers moved to their group's release."""

from __future__ import annotations

from dataclasses import field

from vgpuctl.domain import EvacuationKind, WindowStage
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import EvacuationAction, GuestDriverMove, HostChange, UpgradeWindow


@dataclass
class GuestDriverDiff:
    """A guest driver the window installs in a running VM: from `old` to `new`, with the group's file; `why` names
    the versions and NVIDIA's rule."""

    vm: str
    group: str
    stage: WindowStage
    old: str
    new: str
    src: str
    why: str


@dataclass
class WindowHost:
    """A host of the window: its vGPU Manager before and after, and where each of its running VMs goes
    (`vm -> host` for a vMotion, `vm powered off` otherwise)."""

    host: str
    manager_before: str
    manager_after: str
    vms: list[str] = field(default_factory=list)


@dataclass
class WindowReport:
    """The window: guests first (`before`), the hosts batch by batch (max_unavailable at a time, in apply's order),
    then the guests to their release (`after`)."""

    before: list[GuestDriverDiff]
    batches: list[list[WindowHost]]
    after: list[GuestDriverDiff]

    @property
    def is_empty(self) -> bool:
        return not (self.before or self.batches or self.after)


def _diff(m: GuestDriverMove) -> GuestDriverDiff:
    return GuestDriverDiff(m.vm, m.group, m.stage, m.old, m.new, m.src, m.why)


def _vm_text(vm: str, action: EvacuationAction) -> str:
    if action.kind == EvacuationKind.MIGRATE:
        return f"{vm} -> {action.destination}"
    return f"{vm} powered off ({action})"


def window_report(window: UpgradeWindow | None, host_changes: list[HostChange]) -> WindowReport | None:
    """The report of a plan's window (None without one, or an empty one)."""
    if window is None or window.is_empty:
        return None
    evacuated: dict[str, list[str]] = {}
    for c in host_changes:
        if isinstance(c.new, EvacuationAction):
            evacuated.setdefault(c.host, []).append(_vm_text(c.target, c.new))
    batches = [[WindowHost(h, window.managers[h][0], window.managers[h][1], evacuated.get(h, [])) for h in batch]
               for batch in window.batches]
    return WindowReport([_diff(m) for m in window.before], batches, [_diff(m) for m in window.after])


def guest_driver_text(g: GuestDriverDiff) -> str:
    """`~ vm infer-01 guest driver: 535.154.05 -> 550.90.07`, with NVIDIA's rule for a move before the hosts."""
    return f"~ vm {g.vm} guest driver: {g.old} -> {g.new}" + (f"  ({g.why})" if g.stage == WindowStage.BEFORE else "")


def window_lines(report: WindowReport) -> list[str]:
    """The window's lines in the plan's text, guest by guest and host by host, in the order apply takes them."""
    lines = ["Driver upgrade window, in this order:"]
    if report.before:
        lines.append("  1. guest drivers first, to a release both vGPU Managers accept:")
        lines += [f"       {guest_driver_text(g)}" for g in report.before]
    if report.batches:
        lines.append("  2. the hosts, each out of service only with the others of its line:")
        for i, batch in enumerate(report.batches, start=1):
            for h in batch:
                moved = f"; {', '.join(h.vms)}" if h.vms else "; no VM runs there"
                lines.append(f"       {i}) host {h.host} vGPU Manager {h.manager_before} -> {h.manager_after}{moved}")
    if report.after:
        lines.append("  3. guest drivers to their group's release:")
        lines += [f"       {guest_driver_text(g)}" for g in report.after]
    return lines
