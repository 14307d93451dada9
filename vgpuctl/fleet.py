"""A fleet split into its vCenters: one single-vCenter inventory per vCenter of `vcenters:`, which the pipeline
runs as it runs any inventory (vgpuctl.fleetrun composes the runs), and the `--vcenter` selection.

Pure: nothing here talks to vCenter. Each part's inventory is the file's own with the entries of that vCenter
only and its `vcenters` entry as the `vcenter:` section, so every stage below works as for one vCenter and every
error still points at the file (the entries keep their positions). The rules of the file itself are in
vgpuctl.inventory.fleet; docs/fleet.md says what a fleet does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from vgpuctl import names
from vgpuctl.errors import UsageError
from vgpuctl.inventory.schema import Inventory, VcenterEntry, VcenterSpec
from vgpuctl.lazyclass import dataclass
from vgpuctl.scope import Scope, ScopeResult

MAX_PARALLEL_VCENTERS = 8  # vCenters read (and applied) at the same time


@dataclass
class FleetPart:
    """One vCenter of a fleet: its name, its `vcenters` entry and the inventory of its entries."""

    name: str
    entry: VcenterEntry
    inventory: Inventory


def split(inventory: Inventory) -> list[FleetPart]:
    """The fleet's vCenters in the file's order, each with the inventory of its own entries (hosts, VMs, VM
    classes, namespaces); the file's other sections (guests, allow_destroy) go to each."""
    return [FleetPart(entry.name, entry, part_inventory(inventory, entry)) for entry in inventory.vcenters]


def part_inventory(inventory: Inventory, entry: VcenterEntry) -> Inventory:
    def mine(items: Iterable[object]) -> list[object]:
        return [i for i in items if inventory.vcenter_of(getattr(i, "vcenter", None)) == entry.name]

    section = VcenterSpec(url=entry.url, datacenter=entry.datacenter, tls=entry.tls)
    return inventory.model_copy(update={
        "vcenter": section, "vcenters": [], "default_vcenter": None, "hosts": mine(inventory.hosts),
        "vms": mine(inventory.vms), "vm_classes": mine(inventory.vm_classes), "namespaces": mine(inventory.namespaces),
    })  # fmt: skip


def select(parts: Sequence[FleetPart], patterns: Sequence[str]) -> tuple[list[FleetPart], list[str]]:
    """The parts `--vcenter` names (names or globs; all without patterns) and the names of those left out. A
    pattern that names no vCenter of the fleet is a UsageError, before anything connects."""
    if not patterns:
        return list(parts), []
    known = [p.name for p in parts]
    chosen: set[str] = set()
    for pattern in patterns:
        found = names.matching(pattern, known)
        if not found:
            raise UsageError(f"--vcenter {pattern}: no vCenter of the inventory matches (vcenters: "
                             f"{', '.join(known)})")
        chosen |= set(found)
    return [p for p in parts if p.name in chosen], [n for n in known if n not in chosen]


def refuse_vcenter_option(inventory: Inventory, patterns: Sequence[str]) -> None:
    """`--vcenter` names a vCenter of a fleet: a single-vCenter inventory names none."""
    if patterns and not inventory.is_fleet:
        raise UsageError(f"--vcenter {patterns[0]}: the inventory names no vCenters (a fleet lists them under "
                         "vcenters:, docs/fleet.md)")


def part_scope(scope: Scope | None) -> Scope | None:
    """The scope each vCenter's run gets: --host, --cluster and --vm, lenient (a pattern need only match in
    one vCenter of the fleet); None when they select nothing within a vCenter."""
    if scope is None or not scope.within_vcenter:
        return None
    return dataclasses.replace(scope, vcenters=[], lenient=True)


def unmatched_anywhere(scope: Scope | None, results: Iterable[ScopeResult | None]) -> list[str]:
    """The patterns (`--host esx-9`) that matched in none of the vCenters read: empty when each matched
    somewhere. Only parts that were read count: a vCenter that is down decides nothing."""
    if scope is None or not scope.within_vcenter:
        return []
    read = [r for r in results if r is not None]
    if not read:
        return []
    asked = [f"--host {p}" for p in scope.hosts] + [f"--cluster {p}" for p in scope.clusters] + \
        [f"--vm {p}" for p in scope.vms]
    return [a for a in asked if all(a in r.unmatched for r in read)]
