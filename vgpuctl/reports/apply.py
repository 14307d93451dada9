"""`vgpuctl apply`'s document (the plan it confirmed, each host and VM) and its closing summary, and the
`host graphics/mig/nvlink/scheduler` documents."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field
from typing import TYPE_CHECKING, ClassVar

from vgpuctl.domain import Outcome, StopReason
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import (
    ApplyResult,
    ChangeOutcome,
    GuestDriverOutcome,
    HostApplyResult,
    HostChange,
    HostOutcome,
    Plan,
    VmOutcome,
)
from vgpuctl.reports.base import TERMINAL, ErrorInfo, Report, TextLayout, VgpuCount, optional, vgpu_counts
from vgpuctl.supervisor.vmclasses import SupervisorPlan

if TYPE_CHECKING:
    from vgpuctl.scope import ScopeResult
from vgpuctl.reports.plan import LIST_CUT, HostDiff, PlanReport, host_diff, names_text, plan_report, with_class_plan
from vgpuctl.visible import lines_text


@dataclass
class ApplyReport(Report):
    """What an apply did: the plan it confirmed, each host and VM, the VM plan's errors after the hosts, each
    VM-class and namespace change, and what failed the run (the error it ends with; absent when it succeeded)."""

    kind: ClassVar[str] = "apply"
    plan: PlanReport
    hosts: list[HostOutcome]
    vms: list[VmOutcome]
    changed: list[str]
    failed: list[str]
    skipped: list[str]
    unchanged: list[str]
    not_started: list[str]  # an interrupted apply, or a VM plan after the hosts that failed, never began them
    hosts_not_ready: list[str]
    vm_errors: list[str]
    interrupted: bool
    vm_class_outcomes: list[ChangeOutcome] = field(default_factory=list)
    error: ErrorInfo | None = optional()
    vm: str | None = optional()  # `vm vgpu add/remove`: the VM changed
    round_trips: int | None = optional()
    deadline: str | None = optional()  # apply --deadline, local time with its UTC offset
    # what a change window's limits kept from starting, one entry per reason (the deadline, max_failures)
    stopped: list[Stopped] = field(default_factory=list)
    guest_drivers: list[GuestDriverOutcome] = field(default_factory=list)  # a driver upgrade window's guest moves

    def render_text(self, layout: TextLayout = TERMINAL) -> None:
        """None: in text mode apply shows its progress and summary while it runs."""
        return None


@dataclass
class Stopped:
    """Hosts and VMs an apply did not start because of its change window: `deadline` (it passed before their
    wave or their start) or `max-failures` (that many hosts had failed); `message` says which."""

    reason: StopReason
    message: str
    hosts: list[str]
    vms: list[str]


def stopped_by(hosts: Iterable[HostOutcome], vms: Iterable[VmOutcome], deadline: str | None) -> list[Stopped]:
    """One entry per reason that kept hosts or VMs from starting, in the order: the failure limit, the deadline."""
    hosts, vms = list(hosts), list(vms)
    out = []
    for reason in (StopReason.MAX_FAILURES, StopReason.DEADLINE):
        held = [o.host for o in hosts if o.stopped_by == reason]
        left = [o.vm for o in vms if o.stopped_by == reason]
        if not (held or left):
            continue
        if reason == StopReason.DEADLINE:
            when = f"the deadline {deadline}" if deadline else "the deadline"
            message = f"{when} passed: no host wave and no VM started after it"
        else:
            failed = [o.host for o in hosts if o.status == Outcome.FAILED]
            message = f"{len(failed)} host(s) failed ({', '.join(failed)}): maintenance.max_failures was reached"
        out.append(Stopped(reason, message, held, left))
    return out


def vm_names(vms: Iterable[VmOutcome], status: Outcome) -> list[str]:
    return [o.vm for o in vms if o.status == status]


@dataclass
class AffectedVm:
    vm: str
    vgpus: list[VgpuCount]


@dataclass
class HostChangeReport(Report):
    """`host graphics/mig/nvlink/scheduler`: the changes, the running VMs they affect, and the outcome."""

    kind: ClassVar[str] = "host-change"
    host: str
    changes: list[HostDiff]
    affected_vms: list[AffectedVm]
    result: HostOutcome | None

    def render_text(self, layout: TextLayout = TERMINAL) -> str | None:
        """The outcome; "no changes" when there was nothing to do (before the change, what it will do is
        said by the command while it asks)."""
        if not self.changes:
            return f"host {self.host}: no changes"
        return self.result.describe() if self.result is not None else None


def host_change_report(
    host: str, changes: list[HostChange], running: Iterable[tuple[str, list[str]]]
) -> HostChangeReport:
    """The changes of one host and the running VMs they affect (name, vGPU profiles); no outcome yet."""
    affected = [AffectedVm(vm, vgpu_counts(profiles)) for vm, profiles in running]
    return HostChangeReport(host, [host_diff(c) for c in changes], affected, None)


def apply_report(
    plan: Plan,
    result: ApplyResult,
    *,
    classes: SupervisorPlan | None = None,
    hosts: HostApplyResult | None = None,
    vm_errors: Iterable[str] = (),
    interrupted: bool = False,
    vm: str | None = None,
    round_trips: int | None = None,
    scope: ScopeResult | None = None,
    class_outcomes: Iterable[ChangeOutcome] = (),
    error: ErrorInfo | None = None,
    guest_drivers: Iterable[GuestDriverOutcome] = (),
    deadline: str | None = None,
) -> ApplyReport:
    """The apply's document: the plan it confirmed, each host and VM, each VM-class and namespace change, the
    error that failed the run, what its change window left (`deadline`: apply --deadline as text); round trips
    only when given (-v)."""
    vms = result.vms
    host_outcomes = list(hosts.hosts) if hosts is not None else []
    return ApplyReport(
        plan=with_class_plan(plan_report(plan, scope=scope), classes),
        hosts=host_outcomes,
        vms=list(vms),
        changed=vm_names(vms, Outcome.CHANGED),
        failed=vm_names(vms, Outcome.FAILED),
        skipped=vm_names(vms, Outcome.SKIPPED),
        unchanged=vm_names(vms, Outcome.UNCHANGED),
        not_started=vm_names(vms, Outcome.NOT_STARTED),
        hosts_not_ready=list(result.hosts_not_ready),
        vm_errors=list(vm_errors),
        interrupted=interrupted,
        vm_class_outcomes=list(class_outcomes),
        error=error,
        vm=vm,
        round_trips=round_trips,
        guest_drivers=list(guest_drivers),
        deadline=deadline,
        stopped=stopped_by(host_outcomes, vms, deadline),
    )


SUMMARY_ORDER = (
    (Outcome.CHANGED, "changed"),
    (Outcome.FAILED, "failed"),
    (Outcome.SKIPPED, "skipped"),
    (Outcome.NOT_STARTED, "not started"),
    (Outcome.UNCHANGED, "unchanged"),
)


UNDONE = (Outcome.FAILED, Outcome.SKIPPED, Outcome.NOT_STARTED)


def summarize(vms: Iterable[VmOutcome]) -> dict[str, list[str]]:
    """VM names by outcome (every outcome present, empty when none)."""
    groups: dict[str, list[str]] = {str(status): [] for status, _ in SUMMARY_ORDER}
    for outcome in vms:
        groups.setdefault(str(outcome.status), []).append(outcome.vm)
    return groups


def summary_line(groups: dict[str, list[str]], interrupted: bool, plan_failed: bool = False) -> str:
    """`Apply finished: 3 changed, 1 unchanged.`; never "0 changed" when work was left undone."""
    undone = plan_failed or any(groups[str(s)] for s in UNDONE)
    head = "Apply interrupted" if interrupted else "Apply incomplete" if undone else "Apply finished"
    parts = [f"{len(groups[str(s)])} {label}" for s, label in SUMMARY_ORDER]
    if not groups[str(Outcome.CHANGED)] and undone:
        parts[0] = "no VM changed"
    return f"{head}: {', '.join(parts)}."


def render_apply_summary(report: ApplyReport, full: bool = False) -> str:
    """The apply's closing lines: hosts, the VM counts, what failed or was left and how to go on. Lists longer
    than 20 names are cut with a count unless `full` (-v)."""

    groups = summarize(report.vms)
    lines = [*_host_summary(report, full), summary_line(groups, report.interrupted, bool(report.vm_errors))]
    for status, label in SUMMARY_ORDER:
        if status in (Outcome.CHANGED, Outcome.SKIPPED, Outcome.NOT_STARTED) and groups[str(status)]:
            lines.append(f"  {label}: {names_text(groups[str(status)], full)}")
    failed = [o for o in report.vms if o.status == Outcome.FAILED]
    for outcome in failed if full else failed[:LIST_CUT]:
        fault = f"{outcome.fault_type}: " if outcome.fault_type else ""
        lines.append(f"  failed: {outcome.vm}: {fault}{outcome.message}")
    if len(failed) > LIST_CUT and not full:
        lines.append(f"  failed: ... and {len(failed) - LIST_CUT} more VMs (-v lists them all)")
    lines += left_lines(report.vms, full)
    lines += [line for stop in report.stopped for line in stopped_lines(stop, full)]
    lines += [guest_driver_line(o) for o in report.guest_drivers]

    if report.round_trips is not None:
        lines.append(f"round trips: {report.round_trips}")
    return lines_text(lines)


def guest_driver_line(o: GuestDriverOutcome) -> str:
    """`Guest driver infer-01 (before): 550.90.07 changed`: what a window's guest driver move did."""
    return f"Guest driver {o.vm} ({o.stage}): {o.new} {o.status}" + (f": {o.message}" if o.message else "")


