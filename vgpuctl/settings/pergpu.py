"""The `gpus:` list of a hosts entry: items by `select` (`all`, or a GPU's PCI id), each made of the fields of the
per-GPU settings (vgpuctl.settings.base.GpuSetting). A GPU takes the `all` item, then its own on top; each per-GPU
setting then plans it from those merged fields. `GpuList` is the host setting of the `gpus` key: it hands each GPU
to the per-GPU settings, and apply, explain, export and status likewise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import Field, create_model, field_validator

from vgpuctl.domain import ChangeKind
from vgpuctl.model import HostChange, ObservedHost
from vgpuctl.settings.base import (
    ApplyStep,
    Exported,
    GpuSetting,
    HostPlan,
    HostSetting,
    HostWriter,
    PlanInput,
    Reads,
    SettingState,
    names,
)
from vgpuctl.settings.facts import HostFacts
from vgpuctl.strictmodel import KeyPath, StrictModel

ALL = "all"  # the `select` of the item every GPU takes
GPUS_KEY = "gpus"
_BUS_ID = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


class GpuItemBase(StrictModel):
    """What every `gpus:` item has: which GPUs it is for. GpuItem adds the per-GPU settings' fields."""

    select: str = ALL  # all | a PCI bus id (0000:3b:00.0)

    @field_validator("select")
    @classmethod
    def _select(cls, v: str) -> str:
        if v != ALL and not _BUS_ID.fullmatch(v):
            raise ValueError(f"must be 'all' or a PCI bus id like 0000:3b:00.0 (got {v!r})")
        return v.lower()


def gpu_item_model(settings: Sequence[GpuSetting]) -> type[GpuItemBase]:
    """One `gpus:` item: `select`, then each per-GPU setting's fields (in registry order), each optional."""
    fields: dict[str, Any] = {f.name: (f.schema | None, None) for s in settings for f in s.fields}
    return create_model("GpuSpec", __base__=GpuItemBase, __module__=__name__, **fields)


