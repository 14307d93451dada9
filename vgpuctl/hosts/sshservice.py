"""`ssh: {service: manage}`: the ESXi SSH service started through the API for an apply, and put back afterwards.

Not a host setting (it has no desired value to converge to): a run-scoped step beside maintenance mode. Before
an apply reads a host's shell, a host whose entry manages the service and whose SSH service (TSM-SSH) is stopped
gets the host's lease (kept until the apply ends), its original state recorded in its work record
(`HostRecord.ssh`, kept in vCenter) and the service started; at the end of the apply, also after Ctrl-C, every
host it started is stopped again, its record cleared and its lease released. A run that died before that (killed,
a second Ctrl-C) leaves the record: the next apply that gets the host's lease takes it over and stops the
service at its own end. A `plan` (and every read-only command) changes nothing: it reads the shell of the hosts
whose service runs and says which ones apply will start (`plan_notes`). Lockdown mode is never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import field
from typing import TYPE_CHECKING, Protocol

from vgpuctl.domain import ConnectionState, SshService
from vgpuctl.errors import VgpuctlError
from vgpuctl.inventory import HostSpec
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed
from vgpuctl.progress import EXIT_NOW
from vgpuctl.records.work import Lease, WorkStore
from vgpuctl.settings.facts import HostFacts
from vgpuctl.vsphere.hostaccess import read_host_access, set_ssh_service
from vgpuctl.vsphere.workrecord import LEASE_FIELD, LeaseHeld, live_leases

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

log = logging.getLogger(__name__)


@dataclass
class SshServiceRun:
    """The hosts whose SSH service this run started, or took over from a run that did not stop it: host name ->
    its HostServiceSystem moid; the leases it holds on them until it stops them; and what the run said about
    them. `lock_timeout_s`: how long to wait for a host another run holds."""

    started: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    leases: dict[str, Lease] = field(default_factory=dict)
    lock_timeout_s: float = 0.0


def stopped_note(host: str) -> str:
    """What plan and apply say of a managed host whose SSH service is stopped (the same words: a saved plan's)."""
    return (f"host {host}: its SSH service (TSM-SSH) is stopped: apply starts it for its run (ssh.service: manage), "
            "reads the ESXi shell then and stops it again at its end")  # fmt: skip


def left_note(host: str, run: str) -> str:
    """What plan and apply say of a host whose SSH service a run that is gone started and did not stop."""
    return f"host {host}: run {run or '?'} started its SSH service and did not stop it: apply stops it at its end"


def managed_hosts(observed: Observed, specs: Mapping[str, HostSpec | None]) -> set[str]:
    return {h for h, s in specs.items() if s is not None and s.ssh.service == SshService.MANAGE
            and h in observed.hosts and observed.hosts[h].connection_state == ConnectionState.CONNECTED}


def left_started(observed: Observed, state: WorkStore) -> set[str]:
    """Hosts whose work record says a run started their SSH service and did not stop it."""
    return {h for h in state.hosts() if (rec := state.get(h)) is not None and rec.ssh is not None
            and h in observed.hosts and observed.hosts[h].connection_state == ConnectionState.CONNECTED}


def start_for_run(session: Session, observed: Observed, specs: Mapping[str, HostSpec | None], state: WorkStore,
                  run: SshServiceRun) -> None:
    """Apply: start the SSH service of the managed hosts where it is stopped (recording how it was first), and take
    over the hosts an earlier run left started; both only under the host's lease, which the run keeps until
    `stop_for_run` has stopped them. A host another live run holds is left to it."""
    managed = managed_hosts(observed, specs)
    candidates = sorted((managed | left_started(observed, state)) - set(run.started))
    if not candidates:
        return
    access = read_host_access(session, {h: observed.hosts[h].moid for h in candidates})
    for host in candidates:
        rec, a = state.get(host), access[host]
        left = rec is not None and rec.ssh is not None
        if not left and (host not in managed or a.ssh_running is not False or not a.service_system):
            continue  # running already (or not reported): left as it is
        if not _leased(state, host, run):
            continue
        if left:
            rec = state.get(host)  # as it is now that the run holds the host
            if rec is None or rec.ssh is None:  # stopped meanwhile by the run that held the host
                run.leases.pop(host).release()
                continue
            run.started[host] = a.service_system
            run.notes.append(left_note(host, rec.run))
            continue
        state.update(host, ssh={"running": False, "policy": a.ssh_policy or "off"})  # first: a crash must know
        set_ssh_service(session, host, a.service_system, True)
        run.started[host] = a.service_system
        run.notes.append(stopped_note(host))


def _leased(state: WorkStore, host: str, run: SshServiceRun) -> bool:
    """Take the host's lease for the run's SSH service (kept in `run.leases`); False, with a note, when another live
    run holds the host."""
    if host in run.leases:
        return True
    try:
        run.leases[host] = state.lease(host).acquire(run.lock_timeout_s)
    except LeaseHeld as err:
        run.notes.append(f"{err}: its SSH service is left as it is")
        return False
    return True


def plan_notes(
    session: Session, observed: Observed, specs: Mapping[str, HostSpec | None], state: WorkStore
) -> tuple[set[str], list[str]]:
    """A read-only run (plan): the managed hosts whose SSH service is stopped, whose shell is read by the apply that
    starts it (not now), and what plan says of them and of SSH services dead runs left started; nothing
    written, nothing started or stopped."""
    managed = managed_hosts(observed, specs)
    left = left_started(observed, state)
    candidates = sorted(managed | left)
    if not candidates:
        return set(), []
    access = read_host_access(session, {h: observed.hosts[h].moid for h in candidates})
    held = live_leases(session, {h: observed.hosts[h].custom_values.get(LEASE_FIELD, "") for h in left})
    deferred, notes = set(), []
    for host in candidates:
        rec = state.get(host)
        if host in left and host not in held and rec is not None:
            notes.append(left_note(host, rec.run))
        elif host in managed and host not in left and access[host].ssh_running is False:
            deferred.add(host)
            notes.append(stopped_note(host))
    return deferred, notes


def stop_for_run(session: Session, state: WorkStore, run: SshServiceRun) -> None:
    """Put back the SSH service of every host the run started (or took over), clear their records and release
    their leases; a host that cannot be reached keeps its record (the next apply stops it)."""
    try:
        for host, service_system in sorted(run.started.items()):
            _stop_one(session, state, run, host, service_system)
    finally:
        run.started.clear()
        for lease in run.leases.values():
            lease.release()
        run.leases.clear()


def _stop_one(session: Session, state: WorkStore, run: SshServiceRun, host: str, service_system: str) -> None:
    rec = state.get(host)
    if rec is None or rec.ssh is None:
        return
    try:
        if not rec.ssh.get("running"):
            set_ssh_service(session, host, service_system, False)
    except VgpuctlError as err:
        run.notes.append(f"host {host}: its SSH service could not be stopped again ({err}): the next apply stops it")
        return
    if rec.only_ssh:
        state.update(host, ssh=None)
        state.drop(host)
    else:
        state.update(host, ssh=None)
    log.info("host %s: stopped its SSH service again", host)


def only_ssh(state: WorkStore, host: str) -> bool:
    """The host's record holds only an SSH service to stop (no host work to resume): this step takes it over."""
    rec = state.get(host)
    return rec is not None and rec.only_ssh


class RunState(Protocol):
    """What of a run's options the SSH step keeps (vgpuctl.pipeline.RunOptions)."""

    ssh_service: SshServiceRun | None
    state: WorkStore | None
    lock_timeout_s: float


@contextmanager
def ssh_service_for_run(session: Session, options: RunState) -> Iterator[None]:
    """An apply's SSH services: started as host facts are read (start_for_run), stopped again when the run ends,
    also after the first Ctrl-C and after errors; after a second Ctrl-C (exit at once) the work records keep
    them for the next apply (and the leases go with the process's others)."""
    own = options.ssh_service is None
    if own:
        options.ssh_service = SshServiceRun(lock_timeout_s=options.lock_timeout_s)
    try:
        yield
    finally:
        run_ssh = options.ssh_service
        if own and run_ssh is not None and options.state is not None and not EXIT_NOW.is_set():
            stop_for_run(session, options.state, run_ssh)
            for note in run_ssh.notes:
                log.warning("%s", note)
        if own:
            options.ssh_service = None


def explain_shell_errors(session: Session, observed: Observed, facts: Mapping[str, HostFacts]) -> None:
    """Hosts whose ESXi shell failed: their SSH service state and lockdown mode (one property read for them all)
    name the cause and its fix in the error (vgpuctl never turns lockdown mode off)."""
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
