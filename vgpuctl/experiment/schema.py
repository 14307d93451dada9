"""The experiment file (apiVersion vgpuctl/v1, kind Experiment) and the merge of each variant onto the base.

Variants are overlays merged with the inventory's host-entry rules; an overlay may only change what the base sets.
The file format: docs/experiments.md. Errors are FILE:LINE:COL, located with the inventory loader.
"""

from __future__ import annotations

import copy
import difflib
import re
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from vgpuctl.errors import InventoryError, InventoryErrors
from vgpuctl.guest.targets import resolve_path_vars
from vgpuctl.inventory import Inventory, expand_name, load_inventory_text, validate
from vgpuctl.inventory.compose import Composition, compose_file
from vgpuctl.inventory.yamlpos import KeyPath, Pos, PositionedYaml, format_path, lookup, read_yaml
from vgpuctl.lazyclass import dataclass

KIND = "Experiment"
BUILTIN_WORKLOADS = ("nccl-tests", "p2pBandwidthLatencyTest")
NCCL_TESTS = ("all_reduce_perf", "sendrecv_perf")
_FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")  # names a folder: one safe path component


def _folder_name(v: str) -> str:
    if not _FOLDER_NAME.fullmatch(v):
        raise ValueError(f"must be letters, digits, '.', '_' or '-' (it names a folder), got {v!r}")
    return v


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True, allow_inf_nan=False)


class WorkloadSpec(_Model):
    """A built-in benchmark, or a command run on the VMs (its output is kept, not parsed)."""

    builtin: Literal["nccl-tests", "p2pBandwidthLatencyTest"] | None = None
    command: str | None = None
    test: Literal["all_reduce_perf", "sendrecv_perf"] = "all_reduce_perf"  # nccl-tests only
    scope: Literal["per-vm", "across-vms"] = "per-vm"  # nccl-tests: the GPUs of each VM, or all VMs over MPI
    args: list[str] = Field(default_factory=lambda: ["-b", "8", "-e", "128M", "-f", "2"])
    source: str | None = None  # archive or repository URL (or a local copy) the guest role builds from
    timeout_s: int = Field(default=3600, ge=1)

    @model_validator(mode="after")
    def _one_kind(self) -> WorkloadSpec:
        if (self.builtin is None) == (self.command is None):
            raise ValueError("set exactly one of 'builtin' or 'command'")
        return self

    @property
    def label(self) -> str:
        if self.builtin == "nccl-tests":
            return f"{self.test} ({self.scope})"
        return self.builtin or "command"

    @property
    def key(self) -> str:
        """One report table per key: the same benchmark with the same scope."""
        if self.builtin == "nccl-tests":
            return f"nccl-tests.{self.test}.{self.scope}"
        return self.builtin or "command"


