"""The stages of every vgpuctl run, in the order they happen:

    load -> observe -> plan (host facts, host changes, VM changes) -> apply_hosts (rolling)
         -> observe again, the same way -> replan_vms -> apply_vms -> guest_addresses -> guests

`apply` runs the four apply stages. Progress and cancellation come in as small interfaces
(vgpuctl.progress); `run_interruptible` runs a stage in a worker thread so Ctrl-C only asks it to stop.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from vgpuctl.domain import ConnectionState, Evacuate, Outcome, Power
from vgpuctl.errors import Interrupted, UsageError
from vgpuctl.hosts import plan as hostplan
from vgpuctl.hosts.apply import HostApplyOptions, apply_host_changes, pending_changes
from vgpuctl.hosts.facts import HostFacts
from vgpuctl.hosts.predict import predict_observed
from vgpuctl.hosts.targets import targets_for
from vgpuctl.hosts.work import WorkStore
from vgpuctl.inventory import HostSpec, Inventory
from vgpuctl.model import HostApplyResult, HostChange, Observed, Plan
from vgpuctl.progress import EXIT_NOW, RUNNING, Cancel, HostProgress, Progress, VmProgress

if TYPE_CHECKING:
    from vgpuctl.guest.runner import DeployResult
    from vgpuctl.model import ApplyResult, VmOutcome
    from vgpuctl.vsphere.session import Session

T = TypeVar("T")


@dataclass
class RunOptions:
    """How a run behaves; every field has the CLI's default."""

    datacenter: str | None = None
    parallel: int = 8  # VMs changed at the same time
    keep_going: bool = False  # after a failed host, go on with the other hosts
    resume: bool = True  # hosts an unfinished apply left in the state file are planned again
    trust_on_first_use: bool = False  # accept and record unknown ESXi SSH host keys
    on_new_host_key: Callable[[str, str], None] | None = None  # (host, fingerprint) when one was recorded
    state: WorkStore | None = None  # default: work records in vCenter, on the hosts (vsphere/workrecord.py)
    run_id: str | None = None  # names this run in work records and leases (default: a new random id)
    poll_s: float = 0.5
    shutdown_timeout_s: float = 120.0


# ------------------------------------------------------------------------------------------ 1. load


def load(path: Path) -> Inventory:
    """The inventory file, schema and semantic checks done; errors located FILE:LINE:COL."""
    from vgpuctl.inventory import load_inventory, validate

    if not path.exists():
        raise UsageError(f"{path}: no such file")
    inventory = load_inventory(path)
    validate(inventory)  # VM classes and namespaces included
    return inventory


# ------------------------------------------------------------------------------------------ 2. observe


def observe(
    session: Session, datacenter: str | None, inventory: Inventory | None = None, *, all_nvlink: bool = False
) -> Observed:
    """The one bulk read of the farm. NVLink sets are read on the hosts where the inventory's NVLink VMs can
    run, or on every GPU host with `all_nvlink` (status)."""
    from vgpuctl.vsphere.nvlink import nvlink_hosts_for
    from vgpuctl.vsphere.observe import observe as bulk_observe
    from vgpuctl.vsphere.observe import observe_nvlink

    observed = bulk_observe(session, datacenter)
    if all_nvlink:
        hosts = {h.name for h in observed.hosts.values() if h.gpus}
    else:
        hosts = nvlink_hosts_for(inventory, observed) if inventory is not None else set()
    if hosts:
        observe_nvlink(session, observed, hosts)
    return observed


def host_facts(
    session: Session, observed: Observed, specs: dict[str, HostSpec], options: RunOptions
) -> tuple[dict[str, HostFacts], list[str]]:
    """API facts of the named hosts that are connected (errors name the others), and shell facts when ESXi SSH
    is set up or an SSH agent runs (without them, MIG, NVLink and scheduler changes are plan errors); fills each
    ObservedHost.module_options with the configured nvidia option string and, on a host where vCenter reported
    no NVLink device groups, its NVLink sets from the shell."""
    from vgpuctl.hosts.facts import adopt_nvlink_sets, gather_facts
    from vgpuctl.hosts.status import shell_configured

    errors = []
    hosts = {}
    for name, spec in sorted(specs.items()):
        host = observed.hosts[name]
        if host.connection_state != ConnectionState.CONNECTED:
            errors.append(f"host {name}: {host.connection_state}; its GPU state cannot be read")
        else:
            hosts[name] = (host.moid, spec)
    facts = gather_facts(
        session,
        hosts,
        shell=shell_configured(specs) or bool(os.environ.get("SSH_AUTH_SOCK")),  # an agent may hold the key
        trust_on_first_use=options.trust_on_first_use,
        on_new_host_key=options.on_new_host_key,
    )
    for name, f in facts.items():
        observed.hosts[name].module_options = f.options_configured or ""
        adopt_nvlink_sets(observed, f)  # NVLink sets from nvidia-smi topo where vCenter reported no device groups
    return facts, errors


