"""`vgpuctl plan --explain HOST`: one host's merged settings beside what vCenter has now, and where each came from.

The host takes its cluster's entry, then its own `name:` entry on top (vgpuctl.inventory.merge); every value either
entry sets is listed with the entry and FILE:LINE that set it last, the value vCenter reports for it (when it
is a vCenter value), and the changes the plan makes on the host. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from vgpuctl.domain import GpuMode, GpuVgpuMode
from vgpuctl.errors import NotFound
from vgpuctl.inventory import Inventory
from vgpuctl.model import Observed, ObservedHost, Plan
from vgpuctl.names import host_named
from vgpuctl.reports.explain import ExplainedValue, ExplainReport


def explain_host(name: str, inventory: Inventory, observed: Observed, plan: Plan) -> ExplainReport:
    from vgpuctl.inventory.merge import merge_hosts
    from vgpuctl.reports.plan import host_diff

    try:
        name = host_named(name, observed.hosts)  # a unique short name is the host too
    except NotFound:
        raise NotFound(
            f"--explain {name}: no such host in vCenter (hosts: {', '.join(sorted(observed.hosts)) or 'none'})"
        ) from None
    host = observed.hosts[name]
    merged, _ = merge_hosts(inventory.hosts, observed.clusters, observed.hosts)
    mine = merged.get(name)
    entries = [s.target for s in inventory.hosts if s.name == name or (s.cluster and s.cluster == host.cluster)]
    entries.sort(key=lambda t: t.startswith("host "))  # cluster entry first, then the host's own
    settings = []
    if mine is not None:
        for key, origin in sorted(mine.origins.items()):
            value = _text(_value_at(mine.spec, key))
            now = vcenter_value(key, host, mine.spec)
            settings.append(ExplainedValue(key, value, str(origin), now, _differs(key, value, host, mine.spec)))
    changes = [host_diff(c) for c in plan.host_changes if c.host == name]
    errors = [e for e in plan.errors if name in e]
    return ExplainReport(name, host.cluster, entries, settings, changes, errors)


def _value_at(spec: BaseModel, key: str) -> Any:
    """The merged value of a display key ("graphics.default_type", "gpus[all].mode")."""
    node: Any = spec
    for part in key.split("."):
        if part.startswith("gpus["):
            select = part[len("gpus[") : -1]
            node = next((g for g in node.gpus if g.select == select), None)
        else:
            node = getattr(node, part, None)
        if node is None:
            return None
    return node


def _text(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):  # a setting's list of items (sriov): each as its str
        return ", ".join(_text(v) for v in value) or "[]"
    return str(getattr(value, "value", value))


def _differs(key: str, value: str, host: ObservedHost, spec: BaseModel) -> bool | None:
    """Whether vCenter's value differs from the merged one, field by field (per GPU for a GPU setting); None
    where vCenter has no such value."""
    if key.startswith("gpus["):
        now = _gpu_values(key, host, spec)
        return None if now is None else any(v != value for _pci, v in now)
    current = vcenter_value(key, host, spec)
    return None if current is None else current != value


def vcenter_value(key: str, host: ObservedHost, spec: BaseModel | None = None) -> str | None:
    """What vCenter (or the host's nvidia module options) says now for a setting, from the setting the display
    key belongs to; None for vgpuctl's own values (ssh, maintenance) and for what has no value there (a GPU
    selector, a time-sliced mode of GPUs that are to run MIG)."""
    from vgpuctl.hosts.settings import setting_for_key

    if key.startswith("gpus["):
        values = _gpu_values(key, host, spec)
        if values is None:
            return None
        distinct = sorted({v for _pci, v in values})
        return distinct[0] if len(distinct) == 1 else ", ".join(f"{pci}: {v}" for pci, v in values)
    setting = setting_for_key(key)
    return setting.explain(key, host) if setting is not None else None


def _gpu_values(key: str, host: ObservedHost, spec: BaseModel | None) -> list[tuple[str, str]] | None:
    """(PCI id, vCenter's value) of each GPU a GPU setting selects; None for the selector itself, and for the
    time-sliced vGPU mode while the merged entry wants MIG."""
    select, field = key[len("gpus[") :].split("].", 1)
    if field not in ("mode", "vgpu_mode", "graphics_type"):
        return None
    if field == "vgpu_mode" and spec is not None and _value_at(spec, f"gpus[{select}].mode") == GpuMode.MIG:
        return None
    gpus = [g for g in host.gpus if select in ("all", g.pci_id)]
    if field == "mode":
        return [(g.pci_id, GpuMode.MIG if g.vgpu_mode == GpuVgpuMode.MIG else GpuMode.TIME_SLICED) for g in gpus]
    return [(g.pci_id, str(getattr(g, field))) for g in gpus]
