"""Execute a Plan's VM changes against vCenter, `parallel` VMs at a time: `apply_plan`.

Per VM: claim it (vgpuctl.vsphere.claims: no other run works on it until this one is done; a VM another live
run holds fails, naming that run), re-read it (drift leaves it untouched: its vGPUs, power state or
configuration version differ from the plan's), shut down (hard power-off after a timeout), at most one clone
and one ReconfigVM_Task, conditional on the VM's configuration version (vCenter refuses it with
ConcurrentAccess once something else changed the VM), power-on; a failed VM is a result and does not stop
the others. The VMs of one host power on in the plan's placement order (largest first: PowerOnTurns). A VM
this run stopped runs again after a failed reconfigure, or with its previous vGPUs when the new ones find no
room; a clone that finds no room is removed, so the next plan places it anew. After `cancel` no VM begins a
forward step, a VM this run powered off is powered on again, and running tasks are waited for (a second Ctrl-C
ends the process without waiting: see vgpuctl.pipeline.run_interruptible).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from vgpuctl.domain import DEFAULT_PARALLEL, Outcome, PowerState, StopReason, VmStep
from vgpuctl.durations import Deadline
from vgpuctl.errors import (
    ChangedMeanwhile,
    CustomizationError,
    DriftError,
    NotFound,
    PlanError,
    VgpuctlError,
    VsphereFault,
)
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import (
    ApplyResult,
    NicChange,
    Observed,
    ObservedDeviceGroup,
    ObservedHost,
    ObservedVm,
    Op,
    Plan,
    VmChange,
    VmOutcome,
    queue_order,
)
from vgpuctl.progress import Cancel, VmProgress, cancelled
from vgpuctl.vms.drift import check_drift, clone_unmet, fmt_devices, unmet_since, vgpu_keys
from vgpuctl.vsphere import vmnet, vmops
from vgpuctl.vsphere.bookkeeping import BookkeepingError
from vgpuctl.vsphere.claims import ClaimHeld, VmClaims, collect_dead
from vgpuctl.vsphere.faults import fault_message, fault_type
from vgpuctl.vsphere.session import Session
from vgpuctl.vsphere.tasks import TaskWatcher, dispatch
from vgpuctl.vsphere.vm import config_spec, extra_config, revert_spec
from vgpuctl.vsphere.vmnet import customization_result, customization_spec, ethernet_macs
from vgpuctl.vsphere.vmops import VmState
from vgpuctl.vsphere.workrecord import LeaseHeld, new_run_id

log = logging.getLogger(__name__)


class PowerOnTurns:
    """Per host, VMs power on in the plan's placement order (VmChange.power_on_rank: existing VMs, then largest
    first; vgpuctl.farm.placement.power_on_key), whatever order the parallel workers reach them in: where a vGPU lands
    under the conservative MIG start and placement id rules depends on what powered on before it, and the plan
    (and `capacity`) placed them in that order. A VM waits until every VM ranked before it on its host has
    powered on or finished (failed, skipped, interrupted); VMs are queued by rank, so the one waited for has
    always started."""

    def __init__(self, changes: list[VmChange], observed: Observed):
        self._cond = threading.Condition()
        by_host: dict[str, list[VmChange]] = {}
        for c in changes:
            host = power_on_host(c, observed)
            if c.power_on_rank is not None and host is not None:
                by_host.setdefault(host, []).append(c)
        self._before: dict[str, list[str]] = {}
        for ranked in by_host.values():
            ranked.sort(key=lambda c: c.power_on_rank or 0)
            for i, c in enumerate(ranked):
                self._before[c.vm] = [d.vm for d in ranked[:i]]
        self._open = set(self._before)

    def ready(self, vm: str) -> bool:
        """Whether every VM ranked before `vm` on its host has powered on or finished."""
        with self._cond:
            return self._ready(vm)

    def _ready(self, vm: str) -> bool:
        return not any(v in self._open for v in self._before.get(vm, ()))

    def wait(self, vm: str) -> None:
        """Block until `ready(vm)`."""
        with self._cond:
            self._cond.wait_for(lambda: self._ready(vm))

    def done(self, vm: str) -> None:
        with self._cond:
            self._open.discard(vm)
            self._cond.notify_all()


def power_on_host(change: VmChange, observed: Observed) -> str | None:
    """The host a VM powers on on: where the plan clones it, else where it is."""
    if change.clone is not None and change.clone.host:
        return change.clone.host
    vm = observed.vm_for(change)
    return vm.host if vm is not None else None


def touched_vms(changes: list[VmChange], observed: Observed) -> list[str]:
    """The moids of the VMs a VM apply touches: the VMs it changes and every VM on the hosts they are on or are
    cloned onto (the claims a dead run left on them are collected first)."""
    hosts = {h for c in changes if (h := power_on_host(c, observed)) is not None}
    changed = {vm.moid for c in changes if (vm := observed.vm_for(c)) is not None}
    return sorted(changed | {vm.moid for vm in observed.vms.values() if vm.host in hosts and vm.moid})


@dataclass
class _Ctx:
    session: Session
    observed: Observed
    watcher: Any
    progress: VmProgress | None
    cancel: Cancel | None
    shutdown_timeout_s: float
    poll_s: float
    turns: PowerOnTurns | None = None
    claims: VmClaims | None = None
    halted: str = ""  # why no further VM starts: vCenter refused vgpuctl's own bookkeeping
    customization_timeout_s: float = 900.0
    deadline: Deadline | None = None  # apply --deadline: no VM starts after it


def apply_plan(
    session: Session,
    plan: Plan,
    observed: Observed,
    *,
    parallel: int = DEFAULT_PARALLEL,
    progress: VmProgress | None = None,
    cancel: Cancel | None = None,
    shutdown_timeout_s: float = 120.0,
    poll_s: float = 0.5,
    run_id: str | None = None,
    lock_timeout_s: float = 0.0,
    customization_timeout_s: float = 900.0,
    deadline: Deadline | None = None,
) -> ApplyResult:
    """Apply the VM changes of `plan` (computed from `observed`). Raises PlanError if the plan has errors; VM
    failures are results. Host changes still in the plan have not landed: VMs that depend on them are skipped
    with the reason (vgpuctl.pipeline.apply runs the hosts first). `run_id` names this run in its VM claims;
    `lock_timeout_s`: how long to wait for a VM another run has claimed; after the `deadline` no VM starts (those
    in flight finish)."""
    if plan.errors:
        raise PlanError(list(plan.errors))
    start, trips = time.monotonic(), session.round_trips
    result = ApplyResult()
    changes = plan.changes
    pending_hosts = {c.host for c in plan.host_changes}
    result.hosts_not_ready = sorted(pending_hosts)
    claims = VmClaims(session, run_id or new_run_id(), wait_s=lock_timeout_s)
    collect_dead(session, touched_vms(changes, observed), [vm.moid for vm in observed.vms.values()])
    with TaskWatcher(session) as watcher:
        ctx = _Ctx(session, observed, watcher, progress, cancel, shutdown_timeout_s, poll_s,
                   PowerOnTurns(changes, observed), claims, customization_timeout_s=customization_timeout_s,
                   deadline=deadline)
        try:
            result.vms = _run_queue(ctx, changes, pending_hosts, parallel)
        finally:
            claims.release_all()
    result.interrupted = cancelled(cancel)
    result.round_trips = session.round_trips - trips
    result.elapsed_s = time.monotonic() - start
    return result


# ------------------------------------------------------------------------------------------------ per VM


def _run_queue(ctx: _Ctx, changes: list[VmChange], pending_hosts: set[str], parallel: int) -> list[VmOutcome]:
    """Each VM's steps by one of `parallel` workers, VMs in `queue_order`; outcomes in plan order. Daemon threads:
    after a second Ctrl-C the process exits without waiting for them."""
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in queue_order(changes):
        todo.put(i)
    outcomes: list[VmOutcome | None] = [None] * len(changes)

    def work() -> None:
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            outcomes[i] = _run_vm(ctx, changes[i], pending_hosts)

    workers = [
        threading.Thread(target=work, name=f"vgpuctl-apply-{n}", daemon=True)
        for n in range(max(1, min(parallel, len(changes))))
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return [o if o is not None else VmOutcome(changes[i].vm, Outcome.NOT_STARTED) for i, o in enumerate(outcomes)]


class _Stopped(Exception):
    """The apply was interrupted before the VM's next forward step."""