# ------------------------------------------------------------------------------------------ 3. plan


def state_of(session: Session, observed: Observed, options: RunOptions) -> WorkStore:
    """Where this run keeps its host work records: the store given, else the hosts' records in vCenter (read with
    the bulk observe)."""
    if options.state is None:
        from vgpuctl.hosts.work import WORK_FIELD
        from vgpuctl.vsphere.workrecord import VcenterWorkStore, new_run_id

        options.run_id = options.run_id or new_run_id()
        moids = {name: h.moid for name, h in observed.hosts.items()}
        values = {name: h.custom_values.get(WORK_FIELD, "") for name, h in observed.hosts.items()}
        options.state = VcenterWorkStore(session, moids, values, options.run_id)
    return options.state


def _resume(session: Session, observed: Observed, options: RunOptions) -> list[str]:
    if not options.resume:
        return []
    return [h for h in state_of(session, observed, options).hosts() if h in observed.hosts]


def _migrates(specs: dict[str, HostSpec]) -> bool:
    return any(s.maintenance.evacuate == Evacuate.MIGRATE for s in specs.values())


def vgpu_migration_enabled(session: Session) -> bool:
    """vCenter's advanced setting that allows vMotion of running vGPU VMs (one read; absent means false)."""
    from pyVmomi import vim

    from vgpuctl.hosts.evacuation import HOT_MIGRATE_OPTION

    manager = session.content.setting
    if manager is None:
        return False
    try:
        values = session.invoke(manager.QueryOptions, HOT_MIGRATE_OPTION)
    except vim.fault.InvalidName:
        return False
    return any(str(v.value).strip().lower() == "true" for v in values or [])


def _lease_warnings(session: Session, observed: Observed, hosts: Sequence[str]) -> list[str]:
    """Hosts of the plan that another live run holds (one CurrentTime read, only when a host has a lease)."""
    from vgpuctl.vsphere.workrecord import LEASE_FIELD, live_leases

    values = {h: observed.hosts[h].custom_values.get(LEASE_FIELD, "") for h in hosts if h in observed.hosts}
    return [
        f"host {h}: {info.describe()} holds its lease: apply will not touch it until that run ends"
        for h, info in sorted(live_leases(session, values).items())
    ]


def plan(session: Session, observed: Observed, inventory: Inventory, options: RunOptions) -> Plan:
    """Host facts of the inventory's hosts, then the pure planner: host changes first, VM changes planned
    against the hosts as they will be, VMs on changing hosts waiting for them."""
    from vgpuctl.vms.plan import make_plan

    resolved, _ = hostplan.resolve_hosts(inventory.hosts, observed)  # make_plan reports resolve errors
    facts, errors = host_facts(session, observed, resolved, options) if resolved else ({}, [])
    migration = vgpu_migration_enabled(session) if _migrates(resolved) else False
    resume = _resume(session, observed, options)
    the_plan = make_plan(inventory, observed, host_facts=facts, resume=resume, vgpu_migration=migration)
    the_plan.errors = errors + the_plan.errors
    the_plan.warnings += _lease_warnings(session, observed, sorted({c.host for c in the_plan.host_changes}))
    return the_plan


def plan_vm_classes(session: Session, observed: Observed, inventory: Inventory, the_plan: Plan) -> Any:
    """VM classes and supervisor namespaces over REST (vgpuctl.supervisor.stage), planned against the hosts as the
    plan leaves them: a SupervisorRun to close, or None when the inventory names none (no REST login)."""
    from vgpuctl.supervisor.stage import open_for_run

    return open_for_run(session.settings, inventory, observed, the_plan.host_changes)


def plan_hosts(
    session: Session, observed: Observed, specs: Sequence[HostSpec], options: RunOptions
) -> hostplan.HostPlan:
    """Host changes only (the `host` commands): facts of the hosts the specs name, then hostplan."""
    resolved, errors = hostplan.resolve_hosts(specs, observed)
    if errors:
        return hostplan.HostPlan(errors=errors)
    facts, errors = host_facts(session, observed, resolved, options)
    migration = vgpu_migration_enabled(session) if _migrates(resolved) else False
    resume = _resume(session, observed, options)
    host_plan = hostplan.plan_hosts(specs, observed, facts, resume=resume, vgpu_migration=migration)
    host_plan.errors = errors + host_plan.errors
    host_plan.warnings = [*observed.warnings, *host_plan.warnings, *_lease_warnings(session, observed, host_plan.hosts)]
    return host_plan


