"""The plan and validate documents, and the plan's text, drawn only from its report: `plan`, `apply` and `show
PLANFILE` print the same lines, the last from the report saved in the plan file.

Host changes first, then VMs by name, the VM classes and namespaces in apply order, the disruptive steps,
what a scoped plan pulled in and left out, warnings, errors and a one-line summary. `+` create, `~` change,
`-` remove, `!` a disruptive step.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, field, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from vgpuctl.domain import ChangeKind, EvacuationKind, Phase, VmStep
from vgpuctl.hosts.evacuation import evacuations, needs_maintenance, needs_reboot, setting_changes
from vgpuctl.inventory.merge import possible_conflicts
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import (
    HOST_TARGET,
    EvacuationAction,
    GuestIdentity,
    HostChange,
    NicChange,
    Op,
    Plan,
    Problem,
    VmChange,
    queue_order,
)
from vgpuctl.reports.base import TERMINAL, ErrorInfo, Report, Scalar, TextLayout, VgpuCount, optional
from vgpuctl.reports.window import WindowReport, window_lines, window_report
from vgpuctl.supervisor.vmclasses import ClassChange, SupervisorPlan
from vgpuctl.visible import lines_text, visible

if TYPE_CHECKING:
    from vgpuctl.inventory import Inventory
    from vgpuctl.scope import ScopeResult


@dataclass
class ValidateReport(Report):
    kind: ClassVar[str] = "validate"
    file: str
    valid: bool
    hosts: int  # host entries
    vms: int  # VMs after name ranges are expanded
    vm_classes: int = 0
    namespaces: int = 0
    # problems a host entry merged over a cluster entry would have, if the host is in that cluster (vCenter says)
    warnings: list[str] = field(default_factory=list)

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        classes = ""
        if self.vm_classes or self.namespaces:
            classes = f", {self.vm_classes} VM classes, {self.namespaces} namespaces"
        lines = [f"{self.file}: valid ({self.hosts} host entries, {self.vms} VMs{classes})"]
        return lines_text(lines + [f"warning: {w}" for w in self.warnings])


@dataclass
class Evacuation:
    """What an evacuation does to its VM: restore-after (powered off, on again after the host change), hand-over
    (powered off, reconfigured and powered on by its own VM change), stays-off (powered off for good: its entry
    says power: off) or migrate (to `destination`)."""

    action: EvacuationKind
    destination: str | None


@dataclass
class HostDiff:
    """One host change: a setting, a VM's evacuation (`gpu` is then the VM) or finishing unfinished work; `gpu`
    is None for host-wide settings. `phase`: online, maintenance (disruptive) or reboot (needs_reboot too)."""

    host: str
    setting: ChangeKind
    gpu: str | None
    old: Scalar
    new: Scalar
    disruptive: bool
    needs_reboot: bool
    phase: Phase
    evacuation: Evacuation | None = optional()
    pulled_in_by: list[str] = field(default_factory=list)  # a scoped plan: the VMs in scope that need it


@dataclass
class FieldDiff:
    field: str
    op: str  # + ~ -
    old: Scalar
    new: Scalar


@dataclass
class DeviceDiff:
    op: str  # + or -
    profile: str
    key: int | None  # the existing device of a removal
    nvlink_group: int | None  # adds with the same number form one NVLink device group


@dataclass
class CloneDiff:
    template: str
    cluster: str | None
    host: str | None
    folder: str | None
    cpus: int | None
    memory_mb: int | None


@dataclass
class NicDiff:
    """A network adapter added (+), changed (~) or removed (-); `device` the physical NIC (PCI id) of an SR-IOV
    or passthrough adapter, `select` what the inventory named, `old` what a change replaces."""

    op: str  # + ~ -
    type: str  # vmxnet3 | pvrdma | sriov | passthrough | another adapter's type
    portgroup: str | None
    device: str | None
    select: str | None
    key: int | None  # the existing device of a change or removal
    protocol: str | None
    mac: str | None
    old: str | None


@dataclass
class IdentityAddress:
    portgroup: str
    address: str | None  # None: DHCP
    prefix: int | None
    gateway: str | None
    dns: list[str]


@dataclass
class IdentityDiff:
    """The identity a new VM is given at its first boot: guest customization or cloud-init guestinfo."""

    method: str  # customization | cloud-init
    hostname: str
    domain: str
    adapters: list[IdentityAddress]


@dataclass
class VmDiff:
    vm: str
    steps: list[VmStep]  # in order: clone, power-off, reconfigure, power-on (or power-off, destroy)
    clone: CloneDiff | None
    fields: list[FieldDiff]
    devices: list[DeviceDiff]
    extra_config: dict[str, str | None]  # None removes the key
    power_off: bool
    power_on: bool
    depends_on_hosts: list[str]
    destroy: bool  # state: absent: powered off and destroyed
    nics: list[NicDiff] = field(default_factory=list)  # in the clone spec for a new VM, else the reconfigure
    identity: IdentityDiff | None = None


@dataclass
class Disruption:
    """A disruptive step apply will take: a host entering maintenance mode or rebooting, a running VM powered
    off (to evacuate its host, or for its own change), and whether the VM runs again afterwards, or a VM destroyed
    (`state: absent`; a running one is powered off first, its own step)."""

    action: str  # maintenance | reboot | power-off | destroy
    host: str | None  # the host changed (None: a VM powered off or destroyed for its own change)
    vm: str | None  # the VM powered off or destroyed (None: a host step)
    cause: str  # host change | evacuation | own change
    comes_back: bool  # host out of maintenance / VM powered on again by this apply (never for a destroy)
    detail: str


@dataclass
class PlanSummary:
    create: int
    change: int
    power_off: int  # VMs powered off, for their own change or to evacuate a host
    power_on: int
    host_changes: int
    maintenance: int  # hosts entering maintenance mode
    reboots: int
    errors: int
    warnings: int
    vm_classes: int = 0  # VM classes to create, update or delete
    namespaces: int = 0  # supervisor namespaces whose VM classes change
    remove: int = 0  # VMs destroyed (state: absent)

    @staticmethod
    def total(summaries: Iterable[PlanSummary]) -> PlanSummary:
        """The counts of several plans (a fleet's vCenters) added up."""
        listed = list(summaries)
        return PlanSummary(**{f.name: sum(getattr(s, f.name) for s in listed) for f in fields(PlanSummary)})


@dataclass
class VmClassDiff:
    """A VM class created (+), updated (~) or deleted (-); `fields` are its sizes and reservations (old None on a
    create), `vgpus_added`/`vgpus_removed` its vGPU devices."""

    vm_class: str
    op: str  # + ~ -
    fields: list[FieldDiff]
    vgpus_added: list[VgpuCount]
    vgpus_removed: list[VgpuCount]
    extra_config: dict[str, str | None]  # None removes the key
    nics_added: list[str] = field(default_factory=list)  # Dynamic DirectPath NICs, `vvvv:dddd[@label]`
    nics_removed: list[str] = field(default_factory=list)


@dataclass
class NamespaceDiff:
    """VM classes associated with (`add`) and taken from (`remove`) a supervisor namespace."""

    namespace: str
    add: list[str]
    remove: list[str]


@dataclass
class PlanScope:
    """A plan scoped with --host, --cluster and --vm (names or globs): the patterns; the hosts and VMs they
    selected; the hosts whose changes were pulled in because a VM in scope waits for them; the hosts and VMs of
    the inventory left out (untouched); whether the inventory's VM classes and namespaces were left out."""

    hosts: list[str]
    clusters: list[str]
    vms: list[str]
    selected_hosts: list[str]
    selected_vms: list[str]
    pulled_in_hosts: list[str]
    pulled_in_vms: list[str]  # evacuated by a host change in scope and reconfigured by their own change
    out_of_scope_hosts: list[str]
    out_of_scope_vms: list[str]
    vm_classes_left_out: bool = False


class ProblemSubject(StrEnum):
    """What a plan problem is about (none: the whole plan)."""

    HOST = "host"
    VM = "vm"


@dataclass
class PlanProblem:
    """A change that cannot be carried out, or what keeps the plan from being applied: about a host (`subject`
    host: a change planned there, or the host itself), a VM (`subject` vm) or the whole plan (`subject` None);
    `at` is the FILE:LINE:COL of the inventory key it is about, when one is. Any problem refuses the whole plan."""

    subject: ProblemSubject | None
    name: str | None  # the host's or VM's name
    message: str
    at: str | None = None

    @property
    def text(self) -> str:
        """The line it is on its own (`vm web-01: reason`; a host's message names the host already)."""
        return str(Problem(self.message, vm=self.name if self.subject == ProblemSubject.VM else None, at=self.at))


@dataclass
class PlanOrder:
    """The order apply takes the plan in: the hosts with changes in waves (`maintenance.max_unavailable` hosts at
    a time, a wave after the one before it has ended), then the VMs in the order apply starts them (`--parallel`
    at a time: those that power on no vGPU first, then in power-on order; a VM waiting for its host's change
    starts once that host is done)."""

    host_waves: list[list[str]]
    vms: list[str]


@dataclass
class PlanReport(Report):
    kind: ClassVar[str] = "plan"
    host_changes: list[HostDiff]
    vm_changes: list[VmDiff]
    disruptions: list[Disruption]
    errors: list[str]  # the problems as lines
    warnings: list[str]
    summary: PlanSummary
    round_trips: int | None = optional()
    vm_classes: list[VmClassDiff] = field(default_factory=list)  # in apply order: after hosts and VMs
    namespaces: list[NamespaceDiff] = field(default_factory=list)
    scope: PlanScope | None = field(default=None, metadata={"omit_none": True})
    problems: list[PlanProblem] = field(default_factory=list)  # beside the changes: what cannot be carried out
    order: PlanOrder | None = field(default=None, metadata={"omit_none": True})
    window: WindowReport | None = field(default=None, metadata={"omit_none": True})  # a driver upgrade window
    # `plan` of a plan with problems: the error that refuses it after it is shown (the error document's `error`)
    error: ErrorInfo | None = optional()

    def render_text(self, layout: TextLayout = TERMINAL) -> Any:
        """The diff: colored on a terminal, plain lines in a pipe."""
        lines = plan_lines(self, layout.full)
        return lines_text(lines) if layout.plain else styled(lines)

    @property
    def is_empty(self) -> bool:
        return not (self.host_changes or self.vm_changes or self.vm_classes or self.namespaces
                    or (self.window is not None and not self.window.is_empty))


def validate_report(file: str, inventory: Inventory) -> ValidateReport:
    return ValidateReport(file=file, valid=True, hosts=len(inventory.hosts), vms=len(inventory.vms),
                          vm_classes=len(inventory.vm_classes), namespaces=len(inventory.namespaces),
                          warnings=possible_conflicts(inventory.hosts))


# ------------------------------------------------------------------------------------------ building it

def plan_summary(plan: Plan) -> PlanSummary:
    changes = plan.changes
    found = disruptions(plan)
    return PlanSummary(
        create=sum(1 for c in changes if c.clone is not None),
        change=sum(1 for c in changes if c.clone is None and not c.destroy),
        remove=sum(1 for d in found if d.action == DESTROY),
        power_off=sum(1 for d in found if d.action == POWER_OFF),
        power_on=sum(1 for c in changes if c.power_on),
        host_changes=len(plan.host_changes),
        maintenance=sum(1 for d in found if d.action == MAINTENANCE),
        reboots=sum(1 for d in found if d.action == REBOOT),
        errors=len(plan.errors),
        warnings=len(plan.warnings),
    )


# ------------------------------------------------------------------------------------------ disruptions

MAINTENANCE, REBOOT, POWER_OFF, DESTROY = "maintenance", "reboot", "power-off", "destroy"


def disruptions(plan: Plan) -> list[Disruption]:
    """Every disruptive step apply will take, host by host (maintenance, reboot, the VMs evacuated), then the
    VMs powered off for their own change, each VM destroyed after its power-off. What host apply does is decided
    by the same functions."""
    by_vm = {c.vm: c for c in plan.changes}
    hosts: dict[str, list[HostChange]] = {}
    for h in plan.host_changes:
        hosts.setdefault(h.host, []).append(h)
    found: list[Disruption] = []
    for host, changes in hosts.items():
        work = setting_changes(changes)
        if needs_maintenance(work):
            found.append(Disruption(MAINTENANCE, host, None, "host change", True, "enters maintenance mode"))
        if needs_reboot(work):
            found.append(Disruption(REBOOT, host, None, "host change", True, "reboots in maintenance mode"))
        for vm, action in evacuations(changes).items():
            if action.kind != EvacuationKind.MIGRATE:  # vMotion: stays on
                found.append(_evacuation(host, vm, action, by_vm.get(vm)))
    evacuated = {d.vm for d in found}
    for change in plan.changes:
        if change.power_off and change.vm not in evacuated:
            back = "destroyed" if change.destroy else "powered on again after it" if change.power_on else "stays off"
            found.append(Disruption(POWER_OFF, None, change.vm, "own change", change.power_on, back))
        if change.destroy:
            found.append(Disruption(DESTROY, None, change.vm, "own change", False,
                                    "destroyed (state: absent): the VM and its disks are deleted"))
    return found


def _evacuation(host: str, vm: str, action: EvacuationAction, vm_change: VmChange | None) -> Disruption:
    if action.kind == EvacuationKind.RESTORE_AFTER:
        return Disruption(POWER_OFF, host, vm, "evacuation", True, "powered on again after the host change")
    if action.kind == EvacuationKind.STAYS_OFF:
        return Disruption(POWER_OFF, host, vm, "evacuation", False, "left off (its entry has power: off)")
    back = vm_change is not None and vm_change.power_on
    detail = "reconfigured by its VM change, then " + ("powered on" if back else "left off")
    return Disruption(POWER_OFF, host, vm, "evacuation", back, detail)


def summary(plan: Plan) -> dict[str, int]:
    return asdict(plan_summary(plan))


def render_plan_text(plan: Plan) -> str:
    """The plan's text as `plan` prints it in a pipe, from its report (vgpuctl.reports.plan)."""

    return lines_text(plan_lines(plan_report(plan))) + "\n"


def plan_report(plan: Plan, round_trips: int | None = None, scope: ScopeResult | None = None) -> PlanReport:
    """The plan as its report: host changes, the VM changes that are not empty, errors, warnings, counts; for a
    scoped plan, its scope and which host changes were pulled in by which VMs."""
    hosts = [host_diff(h) for h in plan.host_changes]
    if scope is not None:
        for h in hosts:
            h.pulled_in_by = list(scope.pulled_in_hosts.get(h.host, []))
    return PlanReport(
        host_changes=hosts,
        vm_changes=[_vm_diff(c) for c in plan.changes],
        disruptions=disruptions(plan),
        errors=list(plan.errors),
        warnings=list(plan.warnings),
        summary=plan_summary(plan),
        round_trips=round_trips,
        scope=plan_scope(scope) if scope is not None else None,
        problems=[plan_problem(p) for p in plan.problems],
        order=plan_order(plan),
        window=window_report(plan.window, plan.host_changes),
    )


def plan_problem(p: Problem) -> PlanProblem:
    if p.vm is not None:
        return PlanProblem(ProblemSubject.VM, p.vm, p.message, p.at)
    if p.host is not None:
        return PlanProblem(ProblemSubject.HOST, p.host, p.message, p.at)
    return PlanProblem(None, None, p.message, p.at)


def plan_order(plan: Plan) -> PlanOrder:
    """The host waves the plan holds and its VM changes in the order apply's workers take them."""
    changes = plan.changes
    return PlanOrder([list(w) for w in plan.host_waves], [changes[i].vm for i in queue_order(changes)])


def plan_scope(scope: ScopeResult) -> PlanScope:
    return PlanScope(
        hosts=list(scope.scope.hosts),
        clusters=list(scope.scope.clusters),
        vms=list(scope.scope.vms),
        selected_hosts=list(scope.selected_hosts),
        selected_vms=list(scope.selected_vms),
        pulled_in_hosts=sorted(scope.pulled_in_hosts),
        pulled_in_vms=sorted(scope.pulled_in_vms),
        out_of_scope_hosts=list(scope.out_of_scope_hosts),
        out_of_scope_vms=list(scope.out_of_scope_vms),
        vm_classes_left_out=scope.vm_classes_left_out,
    )


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """plan_report's JSON document."""
    return plan_report(plan).to_dict()


def host_diff(h: HostChange) -> HostDiff:
    """One host change as the documents show it: `gpu` None for host-wide settings; an evacuation's action as
    its sentence in `new` and typed in `evacuation`."""
    gpu = None if h.target == HOST_TARGET else h.target
    new, evacuation = h.new, None
    if isinstance(h.new, EvacuationAction):
        new, evacuation = str(h.new), Evacuation(h.new.kind, h.new.destination)
    elif not isinstance(h.new, str | int | float | bool | type(None)):  # a setting's typed value: its text
        new = str(h.new)
    return HostDiff(h.host, h.kind, gpu, h.old, new, h.disruptive, h.needs_reboot, h.phase, evacuation)


def _vm_diff(change: VmChange) -> VmDiff:
    c = change.clone
    clone = None if c is None else CloneDiff(c.template, c.cluster, c.host, c.folder, c.cpus, c.memory_mb)
    return VmDiff(
        vm=change.vm,
        steps=change.planned_steps(),
        clone=clone,
        fields=[FieldDiff(f.field, str(f.op), f.old, f.new) for f in change.fields],
        devices=[DeviceDiff(str(d.op), d.profile, d.key, d.group) for d in change.devices],
        extra_config=dict(change.extra_config),
        power_off=change.power_off,
        power_on=change.power_on,
        depends_on_hosts=list(change.depends_on_hosts),
        destroy=change.destroy,
        nics=[NicDiff(str(n.op), n.kind, n.portgroup, n.device, n.select, n.key, n.protocol, n.mac, n.old)
              for n in _all_nics(change)],
        identity=_identity_diff(change.identity),
    )


def _all_nics(change: VmChange) -> list[NicChange]:
    return (change.clone.nics if change.clone is not None else []) + change.nics


def _identity_diff(identity: GuestIdentity | None) -> IdentityDiff | None:
    if identity is None:
        return None
    return IdentityDiff(identity.method, identity.hostname, identity.domain,
                        [IdentityAddress(a.portgroup, a.address, a.prefix, a.gateway, list(a.dns))
                         for a in identity.adapters])


def _class_fields(c: ClassChange) -> list[FieldDiff]:
    if c.op == Op.ADD and c.desired is not None:
        d = c.desired
        created = (("cpus", d.cpus), ("memoryMB", d.memory_mb), ("cpu_reservation", d.cpu_reservation),
                   ("memory_reservation", d.memory_reservation))
        return [FieldDiff(name, str(Op.ADD), None, value) for name, value in created]
    return [FieldDiff(f.field, str(f.op), f.old, f.new) for f in c.fields]


def vm_class_diff(c: ClassChange) -> VmClassDiff:
    return VmClassDiff(
        vm_class=c.name,
        op=str(c.op),
        fields=_class_fields(c),
        vgpus_added=sorted_counts(c.vgpus_added),
        vgpus_removed=sorted_counts(c.vgpus_removed),
        extra_config=dict(c.extra_config),
        nics_added=list(c.nics_added),
        nics_removed=list(c.nics_removed),
    )


def with_class_plan(report: PlanReport, plan: SupervisorPlan | None) -> PlanReport:
    """`plan`'s document with the VM-class and namespace diff, in apply order (classes created or updated, the
    namespaces, classes deleted). Its errors and warnings are already the plan's (merged by the caller)."""
    if plan is None:
        return report
    ordered = plan.ordered()
    report.vm_classes = [vm_class_diff(c) for c in ordered if isinstance(c, ClassChange)]
    report.namespaces = [NamespaceDiff(n.namespace, list(n.add), list(n.remove)) for n in plan.namespace_changes]
    report.summary.vm_classes = len(plan.class_changes)
    report.summary.namespaces = len(plan.namespace_changes)
    return report


def sorted_counts(profiles: list[str]) -> list[VgpuCount]:
    return [VgpuCount(p, n) for p, n in sorted(Counter(profiles).items())]


# ------------------------------------------------------------------------------------------ the apply


# ------------------------------------------------------------------------------------------ the text

INDENT = "    "
STEP_WORDS = {VmStep.POWER_OFF: "power off", VmStep.POWER_ON: "power on"}
LIST_CUT = 20  # names listed before "... and N more" (unless the layout is full)
STYLES = {"+": "green", "-": "red", "~": "yellow", "!": "bold red", "x": "bold red"}


def value_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "(none)"
    return str(v)


def plan_lines(report: PlanReport, full: bool = False) -> list[str]:
    """Every change, each host's and VM's problems under its changes (the others at the end), the disruptive
    steps, the scope, warnings and the summary: a plan with problems shows all of it too."""
    shown = {(ProblemSubject.HOST, h.host) for h in report.host_changes}
    shown |= {(ProblemSubject.VM, v.vm) for v in report.vm_changes}
    under: dict[tuple[ProblemSubject, str], list[str]] = {}
    for p in report.problems:
        if p.subject is not None and p.name is not None and (p.subject, p.name) in shown:
            under.setdefault((p.subject, p.name), []).append(f"{p.at}: {p.message}" if p.at else p.message)
    lines: list[str] = []
    for i, h in enumerate(report.host_changes):
        lines.append(host_line(h))
        if i + 1 == len(report.host_changes) or report.host_changes[i + 1].host != h.host:
            lines += problem_lines(under.get((ProblemSubject.HOST, h.host), []))
    for change in report.vm_changes:
        lines += vm_lines(change) + problem_lines(under.get((ProblemSubject.VM, change.vm), []))
    lines += [line for c in report.vm_classes if c.op != "-" for line in class_lines(c)]
    lines += [line for n in report.namespaces for line in namespace_lines(n)]
    lines += [line for c in report.vm_classes if c.op == "-" for line in class_lines(c)]
    if report.window is not None:
        lines += window_lines(report.window)
    if report.disruptions:
        lines.append("Disruptive steps:")
        lines += [f"  {disruption_line(d)}" for d in report.disruptions]
    if report.order is not None and len(report.order.host_waves) > 1 and not report.errors:
        lines.append(waves_line(report.order))
    if report.scope is not None:
        lines += scope_lines(report.scope, full)
    lines += [f"Warning: {w}" for w in report.warnings]
    if report.problems or not report.errors:  # a report saved before problems were kept has its errors only
        lines += [f"Error: {p.text}" for p in report.problems if (p.subject, p.name) not in shown]
    else:
        lines += [f"Error: {e}" for e in report.errors]
    return lines + summary_lines(report)


def problem_lines(messages: list[str]) -> list[str]:
    """A host's or VM's problems under its changes: `x cannot be carried out: [FILE:LINE:COL: ]reason`."""
    return [f"{INDENT}x cannot be carried out: {m}" for m in messages]


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


def waves_line(order: PlanOrder) -> str:
    """`Host waves (maintenance.max_unavailable at a time): 1. esx-01, esx-02; 2. esx-03`."""
    waves = "; ".join(f"{i}. {', '.join(hosts)}" for i, hosts in enumerate(order.host_waves, 1))
    return f"Host waves (maintenance.max_unavailable at a time): {waves}"


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


def summary_lines(report: PlanReport) -> list[str]:
    """The counts of what the plan changes; with problems, that nothing of it can be applied."""
    s = report.summary
    if report.errors:
        refused = f"Plan has {s.errors} error{'s' if s.errors != 1 else ''}; nothing can be applied."
        return [refused] if report.is_empty else [counts_line(report), refused]
    if report.is_empty:
        return ["No changes: the farm matches the inventory."]
    return [counts_line(report)]


def counts_line(report: PlanReport) -> str:
    """The counts of the plan's changes, with a driver upgrade window's guest driver changes."""
    s = report.summary
    guests = (len(report.window.before) + len(report.window.after)) if report.window is not None else 0
    return plan_counts(s) if not guests else plan_counts(s)[:-1] + f", {guests} guest driver change" + (
        "s." if guests != 1 else ".")


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
        text.append(visible(line, False) + "\n", style=STYLES.get(line.lstrip()[:1], ""))
    text.rstrip()
    return text


def plan_section(plan: Plan, scope: ScopeResult | None, classes: SupervisorPlan | None) -> dict[str, Any]:
    """A plan file's plan section: `plan`'s document of the plan (its scope and VM classes with it), without the
    round trips it took; what `plan --out` saves and `apply PLANFILE` compares the plan it makes again with."""
    document = with_class_plan(plan_report(plan, None, scope), classes).to_dict()
    document.pop("round_trips", None)
    return dict(json.loads(json.dumps(document)))  # as the file holds it: JSON's types
