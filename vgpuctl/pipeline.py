"""The stages of every vgpuctl run, in the order they happen:

    load -> observe -> plan (host facts, host changes, VM changes, VM classes) -> saved-plan check
         -> show and confirm -> apply_hosts (rolling) -> observe again, the same way -> replan_vms
         -> apply_vms -> VM classes -> guest_addresses -> guests

`run` is the one function that chains them for every command that changes something (plan, apply,
provision, `vm vgpu`, experiments) and returns one typed `RunOutcome`. What a caller shows and asks comes in
as `RunHooks`; progress and cancellation as small interfaces (vgpuctl.progress); `run_interruptible` runs
the apply stages in a worker thread so Ctrl-C only asks them to stop. Read-only commands use `load`,
`observe` and `read_farm`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from vgpuctl import scope as scoping
from vgpuctl.domain import DEFAULT_PARALLEL, ConnectionState, Evacuate, Outcome
from vgpuctl.durations import Deadline
from vgpuctl.errors import PlanError, UsageError
from vgpuctl.farm.predict import predict_observed
from vgpuctl.farm.state import nvlink_hosts_for
from vgpuctl.gcpause import paused_gc
from vgpuctl.guest.stage import guest_addresses, guest_vms, guests, move_guest_drivers
from vgpuctl.hosts import plan as hostplan
from vgpuctl.hosts.apply import HostApplyOptions, apply_host_changes, pending_changes
from vgpuctl.hosts.evacuation import HOT_MIGRATE_OPTION
from vgpuctl.hosts.facts import adopt_nvlink_sets, adopt_vgpu_capabilities, gather_facts, unread_warnings
from vgpuctl.hosts.sshservice import (
    SshServiceRun,
    explain_shell_errors,
    only_ssh,
    plan_notes,
    ssh_service_for_run,
    start_for_run,
)
from vgpuctl.hosts.status import shell_configured
from vgpuctl.hosts.targets import targets_for
from vgpuctl.inventory import HostSpec, Inventory, load_inventory, validate
from vgpuctl.inventory.compose import Composition
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import (
    ApplyResult,
    GuestDriverOutcome,
    HostApplyResult,
    HostChange,
    HostOutcome,
    Observed,
    Plan,
    Problem,
    VmOutcome,
)
from vgpuctl.outcome import ApplyOutcome, Planned, RunOutcome
from vgpuctl.planner import independent_changes, make_plan, mark_dependencies
from vgpuctl.preflight import refuse_by_preflight
from vgpuctl.progress import Cancel, HostProgress, Progress, VmProgress, beside, cancelled
from vgpuctl.progress import run_interruptible as interruptible_in_thread
from vgpuctl.records.work import WORK_FIELD, WorkStore
from vgpuctl.runhooks import QuietHooks, RunHooks
from vgpuctl.runlocks import (
    check_lock_settings,
    held_text,
    leases_of,
    release_held_locks,
    still_held,
    unreadable_hosts,
    wait_for_hosts,
)
from vgpuctl.settings import host_properties
from vgpuctl.settings.facts import MODULE_OPTIONS, HostFacts
from vgpuctl.supervisor.stage import SupervisorRun, open_for_run
from vgpuctl.vsphere.observe import observe as bulk_observe
from vgpuctl.vsphere.observe import observe_nvlink
from vgpuctl.vsphere.workrecord import LEASE_FIELD, VcenterWorkStore, lease_problems, new_run_id

if TYPE_CHECKING:
    from vgpuctl.planfile import SavedPlan
    from vgpuctl.scope import Scope, ScopeResult
    from vgpuctl.supervisor.vmclasses import SupervisorPlan
    from vgpuctl.vsphere.session import ConnectionSettings, Session

log = logging.getLogger(__name__)
T = TypeVar("T")
EventSink = Callable[[dict[str, Any]], None]


@dataclass
class RunOptions:
    """How a run behaves; every field has the CLI's default."""

    datacenter: str | None = None
    parallel: int = DEFAULT_PARALLEL  # VMs changed at the same time
    keep_going: bool = False  # after a failed host, go on with the other hosts
    resume: bool = True  # hosts an unfinished apply left in the state file are planned again
    trust_on_first_use: bool = False  # accept and record unknown ESXi SSH host keys
    on_new_host_key: Callable[[str, str], None] | None = None  # (host, fingerprint) when one was recorded
    state: WorkStore | None = None  # default: work records in vCenter, on the hosts (vsphere/workrecord.py)
    run_id: str | None = None  # names this run in work records and leases (default: a new random id)
    poll_s: float = 0.5
    shutdown_timeout_s: float = 120.0
    lock_timeout_s: float = 0.0  # how long to wait for a host lease or VM claim another run holds (--lock-timeout)
    scope: Scope | None = None  # --host/--cluster/--vm: only those entries and what they need (vgpuctl.scope)
    # `ssh.service: manage`: the hosts whose SSH service this apply started (None: the run leaves SSH alone, as
    # the `host` commands do); `run` stops them again at its end (vgpuctl.hosts.sshservice)
    ssh_service: SshServiceRun | None = None
    evacuate_by_flag: bool = False  # the `host` commands: --evacuate sets the evacuation; messages name the flag
    deadline: Deadline | None = None  # apply --deadline: no host wave and no VM starts after it
    on_lock_wait: Callable[[str], None] | None = None  # --lock-timeout: a line per run the plan waits for
    lock_waited_s: float = 0.0  # how long the plan waited for hosts other runs hold (their problems say so)
    # a run that changes nothing (plan): no SSH service started, no work record or lease taken over; the shell of
    # a managed host whose SSH service is stopped is read by the apply that starts it
    read_only: bool = False