def _run_vm(ctx: _Ctx, change: VmChange, pending_hosts: set[str]) -> VmOutcome:
    try:
        return _run_vm_steps(ctx, change, pending_hosts)
    finally:
        if ctx.turns is not None:
            ctx.turns.done(change.vm)  # the VMs ranked after it on its host may power on now


def _run_vm_steps(ctx: _Ctx, change: VmChange, pending_hosts: set[str]) -> VmOutcome:
    outcome = VmOutcome(vm=change.vm)
    if cancelled(ctx.cancel):
        outcome.left = change.planned_steps()
        return _skip(ctx, outcome, "interrupted before this VM started", Outcome.NOT_STARTED)
    waiting = sorted(set(change.depends_on_hosts) & pending_hosts)
    if waiting:
        return _skip(ctx, outcome, "needs the host changes on " + ", ".join(waiting) + " first; they were not made")
    if ctx.halted:
        outcome.left = change.planned_steps()
        return _skip(ctx, outcome, f"not started: {ctx.halted}", Outcome.NOT_STARTED)
    if ctx.deadline is not None and ctx.deadline.passed(time.time()):
        outcome.left, outcome.stopped_by = change.planned_steps(), StopReason.DEADLINE
        return _skip(ctx, outcome, f"not started: the deadline {ctx.deadline.text} passed", Outcome.NOT_STARTED)
    try:
        _apply_vm(ctx, change, outcome)
    except _Stopped:
        _interrupted(ctx, change, outcome)
    except BookkeepingError as err:  # the same for every VM: the others do not start
        ctx.halted = str(err)
        _fail(ctx, outcome, type(err).__name__, str(err))
    except VsphereFault as err:
        _fail(ctx, outcome, err.fault_type, err.fault_message)
    except DriftError as err:  # ChangedMeanwhile too, by its own name
        _fail(ctx, outcome, type(err).__name__, str(err))
    except VgpuctlError as err:
        _fail(ctx, outcome, type(err).__name__, str(err))
    except Exception as err:  # a pyVmomi fault raised by a call (not a task)
        log.debug("%s failed", change.vm, exc_info=True)
        _fail(ctx, outcome, fault_type(err), fault_message(err))
    else:
        outcome.status = Outcome.CHANGED if outcome.steps else Outcome.UNCHANGED
        _step(ctx, change.vm, "done", 100)
    finally:
        _release(ctx, change)
    return outcome


