"""`vgpuctl plan --explain HOST`: one host's merged settings beside what vCenter has now, and where each came from.

The host takes its cluster's entry, then its own `name:` entry on top (vgpuctl.inventory.merge); every value either
entry sets is listed with the entry and FILE:LINE that set it last, the value vCenter reports for it (when it
is a vCenter value), and the changes the plan makes on the host. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from vgpuctl.errors import NotFound
from vgpuctl.inventory import Inventory
from vgpuctl.model import Observed, ObservedHost, Plan
from vgpuctl.reports.explain import ExplainedValue, ExplainReport


def explain_host(name: str, inventory: Inventory, observed: Observed, plan: Plan) -> ExplainReport:
    from vgpuctl.inventory.merge import merge_hosts
    from vgpuctl.reports.plan import host_diff

    host = observed.hosts.get(name)
    if host is None:
        raise NotFound(
            f"--explain {name}: no such host in vCenter (hosts: {', '.join(sorted(observed.hosts)) or 'none'})"
        )
    merged, _ = merge_hosts(inventory.hosts, observed.clusters, observed.hosts)
    mine = merged.get(name)
    entries = [s.target for s in inventory.hosts if s.name == name or (s.cluster and s.cluster == host.cluster)]
    entries.sort(key=lambda t: t.startswith("host "))  # cluster entry first, then the host's own
    settings = []
    if mine is not None:
        for key, origin in sorted(mine.origins.items()):
            value = _value_at(mine.spec, key)
            settings.append(ExplainedValue(key, _text(value), str(origin), vcenter_value(key, host)))
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
    return str(getattr(value, "value", value))


def vcenter_value(key: str, host: ObservedHost) -> str | None:
    """What vCenter (or the host's nvidia module options) says now for a setting; None for vgpuctl's own."""
    from vgpuctl.hosts import plan as hostplan

    if key == "graphics.default_type":
        return host.default_graphics_type
    if key == "graphics.assignment_policy":
        return host.assignment_policy
    if key == "nvlink":
        return hostplan.nvlink_of(host.module_options)
    if key.startswith("scheduler."):
        state = hostplan.scheduler_of(host.module_options)
        return _text(getattr(state, key.split(".", 1)[1], None))
    if key.startswith("gpus["):
        return _gpus_now(key, host)
    return None


def _gpus_now(key: str, host: ObservedHost) -> str:
    select, field = key[len("gpus[") :].split("].", 1)
    gpus = [g for g in host.gpus if select in ("all", g.pci_id)]
    if field == "mode":
        values = ["mig" if g.vgpu_mode == "multiInstanceGpu" else "time-sliced" for g in gpus]
    elif field in ("vgpu_mode", "graphics_type"):
        values = [str(getattr(g, field)) for g in gpus]
    else:
        return "-"
    distinct = sorted(set(values))
    return (
        distinct[0] if len(distinct) == 1 else ", ".join(f"{g.pci_id}: {v}" for g, v in zip(gpus, values, strict=True))
    )