# ------------------------------------------------------------------------------------------ 1. load


def load(path: Path, composition: Composition | None = None) -> Inventory:
    """The inventory file, with what it includes and the overlay and values files of `composition` merged in
    (vgpuctl.inventory.compose), schema and semantic checks done; errors located FILE:LINE:COL."""
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    with paused_gc():  # the YAML events and positions of a large inventory: see vgpuctl.gcpause
        inventory = load_inventory(path, composition)
        validate(inventory)  # VM classes and namespaces included
    return inventory


# ------------------------------------------------------------------------------------------ 2. observe


def observe(
    session: Session, datacenter: str | None, inventory: Inventory | None = None, *, all_nvlink: bool = False
) -> Observed:
    """The one bulk read of the farm. NVLink sets are read on the hosts where the inventory's NVLink VMs can
    run, or on every GPU host with `all_nvlink` (status)."""
    observed = bulk_observe(session, datacenter, host_properties=host_properties())
    if all_nvlink:
        hosts = {h.name for h in observed.hosts.values() if h.gpus}
    else:
        hosts = nvlink_hosts_for(inventory, observed) if inventory is not None else set()
    if hosts:
        observe_nvlink(session, observed, hosts)
    return observed


def host_facts(
    session: Session, observed: Observed, specs: Mapping[str, HostSpec | None], options: RunOptions
) -> tuple[dict[str, HostFacts], list[Problem]]:
    """API facts of the named hosts that are connected (errors name the others), and shell facts when ESXi SSH
    is set up or an SSH agent runs (without them, MIG, NVLink and scheduler changes are plan errors); fills each
    ObservedHost.module_options with the configured nvidia option string and, on a host where vCenter reported
    no NVLink device groups, its NVLink sets from the shell."""
    errors = unreadable_hosts(session, observed, specs, options.lock_waited_s)
    hosts = {name: (observed.hosts[name].moid, spec) for name, spec in sorted(specs.items())
             if observed.hosts[name].connection_state == ConnectionState.CONNECTED}
    deferred = _ssh_services(session, observed, specs, options)
    shell = shell_configured(specs) or bool(os.environ.get("SSH_AUTH_SOCK"))  # an agent may hold the key
    facts = gather_facts(
        session,
        {h: v for h, v in hosts.items() if h not in deferred},
        shell=shell,
        trust_on_first_use=options.trust_on_first_use,
        on_new_host_key=options.on_new_host_key,
    )
    later = gather_facts(session, {h: v for h, v in hosts.items() if h in deferred}, shell=False)
    for f in later.values():
        f.shell_deferred = shell
    facts.update(later)
    for name, f in facts.items():
        read = f.get(MODULE_OPTIONS)
        observed.hosts[name].module_options = read.configured if read is not None else ""
        adopt_nvlink_sets(observed, f)  # NVLink sets from nvidia-smi topo where vCenter reported no device groups
        adopt_vgpu_capabilities(observed, f)  # whether the driver runs different time-sliced types on one GPU
    explain_shell_errors(session, observed, facts)
    observed.warnings += unread_warnings(facts.values())  # one line per cause, naming the hosts
    return facts, errors


def _ssh_services(
    session: Session, observed: Observed, specs: Mapping[str, HostSpec | None], options: RunOptions
) -> set[str]:
    """`ssh.service: manage` before the shell is read: an apply starts the stopped SSH services (under the hosts'
    leases); a plan starts none and returns the hosts whose shell it leaves to apply. Both say so alike."""

    deferred: set[str] = set()
    if options.ssh_service is not None:
        start_for_run(session, observed, specs, state_of(session, observed, options), options.ssh_service)
        notes = options.ssh_service.notes
        observed.warnings += notes
        notes.clear()
    elif options.read_only:
        deferred, notes = plan_notes(session, observed, specs, state_of(session, observed, options))
        observed.warnings += notes
    return deferred