_STOPPED = {VmStep.SHUTDOWN, VmStep.POWER_OFF}  # steps after which this run has the VM powered off


def _interrupted(ctx: _Ctx, change: VmChange, outcome: VmOutcome) -> None:
    done = {VmStep.SHUTDOWN: VmStep.POWER_OFF}
    finished = {done.get(s, s) for s in outcome.steps}
    outcome.left = [s for s in change.planned_steps() if s not in finished]
    outcome.status = Outcome.CHANGED if outcome.steps else Outcome.NOT_STARTED
    outcome.message = "interrupted before: " + ", ".join(outcome.left) if outcome.left else "interrupted"
    _step(ctx, change.vm, "interrupted", None)


def _forward(ctx: _Ctx, step: VmStep) -> None:
    """A step boundary: after Ctrl-C no VM begins its next forward step."""
    if cancelled(ctx.cancel):
        raise _Stopped(step)


def _skip(ctx: _Ctx, outcome: VmOutcome, message: str, status: Outcome = Outcome.SKIPPED) -> VmOutcome:
    outcome.status = status
    outcome.message = message
    _step(ctx, outcome.vm, "not-started" if status == Outcome.NOT_STARTED else "skipped", None)
    return outcome


def _fail(ctx: _Ctx, outcome: VmOutcome, fault_type: str, message: str) -> None:
    outcome.status = Outcome.FAILED
    outcome.fault_type = fault_type
    outcome.message = message + (f"; {outcome.message}" if outcome.message else "")  # + what was restored
    _step(ctx, outcome.vm, "failed", None)


def _step(ctx: _Ctx, vm: str, step: str, percent: int | None) -> None:
    if ctx.progress is not None:
        try:
            ctx.progress.vm_step(vm, step, percent)
        except Exception:  # a display problem must not fail the apply
            log.debug("progress callback failed", exc_info=True)


