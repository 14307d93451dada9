"""Unfinished host work and run leases, kept in vCenter itself so that any operator's next run sees them.

- Work record: the custom attribute `vgpuctl.work` on the HostSystem (CustomFieldsManager), a JSON document
  with the run id, the remaining steps in order and the VMs the run powered off (and what brings each back).
  Written before each step, cleared when the host's work is done. The bulk observe reads it with the host
  (`customValue`, `availableField`), so planning costs no extra round trip.
- Lease: held only while a run works on the host. Taken atomically by creating a folder with a fixed name
  under the root folder (vCenter refuses a second with DuplicateName); who holds it and since when is the
  custom attribute `vgpuctl.lease` on the host. Renewed while the run works, dropped at its end; a lease
  whose last renewal is older than its time to live by vCenter's clock (CurrentTime) has expired (the run
  died) and the next run takes it over.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from vgpuctl.errors import VgpuctlError
from vgpuctl.hosts.work import WORK_FIELD, WorkRecords

log = logging.getLogger(__name__)

LEASE_FIELD = "vgpuctl.lease"
LEASE_FOLDER = "vgpuctl-lease-{moid}"
DEFAULT_TTL_S = 60.0
ENV_TTL = "VGPUCTL_LEASE_TTL_S"
UNSET_POLL_S = 0.5  # how often a lock folder without its description is looked at again


class LeaseHeld(VgpuctlError):
    """Another run that is still alive holds the host."""


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def lease_ttl(env: dict[str, str] | None = None) -> float:
    value = (os.environ if env is None else env).get(ENV_TTL)
    try:
        return float(value) if value else DEFAULT_TTL_S
    except ValueError:
        raise VgpuctlError(f"{ENV_TTL}={value!r}: expected seconds") from None


# ------------------------------------------------------------------------------------------ custom fields


class Fields:
    """The two custom attribute definitions (created on first use) and SetField on hosts."""

    def __init__(self, session: Any):
        self.session = session
        self._keys: dict[str, int] = {}
        self._lock = threading.Lock()

    def key(self, name: str) -> int:
        from pyVmomi import vim

        with self._lock:
            if name in self._keys:
                return self._keys[name]
            cfm = self.session.content.customFieldsManager
            found = {f.name: f.key for f in self.session.invoke(lambda: cfm.field) or []}
            if name not in found:
                try:
                    found[name] = self.session.invoke(cfm.AddCustomFieldDef, name=name, moType=vim.HostSystem).key
                except vim.fault.DuplicateName:  # another run defined it meanwhile
                    found = {f.name: f.key for f in self.session.invoke(lambda: cfm.field) or []}
            self._keys[name] = found[name]
            return found[name]

    def set(self, host_moid: str, name: str, value: str) -> None:
        cfm = self.session.content.customFieldsManager
        from vgpuctl.vsphere.host import host_object

        self.session.invoke(cfm.SetField, entity=host_object(self.session, host_moid), key=self.key(name), value=value)

    def get(self, host_moid: str, name: str) -> str:
        from vgpuctl.vsphere.host import _props

        key = self.key(name)
        values = _props(self.session, host_moid, "HostSystem", ["customValue"]).get("customValue") or []
        return next((str(v.value) for v in values if int(v.key) == key), "")


def vcenter_now(session: Any) -> float:
    """vCenter's clock (CurrentTime) as a POSIX timestamp."""
    now: datetime = session.invoke(session.si.CurrentTime)
    return now.timestamp()


# ------------------------------------------------------------------------------------------ work records


class VcenterWorkStore(WorkRecords):
    """The work store: one run's view of the hosts' `vgpuctl.work` attributes (read with the bulk observe),
    written through with SetField; and the hosts' leases. `fields`: the custom attributes (tests give a fake)."""

    def __init__(
        self, session: Any, moids: dict[str, str], values: dict[str, str], run_id: str, fields: Fields | None = None
    ):
        super().__init__(values, run_id)
        self.fields = fields if fields is not None else Fields(session)
        self.moids = moids

    def _write(self, host: str, text: str) -> None:
        self.fields.set(self.moids[host], WORK_FIELD, text)

    def lease(self, host: str) -> Lease:
        """This run's lease on a host it works on."""
        return Lease(self.fields, host, self.moids[host], self.run_id)


# ------------------------------------------------------------------------------------------ leases


@dataclass
class LeaseInfo:
    run: str
    holder: str
    since: float  # vCenter time
    renewed: float  # vCenter time
    ttl_s: float
    folder: str = ""  # the lock folder this describes (a description of an older folder describes nothing)

    def live(self, now: float) -> bool:
        return now - self.renewed < self.ttl_s

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.since).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
        return f"run {self.run} by {self.holder} since {since}"


