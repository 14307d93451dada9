"""A driver upgrade window: hosts get a new NVIDIA vGPU Manager in an order that never puts a running VM on a
manager / guest driver pair NVIDIA does not list (vgpuctl.releases.pair). Pure.

NVIDIA's release notes ("Compatibility Requirements for the NVIDIA vGPU Manager and Guest VM Driver"): a guest
driver the host's vGPU Manager does not accept makes the vGPU fail to load. The window, for the hosts whose change
replaces their manager (a setting's `replaces_manager`):
1. before any host leaves service, every running vGPU VM on those hosts whose guest driver the new manager would
   refuse is moved to a release both its host's manager now and the new one accept: its guest group's own driver
   where both accept it, else the group's interim driver (`vgpu_guest_driver_interim_src`); none: a plan error
   naming the VM, the versions and the rule;
2. the hosts, in the batches apply takes them (max_unavailable at a time, by name), each emptied as its entry's
   evacuate policy says; a VM that migrates goes to a host of its cluster that is in service at that moment (not
   in the same batch), whose manager then accepts its guest driver, and where its vGPUs fit on the cluster as it is
   then, with the VMs earlier batches moved there (vgpuctl.farm.rolling); one that fits nowhere is a plan error
   naming what is missing; a VM powered off for the change must start again under the new manager;
3. after every host, the guest drivers of the running vGPU VMs on hosts whose entry names a manager move to their
   group's release, where the host's manager accepts it.
A VM's guest driver is the one its host reports (`nvidia-smi vgpu -q`), else the one its guest group declares; an
unknown one is a plan error (nothing proves the pair).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import EvacuationKind, WindowStage
from vgpuctl.farm.rolling import Rolling
from vgpuctl.hosts.evacuation import (
    RollingMigration,
    evacuations,
    needs_maintenance,
    plan_evacuation,
    running,
    vms_on,
)
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import GuestDriverMove, HostChange, Observed, ObservedVm, UpgradeWindow
from vgpuctl.releases import BranchRule, branch_of, branch_rule, branches, driver_version, pair
from vgpuctl.settings import SETTINGS, setting_of
from vgpuctl.settings.base import HostPlan, names
from vgpuctl.settings.facts import HostFacts, guest_drivers, running_manager

if TYPE_CHECKING:
    from vgpuctl.inventory import HostSpec, VmSpec
    from vgpuctl.inventory.schema import GuestsSpec

DRIVER_ROLE = "vgpu_guest_driver"
TARGET_VARS = (("vgpu_guest_driver_src", "vgpu_driver_src"), ("vgpu_guest_driver_sha256", "vgpu_driver_sha256"),
               ("vgpu_guest_driver_version", "vgpu_driver_version"))
INTERIM_VARS = (("vgpu_guest_driver_interim_src",), ("vgpu_guest_driver_interim_sha256",),
                ("vgpu_guest_driver_interim_version",))


@dataclass(frozen=True)
class Driver:
    """A guest driver a group can install: its version, its file and the file's sha256."""

    version: str
    src: str
    sha256: str


def _var(values: Mapping[str, Any], names_: tuple[str, ...]) -> str:
    return next((str(values[n]) for n in names_ if isinstance(values.get(n), str) and values[n]), "")


def group_driver(values: Mapping[str, Any], which: tuple[tuple[str, ...], ...]) -> Driver | None:
    """The group's driver (TARGET_VARS) or interim driver (INTERIM_VARS): its version from its version variable,
    else from its file's name; None without a file."""
    src, sha, version = (_var(values, n) for n in which)
    if not src or "{{" in src:
        return None
    found = driver_version(version) or driver_version(PurePath(src).name)
    return Driver(found, src, sha) if found else None


@dataclass
class WindowInput:
    """What the window is planned from."""

    observed: Observed
    specs: Mapping[str, HostSpec]
    facts: Mapping[str, HostFacts]
    plans: Mapping[str, HostPlan]  # each host's setting changes
    listed: Mapping[str, VmSpec]
    guests: GuestsSpec | None
    vgpu_migration: bool
    batches: list[list[str]] = field(default_factory=list)  # every changing host, in apply's batches


