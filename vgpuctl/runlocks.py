"""A run's locks on what it changes (host leases, VM claims: vgpuctl.vsphere.workrecord, vgpuctl.vsphere.claims),
as the pipeline handles them: their settings checked before the first change, other runs' leases read and named,
waited for (--lock-timeout), and every one of them dropped on the way out of a second Ctrl-C."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from vgpuctl.domain import ConnectionState
from vgpuctl.model import Observed, Problem

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session
    from vgpuctl.vsphere.workrecord import LeaseInfo

log = logging.getLogger(__name__)


def check_lock_settings() -> None:
    """Refuse a lease time to live vgpuctl cannot keep (UsageError), before the first change."""
    from vgpuctl.vsphere.workrecord import lease_ttl

    lease_ttl()


def release_held_locks(within_s: float = 5.0) -> None:
    """Drop this process's host leases and VM claims before it exits at once (a second Ctrl-C), at most
    `within_s`: the next run need not wait for them to expire. Never raises."""
    from vgpuctl.vsphere.workrecord import release_held

    try:
        released = release_held(within_s)
    except Exception as err:  # they expire on their own
        log.debug("releasing the leases failed: %s", err)
        return
    if released:
        log.info("released the leases and claims of %s", ", ".join(released))


def wait_for_hosts(
    session: Session, moids: Mapping[str, str], held: Mapping[str, LeaseInfo], wait_s: float,
    on_wait: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
) -> dict[str, LeaseInfo]:
    """--lock-timeout before a plan: wait up to `wait_s` for other runs to let go of these hosts (host -> its
    moid, and the live lease found), reading their leases again every WAIT_POLL_S; `on_wait` gets one line per run
    met on a host (who, since when). Returns the leases still live at the end (empty: every host was let go)."""
    from vgpuctl.vsphere.workrecord import LEASE_FIELD, WAIT_POLL_S, Fields, live_leases

    fields = Fields(session)
    end = clock() + wait_s
    told: set[tuple[str, str, float]] = set()
    live = dict(held)
    while live and (left := end - clock()) > 0:
        for host, info in sorted(live.items()):
            if (host, info.run, info.since) not in told:
                told.add((host, info.run, info.since))
                on_wait(f"host {host}: waiting for {info.describe()}, up to {left:.0f} s more")
        time.sleep(min(WAIT_POLL_S, left))
        live = live_leases(session, {h: fields.get(moids[h], LEASE_FIELD) for h in live})
    return live


def unreadable_hosts(session: Session, observed: Observed, hosts: Iterable[str], waited_s: float = 0.0
                     ) -> list[Problem]:
    """Why the GPU state of these hosts cannot be read, one problem each: a host another live run holds (its lease:
    run, user, since, until) is named as held, never as broken (and how long this run waited for it)."""
    down = sorted(h for h in hosts if observed.hosts[h].connection_state != ConnectionState.CONNECTED)
    held = leases_of(session, observed, down) if down else {}
    return [Problem(f"host {h}: {held_text(held[h])}{_waited(waited_s)}: it cannot be planned until that run ends"
                    if h in held else f"host {h}: {observed.hosts[h].connection_state}; its GPU state cannot be read",
                    host=h) for h in down]  # fmt: skip


def _waited(seconds: float) -> str:
    return f"; waited {seconds:g} s for it (--lock-timeout)" if seconds > 0 else ""


def leases_of(session: Session, observed: Observed, hosts: Iterable[str]) -> dict[str, LeaseInfo]:
    """The live leases of another run on these hosts (one CurrentTime read, only when one has a lease)."""
    from vgpuctl.vsphere.workrecord import LEASE_FIELD, live_leases

    values = {h: observed.hosts[h].custom_values.get(LEASE_FIELD, "") for h in hosts if h in observed.hosts}
    return live_leases(session, values)


def held_text(info: LeaseInfo) -> str:
    """`held by run 3f2a... of alice@ws since 2024-05-01 10:00:00 UTC (lease until 10:01:00 UTC)`."""
    from datetime import datetime

    until = datetime.fromtimestamp(info.renewed + info.ttl_s).astimezone().strftime("%H:%M:%S %Z")
    return f"held by {info.describe().replace(' by ', ' of ', 1)} (lease until {until}, renewed while it works)"


def still_held(session: Session, observed: Observed, hosts: Iterable[str], waited_s: float) -> list[Problem]:
    """A problem for each of these hosts another run still holds after this one waited `waited_s` for it."""
    return [Problem(f"host {h}: {held_text(info)}{_waited(waited_s)}: it cannot be changed until that run ends",
                    host=h) for h, info in sorted(leases_of(session, observed, hosts).items())]
