"""What host changes do to the VMs on the host, and where unfinished work is taken up again: the orchestration
around the settings (vgpuctl.settings), pure.

A host that enters maintenance mode is emptied first: each running VM gets an evacuation change whose new
value is an EvacuationAction (restore after, hand over to its own VM change, or migrate to a named host);
apply reads that action, never text. A host an unfinished apply left (its work record) gets a resume change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from vgpuctl.domain import (
    AdapterType,
    ChangeKind,
    Evacuate,
    EvacuationKind,
    Phase,
    Power,
    PowerState,
)
from vgpuctl.farm.predict import predict_host
from vgpuctl.farm.state import Request, farm_from_observed, place_farm
from vgpuctl.model import HOST_TARGET, EvacuationAction, HostChange, Observed, ObservedHost, ObservedVm
from vgpuctl.netrules import network_rules
from vgpuctl.records.work import WORK_FIELD, describe_record, parse_record
from vgpuctl.settings import setting_of
from vgpuctl.settings.base import HostPlan, names

if TYPE_CHECKING:
    from vgpuctl.farm.rolling import Rolling
    from vgpuctl.farm.state import FarmState
    from vgpuctl.inventory import HostSpec, VmSpec

HOT_MIGRATE_OPTION = "vgpu.hotmigrate.enabled"  # vCenter advanced setting: vMotion of running vGPU VMs


def needs_maintenance(changes: Sequence[HostChange]) -> bool:
    return any(c.disruptive for c in changes)


def needs_reboot(changes: Sequence[HostChange]) -> bool:
    return any(c.needs_reboot for c in changes)


def setting_changes(changes: Iterable[HostChange]) -> list[HostChange]:
    """The changes of host settings (what apply writes): evacuations and resumptions left out."""
    return [c for c in changes if setting_of(c.kind) is not None]


class Migration:
    """Where running VMs of a host entering maintenance can go: another connected host of its cluster that is
    not changed by the same plan and, for vGPU VMs (when vCenter allows their vMotion), offers their profiles
    and has room for them (placement, VM after VM)."""

    def __init__(self, observed: Observed, changing: set[str], vgpu_migration: bool):
        self.observed, self.changing, self.vgpu_migration = observed, changing, vgpu_migration
        self._state: FarmState | None = None

    def target(self, vm: ObservedVm, host: ObservedHost) -> tuple[str | None, str]:
        """(destination, "") or (None, why not)."""
        cluster = host.cluster or ""
        others = [
            h
            for h in self.observed.clusters.get(cluster, [])
            if h != host.name and h not in self.changing and self.observed.host_usable(h)
        ]
        if not others:
            return None, f"no other usable host in cluster {cluster or '(none)'} that this plan leaves unchanged"
        if (stays := _stays_on_its_host(vm)) is not None:
            return None, stays
        profiles = [d.profile for d in vm.vgpus]
        if not profiles:
            return min(others, key=lambda h: (sum(1 for v in vms_on(self.observed, h) if running(v)), h)), ""
        if not self.vgpu_migration:
            return None, f"vCenter does not allow vMotion of running vGPU VMs ({HOT_MIGRATE_OPTION} is not true)"
        offering = [h for h in others if set(profiles) <= set(self.observed.hosts[h].offered_profiles)]
        if not offering:
            return None, f"no other host of cluster {cluster} offers {', '.join(sorted(set(profiles)))}"
        if self._state is None:
            self._state = farm_from_observed(self.observed)
        grouped = any(d.device_group_key is not None for d in vm.vgpus)
        placed = place_farm(self._state, [Request(vm.name, profiles, offering, grouped)])[vm.name]
        return (placed.host, "") if placed.ok else (None, f"no room on {', '.join(offering)}: {placed.reason}")


class RollingMigration(Migration):
    """Where a running VM of a host leaving service in a step of a rolling window can go: a host of its cluster in
    service at that moment (not leaving in the same step, not `barred`), where its vGPUs fit on the cluster as it
    is then, with the VMs earlier steps moved there (vgpuctl.farm.rolling); hosts in `first` are tried first, hosts
    in `later` last (hosts already done, and hosts a later step empties: a VM moved is not moved again where that
    can be helped). `accepting` may narrow the hosts further (the driver upgrade window: the hosts whose vGPU
    Manager accepts the VM's guest driver)."""

    def __init__(self, rolling: Rolling, batch: Sequence[str], vgpu_migration: bool, *,
                 first: Iterable[str] = (), later: Iterable[str] = (), barred: Iterable[str] = ()):
        super().__init__(rolling.now, set(batch), vgpu_migration)
        self.rolling, self.batch = rolling, list(batch)
        self.first, self.later, self.barred = set(first), set(later), set(barred)

    def accepting(self, vm: ObservedVm, hosts: list[str]) -> tuple[list[str], list[str]]:
        """The hosts the VM may run on, and why not the others (each a phrase naming the host)."""
        return hosts, []

    def target(self, vm: ObservedVm, host: ObservedHost) -> tuple[str | None, str]:
        cluster = host.cluster or "(none)"
        away = f"while {', '.join(self.batch)} {'is' if len(self.batch) == 1 else 'are'} in maintenance"
        others = sorted((h for h in self.rolling.others(host.name) if h not in self.barred),
                        key=lambda h: (h not in self.first, h in self.later, h))
        if not others:
            return None, f"no other host of cluster {cluster} is in service {away}"
        if (stays := _stays_on_its_host(vm)) is not None:
            return None, stays
        if not vm.vgpus:
            return others[0], ""
        if not self.vgpu_migration:
            return None, f"vCenter does not allow vMotion of running vGPU VMs ({HOT_MIGRATE_OPTION} is not true)"
        accepted, refused = self.accepting(vm, others)
        profiles = [d.profile for d in vm.vgpus]
        offering = [h for h in accepted if set(profiles) <= set(self.rolling.now.hosts[h].offered_profiles)]
        if not offering:
            why = "; ".join(refused) if refused and not accepted else (
                f"no host of cluster {cluster} in service {away} offers {', '.join(sorted(set(profiles)))}")
            return None, why
        placed = self.rolling.place(vm, offering)
        if placed.ok:
            return placed.host, ""
        wanted: dict[str, int] = {}
        for p in profiles:
            wanted[p] = wanted.get(p, 0) + 1
        missing = "; ".join(f"needs {n} x {p} free {away}; the rest of cluster {cluster} has "
                            f"{self.rolling.free(p, offering)}" for p, n in sorted(wanted.items()))
        return None, missing + (f" ({'; '.join(refused)})" if refused else "")


def _stays_on_its_host(vm: ObservedVm) -> str | None:
    """Why vSphere does not move the running VM to another host, or None: it has an SR-IOV adapter or a DirectPath
    I/O device (a passthrough NIC or another PCI device that is not a vGPU); a PVRDMA adapter moves
    (data/network.yaml, vmotion: vSphere Networking, "SR-IOV Support: Availability of Features" and "DirectPath
    I/O")."""
    rules = network_rules()
    if any(n.kind == AdapterType.SRIOV for n in vm.nics) and not rules.moves(AdapterType.SRIOV):
        return "it has an SR-IOV network adapter, and vSphere does not vMotion such VMs"
    if vm.other_passthrough and not rules.moves(AdapterType.PASSTHROUGH):
        return "it has a DirectPath I/O device, and vSphere does not migrate such VMs across hosts"
    return None


def vms_on(observed: Observed, host: str) -> list[ObservedVm]:
    """The VMs (not templates) registered on the host, by name."""
    return sorted((v for v in observed.vms.values() if v.host == host and not v.is_template), key=lambda v: v.name)


def running(vm: ObservedVm) -> bool:
    return vm.power_state in (PowerState.ON, PowerState.SUSPENDED)


def plan_evacuation(
    spec: HostSpec,
    host: ObservedHost,
    observed: Observed,
    changes: Sequence[HostChange],
    listed: dict[str, VmSpec],
    migration: Migration | None = None,
    by_flag: bool = False,
) -> HostPlan:
    """What happens to the host's VMs when it enters maintenance mode for `changes`.

    A running VM whose vGPUs (after its own inventory change, if listed) the host offers after the change is
    evacuated: handed to its VM change when that re-profiles it, powered off for good when its entry says
    `power: off`, else powered off and on again with `evacuate: power-off`, moved to another host with
    `evacuate: migrate` (powered off instead only when its entry lets vgpuctl power it); with `evacuate: refuse`
    the running VMs are a plan error naming them (apply could not take the host into maintenance). A running
    VM whose vGPUs the host will not offer is an error naming the profiles it would offer, unless its entry
    says `power: off`; a powered-off one a warning. `by_flag`: the command line sets the evacuation (the `host`
    commands' --evacuate), so the messages name that flag instead of the inventory key.
    """
    result = HostPlan()
    if not needs_maintenance(changes) or host.in_maintenance:
        return result
    owners = [(c, setting_of(c.kind)) for c in changes]
    mode_change = any(s is not None and c.kind in s.offer_kinds for c, s in owners)
    after = predict_host(host, changes) if mode_change else host
    offered = set(after.offered_profiles)
    groups_end = any(s is not None and s.ends_nvlink_groups(c) for c, s in owners)
    refused: list[ObservedVm] = []
    for vm in vms_on(observed, host.name):
        entry = listed.get(vm.name)
        now = [d.profile for d in vm.vgpus]
        wanted = [str(p) for p in entry.vgpu_profiles] if entry is not None and entry.manages_vgpus else now
        problem = _cannot_run(vm, entry, wanted, offered, groups_end and sorted(wanted) == sorted(now))
        stays_off = entry is not None and entry.power == Power.OFF
        if problem and (mode_change or groups_end) and not stays_off:
            where = f"host {host.name}: VM {vm.name}"
            if running(vm):
                result.errors.append(
                    f"{where} {problem} after the change (offered then: {names(offered)}): "
                    "list it in the inventory with an offered profile, or with power: off, or power it off first"
                )
                continue
            result.warnings.append(f"{where} (powered off) {problem} after the change: it cannot power on there")
        if not running(vm):
            continue
        kind = _evacuation_kind(spec, entry, sorted(wanted) != sorted(now), stays_off)
        if kind == EvacuationKind.MIGRATE:
            result.extend(_plan_migration(host, vm, entry, migration or Migration(observed, {host.name}, False)))
        elif kind is not None:
            result.changes.append(_evacuate_change(host, vm, EvacuationAction(kind)))
        else:
            refused.append(vm)
    if refused:
        result.errors.append(_refused(host, changes, refused, by_flag))
    return result


def _evacuation_kind(spec: HostSpec, entry: VmSpec | None, reprofiled: bool, stays_off: bool) -> EvacuationKind | None:
    """What happens to a running VM: its own change takes it over, its entry keeps it off, or the host's evacuate
    policy decides (None: refuse)."""
    if stays_off:  # its own entry wants it off: the evacuation's power-off is that change
        return EvacuationKind.STAYS_OFF
    if entry is not None and reprofiled:
        return EvacuationKind.HAND_OVER
    if spec.maintenance.evacuate == Evacuate.POWER_OFF:
        return EvacuationKind.RESTORE_AFTER
    if spec.maintenance.evacuate == Evacuate.MIGRATE:
        return EvacuationKind.MIGRATE
    return None


def _refused(host: ObservedHost, changes: Sequence[HostChange], vms: Sequence[ObservedVm], by_flag: bool) -> str:
    kinds = ", ".join(sorted({str(c.kind) for c in changes if c.disruptive and c.kind != ChangeKind.EVACUATE}))
    listed = ", ".join(f"{v.name} ({', '.join(d.profile for d in v.vgpus)})" if v.vgpus else v.name for v in vms)
    return (f"host {host.name}: its {kinds} change needs maintenance mode, and these VMs run there: {listed}; "
            + refused_remedy(by_flag))


def refused_remedy(by_flag: bool) -> str:
    """What to do about running VMs that `refuse` keeps the host from evacuating, in the words the user set it
    with: the `host` commands' flag, or the inventory key."""
    if by_flag:
        return "--evacuate is refuse: stop them, or run again with --evacuate power-off or --evacuate migrate"
    return "maintenance.evacuate is refuse: stop them, set evacuate: power-off or migrate, or list them with power: off"


def _plan_migration(host: ObservedHost, vm: ObservedVm, entry: VmSpec | None, migration: Migration) -> HostPlan:
    result = HostPlan()
    dest, why = migration.target(vm, host)
    if dest is not None:
        result.changes.append(_evacuate_change(host, vm, EvacuationAction(EvacuationKind.MIGRATE, dest)))
    elif entry is not None and entry.power != Power.KEEP:
        result.changes.append(_evacuate_change(host, vm, EvacuationAction(EvacuationKind.RESTORE_AFTER)))
        result.warnings.append(
            f"host {host.name}: VM {vm.name} cannot migrate ({why}): powered off and on again "
            f"instead (its inventory entry has power: {entry.power})"
        )
    else:
        result.errors.append(
            f"host {host.name}: VM {vm.name} cannot migrate ({why}); list it in the inventory with power: restart "
            "to allow powering it off instead, or move or stop it first"
        )
    return result


def _cannot_run(
    vm: ObservedVm, entry: VmSpec | None, wanted: list[str], offered: set[str], loses_group: bool
) -> str | None:
    """Why the VM could not power on on the changed host (None when it can)."""
    missing = sorted(set(wanted) - offered)
    if missing:
        asks = "the inventory asks for" if entry is not None and entry.manages_vgpus else "uses"
        return f"{asks} {', '.join(missing)}, which the host will not offer"
    if loses_group and any(d.device_group_key is not None for d in vm.vgpus):
        return "uses an NVLink device group, which the host will not offer with NVLink disabled"
    return None


def _evacuate_change(host: ObservedHost, vm: ObservedVm, action: EvacuationAction) -> HostChange:
    profiles = ", ".join(d.profile for d in vm.vgpus)
    old = f"{vm.power_state} ({profiles})" if profiles else str(vm.power_state)
    return HostChange(host.name, ChangeKind.EVACUATE, vm.name, old, action, Phase.MAINTENANCE)


def evacuations(changes: Iterable[HostChange]) -> dict[str, EvacuationAction]:
    """VM name -> what its planned evacuation does."""
    return {c.target: c.new for c in changes if c.kind == ChangeKind.EVACUATE and isinstance(c.new, EvacuationAction)}


def gone_from_record(host: ObservedHost, existing: set[str]) -> list[str]:
    """A warning per VM of the host's work record that vCenter no longer has."""
    record = parse_record(host.name, host.custom_values.get(WORK_FIELD, ""))
    gone = [v for v in record.vms if v["moid"] not in existing] if record is not None else []
    return [f"host {host.name}: VM {v['name']} ({v['moid']}) of its unfinished work no longer exists: apply drops it "
            "from the work record" for v in gone]  # fmt: skip


def resume_change(host: ObservedHost, existing: set[str] | None = None) -> HostChange:
    """Finish what an unfinished apply left on the host (its work record says what; VMs not among the `existing`
    moids are gone and left out: apply drops them from the record)."""
    record = parse_record(host.name, host.custom_values.get(WORK_FIELD, ""))
    if record is not None:
        if existing is not None:
            record.vms = [v for v in record.vms if v["moid"] in existing]
        old = describe_record(record)
    else:
        old = "in maintenance (left by an unfinished apply)" if host.in_maintenance else "VMs to power on again"
    done = "done: out of maintenance, VMs powered on"
    return HostChange(host.name, ChangeKind.RESUME, HOST_TARGET, old, done, Phase.ONLINE)