def _apply_vm(ctx: _Ctx, change: VmChange, outcome: VmOutcome) -> None:
    observed_vm = ctx.observed.vm_for(change)
    _step(ctx, change.vm, "check", None)
    if change.clone is not None and observed_vm is None:
        _forward(ctx, VmStep.CLONE)
        folder_moid = _clone_folder(ctx, change)
        _claim_clone(ctx, change, folder_moid)  # kept until the clone's last step, like an existing VM's claim
        vm = _clone(ctx, change, outcome, folder_moid)
        state = _read_vm(ctx, vm, change.vm)
        refused = "not reconfigured" if change.needs_reconfigure else "not powered on" if change.power_on else (
            "left as it is")
        _changed_meanwhile(ctx, change, clone_unmet(change.clone, state), refused)
    else:
        if observed_vm is None:
            raise NotFound(f"VM {change.vm} was not observed and the plan does not clone it")
        vm = vmops.vm_ref(ctx.session, observed_vm.moid)
        _claim(ctx, change, vm, observed_vm)
        state = _read_vm(ctx, vm, change.vm)
        _check_drift(ctx, change, observed_vm, state)
    if change.destroy:
        _destroy(ctx, change, vm, state, outcome)
        return

    if change.power_off and state.power != PowerState.OFF:
        _forward(ctx, VmStep.POWER_OFF)
        _power_off(ctx, change.vm, vm, state, outcome)

    try:
        seen = _reconfigure(ctx, change, vm, state, outcome)
    except _Stopped:
        _restore_power(ctx, change.vm, vm, outcome)  # it ran before this apply powered it off
        raise
    except ChangedMeanwhile:  # the reconfigure landed and something else changed the VM after it: left as it is
        raise
    except Exception:
        _restore_after_failure(ctx, change.vm, vm, state, outcome)
        raise
    if change.power_on and (state.power != PowerState.ON or _STOPPED & set(outcome.steps)):
        _power_on(ctx, change, vm, state, outcome, seen)


def _power_on(ctx: _Ctx, change: VmChange, vm: Any, state: VmState, outcome: VmOutcome, seen: str) -> None:
    """The VM's power-on, in its turn on its host, only while its configuration is the one this run last saw
    (`seen`); one that finds no room removes the clone this run made (the same condition), or gives a VM this
    run stopped its previous vGPUs back."""
    stopped = _STOPPED & set(outcome.steps)
    if ctx.turns is not None:
        ctx.turns.wait(change.vm)
    if not stopped:
        _forward(ctx, VmStep.POWER_ON)  # a first power-on; powering on what this run stopped is restoring
    _unchanged_since(ctx, change, vm, seen, "powered on")
    customized = VmStep.CLONE in outcome.steps and change.identity is not None and not change.cloud_init
    since = vmops.server_time(ctx.session) if customized else None
    try:
        _task(ctx, change.vm, VmStep.POWER_ON, lambda: vmops.power_on(ctx.session, vm))
    except VsphereFault as err:
        if err.lacks_resources and VmStep.CLONE in outcome.steps:
            _discard_clone(ctx, change, vm, outcome, seen, err)
        elif err.lacks_resources and stopped and VmStep.RECONFIGURE in outcome.steps:
            _revert_vgpus(ctx, change.vm, vm, state, outcome)
        raise
    outcome.steps.append(VmStep.POWER_ON)
    if customized:
        _await_customization(ctx, change.vm, vm, since, outcome)


def _changed_meanwhile(ctx: _Ctx, change: VmChange, unmet: list[str], refused: str) -> None:
    """ChangedMeanwhile naming `unmet`, what the VM read right after this run's last step on it shows otherwise
    than that step left it (drift.py); `refused` says which step is not taken."""
    if unmet:
        raise ChangedMeanwhile(
            f"{change.vm} was changed by something else since this run's last step on it ({'; '.join(unmet)}); "
            f"{refused}, plan again" + _changed_by(ctx, change)
        )


def _unchanged_since(ctx: _Ctx, change: VmChange, vm: Any, seen: str, step: str) -> None:
    """ChangedMeanwhile unless the VM's changeVersion is still `seen`, the one this run read after its last step on
    it. A power-on or a destroy is conditional this way because that is the closest vSphere allows: only a
    reconfigure carries a changeVersion (VirtualMachineConfigSpec.changeVersion, refused with ConcurrentAccess);
    PowerOnVM_Task and Destroy_Task take none, so the version is read right before the call and compared. The
    VM's claim keeps other vgpuctl runs off it meanwhile; what else changes it in the one round trip between the
    read and the call is not seen."""
    now = _read_vm(ctx, vm, change.vm).change_version
    if seen and now != seen:
        raise ChangedMeanwhile(
            f"{change.vm} was changed by something else since this run's last step on it (vCenter's changeVersion "
            f"moved); not {step}, plan again" + _changed_by(ctx, change)
        )


