"""VM claims: a run claims each VM before it clones it, powers it off, reconfigures or powers it on, and keeps the
claim until the VM's last step, so two runs never interleave those steps on one VM.

A claim is the host lease's mechanism (vgpuctl.vsphere.workrecord.Lease) on the VM: a folder with a fixed name
under the root folder (`vgpuctl-claim-<vm moid>`; vCenter refuses a second with DuplicateName), described by
the custom attribute `vgpuctl.claim` on the VM (run, who, since, renewed), renewed while the run works and
expiring after its time to live when the run died. A released claim leaves its description behind with no
folder: the last run that changed the VM, which a run that finds the VM changed since its plan names.

A VM about to be cloned has no moid yet: its clone claim is a lock folder named after the folder it is cloned into
and its name (`vgpuctl-clone-<digest>`), described on that lock folder itself (`vgpuctl.clone-claim`), taken
before the clone and kept until the clone's last step (its power-on). A run that claims an existing VM first
makes sure no live run holds the clone claim of the VM's folder and name (the run that cloned it and is not done
with it).

Claims of runs that are gone are collected (`collect_dead`) by the next run that touches the VM or its host, by
the rules of leases: expired by vCenter's clock, or their holder a process of this machine that no longer exists;
a claim folder whose VM no longer exists is removed too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from datetime import datetime

from vgpuctl.errors import NotFound
from vgpuctl.vsphere.host import stub_of, vm_exists
from vgpuctl.vsphere.session import Session
from vgpuctl.vsphere.tasks import read_props
from vgpuctl.vsphere.vmops import vm_ref
from vgpuctl.vsphere.workrecord import (
    UNSET_POLL_S,
    WAIT_POLL_S,
    Fields,
    Lease,
    LeaseHeld,
    LeaseInfo,
    _destroy,
    lease_ttl,
    parse_lease,
    vcenter_now,
)

log = logging.getLogger(__name__)

CLAIM_FIELD = "vgpuctl.claim"
CLAIM_FOLDER = "vgpuctl-claim-{moid}"
CLONE_FIELD = "vgpuctl.clone-claim"  # on the clone claim's lock folder itself: the VM does not exist yet
CLONE_FOLDER = "vgpuctl-clone-{moid}"  # moid: clone_key(folder, name)
CLAIM_PREFIX, CLONE_PREFIX = CLAIM_FOLDER.split("{")[0], CLONE_FOLDER.split("{")[0]

Waiting = Callable[[LeaseHeld, float], None]


class ClaimHeld(LeaseHeld):
    """Another run that is still alive is changing the VM."""


def _held_message(name: str, info: LeaseInfo | None) -> str:
    who = info.describe() if info is not None else "another run"
    expires = f"; if that run is gone, its claim expires at {info.expiry()}" if info is not None else ""
    return f"{name}: {who} is changing this VM; not touched (plan again once it is done){expires}"


class VmClaim(Lease):
    """One VM's claim for one run (`self.host` is the VM's name here)."""

    FOLDER = CLAIM_FOLDER
    FIELD = CLAIM_FIELD
    HELD = ClaimHeld
    KIND = "claim"

    previous: LeaseInfo | None = None

    def acquire(self, wait_s: float = 0.0, on_wait: Waiting | None = None) -> VmClaim:
        """Take the claim; `previous` is the released description a previous run left, which this claim's own
        description replaces: the run that changed the VM last."""
        super().acquire(wait_s, on_wait)
        self._taken = time.monotonic()
        return self

    def _taken_over(self) -> None:
        # read once the lock folder is ours: a run that held it while this one waited has left its description
        self.previous = parse_lease(self.fields.get(self.moid, self.FIELD))

    def _held_message(self, info: LeaseInfo | None) -> str:
        return _held_message(self.host, info)

    def _describe_released(self) -> None:
        """The description stays, with no folder and the release time (vCenter's clock, from the time taken)."""
        released = self._since + (time.monotonic() - self._taken)
        info = LeaseInfo(self.run_id, self.holder, self._since, released, self.ttl_s, "", os.getpid(), self.machine)
        self._describe(json.dumps(asdict(info), separators=(",", ":")))


def clone_key(folder_moid: str, name: str) -> str:
    """The clone claim's key of a VM name in a folder (a digest: names may be long and hold any character)."""
    return hashlib.sha256(f"{folder_moid}\0{name}".encode()).hexdigest()[:32]


class CloneClaim(Lease):
    """The claim of a VM this run is about to clone: its name in its folder (`self.host` is the VM's name). The
    description lives on the lock folder, and goes with it."""

    FOLDER = CLONE_FOLDER
    FIELD = CLONE_FIELD
    HELD = ClaimHeld
    KIND = "claim"

    def __init__(self, session: Session, name: str, folder_moid: str, run_id: str, ttl_s: float | None = None):
        super().__init__(Fields(session, "Folder"), name, clone_key(folder_moid, name), run_id, ttl_s)

    def _description(self, folder: str) -> str:
        return _safe_get(self.fields, folder, self.FIELD)  # a folder gone meanwhile: CreateFolder again decides

    def _describe(self, text: str) -> None:
        self.fields.set(str(self._folder._moId), self.FIELD, text)

    def _held_message(self, info: LeaseInfo | None) -> str:
        return _held_message(self.host, info)

    def _describe_released(self) -> None:
        """Nothing stays: the description goes with the lock folder."""


class VmClaims:
    """The claims of one run: `claim(name, moid)` (ClaimHeld when another live run has it), `claim_clone(name,
    folder)` before a clone, `release(moid)`, `release_clone(name)`; `release_all()` at the end. Thread-safe: a
    run changes several VMs at once."""

    def __init__(self, session: Session, run_id: str, ttl_s: float | None = None, wait_s: float = 0.0):
        self.session = session
        self.fields = Fields(session, "VirtualMachine")
        self.folder_fields = Fields(session, "Folder")
        self.run_id = run_id
        self.ttl_s = ttl_s if ttl_s is not None else lease_ttl()
        self.wait_s = wait_s  # --lock-timeout: how long to wait for a VM another run has
        self._held: dict[str, VmClaim] = {}
        self._clones: dict[str, CloneClaim] = {}
        self._lock = threading.Lock()

    def claim(self, name: str, moid: str, on_wait: Waiting | None = None) -> None:
        """Claim an existing VM: no live run may hold the clone claim of its folder and name (the run that
        cloned it and is not done with it), then its own claim."""
        deadline = time.monotonic() + self.wait_s
        self._no_clone_claim(name, moid, deadline, on_wait)
        left = max(0.0, deadline - time.monotonic())
        claim = VmClaim(self.fields, name, moid, self.run_id, self.ttl_s).acquire(left, on_wait)
        with self._lock:
            self._held[moid] = claim

    def claim_clone(self, name: str, folder_moid: str, on_wait: Waiting | None = None) -> None:
        """Claim the VM `name` this run is about to clone into the folder: kept until `release_clone(name)`."""
        claim = CloneClaim(self.session, name, folder_moid, self.run_id, self.ttl_s)
        claim.acquire(self.wait_s, on_wait)
        with self._lock:
            self._clones[name] = claim

    def release(self, moid: str) -> None:
        with self._lock:
            claim = self._held.pop(moid, None)
        if claim is not None:
            claim.release()

    def release_clone(self, name: str) -> None:
        with self._lock:
            claim = self._clones.pop(name, None)
        if claim is not None:
            claim.release()

    def release_description(self, moid: str) -> None:
        """Before this run destroys the VM: its claim's description says released (the last write to the VM);
        `release(moid)` removes the lock folder once the VM is gone."""
        with self._lock:
            claim = self._held.get(moid)
        if claim is not None:
            claim.release_description()

    def release_all(self) -> None:
        with self._lock:
            held: list[Lease] = [*self._held.values(), *self._clones.values()]
            self._held, self._clones = {}, {}
        for claim in held:
            claim.release()

    def held(self) -> list[str]:
        """Names of the VMs this run holds claims on."""
        with self._lock:
            return sorted(c.host for c in [*self._held.values(), *self._clones.values()])

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

    def _no_clone_claim(self, name: str, moid: str, deadline: float, on_wait: Waiting | None) -> None:
        """ClaimHeld while a live run holds the clone claim of the VM's folder and name as vCenter has them now;
        a dead run's is removed, an undescribed one (its creator about to describe it, or dead before it did) is
        waited for up to a time to live. Waits for a live one until `deadline` (--lock-timeout)."""
        from pyVmomi import vmodl


        try:
            now_props = read_props(self.session, [vm_ref(self.session, moid)], "VirtualMachine",
                                   ["name", "parent"]).get(moid, {})  # fmt: skip
        except vmodl.fault.ManagedObjectNotFound:
            return  # the claim that follows finds it gone
        parent = now_props.get("parent")
        if parent is None:
            return  # gone or not in a folder: the claim that follows says so, or nothing can clone it
        lock = CLONE_FOLDER.format(moid=clone_key(str(parent._moId), str(now_props.get("name", name))))
        undescribed_since: float | None = None
        while True:
            folder = _find_lock_folder(self.session, lock)
            if folder is None:
                return
            info = parse_lease(_safe_get(self.folder_fields, folder, CLONE_FIELD))
            now = vcenter_now(self.session)
            if info is None or info.folder != folder:
                undescribed_since = now if undescribed_since is None else undescribed_since
                if now - undescribed_since < self.ttl_s:
                    time.sleep(min(UNSET_POLL_S, self.ttl_s / 4))
                    continue
            elif info.live(now) and not info.holder_gone():
                left = deadline - time.monotonic()
                held = ClaimHeld(_held_message(name, info), info)
                if left <= 0:
                    raise held
                if on_wait is not None:
                    on_wait(held, left)
                time.sleep(min(WAIT_POLL_S, left))
                continue
            log.info("%s: removing the clone claim of a run that is gone (%s)", name,
                     info.describe() if info is not None else "undescribed")  # fmt: skip
            _remove_folder(self.session, folder)


def _safe_get(fields: Fields, moid: str, name: str) -> str:
    """An attribute's value, "" when the object went meanwhile."""
    from pyVmomi import vmodl

    try:
        return fields.get(moid, name)
    except (vmodl.fault.ManagedObjectNotFound, NotFound):
        return ""


def _find_lock_folder(session: Session, name: str) -> str | None:
    """The moid of the lock folder `name` under the root folder, None when there is none (one FindChild)."""
    content = session.content
    found = session.invoke(content.searchIndex.FindChild, entity=content.rootFolder, name=name)
    return str(found._moId) if found is not None else None


def _remove_folder(session: Session, moid: str) -> None:
    """Remove a dead run's lock folder; another run removing (or taking) it first is no failure."""
    from pyVmomi import vim, vmodl


    with contextlib.suppress(vim.fault.VimFault, vmodl.fault.ManagedObjectNotFound):
        _destroy(session, vim.Folder(moid, stub_of(session)))


# ------------------------------------------------------------------------------------------ collection


def collect_dead(session: Session, touched: Iterable[str], known: Iterable[str]) -> list[str]:
    """Remove the claims of runs that are gone, by the rules of leases: those of the VMs `touched` (moids: the
    VMs a run changes and the VMs on the hosts it changes) whose description expired or whose holder is a
    process of this machine that is gone, those whose VM no longer exists (a VM of the datacenter that is not
    among `known` is read again to tell), and dead clone claims. Undescribed lock folders are left to the
    waiting rule of the next claim. Returns the lock folders removed; never raises (what it leaves, a claim
    takes over)."""
    try:
        return _collect(session, set(touched), set(known))
    except Exception as err:  # collection only tidies up
        log.warning("could not collect the claims of runs that are gone: %s", err)
        return []


def _collect(session: Session, touched: set[str], known: set[str]) -> list[str]:
    folders = _lock_folders(session)
    if not folders:
        return []
    now = vcenter_now(session)
    vm_fields, folder_fields = Fields(session, "VirtualMachine"), Fields(session, "Folder")
    dead: list[str] = []
    for folder, name in sorted(folders.items()):
        if name.startswith(CLONE_PREFIX):
            info = parse_lease(_safe_get(folder_fields, folder, CLONE_FIELD))
            if info is not None and info.folder == folder and _dead(info, now):
                dead.append(folder)
            continue
        moid = name[len(CLAIM_PREFIX):]
        if moid not in touched and moid in known:
            continue
        if not _vm_exists(session, moid):
            dead.append(folder)
            continue
        if moid in touched:
            info = parse_lease(_safe_get(vm_fields, moid, CLAIM_FIELD))
            if info is not None and info.folder == folder and _dead(info, now):
                dead.append(folder)
    for folder in dead:
        log.info("removing the lock folder %s (%s) of a run that is gone", folder, folders[folder])
        _remove_folder(session, folder)
    return [folders[f] for f in dead]


def _dead(info: LeaseInfo, now: float) -> bool:
    return not info.live(now) or info.holder_gone()


def _lock_folders(session: Session) -> dict[str, str]:
    """The claims' lock folders under the root folder: moid -> name (two property reads)."""
    from pyVmomi import vim

    root = session.content.rootFolder
    children = read_props(session, [root], "Folder", ["childEntity"]).get(str(root._moId), {}).get("childEntity")
    folders = [c for c in children or [] if isinstance(c, vim.Folder)]
    if not folders:
        return {}
    names = read_props(session, folders, "Folder", ["name"])
    return {moid: str(p.get("name", "")) for moid, p in names.items()
            if str(p.get("name", "")).startswith((CLAIM_PREFIX, CLONE_PREFIX))}  # fmt: skip


def _vm_exists(session: Session, moid: str) -> bool:
    return vm_exists(session, moid)