# ------------------------------------------------------------------------------------------ 3. plan


def state_of(session: Session, observed: Observed, options: RunOptions) -> WorkStore:
    """Where this run keeps its host work records: the store given, else the hosts' records in vCenter (read with
    the bulk observe)."""
    if options.state is None:
        options.run_id = options.run_id or new_run_id()
        moids = {name: h.moid for name, h in observed.hosts.items()}
        values = {name: h.custom_values.get(WORK_FIELD, "") for name, h in observed.hosts.items()}
        options.state = VcenterWorkStore(session, moids, values, options.run_id)
    return options.state


def _resume(session: Session, observed: Observed, options: RunOptions) -> list[str]:
    if not options.resume:
        return []
    state = state_of(session, observed, options)
    return [h for h in state.hosts() if h in observed.hosts and not only_ssh(state, h)]


def record_problems(
    session: Session, observed: Observed, options: RunOptions, touched: Iterable[str]
) -> tuple[list[Problem], list[str]]:
    """Hosts whose `vgpuctl.work` value is no work record (one line each, with how to clear it): errors for the
    hosts this plan touches (what is left to finish there is unknown), warnings for the others, which this
    plan leaves alone."""
    problems = getattr(state_of(session, observed, options), "problems", {})
    mine = set(touched)
    errors = [Problem(line, host=host) for host, line in sorted(problems.items()) if host in mine]
    warnings = [line for host, line in sorted(problems.items()) if host not in mine]
    return errors, warnings


def _migrates(specs: dict[str, HostSpec]) -> bool:
    return any(s.maintenance.evacuate == Evacuate.MIGRATE for s in specs.values())


def vgpu_migration_enabled(session: Session) -> bool:
    """vCenter allows vMotion of running vGPU VMs (its advanced setting; one read)."""
    from vgpuctl.vsphere.vcenter import advanced_setting_true

    return advanced_setting_true(session, HOT_MIGRATE_OPTION)


def _lease_warnings(session: Session, observed: Observed, hosts: Sequence[str]) -> list[str]:
    """Hosts of the plan that another live run holds (one CurrentTime read, only when a host has a lease), and
    hosts whose lease value is no lease description."""
    values = {h: observed.hosts[h].custom_values.get(LEASE_FIELD, "") for h in hosts if h in observed.hosts}
    return lease_problems(values) + [
        f"host {h}: {held_text(info)}: apply will not touch it until that run ends"
        for h, info in sorted(leases_of(session, observed, hosts).items())
    ]


def plan(session: Session, observed: Observed, inventory: Inventory, options: RunOptions) -> Plan:
    """Host facts of the inventory's hosts, then the pure planner: host changes first, VM changes planned
    against the hosts as they will be, VMs on changing hosts waiting for them."""
    return _plan(session, observed, inventory, options)[0]


def _plan(
    session: Session, observed: Observed, inventory: Inventory, options: RunOptions
) -> tuple[Plan, dict[str, HostFacts]]:
    resolved, _ = hostplan.resolve_hosts(inventory.hosts, observed)  # make_plan reports resolve errors
    facts, errors = host_facts(session, observed, resolved, options) if resolved else ({}, [])
    migration = vgpu_migration_enabled(session) if _migrates(resolved) else False
    resume = _resume(session, observed, options)
    the_plan = make_plan(inventory, observed, host_facts=facts, resume=resume, vgpu_migration=migration)
    the_plan.refuse(errors)
    refuse_by_preflight(session, observed, inventory, the_plan)  # preflight's cheap part
    touched = set(resolved) | {c.host for c in the_plan.host_changes}
    broken, elsewhere = record_problems(session, observed, options, touched)
    the_plan.refuse(broken)
    the_plan.warnings += elsewhere
    the_plan.warnings += _lease_warnings(session, observed, sorted({c.host for c in the_plan.host_changes}))
    return the_plan, facts


@dataclass
class ScopedPlan:
    """The plan of a run's scope, the inventory the rest of the run applies (only the VMs in scope), what the
    scope selected, pulled in and left out (None without a scope), and the host facts the plan was made from."""

    plan: Plan
    inventory: Inventory
    scope: ScopeResult | None
    facts: dict[str, HostFacts]


