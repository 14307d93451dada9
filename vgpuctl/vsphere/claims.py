"""VM claims: a run claims each existing VM before it powers it off, reconfigures or powers it on, and keeps the
claim until the VM's last step, so two runs never interleave those steps on one VM.

A claim is the host lease's mechanism (vgpuctl.vsphere.workrecord.Lease) on the VM: a folder with a fixed name
under the root folder (`vgpuctl-claim-<vm moid>`; vCenter refuses a second with DuplicateName), described by
the custom attribute `vgpuctl.claim` on the VM (run, who, since, renewed), renewed while the run works and
expiring after its time to live when the run died. A released claim leaves its description behind with no
folder: the last run that changed the VM, which a run that finds the VM changed since its plan names.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime

from vgpuctl.vsphere.session import Session
from vgpuctl.vsphere.workrecord import Fields, Lease, LeaseHeld, LeaseInfo, lease_ttl, parse_lease

log = logging.getLogger(__name__)

CLAIM_FIELD = "vgpuctl.claim"
CLAIM_FOLDER = "vgpuctl-claim-{moid}"


class ClaimHeld(LeaseHeld):
    """Another run that is still alive is changing the VM."""


class VmClaim(Lease):
    """One VM's claim for one run (`self.host` is the VM's name here)."""

    FOLDER = CLAIM_FOLDER
    FIELD = CLAIM_FIELD
    HELD = ClaimHeld
    KIND = "claim"

    previous: LeaseInfo | None = None

    def acquire(self, wait_s: float = 0.0, on_wait: Callable[[LeaseHeld, float], None] | None = None) -> VmClaim:
        """Take the claim; `previous` is the released description a previous run left, which this claim's own
        description replaces: the run that changed the VM last."""
        super().acquire(wait_s, on_wait)
        self._taken = time.monotonic()
        return self

    def _taken_over(self) -> None:
        # read once the lock folder is ours: a run that held it while this one waited has left its description
        self.previous = parse_lease(self.fields.get(self.moid, self.FIELD))

    def _held_message(self, info: LeaseInfo | None) -> str:
        who = info.describe() if info is not None else "another run"
        expires = f"; if that run is gone, its claim expires at {info.expiry()}" if info is not None else ""
        return f"{self.host}: {who} is changing this VM; not touched (plan again once it is done){expires}"

    def _describe_released(self) -> None:
        """The description stays, with no folder and the release time (vCenter's clock, from the time taken)."""
        released = self._since + (time.monotonic() - self._taken)
        info = LeaseInfo(self.run_id, self.holder, self._since, released, self.ttl_s, "", os.getpid(), self.machine)
        self.fields.set(self.moid, self.FIELD, json.dumps(asdict(info), separators=(",", ":")))


class VmClaims:
    """The claims of one run: `claim(name, moid)` (ClaimHeld when another live run has it), `release(moid)`;
    `release_all()` at the end. Thread-safe: a run changes several VMs at once."""

    def __init__(self, session: Session, run_id: str, ttl_s: float | None = None, wait_s: float = 0.0):
        self.fields = Fields(session, "VirtualMachine")
        self.run_id = run_id
        self.ttl_s = ttl_s if ttl_s is not None else lease_ttl()
        self.wait_s = wait_s  # --lock-timeout: how long to wait for a VM another run has
        self._held: dict[str, VmClaim] = {}
        self._lock = threading.Lock()

    def claim(self, name: str, moid: str, on_wait: Callable[[LeaseHeld, float], None] | None = None) -> None:
        claim = VmClaim(self.fields, name, moid, self.run_id, self.ttl_s).acquire(self.wait_s, on_wait)
        with self._lock:
            self._held[moid] = claim

    def release(self, moid: str) -> None:
        with self._lock:
            claim = self._held.pop(moid, None)
        if claim is not None:
            claim.release()

    def release_all(self) -> None:
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for claim in held:
            claim.release()

    def held(self) -> list[str]:
        """Names of the VMs this run holds claims on."""
        with self._lock:
            return sorted(c.host for c in self._held.values())

    def last_run(self, moid: str) -> str:
        """Who changed the VM last, from the claim it released ("" when unknown): `run X by WHO until TIME`; the
        claim this run holds on the VM replaced that description, and kept it."""
        with self._lock:
            mine = self._held.get(moid)
        if mine is not None:
            info = mine.previous
        else:
            try:
                info = parse_lease(self.fields.get(moid, CLAIM_FIELD))
            except Exception as err:  # it only adds to a message
                log.debug("cannot read the VM's claim: %s", err)
                return ""
        if info is None:
            return ""
        until = datetime.fromtimestamp(info.renewed).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
        return f"run {info.run} by {info.holder} until {until}"
