"""A run's locks on what it changes (host leases, VM claims: vgpuctl.vsphere.workrecord, vgpuctl.vsphere.claims),
as the pipeline handles them: their settings checked before the first change, and every one of them dropped on
the way out of a second Ctrl-C."""

from __future__ import annotations

import logging

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