def _await_customization(ctx: _Ctx, name: str, vm: Any, since: Any, outcome: VmOutcome) -> None:
    """The clone's guest customization runs at its first boot: wait for vCenter's event saying how it went. A
    failure fails the VM with the event's text; no word within the timeout fails it too (nothing says the
    guest has its identity)."""
    _step(ctx, name, VmStep.CUSTOMIZE, None)
    deadline = time.monotonic() + ctx.customization_timeout_s
    while True:
        result = customization_result(ctx.session, vm, since)
        if result is not None:
            break
        if time.monotonic() >= deadline or cancelled(ctx.cancel):
            raise CustomizationError(f"guest customization did not report within {ctx.customization_timeout_s:.0f}s "
                                     "(VMware Tools in the template? guest customization enabled?)")
        time.sleep(ctx.poll_s)
    if not result.succeeded:
        raise CustomizationError(f"guest customization failed: {result.message}")
    outcome.steps.append(VmStep.CUSTOMIZE)


def _destroy(ctx: _Ctx, change: VmChange, vm: Any, state: VmState, outcome: VmOutcome) -> None:
    """`state: absent`: power the VM off (a guest shutdown first when its Tools run) and destroy it, only while its
    configuration is the one this run saw last. The claim's description is released before the destroy (nothing
    writes to the VM after it); its lock folder goes once the VM has (_release)."""
    name = change.vm
    if state.template:
        raise DriftError(f"{name}: it became a template since the plan; not removed")
    seen = state.change_version
    if state.power != PowerState.OFF:
        _forward(ctx, VmStep.POWER_OFF)
        _power_off(ctx, name, vm, state, outcome)
        after = _read_vm(ctx, vm, name)  # no source says a power-off keeps the version (_basis)
        _changed_meanwhile(ctx, change, unmet_since(state, after), "not removed")
        seen = after.change_version
    _forward(ctx, VmStep.DESTROY)
    _unchanged_since(ctx, change, vm, seen, "removed")
    if ctx.claims is not None:
        ctx.claims.release_description(str(vm._moId))
    _task(ctx, name, VmStep.DESTROY, lambda: vmops.destroy(ctx.session, vm))
    outcome.steps.append(VmStep.DESTROY)


def _reconfigure(ctx: _Ctx, change: VmChange, vm: Any, state: VmState, outcome: VmOutcome) -> str:
    """The VM's one ReconfigVM_Task, conditional on its changeVersion; returns the changeVersion this run saw last
    (read after the reconfigure; the one read before when there is none). ChangedMeanwhile when that read shows
    other settings or vGPUs than the reconfigure set (unmet_since): the version it gives is not this run's."""

    if not change.needs_reconfigure:
        return _basis(ctx, change, vm, state, outcome).change_version
    devices = {int(d.key): d for d in state.devices}
    group_names = _group_names(ctx, change, state.host)
    _forward(ctx, VmStep.RECONFIGURE)
    basis = _basis(ctx, change, vm, state, outcome)
    spec = config_spec(change, devices, group_names, basis.change_version)
    assert spec is not None  # needs_reconfigure: config_spec makes one
    if change.nics:
        host = next((h for h in ctx.observed.hosts.values() if h.moid == state.host), None)
        spec.deviceChange = list(spec.deviceChange or []) + _nic_specs(ctx, change.nics, devices, host)
    if change.cloud_init and change.identity is not None:
        from vgpuctl.vms.identity import guestinfo

        keys = guestinfo(change.identity, ethernet_macs(state.devices))
        spec.extraConfig = list(spec.extraConfig or []) + extra_config(keys)
    try:
        _task(ctx, change.vm, VmStep.RECONFIGURE, lambda: vmops.reconfigure(ctx.session, vm, spec))
    except VsphereFault as err:
        if err.fault_type != CONCURRENT_ACCESS:
            raise
        raise DriftError(
            f"{change.vm} was changed by something else while this run worked on it (vCenter refused the "
            f"reconfigure: {err.fault_message}); not reconfigured, plan again" + _changed_by(ctx, change)
        ) from err
    outcome.steps.append(VmStep.RECONFIGURE)
    after = _read_vm(ctx, vm, change.vm)
    follows = change.power_on and (state.power != PowerState.ON or bool(_STOPPED & set(outcome.steps)))
    refused = "not powered on" if follows else "left as it is"
    _changed_meanwhile(ctx, change, unmet_since(basis, after, change), refused)
    return after.change_version


CONCURRENT_ACCESS = "vim.fault.ConcurrentAccess"  # vCenter's fault for a ConfigSpec whose changeVersion moved on