def plan_in_scope(session: Session, observed: Observed, inventory: Inventory, options: RunOptions) -> ScopedPlan:
    """The plan of the run's scope (options.scope; the whole inventory without one)."""
    if options.scope is None:
        the_plan, facts = _plan(session, observed, inventory, options)
        return ScopedPlan(the_plan, inventory, None, facts)

    selection = scoping.select(options.scope, inventory, observed)
    resolved, _ = hostplan.resolve_hosts(inventory.hosts, observed)
    candidates = scoping.candidate_hosts(selection, inventory, observed)
    specs = {h: resolved[h] for h in sorted(candidates) if h in resolved}
    facts, _ = host_facts(session, observed, specs, options) if specs else ({}, [])
    migration = vgpu_migration_enabled(session) if _migrates(specs) else False
    resume = [h for h in _resume(session, observed, options) if h in candidates]

    def plan_for(hosts: set[str], vms: set[str]) -> Plan:
        return make_plan(scoping.restricted(inventory, resolved, hosts), observed, host_facts=facts,
                         resume=[h for h in resume if h in hosts], vgpu_migration=migration, only_vms=vms)

    the_plan, kept, vms, handed = scoping.settle(selection, candidates, plan_for)
    the_plan.refuse(unreadable_hosts(session, observed, [h for h in kept if h in specs], options.lock_waited_s))
    refuse_by_preflight(session, observed, scoping.restricted(inventory, resolved, kept), the_plan)
    broken, elsewhere = record_problems(session, observed, options, set(kept) | {c.host for c in the_plan.host_changes})
    the_plan.refuse(broken)
    the_plan.warnings += elsewhere
    the_plan.warnings += _lease_warnings(session, observed, sorted({c.host for c in the_plan.host_changes}))
    result = scoping.result(options.scope, selection, the_plan, kept, vms, handed, resolved, inventory)
    scoped = scoping.only_vms(scoping.restricted(inventory, resolved, kept), vms)
    return ScopedPlan(the_plan, scoped, result, facts)


def plan_when_free(
    session: Session, observed: Observed, inventory: Inventory, options: RunOptions
) -> tuple[ScopedPlan, Observed]:
    """plan_in_scope; with --lock-timeout, the hosts of the plan another run holds are waited for (a line per run),
    then the farm is read and planned again as it is then; a host still held is a problem of that plan."""
    scoped = plan_in_scope(session, observed, inventory, options)
    held = leases_of(session, observed, _touched(scoped.plan)) if options.lock_timeout_s > 0 else {}
    if not held:
        return scoped, observed
    moids = {h: observed.hosts[h].moid for h in held}
    wait_for_hosts(session, moids, held, options.lock_timeout_s, options.on_lock_wait or log.info)
    options.lock_waited_s = options.lock_timeout_s  # the hosts still held after it say so
    observed = observe(session, options.datacenter, inventory)
    scoped = plan_in_scope(session, observed, inventory, options)
    known = {p.host for p in scoped.plan.problems}
    scoped.plan.refuse(still_held(session, observed, [h for h in _touched(scoped.plan) if h not in known],
                                  options.lock_timeout_s))
    return scoped, observed


def _touched(the_plan: Plan) -> list[str]:
    """The hosts a plan changes or cannot read."""
    return sorted({c.host for c in the_plan.host_changes} | {p.host for p in the_plan.problems if p.host})


def plan_vm_classes(
    session: Session, observed: Observed, inventory: Inventory, the_plan: Plan
) -> SupervisorRun | None:
    """VM classes and supervisor namespaces over REST (vgpuctl.supervisor.stage), planned against the hosts as the
    plan leaves them: a SupervisorRun to close, or None when the inventory names none (no REST login)."""
    return open_for_run(session.settings, inventory, observed, the_plan.host_changes)


def plan_hosts(
    session: Session, observed: Observed, specs: Sequence[HostSpec], options: RunOptions
) -> hostplan.HostPlan:
    """Host changes only (the `host` commands): facts of the hosts the specs name, then hostplan."""
    resolved, errors = hostplan.resolve_hosts(specs, observed)
    if errors:
        return hostplan.HostPlan(errors=errors)
    facts, unread = host_facts(session, observed, resolved, options)
    migration = vgpu_migration_enabled(session) if _migrates(resolved) else False
    resume = _resume(session, observed, options)
    host_plan = hostplan.plan_hosts(specs, observed, facts, resume=resume, vgpu_migration=migration,
                                    evacuate_by_flag=options.evacuate_by_flag)
    broken, elsewhere = record_problems(session, observed, options, set(resolved) | set(host_plan.hosts))
    host_plan.errors = [str(p) for p in unread] + host_plan.errors + [str(p) for p in broken]
    host_plan.warnings += elsewhere
    host_plan.warnings = [*observed.warnings, *host_plan.warnings, *_lease_warnings(session, observed, host_plan.hosts)]
    return host_plan


# ------------------------------------------------------------------------------------------ 4. apply


