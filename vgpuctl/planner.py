"""make_plan: the whole plan, the pure function Inventory x Observed -> Plan. No I/O.

Host changes first (vgpuctl.hosts.plan), then the VMs (vgpuctl.vms.plan) against the hosts as they will be after
those changes (vgpuctl.farm.predict); a VM change on a changing host waits for it (`mark_dependencies`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from vgpuctl.farm.predict import predict_observed
from vgpuctl.gcpause import paused_gc
from vgpuctl.hosts import plan as hostplan
from vgpuctl.inventory import Inventory
from vgpuctl.model import HostChange, Observed, Plan, VmChange
from vgpuctl.settings import setting_of
from vgpuctl.settings.facts import HostFacts
from vgpuctl.vms.plan import plan_vms


def make_plan(
    inv: Inventory,
    observed: Observed,
    host_facts: dict[str, HostFacts] | None = None,
    resume: Iterable[str] = (),
    vgpu_migration: bool = False,
    only_vms: Collection[str] | None = None,
) -> Plan:
    """Host changes first (`host_facts` from the ESXi shell and per-host API calls, `resume`: hosts an unfinished
    apply left behind, `vgpu_migration`: vCenter allows vMotion of running vGPU VMs), then the VMs, planned against
    the hosts as they will be after the host changes; VM changes on a changing host wait for it
    (VmChange.depends_on_hosts). `only_vms`: plan only these VM entries (a scoped run); every entry still tells the
    host planner what its VM will ask for when a host is evacuated."""
    with paused_gc():  # a plan of 1,000 VMs builds its records in one go: see vgpuctl.gcpause
        return _make_plan(inv, observed, host_facts, list(resume), vgpu_migration, only_vms)


def _make_plan(inv: Inventory, observed: Observed, host_facts: dict[str, HostFacts] | None, resume: list[str],
               vgpu_migration: bool, only_vms: Collection[str] | None) -> Plan:
    hosts = (
        hostplan.plan_hosts(inv.hosts, observed, host_facts, resume, inv.vms, vgpu_migration, guests=inv.guests)
        if inv.hosts or resume
        else None
    )
    base = predict_observed(observed, hosts.changes) if hosts and hosts.changes else observed
    vms = plan_vms(inv, base, only_vms)
    plan = Plan(warnings=list(observed.warnings))  # what the read itself could not see
    if hosts is not None:
        plan.host_changes, plan.problems = hosts.changes, list(hosts.problems)
        plan.warnings += hosts.warnings
        plan.window = hosts.window
    plan.vm_changes = vms.vm_changes
    plan.problems += vms.problems
    plan.warnings += vms.warnings
    mark_dependencies(plan.vm_changes, base, plan.host_changes)
    removed = sorted(c.vm for c in plan.changes if c.destroy)
    if removed and not inv.allow_destroy:
        plan.warnings.append(f"the plan removes {', '.join(removed)} (state: absent): apply does so only with "
                             "--allow-destroy or allow_destroy: true in the inventory")
    return plan


def changed_hosts(changes: Iterable[HostChange]) -> set[str]:
    """Hosts whose GPU configuration changes in maintenance mode (VMs placed there wait for them)."""
    return {c.host for c in changes if setting_of(c.kind) is not None and c.disruptive}


def mark_dependencies(vm_changes: Iterable[VmChange], observed: Observed, host_changes: Sequence[HostChange]) -> None:
    """Set VmChange.depends_on_hosts: a VM with a change on (or cloned to) a host whose GPU configuration
    changes waits for that host (apply skips it while the host change is pending)."""
    changed = changed_hosts(host_changes)
    if not changed:
        return
    for change in vm_changes:
        if change.is_empty:
            continue
        vm = observed.vm_for(change)
        host = vm.host if vm is not None else (change.clone.host if change.clone is not None else None)
        hosts = {host} if host else set()
        if host is None and change.clone is not None and change.clone.cluster:
            hosts = set(observed.clusters.get(change.clone.cluster, []))
        change.depends_on_hosts = sorted((hosts & changed) | set(change.depends_on_hosts))


def independent_changes(vm_changes: Iterable[VmChange], observed: Observed,
                        host_changes: Sequence[HostChange]) -> list[VmChange]:
    """The VM changes apply can make beside the host changes: those that wait for no host change and whose VM
    (or clone) runs in no cluster where a host changes, nor on a changing standalone host. Conservative: within a
    cluster whose hosts change, a power-on could land (by DRS or by the plan's placement, which put it after the
    evacuations) on a host still being emptied or filled by migrations, so those VMs wait for the hosts."""
    changing = {c.host for c in host_changes}
    busy = {cluster for h in changing if (cluster := _cluster_of(observed, h)) is not None}
    out = []
    for change in vm_changes:
        if change.is_empty or change.depends_on_hosts:
            continue
        hosts = _hosts_of(change, observed)
        if hosts and not (hosts & changing) and not ({_cluster_of(observed, h) for h in hosts} & busy):
            out.append(change)
    return out


def _cluster_of(observed: Observed, host: str) -> str | None:
    found = observed.hosts.get(host)
    return found.cluster if found is not None else None


def _hosts_of(change: VmChange, observed: Observed) -> set[str]:
    """The hosts a VM change can run on (empty: not known, so it waits)."""
    vm = observed.vm_for(change)
    if vm is not None:
        return {vm.host} if vm.host else set()
    clone = change.clone
    if clone is None:
        return set()
    if clone.host:
        return {clone.host}
    return set(observed.clusters.get(clone.cluster, [])) if clone.cluster else set()
