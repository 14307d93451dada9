"""Loading an inventory: read the YAML (and the files it is composed of: vgpuctl.inventory.compose), check the
schema, expand name ranges, place each entry in its file.

`load_inventory(path)` raises InventoryErrors with every schema and semantic problem at once: when the schema
check fails, the semantic checks still run on the parts of the file that passed it.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vgpuctl.errors import InventoryError, InventoryErrors
from vgpuctl.inventory.checks import error_order, group_repeated, iter_problems
from vgpuctl.inventory.compose import Composed, Composition, compose_file, compose_text
from vgpuctl.inventory.ranges import expand_vms, name_count, range_errors, within_the_vm_limit
from vgpuctl.inventory.schema import (
    API_VERSION,
    GuestGroup,
    GuestsSpec,
    HostSpec,
    Inventory,
    StrictModel,
    VcenterEntry,
    VmSpec,
)
from vgpuctl.inventory.yamlpos import Sources, read_yaml_text

_M = typing.TypeVar("_M", bound=StrictModel)


def load_inventory(path: str | Path, composition: Composition | None = None) -> Inventory:
    """Read, parse and schema-check an inventory, with the files it includes and the overlay and values files of
    `composition` merged in (vgpuctl.inventory.compose); VM names come back range-expanded."""
    return _load(compose_file(path, composition or Composition()))


def load_inventory_text(text: str, name: str = "<inventory>", *, source_path: str | None = None) -> Inventory:
    """Like load_inventory, from a string (tests, stdin, saved plans); `name` names it in errors, `source_path`
    (default: `name`) is the file the paths in it are relative to. Text includes no files."""
    inv = _load(compose_text(read_yaml_text(text, name)))
    inv._source_path = source_path or name
    return inv


def _load(composed: Composed) -> Inventory:
    data, sources = composed.data, composed.sources
    file = sources.file or "<inventory>"
    if data is None:
        raise InventoryError("the inventory is empty (expected a mapping with apiVersion: vgpuctl/v1)", file, 1, 1)
    if not isinstance(data, dict):
        raise InventoryError(f"the inventory must be a mapping (got {type(data).__name__})", file, 1, 1)
    _wrap_vgpus(data, sources)
    name_errors = range_errors(data, sources)
    try:
        inv = Inventory.model_validate(data)
    except ValidationError as exc:
        errors = sources.schema_errors(exc, Inventory) + name_errors
        errors += _problems_of_valid_parts(data, sources)  # one pass: the semantic problems too
        raise InventoryErrors(group_repeated(sorted(errors, key=error_order))) from None
    if name_errors:
        errors = name_errors + _problems_of_valid_parts(data, sources)
        raise InventoryErrors(group_repeated(sorted(errors, key=error_order)))
    inv._source_path, inv._sources, inv._composed = file, sources, composed
    _place_hosts(inv, sources)
    _number(inv.vcenters)
    expand_vms(inv)
    return inv


def _wrap_vgpus(data: dict[str, Any], sources: Sources) -> None:
    """`vgpus: {profile, count}` -> a one-item list; messages and positions still point at the mapping."""
    vms = data.get("vms")
    if not isinstance(vms, list):
        return
    for i, vm in enumerate(vms):
        if isinstance(vm, dict) and isinstance(vm.get("vgpus"), dict):
            vm["vgpus"] = [vm["vgpus"]]
            sources.wrapped.add(("vms", i, "vgpus"))


def _place_hosts(inv: Inventory, sources: Sources, indices: list[int] | None = None) -> None:
    """Each host entry learns where the inventory's parts are written (host merging names their lines)."""
    for i, h in zip(indices or range(len(inv.hosts)), inv.hosts, strict=True):
        h._index, h._line, h._sources = i, sources.where(("hosts", i))[2], sources


# ---------------------------------------------------------------------- one pass: the valid parts of a file
#
# When the schema check fails, the semantic checks still run on what passed it, so that `validate` lists
# every problem of a file at once. An entry that fails on some keys is checked without them (a VM whose
# `vgpus` failed skips the vGPU checks); an entry that cannot stand without them is left out.


def _problems_of_valid_parts(data: dict[str, Any], sources: Sources) -> list[InventoryError]:
    sections: dict[str, Any] = {}
    for key in Inventory.model_fields:
        if key in ("api_version", "hosts", "vms", "vcenters"):
            continue
        alias = Inventory.model_fields[key].alias or key
        if alias in data:
            sections[key] = _valid_section(key, alias, data[alias])
    sections["vcenters"], vcenter_index = _valid_items(VcenterEntry, data.get("vcenters"))
    _number(sections["vcenters"], vcenter_index)
    hosts, host_index = _valid_items(HostSpec, data.get("hosts"))
    vms, vm_index = _valid_items(VmSpec, data.get("vms"))
    named = within_the_vm_limit([(vm, i) for vm, i in zip(vms, vm_index, strict=True) if _expands(vm.name)])
    inv = Inventory.model_construct(api_version=API_VERSION, hosts=hosts, vms=[vm for vm, _ in named], **sections)
    if isinstance(sections.get("guests"), _UnknownGroups):
        inv.guests = GuestsSpec(groups={vm.guest.group: GuestGroup() for vm, _ in named if vm.guest and vm.guest.group})
    inv._source_path, inv._sources = sources.file, sources
    _place_hosts(inv, sources, host_index)
    expand_vms(inv, [i for _, i in named])
    return list(iter_problems(inv))


def _number(vcenters: list[VcenterEntry], indices: list[int] | None = None) -> None:
    """Each vcenters entry learns its place in the file (the entries that failed the schema are left out)."""
    for i, entry in zip(indices or range(len(vcenters)), vcenters, strict=True):
        entry._index = i


class _UnknownGroups(GuestsSpec):
    """`guests` failed so badly that its group names are unknown: no VM's group is judged."""


def _valid_section(key: str, alias: str, value: Any) -> Any:
    try:
        return getattr(Inventory.model_validate({"apiVersion": API_VERSION, alias: value}), key)
    except ValidationError:
        if key != "guests":
            return Inventory.model_fields[key].get_default(call_default_factory=True)
        groups = value.get("groups") if isinstance(value, dict) else None
        if isinstance(groups, dict):  # the groups exist even where their contents are wrong
            return GuestsSpec(groups={str(name): GuestGroup() for name in groups})
        return _UnknownGroups()


def _valid_items(model: type[_M], items: Any) -> tuple[list[_M], list[int]]:
    out: list[_M] = []
    indices: list[int] = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        entry = _valid_item(model, item)
        if entry is not None:
            out.append(entry)
            indices.append(i)
    return out, indices


def _valid_item(model: type[_M], item: Any) -> _M | None:
    if not isinstance(item, dict):
        return None
    try:
        return model.model_validate(item)
    except ValidationError as exc:
        bad = {str(e["loc"][0]) for e in exc.errors(include_url=False) if e["loc"]}
    rest = {k: v for k, v in item.items() if k not in bad}
    if not bad or len(rest) == len(item):
        return None
    try:
        entry = model.model_validate(rest)
    except ValidationError:
        return None
    if isinstance(entry, VmSpec) and "vgpus" in bad:
        entry._vgpus_invalid = True
    return entry


def _expands(name: str) -> bool:
    try:
        name_count(name)
    except ValueError:
        return False
    return True