def wanted_managers(specs: Mapping[str, HostSpec]) -> dict[str, str]:
    """Host -> the vGPU Manager its entry names."""
    out = {}
    for host, spec in specs.items():
        found = next((v for s in SETTINGS if (v := s.wanted_manager(spec)) is not None), None)
        if found is not None:
            out[host] = found
    return out


def manager_changes(changes: Sequence[HostChange]) -> dict[str, str]:
    """Host -> the vGPU Manager a planned change replaces its own with."""
    out = {}
    for c in changes:
        s = setting_of(c.kind)
        if s is not None and (v := s.replaces_manager(c)) is not None:
            out[c.host] = v
    return out


def apply_batches(changing: Mapping[str, Sequence[HostChange]], specs: Mapping[str, HostSpec]) -> list[list[str]]:
    """The batches apply takes the hosts with changes in: by name, as many at once as the least max_unavailable of
    their entries (vgpuctl.hosts.apply.apply_host_changes)."""
    hosts = sorted(h for h, c in changing.items() if c)
    if not hosts:
        return []
    width = max(1, min(specs[h].maintenance.max_unavailable if h in specs else 1 for h in hosts))
    return [hosts[i:i + width] for i in range(0, len(hosts), width)]


class _Window:
    """One window being planned: the guest drivers VM by VM, and the cluster step by step."""

    def __init__(self, inp: WindowInput, new: dict[str, str]):
        self.inp, self.new = inp, new
        self.now = {h: m for h in inp.observed.hosts if (m := running_manager(inp.facts.get(h))) is not None}
        for h, plan in inp.plans.items():  # a host whose GPUs were not read: the change's old value
            for c in plan.changes:
                if h in new and h not in self.now and isinstance(c.old, str) and branch_of(c.old):
                    self.now[h] = c.old
        self.driver: dict[str, str] = {}
        self.result = HostPlan(window=UpgradeWindow(managers={h: [self.now.get(h, "unknown"), v]
                                                            for h, v in sorted(new.items())}))

    @property
    def window(self) -> UpgradeWindow:
        assert self.result.window is not None
        return self.result.window

    def group(self, vm: str) -> tuple[str, Mapping[str, Any]] | None:
        entry = self.inp.listed.get(vm)
        guests = self.inp.guests
        if entry is None or entry.guest is None or entry.guest.group is None or guests is None:
            return None
        spec = guests.groups.get(entry.guest.group)
        if spec is None or (DRIVER_ROLE not in spec.roles and not group_driver(spec.vars, TARGET_VARS)):
            return None
        return entry.guest.group, spec.vars

    def reported(self, vm: ObservedVm) -> str | None:
        """The guest driver the VM runs: its host's report, else its group's declared one."""
        found = guest_drivers(self.inp.facts.get(vm.host or "")).get(vm.name)
        if found:
            return found
        group = self.group(vm.name)
        declared = group_driver(group[1], TARGET_VARS) if group is not None else None
        return declared.version if declared is not None else None

    def manager_at(self, host: str, done: set[str]) -> str | None:
        """The vGPU Manager a host runs once the hosts in `done` have their new one."""
        return self.new[host] if host in done and host in self.new else self.now.get(host)

    # ---------------------------------------------------------------- 1. guest drivers first

    def guests_before(self) -> None:
        """Every running vGPU VM on a host that gets a new manager: its driver, and a move where the new one
        refuses it."""
        for host in self.window.hosts:
            for vm in vms_on(self.inp.observed, host):
                if not (running(vm) and vm.vgpus):
                    continue
                driver = self.reported(vm)
                if driver is None:
                    self.result.errors.append(
                        f"host {host}: VM {vm.name} runs vGPUs and its guest driver is unknown (its host reports "
                        "none and its guest group declares none): nothing shows it stays on a pair NVIDIA lists "
                        f"when the host gets vGPU Manager {self.new[host]}; let it load its driver (nvidia-smi vgpu "
                        "-q on the host shows it), or set vgpu_guest_driver_version in its guest group")
                    continue
                self.driver[vm.name] = driver
                if not pair(self.new[host], driver).ok:
                    self._move_before(vm, host, driver)

    def _move_before(self, vm: ObservedVm, host: str, driver: str) -> None:
        old, new = self.now.get(host), self.new[host]
        refused = pair(new, driver)
        group = self.group(vm.name)
        candidates = ([d for d in (group_driver(group[1], TARGET_VARS), group_driver(group[1], INTERIM_VARS)) if d]
                      if group is not None else [])
        fits = [d for d in candidates if old is not None and pair(old, d.version).ok and pair(new, d.version).ok]
        if group is not None and fits:
            d = fits[0]
            why = (f"vGPU Manager {new} does not accept {driver} ({refused.rule}); {d.version} runs under {old} and "
                   f"under {new}")
            self.window.before.append(GuestDriverMove(vm.name, group[0], WindowStage.BEFORE, driver, d.version,
                                                      d.src, d.sha256, why))
            self.driver[vm.name] = d.version
            return
        tried = "; ".join(f"{d.version}: {pair(old or 'unknown', d.version).rule if old else 'manager unknown'}"
                          if not pair(old or "", d.version).ok else f"{d.version}: {pair(new, d.version).rule}"
                          for d in candidates) or ("it has no guest group with the vgpu_guest_driver role"
                                                   if group is None else "its group names no driver file")
        self.result.errors.append(
            f"host {host}: VM {vm.name}: its guest driver {driver} would run under vGPU Manager {new}, which NVIDIA "
            f"does not list ({refused.rule}); no guest driver vgpuctl can give it first runs under both {old} and "
            f"{new} ({tried}); {_both_hint(old, new)}")

    # ---------------------------------------------------------------- 2. the hosts, batch by batch

    def hosts(self, specs: Mapping[str, HostSpec], vgpu_migration: bool) -> Rolling:
        """Each batch's evacuations on the cluster as it is at that moment; returns the farm after the window."""
        rolling = Rolling(self.inp.observed)
        done: set[str] = set()
        for batch in self.inp.batches:
            leaving = {h for h in batch if needs_maintenance(self.inp.plans[h].changes)} if batch else set()
            rolling.begin(leaving)
            migration = _WindowMigration(self, rolling, batch, done, vgpu_migration)
            for host in batch:
                if host not in self.new:
                    continue
                self._empty(host, specs[host], rolling, migration, done)
            moves = rolling.end()
            done |= set(batch)
            self._restored(batch, rolling, moves, done)
        return rolling

    def _empty(self, host: str, spec: HostSpec, rolling: Rolling, migration: _WindowMigration, done: set[str]) -> None:
        plan = self.inp.plans[host]
        observed_host = rolling.now.hosts[host]
        evac = plan_evacuation(spec, observed_host, rolling.now, plan.changes, dict(self.inp.listed), migration)
        for vm, action in evacuations(evac.changes).items():
            if action.kind == EvacuationKind.MIGRATE and action.destination and not rolling.now.vms[vm].vgpus:
                rolling.moved(vm, action.destination)
        self.result.extend(HostPlan(evac.changes, evac.errors, evac.warnings))

    def _restored(self, batch: list[str], rolling: Rolling, moves: dict[str, str], done: set[str]) -> None:
        """VMs that stayed on a host of the batch (powered off for its change) start again under its new manager."""
        for host in batch:
            if host not in self.new:
                continue
            for vm in vms_on(rolling.now, host):
                driver = self.driver.get(vm.name)
                if vm.name in moves or not running(vm) or not vm.vgpus or driver is None:
                    continue
                verdict = pair(self.new[host], driver)
                if not verdict.ok:
                    self.result.errors.append(f"host {host}: VM {vm.name} starts again after the change under vGPU "
                                              f"Manager {self.new[host]} with guest driver {driver}: {verdict.rule}")

    # ---------------------------------------------------------------- 3. guest drivers to their release

    def guests_after(self, rolling: Rolling, wanted: Mapping[str, str]) -> None:
        """Running vGPU VMs on hosts whose entry names a manager: their group's driver, where that host's manager
        (once the window is over) accepts it."""
        done = set(self.new)
        for host in sorted(wanted):
            manager = self.manager_at(host, done)
            for vm in vms_on(rolling.now, host):
                group = self.group(vm.name)
                target = group_driver(group[1], TARGET_VARS) if group is not None else None
                driver = self.driver.get(vm.name) or (self.reported(vm) if running(vm) else None)
                if group is None or target is None or not running(vm) or not vm.vgpus or driver is None:
                    continue
                if driver == target.version or manager is None:
                    continue
                verdict = pair(manager, target.version)
                if not verdict.ok:
                    self.result.warnings.append(f"host {host}: VM {vm.name} keeps guest driver {driver}: its group's "
                                                f"{target.version} does not run there ({verdict.rule})")
                    continue
                self.window.after.append(GuestDriverMove(vm.name, group[0], WindowStage.AFTER, driver,
                                                         target.version, target.src, target.sha256, verdict.rule))


