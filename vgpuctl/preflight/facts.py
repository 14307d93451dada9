"""What preflight read, as plain data: vCenter's about info, per host its access facts, vGPU Manager and SSH
probe, the session's privileges. `Scope` is which hosts and VMs the checks look at. The checks
(vgpuctl.preflight.checks) are pure functions of these."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from vgpuctl.inventory import HostSpec, Inventory
from vgpuctl.model import Observed
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
    vm_hosts: dict[str, list[str]] = field(default_factory=dict)
    shell: set[str] = field(default_factory=set)


def _needs_shell(spec: HostSpec) -> bool:
    """MIG, NVLink and scheduler settings are read and written in the ESXi shell."""
    return spec.nvlink is not None or spec.scheduler is not None or any(g.mode is not None for g in spec.gpus)


def vm_hosts(inventory: Inventory, observed: Observed) -> dict[str, list[str]]:
    """Inventory VM -> the host it is on, or the hosts it may be created on (its host, its cluster's)."""
    from vgpuctl.model import folder_path
    from vgpuctl.vms.plan import find_vm

    out: dict[str, list[str]] = {}
    for vm in inventory.vms:
        _, obs, _ = find_vm(observed, vm.name, folder_path(vm.folder))
        if obs is not None and obs.host:
            out[vm.name] = [obs.host]
        elif vm.host:
            out[vm.name] = [vm.host]
        else:
            out[vm.name] = sorted(observed.clusters.get(vm.cluster or "", []))
    return out


def scope_of(inventory: Inventory | None, observed: Observed, env: Mapping[str, str] | None = None) -> Scope:
    from vgpuctl.hosts.plan import resolve_hosts
    from vgpuctl.hosts.status import shell_configured

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
