"""The text of a plan, drawn only from its report (vgpuctl.reports.plan.PlanReport): `plan`, `apply` and `show
PLANFILE` print the same lines, the last from the report saved in the plan file.

Host changes first, then VMs by name, the VM classes and namespaces in apply order, the disruptive steps,
what a scoped plan pulled in and left out, warnings, errors and a one-line summary. `+` create, `~` change,
`-` remove, `!` a disruptive step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vgpuctl.domain import VmStep

if TYPE_CHECKING:
    from vgpuctl.reports.plan import (
        DeviceDiff,
        Disruption,
        HostDiff,
        IdentityDiff,
        NamespaceDiff,
        NicDiff,
        PlanReport,
        PlanScope,
        PlanSummary,
        VmClassDiff,
        VmDiff,
    )

INDENT = "    "
STEP_WORDS = {VmStep.POWER_OFF: "power off", VmStep.POWER_ON: "power on"}
LIST_CUT = 20  # names listed before "... and N more" (unless the layout is full)
STYLES = {"+": "green", "-": "red", "~": "yellow", "!": "bold red"}


def value_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "(none)"
    return str(v)


def plan_lines(report: PlanReport, full: bool = False) -> list[str]:
    lines = [host_line(h) for h in report.host_changes]
    for change in report.vm_changes:
        lines += vm_lines(change)
    lines += [line for c in report.vm_classes if c.op != "-" for line in class_lines(c)]
    lines += [line for n in report.namespaces for line in namespace_lines(n)]
    lines += [line for c in report.vm_classes if c.op == "-" for line in class_lines(c)]
    if report.disruptions and not report.errors:
        lines.append("Disruptive steps:")
        lines += [f"  {disruption_line(d)}" for d in report.disruptions]
    if report.scope is not None:
        lines += scope_lines(report.scope, full)
    lines += [f"Warning: {w}" for w in report.warnings]
    lines += [f"Error: {e}" for e in report.errors]
    lines.append(summary_line(report))
    return lines


def host_line(h: HostDiff) -> str:
    flags = [f for f, on in (("disruptive", h.disruptive), ("reboot", h.needs_reboot)) if on]
    if h.pulled_in_by:
        flags.append(f"pulled in by {', '.join(h.pulled_in_by)}")
    mark = f"  ({', '.join(flags)})" if flags else ""
    target = "" if h.gpu is None else f" {h.gpu}"
    return f"~ host {h.host} {h.setting}{target}: {value_text(h.old)} -> {value_text(h.new)}{mark}"


def steps_text(change: VmDiff) -> str:
    words = []
    for step in change.steps:
        if step == VmStep.CLONE and change.clone is not None:
            words.append(f"clone from {change.clone.template}")
        else:
            words.append(STEP_WORDS.get(step, step))
    return " -> ".join(words)


def clone_lines(change: VmDiff) -> list[str]:
    c = change.clone
    if c is None:
        return []
    where = [f"{k} {v}" for k, v in (("cluster", c.cluster), ("host", c.host), ("folder", c.folder)) if v]
    size = [f"{k} {v}" for k, v in (("cpus", c.cpus), ("memoryMB", c.memory_mb)) if v is not None]
    lines = [f"{INDENT}+ clone {c.template}" + (f" to {', '.join(where)}" if where else "")]
    if size:
        lines.append(f"{INDENT}+ {', '.join(size)}")
    return lines


def device_line(d: DeviceDiff) -> str:
    if d.op == "-":
        return f"{INDENT}- vgpu {d.profile} (key {d.key})"
    group = f" (NVLink group {d.nvlink_group})" if d.nvlink_group is not None else ""
    return f"{INDENT}+ vgpu {d.profile}{group}"


def extra_config_lines(extra: dict[str, str | None]) -> list[str]:
    return [f"{INDENT}- extraConfig {key}" if extra[key] is None else f"{INDENT}+ extraConfig {key} = {extra[key]}"
            for key in sorted(extra)]


def vm_lines(change: VmDiff) -> list[str]:
    mark = "-" if change.destroy else "+" if change.clone is not None else "~"
    lines = [f"{mark} vm {change.vm}  ({steps_text(change)})"]
    if change.depends_on_hosts:
        lines.append(f"{INDENT}  after the host changes on {', '.join(change.depends_on_hosts)}")
    lines += clone_lines(change)
    lines += [f"{INDENT}{f.op} {f.field}: {value_text(f.old)} -> {value_text(f.new)}" for f in change.fields]
    lines += [device_line(d) for d in change.devices]
    lines += extra_config_lines(change.extra_config)
    lines += [nic_line(n) for n in change.nics]
    if change.identity is not None:
        lines.append(f"{INDENT}+ identity {identity_text(change.identity)}")
    return lines


def nic_line(n: NicDiff) -> str:
    if n.op == "+":
        return f"{INDENT}+ nic {nic_label(n)}" + (f" ({n.device})" if n.device else "")
    if n.op == "-":
        return f"{INDENT}- nic {nic_label(n)} (key {n.key})"
    return f"{INDENT}~ nic {nic_label(n)} (key {n.key}): was {n.old}"


def nic_label(n: NicDiff) -> str:
    """`sriov ConnectX-7 on roce-fabric`, `pvrdma on roce-fabric (rocev2)`."""
    parts = [n.type, *([n.select] if n.select else []), *([f"on {n.portgroup}"] if n.portgroup else []),
             *([f"({n.protocol})"] if n.protocol else [])]
    return " ".join(parts)


def identity_text(identity: IdentityDiff) -> str:
    """`customization: hostname train-01, roce-fabric 10.0.40.10/24 via 10.0.40.1, mgmt DHCP`."""
    parts = [f"hostname {identity.hostname}"]
    for a in identity.adapters:
        if a.address is None:
            parts.append(f"{a.portgroup} DHCP")
        else:
            parts.append(f"{a.portgroup} {a.address}/{a.prefix}" + (f" via {a.gateway}" if a.gateway else ""))
    return f"{identity.method}: " + ", ".join(parts)


CLASS_VERBS = {"+": "create", "~": "update", "-": "delete"}


def class_lines(c: VmClassDiff) -> list[str]:
    lines = [f"{c.op} vm class {c.vm_class}  ({CLASS_VERBS.get(c.op, c.op)})"]
    if c.op == "+":
        lines.append(f"{INDENT}+ " + ", ".join(f"{f.field} {value_text(f.new)}" for f in c.fields))
    else:
        lines += [f"{INDENT}{f.op} {f.field}: {value_text(f.old)} -> {value_text(f.new)}" for f in c.fields]
    lines += [f"{INDENT}- vgpu {v.profile}" for v in c.vgpus_removed for _ in range(v.count)]
    lines += [f"{INDENT}+ vgpu {v.profile}" for v in c.vgpus_added for _ in range(v.count)]
    return lines + extra_config_lines(c.extra_config)


def namespace_lines(n: NamespaceDiff) -> list[str]:
    return [f"~ namespace {n.namespace}", *(f"{INDENT}+ vm class {c}" for c in n.add),
            *(f"{INDENT}- vm class {c}" for c in n.remove)]


def disruption_line(d: Disruption) -> str:
    if d.vm is None:
        return f"! host {d.host}: {d.detail}" + ("" if d.action == "reboot" else ", exits after the change")
    if d.action == "destroy":
        return f"! vm {d.vm}: {d.detail}"
    why = f"to evacuate host {d.host}" if d.cause == "evacuation" else "for its own change"
    return f"! vm {d.vm}: powered off {why}; {d.detail}"


def names_text(names: list[str], full: bool = False) -> str:
    """`a, b, c`; past LIST_CUT names `a, ..., t and 980 more` unless `full`."""
    if full or len(names) <= LIST_CUT:
        return ", ".join(names)
    return f"{', '.join(names[:LIST_CUT])} and {len(names) - LIST_CUT} more"


def scope_lines(scope: PlanScope, full: bool) -> list[str]:
    asked = [f"--{flag} {p}" for flag, patterns in (("host", scope.hosts), ("cluster", scope.clusters),
                                                     ("vm", scope.vms)) for p in patterns]
    lines = [f"Scope: {' '.join(asked)}"]
    if scope.pulled_in_hosts:
        lines.append(f"  pulled in (needed by the VMs in scope): hosts {names_text(scope.pulled_in_hosts, full)}")
    if scope.pulled_in_vms:
        lines.append(f"  pulled in (evacuated and reconfigured by a host change in scope): VMs "
                     f"{names_text(scope.pulled_in_vms, full)}")
    if scope.out_of_scope_hosts:
        lines.append(f"  out of scope, untouched: hosts {names_text(scope.out_of_scope_hosts, full)}")
    if scope.out_of_scope_vms:
        lines.append(f"  out of scope, untouched: VMs {names_text(scope.out_of_scope_vms, full)}")
    if scope.vm_classes_left_out:
        lines.append("  out of scope, untouched: the inventory's VM classes and namespaces")
    return lines


def summary_line(report: PlanReport) -> str:
    s = report.summary
    if report.errors:
        return f"Plan has {s.errors} error{'s' if s.errors != 1 else ''}; nothing can be applied."
    if not (report.host_changes or report.vm_changes or report.vm_classes or report.namespaces):
        return "No changes: the farm matches the inventory."
    return plan_counts(s)


def plan_counts(s: PlanSummary) -> str:
    parts = [f"{s.create} to create", f"{s.change} to change", f"{s.power_off} power-off"]
    if s.remove:
        parts.insert(2, f"{s.remove} to remove")
    if s.host_changes:
        parts.insert(0, f"{s.host_changes} host change{'s' if s.host_changes != 1 else ''}")
    if s.maintenance:
        parts.append(f"{s.maintenance} host{'s' if s.maintenance != 1 else ''} in maintenance")
    if s.reboots:
        parts.append(f"{s.reboots} reboot{'s' if s.reboots != 1 else ''}")
    if s.vm_classes:
        parts.append(f"{s.vm_classes} VM class change{'s' if s.vm_classes != 1 else ''}")
    if s.namespaces:
        parts.append(f"{s.namespaces} namespace change{'s' if s.namespaces != 1 else ''}")
    return "Plan: " + ", ".join(parts) + "."


def styled(lines: list[str]) -> Any:
    """The lines as rich Text, + ~ - ! lines colored (never parsed as rich markup)."""
    from rich.text import Text

    text = Text()
    for line in lines:
        text.append(line + "\n", style=STYLES.get(line.lstrip()[:1], ""))
    text.rstrip()
    return text