def _basis(ctx: _Ctx, change: VmChange, vm: Any, state: VmState, outcome: VmOutcome) -> VmState:
    """The VM as the reconfigure is conditional on it (its changeVersion): as read before any step (equal to the
    plan's: check_drift), or, for a VM this run just stopped, as read now, its vGPUs checked again (a power-off is
    no configuration change in the API, but vCenter may write the VM's files while it happens)."""
    if not _STOPPED & set(outcome.steps):
        return state
    now = _read_vm(ctx, vm, change.vm)
    if vgpu_keys(now.vgpus) != vgpu_keys(state.vgpus):
        now_vgpus, then_vgpus = fmt_devices(vgpu_keys(now.vgpus)), fmt_devices(vgpu_keys(state.vgpus))
        raise DriftError(
            f"{change.vm} changed while it was powered off: vGPUs are {now_vgpus}, the plan saw {then_vgpus}; not "
            "reconfigured, plan again" + _changed_by(ctx, change)
        )
    return now


def _claim(ctx: _Ctx, change: VmChange, vm: Any, observed_vm: ObservedVm) -> None:
    """Claim a VM the change will power off, reconfigure, power on or destroy (ClaimHeld names the run that has it;
    a VM deleted since the plan is drift)."""
    if ctx.claims is None or not (change.power_off or change.needs_reconfigure or change.power_on or change.destroy):
        return
    try:
        ctx.claims.claim(change.vm, observed_vm.moid, _waiting(ctx, change))
    except ClaimHeld:
        raise
    except Exception:
        _read_vm(ctx, vm, change.vm)  # DriftError when the VM is gone
        raise


def _claim_clone(ctx: _Ctx, change: VmChange, folder_moid: str) -> None:
    """Claim the VM this run is about to clone, by its name in its folder (ClaimHeld names the run that has it)."""
    if ctx.claims is not None:
        ctx.claims.claim_clone(change.vm, folder_moid, _waiting(ctx, change))


def _waiting(ctx: _Ctx, change: VmChange) -> Callable[[LeaseHeld, float], None]:
    """--lock-timeout: one progress line per run that has the VM while this one waits for it."""
    told: list[str] = []

    def waiting(held: LeaseHeld, left_s: float) -> None:
        who = held.holder.describe() if held.holder is not None else "another run"
        if who not in told:
            told.append(who)
            _step(ctx, change.vm, f"waiting for {who}, up to {left_s:.0f} s more", None)

    return waiting


def _release(ctx: _Ctx, change: VmChange) -> None:
    """The VM's claims go when its last step is done, whatever way it ended (a claim that cannot be removed is
    taken over, or collected, by the next run once its time to live has passed)."""
    if ctx.claims is None:
        return
    observed_vm = ctx.observed.vm_for(change)
    try:
        if observed_vm is not None:
            ctx.claims.release(observed_vm.moid)
        ctx.claims.release_clone(change.vm)
    except Exception:
        log.debug("%s: releasing the claim failed", change.vm, exc_info=True)


def _check_drift(ctx: _Ctx, change: VmChange, observed_vm: ObservedVm, state: VmState) -> None:
    try:
        check_drift(change, observed_vm, state)
    except DriftError as err:
        raise DriftError(str(err) + _changed_by(ctx, change)) from None


def _changed_by(ctx: _Ctx, change: VmChange) -> str:
    """` (the last vgpuctl run on it: run X by WHO until TIME)`, or "" when no run left its claim behind."""
    observed_vm = ctx.observed.vm_for(change)
    last = ctx.claims.last_run(observed_vm.moid) if ctx.claims is not None and observed_vm is not None else ""
    return f" (the last vgpuctl run on it: {last})" if last else ""


def _restore_power(ctx: _Ctx, name: str, vm: Any, outcome: VmOutcome) -> None:
    if _STOPPED & set(outcome.steps):
        _task(ctx, name, "power-on (restore)", lambda: vmops.power_on(ctx.session, vm))
        outcome.steps.append(VmStep.POWER_ON)


def _restore_after_failure(ctx: _Ctx, name: str, vm: Any, before: VmState, outcome: VmOutcome) -> None:
    """The VM's reconfigure failed after this run powered it off: power it on again as it was (vSphere applies a
    failed ReconfigVM_Task's spec not at all); the outcome's message says so. Never raises."""

    if not _STOPPED & set(outcome.steps):
        return
    try:
        vgpus_now = vgpu_keys(_read_vm(ctx, vm, name).vgpus)
        _task(ctx, name, "power-on (restore)", lambda: vmops.power_on(ctx.session, vm))
    except Exception as err:  # the reconfigure's failure stays the VM's outcome; this only adds to it
        log.debug("%s: power-on after the failed reconfigure failed", name, exc_info=True)
        text = err.fault_message if isinstance(err, VsphereFault) else fault_message(err)
        outcome.message = f"left powered off: powering it on again failed: {text}"
        return
    outcome.steps.append(VmStep.POWER_ON)
    previous = vgpus_now == vgpu_keys(before.vgpus)
    config = "its previous configuration" if previous else "the vGPUs it has now: " + fmt_devices(vgpus_now)
    outcome.message = f"powered on again with {config}"


