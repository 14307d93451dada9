"""What preflight reads before it checks: vCenter's about info, each host's access facts (one property read),
the session's privileges (HasPrivilegeOnEntities, once for most plans: privileges.requests), each host's vGPU
Manager (its software packages through the API, else `esxcli software vib list` over SSH), an SSH login per host whose
SSH the run needs, and the lockdown exception users where that matters. Hosts are read in parallel; a host that
cannot answer gets its reason, never a failed command."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from vgpuctl.domain import ConnectionState
from vgpuctl.errors import SshAuthError, SshHostKeyError, SshUnreachable, VgpuctlError, VsphereFault
from vgpuctl.esxi.facts import VIBS
from vgpuctl.hosts.facts import open_shell, shell_runner, ssh_settings
from vgpuctl.model import Observed, Plan
from vgpuctl.preflight import branches, privileges
from vgpuctl.preflight.facts import About, ManagerFacts, PreflightFacts, Scope, SshOutcome, SshProbe
from vgpuctl.vsphere.hostaccess import (
    has_privileges,
    lockdown_exceptions,
    read_host_access,
    software_packages,
    vm_storage,
)

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

T = TypeVar("T")
WORKERS = 8
API_SOURCE = "the host's software packages (vSphere API)"
SSH_SOURCE = "esxcli software vib list (ESXi shell)"


def about(session: Session) -> About:
    a = session.content.about
    return About(str(a.version or ""), str(a.apiVersion or ""), str(a.apiType or "VirtualCenter"),
                 str(a.fullName or ""))


def places(session: Session, observed: Observed, plan: Plan) -> privileges.Places:
    """Where vCenter-wide privileges are checked, and each cloned template's datastores and networks."""
    root = ("Folder", str(session.content.rootFolder._moId))
    datacenter = ("Datacenter", observed.moids.get("datacenter", ""))
    templates = sorted({observed.vms[k].moid for c in plan.changes if c.clone is not None
                        for k in observed.named(c.clone.template)})
    return privileges.Places(root, datacenter, vm_storage(session, templates))


Granted = dict[tuple[str, str], bool]


def granted(session: Session, needs: Sequence[privileges.Need]) -> tuple[Granted | None, str | None]:
    """The session's privileges on the objects the needs name, or None and why they could not be read."""
    try:
        return has_privileges(session, privileges.requests(needs)), None
    except VsphereFault as err:
        return None, f"{err.fault_type.rsplit('.', 1)[-1]}: {err.fault_message}"


def _parallel(names: Sequence[str], work: Callable[[str], T]) -> dict[str, T]:
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(WORKERS, len(names)), thread_name_prefix="vgpuctl-preflight") as pool:
        return dict(zip(names, pool.map(work, names), strict=True))


def _api_manager(session: Session, host: str, image_manager: str) -> ManagerFacts:
    try:
        packages = software_packages(session, host, image_manager)
    except VsphereFault as err:
        return ManagerFacts(unread=[f"software packages: {err.fault_type.rsplit('.', 1)[-1]}: {err.fault_message}"])
    found = branches.manager_in([(p.name, p.version) for p in packages])
    if found is None:
        return ManagerFacts(installed=False, source=API_SOURCE)
    return ManagerFacts(branches.driver_version(found[1]), f"{found[0]} {found[1]}", API_SOURCE, True)


def _ssh_probe(host: str, spec: object, facts: ManagerFacts) -> SshProbe:
    """Log in to the host's ESXi shell and list its VIBs (the vGPU Manager when the API could not say)."""
    user = "root"
    try:
        user = ssh_settings(spec).user
        with open_shell(host, spec) as shell:
            vibs = VIBS.gather(shell_runner(shell))
    except SshHostKeyError as err:
        return SshProbe(SshOutcome.UNKNOWN_KEY, str(err), user)
    except SshAuthError as err:
        return SshProbe(SshOutcome.AUTH, str(err), user)
    except SshUnreachable as err:
        return SshProbe(SshOutcome.UNREACHABLE, str(err), user)
    except VgpuctlError as err:
        return SshProbe(SshOutcome.FAILED, str(err), user)
    if facts.installed is None:
        found = branches.manager_in([(v.name, v.version) for v in vibs])
        facts.installed, facts.source = found is not None, SSH_SOURCE
        if found is not None:
            facts.version, facts.package = branches.driver_version(found[1]), f"{found[0]} {found[1]}"
    return SshProbe(SshOutcome.OK, "", user)


def _exceptions(session: Session, host: str, access_manager: str) -> list[str] | str:
    try:
        return lockdown_exceptions(session, host, access_manager)
    except VsphereFault as err:
        return f"{err.fault_type.rsplit('.', 1)[-1]}: {err.fault_message}"


def gather(session: Session, observed: Observed, scope: Scope, needs: list[privileges.Need]) -> PreflightFacts:
    connected = [h for h in scope.hosts if observed.hosts[h].connection_state == ConnectionState.CONNECTED]
    facts = PreflightFacts(about(session))
    facts.access = read_host_access(session, {h: observed.hosts[h].moid for h in connected})
    facts.granted, facts.privileges_error = granted(session, needs)
    facts.managers = _parallel(connected, lambda h: _api_manager(session, h, facts.access[h].image_manager))
    shell = [h for h in connected if h in scope.shell]
    facts.ssh = _parallel(shell, lambda h: _ssh_probe(h, scope.specs.get(h), facts.managers[h]))
    for host in shell:
        access = facts.access[host]
        if access.lockdown not in (None, "lockdownDisabled") and access.access_manager:
            facts.exceptions[host] = _exceptions(session, host, access.access_manager)
    for host in connected:
        if facts.managers[host].installed is None and host not in scope.shell:
            facts.managers[host].unread.append("the ESXi shell is not set up (VGPUCTL_ESXI_* or hosts[].ssh)")
    return facts


def environment_user(spec: object) -> str:
    """The SSH user a host's checks name (inventory, then VGPUCTL_ESXI_USER, then root)."""
    user = getattr(getattr(spec, "ssh", None), "user", None)
    return (user if user and user != "root" else None) or os.environ.get("VGPUCTL_ESXI_USER") or "root"