# ------------------------------------------------------------------------------------------ 4. apply


@dataclass
class ApplyOutcome:
    """What `apply` did: the hosts (None when the plan had no host changes) and the VMs of `vm_plan`, the VM
    plan made again after the host changes (the original plan when there were none)."""

    hosts: HostApplyResult | None
    vms: ApplyResult
    vm_plan: Plan
    interrupted: bool = False
    vm_errors: list[str] = field(default_factory=list)


def apply_hosts(
    session: Session,
    observed: Observed,
    specs: Sequence[HostSpec],
    changes: Sequence[HostChange],
    options: RunOptions,
    progress: HostProgress | None = None,
    cancel: Cancel | None = None,
) -> HostApplyResult:
    """Host changes host by host (maintenance, reboot, verify), `max_unavailable` at a time."""
    resolved, _ = hostplan.resolve_hosts(specs, observed)
    moids = {name: h.moid for name, h in observed.hosts.items()}
    host_options = HostApplyOptions(
        keep_going=options.keep_going,
        trust_on_first_use=options.trust_on_first_use,
        shutdown_timeout_s=options.shutdown_timeout_s,
        poll_s=options.poll_s,
        progress=progress,
        cancel=cancel,
    )
    state = state_of(session, observed, options)
    return apply_host_changes(session, targets_for(changes, resolved, moids), state, host_options)


def replan_vms(inventory: Inventory, observed_after: Observed, pending: Sequence[HostChange]) -> Plan:
    """The VM part of the plan again, against the farm after the host changes. `pending` (changes of hosts that
    did not finish) stay in the plan; those hosts are predicted as changed and their VMs wait for them."""
    from vgpuctl.vms.plan import make_plan

    base = predict_observed(observed_after, pending) if pending else observed_after
    vm_plan = make_plan(inventory.model_copy(update={"hosts": []}), base)
    vm_plan.host_changes = list(pending)
    hostplan.mark_dependencies(vm_plan.vm_changes, base, pending)
    return vm_plan


