"""The plan, validate, apply and host-change documents."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from vgpuctl.domain import ChangeKind, EvacuationKind, Outcome, Phase, VmStep
from vgpuctl.model import (
    HOST_TARGET,
    ApplyResult,
    EvacuationAction,
    GuestIdentity,
    HostApplyResult,
    HostChange,
    HostOutcome,
    NicChange,
    Op,
    Plan,
    VmChange,
    VmOutcome,
)
from vgpuctl.reports.base import TERMINAL, Report, Scalar, TextLayout, VgpuCount, optional, vgpu_counts
from vgpuctl.supervisor.vmclasses import ClassChange, SupervisorPlan

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
        return "\n".join(lines + [f"warning: {w}" for w in self.warnings])


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
    evacuation: Evacuation | None = optional()  # noqa: RUF009 - None, not a shared object
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


@dataclass
class PlanReport(Report):
    kind: ClassVar[str] = "plan"
    host_changes: list[HostDiff]
    vm_changes: list[VmDiff]
    disruptions: list[Disruption]
    errors: list[str]
    warnings: list[str]
    summary: PlanSummary
    round_trips: int | None = optional()
    vm_classes: list[VmClassDiff] = field(default_factory=list)  # in apply order: after hosts and VMs
    namespaces: list[NamespaceDiff] = field(default_factory=list)
    scope: PlanScope | None = field(default=None, metadata={"omit_none": True})

    def render_text(self, layout: TextLayout = TERMINAL) -> Any:
        """The diff (vgpuctl.reports.plantext): colored on a terminal, plain lines in a pipe."""
        from vgpuctl.reports.plantext import plan_lines, styled

        lines = plan_lines(self, layout.full)
        return "\n".join(lines) if layout.plain else styled(lines)

    @property
    def is_empty(self) -> bool:
        return not (self.host_changes or self.vm_changes or self.vm_classes or self.namespaces)


@dataclass
class ApplyReport(Report):
    """What an apply did: the plan it confirmed, each host and VM, and the VM plan's errors after the hosts."""

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
    vm: str | None = optional()  # `vm vgpu add/remove`: the VM changed
    round_trips: int | None = optional()

    def render_text(self, layout: TextLayout = TERMINAL) -> None:
        """None: in text mode apply shows its progress and summary while it runs."""
        return None


def validate_report(file: str, inventory: Inventory) -> ValidateReport:
    from vgpuctl.inventory.merge import possible_conflicts

    return ValidateReport(file=file, valid=True, hosts=len(inventory.hosts), vms=len(inventory.vms),
                          vm_classes=len(inventory.vm_classes), namespaces=len(inventory.namespaces),
                          warnings=possible_conflicts(inventory.hosts))


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
    from vgpuctl.hosts.evacuation import evacuations, needs_maintenance, needs_reboot, setting_changes

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
    """The plan's text as `plan` prints it in a pipe, from its report (vgpuctl.reports.plantext)."""
    from vgpuctl.reports.plantext import plan_lines

    return "\n".join(plan_lines(plan_report(plan))) + "\n"


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
    )


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
) -> ApplyReport:
    """The apply's document: the plan it confirmed, each host and VM; round trips only when given (-v)."""
    vms = result.vms
    return ApplyReport(
        plan=with_class_plan(plan_report(plan, scope=scope), classes),
        hosts=list(hosts.hosts) if hosts is not None else [],
        vms=list(vms),
        changed=vm_names(vms, Outcome.CHANGED),
        failed=vm_names(vms, Outcome.FAILED),
        skipped=vm_names(vms, Outcome.SKIPPED),
        unchanged=vm_names(vms, Outcome.UNCHANGED),
        not_started=vm_names(vms, Outcome.NOT_STARTED),
        hosts_not_ready=list(result.hosts_not_ready),
        vm_errors=list(vm_errors),
        interrupted=interrupted,
        vm=vm,
        round_trips=round_trips,
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
    from vgpuctl.reports.plantext import LIST_CUT, names_text

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
    if report.round_trips is not None:
        lines.append(f"round trips: {report.round_trips}")
    return "\n".join(lines)


def left_lines(vms: Iterable[VmOutcome], full: bool = False) -> list[str]:
    """What an interrupted or stopped apply left of the VMs it started, and how to go on."""
    from vgpuctl.reports.plantext import LIST_CUT

    vms = list(vms)
    left = [o for o in vms if o.left and o.status != Outcome.NOT_STARTED]
    if not left and not any(o.status == Outcome.NOT_STARTED for o in vms):
        return []
    lines = [f"  left: {o.vm} ({', '.join(o.left)})" for o in (left if full else left[:LIST_CUT])]
    if len(left) > LIST_CUT and not full:
        lines.append(f"  left: ... and {len(left) - LIST_CUT} more VMs")
    lines.append("  to continue: run the same apply again; it plans only what is left")
    return lines


HOST_SUMMARY = ((Outcome.CHANGED, "changed"), (Outcome.FAILED, "failed"), (Outcome.NOT_STARTED, "not started"))


def _host_summary(report: ApplyReport, full: bool = False) -> list[str]:
    from vgpuctl.reports.plantext import LIST_CUT

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
