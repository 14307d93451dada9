"""`ssh: {service: manage}`: the ESXi SSH service started through the API for a run, and put back afterwards.

Not a host setting (it has no desired value to converge to): a run-scoped step beside maintenance mode. Before
the run reads a host's shell, a host whose entry manages the service and whose SSH service (TSM-SSH) is stopped
gets its original state recorded in its work record (`HostRecord.ssh`, kept in vCenter) and the service started;
at the end of the run, also after Ctrl-C, every host the run started is stopped again and its record cleared.
A run that died before that (killed, a second Ctrl-C) leaves the record: the next run that reads the host's
facts takes it over and stops the service at its own end. Lockdown mode is never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vgpuctl.domain import SshService
from vgpuctl.errors import VgpuctlError
from vgpuctl.hosts.work import WorkStore
from vgpuctl.inventory import HostSpec
from vgpuctl.model import Observed

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

log = logging.getLogger(__name__)


@dataclass
class SshServiceRun:
    """The hosts whose SSH service this run started, or took over from a run that did not stop it: host name ->
    its HostServiceSystem moid; and what the run said about them."""

    started: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def managed_hosts(observed: Observed, specs: Mapping[str, HostSpec | None]) -> set[str]:
    return {h for h, s in specs.items() if s is not None and s.ssh.service == SshService.MANAGE
            and h in observed.hosts and observed.hosts[h].connection_state == "connected"}


def left_started(observed: Observed, state: WorkStore) -> set[str]:
    """Hosts whose work record says a run started their SSH service and did not stop it."""
    return {h for h in state.hosts() if (rec := state.get(h)) is not None and rec.ssh is not None
            and h in observed.hosts and observed.hosts[h].connection_state == "connected"}


def start_for_run(session: Session, observed: Observed, specs: Mapping[str, HostSpec | None], state: WorkStore,
                  run: SshServiceRun) -> None:
    """Start the SSH service of the managed hosts where it is stopped (recording how it was first), and take over
    the hosts an earlier run left started; both are stopped by `stop_for_run`."""
    from vgpuctl.vsphere.hostaccess import read_host_access, set_ssh_service

    managed = managed_hosts(observed, specs)
    candidates = sorted((managed | left_started(observed, state)) - set(run.started))
    if not candidates:
        return
    access = read_host_access(session, {h: observed.hosts[h].moid for h in candidates})
    for host in candidates:
        rec, a = state.get(host), access[host]
        if rec is not None and rec.ssh is not None:
            run.started[host] = a.service_system
            run.notes.append(f"host {host}: an earlier run ({rec.run or '?'}) started its SSH service and did not "
                             "stop it: this run stops it at its end")
            continue
        if host not in managed or a.ssh_running is not False or not a.service_system:
            continue  # running already (or not reported): left as it is
        state.update(host, ssh={"running": False, "policy": a.ssh_policy or "off"})  # first: a crash must know
        set_ssh_service(session, host, a.service_system, True)
        run.started[host] = a.service_system
        run.notes.append(f"host {host}: started its SSH service for this run (ssh.service: manage); it is stopped "
                         "again at the end")


def stop_for_run(session: Session, state: WorkStore, run: SshServiceRun) -> None:
    """Put back the SSH service of every host the run started (or took over), and clear their records; a host
    that cannot be reached keeps its record (the next run stops it)."""
    from vgpuctl.vsphere.hostaccess import set_ssh_service

    for host, service_system in sorted(run.started.items()):
        rec = state.get(host)
        if rec is None or rec.ssh is None:
            continue
        try:
            if not rec.ssh.get("running"):
                set_ssh_service(session, host, service_system, False)
        except VgpuctlError as err:
            run.notes.append(f"host {host}: its SSH service could not be stopped again ({err}): the next run stops "
                             "it")
            continue
        if rec.only_ssh:
            state.update(host, ssh=None)
            state.drop(host)
        else:
            state.update(host, ssh=None)
        log.info("host %s: stopped its SSH service again", host)
    run.started.clear()