def parse_lease(text: str) -> LeaseInfo | None:
    if not text:
        return None
    try:
        return LeaseInfo(**json.loads(text))
    except (ValueError, TypeError):
        return None


class Lease:
    """A host's lease for one run: `acquire()` or LeaseHeld; renewed by a thread until `release()`."""

    def __init__(self, fields: Fields, host: str, moid: str, run_id: str, ttl_s: float | None = None):
        self.fields, self.host, self.moid, self.run_id = fields, host, moid, run_id
        self.ttl_s = ttl_s if ttl_s is not None else lease_ttl()
        self.holder = f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}"
        self._folder: Any = None
        self._since = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def session(self) -> Any:
        return self.fields.session

    def acquire(self) -> Lease:
        """Create the lock folder, or judge the one that exists: held while its description (the host's
        `vgpuctl.lease`, naming this folder) is renewed within its time to live; taken over once that passed,
        or once it stayed undescribed for a whole time to live (its creator died before describing it)."""
        from pyVmomi import vim, vmodl

        from vgpuctl.vsphere.host import stub_of

        root = self.session.content.rootFolder
        name = LEASE_FOLDER.format(moid=self.moid)
        stale: str | None = None
        undescribed: tuple[str, float] | None = None  # (folder, vCenter time first seen without a description)
        while True:
            try:
                self._folder = self.session.invoke(root.CreateFolder, name)
                break
            except vim.fault.DuplicateName as fault:
                existing = str(fault.object._moId) if fault.object is not None else ""
            if stale is not None and existing != stale:  # someone else took it over first
                raise LeaseHeld(self._held_message())
            info = parse_lease(self.fields.get(self.moid, LEASE_FIELD))
            now = vcenter_now(self.session)
            if info is not None and info.folder == existing:
                if info.live(now):
                    raise LeaseHeld(self._held_message(info))
            else:  # its creator may be about to describe it: wait up to a time to live
                if undescribed is None or undescribed[0] != existing:
                    undescribed = (existing, now)
                if now - undescribed[1] < self.ttl_s:
                    time.sleep(min(UNSET_POLL_S, self.ttl_s / 4))
                    continue
            stale = existing
            log.info("%s: taking over an expired lease (%s)", self.host, info.describe() if info else "undescribed")
            # another taker may destroy it first; CreateFolder decides
            with contextlib.suppress(vim.fault.VimFault, vmodl.fault.ManagedObjectNotFound):
                _destroy(self.session, vim.Folder(existing, stub_of(self.session)))
        self._since = vcenter_now(self.session)
        self._write(self._since)
        self._thread = threading.Thread(target=self._renew_loop, name=f"vgpuctl-lease-{self.host}", daemon=True)
        self._thread.start()
        return self

    def _held_message(self, info: LeaseInfo | None = None) -> str:
        info = info or parse_lease(self.fields.get(self.moid, LEASE_FIELD))
        who = info.describe() if info is not None else "another run"
        return f"{self.host}: {who} is working on this host; not touched (its lease expires when that run stops)"

    def _write(self, renewed: float) -> None:
        folder = str(self._folder._moId) if self._folder is not None else ""
        info = LeaseInfo(self.run_id, self.holder, self._since, renewed, self.ttl_s, folder)
        self.fields.set(self.moid, LEASE_FIELD, json.dumps(asdict(info), separators=(",", ":")))

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self._write(vcenter_now(self.session))
            except Exception as err:  # the next renewal tries again; expiry is the safe failure
                log.warning("%s: lease renewal failed: %s", self.host, _one_line(err))

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._folder is None:
            return
        try:
            self.fields.set(self.moid, LEASE_FIELD, "")
            _destroy(self.session, self._folder)
        except Exception as err:  # it expires on its own
            why = _one_line(err)
            log.warning("%s: could not drop the lease (%s); it expires after %gs", self.host, why, self.ttl_s)
        self._folder = None

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _one_line(err: Exception) -> str:
    """A vim fault's type and message (pyVmomi's own text spans many lines)."""
    msg = getattr(err, "msg", None)
    return f"{type(err).__name__}: {msg}" if msg else str(err).splitlines()[0] if str(err) else type(err).__name__


def _destroy(session: Any, obj: Any) -> None:
    from pyVim.task import WaitForTask

    task = session.invoke(obj.Destroy_Task)
    session.invoke(WaitForTask, task)


def live_leases(session: Any, values: dict[str, str]) -> dict[str, LeaseInfo]:
    """Hosts whose `vgpuctl.lease` value describes a lease still live by vCenter's clock (one CurrentTime call,
    only when some host has a lease value)."""
    infos = {h: info for h, text in values.items() if (info := parse_lease(text)) is not None}
    if not infos:
        return {}
    now = vcenter_now(session)
    return {h: info for h, info in infos.items() if info.live(now)}
