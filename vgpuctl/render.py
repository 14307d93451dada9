"""A Plan as plain text (a + ~ - diff; colour is the CLI's business) and as JSON-ready data.

Plans carry no secrets: they hold VM, host, profile and field names and values only.
"""

from __future__ import annotations

from typing import Any

from vgpuctl.model import HostChange, Op, Plan, VmChange

INDENT = "    "


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "(none)"
    return str(v)


def _steps(change: VmChange) -> str:
    steps = []
    if change.clone is not None:
        steps.append(f"clone from {change.clone.template}")
    if change.power_off:
        steps.append("power off")
    if change.needs_reconfigure:
        steps.append("reconfigure")
    if change.power_on:
        steps.append("power on")
    return " -> ".join(steps)


def _clone_lines(change: VmChange) -> list[str]:
    c = change.clone
    if c is None:
        return []
    where = [f"{k} {v}" for k, v in (("cluster", c.cluster), ("host", c.host), ("folder", c.folder)) if v]
    size = [f"{k} {v}" for k, v in (("cpus", c.cpus), ("memoryMB", c.memory_mb)) if v is not None]
    lines = [f"{INDENT}+ clone {c.template}" + (f" to {', '.join(where)}" if where else "")]
    if size:
        lines.append(f"{INDENT}+ {', '.join(size)}")
    return lines


def _vm_lines(change: VmChange) -> list[str]:
    mark = Op.ADD if change.clone is not None else Op.CHANGE
    lines = [f"{mark} vm {change.vm}  ({_steps(change)})"]
    if change.depends_on_hosts:
        lines.append(f"{INDENT}  after the host changes on {', '.join(change.depends_on_hosts)}")
    lines += _clone_lines(change)
    for f in change.fields:
        lines.append(f"{INDENT}{f.op} {f.field}: {_value(f.old)} -> {_value(f.new)}")
    for d in change.devices:
        if d.op == Op.REMOVE:
            lines.append(f"{INDENT}- vgpu {d.profile} (key {d.key})")
        else:
            group = f" (NVLink group {d.group})" if d.group is not None else ""
            lines.append(f"{INDENT}+ vgpu {d.profile}{group}")
    for key in sorted(change.extra_config):
        value = change.extra_config[key]
        if value is None:
            lines.append(f"{INDENT}- extraConfig {key}")
        else:
            lines.append(f"{INDENT}+ extraConfig {key} = {value}")
    return lines


def _host_line(h: HostChange) -> str:
    flags = [f for f, on in (("disruptive", h.disruptive), ("reboot", h.needs_reboot)) if on]
    mark = f"  ({', '.join(flags)})" if flags else ""
    target = "" if h.target == "host" else f" {h.target}"
    return f"~ host {h.host} {h.kind}{target}: {_value(h.old)} -> {_value(h.new)}{mark}"


def summary(plan: Plan) -> dict[str, int]:
    changes = plan.changes
    return {
        "create": sum(1 for c in changes if c.clone is not None),
        "change": sum(1 for c in changes if c.clone is None),
        "power_off": sum(1 for c in changes if c.power_off),
        "power_on": sum(1 for c in changes if c.power_on),
        "host_changes": len(plan.host_changes),
        "errors": len(plan.errors),
        "warnings": len(plan.warnings),
    }


def _summary_line(plan: Plan) -> str:
    s = summary(plan)
    parts = [f"{s['create']} to create", f"{s['change']} to change", f"{s['power_off']} power-off"]
    if s["host_changes"]:
        parts.insert(0, f"{s['host_changes']} host change{'s' if s['host_changes'] != 1 else ''}")
    return "Plan: " + ", ".join(parts) + "."


def render_plan_text(plan: Plan) -> str:
    """Host changes first, then VMs by name, then warnings, errors and a one-line summary."""
    lines = [_host_line(h) for h in plan.host_changes]
    for change in plan.changes:
        lines += _vm_lines(change)
    lines += [f"Warning: {w}" for w in plan.warnings]
    lines += [f"Error: {e}" for e in plan.errors]
    if plan.errors:
        n = len(plan.errors)
        lines.append(f"Plan has {n} error{'s' if n != 1 else ''}; nothing can be applied.")
    elif plan.is_empty:
        lines.append("No changes: the farm matches the inventory.")
    else:
        lines.append(_summary_line(plan))
    return "\n".join(lines) + "\n"


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """JSON-ready dict: host_changes, vm_changes (non-empty ones), errors, warnings and summary counts."""
    data = plan.to_dict()
    for change in data["vm_changes"]:
        change["steps"] = [s.strip() for s in _steps_of(change)]
        for f in change["fields"]:
            f["op"] = str(f["op"])
        for d in change["devices"]:
            d["op"] = str(d["op"])
    data["summary"] = summary(plan)
    return data


def _steps_of(change: dict[str, Any]) -> list[str]:
    steps = []
    if change.get("clone"):
        steps.append("clone")
    if change.get("power_off"):
        steps.append("power-off")
    if change.get("fields") or change.get("devices") or change.get("extra_config"):
        steps.append("reconfigure")
    if change.get("power_on"):
        steps.append("power-on")
    return steps
