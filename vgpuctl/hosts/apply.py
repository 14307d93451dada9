"""Apply host changes host by host: maintenance mode, MIG / graphics / module options, reboot, verification.

`apply_host_changes(session, targets, state, options)` runs at most `maintenance.max_unavailable` hosts at
once. Per host: evacuate (`refuse` lists running VMs; `power-off` records them in the state file and shuts
them down), enter maintenance, change, reboot when needed, verify from the API and the shell, exit
maintenance, power the recorded VMs on. A failure stops that host where it is and its HostOutcome says in
what state; a re-run continues from the state file. After `cancel` a host begins no further forward step
(evacuate, enter maintenance, change, reboot) but finishes what it began: a reboot and its wait, then exit
maintenance and power on what it powered off; its outcome lists the steps left.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import (
    AssignmentPolicy,
    ChangeKind,
    ConnectionState,
    Evacuate,
    EvacuationKind,
    GraphicsType,
    Outcome,
    StopReason,
)
from vgpuctl.durations import Deadline
from vgpuctl.errors import SshError, SshHostKeyError, VgpuctlError
from vgpuctl.hosts import plan as hostplan
from vgpuctl.hosts.evacuation import evacuations, needs_maintenance, needs_reboot, refused_remedy, setting_changes
from vgpuctl.hosts.facts import esxi_timeout, open_shell, shell_runner
from vgpuctl.hosts.targets import HostTarget, host_waves
from vgpuctl.inventory import HostSpec
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import INTERRUPTED, HostApplyResult, HostChange, HostOutcome, ObservedGpu, ObservedHost
from vgpuctl.progress import Cancel, HostProgress, cancelled
from vgpuctl.records.work import POWER_ON, VM_CHANGE, Lease, WorkStore
from vgpuctl.settings import SETTINGS, apply_steps, step_of
from vgpuctl.settings.base import ApplyStep, HostWriter
from vgpuctl.settings.facts import MODULE_OPTIONS, NETWORK, HostFacts
from vgpuctl.settings.gather import gather_host_facts
from vgpuctl.vsphere import host as vhost
from vgpuctl.vsphere.tasks import TaskWatcher

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

log = logging.getLogger(__name__)

SSH_AFTER_REBOOT_S = 60.0
PAUSE_POLL_S = 0.5  # how often a pause between waves looks at Ctrl-C and the deadline


class RefusedError(VgpuctlError):
    """Maintenance mode would stop running VMs and `evacuate: refuse` is set."""


class RestoreError(VgpuctlError):
    """The host change is done but some VMs it powered off did not come back (each VM's reason is listed)."""


class _Stopped(Exception):
    """Ctrl-C: the host's next forward step is not begun."""

    def __init__(self, step: str):
        super().__init__(step)
        self.step = step


class VerificationError(VgpuctlError):
    """After apply (and reboot) the host does not show the desired state."""

    def __init__(self, host: str, problems: list[str]):
        self.problems = problems
        super().__init__(f"{host}: verification failed: " + "; ".join(problems))


# ------------------------------------------------------------------------------------------ apply


ShellOpener = Callable[[str, HostSpec], AbstractContextManager[Any]]


@dataclass
class HostApplyOptions:
    keep_going: bool = False
    trust_on_first_use: bool = False
    shutdown_timeout_s: float = 120.0
    poll_s: float = 0.5
    progress: HostProgress | None = None
    cancel: Cancel | None = None
    open_shell: ShellOpener | None = None  # default: vgpuctl.hosts.facts.open_shell with known_hosts checks
    lock_timeout_s: float = 0.0  # how long to wait for a host another run holds (--lock-timeout)
    evacuate_by_flag: bool = False  # --evacuate set the evacuation (the `host` commands): messages name the flag
    deadline: Deadline | None = None  # apply --deadline: no wave starts after it
    clock: Callable[[], float] = time.time  # the wall clock the deadline is read on
    window: frozenset[str] = frozenset()  # hosts of a driver upgrade window: one failing stops the rest


def apply_host_changes(
    session: Session, targets: Sequence[HostTarget], state: WorkStore, options: HostApplyOptions | None = None
) -> HostApplyResult:
    """Apply every target's changes in waves of `max_unavailable` hosts; a wave starts only before the deadline,
    after the pause the wave before asks for, and without the hosts whose failure limit the run reached (by
    default one failed host stops the rest unless options.keep_going; `maintenance.max_failures` sets it)."""
    opts = options or HostApplyOptions()
    result = HostApplyResult()
    if not targets:
        return result
    by_name = {t.name: t for t in targets}
    waves = [[by_name[name] for name in wave]
             for wave in host_waves([(t.name, t.spec.maintenance.max_unavailable) for t in targets])]
    with TaskWatcher(session) as watcher:
        for n, wave in enumerate(waves):
            start, held = held_back(wave, result, opts)
            if n and start and _pause(waves[n - 1], start, opts):
                start, held = held_back(wave, result, opts)
            result.hosts += held
            if not start:
                continue
            with ThreadPoolExecutor(max_workers=len(start), thread_name_prefix="vgpuctl-host") as pool:
                result.hosts += list(pool.map(lambda t: _HostRun(session, watcher, t, state, opts).run(), start))
    return result


def failure_limit(spec: HostSpec, keep_going: bool) -> int | None:
    """How many failed hosts keep this host from starting: its `maintenance.max_failures`, else 1 (none with
    --keep-going)."""
    limit = spec.maintenance.max_failures
    return limit if limit is not None else None if keep_going else 1


def held_back(
    wave: Sequence[HostTarget], so_far: HostApplyResult, opts: HostApplyOptions
) -> tuple[list[HostTarget], list[HostOutcome]]:
    """The hosts of a wave that start, and an outcome (not started, and why) for each one that does not: after
    Ctrl-C, once the deadline passed, after a failed host of a driver upgrade window, or once the run's failed
    hosts reached the host's failure limit."""
    if cancelled(opts.cancel):
        return [], [HostOutcome(t.name, Outcome.NOT_STARTED, message="interrupted") for t in wave]
    deadline = opts.deadline
    if deadline is not None and deadline.passed(opts.clock()):
        why = f"the deadline {deadline.text} passed before its wave"
        return [], [HostOutcome(t.name, Outcome.NOT_STARTED, message=why, stopped_by=StopReason.DEADLINE)
                    for t in wave]  # fmt: skip
    failed = so_far.failed
    if set(failed) & opts.window:  # no other host of the window leaves service, --keep-going or not
        why = f"{', '.join(failed)} failed: the driver upgrade window stops before another host leaves"
        return [], [HostOutcome(t.name, Outcome.NOT_STARTED, message=why) for t in wave]
    start, held = [], []
    for t in wave:
        limit = failure_limit(t.spec, opts.keep_going)
        if limit is None or len(failed) < limit:
            start.append(t)
        elif t.spec.maintenance.max_failures is None:
            held.append(HostOutcome(t.name, Outcome.NOT_STARTED,
                                    message=f"{', '.join(failed)} failed; --keep-going continues with the other hosts"))
        else:
            held.append(HostOutcome(t.name, Outcome.NOT_STARTED, stopped_by=StopReason.MAX_FAILURES,
                                    message=f"{len(failed)} host(s) failed ({', '.join(failed)}); its "
                                    f"maintenance.max_failures is {limit}"))  # fmt: skip
    return start, held


def _pause(before: Sequence[HostTarget], wave: Sequence[HostTarget], opts: HostApplyOptions) -> bool:
    """Wait the longest `maintenance.pause_between_waves` of the wave before (never past the deadline; Ctrl-C
    ends it), each host of the next wave showing the pause as its step. Whether it paused."""
    seconds = max(t.spec.maintenance.pause_between_waves for t in before)
    if seconds <= 0:
        return False
    for t in wave:
        _report(opts, t.name, "pause", f"{seconds:g} s after the wave before (maintenance.pause_between_waves)")
    end = time.monotonic() + seconds
    while not cancelled(opts.cancel) and (left := end - time.monotonic()) > 0:
        if opts.deadline is not None and opts.deadline.passed(opts.clock()):
            break
        time.sleep(min(PAUSE_POLL_S, left))
    return True


def _report(opts: HostApplyOptions, host: str, step: str, detail: str | None) -> None:
    if opts.progress is not None:
        try:
            opts.progress.host_step(host, step, detail)
        except Exception:  # a display problem must not fail the host
            log.debug("progress callback failed", exc_info=True)


class _HostRun:
    def __init__(self, session: Session, watcher: Any, target: HostTarget, state: WorkStore, opts: HostApplyOptions):
        self.session, self.watcher, self.t, self.state, self.opts = session, watcher, target, state, opts
        self.out = HostOutcome(target.name)
        self.phase = "check"
        self.claims: Any = None  # the VMs its evacuation stops or moves (vgpuctl.vsphere.claims.VmClaims)
        self.waited_for = ""  # the run this one last said it waits for (--lock-timeout)

    # -------------------------------------------------------------------- driver

    def run(self) -> HostOutcome:
        lease = None
        try:
            lease = self._lease()
            try:
                self._run()
                self.out.phase = "done"
                self.out.status = Outcome.CHANGED if self.out.steps else Outcome.UNCHANGED
            except _Stopped as stop:
                self._wind_down(stop.step)
        except Exception as err:  # one host's failure is a result, never a crash of the whole run
            if not isinstance(err, VgpuctlError):
                log.exception("%s: unexpected error in %s", self.t.name, self.phase)
            self.out.status = Outcome.FAILED
            self.out.phase = self.phase
            self.out.message = str(err)
            self.out.error_type = type(err).__name__
            if lease is not None:  # never write over another run's record
                self._record_failure()
        finally:
            if self.claims is not None:
                self.claims.release_all()
            if lease is not None:
                lease.release()
        self._step(self.out.status, self.out.message if self.out.status == Outcome.FAILED else None)
        return self.out

    def _lease(self) -> Lease:
        """This run's lease on the host; LeaseHeld when another live run holds it. The work record is written
        first thing, so a crash at any later point leaves it behind."""
        self.phase = "lease"
        lease = self.state.lease(self.t.name).acquire(self.opts.lock_timeout_s, self._waiting)
        self.phase = "start"
        self.state.update(self.t.name, phase=self.phase, steps=planned_steps(self.t.changes))
        return lease

    def _waiting(self, held: Exception, left_s: float) -> None:
        """--lock-timeout: one progress line per run that holds the host while this one waits for it."""
        holder = getattr(held, "holder", None)
        who = holder.describe() if holder is not None else "another run"
        if who != self.waited_for:
            self.waited_for = who
            self._step("waiting", f"for {who}, up to {left_s:.0f} s more")

    def _record_failure(self) -> None:
        """Keep what a rerun needs in the host's work record (or drop a record with nothing to resume); a record
        that cannot be written is a warning: the outcome already says what failed."""
        try:
            self._write_failure()
        except VgpuctlError as err:
            log.warning("%s: the work record could not be updated after the failure: %s", self.t.name, err)

    def _write_failure(self) -> None:
        try:
            self.out.in_maintenance = vhost.read_host(self.session, self.t.moid).in_maintenance
        except VgpuctlError as err:
            log.debug("%s: cannot read the host after the failure: %s", self.t.name, err)
        rec = self.state.get(self.t.name)
        if rec is not None and not rec.vms and not rec.entered_maintenance and not self.out.steps:
            self.state.drop(self.t.name)  # stopped before touching anything: nothing to resume
            return
        if rec is not None:
            self.out.vms_to_restore = [v["name"] for v in rec.vms if v.get("after", POWER_ON) == POWER_ON]
            self.state.update(self.t.name, phase=self.phase, message=self.out.message)

    def _enter(self, phase: str) -> None:
        """Start a phase; the work record says where the run is and the steps left from there (what a crash
        there leaves to finish)."""
        self.phase = phase
        rec = self.state.get(self.t.name)
        left = remaining_steps(rec.steps if rec is not None else [], phase)
        self.state.update(self.t.name, phase=phase, steps=left)

    def _step(self, step: str, detail: str | None = None) -> None:
        _report(self.opts, self.t.name, step, detail)

    def _done(self, step: str) -> None:
        self.out.steps.append(step)

    def _forward(self, step: str) -> None:
        """A step boundary: after Ctrl-C the host begins no further forward step."""
        if cancelled(self.opts.cancel):
            raise _Stopped(step)

    def _wind_down(self, step: str) -> None:
        """Ctrl-C stopped the host before `step`: take it out of the maintenance mode this work put it in, power
        on every VM it powered off (also those left to their own VM change, which will not run now), and keep
        a work record only when a change was already written (the steps left finish it)."""
        t = self.t
        rec = self.state.get(t.name)
        left = remaining_steps(rec.steps if rec is not None else planned_steps(t.changes), step_phase(step))
        left = [s for s in left if s not in ("exit-maintenance", "power-on")]
        writes = {step.name for step in apply_steps()}
        written = [s for s in self.out.steps if step_phase(s) in writes]
        entered = rec is not None and rec.entered_maintenance
        if entered:
            self._enter("exit-maintenance")
            if vhost.read_host(self.session, t.moid).in_maintenance:
                self._step("exit-maintenance")
                vhost.exit_maintenance(self.session, t.moid, self.watcher, t.name)
                self._done("exit-maintenance")
            self.state.update(t.name, entered_maintenance=False)
        self._restore(hand_back=True)
        if written:
            self.state.update(t.name, phase=INTERRUPTED, steps=left, vms=[])
        else:
            self.state.drop(t.name)
        self.out.phase = INTERRUPTED
        self.out.status = Outcome.CHANGED if self.out.steps else Outcome.NOT_STARTED
        done = ["change written, not yet in effect" if written else "nothing changed"]
        done += ["out of maintenance mode again"] if entered else []
        done += [f"powered on again: {', '.join(self.out.powered_on)}"] if self.out.powered_on else []
        self.out.message = f"interrupted before {step}; left: {', '.join(left) or 'nothing'}; " + "; ".join(done)

    # -------------------------------------------------------------------- the steps

    def _run(self) -> None:
        t = self.t
        work = setting_changes(t.changes)
        api = vhost.read_host(self.session, t.moid)
        if api.connection_state != ConnectionState.CONNECTED:
            raise VgpuctlError(f"{t.name}: host is {api.connection_state}")
        entered = False
        if needs_maintenance(work) and not api.in_maintenance:
            self._forward("evacuate")
            self._enter("evacuate")
            self._evacuate()
            self._forward("enter-maintenance")
            self._enter("enter-maintenance")
            self._step("enter-maintenance")
            self.state.update(t.name, entered_maintenance=True)
            vhost.enter_maintenance(self.session, t.moid, self.watcher, t.name)
            self._done("enter-maintenance")
            entered = True
        if self._apply(work):
            self._reboot()
        if work:
            self._enter("verify")
            self._step("verify")
            self._verify()
            self._done("verify")
        record = self.state.get(t.name)
        if entered or (record is not None and record.entered_maintenance):
            self._enter("exit-maintenance")
            if vhost.read_host(self.session, t.moid).in_maintenance:
                self._step("exit-maintenance")
                vhost.exit_maintenance(self.session, t.moid, self.watcher, t.name)
                self._done("exit-maintenance")
            self.state.update(t.name, entered_maintenance=False)
        self._restore(hand_back=cancelled(self.opts.cancel))  # after Ctrl-C no VM change takes them over
        self.state.drop(t.name)

    def _evacuate(self) -> None:
        """Empty the host as planned: VMs planned to migrate are moved first, then the others are powered off
        (those handed to their own VM change always, the rest with `evacuate: power-off` or as the plan's
        fallback). A running VM the plan did not foresee stops the host here, before anything changed, unless
        the policy is power-off. Power-offs are recorded first: a crash after one must still know what to bring
        back."""
        t = self.t
        running = [v for v in vhost.host_vms(self.session, t.moid) if v.running]
        if not running:
            return
        planned = evacuations(t.changes)
        unplanned = [v for v in running if v.name not in planned and t.spec.maintenance.evacuate != Evacuate.POWER_OFF]
        if unplanned:
            listed = ", ".join(f"{v.name} ({', '.join(v.vgpus)})" if v.vgpus else v.name for v in unplanned)
            self.out.in_maintenance = False
            raise RefusedError(
                f"{t.name}: maintenance mode needs these powered-on VMs stopped: {listed}; "
                + (
                    refused_remedy(self.opts.evacuate_by_flag)
                    if t.spec.maintenance.evacuate == Evacuate.REFUSE
                    else "they started after the plan: plan again"
                )
            )
        moves = {v.name: str(action.destination) for v in running
                 if (action := planned.get(v.name)) is not None and action.kind == EvacuationKind.MIGRATE}  # fmt: skip
        self._claim_vms(running)
        for vm in running:
            if vm.name in moves:
                self._step("migrate", f"{vm.name} -> {moves[vm.name]}")
                vhost.migrate_vm(self.session, vm, moves[vm.name], self.watcher)
                self.out.migrated.append(f"{vm.name} -> {moves[vm.name]}")
                self._done(f"migrate {vm.name} to {moves[vm.name]}")
        stop = [v for v in running if v.name not in moves]
        for vm in stop:
            action = planned.get(vm.name)
            handed = action is not None and action.kind in (EvacuationKind.HAND_OVER, EvacuationKind.STAYS_OFF)
            after = VM_CHANGE if handed else POWER_ON  # its own change (or its entry's power: off) takes it over
            self.state.add_vm(t.name, vm.name, vm.moid, after)
        for vm in stop:
            self._forward(f"power-off {vm.name}")
            self._step("power-off", vm.name)
            how = vhost.shutdown_vm(
                self.session, vm, timeout_s=self.opts.shutdown_timeout_s, poll_s=self.opts.poll_s, watcher=self.watcher
            )
            self.out.powered_off.append(vm.name)
            self._done(f"{how} {vm.name}")

    def _claim_vms(self, vms: Sequence[Any]) -> None:
        """Claim every VM the evacuation moves or stops, before the first of them (vgpuctl.vsphere.claims), held
        until the host's run ends: a VM another run is changing stops the host here, before anything changed."""
        from vgpuctl.vsphere.claims import ClaimHeld, VmClaims

        if self.claims is None:
            self.claims = VmClaims(self.session, getattr(self.state, "run_id", "") or "host-run",
                                   wait_s=self.opts.lock_timeout_s)  # fmt: skip
        for vm in vms:
            try:
                self.claims.claim(vm.name, vm.moid)
            except ClaimHeld as held:
                raise ClaimHeld(f"{self.t.name}: evacuating it needs {held}", held.holder) from None

    def _apply(self, work: list[HostChange]) -> bool:
        """Each setting's changes, step by step (MIG, graphics, module options); returns whether a reboot is
        needed (planned, or a write said it is pending until one)."""
        reboot = needs_reboot(work)
        for step in apply_steps():
            changes = [c for c in work if step_of(c.kind) == step]
            if changes:
                self._forward(step.name)
                self._enter(step.name)
                writer = self._write(step, changes)
                if writer.rebooted:  # the write rebooted the host after every write before it (vLCM)
                    reboot, self.out.rebooted = False, True
                reboot = writer.reboot_pending or reboot
        return reboot

    def _write(self, step: ApplyStep, changes: list[HostChange]) -> HostWriter:
        writer = HostWriter(self.session, self.t.name, self.t.moid, self._step, self._done, self._shell)
        for setting in SETTINGS:
            mine = [c for c in changes if c.kind in setting.kinds]
            if mine:
                setting.apply(step, mine, writer)
        if step.finish is not None:
            step.finish(writer, changes)
        return writer

    def _shell(self) -> AbstractContextManager[Any]:
        if self.opts.open_shell is not None:
            return self.opts.open_shell(self.t.name, self.t.spec)

        return open_shell(self.t.name, self.t.spec, trust_on_first_use=self.opts.trust_on_first_use,
                          timeout_s=esxi_timeout(self.session))  # fmt: skip

    def _reboot(self) -> None:
        t = self.t
        self._forward("reboot")
        self._enter("reboot")
        self._step("reboot")
        before = vhost.reboot(self.session, t.moid, self.watcher, t.name)
        self.out.rebooted = True
        self._done("reboot")
        self._enter("wait-reconnect")
        timeout = float(t.spec.maintenance.reboot_timeout_s)
        vhost.wait_reconnected(
            self.session,
            t.moid,
            before,
            timeout,
            poll_s=self.opts.poll_s,
            host=t.name,
            progress=lambda s, state: self._step("wait-reconnect", f"{s:.0f}s of {timeout:g}s, {state}"),
        )
        self._done("reconnected")

    def _verify(self) -> None:
        t = self.t
        api = vhost.read_host(self.session, t.moid)
        facts = self._facts_after_reboot() if self.out.rebooted else self._facts()
        problems = hostplan.verify_host(t.spec, observed_host(api, facts), facts)
        if problems:
            raise VerificationError(t.name, problems)

    def _facts(self) -> HostFacts:
        with self._shell() as shell:
            return gather_host_facts(self.session, self.t.moid, self.t.name, shell_runner(shell),
                                     self.t.spec)

    def _facts_after_reboot(self) -> HostFacts:
        """The SSH service of a host that just reconnected to vCenter may still be starting: retry connection
        failures (never host key errors) for up to SSH_AFTER_REBOOT_S."""
        deadline = time.monotonic() + SSH_AFTER_REBOOT_S
        while True:
            try:
                return self._facts()
            except SshHostKeyError:
                raise
            except SshError as err:
                if err.exit_status is not None or time.monotonic() >= deadline:
                    raise
                log.info("%s: SSH not ready after the reboot (%s); retrying", self.t.name, err)
                self._step("verify", "waiting for SSH")
                time.sleep(max(self.opts.poll_s, 0.5))

    def _restore(self, hand_back: bool = False) -> None:
        """Power on every VM this host's runs powered off that the host can run now (in the inventory or not,
        with or without vGPUs), going on past failures; VMs handed to their VM change are left to it, unless
        `hand_back` (an interrupted run, whose VM changes do not start)."""
        rec = self.state.get(self.t.name)
        if rec is None or not rec.vms:
            return
        self._enter("power-on")
        keep = []  # what a re-run still has to power on
        offered = set(vhost.read_host(self.session, self.t.moid).offered_profiles)
        profiles = {v.moid: v.vgpus for v in vhost.host_vms(self.session, self.t.moid)}
        for vm in list(rec.vms):
            name = vm["name"]
            if vm["moid"] not in profiles and not vhost.vm_exists(self.session, vm["moid"]):
                log.warning("host %s: VM %s (%s) of its work record no longer exists: dropped from the record",
                            self.t.name, name, vm["moid"])  # fmt: skip
                continue
            if vm.get("after", POWER_ON) != POWER_ON and not hand_back:
                self.out.handed_over.append(name)
                continue
            lost = sorted(set(profiles.get(vm["moid"], [])) - offered)
            if lost:
                self.out.not_restored[name] = f"left off: the host no longer offers {', '.join(lost)}"
                continue
            self._step("power-on", name)
            try:
                vhost.power_on_vm(self.session, vm["moid"], name, self.watcher)
            except VgpuctlError as err:
                self.out.not_restored[name] = f"power-on failed: {err}"
                keep.append(vm)
                continue
            self.out.powered_on.append(name)
            self._done(f"power-on {name}")
        if keep:
            self.state.update(self.t.name, vms=keep)
        else:
            self.state.drop(self.t.name)
        if self.out.not_restored:
            failed = "; ".join(f"{vm}: {why}" for vm, why in sorted(self.out.not_restored.items()))
            raise RestoreError(f"{self.t.name}: not every VM could be powered on again: {failed}")


def planned_steps(changes: Sequence[HostChange]) -> list[str]:
    """The host's steps in the order apply takes them (what a work record lists)."""
    work = setting_changes(changes)
    steps = [f"evacuate {c.target}" for c in changes if c.kind == ChangeKind.EVACUATE]
    if needs_maintenance(work):
        steps.append("enter-maintenance")
    steps += [f"{c.label} -> {c.new}" for c in work]
    if needs_reboot(work):
        steps += ["reboot", "wait-reconnect"]
    if work:
        steps.append("verify")
    steps += ["exit-maintenance", "power-on"]
    return steps


def step_phase(step: str) -> str:
    """The apply phase a planned step belongs to ("nvlink -> disabled" -> module-options): a setting's change
    is written in its apply step; every other step is its own phase."""
    word = step.split(" ", 1)[0]
    try:
        written = step_of(ChangeKind(word))
    except ValueError:  # not a change: a step of its own
        written = None
    return written.name if written is not None else word


def remaining_steps(steps: list[str], phase: str) -> list[str]:
    """The steps from the first one of `phase` on (all of them when none belongs to it)."""
    for i, step in enumerate(steps):
        if step_phase(step) == phase:
            return steps[i:]
    return steps


def observed_host(api: Any, facts: HostFacts | None = None) -> ObservedHost:
    """An ObservedHost from vgpuctl.vsphere.host.read_host (and the module options from facts)."""
    host = ObservedHost(
        name=api.name,
        moid=api.moid,
        connection_state=api.connection_state,
        in_maintenance=api.in_maintenance,
        default_graphics_type=api.default_graphics_type or GraphicsType.SHARED,
        assignment_policy=api.assignment_policy or AssignmentPolicy.PERFORMANCE,
        offered_profiles=list(api.offered_profiles),
        module_options=read.configured if (read := facts.get(MODULE_OPTIONS) if facts else None) else "",
    )
    host.gpus = [
        ObservedGpu(
            pci_id=g.pci_id,
            device_name=g.device_name,
            memory_kb=g.memory_kb,
            graphics_type=g.graphics_type,
            vgpu_mode=g.vgpu_mode,
        )
        for g in api.gpus
    ]
    network = facts.get(NETWORK) if facts is not None else None
    if network is not None:  # the NICs, as the bulk read has them
        host.nics = list(network.nics)
    return host


def pending_changes(changes: Sequence[HostChange], result: HostApplyResult) -> list[HostChange]:
    """The planned host changes of hosts that did not finish (failed or not started)."""
    done = result.done_hosts
    return [c for c in changes if c.host not in done]