def _both_hint(old: str | None, new: str) -> str:
    """Which branches NVIDIA lists with both managers, for the fix."""
    ob, nb = branch_of(old or ""), branch_of(new)
    ok = {BranchRule.SAME, BranchRule.PREVIOUS, BranchRule.PREVIOUS_LTS}
    both = [b.branch for b in branches() if ob and nb and branch_rule(ob, b.branch) in ok
            and branch_rule(nb, b.branch) in ok]
    if not both:
        return "no branch runs under both: upgrade in two windows, or power the VM off for the change"
    listed = ", ".join(f"R{b}" for b in both)
    return (f"give its guest group a driver of {listed} as vgpu_guest_driver_interim_src (with its sha256): "
            "a branch NVIDIA lists with both")


class _WindowMigration(RollingMigration):
    """Where a running VM of a host in the window's current batch can go: a host of its cluster in service now (not
    in the batch; not changed by the plan unless it is a window host of another batch), whose vGPU Manager at that
    moment accepts the VM's guest driver, where its vGPUs fit on the cluster as it is then. Hosts already upgraded
    first: a VM moved there is not moved again."""

    def __init__(self, window: _Window, rolling: Rolling, batch: list[str], done: set[str], vgpu_migration: bool):
        changed = {h for b in window.inp.batches for h in b}
        super().__init__(rolling, batch, vgpu_migration, first=done, later=set(window.new) - done,
                         barred=changed - set(window.new))
        self.w, self.done = window, done

    def accepting(self, vm: ObservedVm, hosts: list[str]) -> tuple[list[str], list[str]]:
        """The hosts whose vGPU Manager at this moment accepts the VM's guest driver, and why the others do not."""
        driver = self.w.driver.get(vm.name)
        accepted: list[str] = []
        refused: list[str] = []
        for h in hosts:
            manager = self.w.manager_at(h, self.done)
            if driver is None or manager is None:
                refused.append(f"{h}: {'its vGPU Manager' if manager is None else 'the guest driver'} is unknown")
                continue
            verdict = pair(manager, driver)
            (accepted if verdict.ok else refused).append(h if verdict.ok else f"{h}: {verdict.rule}")
        return accepted, refused


def plan_window(inp: WindowInput) -> HostPlan | None:
    """The window of the hosts whose planned change replaces their vGPU Manager, and the guest drivers of the hosts
    whose entry names one (None: no entry names a manager). Its evacuation changes replace the evacuations the
    hosts would get without it."""
    wanted = wanted_managers(inp.specs)
    if not wanted:
        return None
    new = {h: v for plan in inp.plans.values() for h, v in manager_changes(plan.changes).items()}
    w = _Window(inp, new)
    w.window.batches = [[h for h in b if h in new] for b in inp.batches if any(h in new for h in b)]
    w.guests_before()
    rolling = w.hosts(inp.specs, inp.vgpu_migration)
    w.guests_after(rolling, wanted)
    return w.result


def describe_stage(moves: Sequence[GuestDriverMove]) -> str:
    """`train-01 550.90.07 -> 535.161.07, ...`: a stage of moves for messages."""
    return names(f"{m.vm} {m.old} -> {m.new}" for m in moves)


__all__ = ["WindowInput", "apply_batches", "describe_stage", "group_driver", "manager_changes", "plan_window",
           "wanted_managers"]