def left_lines(vms: Iterable[VmOutcome], full: bool = False) -> list[str]:
    """What an interrupted or stopped apply left of the VMs it started, and how to go on."""

    vms = list(vms)
    left = [o for o in vms if o.left and o.status != Outcome.NOT_STARTED]
    if not left and not any(o.status == Outcome.NOT_STARTED for o in vms):
        return []
    lines = [f"  left: {o.vm} ({', '.join(o.left)})" for o in (left if full else left[:LIST_CUT])]
    if len(left) > LIST_CUT and not full:
        lines.append(f"  left: ... and {len(left) - LIST_CUT} more VMs")
    lines.append("  to continue: run the same apply again; it plans only what is left")
    return lines


def stopped_lines(stop: Stopped, full: bool = False) -> list[str]:
    """`Stopped: the deadline ... passed: ...`, then the hosts and VMs it left and how to go on."""
    lines = [f"Stopped: {stop.message}"]
    if stop.hosts:
        lines.append(f"  hosts not started: {names_text(stop.hosts, full)}")
    if stop.vms:
        lines.append(f"  VMs not started: {names_text(stop.vms, full)}")
    when = "in the next change window" if stop.reason == StopReason.DEADLINE else "once the failed hosts are fixed"
    lines.append(f"  to continue: run the same apply again {when}; it plans only what is left")
    return lines


HOST_SUMMARY = ((Outcome.CHANGED, "changed"), (Outcome.FAILED, "failed"), (Outcome.NOT_STARTED, "not started"))


def _host_summary(report: ApplyReport, full: bool = False) -> list[str]:

    if not report.hosts:
        return []
    parts = [f"{sum(1 for o in report.hosts if o.status == s)} {label}" for s, label in HOST_SUMMARY]
    lines = [f"Hosts: {', '.join(parts)}."]
    described = [line for outcome in report.hosts for line in outcome.describe().splitlines()]
    lines += [f"  {line}" for line in (described if full else described[: LIST_CUT * 3])]
    if len(described) > LIST_CUT * 3 and not full:
        lines.append("  ... (-v lists every host)")
    lines += [f"  VM plan after the host changes: {e}" for e in report.vm_errors]
    return lines