class VariantSpec(_Model):
    name: str
    description: str | None = None
    hosts: list[dict[str, Any]] = Field(default_factory=list)
    vms: list[dict[str, Any]] = Field(default_factory=list)
    workload: WorkloadSpec | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _folder_name(v)

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for entry in v:
            if ("cluster" in entry) == ("name" in entry):
                raise ValueError("each host entry names exactly one of 'cluster' or 'name'")
        return v

    @field_validator("vms")
    @classmethod
    def _vms(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for entry in v:
            if not isinstance(entry.get("name"), str):
                raise ValueError("each VM entry names the VM it changes ('name')")
        return v


class Experiment(_Model):
    api_version: Literal["vgpuctl/v1"] = Field(alias="apiVersion")
    kind: Literal["Experiment"]
    name: str | None = None
    inventory: str
    vms: list[str] = Field(min_length=1)
    repetitions: int = Field(default=1, ge=1, le=1000)
    on_failure: Literal["continue", "stop"] = "continue"
    workload: WorkloadSpec | None = None
    variants: list[VariantSpec] = Field(min_length=1)
    _source_path: str = PrivateAttr(default="<experiment>")
    _pos: dict[KeyPath, Pos] = PrivateAttr(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        return None if v is None else _folder_name(v)

    @property
    def source_path(self) -> str:
        return self._source_path

    @property
    def base_inventory_path(self) -> Path:
        inv = Path(self.inventory).expanduser()
        return inv if inv.is_absolute() else Path(self._source_path).resolve().parent / inv

    @property
    def title(self) -> str:
        return self.name or Path(self._source_path).stem

    def workload_of(self, variant: VariantSpec) -> WorkloadSpec:
        workload = variant.workload or self.workload
        assert workload is not None  # checked at load
        return workload

    def variant(self, name: str) -> VariantSpec:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    def error(self, path: KeyPath, message: str) -> InventoryError:
        line, col = lookup(self._pos, path)
        return InventoryError(f"{format_path(path)}: {message}" if path else message, self._source_path, line, col)


# ------------------------------------------------------------------------------------------------ load


def load_experiment(path: str | Path) -> Experiment:
    """Read and check an experiment file (not yet the merged inventories: see `merge_variant`)."""
    doc = read_yaml(path)
    if not isinstance(doc.data, dict):
        raise InventoryError("the experiment file must be a mapping (apiVersion: vgpuctl/v1, kind: Experiment)",
                             doc.file, 1, 1)
    try:
        exp = Experiment.model_validate(doc.data)
    except ValidationError as exc:
        errors = _located_schema_errors(exc, doc)
        raise InventoryErrors(sorted(errors, key=lambda e: (e.line or 0, e.col or 0))) from None
    exp._source_path, exp._pos = doc.file, doc.pos
    errors = list(_check(exp))
    if errors:
        raise InventoryErrors(errors)
    return exp


def _located_schema_errors(exc: ValidationError, doc: PositionedYaml) -> list[InventoryError]:
    """The inventory loader's located schema errors; an unknown key's hint names this file's keys."""
    located = doc.schema_errors(exc)
    for err, loc_err in zip(exc.errors(include_url=False), located, strict=True):
        if err["type"] != "extra_forbidden":
            continue
        key = str(err["loc"][-1])
        allowed = _keys_at(tuple(p for p in err["loc"][:-1] if isinstance(p, str | int)))
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(allowed)})" if allowed else ""
        shown = loc_err.message.split(f"unknown key '{key}'")[0]
        loc_err.message = f"{shown}unknown key '{key}'{hint}"
    return [InventoryError(e.message, e.file, e.line, e.col) for e in located]


def _keys_at(loc: tuple[str | int, ...]) -> list[str]:
    model: Any = Experiment
    for part in loc:
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return []
        inner = [a for a in typing.get_args(field.annotation) or (field.annotation,)
                 if isinstance(a, type) and issubclass(a, BaseModel)]
        nested = [a for t in typing.get_args(field.annotation) for a in typing.get_args(t)
                  if isinstance(a, type) and issubclass(a, BaseModel)]
        found = inner or nested
        if not found:
            return []
        model = found[0]
    return [f.alias or n for n, f in model.model_fields.items()]


def _check(exp: Experiment) -> list[InventoryError]:
    errors = []
    seen: set[str] = set()
    for i, v in enumerate(exp.variants):
        if v.name in seen:
            errors.append(exp.error(("variants", i, "name"), f"variant {v.name!r} appears twice"))
        seen.add(v.name)
        if v.workload is None and exp.workload is None:
            errors.append(exp.error(("variants", i), f"variant {v.name!r} has no workload (and the file sets none)"))
    if len(set(exp.vms)) != len(exp.vms):
        errors.append(exp.error(("vms",), "a VM is listed twice"))
    if exp.name is None and exp.title in ("", ".", ".."):
        errors.append(exp.error((), f"the file name does not name a results folder ({exp.title!r}): set 'name'"))
    return errors


# ----------------------------------------------------------------------------------------------- merge


