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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from vgpuctl.domain import ConnectionState, SshService
from vgpuctl.errors import VgpuctlError
from vgpuctl.inventory import HostSpec
from vgpuctl.model import Observed
from vgpuctl.progress import EXIT_NOW
from vgpuctl.records.work import WorkStore
from vgpuctl.settings.facts import HostFacts

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
            and h in observed.hosts and observed.hosts[h].connection_state == ConnectionState.CONNECTED}


def left_started(observed: Observed, state: WorkStore) -> set[str]:
    """Hosts whose work record says a run started their SSH service and did not stop it."""
    return {h for h in state.hosts() if (rec := state.get(h)) is not None and rec.ssh is not None
            and h in observed.hosts and observed.hosts[h].connection_state == ConnectionState.CONNECTED}


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


def only_ssh(state: WorkStore, host: str) -> bool:
    """The host's record holds only an SSH service to stop (no host work to resume): this step takes it over."""
    rec = state.get(host)
    return rec is not None and rec.only_ssh


class RunState(Protocol):
    """What of a run's options the SSH step keeps (vgpuctl.pipeline.RunOptions)."""

    ssh_service: SshServiceRun | None
    state: WorkStore | None


@contextmanager
def ssh_service_for_run(session: Session, options: RunState) -> Iterator[None]:
    """A run's SSH services: started as host facts are read (start_for_run), stopped again when the run ends,
    also after the first Ctrl-C and after errors; after a second Ctrl-C (exit at once) the work records keep
    them for the next run."""
    own = options.ssh_service is None
    if own:
        options.ssh_service = SshServiceRun()
    try:
        yield
    finally:
        run_ssh = options.ssh_service
        if own and run_ssh is not None and run_ssh.started and options.state is not None and not EXIT_NOW.is_set():
            stop_for_run(session, options.state, run_ssh)
            for note in run_ssh.notes:
                log.warning("%s", note)
        if own:
            options.ssh_service = None


def explain_shell_errors(session: Session, observed: Observed, facts: Mapping[str, HostFacts]) -> None:
    """Hosts whose ESXi shell failed: their SSH service state and lockdown mode (one property read for them all)
    name the cause and its fix in the error (vgpuctl never turns lockdown mode off)."""
    from vgpuctl.vsphere.hostaccess import read_host_access

    failed = {n: observed.hosts[n].moid for n, f in facts.items() if f.shell_error}
    if not failed:
        return
    for name, access in read_host_access(session, failed).items():
        f = facts[name]
        if access.ssh_running is False:
            f.shell_error = (f"{f.shell_error}; its SSH service (TSM-SSH) is stopped: set ssh: {{service: manage}} in "
                             "its inventory entry, or start it")
        elif access.lockdown not in (None, "lockdownDisabled"):
            f.shell_error = (f"{f.shell_error}; the host is in {access.lockdown}: only its lockdown exception users "
                             "log in over SSH (add the SSH user as one; vgpuctl never turns lockdown mode off)")
