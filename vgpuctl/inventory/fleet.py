"""A fleet: an inventory that names several vCenters (`vcenters:`), each entry belonging to one of them.

The rules a file must meet, each error at its FILE:LINE:COL (docs/fleet.md): `vcenter:` (one vCenter) or
`vcenters:` (several), not both; every vCenter named once (names compared as the environment variables they end
are: `lab-east` and `LAB_EAST` are one name); `default_vcenter` and every entry's `vcenter:` name one of them; an
entry that names none belongs to the default, or to the only vCenter of the list; a file of several vCenters
without a default names one on every entry. A single-vCenter inventory names no vCenter anywhere.
"""

from __future__ import annotations

from collections.abc import Iterator

from vgpuctl.errors import InventoryError
from vgpuctl.inventory.schema import Inventory, vcenter_env_key
from vgpuctl.inventory.yamlpos import KeyPath

BOTH = ("set 'vcenter' (one vCenter) or 'vcenters' (several, each with its name, url, datacenter and tls), not "
        "both")


def fleet_problems(inv: Inventory) -> Iterator[InventoryError]:
    """Every fleet rule the file breaks (none for a single-vCenter inventory that names no vCenter)."""
    if inv.vcenters and "vcenter" in inv.model_fields_set:
        yield inv.error(("vcenters",), BOTH)
    yield from _names(inv)
    names = [v.name for v in inv.vcenters]
    if inv.default_vcenter is not None:
        yield from _reference(inv, ("default_vcenter",), inv.default_vcenter, names)
    for path, named in entries(inv):
        if named is not None:
            yield from _reference(inv, (*path, "vcenter"), named, names)
        elif inv.vcenters and inv.vcenter_of(None) is None:
            yield inv.error(path, f"belongs to no vCenter: the file names several ({', '.join(names)}) and no "
                            "default_vcenter; set 'vcenter: NAME' on the entry, or default_vcenter")


def _names(inv: Inventory) -> Iterator[InventoryError]:
    first: dict[str, tuple[str, int | None]] = {}
    for vcenter in inv.vcenters:
        i = vcenter._index
        key = vcenter_env_key(vcenter.name)
        if key in first:
            name, line = first[key]
            same = "" if name == vcenter.name else f" ({name!r} and {vcenter.name!r} end the same variables)"
            at = f" (first at line {line})" if line else ""
            yield inv.error(("vcenters", i, "name"), f"two vCenters are named {name!r}{same}{at}")
            continue
        first[key] = (vcenter.name, inv.where(("vcenters", i, "name"))[1])


def _reference(inv: Inventory, path: KeyPath, named: str, names: list[str]) -> Iterator[InventoryError]:
    if not names:
        yield inv.error(path, f"names vCenter {named!r}, but the file lists no vcenters (a single-vCenter "
                        "inventory takes its vcenter: section and names none)")
    elif named not in names:
        yield inv.error(path, f"unknown vCenter {named!r} (vcenters: {', '.join(names)})")


def entries(inv: Inventory) -> Iterator[tuple[KeyPath, str | None]]:
    """Each entry that belongs to a vCenter, once (a VM name range is one entry): its key path and the vCenter
    it names (None: the default)."""
    for h in inv.hosts:
        yield ("hosts", h._index), h.vcenter
    seen: set[int] = set()
    for vm in inv.vms:
        if vm._index not in seen:
            seen.add(vm._index)
            yield ("vms", vm._index), vm.vcenter
    for i, spec in enumerate(inv.vm_classes):
        yield ("vm_classes", i), spec.vcenter
    for i, ns in enumerate(inv.namespaces):
        yield ("namespaces", i), ns.vcenter