def apply_vms(
    session: Session,
    the_plan: Plan,
    observed: Observed,
    options: RunOptions,
    progress: VmProgress | None = None,
    cancel: Cancel | None = None,
) -> ApplyResult:
    """One clone and one reconfigure per VM, `options.parallel` at a time; VMs on pending hosts wait."""
    from vgpuctl.vms.apply import apply_plan

    return apply_plan(
        session,
        the_plan,
        observed,
        parallel=options.parallel,
        progress=progress,
        cancel=cancel,
        shutdown_timeout_s=options.shutdown_timeout_s,
        poll_s=options.poll_s,
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
    """Hosts first; then observe again the same way, plan the VMs again and apply them."""
    if not the_plan.host_changes:
        vms = apply_vms(session, the_plan, observed, options, progress, cancel)
        return ApplyOutcome(None, vms, the_plan, vms.interrupted)
    hosts = apply_hosts(session, observed, inventory.hosts, the_plan.host_changes, options, progress, cancel)
    after = observe(session, options.datacenter, inventory)
    vm_plan, failed = replan_vms_alone(inventory, after, pending_changes(the_plan.host_changes, hosts))
    if vm_plan.errors:  # the host results stand; errors that name no VM stop every VM
        return ApplyOutcome(hosts, _not_started(the_plan, failed), vm_plan, vm_errors=list(vm_plan.errors))
    vms = apply_vms(session, vm_plan, after, options, progress, cancel)
    vms.vms = sorted(vms.vms + _replan_failures(failed), key=lambda o: o.vm)
    return ApplyOutcome(hosts, vms, vm_plan, vms.interrupted)


_VM_ERROR = re.compile(r"^vm (?P<vm>[^:\s]+): (?P<reason>.*)$", re.DOTALL)


def replan_vms_alone(
    inventory: Inventory, observed_after: Observed, pending: Sequence[HostChange]
) -> tuple[Plan, dict[str, list[str]]]:
    """replan_vms, where a VM whose own re-plan fails is left out so the others go on: (plan of the others,
    VM name -> its errors). Errors that name no VM stay in the plan."""
    failed: dict[str, list[str]] = {}
    vm_plan = replan_vms(inventory, observed_after, pending)
    for _ in range(3):  # leaving VMs out only frees capacity; a second pass settles it
        by_vm, other = split_vm_errors(vm_plan.errors)
        if not by_vm or other:
            break
        for name, reasons in by_vm.items():
            failed.setdefault(name, []).extend(reasons)
        others = [v for v in inventory.vms if v.name not in failed]
        vm_plan = replan_vms(inventory.model_copy(update={"vms": others}), observed_after, pending)
    return vm_plan, failed


def split_vm_errors(errors: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Plan errors by the VM they name ("vm NAME: reason"), and those that name none."""
    by_vm: dict[str, list[str]] = {}
    other = []
    for error in errors:
        m = _VM_ERROR.match(error)
        if m:
            by_vm.setdefault(m["vm"], []).append(m["reason"])
        else:
            other.append(error)
    return by_vm, other


def _replan_failures(failed: dict[str, list[str]]) -> list[VmOutcome]:
    from vgpuctl.model import VmOutcome

    return [
        VmOutcome(name, Outcome.FAILED, fault_type="PlanError", message="plan after the host changes: " + "; ".join(r))
        for name, r in sorted(failed.items())
    ]


def _not_started(the_plan: Plan, failed: dict[str, list[str]]) -> ApplyResult:
    from vgpuctl.model import ApplyResult, VmOutcome
    from vgpuctl.vms.apply import planned_steps

    outcomes = [
        VmOutcome(c.vm, Outcome.NOT_STARTED, message="the VM plan after the host changes failed", left=planned_steps(c))
        for c in the_plan.changes
        if c.vm not in failed
    ]
    return ApplyResult(vms=sorted(outcomes + _replan_failures(failed), key=lambda o: o.vm))


# ------------------------------------------------------------------------------------------ 5. guests


def guest_vms(inventory: Inventory) -> list[str]:
    """The inventory's VMs that have a guest group (the ones the guest playbooks configure)."""
    return [vm.name for vm in inventory.vms if vm.guest is not None]


def guest_addresses(
    session: Session,
    inventory: Inventory,
    *,
    wait_s: float = 0.0,
    poll_s: float = 5.0,
    progress: Callable[[dict[str, str | None]], None] | None = None,
) -> dict[str, str | None]:
    """VM name -> guest address of the guest VMs: one bulk read, or with `wait_s` one per `poll_s` until every
    guest VM that should run reports an address (None for those that did not)."""
    from vgpuctl.guest.addresses import read_addresses, wait_for_addresses

    if wait_s <= 0:
        return read_addresses(session, guest_vms(inventory))
    running = [vm.name for vm in inventory.vms if vm.guest is not None and vm.power != Power.OFF]
    return wait_for_addresses(
        lambda: read_addresses(session, running), timeout_s=wait_s, poll_s=poll_s, progress=progress
    )


def guests(
    inventory: Inventory,
    addresses: dict[str, str | None],
    *,
    check: bool = False,
    limit: str | None = None,
    keep_runs: int = 10,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> DeployResult:
    """The guest playbooks on every guest VM with an address (ansible-runner, vgpuctl.guest)."""
    from vgpuctl.guest.runner import deploy

    return deploy(inventory, addresses, check=check, limit=limit, keep_runs=keep_runs, on_event=on_event)


# ------------------------------------------------------------------------------------------ running a stage


def second_interrupt_message(running: Sequence[str]) -> str:
    if not running:
        return "interrupted again: exiting now; no vCenter task was running"
    return "interrupted again: exiting now; these vCenter tasks may still be running: " + ", ".join(running)


def run_interruptible(work: Callable[[Cancel], T], on_interrupt: Callable[[str], None]) -> tuple[T, bool]:
    """`work(cancel)` in a worker thread. The first Ctrl-C sets `cancel` (running and restoring steps finish,
    no new forward step starts) and calls `on_interrupt`; a second one exits at once (Interrupted, naming the
    vCenter tasks that may still run). Returns (result, interrupted)."""
    cancel = threading.Event()
    finished = threading.Event()  # not Thread.join: a KeyboardInterrupt inside join() can corrupt is_alive()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = work(cancel)
        except BaseException as err:  # re-raised in the calling thread
            box["error"] = err
        finally:
            finished.set()

    interrupts: list[int] = []

    def on_sigint(signum: int, frame: object) -> None:
        # A handler, not `except KeyboardInterrupt`: the exception could land between two statements of the
        # wait loop and escape it.
        interrupts.append(signum)
        if len(interrupts) > 1:
            EXIT_NOW.set()
            raise Interrupted(second_interrupt_message(RUNNING.labels()))
        cancel.set()
        on_interrupt(
            "interrupted: no new step starts; waiting for running vCenter tasks and restoring what this run "
            "stopped (hosts out of maintenance, VMs powered on again). Ctrl-C again to exit at once"
        )

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        threading.Thread(target=run, name="vgpuctl-apply", daemon=True).start()
        while not finished.wait(0.2):
            pass
    finally:
        signal.signal(signal.SIGINT, previous)
    if "error" in box:
        raise box["error"]
    return box["result"], bool(interrupts)
