"""`plan --explain HOST`: a host's merged settings, where each came from, vCenter's value and the plan."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from vgpuctl.errors import NotFound
from vgpuctl.inventory import Inventory
from vgpuctl.inventory.merge import merge_hosts
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed, ObservedHost, Plan
from vgpuctl.names import host_named
from vgpuctl.reports.base import TERMINAL, Report, TextLayout
from vgpuctl.reports.plan import HostDiff, host_diff
from vgpuctl.settings import setting_for_key
from vgpuctl.settings.facts import HostFacts
from vgpuctl.settings.pergpu import GPUS_KEY
from vgpuctl.visible import lines_text


@dataclass
class ExplainedValue:
    setting: str  # graphics.default_type, gpus[all].mode, scheduler.policy, ...
    value: str  # as the merged entries say
    source: str  # FILE:LINE (cluster X | host Y): the entry that set it last
    vcenter: str | None  # what vCenter or the host reports now; None for vgpuctl's own settings (ssh, ...)
    differs: bool | None = None  # vCenter's value is another, field by field (per GPU); None: no vCenter value


@dataclass
class ExplainReport(Report):
    """`plan --explain HOST`: the host's merged entry against vCenter, and what the plan changes there."""

    kind: ClassVar[str] = "explain"
    host: str
    cluster: str | None
    entries: list[str]  # the inventory entries that apply to the host, merged in this order
    settings: list[ExplainedValue]
    changes: list[HostDiff]
    errors: list[str]

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        head = " then ".join(self.entries) or "no entry"
        lines = [f"host {self.host} (cluster {self.cluster or '-'}): {head}"]
        if self.settings:
            lines += _setting_lines(self.settings)
        else:
            lines.append("  no inventory entry sets anything for this host: vgpuctl leaves it as it is")
        if self.changes:
            lines.append("  the plan changes:")
            lines += [f"    {c.setting}{'' if c.gpu is None else ' ' + c.gpu}: {c.old} -> {c.new}"
                      for c in self.changes]
        else:
            lines.append("  the plan changes nothing on this host")
        lines += [f"  error: {e}" for e in self.errors]
        return lines_text(lines)


HEADER = ("setting", "inventory", "vCenter now", "", "from")


def _setting_lines(settings: list[ExplainedValue]) -> list[str]:
    """A table in aligned columns: the setting, the merged value, vCenter's value, `differs` where vCenter has
    another value, and the entry that set it."""
    rows = [(s.setting, s.value, "-" if s.vcenter is None else s.vcenter, "differs" if s.differs else "", s.source)
            for s in settings]
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(4)]
    return [("  " + "  ".join(f"{cell:<{w}}" for cell, w in zip(row[:4], widths, strict=True)) + f"  {row[4]}")
            .rstrip() for row in [HEADER, *rows]]


# ------------------------------------------------------------------------------------------ the builder


def explain_host(
    name: str, inventory: Inventory, observed: Observed, plan: Plan, facts: Mapping[str, HostFacts] | None = None
) -> ExplainReport:
    """The host's merged settings with what the host has now: from the bulk read and, where the plan read them, the
    host's facts (ESXi shell, per-host calls)."""
    try:
        name = host_named(name, observed.hosts)  # a unique short name is the host too
    except NotFound:
        raise NotFound(
            f"--explain {name}: no such host in vCenter (hosts: {', '.join(sorted(observed.hosts)) or 'none'})"
        ) from None
    host = observed.hosts[name]
    host_facts = (facts or {}).get(name)
    merged, _ = merge_hosts(inventory.hosts, observed.clusters, observed.hosts)
    mine = merged.get(name)
    entries = [s.target for s in inventory.hosts if s.name == name or (s.cluster and s.cluster == host.cluster)]
    entries.sort(key=lambda t: t.startswith("host "))  # cluster entry first, then the host's own
    settings = []
    if mine is not None:
        for key, origin in sorted(mine.origins.items()):
            merged_value = _value_at(mine.spec, key)
            value = _text(merged_value)
            now = vcenter_value(key, host, host_facts) if merged_value is not None else None
            settings.append(ExplainedValue(key, value, str(origin), now, None if now is None else now != value))
    changes = [host_diff(c) for c in plan.host_changes if c.host == name]
    errors = [e for e in plan.errors if name in e]
    return ExplainReport(name, host.cluster, entries, settings, changes, errors)


def _value_at(spec: object, key: str) -> Any:
    """The merged value of a display key ("graphics.default_type", "gpus[all].mode", "gpus[0000:3b:00.0].ecc": a
    PCI id has a dot of its own)."""
    node: Any = spec
    path = key
    if key.startswith(f"{GPUS_KEY}["):
        select, _, path = key[len(GPUS_KEY) + 1 :].partition("].")
        node = next((g for g in getattr(node, GPUS_KEY) if g.select == select), None)
    for part in path.split("."):
        if node is None:
            return None
        node = getattr(node, part, None)
    return node


def _text(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):  # a setting's list of items (sriov): each as its str
        return ", ".join(_text(v) for v in value) or "[]"
    return str(getattr(value, "value", value))


def vcenter_value(key: str, host: ObservedHost, facts: HostFacts | None = None) -> str | None:
    """What the host has now for a setting (vCenter, the nvidia module options, the ESXi shell), from the setting
    the display key belongs to; None for vgpuctl's own values (ssh, maintenance) and for what has no value there (a
    GPU selector, a value of a fact that was not read). Per GPU: one value when the selected GPUs agree, else
    each GPU's."""
    setting = setting_for_key(key)
    return setting.explain(key, host, facts) if setting is not None else None
