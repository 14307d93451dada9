"""What preflight read, as plain data: vCenter's about info, per host its access facts, vGPU Manager and SSH
probe, the session's privileges. `Scope` is which hosts and VMs the checks look at. The checks
(vgpuctl.preflight.checks) are pure functions of these."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import field
from enum import StrEnum

from vgpuctl.hosts.plan import resolve_hosts
from vgpuctl.hosts.status import shell_configured
from vgpuctl.inventory import HostSpec, Inventory, VmSpec
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed, folder_path
from vgpuctl.settings import SETTINGS
from vgpuctl.vms.plan import find_vm
from vgpuctl.vsphere.hostaccess import HostAccess


@dataclass(frozen=True)
class About:
    """vCenter's ServiceContent.about."""

    version: str  # 8.0.3
    api_version: str  # 8.0.3.0
    api_type: str = "VirtualCenter"  # VirtualCenter | HostAgent
    full_name: str = ""


@dataclass
class ManagerFacts:
    """A host's NVIDIA vGPU Manager: its driver version and VIB, where that was read, or why it was not."""

    version: str | None = None  # 550.90.05
    package: str | None = None  # `NVD-AIE_ESXi_8.0.0_Driver 550.90.05-1OEM.800.1.0.20613240`
    source: str | None = None  # what it was read from
    installed: bool | None = None  # None: no source could be read
    unread: list[str] = field(default_factory=list)  # why each source could not be read


class SshOutcome(StrEnum):
    OK = "ok"
    UNKNOWN_KEY = "unknown-key"  # the host key is not in known_hosts, or differs from it
    UNREACHABLE = "unreachable"  # refused, timed out, no route
    AUTH = "auth"  # the login was refused
    FAILED = "failed"  # connected, but the command failed


@dataclass(frozen=True)
class SshProbe:
    outcome: SshOutcome
    message: str = ""
    user: str = "root"


@dataclass
class PreflightFacts:
    about: About
    access: dict[str, HostAccess] = field(default_factory=dict)
    managers: dict[str, ManagerFacts] = field(default_factory=dict)
    ssh: dict[str, SshProbe] = field(default_factory=dict)
    exceptions: dict[str, list[str] | str] = field(default_factory=dict)  # lockdown exception users, or why not read
    granted: dict[tuple[str, str], bool] | None = None
    privileges_error: str | None = None


@dataclass
class Scope:
    """The hosts preflight checks (GPU hosts the inventory configures or places VMs on; every GPU host without an
    inventory), the merged host entries, where each inventory VM is or may be created, and which hosts' SSH the
    run needs (shell facts, or an SSH setup given explicitly)."""

    hosts: list[str]
    specs: dict[str, HostSpec] = field(default_factory=dict)
    vm_hosts: Mapping[str, list[str]] = field(default_factory=dict)
    shell: set[str] = field(default_factory=set)


def _needs_shell(spec: HostSpec) -> bool:
    """The entry sets what only the ESXi shell reads or writes (MIG, NVLink, the scheduler, ECC, ...)."""
    return any(s.reads_shell(spec) for s in SETTINGS)


def vm_hosts(inventory: Inventory, observed: Observed) -> dict[str, list[str]]:
    """Inventory VM -> the host it is on, or the hosts it may be created on (its host, its cluster's)."""
    return {vm.name: _vm_place(vm, observed) for vm in inventory.vms}


def _vm_place(vm: VmSpec, observed: Observed) -> list[str]:
    _, obs, _ = find_vm(observed, vm.name, folder_path(vm.folder))
    if obs is not None and obs.host:
        return [obs.host]
    if vm.host:
        return [vm.host]
    return sorted(observed.clusters.get(vm.cluster or "", []))


class _VmPlaces(Mapping[str, list[str]]):
    """vm_hosts, each VM's place found when it is asked for (a name names its entry's last VM, as there)."""

    def __init__(self, inventory: Inventory, observed: Observed):
        self._specs = {vm.name: vm for vm in inventory.vms}
        self._observed = observed
        self._found: dict[str, list[str]] = {}

    def __getitem__(self, name: str) -> list[str]:
        if name not in self._found:
            self._found[name] = _vm_place(self._specs[name], self._observed)
        return self._found[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)


def requirement_scope(inventory: Inventory | None, observed: Observed) -> Scope:
    """What checks.requirements reads of a scope (the merged host entries, where each VM is or may be created),
    each VM placed only when a requirement asks: plan and apply check vCenter's version, not each host."""
    if inventory is None:
        return Scope([])
    specs, _ = resolve_hosts(inventory.hosts, observed)
    return Scope([], specs, _VmPlaces(inventory, observed))


def scope_of(inventory: Inventory | None, observed: Observed, env: Mapping[str, str] | None = None) -> Scope:
    env = dict(os.environ) if env is None else dict(env)
    gpu_hosts = {n for n, h in observed.hosts.items() if h.gpus}
    if inventory is None:
        hosts = sorted(gpu_hosts)
        return Scope(hosts, shell=set(hosts) if shell_configured({}, env) else set())
    specs, _ = resolve_hosts(inventory.hosts, observed)
    placed = vm_hosts(inventory, observed)
    hosts = sorted(gpu_hosts & (set(specs) | {h for names in placed.values() for h in names}))
    configured = shell_configured(specs, env)
    shell = {h for h in hosts if configured or (h in specs and _needs_shell(specs[h]))}
    return Scope(hosts, specs, placed, shell)
