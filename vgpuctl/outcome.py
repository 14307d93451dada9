"""What a whole run did: the plan stage's result (`Planned`), the apply stage's (`ApplyOutcome`), and everything
one `pipeline.run` did (`RunOutcome`), which the apply and provision reports are built from."""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

from vgpuctl.domain import Outcome, StopReason
from vgpuctl.durations import Deadline
from vgpuctl.errors import Interrupted, PlanError, VgpuctlError
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import ApplyResult, GuestDriverOutcome, HostApplyResult, Observed, Op, Plan, SupervisorApplyResult

if TYPE_CHECKING:
    from vgpuctl.guest.runner import DeployResult
    from vgpuctl.inventory import Inventory
    from vgpuctl.scope import ScopeResult
    from vgpuctl.settings.facts import HostFacts
    from vgpuctl.supervisor.vmclasses import SupervisorPlan


@dataclass
class ApplyOutcome:
    """What `apply` did: the hosts (None when the plan had no host changes) and the VMs of `vm_plan`, the VM
    plan made again after the host changes (the original plan when there were none)."""

    hosts: HostApplyResult | None
    vms: ApplyResult
    vm_plan: Plan
    interrupted: bool = False
    vm_errors: list[str] = field(default_factory=list)
    guest_drivers: list[GuestDriverOutcome] = field(default_factory=list)  # a driver upgrade window's guest moves
    deadline: Deadline | None = None  # apply --deadline: hosts and VMs not started by then say so

    def left_by_deadline(self) -> tuple[list[str], list[str]]:
        """The hosts and VMs the deadline kept from starting."""
        hosts = [o.host for o in self.hosts.hosts if o.stopped_by == StopReason.DEADLINE] if self.hosts else []
        return hosts, [o.vm for o in self.vms.vms if o.stopped_by == StopReason.DEADLINE]


@dataclass
class Planned:
    """What the plan stage produced: the farm as read, the plan, and the VM-class plan (None when the inventory
    names no VM classes or namespaces)."""

    inventory: Inventory  # of a scoped run: only the entries in scope
    observed: Observed
    plan: Plan
    classes: SupervisorPlan | None = None
    vcenter: str = ""  # the SDK URL the plan was made against
    round_trips: int = 0
    scope: ScopeResult | None = None
    facts: dict[str, HostFacts] = field(default_factory=dict)  # the host facts the plan was made from

    @property
    def is_empty(self) -> bool:
        return self.plan.is_empty and (self.classes is None or self.classes.is_empty)

    @property
    def disruptive(self) -> bool:
        """Host changes, guest drivers a window moves, VMs powered off or destroyed or vGPUs removed, or VM classes
        deleted."""
        window = self.plan.window
        return (
            bool(self.plan.host_changes)
            or (window is not None and not window.is_empty)  # a guest driver install reloads the guest's driver
            or any(c.power_off or c.destroy or any(d.op == Op.REMOVE for d in c.devices) for c in self.plan.changes)
            or (self.classes is not None and any(c.op == Op.REMOVE for c in self.classes.class_changes))
        )


@dataclass
class RunOutcome:
    """Everything one run did. `applied` is None when it only planned or had nothing to change; `classes` is
    the VM-class stage's result; `guests` the guest playbooks' (provision)."""

    planned: Planned
    applied: ApplyOutcome | None = None
    classes: SupervisorApplyResult | None = None
    addresses: dict[str, str | None] | None = None
    guests: DeployResult | None = None
    interrupted: bool = False
    round_trips: int = 0

    @property
    def vm_result(self) -> ApplyResult:
        return self.applied.vms if self.applied is not None else ApplyResult()

    @property
    def vm_plan(self) -> Plan:
        """The VM plan that was applied: made again after the host changes when there were some."""
        return self.applied.vm_plan if self.applied is not None else self.planned.plan

    def failure(self) -> VgpuctlError | None:
        """What makes this run a failure (the first of: a host failed, the VM plan after the hosts failed,
        Ctrl-C, VMs failed, a VM-class change failed), or None."""
        applied = self.applied
        hosts = applied.hosts if applied is not None else None
        if hosts is not None and hosts.failed and not self.interrupted:
            return VgpuctlError(
                f"apply failed on host(s) {', '.join(hosts.failed)} (left as the summary says): run apply again "
                "to continue"
            )
        if applied is not None and applied.vm_errors:
            return PlanError(list(applied.vm_errors))
        moved = [o for o in applied.guest_drivers if o.status == Outcome.FAILED] if applied is not None else []
        if moved and not self.interrupted:
            return VgpuctlError(f"the upgrade window stopped: the guest driver of {', '.join(o.vm for o in moved)} "
                                "could not be moved (the summary says why): run apply again to continue")
        result = self.vm_result
        if self.interrupted:
            return Interrupted(
                f"interrupted: {len(result.changed)} VM(s) changed, {len(result.not_started)} not started; run "
                "apply again to continue"
            )
        if result.failed:
            return VgpuctlError(f"apply failed for {len(result.failed)} of {len(result.vms)} VM(s): "
                                f"{', '.join(result.failed)}")
        held, left = applied.left_by_deadline() if applied is not None else ([], [])
        if held or left:
            when = applied.deadline.text if applied is not None and applied.deadline is not None else ""
            return VgpuctlError(f"the deadline {when} passed with {len(held)} host(s) and {len(left)} VM(s) not "
                                "started (the summary lists them): run the same apply again in the next window")
        if self.classes is not None and self.classes.failed:
            first = self.classes.failed[0]
            return VgpuctlError(f"apply stopped at {first.target}: {first.message}")
        return None
