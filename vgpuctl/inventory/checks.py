"""The inventory's semantic checks: the rules that need more than one field and no vCenter.

`validate(inv)` raises InventoryErrors listing every problem; `iter_problems(inv)` yields them; `host_problems`
holds the rules one host entry, or a host's merged settings, must meet. `group_repeated` shows an error of one
cause once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from vgpuctl.domain import MAX_VGPUS_PER_VM, NvlinkRequirement, Power, VmState
from vgpuctl.errors import InventoryError, InventoryErrors
from vgpuctl.inventory.classes import iter_problems as class_problems
from vgpuctl.inventory.fleet import fleet_problems
from vgpuctl.inventory.netchecks import network_problems
from vgpuctl.inventory.schema import HostSpec, Inventory, VmSpec
from vgpuctl.inventory.yamlpos import KeyPath
from vgpuctl.profiles import BOARDS, PROFILE_GRAMMAR, ProfileError, is_host_spelling, mixing_problem, parse_profile
from vgpuctl.settings import SETTINGS

# `keep` means vgpuctl never touches the VM's power state; a removal powers it off and destroys it.
KEEP_ABSENT = ("power: keep never touches the VM, but state: absent powers it off and destroys it: remove "
               "'power: keep' to destroy the VM, or the entry's 'state: absent' to keep it")


def validate(inv: Inventory) -> None:
    """Semantic checks that need no vCenter; raises InventoryErrors listing every problem."""
    errors = list(iter_problems(inv))
    if errors:
        raise InventoryErrors(group_repeated(errors))


def iter_problems(inv: Inventory) -> Iterator[InventoryError]:
    yield from fleet_problems(inv)  # vcenters: names, the default, the vCenter each entry names
    yield from _check_vms(inv)
    yield from network_problems(inv)  # adapters, GPUDirect RDMA, identities, address pools, MACs
    yield from _check_hosts(inv)
    yield from class_problems(inv)  # VM classes and namespaces: duplicates, unknown references


def _folder_key(folder: str | None) -> str | None:
    """`/ml/train/` and `ml/train` name one folder; no folder stays None (not the root)."""
    return None if folder is None else "/".join(part for part in folder.split("/") if part)


def _check_vms(inv: Inventory) -> Iterator[InventoryError]:
    seen: dict[tuple[str | None, str | None, str], VmSpec] = {}  # a VM is its vCenter, its folder and its name
    groups = set(inv.guests.groups)
    for vm in inv.vms:
        base: KeyPath = ("vms", vm._index)
        key = (inv.vcenter_of(vm.vcenter), _folder_key(vm.folder), vm.name)
        if key in seen:
            first = seen[key]
            where = _first_defined(inv, first, (*base, "name"))
            in_folder = f" in folder {vm.folder!r}" if vm.folder is not None else ""
            yield inv.error((*base, "name"), f"duplicate VM name {vm.name!r}{in_folder}{where}")
            continue
        seen[key] = vm
        if not vm._vgpus_invalid:
            yield from _check_vgpus(inv, vm, base)
        if vm.guest is not None and vm.guest.group is not None and vm.guest.group not in groups:
            known = ", ".join(sorted(groups)) or "none defined"
            yield inv.error((*base, "guest", "group"),
                            f"unknown guest group {vm.guest.group!r} (guests.groups: {known})")
        if vm.cluster is not None and vm.host is not None:
            yield inv.error(base, "set 'cluster' or 'host', not both")
        if vm.state == VmState.ABSENT and vm.power == Power.KEEP:
            yield inv.error((*base, "power"), KEEP_ABSENT)


def _first_defined(inv: Inventory, first: VmSpec, here: KeyPath) -> str:
    """Where a VM's name was first defined: its line, and its file when that is another file of the inventory."""
    file, line = inv.where(("vms", first._index))
    if line is None:
        return ""
    return f" (first defined at line {line})" if file == inv.where(here)[0] else f" (first defined at {file}:{line})"