def _revert_vgpus(ctx: _Ctx, name: str, vm: Any, before: VmState, outcome: VmOutcome) -> None:
    """A VM this run stopped and reconfigured cannot power on with its new vGPUs (their capacity was taken
    meanwhile): give it back the vGPUs it ran with and power it on; the outcome's message says how it ended.
    Never raises."""
    try:
        now = _read_vm(ctx, vm, name)
        spec = revert_spec(before.devices, now.devices, now.change_version)
        if spec.deviceChange:
            _task(ctx, name, VmStep.REVERT, lambda: vmops.reconfigure(ctx.session, vm, spec))
            outcome.steps.append(VmStep.REVERT)
        _task(ctx, name, "power-on (restore)", lambda: vmops.power_on(ctx.session, vm))
    except Exception as err:  # the power-on's failure stays the VM's outcome
        log.debug("%s: restoring the previous vGPUs failed", name, exc_info=True)
        text = err.fault_message if isinstance(err, VsphereFault) else fault_message(err)
        outcome.message = f"left powered off: giving it back its previous vGPUs failed: {text}"
        return
    outcome.steps.append(VmStep.POWER_ON)
    outcome.message = "powered on again with its previous vGPUs"


def _discard_clone(ctx: _Ctx, change: VmChange, vm: Any, outcome: VmOutcome, seen: str, err: VsphereFault) -> None:
    """This run's clone cannot power on where the plan put it (another run took the capacity meanwhile): remove
    it, so the next plan places it again instead of finding it stranded on a full host; but only while it is
    as this run left it (`seen`): a clone something else changed since stays, and that is the VM's outcome
    (ChangedMeanwhile). Otherwise never raises: the power-on's failure stays the outcome."""
    name = change.vm
    try:
        _unchanged_since(ctx, change, vm, seen, "removed")
    except ChangedMeanwhile as changed:
        outcome.message = "the clone stays, powered off"
        raise ChangedMeanwhile(f"{changed} (its power-on found no room: {err.fault_message})") from err
    except Exception:
        log.debug("%s: reading the clone before removing it failed", name, exc_info=True)
        outcome.message = "the clone stays, powered off, on the host that had no room for it"
        return
    try:
        _task(ctx, name, VmStep.REMOVE_CLONE, lambda: vmops.destroy(ctx.session, vm))
    except Exception:  # the power-on's failure stays the VM's outcome
        log.debug("%s: removing the clone failed", name, exc_info=True)
        outcome.message = "the clone stays, powered off, on the host that had no room for it"
        return
    outcome.steps.append(VmStep.REMOVE_CLONE)
    outcome.message = "the clone this run made was removed: the next apply places it again"


def _nic_specs(ctx: _Ctx, changes: list[NicChange], devices: dict[int, Any], host: ObservedHost | None) -> list[Any]:
    """Device specs of the VM's adapter changes; SR-IOV and DirectPath adds ask the host for its PCI passthrough
    system ids first (one QueryConfigTarget)."""
    ids = vmnet.system_ids(ctx.session, host) if host is not None and vmnet.needs_system_ids(changes) else None
    target = vmnet.NicTarget(ctx.observed.networks, host, ids)
    return vmnet.nic_specs(changes, devices, target, ctx.session.stub)


def _group_names(ctx: _Ctx, change: VmChange, host_moid: str) -> dict[int, str] | None:
    """NVLink vendor device group names for the change's grouped adds: those observe read for the host, else
    the host's QueryConfigTarget."""
    wanted: dict[int, list[str]] = {}
    for d in change.devices:
        if d.op == Op.ADD and d.group is not None:
            wanted.setdefault(d.group, []).append(d.profile)
    if not wanted:
        return None
    host = next((h for h in ctx.observed.hosts.values() if h.moid == host_moid), None)
    if host is None or not host.environment_browser_moid:
        raise NotFound(f"{change.vm}: cannot find the host to look up its NVLink device groups")
    offered = host.device_groups if host.device_groups is not None else vmops.device_groups(ctx.session, host)
    names: dict[int, str] = {}
    for group, profiles in wanted.items():
        name = matching_group(offered, profiles)
        if name is None:
            raise VgpuctlError(
                f"{change.vm}: host {host.name} offers no NVLink device group of {len(profiles)} x "
                f"{profiles[0]} (NVLink down, or GPUs in MIG mode?)"
            )
        names[group] = name
    return names


