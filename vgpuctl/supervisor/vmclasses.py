"""VM classes with vGPUs and supervisor namespaces: the pure plan between the inventory's sections
(vgpuctl.inventory.classes) and what vCenter shows through the Automation REST API (vgpuctl.records.classes).
No I/O.

What is created, updated or left alone, and the plan's checks: docs/k8s.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, field
from typing import Any

from vgpuctl.inventory.classes import InventorySections, NamespaceSpec, VmClassSpec
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import FieldChange, Observed, ObservedHost, Op
from vgpuctl.profiles import (
    class_mmio_size_gb,
    max_vgpus_per_vm,
    mmio_size_gb,
    parse_profile,
    spellings,
)
from vgpuctl.records.classes import ClassState, NamespaceState, SupervisorState

USE_64BIT_MMIO = "pciPassthru.use64bitMMIO"
MMIO_SIZE = "pciPassthru.64bitMMIOSizeGB"


def desired_class(spec: VmClassSpec) -> ClassState:
    """The class the inventory asks for: memory fully reserved with vGPUs. 64-bit MMIO for large BARs is left to
    vm-operator (it sets 64-bit MMIO and 512 GB on VMs with PCI devices unless the class says otherwise), unless
    the vGPUs need more (profiles.class_mmio_size_gb) or the inventory's extra_config sets it."""
    profiles = [parse_profile(p) for p in spec.vgpu_profiles]
    extra: dict[str, str] = {}
    size = class_mmio_size_gb(profiles) if any(p.large_bar for p in profiles) else None
    if size is not None:
        extra = {USE_64BIT_MMIO: "TRUE", MMIO_SIZE: str(size)}
    extra.update(spec.extra_config)
    devices = profiles or spec.network
    reservation = spec.memory_reservation if spec.memory_reservation is not None else (100 if devices else 0)
    return ClassState(
        name=spec.name,
        cpus=spec.cpus or 0,
        memory_mb=int((spec.memory_gb or 0) * 1024),
        cpu_reservation=spec.cpu_reservation,
        memory_reservation=reservation,
        vgpus=[p.name for p in profiles],
        extra_config=extra,
        direct_path=[n.key for n in spec.network],
    )


# ----------------------------------------------------------------------------------------------- plan


@dataclass
class ClassChange:
    """Create (+), update (~) or delete (-) one VM class; apply sends it as one request."""

    op: Op
    name: str
    fields: list[FieldChange] = field(default_factory=list)
    vgpus_added: list[str] = field(default_factory=list)
    vgpus_removed: list[str] = field(default_factory=list)
    extra_config: dict[str, str | None] = field(default_factory=dict)  # None: the key goes away
    desired: ClassState | None = None  # the whole class after the change (None for a delete)
    nics_added: list[str] = field(default_factory=list)  # Dynamic DirectPath devices, `vvvv:dddd[@label]`
    nics_removed: list[str] = field(default_factory=list)


@dataclass
class NamespaceChange:
    """Class associations added to and removed from one namespace; apply sends them as one request."""

    namespace: str
    add: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)


