"""Scoped runs (`plan`/`apply` with --host, --cluster, --vm; names or globs, repeatable), like Terraform's
-target: the run plans and applies only the selected entries and what they need.

- `--host H`: the hosts matching H (a full name, a unique short name, or a glob); their host changes, and the
  inventory's VMs on them (an existing VM: the host vCenter has it on; a new one: the host its entry names).
- `--cluster C`: the clusters matching C; their hosts' changes and the inventory's VMs in them.
- `--vm V`: the inventory's VMs matching V.
- Pulled in: the host changes a VM in scope waits for (its host changes its GPU configuration), and the VMs a
  host change in scope hands to their own VM change when it evacuates them (they must be reconfigured).
- Everything else is out of scope: listed, untouched. The inventory's VM classes and namespaces are left out
  of a scoped run.
- `--vcenter V` (a fleet, vgpuctl.fleet): only the vCenters matching V run at all; --host, --cluster and --vm
  then select within each of them, and a pattern must match in one of them (not in each: `lenient`).

Pure: selection and closure work on the inventory, the farm as observed and a plan; the pipeline plans.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import field
from typing import TYPE_CHECKING

from vgpuctl import names
from vgpuctl.domain import ChangeKind, EvacuationKind
from vgpuctl.errors import NotFound, UsageError, VgpuctlError
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import EvacuationAction, folder_path

if TYPE_CHECKING:
    from vgpuctl.inventory import HostSpec, Inventory, VmSpec
    from vgpuctl.model import Observed, Plan


@dataclass
class Scope:
    """The patterns given: --host, --cluster, --vm."""

    hosts: list[str] = field(default_factory=list)
    clusters: list[str] = field(default_factory=list)
    vms: list[str] = field(default_factory=list)
    vcenters: list[str] = field(default_factory=list)  # a fleet's vCenters (vgpuctl.fleet selects them)
    lenient: bool = False  # one vCenter of a fleet: a pattern that matches nothing here is no error (`unmatched`)

    @property
    def within_vcenter(self) -> bool:
        """Whether it selects anything inside a vCenter (--host, --cluster, --vm)."""
        return bool(self.hosts or self.clusters or self.vms)


@dataclass
class Selection:
    """What the patterns select: host names (as vCenter knows them) and inventory VM names; with a lenient
    scope, the patterns that matched nothing (`--host esx-9`)."""

    hosts: set[str]
    vms: set[str]
    unmatched: list[str] = field(default_factory=list)


@dataclass
class ScopeResult:
    """A scoped plan's scope: what was selected, pulled in (host -> the VMs in scope that need it; VM -> the host
    whose evacuation hands it over) and left out."""

    scope: Scope
    selected_hosts: list[str]
    selected_vms: list[str]
    pulled_in_hosts: dict[str, list[str]]
    pulled_in_vms: dict[str, str]
    out_of_scope_hosts: list[str]
    out_of_scope_vms: list[str]
    vm_classes_left_out: bool
    unmatched: list[str] = field(default_factory=list)  # a lenient scope's patterns that matched nothing

    @property
    def hosts(self) -> set[str]:
        return set(self.selected_hosts) | set(self.pulled_in_hosts)

    @property
    def vms(self) -> set[str]:
        return set(self.selected_vms) | set(self.pulled_in_vms)


# ------------------------------------------------------------------------------------------ selection


def select(scope: Scope, inventory: Inventory, observed: Observed) -> Selection:
    """The hosts and inventory VMs the patterns name. A pattern that matches nothing is a UsageError (in a
    lenient scope, listed in `unmatched`)."""
    unmatched: list[str] = []

    def nothing(option: str, pattern: str, error: VgpuctlError) -> None:
        if not scope.lenient:
            raise error
        unmatched.append(f"{option} {pattern}")

    hosts: set[str] = set()
    for pattern in scope.hosts:
        try:
            hosts |= _hosts_matching(pattern, observed)
        except NotFound as err:
            nothing("--host", pattern, err)
    clusters: set[str] = set()
    for pattern in scope.clusters:
        found = names.matching(pattern, observed.clusters)
        if not found:
            nothing("--cluster", pattern, UsageError(f"--cluster {pattern}: no cluster matches (clusters: "
                                                     f"{names.listing(observed.clusters)})"))
        clusters |= set(found)
    for cluster in clusters:
        hosts |= set(observed.clusters.get(cluster, []))
    vms = {v.name for v in inventory.vms if _vm_in(v, observed, hosts, clusters)}
    for pattern in scope.vms:
        found = names.matching(pattern, (v.name for v in inventory.vms))
        if not found:
            nothing("--vm", pattern, UsageError(f"--vm {pattern}: no VM of the inventory matches"))
        vms |= set(found)
    return Selection(hosts, vms, unmatched)


def _hosts_matching(pattern: str, observed: Observed) -> set[str]:
    if not names.is_glob(pattern):
        return {names.host_named(pattern, observed.hosts)}
    found = names.matching(pattern, observed.hosts, short_names=True)
    if not found:
        raise NotFound(f"--host {pattern}: no host matches (hosts: {names.listing(observed.hosts)})")
    return set(found)


def _vm_in(spec: VmSpec, observed: Observed, hosts: set[str], clusters: set[str]) -> bool:
    """Whether an inventory VM is on a selected host or in a selected cluster (where it is, or for a new VM,
    where its entry puts it)."""
    from vgpuctl.vms.plan import find_vm

    _key, vm, _why = find_vm(observed, spec.name, folder_path(spec.folder))
    if vm is not None:
        return vm.host in hosts or (vm.cluster is not None and vm.cluster in clusters)
    if spec.host is not None:
        return _known(spec.host, observed) in hosts
    return spec.cluster is not None and spec.cluster in clusters


def _known(name: str, observed: Observed) -> str | None:
    """The host an inventory entry names, or None (the plan reports an unknown host)."""
    try:
        return names.host_named(name, observed.hosts)
    except VgpuctlError:
        return None


def candidate_hosts(selection: Selection, inventory: Inventory, observed: Observed) -> set[str]:
    """The selected hosts, and every host a selected VM's change could wait for: the host it is on, or for a
    new VM the host or the hosts of the cluster its entry names."""
    from vgpuctl.vms.plan import find_vm

    hosts = set(selection.hosts)
    for spec in inventory.vms:
        if spec.name not in selection.vms:
            continue
        _key, vm, _why = find_vm(observed, spec.name, folder_path(spec.folder))
        if vm is not None and vm.host:
            hosts.add(vm.host)
        elif spec.host is not None and (known := _known(spec.host, observed)) is not None:
            hosts.add(known)
        elif spec.cluster is not None:
            hosts |= set(observed.clusters.get(spec.cluster, []))
    return hosts & set(observed.hosts)


# ------------------------------------------------------------------------------------------ the plan


def restricted(inventory: Inventory, resolved: dict[str, HostSpec], hosts: Iterable[str]) -> Inventory:
    """The inventory with host entries for `hosts` only (each host's merged settings as a `name:` entry) and
    without VM classes and namespaces; its VM entries stay (the planner is told which to plan)."""
    entries = [_named(resolved[h], h) for h in sorted(hosts) if h in resolved]
    return inventory.model_copy(update={"hosts": entries, "vm_classes": [], "namespaces": []})


def _named(spec: HostSpec, host: str) -> HostSpec:
    return spec if spec.name == host else spec.model_copy(update={"cluster": None, "name": host})


def only_vms(inventory: Inventory, vms: set[str]) -> Inventory:
    """The inventory with only these VM entries (the apply's VM stage plans them again after the hosts)."""
    return inventory.model_copy(update={"vms": [v for v in inventory.vms if v.name in vms]})


def closure(the_plan: Plan, hosts: set[str], vms: set[str]) -> tuple[set[str], set[str], dict[str, str]]:
    """(hosts, VMs, VMs pulled in -> the host handing them over): the selected hosts with every host a VM in
    scope waits for, and the VMs a host change of those hosts hands to their own VM change."""
    kept = set(hosts)
    for change in the_plan.changes:
        if change.vm in vms:
            kept |= set(change.depends_on_hosts)
    handed = {c.target: c.host for c in the_plan.host_changes
              if c.host in kept and c.kind == ChangeKind.EVACUATE and isinstance(c.new, EvacuationAction)
              and c.new.kind == EvacuationKind.HAND_OVER}
    return kept, vms | set(handed), handed


def settle(selection: Selection, candidates: set[str],
           plan_for: Callable[[set[str], set[str]], Plan]) -> tuple[Plan, set[str], set[str], dict[str, str]]:
    """Plan the selection, grow it by its closure and plan again until it no longer grows: (the plan, the hosts
    kept, the VMs in scope, the VMs pulled in -> the host handing them over). `plan_for(hosts, vms)` plans those
    hosts' entries and those VMs. The first plan takes every candidate host, so a VM's dependencies are seen."""
    kept, vms = set(candidates), set(selection.vms)
    handed: dict[str, str] = {}
    for _ in range(4):  # the closure only grows within the candidates: it settles in two or three rounds
        the_plan = plan_for(kept, vms)
        wanted, more, handed = closure(the_plan, selection.hosts, vms)
        if wanted == kept and more == vms:
            break
        kept, vms = wanted, more
    return the_plan, kept, vms, handed


def result(scope: Scope, selection: Selection, the_plan: Plan, kept: set[str], vms: set[str],
           handed: dict[str, str], inventory_hosts: Iterable[str], inventory: Inventory) -> ScopeResult:
    pulled = sorted(kept - selection.hosts)
    needs = {h: sorted(c.vm for c in the_plan.changes if c.vm in vms and h in c.depends_on_hosts) for h in pulled}
    return ScopeResult(
        scope=scope,
        selected_hosts=sorted(selection.hosts),
        selected_vms=sorted(selection.vms),
        pulled_in_hosts=needs,
        pulled_in_vms={vm: host for vm, host in sorted(handed.items()) if vm not in selection.vms},
        out_of_scope_hosts=sorted(set(inventory_hosts) - kept),
        out_of_scope_vms=sorted(v.name for v in inventory.vms if v.name not in vms),
        vm_classes_left_out=bool(inventory.vm_classes or inventory.namespaces),
        unmatched=list(selection.unmatched),
    )
