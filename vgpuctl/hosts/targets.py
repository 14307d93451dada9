"""Which hosts an apply touches: the inventory entry that applies to each host, and their planned changes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vgpuctl.hosts import plan as hostplan
from vgpuctl.inventory import HostSpec, Inventory
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


def specs_by_host(inventory: Inventory | None, observed: Observed) -> dict[str, HostSpec]:
    """Host name -> the inventory entry that applies to it (empty without an inventory)."""
    if inventory is None or not inventory.hosts:
        return {}
    resolved, _ = hostplan.resolve_hosts(inventory.hosts, observed)
    return resolved