def _check_vgpus(inv: Inventory, vm: VmSpec, base: KeyPath) -> Iterator[InventoryError]:
    parsed = []
    for j, spec in enumerate(vm.vgpus):
        try:
            parsed.append(parse_profile(spec.profile))
        except ProfileError:
            if not is_host_spelling(spec.profile):  # else the plan asks the host (and names what it offers)
                yield inv.error((*base, "vgpus", j, "profile"),
                                f"not a vGPU profile name {spec.profile!r} (expected {PROFILE_GRAMMAR})")
    if len(parsed) != len(vm.vgpus):
        return
    total = vm.vgpu_count
    if total > MAX_VGPUS_PER_VM:
        yield inv.error((*base, "vgpus"), f"{total} vGPUs in total; a VM holds at most {MAX_VGPUS_PER_VM}")
    problem = mixing_problem(parsed)
    if problem:
        yield inv.error((*base, "vgpus"), problem)
    if vm.nvlink == NvlinkRequirement.REQUIRED and not vm.manages_vgpus:
        yield inv.error((*base, "nvlink"), "NVLink needs the VM's 'vgpus' listed (its device group is made of them)")
    elif vm.nvlink == NvlinkRequirement.REQUIRED:
        if total < 2:
            yield inv.error((*base, "nvlink"), "NVLink needs at least 2 vGPUs in the VM")
        for p in parsed:
            board = BOARDS.get(p.board)
            if p.is_mig or p.series != "c":
                yield inv.error((*base, "nvlink"),
                                f"NVLink P2P works only with time-sliced C-series vGPUs ({p.name} is not one)")
                break
            if board is not None and p.fb_gb != board.fb_gb:
                yield inv.error((*base, "nvlink"), f"NVLink P2P needs vGPUs that take a whole GPU "
                                f"({p.name} has {p.fb_gb} GB of a {board.fb_gb} GB {board.model})")
                break
            if board is not None and not board.nvlink_capable:
                yield inv.error((*base, "nvlink"), f"{board.model} GPUs have no NVLink")
                break


def _check_hosts(inv: Inventory) -> Iterator[InventoryError]:
    seen: set[tuple[str | None, str]] = set()
    for i, h in enumerate(inv.hosts):
        base: KeyPath = ("hosts", i)
        key = (inv.vcenter_of(h.vcenter), h.target)
        if key in seen:
            yield inv.error(base, f"{h.target} is configured twice")
        seen.add(key)
        for path, message in host_problems(h):
            yield inv.error((*base, *path), message)


def host_problems(h: HostSpec) -> list[tuple[KeyPath, str]]:
    """The rules one host entry, or a host's merged settings, must meet beyond the schema (each setting's own,
    vgpuctl.settings); key paths relative to the entry."""
    return [problem for setting in SETTINGS for problem in setting.problems(h)]


# ----------------------------------------------------------------------------- repeated errors, grouped

_INDEX = re.compile(r"\[\d+\]")
GROUP_AT = 3  # this many errors of one cause are shown as one


def group_repeated(errors: list[InventoryError]) -> list[InventoryError]:
    """Errors of one cause, once. The same error at one place (every VM of a name range) is kept once with
    the count; the same problem in GROUP_AT or more entries is its first occurrence plus the others' lines."""
    counted: dict[tuple[Any, ...], tuple[InventoryError, int]] = {}
    for e in errors:
        key = (e.file, e.line, e.col, e.message)
        first, n = counted.get(key, (e, 0))
        counted[key] = (first, n + 1)
    causes: dict[tuple[Any, ...], list[InventoryError]] = {}
    for e, n in counted.values():
        message = f"{e.message} (all {n} VMs of this entry's name range)" if n > 1 else e.message
        one = InventoryError(message, e.file, e.line, e.col)
        causes.setdefault((e.file, _INDEX.sub("[*]", e.message)), []).append(one)
    out: list[InventoryError] = []
    for same in causes.values():
        if len(same) < GROUP_AT:
            out += same
            continue
        first, rest = same[0], same[1:]
        lines = ", ".join(str(e.line) for e in rest[:8] if e.line) + (", ..." if len(rest) > 8 else "")
        hint = f" (the same in {len(rest)} more entries, at lines {lines}: one cause, fix them alike)"
        out.append(InventoryError(first.message + hint, first.file, first.line, first.col))
    return sorted(out, key=error_order)


def error_order(err: InventoryError) -> tuple[str, int, int]:
    return (err.file or "", err.line or 0, err.col or 0)
