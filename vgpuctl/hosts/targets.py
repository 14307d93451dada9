"""Which hosts an apply touches: the inventory entry that applies to each host, and their planned changes."""

from __future__ import annotations

from collections.abc import Sequence

from vgpuctl.hosts import plan as hostplan
from vgpuctl.inventory import HostSpec, Inventory
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import HostChange, Observed


@dataclass
class HostTarget:
    """One host to change: its moid, the inventory entry that applies to it, and its planned changes."""

    name: str
    moid: str
    spec: HostSpec
    changes: list[HostChange]


def targets_for(changes: Sequence[HostChange], specs: dict[str, HostSpec], moids: dict[str, str]) -> list[HostTarget]:
    """One HostTarget per host with changes, in host order (hosts without a spec get a default one)."""
    out = []
    for host in sorted({c.host for c in changes}):
        spec = specs.get(host) or HostSpec(name=host)
        out.append(HostTarget(host, moids[host], spec, [c for c in changes if c.host == host]))
    return out


def host_waves(widths: Sequence[tuple[str, int]]) -> list[list[str]]:
    """The waves apply changes hosts in: the hosts (name, their entry's `maintenance.max_unavailable`) in the order
    given, as many at a time as the smallest max_unavailable among them allows; a wave starts when the one before
    it has ended."""
    width = max(1, min((w for _, w in widths), default=1))
    names = [name for name, _ in widths]
    return [names[i : i + width] for i in range(0, len(names), width)]


def planned_waves(changes: Sequence[HostChange], specs: dict[str, HostSpec]) -> list[list[str]]:
    """The host waves of a plan's host changes, as apply_host_changes runs them (targets_for's order)."""
    hosts = sorted({c.host for c in changes})
    return host_waves([(h, (specs.get(h) or HostSpec(name=h)).maintenance.max_unavailable) for h in hosts])


def specs_by_host(inventory: Inventory | None, observed: Observed) -> dict[str, HostSpec]:
    """Host name -> the inventory entry that applies to it (empty without an inventory)."""
    if inventory is None or not inventory.hosts:
        return {}
    resolved, _ = hostplan.resolve_hosts(inventory.hosts, observed)
    return resolved