def apply_hosts(
    session: Session,
    observed: Observed,
    specs: Sequence[HostSpec],
    changes: Sequence[HostChange],
    options: RunOptions,
    progress: HostProgress | None = None,
    cancel: Cancel | None = None,
    window: Iterable[str] = (),
) -> HostApplyResult:
    """Host changes host by host (maintenance, reboot, verify), `max_unavailable` at a time; a failing host of a
    driver upgrade `window` stops the hosts after it."""
    check_lock_settings()
    resolved, _ = hostplan.resolve_hosts(specs, observed)
    moids = {name: h.moid for name, h in observed.hosts.items()}
    host_options = HostApplyOptions(
        keep_going=options.keep_going,
        trust_on_first_use=options.trust_on_first_use,
        shutdown_timeout_s=options.shutdown_timeout_s,
        poll_s=options.poll_s,
        evacuate_by_flag=options.evacuate_by_flag,
        progress=progress,
        cancel=cancel,
        lock_timeout_s=options.lock_timeout_s,
        deadline=options.deadline,
        window=frozenset(window),
    )
    state = state_of(session, observed, options)
    _collect_dead_claims(session, observed, {c.host for c in changes})
    return apply_host_changes(session, targets_for(changes, resolved, moids), state, host_options)


def _collect_dead_claims(session: Session, observed: Observed, hosts: set[str]) -> None:
    """The claims dead runs left on the VMs of the hosts this run changes (and whose VMs are gone) go first."""
    from vgpuctl.vsphere.claims import collect_dead

    on_hosts = [vm.moid for vm in observed.vms.values() if vm.host in hosts and vm.moid]
    collect_dead(session, on_hosts, [vm.moid for vm in observed.vms.values() if vm.moid])


def replan_vms(inventory: Inventory, observed_after: Observed, pending: Sequence[HostChange]) -> Plan:
    """The VM part of the plan again, against the farm after the host changes. `pending` (changes of hosts that
    did not finish) stay in the plan; those hosts are predicted as changed and their VMs wait for them."""
    base = predict_observed(observed_after, pending) if pending else observed_after
    vm_plan = make_plan(inventory.model_copy(update={"hosts": []}), base)
    vm_plan.host_changes = list(pending)
    mark_dependencies(vm_plan.vm_changes, base, pending)
    return vm_plan


def apply_vms(
    session: Session,
    the_plan: Plan,
    observed: Observed,
    options: RunOptions,
    progress: VmProgress | None = None,
    cancel: Cancel | None = None,
) -> ApplyResult:
    """One clone and one reconfigure per VM, `options.parallel` at a time, each existing VM claimed for this run
    while it changes; VMs on pending hosts wait."""
    from vgpuctl.vms.apply import apply_plan

    options.run_id = options.run_id or new_run_id()
    return apply_plan(
        session,
        the_plan,
        observed,
        parallel=options.parallel,
        progress=progress,
        cancel=cancel,
        shutdown_timeout_s=options.shutdown_timeout_s,
        poll_s=options.poll_s,
        run_id=options.run_id,
        lock_timeout_s=options.lock_timeout_s,
        deadline=options.deadline,
    )