class GpuList(HostSetting[list[Any]]):
    """The `gpus` key: per-GPU settings, item by item."""

    key = GPUS_KEY
    default: Any = Field(default_factory=list)

    def __init__(self, settings: Sequence[GpuSetting]):
        self.settings = tuple(settings)
        self.item = gpu_item_model(self.settings)
        self.schema = list.__class_getitem__(self.item)
        self.kinds = tuple(k for s in self.settings for k in s.kinds)
        self.offer_kinds = frozenset(k for s in self.settings for k in s.offer_kinds)
        self.shell_kinds = frozenset(k for s in self.settings for k in s.shell_kinds)
        self.drift_fields = tuple(dict.fromkeys(f for s in self.settings for f in s.drift_fields))
        self.reads = Reads(
            properties=tuple(dict.fromkeys(p for s in self.settings for p in s.reads.properties)),
            host_fields=tuple(dict.fromkeys(f for s in self.settings for f in s.reads.host_fields)),
            gpu_fields=tuple(dict.fromkeys(f for s in self.settings for f in s.reads.gpu_fields)),
            gpu_queries=tuple(dict.fromkeys(q for s in self.settings for q in s.reads.gpu_queries)),
            shell=tuple(dict.fromkeys(f for s in self.settings for f in s.reads.shell)),
            api=tuple(dict.fromkeys(f for s in self.settings for f in s.reads.api)),
        )
        self._owner = {k: s for s in self.settings for k in s.kinds}
        self._field_owner = {f.name: s for s in self.settings for f in s.fields}

    # -------------------------------------------------------------------------------------- the items

    def owner_of_field(self, name: str) -> GpuSetting | None:
        return self._field_owner.get(name)

    def problems(self, spec: object) -> list[tuple[KeyPath, str]]:
        """A GPU selected twice; what each per-GPU setting says of each item."""
        out: list[tuple[KeyPath, str]] = []
        selects: set[str] = set()
        for j, item in enumerate(self.of(spec)):
            if item.select in selects:
                out.append(((self.key, j, "select"), f"GPU selection {item.select!r} appears twice"))
            selects.add(item.select)
            out += [((self.key, j, *path), message) for s in self.settings for path, message in s.item_problems(item)]
        return out

    def reads_shell(self, spec: object) -> bool:
        """An item sets a field of a per-GPU setting the ESXi shell reads or writes."""
        return any(f.of(item) is not None for item in self.of(spec) for s in self.settings if s.shell_kinds
                   for f in s.fields)

    def api_needs(self, spec: object) -> list[tuple[tuple[int, ...], str]]:
        needs = [need for item in self.of(spec) for s in self.settings for need in s.item_api_needs(item)]
        return list(dict.fromkeys(needs))

    def merge(self, base: list[Any], over: list[Any]) -> list[Any]:
        """A host entry's items over its cluster entry's, item by item on `select`; a field the host's item does
        not set comes from the cluster's item unless its setting says the host's item does not inherit it."""
        out = list(base)
        index = {g.select: i for i, g in enumerate(out)}
        for g in over:
            if g.select not in index:
                index[g.select] = len(out)
                out.append(g)
                continue
            ours = out[index[g.select]]
            values, fields_set = {"select": g.select}, set(ours.model_fields_set | g.model_fields_set)
            for name in self._field_owner:
                if name in g.model_fields_set:
                    values[name] = getattr(g, name)
                elif self._field_owner[name].inherits(name, g):
                    values[name] = getattr(ours, name)
                else:
                    values[name] = None
                    fields_set.discard(name)
            out[index[g.select]] = type(ours).model_construct(_fields_set=fields_set, **values)
        return out

    def wanted(self, spec: object, host: ObservedHost) -> tuple[dict[str, Any], list[str]]:
        """PCI id -> the GPU's merged item (its `all` item, then its own on top; fields no item sets are None),
        and errors for items that select a GPU the host does not have."""
        items = self.of(spec)
        pcis = {g.pci_id.lower() for g in host.gpus}
        errors = [f"host {host.name}: GPU {g.select} is not on this host (GPUs: {names(pcis)})"
                  for g in items if g.select != ALL and g.select.lower() not in pcis]
        everything = next((g for g in items if g.select == ALL), None)
        by_id = {g.select.lower(): g for g in items if g.select != ALL}
        out: dict[str, Any] = {}
        for pci in sorted(pcis):
            own = by_id.get(pci)
            values: dict[str, Any] = {}
            for name, setting in self._field_owner.items():
                if own is not None and getattr(own, name) is not None:
                    values[name] = getattr(own, name)
                elif everything is not None and (own is None or setting.inherits(name, own)):
                    values[name] = getattr(everything, name)
                else:
                    values[name] = None
            out[pci] = self.item.model_construct(select=pci, **values)
        return out, errors

    # -------------------------------------------------------------------------------------- planning

    def plan(self, inp: PlanInput) -> HostPlan:
        wanted, errors = self.wanted(inp.spec, inp.host)
        result = HostPlan(errors=errors)
        gpus = inp.gpus
        for pci, want in wanted.items():
            for setting in self.settings:
                result.extend(setting.plan_gpu(inp, gpus[pci], want))
        return result

    def predict(self, host: ObservedHost, changes: Sequence[HostChange]) -> None:
        for setting in self.settings:
            setting.predict(host, [c for c in changes if c.kind in setting.kinds])

    def step(self, kind: ChangeKind) -> ApplyStep:
        return self._owner[kind].step(kind)

    def needs_shell(self, kind: ChangeKind) -> bool:
        return self._owner[kind].needs_shell(kind)

    def param_written(self, change: HostChange) -> str | None:
        return self._owner[change.kind].param_written(change)

    def ends_nvlink_groups(self, change: HostChange) -> bool:
        return self._owner[change.kind].ends_nvlink_groups(change)

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        for setting in self.settings:
            mine = [c for c in changes if c.kind in setting.kinds]
            if mine:
                setting.apply(step, mine, writer)

    def verify(self, inp: PlanInput) -> list[str]:
        return [problem for s in self.settings for problem in s.verify(inp)]

    # -------------------------------------------------------------------------------------- showing

    def explain(self, key: str, host: ObservedHost, facts: HostFacts | None) -> str | None:
        """`gpus[SELECT].FIELD`: what the selected GPUs have now, one value when they agree."""
        select, _, name = key[len(self.key) + 1 :].partition("].")
        owner = self._field_owner.get(name)
        gpus = [g for g in host.gpus if select in (ALL, g.pci_id.lower())]
        if owner is None or not gpus:
            return None
        values = [(g.pci_id, owner.explain_gpu(name, g, facts)) for g in gpus]
        if any(v is None for _, v in values):
            return None
        distinct = sorted({str(v) for _, v in values})
        return distinct[0] if len(distinct) == 1 else ", ".join(f"{pci}: {v}" for pci, v in values)

    def export(self, host: ObservedHost, facts: HostFacts | None) -> Exported:
        gpus: dict[str, dict[str, Any]] = {}
        for gpu in host.gpus:
            for setting in self.settings:
                gpus.setdefault(gpu.pci_id.lower(), {}).update(setting.export_gpu(gpu, facts))
        notes = [note for s in self.settings for note in s.export_notes(host, facts)]
        return Exported(gpus=gpus, notes=notes)

    def status(self, host: ObservedHost, facts: HostFacts | None) -> list[SettingState]:
        return [
            SettingState(f"{self.key}[{gpu.pci_id.lower()}].{state.key}", state.value, state.after_reboot)
            for gpu in host.gpus
            for setting in self.settings
            for state in setting.status_gpu(gpu, facts)
        ]