def matching_group(offered: list[ObservedDeviceGroup], profiles: list[str]) -> str | None:
    """The name of an offered device group whose members are exactly these profiles."""
    for group in offered:
        if sorted(group.profiles) == sorted(profiles):
            return group.name
    return None


def _read_vm(ctx: _Ctx, vm: Any, name: str) -> VmState:
    return vmops.read_vm(ctx.session, vm, name)


def _clone_folder(ctx: _Ctx, change: VmChange) -> str:
    """The moid of the folder the plan clones the VM into (the datacenter's VM folder when it names none)."""
    clone = change.clone
    assert clone is not None
    if not clone.folder:
        return ctx.observed.moids.get("vm_folder", "")
    folder_moid = ctx.observed.folder_moids.get(clone.folder.strip("/"))
    if folder_moid is None:
        raise NotFound(f"{change.vm}: VM folder {clone.folder!r} not found")
    return folder_moid


def _clone(ctx: _Ctx, change: VmChange, outcome: VmOutcome, folder_moid: str) -> Any:
    clone = change.clone
    assert clone is not None
    obs = ctx.observed
    template = obs.vms.get(clone.template)
    if template is None:
        raise NotFound(f"{change.vm}: template {clone.template!r} not found")
    host_moid = None
    if clone.host:
        host = obs.hosts.get(clone.host)
        if host is None:
            raise NotFound(f"{change.vm}: host {clone.host!r} not found")
        host_moid, pool_moid = host.moid, host.resource_pool_moid
    elif clone.cluster:
        pool_moid = obs.cluster_pool_moids.get(clone.cluster, "")
        if not pool_moid:
            raise NotFound(f"{change.vm}: cluster {clone.cluster!r} not found")
    else:
        tmpl_host = obs.hosts.get(template.host or "")
        pool_moid = tmpl_host.resource_pool_moid if tmpl_host else ""
    host = obs.hosts.get(clone.host or "")
    devices = _nic_specs(ctx, clone.nics, {}, host) if clone.nics else None
    custom = None
    if clone.identity is not None and not change.cloud_init:
        custom = customization_spec(clone.identity)
    vm = _task(ctx, change.vm, VmStep.CLONE, lambda: vmops.clone(ctx.session, template.moid, folder_moid, change.vm,
                                                           clone, pool_moid=pool_moid, host_moid=host_moid,
                                                           device_changes=devices, customization=custom))
    outcome.steps.append(VmStep.CLONE)
    return vm


def _power_off(ctx: _Ctx, name: str, vm: Any, state: VmState, outcome: VmOutcome) -> None:
    if state.tools:
        _step(ctx, name, VmStep.SHUTDOWN, None)
        if vmops.shutdown_guest(ctx.session, vm):
            if _wait_off(ctx, vm, name):
                outcome.steps.append(VmStep.SHUTDOWN)
                return
            log.info("%s: guest did not shut down within %ss; powering off", name, ctx.shutdown_timeout_s)
        else:
            log.info("%s: graceful shutdown not possible; powering off", name)
    try:
        _task(ctx, name, VmStep.POWER_OFF, lambda: vmops.power_off(ctx.session, vm))
    except VsphereFault as err:
        if _read_vm(ctx, vm, name).power != PowerState.OFF:
            raise
        log.info("%s: already off (%s)", name, err.fault_type)
    outcome.steps.append(VmStep.POWER_OFF)


def _wait_off(ctx: _Ctx, vm: Any, name: str) -> bool:
    deadline = time.monotonic() + ctx.shutdown_timeout_s
    while True:
        if _read_vm(ctx, vm, name).power == PowerState.OFF:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(ctx.poll_s, max(0.0, deadline - time.monotonic())))


def _task(ctx: _Ctx, name: str, step: str, start: Callable[[], Any]) -> Any:
    """Start a vCenter task for the VM's step and wait for it (listed for a second Ctrl-C's line from the moment
    the request is sent: vgpuctl.vsphere.tasks.dispatch)."""
    _step(ctx, name, step, 0)

    def wait(task: Any) -> Any:
        return ctx.watcher.wait(task, lambda pct: _step(ctx, name, step, pct))

    result = dispatch(f"{step} {name}", start, wait)
    _step(ctx, name, step, 100)
    return result