def merge_entry(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """The inventory's merge rules (vgpuctl.inventory.merge) on plain entries: mappings key by key, lists and scalars
    replaced, `gpus` merged by `select`. Shorthands are written out first (`scheduler: equal-share` is
    `{policy: equal-share}`), as the schema reads them."""
    out = _longhand(copy.deepcopy(base))
    for key, value in _longhand(overlay).items():
        if key == "gpus" and isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_gpus(out[key], value)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_entry(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _longhand(entry: dict[str, Any]) -> dict[str, Any]:
    if isinstance(entry.get("scheduler"), str):
        return {**entry, "scheduler": {"policy": entry["scheduler"]}}
    return entry


def _select(gpu: Any) -> str | None:
    return str(gpu.get("select", "all")).lower() if isinstance(gpu, dict) else None


def _merge_gpus(base: list[Any], overlay: list[Any]) -> list[Any]:
    merged = [copy.deepcopy(g) for g in base]
    for g in overlay:
        select = _select(g)
        match = next((i for i, b in enumerate(merged) if _select(b) == select), None)
        if match is None:
            merged.append(copy.deepcopy(g))
        else:
            merged[match] = merge_entry(merged[match], g)
            if isinstance(g, dict) and g.get("mode") == "mig" and "vgpu_mode" not in g:
                merged[match].pop("vgpu_mode", None)  # a time-sliced mode means nothing on a MIG GPU
    return merged


@dataclass
class MergedVariant:
    name: str
    data: dict[str, Any]  # the merged inventory, plain YAML data
    changed_hosts: list[str]  # base host targets the variant changes ("cluster X" / "host Y") or adds
    changed_vms: list[str]
    overlay_of: dict[tuple[str, int], int]  # ("hosts" | "vms", merged entry index) -> the variant's entry index


def merge_variant(exp: Experiment, index: int, base: dict[str, Any]) -> MergedVariant:
    """The base inventory's data with variant `index`'s overlays merged in; InventoryErrors point at the
    experiment file."""
    variant = exp.variants[index]
    data = copy.deepcopy(base)
    hosts = data.setdefault("hosts", []) or []
    data["hosts"] = hosts
    changed_hosts: list[str] = []
    errors: list[InventoryError] = []
    overlay_of: dict[tuple[str, int], int] = {}
    for j, entry in enumerate(variant.hosts):
        kind = "cluster" if "cluster" in entry else "name"
        target = entry[kind]
        at = next((i for i, h in enumerate(hosts) if isinstance(h, dict) and h.get(kind) == target), None)
        if at is None:
            errors.append(exp.error(("variants", index, "hosts", j), f"no host entry with {kind}: {target} in the "
                                    "inventory: restoring the base could not undo this entry (add it to the base)"))
            continue
        errors += [exp.error(("variants", index, "hosts", j, *p), _unrestorable_message(p))
                   for p in unrestorable(hosts[at], entry)]
        hosts[at] = merge_entry(hosts[at], entry)
        overlay_of[("hosts", at)] = j
        changed_hosts.append(f"{'cluster' if kind == 'cluster' else 'host'} {target}")
    vms = data.get("vms") or []
    changed_vms: list[str] = []
    for j, entry in enumerate(variant.vms):
        name = entry["name"]
        at = next((i for i, vm in enumerate(vms) if isinstance(vm, dict) and vm.get("name") == name), None)
        if at is None:
            errors.append(exp.error(("variants", index, "vms", j, "name"), _no_vm_message(name, vms)))
            continue
        errors += [exp.error(("variants", index, "vms", j, *p), _unrestorable_message(p))
                   for p in unrestorable(vms[at], entry)]
        vms[at] = merge_entry(vms[at], entry)
        overlay_of[("vms", at)] = j
        changed_vms.append(name)
    if errors:
        raise InventoryErrors(errors)
    return MergedVariant(variant.name, data, changed_hosts, changed_vms, overlay_of)


_ENTRY = re.compile(r"^(hosts|vms)\[(\d+)\]")


def checked_variants(exp: Experiment) -> list[tuple[MergedVariant, Inventory]]:
    """Every variant merged onto the base and checked like an inventory (schema and rules, no vCenter).

    A problem in a merged inventory is reported at the variant entry that caused it (or at the variant)."""

    base = read_base(exp)
    base_dir = exp.base_inventory_path.parent
    out: list[tuple[MergedVariant, Inventory]] = []
    errors: list[InventoryError] = []
    for i, variant in enumerate(exp.variants):
        try:
            merged = merge_variant(exp, i, base)
        except InventoryErrors as exc:
            errors.extend(exc.errors)
            continue
        merged.data = absolute_paths(merged.data, base_dir)
        try:
            inv = load_inventory_text(dump_inventory(merged.data), name=f"{variant.name}.inventory.yaml")
            validate(inv)
        except InventoryErrors as exc:
            errors.extend(_relocate(exp, i, merged, e) for e in exc.errors)
            continue
        except InventoryError as exc:
            errors.append(_relocate(exp, i, merged, exc))
            continue
        missing = [vm for vm in exp.vms if inv.vm(vm) is None]
        if missing:
            errors.append(exp.error(("vms",), f"variant {variant.name!r}: no VM named {', '.join(missing)} in the "
                                    "inventory"))
        out.append((merged, inv))
    if errors:
        raise InventoryErrors(errors)
    return out


def _relocate(exp: Experiment, index: int, merged: MergedVariant, err: InventoryError) -> InventoryError:
    m = _ENTRY.match(err.message)
    where: KeyPath = ("variants", index)
    if m is not None and (m[1], int(m[2])) in merged.overlay_of:
        where = ("variants", index, m[1], merged.overlay_of[(m[1], int(m[2]))])
    line, col = lookup(exp._pos, where)
    text = f"{format_path(where)}: variant {merged.name!r} merged onto {exp.inventory}: {err.message}"
    return InventoryError(text, exp.source_path, line, col)


def unrestorable(base: dict[str, Any], overlay: dict[str, Any], path: KeyPath = ()) -> list[KeyPath]:
    """Keys the overlay sets that the base entry leaves unset: applying the base again would not undo them
    (an inventory leaves unset settings as they are), so the experiment could not restore the farm."""
    out: list[KeyPath] = []
    base, overlay = _longhand(base), _longhand(overlay)
    for key, value in overlay.items():
        if key not in base:
            out.append((*path, key))
        elif key == "gpus" and isinstance(value, list) and isinstance(base[key], list):
            for i, g in enumerate(value):
                match = next((b for b in base[key] if _select(b) == _select(g)), None)
                if match is None:
                    out.append((*path, key, i))
                elif isinstance(g, dict):
                    out += unrestorable(match, g, (*path, key, i))
        elif isinstance(value, dict) and isinstance(base[key], dict):
            out += unrestorable(base[key], value, (*path, key))
    return out


def _unrestorable_message(path: KeyPath) -> str:
    return (f"the base inventory leaves {format_path(path)} unset, so restoring the base would not undo this "
            "variant: set it in the base inventory")


def _no_vm_message(name: str, vms: list[Any]) -> str:
    for vm in vms:
        raw = vm.get("name") if isinstance(vm, dict) else None
        if isinstance(raw, str) and raw != name:
            try:
                members = expand_name(raw)
            except ValueError:
                continue
            if name in members:
                return (f"VM {name!r} is one name of the range {raw!r} in the inventory: change the whole entry "
                        f"(name: {raw!r}) or split the range there")
    return f"no VM entry named {name!r} in the inventory (a variant changes the base inventory's VMs)"


def read_base(exp: Experiment) -> dict[str, Any]:
    """The base inventory's plain data, with the files it includes merged in (positions are the inventory loader's
    business)."""
    data = compose_file(exp.base_inventory_path, Composition()).data
    if not isinstance(data, dict):
        raise InventoryError("the inventory must be a mapping", str(exp.base_inventory_path), 1, 1)
    return data


def absolute_paths(data: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """Controller file paths in guest group vars made absolute, so a merged inventory written elsewhere
    still finds the driver, the token and the other files the base names relative to itself."""
    out = copy.deepcopy(data)
    groups = ((out.get("guests") or {}).get("groups") or {})
    for spec in groups.values():
        if isinstance(spec, dict) and isinstance(spec.get("vars"), dict):
            spec["vars"] = resolve_path_vars(spec["vars"], base_dir)
    return out


def dump_inventory(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def workload_dict(workload: WorkloadSpec) -> dict[str, Any]:
    return {**workload.model_dump(), "key": workload.key, "label": workload.label}


def summary(exp: Experiment) -> dict[str, Any]:
    """What the results directory keeps of the experiment file (experiment.json)."""
    return {
        "title": exp.title,
        "source": exp.source_path,
        "inventory": str(exp.base_inventory_path),
        "vms": list(exp.vms),
        "repetitions": exp.repetitions,
        "on_failure": exp.on_failure,
        "variants": [
            {"name": v.name, "description": v.description, "workload": workload_dict(exp.workload_of(v))}
            for v in exp.variants
        ],
    }