@dataclass
class SupervisorPlan:
    class_changes: list[ClassChange] = field(default_factory=list)
    namespace_changes: list[NamespaceChange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.class_changes and not self.namespace_changes

    def ordered(self) -> list[ClassChange | NamespaceChange]:
        """Apply order: classes are created or updated before namespaces use them, deleted after."""
        first = [c for c in self.class_changes if c.op != Op.REMOVE]
        last = [c for c in self.class_changes if c.op == Op.REMOVE]
        return [*first, *self.namespace_changes, *last]

    def summary(self) -> dict[str, int]:
        ops = Counter(c.op for c in self.class_changes)
        return {
            "classes_create": ops[Op.ADD],
            "classes_update": ops[Op.CHANGE],
            "classes_delete": ops[Op.REMOVE],
            "namespaces_change": len(self.namespace_changes),
            "errors": len(self.errors),
            "warnings": len(self.warnings),
        }

    def to_dict(self) -> dict[str, Any]:
        def change(c: ClassChange) -> dict[str, Any]:
            d = asdict(c)
            d["op"] = str(c.op)
            d["fields"] = [{**asdict(f), "op": str(f.op)} for f in c.fields]
            return d

        return {
            "kind": "supervisor_plan",
            "class_changes": [change(c) for c in self.class_changes],
            "namespace_changes": [asdict(n) for n in self.namespace_changes],
            "errors": list(self.errors),
            "warnings": list(self.warnings),
            "summary": self.summary(),
        }


def plan_supervisor(inv: InventorySections, state: SupervisorState, observed: Observed) -> SupervisorPlan:
    """Inventory sections x REST state x observed hosts -> SupervisorPlan.

    `observed` gives each cluster's hosts and the profiles they offer; pass the prediction after planned host
    changes (vgpuctl.hosts.plan.predict_observed) so that a GPU switched to MIG offers its MIG profiles."""
    plan = SupervisorPlan()
    specs = {s.name: s for s in inv.vm_classes}
    desired = {n: desired_class(s) for n, s in specs.items() if s.state == "present"}
    for name in sorted(specs):
        change = _class_change(name, desired.get(name), state.classes.get(name))
        if change is not None:
            plan.class_changes.append(change)
    users = _plan_namespaces(inv.namespaces, specs, state, plan)
    for name in sorted(desired):
        _check_class(desired[name], users.get(name, []), state, observed, plan)
        _check_mmio(specs[name], plan)
    for name in sorted(n for n, s in specs.items() if s.state == "absent"):
        _check_absent(name, inv.namespaces, state, plan)
    return plan


def _class_change(name: str, want: ClassState | None, have: ClassState | None) -> ClassChange | None:
    if want is None:
        return ClassChange(Op.REMOVE, name) if have is not None else None
    if have is None:
        return ClassChange(Op.ADD, name, vgpus_added=list(want.vgpus), extra_config=dict(want.extra_config),
                           desired=want, nics_added=list(want.direct_path))
    fields = [
        FieldChange(label, old, new)
        for label, old, new in (
            ("cpus", have.cpus, want.cpus),
            ("memoryMB", have.memory_mb, want.memory_mb),
            ("cpu_reservation", have.cpu_reservation, want.cpu_reservation),
            ("memory_reservation", have.memory_reservation, want.memory_reservation),
        )
        if old != new
    ]
    have_n, want_n = Counter(have.vgpus), Counter(want.vgpus)
    removed = sorted((have_n - want_n).elements())
    added = sorted((want_n - have_n).elements())
    extra: dict[str, str | None] = {k: v for k, v in want.extra_config.items() if have.extra_config.get(k) != v}
    extra.update({k: None for k in have.extra_config if k not in want.extra_config})
    nics_have, nics_want = Counter(have.direct_path), Counter(want.direct_path)
    nics_added = sorted((nics_want - nics_have).elements())
    nics_removed = sorted((nics_have - nics_want).elements())
    if not (fields or removed or added or extra or nics_added or nics_removed):
        return None
    return ClassChange(Op.CHANGE, name, fields, added, removed, extra, want, nics_added, nics_removed)


def _plan_namespaces(
    namespaces: Iterable[NamespaceSpec], specs: Mapping[str, VmClassSpec], state: SupervisorState,
    plan: SupervisorPlan,
) -> dict[str, list[NamespaceState]]:
    """Namespace changes; returns, per class the inventory names, the namespaces that will use it."""
    users: dict[str, list[NamespaceState]] = {}
    named = set()
    for ns in namespaces:
        named.add(ns.name)
        have = state.namespaces.get(ns.name)
        if have is None:
            plan.errors.append(f"namespace {ns.name}: does not exist (vgpuctl does not create namespaces)")
            continue
        cluster = state.supervisor_clusters.get(have.cluster)
        if cluster is None:
            plan.errors.append(f"namespace {ns.name}: its cluster {have.cluster} is not a supervisor cluster")
            continue
        if ns.supervisor is not None and ns.supervisor != cluster:
            where = ("which is not a supervisor cluster" if ns.supervisor not in state.supervisor_clusters.values()
                     else "")
            plan.errors.append(f"namespace {ns.name}: is on supervisor cluster {cluster}, the inventory says "
                               f"{ns.supervisor}" + (f" ({where})" if where else ""))
            continue
        for name in ns.vm_classes:
            if name not in specs and name not in state.classes:
                plan.errors.append(f"namespace {ns.name}: VM class {name} is neither in vm_classes nor in vCenter")
        wanted = set(ns.vm_classes)
        add = sorted(wanted - set(have.vm_classes))
        remove = sorted(c for c in have.vm_classes if c in specs and c not in wanted)
        if add or remove:
            plan.namespace_changes.append(NamespaceChange(ns.name, add, remove))
        for name in wanted:
            users.setdefault(name, []).append(have)
    for have in state.namespaces.values():  # namespaces left alone keep using the classes they have
        if have.name not in named:
            for name in have.vm_classes:
                if name in specs:
                    users.setdefault(name, []).append(have)
    return users


def _check_mmio(spec: VmClassSpec, plan: SupervisorPlan) -> None:
    """An inventory's own MMIO size below what the class's vGPUs need is kept (the inventory wins), with a
    warning: vm-operator takes the class's value over its own default."""
    profiles = [parse_profile(p) for p in spec.vgpu_profiles]
    set_gb = spec.extra_config.get(MMIO_SIZE)
    if not set_gb or not any(p.large_bar for p in profiles):
        return
    need = mmio_size_gb(profiles)
    if set_gb.isdigit() and int(set_gb) < need:
        plan.warnings.append(f"vm class {spec.name}: extra_config sets {MMIO_SIZE} to {set_gb}, below the {need} GB "
                             "its vGPUs' GPUs need (NVIDIA's MMIO table); vm-operator will use it as set")


def _check_class(
    want: ClassState, users: list[NamespaceState], state: SupervisorState, observed: Observed, plan: SupervisorPlan
) -> None:
    _check_nics(want, users, state, observed, plan)
    if not want.vgpus:
        return
    if not users:
        plan.warnings.append(f"vm class {want.name}: no namespace uses it, so no host was checked for its vGPUs")
        return
    for ns in sorted(users, key=lambda n: n.name):
        cluster = state.supervisor_clusters.get(ns.cluster)
        if cluster is None:  # a named namespace there is an error already; another one cannot be checked
            plan.warnings.append(f"vm class {want.name}: namespace {ns.name} is on {ns.cluster}, which is not a "
                                 "supervisor cluster; its hosts were not checked")
            continue
        problem = _offer_problem(want, cluster, observed)
        if problem:
            plan.errors.append(f"vm class {want.name}: {problem} (namespace {ns.name})")


def _check_nics(want: ClassState, users: list[NamespaceState], state: SupervisorState, observed: Observed,
                plan: SupervisorPlan) -> None:
    """A warning when no host of a supervisor cluster that uses the class has a NIC of each of its Dynamic
    DirectPath ids enabled for passthrough (the VMs of the class could not power on there)."""
    for key in sorted(set(want.direct_path)):
        vendor, device = (int(x, 16) for x in key.split("@", 1)[0].split(":"))
        for ns in sorted(users, key=lambda n: n.name):
            cluster = state.supervisor_clusters.get(ns.cluster)
            hosts = [observed.hosts[h] for h in observed.clusters.get(cluster or "", []) if h in observed.hosts]
            if cluster and not any(n.passthru_enabled and n.vendor_id == vendor and n.device_id == device
                                   for h in hosts for n in h.nics):
                plan.warnings.append(f"vm class {want.name}: no host of supervisor cluster {cluster} has a NIC "
                                     f"{key} enabled for passthrough (namespace {ns.name})")


def _offer_problem(want: ClassState, cluster: str, observed: Observed) -> str | None:
    hosts = [observed.hosts[h] for h in observed.clusters.get(cluster, []) if h in observed.hosts]
    if not hosts:
        return f"supervisor cluster {cluster} has no observed hosts"
    needed = sorted(set(want.vgpus))
    offering = [h for h in hosts if all(p in h.offered_profiles for p in needed)]
    if not offering:
        offered = sorted({p for h in hosts for p in h.offered_profiles})
        other = sorted({s for p in needed for s in spellings(p) if s != p and s in offered})
        hint = f"; the hosts spell it {', '.join(other)}: use that name" if other else ""
        return (f"no host of supervisor cluster {cluster} offers {', '.join(needed)} in its current or planned "
                f"GPU mode (offered: {', '.join(offered) or 'none'}){hint}")
    limit = max(_limit(h) for h in offering)
    if len(want.vgpus) > limit:
        return f"{len(want.vgpus)} vGPUs exceed vSphere's limit of {limit} per VM on supervisor cluster {cluster}"
    return None


def _limit(host: ObservedHost) -> int:
    by_version = max_vgpus_per_vm(host.api_version)
    return min(by_version, host.max_vgpus_per_vm) if host.max_vgpus_per_vm > 0 else by_version


def _check_absent(name: str, namespaces: Iterable[NamespaceSpec], state: SupervisorState,
                  plan: SupervisorPlan) -> None:
    named = {ns.name for ns in namespaces}
    for ns in sorted(state.namespaces.values(), key=lambda n: n.name):
        if name in ns.vm_classes and ns.name not in named:
            plan.errors.append(f"vm class {name}: state is absent but namespace {ns.name}, which the inventory "
                               "does not name, still uses it")