def apply(
    session: Session,
    inventory: Inventory,
    the_plan: Plan,
    observed: Observed,
    options: RunOptions,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> ApplyOutcome:
    """A driver upgrade window's guest drivers first; hosts, and beside them the VMs that wait for none of their
    changes (planner.independent_changes, `options.parallel` at a time); then observe again the same way, plan the
    other VMs again and apply them; then the window's guest drivers to their release."""
    window = the_plan.window
    moved = move_guest_drivers(session, inventory, window.before if window else [], progress, cancel)
    if _stopped(moved, cancel):  # no host leaves service
        return _window_stopped(the_plan, moved, cancelled(cancel))
    if not the_plan.host_changes:
        _vms_planned(progress, the_plan)
        vms = apply_vms(session, the_plan, observed, options, progress, cancel)
        moved += move_guest_drivers(session, inventory, window.after if window else [], progress, cancel)
        return ApplyOutcome(None, vms, the_plan, vms.interrupted, guest_drivers=moved)

    early = Plan(vm_changes=independent_changes(the_plan.changes, observed, the_plan.host_changes))
    hosts, early_vms = _hosts_beside_vms(session, observed, inventory, the_plan, early, options, progress, cancel)
    if window is not None and not set(window.hosts) - hosts.done_hosts:  # every host has its new manager
        moved += move_guest_drivers(session, inventory, window.after, progress, cancel)
    done = {c.vm for c in early.changes}
    after = observe(session, options.datacenter, inventory)
    rest = inventory.model_copy(update={"vms": [v for v in inventory.vms if v.name not in done]})
    vm_plan, failed = replan_vms_alone(rest, after, pending_changes(the_plan.host_changes, hosts))
    shown = Plan(early.vm_changes + vm_plan.vm_changes, vm_plan.host_changes, vm_plan.problems, vm_plan.warnings)
    if vm_plan.errors:  # the host results stand; errors that name no VM stop every VM
        left = _not_started(Plan(vm_changes=[c for c in the_plan.changes if c.vm not in done]), failed)
        left.vms = sorted(early_vms.vms + left.vms, key=lambda o: o.vm)
        return ApplyOutcome(hosts, left, shown, early_vms.interrupted, vm_errors=list(vm_plan.errors),
                            guest_drivers=moved)
    _vms_planned(progress, shown)
    vms = apply_vms(session, vm_plan, after, options, progress, cancel)
    vms.vms = sorted(early_vms.vms + vms.vms + _replan_failures(failed), key=lambda o: o.vm)
    vms.interrupted = vms.interrupted or early_vms.interrupted
    return ApplyOutcome(hosts, vms, shown, vms.interrupted, guest_drivers=moved)


def _hosts_beside_vms(
    session: Session, observed: Observed, inventory: Inventory, the_plan: Plan, early: Plan, options: RunOptions,
    progress: Progress | None, cancel: Cancel | None,
) -> tuple[HostApplyResult, ApplyResult]:
    """The host changes, and the VM changes of `early` in a thread beside them; both done when it returns (the VMs
    after the hosts never run beside these, so at most `options.parallel` VMs change at once)."""
    window = the_plan.window

    def hosts() -> HostApplyResult:
        return apply_hosts(session, observed, inventory.hosts, the_plan.host_changes, options, progress, cancel,
                           window.hosts if window else ())

    if not early.changes:
        return hosts(), ApplyResult()
    _vms_planned(progress, early)
    options.run_id = options.run_id or new_run_id()
    return beside(hosts, lambda: apply_vms(session, early, observed, options, progress, cancel), "vgpuctl-vms")


def _stopped(moved: Sequence[GuestDriverOutcome], cancel: Cancel | None) -> bool:
    return cancelled(cancel) or any(o.status == Outcome.FAILED for o in moved)


def _window_stopped(the_plan: Plan, moved: list[GuestDriverOutcome], interrupted: bool) -> ApplyOutcome:
    """The window stopped at its first guest drivers: no host began, no VM change began."""
    why = "interrupted" if interrupted else "a guest driver of the window could not be moved first"
    hosts = HostApplyResult([HostOutcome(h, Outcome.NOT_STARTED, message=why)
                             for h in sorted({c.host for c in the_plan.host_changes})])
    return ApplyOutcome(hosts, _not_started(the_plan, {}), the_plan, interrupted, guest_drivers=moved)


def _vms_planned(progress: Progress | None, vm_plan: Plan) -> None:
    if progress is not None:
        progress.vms_planned([c.vm for c in vm_plan.changes])


def replan_vms_alone(
    inventory: Inventory, observed_after: Observed, pending: Sequence[HostChange]
) -> tuple[Plan, dict[str, list[str]]]:
    """replan_vms, where a VM whose own re-plan fails is left out so the others go on: (plan of the others,
    VM name -> its errors). Problems that name no VM stay in the plan."""
    failed: dict[str, list[str]] = {}
    vm_plan = replan_vms(inventory, observed_after, pending)
    for _ in range(3):  # leaving VMs out only frees capacity; a second pass settles it
        by_vm = vm_problems(vm_plan)
        if not by_vm or any(p.vm is None for p in vm_plan.problems):
            break
        for name, reasons in by_vm.items():
            failed.setdefault(name, []).extend(reasons)
        others = [v for v in inventory.vms if v.name not in failed]
        vm_plan = replan_vms(inventory.model_copy(update={"vms": others}), observed_after, pending)
    return vm_plan, failed


def vm_problems(the_plan: Plan) -> dict[str, list[str]]:
    """The plan's problems of single VMs: VM name -> its reasons."""
    by_vm: dict[str, list[str]] = {}
    for problem in the_plan.problems:
        if problem.vm is not None:
            by_vm.setdefault(problem.vm, []).append(problem.message)
    return by_vm


def _replan_failures(failed: dict[str, list[str]]) -> list[VmOutcome]:
    return [
        VmOutcome(name, Outcome.FAILED, fault_type="PlanError", message="plan after the host changes: " + "; ".join(r))
        for name, r in sorted(failed.items())
    ]


def _not_started(the_plan: Plan, failed: dict[str, list[str]]) -> ApplyResult:
    outcomes = [
        VmOutcome(c.vm, Outcome.NOT_STARTED, message="the VM plan after the host changes failed",
                  left=c.planned_steps())
        for c in the_plan.changes
        if c.vm not in failed
    ]
    return ApplyResult(vms=sorted(outcomes + _replan_failures(failed), key=lambda o: o.vm))


# ------------------------------------------------------------------------------------------ 5. guests
# guest_vms, guest_addresses, guests: vgpuctl.guest.stage


# ------------------------------------------------------------------------------------------ the whole run


@dataclass
class GuestStage:
    """`provision`: after the apply, wait for the guests' addresses, then run the guest playbooks."""

    wait_s: float = 600.0
    poll_s: float = 5.0
    limit: str | None = None
    # the live display of the wait for the guests' addresses, fed each read (VM name -> address or None)
    waiting: Callable[[], AbstractContextManager[Callable[[dict[str, str | None]], None]]] | None = None
    # the live display of the playbooks for these guests, taking ansible-runner's events
    display: Callable[[list[str]], AbstractContextManager[EventSink]] | None = None


@dataclass
class RunRequest:
    """What to run after the plan: nothing (`plan`), the apply, the guests too (`provision`)."""

    apply: bool = True
    saved: SavedPlan | None = None  # apply exactly this plan: refused when the farm or the plan changed
    saved_path: Path | None = None
    allow_destroy: bool = False  # VMs with state: absent may be destroyed (also allow_destroy: true in the inventory)
    guests: GuestStage | None = None
    # a saved plan's section is compared with this document of the plan made again (reports.plan.plan_section)
    plan_document: Callable[[Plan, ScopeResult | None, SupervisorPlan | None], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if self.saved is not None and self.plan_document is None:
            raise ValueError("a saved plan's run needs the plan document to compare it with")


def run(
    settings: ConnectionSettings,
    inventory: Inventory,
    options: RunOptions,
    request: RunRequest | None = None,
    hooks: RunHooks | None = None,
) -> RunOutcome:
    """The whole run: observe, plan (hosts, VMs, VM classes), check the saved plan, show and confirm, apply the
    hosts, observe again, apply the VMs, the VM classes, then the guests. Raises PlanError when the plan cannot
    be applied (nothing changed); a run that changed something returns its outcome, failures included
    (`RunOutcome.failure`)."""
    from vgpuctl.vsphere.session import open_session

    request = request or RunRequest()
    hooks = hooks or QuietHooks()
    stage = request.guests if request.guests is not None and guest_vms(inventory) else None
    if not request.apply:
        options = replace(options, read_only=True)
    with open_session(settings) as session, ssh_service_for_run(session, options) if request.apply else nullcontext():
        outcome = within_session(session, inventory, options, request, hooks)
        if stage is not None and outcome.failure() is None:
            with stage.waiting() if stage.waiting is not None else nullcontext(None) as on_read:
                outcome.addresses = guest_addresses(
                    session, inventory, wait_s=stage.wait_s, poll_s=stage.poll_s, progress=on_read
                )
        outcome.round_trips = session.round_trips
    if stage is not None and outcome.addresses is not None:
        names = [n for n in guest_vms(inventory) if outcome.addresses.get(n)]
        with stage.display(names) if stage.display is not None else nullcontext(None) as on_event:
            outcome.guests = guests(inventory, outcome.addresses, limit=stage.limit, on_event=on_event)
    return outcome


def within_session(
    session: Session, inventory: Inventory, options: RunOptions, request: RunRequest, hooks: RunHooks
) -> RunOutcome:
    """`run`'s stages on an open session, up to the VM classes (`vm vgpu` calls it with its one-VM inventory)."""
    observed = observe(session, options.datacenter, inventory)
    return carry_out(session, observed, inventory, options, request, hooks)


def carry_out(
    session: Session, observed: Observed, inventory: Inventory, options: RunOptions, request: RunRequest,
    hooks: RunHooks,
) -> RunOutcome:
    """Plan against `observed` (read again after waiting for hosts other runs hold), then the rest of the run (see
    `run`)."""
    with ExitStack() as stack:
        prepared = prepare(session, observed, inventory, options, request, stack)
        planned = prepared.planned
        hooks.planned(planned)
        if planned.plan.errors:
            raise PlanError(list(planned.plan.errors))
        outcome = RunOutcome(planned)
        if not request.apply or planned.is_empty:
            return outcome
        check_before_apply(planned, request)
        hooks.confirm(planned)
        with hooks.apply_progress(planned) as progress:
            applied, interrupted = run_interruptible(
                lambda cancel: apply(session, planned.inventory, planned.plan, planned.observed, options, progress,
                                     cancel),
                hooks.note,
            )
        finish(outcome, prepared, applied, interrupted, hooks.note, options)
    return outcome


@dataclass
class Prepared:
    """A run planned on its open session, ready to apply: what the plan stage produced, and the VM-class stage
    it opened (None when the inventory names no VM classes or namespaces)."""

    planned: Planned
    supervisor: SupervisorRun | None


def prepare(
    session: Session, observed: Observed, inventory: Inventory, options: RunOptions, request: RunRequest,
    stack: ExitStack,
) -> Prepared:
    """The plan stage of a run (the scope's plan, the VM classes, the saved plan's check); the VM-class stage
    stays open on `stack` until the run ends; with --lock-timeout the farm is read again after waiting for the
    hosts other runs hold (`plan_when_free`: Planned.observed is what was read last). A fleet prepares each
    vCenter's run this way (vgpuctl.fleetrun)."""
    scoped, observed = plan_when_free(session, observed, inventory, options)
    the_plan, inventory = scoped.plan, scoped.inventory
    supervisor = plan_vm_classes(session, observed, inventory, the_plan)
    if supervisor is not None:
        stack.enter_context(supervisor)
    classes = supervisor.last_plan if supervisor is not None else None
    if classes is not None:
        the_plan.refuse(classes.errors)
        the_plan.warnings += classes.warnings
    planned = Planned(inventory, observed, the_plan, classes, session.settings.sdk_url, session.round_trips,
                      scoped.scope, scoped.facts)
    if request.saved is not None and request.saved_path is not None:
        from vgpuctl.planfile import check_same_plan, check_still_valid

        check_still_valid(request.saved_path, request.saved, planned.vcenter, observed, the_plan, classes)
        assert request.plan_document is not None  # RunRequest requires it with a saved plan
        check_same_plan(request.saved_path, request.saved, request.plan_document(the_plan, scoped.scope, classes))
    return Prepared(planned, supervisor)


def check_before_apply(planned: Planned, request: RunRequest) -> None:
    """What stops an apply before its first change, nothing changed: VMs removed without --allow-destroy, a lease
    time to live vgpuctl cannot keep."""
    refuse_unallowed_removals(planned.plan, planned.inventory, request)
    check_lock_settings()


def finish(outcome: RunOutcome, prepared: Prepared, applied: ApplyOutcome, interrupted: bool,
           note: Callable[[str], None], options: RunOptions) -> None:
    """The outcome of the apply stages (with the change window's deadline), then the VM classes (not after
    Ctrl-C)."""
    outcome.applied, outcome.interrupted = applied, interrupted or applied.interrupted
    applied.deadline = options.deadline
    supervisor, classes = prepared.supervisor, prepared.planned.classes
    if supervisor is not None and classes is not None and not classes.is_empty and not outcome.interrupted:
        outcome.classes = supervisor.apply(progress=lambda what, step: note(f"{what}: {step}"))


def refuse_unallowed_removals(the_plan: Plan, inventory: Inventory, request: RunRequest) -> None:
    """VMs are destroyed only with apply --allow-destroy or allow_destroy: true; nothing changes otherwise."""
    removed = sorted(c.vm for c in the_plan.changes if c.destroy)
    if removed and not (request.allow_destroy or inventory.allow_destroy):
        raise UsageError(f"the plan removes {', '.join(removed)} (state: absent): nothing was changed; rerun apply "
                         "with --allow-destroy, or set allow_destroy: true in the inventory")


def plan_only(settings: ConnectionSettings, inventory: Inventory, options: RunOptions) -> Planned:
    """The plan of an inventory, nothing applied and nothing raised for its errors (experiments check variants
    with it, a fleet plans each vCenter with it): read-only, nothing written to vCenter (RunOptions.read_only)."""
    from vgpuctl.vsphere.session import open_session

    options = replace(options, read_only=True)
    with open_session(settings) as session:
        observed = observe(session, options.datacenter, inventory)
        scoped, observed = plan_when_free(session, observed, inventory, options)
        the_plan, inventory = scoped.plan, scoped.inventory
        with plan_vm_classes(session, observed, inventory, the_plan) or nullcontext() as supervisor:
            classes = supervisor.last_plan if supervisor is not None else None
            if classes is not None:
                the_plan.refuse(classes.errors)
        return Planned(inventory, observed, the_plan, classes, session.settings.sdk_url, session.round_trips,
                       scoped.scope, scoped.facts)


def run_interruptible(work: Callable[[Cancel], T], on_interrupt: Callable[[str], None]) -> tuple[T, bool]:
    """`work(cancel)` in a worker thread (vgpuctl.progress.run_interruptible): the first Ctrl-C asks it to stop,
    a second one exits at once, dropping this run's host leases and VM claims first."""
    return interruptible_in_thread(work, on_interrupt, on_exit_now=release_held_locks)
