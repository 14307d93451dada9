"""A Plan as plain text (a + ~ - diff; colour is the CLI's business) and as its report (vgpuctl.reports).

Plans carry no secrets: they hold VM, host, profile and field names and values only.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from vgpuctl.model import HostChange, Op, Plan, VmChange
from vgpuctl.reports import CloneDiff, DeviceDiff, Disruption, FieldDiff, HostDiff, PlanReport, PlanSummary, VmDiff

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


def plan_summary(plan: Plan) -> PlanSummary:
    changes = plan.changes
    found = disruptions(plan)
    return PlanSummary(
        create=sum(1 for c in changes if c.clone is not None),
        change=sum(1 for c in changes if c.clone is None),
        power_off=sum(1 for d in found if d.action == POWER_OFF),
        power_on=sum(1 for c in changes if c.power_on),
        host_changes=len(plan.host_changes),
        maintenance=sum(1 for d in found if d.action == MAINTENANCE),
        reboots=sum(1 for d in found if d.action == REBOOT),
        errors=len(plan.errors),
        warnings=len(plan.warnings),
    )


# ------------------------------------------------------------------------------------------ disruptions

MAINTENANCE, REBOOT, POWER_OFF = "maintenance", "reboot", "power-off"


def disruptions(plan: Plan) -> list[Disruption]:
    """Every disruptive step apply will take, host by host (maintenance, reboot, the VMs evacuated), then the
    VMs powered off for their own change. What host apply does is decided by the same hostplan functions."""
    from vgpuctl.hosts import plan as hostplan

    by_vm = {c.vm: c for c in plan.changes}
    hosts: dict[str, list[HostChange]] = {}
    for h in plan.host_changes:
        hosts.setdefault(h.host, []).append(h)
    found: list[Disruption] = []
    for host, changes in hosts.items():
        work = [c for c in changes if c.kind not in (hostplan.RESUME, hostplan.EVACUATE)]
        if hostplan.needs_maintenance(work):
            found.append(Disruption(MAINTENANCE, host, None, "host change", True, "enters maintenance mode"))
        if hostplan.needs_reboot(work):
            found.append(Disruption(REBOOT, host, None, "host change", True, "reboots in maintenance mode"))
        for c in changes:
            if c.kind == hostplan.EVACUATE and not str(c.new).startswith(hostplan.MIGRATE_TO):  # vMotion: stays on
                found.append(_evacuation(host, c, by_vm.get(c.target), hostplan.RESTORE_AFTER))
    evacuated = {d.vm for d in found}
    for change in plan.changes:
        if change.power_off and change.vm not in evacuated:
            back = "powered on again after it" if change.power_on else "stays off"
            found.append(Disruption(POWER_OFF, None, change.vm, "own change", change.power_on, back))
    return found


def _evacuation(host: str, c: HostChange, vm_change: VmChange | None, restore_after: str) -> Disruption:
    if c.new == restore_after:
        return Disruption(POWER_OFF, host, c.target, "evacuation", True, "powered on again after the host change")
    back = vm_change is not None and vm_change.power_on
    detail = "reconfigured by its VM change, then " + ("powered on" if back else "left off")
    return Disruption(POWER_OFF, host, c.target, "evacuation", back, detail)


def _disruption_line(d: Disruption) -> str:
    if d.vm is None:
        return f"! host {d.host}: {d.detail}" + ("" if d.action == REBOOT else ", exits after the change")
    why = f"to evacuate host {d.host}" if d.cause == "evacuation" else "for its own change"
    return f"! vm {d.vm}: powered off {why}; {d.detail}"


def summary(plan: Plan) -> dict[str, int]:
    return asdict(plan_summary(plan))


def _summary_line(plan: Plan) -> str:
    s = plan_summary(plan)
    parts = [f"{s.create} to create", f"{s.change} to change", f"{s.power_off} power-off"]
    if s.host_changes:
        parts.insert(0, f"{s.host_changes} host change{'s' if s.host_changes != 1 else ''}")
    if s.maintenance:
        parts.append(f"{s.maintenance} host{'s' if s.maintenance != 1 else ''} in maintenance")
    if s.reboots:
        parts.append(f"{s.reboots} reboot{'s' if s.reboots != 1 else ''}")
    return "Plan: " + ", ".join(parts) + "."


def render_plan_text(plan: Plan) -> str:
    """Host changes first, then VMs by name, the disruptive steps, warnings, errors and a one-line summary."""
    lines = [_host_line(h) for h in plan.host_changes]
    for change in plan.changes:
        lines += _vm_lines(change)
    found = disruptions(plan)
    if found and not plan.errors:
        lines.append("Disruptive steps:")
        lines += [f"  {_disruption_line(d)}" for d in found]
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


def plan_report(plan: Plan, round_trips: int | None = None) -> PlanReport:
    """The plan as its report: host changes, the VM changes that are not empty, errors, warnings, counts."""
    return PlanReport(
        host_changes=[host_diff(h) for h in plan.host_changes],
        vm_changes=[_vm_diff(c) for c in plan.changes],
        disruptions=disruptions(plan),
        errors=list(plan.errors),
        warnings=list(plan.warnings),
        summary=plan_summary(plan),
        round_trips=round_trips,
    )


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """plan_report's JSON document."""
    return plan_report(plan).to_dict()


def host_diff(h: HostChange) -> HostDiff:
    """One host change as the documents show it: `gpu` None for host-wide settings."""
    gpu = None if h.target == "host" else h.target
    return HostDiff(h.host, h.kind, gpu, h.old, h.new, h.disruptive, h.needs_reboot)


def _vm_diff(change: VmChange) -> VmDiff:
    c = change.clone
    clone = None if c is None else CloneDiff(c.template, c.cluster, c.host, c.folder, c.cpus, c.memory_mb)
    return VmDiff(
        vm=change.vm,
        steps=_step_names(change),
        clone=clone,
        fields=[FieldDiff(f.field, str(f.op), f.old, f.new) for f in change.fields],
        devices=[DeviceDiff(str(d.op), d.profile, d.key, d.group) for d in change.devices],
        extra_config=dict(change.extra_config),
        power_off=change.power_off,
        power_on=change.power_on,
        depends_on_hosts=list(change.depends_on_hosts),
    )


def _step_names(change: VmChange) -> list[str]:
    steps = []
    if change.clone is not None:
        steps.append("clone")
    if change.power_off:
        steps.append("power-off")
    if change.needs_reconfigure:
        steps.append("reconfigure")
    if change.power_on:
        steps.append("power-on")
    return steps
