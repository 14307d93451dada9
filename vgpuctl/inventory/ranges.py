"""Name ranges: `train-{01..04}` names four VMs, train-01 .. train-04.

The caps keep a hostile file from exhausting memory or time (documented in the README): one entry expands to
at most MAX_RANGE_NAMES names with at most 9 digits per bound, an inventory (its included files too) names at
most MAX_INVENTORY_VMS VMs.
"""

from __future__ import annotations

import itertools
import re
import typing
from collections.abc import Mapping
from typing import Any

from vgpuctl.errors import InventoryError
from vgpuctl.inventory.schema import MAX_VM_NAME, Inventory, VmSpec
from vgpuctl.inventory.yamlpos import KeyPath, Sources

MAX_RANGE_NAMES = 10_000  # names one `{FIRST..LAST}` entry may expand to
MAX_INVENTORY_VMS = 100_000  # VMs one inventory (all its files together) may name once ranges are expanded
_RANGE_DIGITS = 9
_RANGE = re.compile(r"\{([^{}]*)\}")
_RANGE_BODY = re.compile(r"(\d+)\.\.(\d+)")


def expand_name(name: str) -> list[str]:
    """`train-{01..04}` -> train-01 .. train-04; several ranges multiply; zero padding is kept.

    Raises ValueError for a malformed or reversed range, or one that expands to more than MAX_RANGE_NAMES
    names (checked before any name is made)."""
    if "{" not in name and "}" not in name:
        return [name]
    parts = _checked_parts(name)
    choices = [[p] if isinstance(p, str) else p.values() for p in parts]
    return ["".join(combo) for combo in itertools.product(*choices)]


def name_count(name: str) -> int:
    """How many names `name` expands to, none of them made; ValueError as expand_name raises it."""
    if "{" not in name and "}" not in name:
        return 1
    return _count(_checked_parts(name))


def _count(parts: list[str | _Range]) -> int:
    total = 1
    for p in parts:
        if isinstance(p, _Range):
            total *= p.size
    return total


def _checked_parts(name: str) -> list[str | _Range]:
    """The name's literal parts and ranges, within MAX_RANGE_NAMES names in all."""
    parts: list[str | _Range] = []
    last = 0
    for m in _RANGE.finditer(name):
        literal = name[last:m.start()]
        if "{" in literal or "}" in literal:
            raise ValueError(f"unbalanced braces in {name!r}")
        parts += [literal, _parse_range(m.group(1), name)]
        last = m.end()
    tail = name[last:]
    if "{" in tail or "}" in tail:
        raise ValueError(f"unbalanced braces in {name!r}")
    parts.append(tail)
    total = _count(parts)
    if total > MAX_RANGE_NAMES:
        raise ValueError(f"{name!r} expands to {total} names (at most {MAX_RANGE_NAMES} per entry)")
    return parts


class _Range(typing.NamedTuple):
    lo: int
    hi: int
    width: int

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1

    def values(self) -> list[str]:
        return [str(i).zfill(self.width) for i in range(self.lo, self.hi + 1)]


def _parse_range(body: str, name: str) -> _Range:
    m = _RANGE_BODY.fullmatch(body)
    if m is None:
        raise ValueError(
            f"bad name range {{{body}}} in {name!r}: expected {{FIRST..LAST}} with numbers, e.g. {{01..04}}"
        )
    a, b = m.group(1), m.group(2)
    if max(len(a), len(b)) > _RANGE_DIGITS:
        raise ValueError(f"bad name range {{{body}}} in {name!r}: at most {_RANGE_DIGITS} digits per bound")
    lo, hi = int(a), int(b)
    if lo > hi:
        raise ValueError(f"bad name range {{{body}}} in {name!r}: {a} is greater than {b}")
    padded = (len(a) > 1 and a.startswith("0")) or (len(b) > 1 and b.startswith("0"))
    return _Range(lo, hi, max(len(a), len(b)) if padded else 0)


def expand_vms(inv: Inventory, indices: list[int] | None = None) -> None:
    """Range names -> one VmSpec per name; `indices`: each entry's position in the file (default: in order)."""
    expanded: list[VmSpec] = []
    for i, vm in zip(indices or range(len(inv.vms)), inv.vms, strict=True):
        line = inv.where(("vms", i))[1]
        names = expand_name(vm.name)  # already checked by range_errors
        if names == [vm.name]:
            vm._index, vm._line = i, line
            expanded.append(vm)
            continue
        for ordinal, n in enumerate(names):
            copy = vm.model_copy(update={"name": n}, deep=True)
            copy._index, copy._line, copy._ordinal = i, line, ordinal
            expanded.append(copy)
    inv.vms = expanded


def within_the_vm_limit(named: list[tuple[VmSpec, int]]) -> list[tuple[VmSpec, int]]:
    """The VM entries (each with its place in the file) up to the one whose names pass MAX_INVENTORY_VMS, which
    range_errors names: checking the rest would expand names without bound (a small file of many ranges)."""
    total = 0
    for at, (vm, _) in enumerate(named):
        total += name_count(vm.name)
        if total > MAX_INVENTORY_VMS:
            return named[:at]
    return named


def range_errors(data: Mapping[str, Any], sources: Sources) -> list[InventoryError]:
    """Name-range mistakes, found before the schema check so that one pass reports them with the rest."""
    errors = []
    total = 0
    vms = data.get("vms")
    for i, vm in enumerate(vms if isinstance(vms, list) else []):
        name = vm.get("name") if isinstance(vm, dict) else None
        if not isinstance(name, str):
            total += 1
            continue
        at: KeyPath = ("vms", i, "name")
        try:
            names = expand_name(name)
        except ValueError as exc:
            errors.append(sources.error(at, str(exc)))
            continue
        total += len(names)
        longest = max(names, key=len)
        if "{" in name and len(longest) > MAX_VM_NAME:  # a plain name is measured by the schema
            errors.append(sources.error(at, f"{name!r} names VMs of {len(longest)} characters ({longest!r}); "
                                        f"vSphere takes VM names of at most {MAX_VM_NAME}"))
        if total > MAX_INVENTORY_VMS:
            errors.append(sources.error(at, f"the inventory names more than {MAX_INVENTORY_VMS} VMs (split it "
                                        "into several inventories)"))
            break
    return errors
