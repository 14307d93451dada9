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
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vgpuctl.errors import UsageError, VgpuctlError
from vgpuctl.lazyclass import dataclass
from vgpuctl.records.work import WORK_FIELD, WorkRecords, read_record
from vgpuctl.vsphere.bookkeeping import guarded

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

log = logging.getLogger(__name__)

LEASE_FIELD = "vgpuctl.lease"
LEASE_FOLDER = "vgpuctl-lease-{moid}"
DEFAULT_TTL_S = 60.0
MIN_TTL_S = 10.0
MAX_TTL_S = 3600.0
ENV_TTL = "VGPUCTL_LEASE_TTL_S"
WAIT_POLL_S = 2.0  # how often a lease another run holds is tried again while --lock-timeout lasts
UNSET_POLL_S = 0.5  # how often a lock folder without its description is looked at again


class LeaseHeld(VgpuctlError):
    """Another run that is still alive holds the host; `holder`: its description when there is one."""

    def __init__(self, message: str, holder: LeaseInfo | None = None):
        super().__init__(message)
        self.holder = holder


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def lease_ttl(env: dict[str, str] | None = None) -> float:
    """The time to live of this run's leases and claims: VGPUCTL_LEASE_TTL_S, finite, MIN_TTL_S to MAX_TTL_S
    seconds (a shorter one expires between two renewals on a slow vCenter, a longer one keeps a dead run's
    objects held that long), else DEFAULT_TTL_S."""
    value = (os.environ if env is None else env).get(ENV_TTL)
    if not value:
        return DEFAULT_TTL_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and MIN_TTL_S <= seconds <= MAX_TTL_S):
        raise UsageError(f"{ENV_TTL}={value!r}: expected seconds from {MIN_TTL_S:g} to {MAX_TTL_S:g}")
    return seconds


_HELD: set[Lease] = set()  # the leases and claims this process holds (released on every exit path)
_HELD_LOCK = threading.Lock()


def release_held(within_s: float = 5.0) -> list[str]:
    """Release every lease and claim this process holds, at once, waiting at most `within_s` (a second Ctrl-C:
    the process exits right after; what is not released in time expires on its own). Returns the objects
    released."""
    with _HELD_LOCK:
        held = list(_HELD)
    threads = [threading.Thread(target=lease.release, name="vgpuctl-release", daemon=True) for lease in held]
    for t in threads:
        t.start()
    deadline = time.monotonic() + within_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return sorted(lease.host for lease, t in zip(held, threads, strict=True) if not t.is_alive())


# ------------------------------------------------------------------------------------------ custom fields


class Fields:
    """Custom attribute definitions of one managed object type (created on first use), SetField and their values:
    the two on hosts (work record, lease); vgpuctl.vsphere.claims keeps its own on VMs."""

    def __init__(self, session: Session, mo_type: str = "HostSystem"):
        self.session = session
        self.mo_type = mo_type
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
                    mo_type = getattr(vim, self.mo_type)
                    found[name] = guarded(
                        f"cannot define the custom attribute {name} (on {self.mo_type})",
                        "AddCustomFieldDef",
                        lambda: self.session.invoke(cfm.AddCustomFieldDef, name=name, moType=mo_type),
                    ).key
                except vim.fault.DuplicateName:  # another run defined it meanwhile
                    found = {f.name: f.key for f in self.session.invoke(lambda: cfm.field) or []}
            self._keys[name] = found[name]
            return found[name]

    def set(self, moid: str, name: str, value: str) -> None:
        from pyVmomi import vim

        from vgpuctl.vsphere.host import stub_of

        cfm = self.session.content.customFieldsManager
        entity = getattr(vim, self.mo_type)(moid, stub_of(self.session))
        key = self.key(name)
        guarded(f"cannot write the custom attribute {name} on {self.mo_type} {moid}", "SetField",
                lambda: self.session.invoke(cfm.SetField, entity=entity, key=key, value=value))  # fmt: skip

    def get(self, moid: str, name: str) -> str:
        """The attribute's value on the object ("" when it has none, or when the attribute is not defined:
        reading defines nothing)."""
        from vgpuctl.vsphere.host import object_props

        key = self.existing_key(name)
        if key is None:
            return ""
        values = object_props(self.session, moid, self.mo_type, ["customValue"]).get("customValue") or []
        return next((str(v.value) for v in values if int(v.key) == key), "")

    def existing_key(self, name: str) -> int | None:
        """The attribute's key when vCenter has it defined (None: not defined, nothing holds it)."""
        with self._lock:
            if name in self._keys:
                return self._keys[name]
        cfm = self.session.content.customFieldsManager
        found = {f.name: f.key for f in self.session.invoke(lambda: cfm.field) or []}
        if name not in found:
            return None
        with self._lock:
            self._keys[name] = found[name]
        return found[name]


def forget_work(session: Session, host: str, host_moid: str, shown: str, run_id: str) -> None:
    """`vgpuctl host forget-work`: empty the host's `vgpuctl.work` attribute under the host's lease, taken for the
    clear (LeaseHeld names the run that holds it), and only while the record is still `shown`, the text the
    operator confirmed (WorkRecordChanged otherwise): a run that took the host meanwhile keeps its record."""
    store = VcenterWorkStore(session, {host: host_moid}, {host: shown}, run_id)
    lease = store.lease(host).acquire()
    try:
        if store.read_again(host) != shown:
            rec, _ = read_record(host, store.read_again(host))
            who = f"run {rec.run}" if rec is not None and rec.run else "another run"
            raise WorkRecordChanged(f"host {host}: its work record changed since it was shown ({who} wrote it "
                                    "meanwhile); not cleared")  # fmt: skip
        store.drop_all(host)
    finally:
        lease.release()


def vcenter_now(session: Session) -> float:
    """vCenter's clock (CurrentTime) as a POSIX timestamp."""
    now: datetime = session.invoke(session.si.CurrentTime)
    return now.timestamp()


# ------------------------------------------------------------------------------------------ work records


class NotLeased(VgpuctlError):
    """A write to a host's work record without the host's lease (a defect: every write happens under it)."""


class WorkRecordChanged(VgpuctlError):
    """The host's work record is not what this run read: another run wrote it meanwhile."""


class VcenterWorkStore(WorkRecords):
    """The work store: one run's view of the hosts' `vgpuctl.work` attributes (read with the bulk observe),
    written through with SetField; and the hosts' leases. `fields`: the custom attributes (tests give a fake).

    A record is written only under its host's lease, held by this run (NotLeased otherwise): taking over an SSH
    service an earlier run left started, recording one this run starts, a host's work, `forget-work`. The
    lease is shared within the run (`lease(host)` twice: one lock folder, released with its last holder), and
    when it is first taken the record is read again and kept as vCenter has it (another run may have written
    it while this one waited for the lease), so no run writes over a record it did not see."""

    def __init__(
        self, session: Session, moids: dict[str, str], values: dict[str, str], run_id: str, fields: Fields | None = None
    ):
        super().__init__(values, run_id)
        self.fields = fields if fields is not None else Fields(session)
        self.moids = moids
        self._texts = dict(values)  # each record as vCenter holds it, as far as this run knows
        self._leases: dict[str, tuple[Lease, int]] = {}
        self._lease_lock = threading.Lock()

    def _write(self, host: str, text: str) -> None:
        with self._lease_lock:
            leased = host in self._leases
        if not leased:
            raise NotLeased(f"host {host}: its work record is written only under the host's lease, which this run "
                            "does not hold")  # fmt: skip
        self.fields.set(self.moids[host], WORK_FIELD, text)
        self._texts[host] = text

    def lease(self, host: str) -> HostLease:
        """This run's lease on a host it works on (shared with this run's other holders of it)."""
        return HostLease(self, host)

    def holds(self, host: str) -> bool:
        with self._lease_lock:
            return host in self._leases

    def drop_all(self, host: str) -> None:
        """Clear the host's record, an SSH service to stop included (`forget-work`; under the lease)."""
        self._write(host, "")

    def _take(self, host: str, wait_s: float, on_wait: Callable[[LeaseHeld, float], None] | None) -> None:
        with self._lease_lock:
            held = self._leases.get(host)
            if held is not None:
                self._leases[host] = (held[0], held[1] + 1)
                return
        lease = Lease(self.fields, host, self.moids[host], self.run_id).acquire(wait_s, on_wait)
        try:
            now = self.read_again(host)
        except Exception:
            lease.release()
            raise
        if now != self._texts.get(host, ""):
            log.info("host %s: its work record changed since this run read it; taking it as it is now", host)
            self.reload(host, now)
            self._texts[host] = now
        with self._lease_lock:
            self._leases[host] = (lease, 1)

    def read_again(self, host: str) -> str:
        """The host's record text as vCenter holds it now (one property read)."""
        return self.fields.get(self.moids[host], WORK_FIELD)

    def _let_go(self, host: str) -> None:
        with self._lease_lock:
            held = self._leases.get(host)
            if held is None:
                return
            if held[1] > 1:
                self._leases[host] = (held[0], held[1] - 1)
                return
            del self._leases[host]
        held[0].release()


class HostLease:
    """A holder of this run's lease on one host (VcenterWorkStore.lease): `acquire()` takes it, or joins this run's
    holder of it; `release()` lets go, the lock folder going with the last holder."""

    def __init__(self, store: VcenterWorkStore, host: str):
        self.store, self.host = store, host
        self._held = False

    def acquire(self, wait_s: float = 0.0, on_wait: Callable[[LeaseHeld, float], None] | None = None) -> HostLease:
        if not self._held:
            self.store._take(self.host, wait_s, on_wait)
            self._held = True
        return self

    def release(self) -> None:
        if self._held:
            self._held = False
            self.store._let_go(self.host)

    def __enter__(self) -> HostLease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# ------------------------------------------------------------------------------------------ leases


@dataclass
class LeaseInfo:
    run: str
    holder: str
    since: float  # vCenter time
    renewed: float  # vCenter time
    ttl_s: float
    folder: str = ""  # the lock folder this describes (a description of an older folder describes nothing)
    pid: int = 0  # the holder's process
    machine: str = ""  # where that process runs (this_machine()): "" when it cannot be told

    def live(self, now: float) -> bool:
        return now - self.renewed < self.ttl_s

    def holder_gone(self) -> bool:
        """Whether the holder is a process of this machine (and PID namespace) that no longer exists: its lease
        is dead for sure, whatever its time to live says (a kill -9, a second Ctrl-C that could not drop it)."""
        return bool(self.machine) and self.machine == this_machine() and self.pid > 0 and not _alive(self.pid)

    def describe(self) -> str:
        return f"run {self.run} by {self.holder} since {_clock(self.since)}"

    def expiry(self) -> str:
        """When it expires unless renewed (vCenter's clock, shown in local time)."""
        return _clock(self.renewed + self.ttl_s)


def _clock(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def this_machine() -> str:
    """This process's machine and PID namespace (Linux: the boot id and the pid namespace's inode), "" where they
    cannot be read: only there does a process id name one process for sure."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True


class _LeaseSchema(BaseModel):
    """What a `vgpuctl.lease` or `vgpuctl.claim` value must be; fields a later vgpuctl adds are left alone."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    run: str
    holder: str
    since: float
    renewed: float
    ttl_s: float = Field(gt=0)
    folder: str = ""
    pid: int = 0
    machine: str = ""

    @field_validator("since", "renewed", "ttl_s", mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


def read_lease(text: str) -> tuple[LeaseInfo | None, str | None]:
    """A lease or claim description from its attribute value, checked against its schema: (info, None), (None,
    what is wrong with it), or (None, None) for none. One that is wrong describes nothing: its lock folder is
    taken over once it stayed so for a whole time to live."""
    if not text:
        return None, None
    try:
        data = _LeaseSchema.model_validate_json(text)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the value"
        return None, "not JSON" if first["type"] == "json_invalid" else f"{where}: {first['msg']}"
    return LeaseInfo(**data.model_dump()), None


def parse_lease(text: str) -> LeaseInfo | None:
    return read_lease(text)[0]


def lease_problems(values: dict[str, str]) -> list[str]:
    """One line per host whose `vgpuctl.lease` value is no lease description (host -> value)."""
    out = []
    for host, text in sorted(values.items()):
        why = read_lease(text)[1]
        if why is not None:
            out.append(f"host {host}: its {LEASE_FIELD} attribute is no lease description ({why}): a run that finds "
                       "the host's lock folder takes it over once it stayed so for a time to live")  # fmt: skip
    return out


class Lease:
    """A host's lease for one run: `acquire()` or LeaseHeld; renewed by a thread until `release()`.

    The same mechanism serves other objects (vgpuctl.vsphere.claims: VMs): a subclass names its lock folder,
    the attribute that describes it, and what its refusal says."""

    FOLDER = LEASE_FOLDER
    FIELD = LEASE_FIELD
    HELD: type[LeaseHeld] = LeaseHeld
    KIND = "lease"

    def __init__(self, fields: Fields, host: str, moid: str, run_id: str, ttl_s: float | None = None):
        self.fields, self.host, self.moid, self.run_id = fields, host, moid, run_id
        self.ttl_s = ttl_s if ttl_s is not None else lease_ttl()
        self.holder = f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}"
        self.machine = this_machine()
        self._folder: Any = None
        self._since = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._released_described = False

    @property
    def session(self) -> Any:
        return self.fields.session

    def acquire(self, wait_s: float = 0.0, on_wait: Callable[[LeaseHeld, float], None] | None = None) -> Lease:
        """Take the lease (HELD when another live run holds it), waiting up to `wait_s` for that run to let go;
        `on_wait(held, seconds_left)` is told each time it is found held while there is time left. Renewed
        every third of the time to live until `release()`."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self._take()
                break
            except self.HELD as held:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                if on_wait is not None:
                    on_wait(held, left)
                time.sleep(min(WAIT_POLL_S, left))
        try:
            self._taken_over()
            self._since = vcenter_now(self.session)
            self._write(self._since)
        except Exception:  # undescribed, the folder would hold the object for a whole time to live
            with contextlib.suppress(Exception):
                _destroy(self.session, self._folder)
            self._folder = None
            raise
        self._thread = threading.Thread(target=self._renew_loop, name=f"vgpuctl-lease-{self.host}", daemon=True)
        self._thread.start()
        with _HELD_LOCK:
            _HELD.add(self)
        return self

    def _taken_over(self) -> None:
        """Called once the lock folder is this run's, before its description replaces the one there."""

    def _take(self) -> None:
        """Create the lock folder, or judge the one that exists: held while its description (the object's
        `vgpuctl.lease` or `vgpuctl.claim`, naming this folder) is renewed within its time to live and its holder
        is not a process of this machine that is gone; taken over otherwise, or once it stayed undescribed for a
        whole time to live (its creator died before describing it)."""
        from pyVmomi import vim, vmodl

        from vgpuctl.vsphere.host import stub_of

        root = self.session.content.rootFolder
        name = self.FOLDER.format(moid=self.moid)
        stale: str | None = None
        undescribed: tuple[str, float] | None = None  # (folder, vCenter time first seen without a description)
        while True:
            try:
                what = f"{self.host}: cannot take the {self.KIND} (its lock folder {name})"
                self._folder = guarded(what, "CreateFolder", lambda: self.session.invoke(root.CreateFolder, name))
                break
            except vim.fault.DuplicateName as fault:
                existing = str(fault.object._moId) if fault.object is not None else ""
            info = parse_lease(self._description(existing))
            if stale is not None and existing != stale:  # someone else took it over first
                raise self.HELD(self._held_message(info), info)
            now = vcenter_now(self.session)
            if info is not None and info.folder == existing:
                if info.live(now) and not info.holder_gone():
                    raise self.HELD(self._held_message(info), info)
            else:  # its creator may be about to describe it: wait up to a time to live
                if undescribed is None or undescribed[0] != existing:
                    undescribed = (existing, now)
                if now - undescribed[1] < self.ttl_s:
                    time.sleep(min(UNSET_POLL_S, self.ttl_s / 4))
                    continue
            stale = existing
            log.info("%s: taking over the lease of a run that is gone (%s)", self.host,
                     info.describe() if info else "undescribed")  # fmt: skip
            # another taker may destroy it first; CreateFolder decides
            with contextlib.suppress(vim.fault.VimFault, vmodl.fault.ManagedObjectNotFound):
                _destroy(self.session, vim.Folder(existing, stub_of(self.session)))

    def _held_message(self, info: LeaseInfo | None) -> str:
        who = info.describe() if info is not None else "another run"
        expires = f"; if that run is gone, its lease expires at {info.expiry()}" if info is not None else ""
        return f"{self.host}: {who} is working on this host; not touched{expires}"

    def _description(self, folder: str) -> str:
        """The description of the lock folder `folder` as it stands (the object's attribute)."""
        return self.fields.get(self.moid, self.FIELD)

    def _describe(self, text: str) -> None:
        self.fields.set(self.moid, self.FIELD, text)

    def _write(self, renewed: float) -> None:
        folder = str(self._folder._moId) if self._folder is not None else ""
        info = LeaseInfo(self.run_id, self.holder, self._since, renewed, self.ttl_s, folder, os.getpid(), self.machine)
        self._describe(json.dumps(asdict(info), separators=(",", ":")))

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self._write(vcenter_now(self.session))
            except Exception as err:  # the next renewal tries again; expiry is the safe failure
                log.warning("%s: lease renewal failed: %s", self.host, _one_line(err))

    def stop_renewing(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def release_description(self) -> None:
        """The first half of `release`: renewals stop and the description says the lease is released (the last
        write to the object; its lock folder stays until `release`). Before a run destroys the object it
        holds, so that nothing writes to it afterwards. Never raises: a description that cannot be written is
        a warning, the folder still goes."""
        self.stop_renewing()
        if self._folder is None or self._released_described:
            return
        self._released_described = True
        try:
            self._describe_released()
        except Exception as err:  # the object may be gone; dropping the folder is what frees it
            log.warning("%s: could not describe the %s as released (%s)", self.host, self.KIND, _one_line(err))

    def release(self) -> None:
        """Stop renewing, describe the lease as released and remove its lock folder, on every way out: a folder
        that cannot be removed is taken over, or removed, by the next run that touches the object once its
        time to live has passed."""
        with _HELD_LOCK:
            _HELD.discard(self)
        self.release_description()
        if self._folder is None:
            return
        try:
            _destroy(self.session, self._folder)
        except Exception as err:
            if not _gone(err):  # a run that collected it first: the folder is gone either way
                log.warning("%s: could not remove the %s's lock folder (%s); the next run that touches it takes "
                            "it over once its time to live (%gs) has passed", self.host, self.KIND, _one_line(err),
                            self.ttl_s)  # fmt: skip
        self._folder = None

    def _describe_released(self) -> None:
        self._describe("")

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _gone(err: Exception) -> bool:
    """A fault saying the object is no longer there (ManagedObjectNotFound, also inside a VsphereFault)."""
    from pyVmomi import vmodl

    return isinstance(err, vmodl.fault.ManagedObjectNotFound) or getattr(err, "fault_type", "").endswith(
        "ManagedObjectNotFound"
    )


def _one_line(err: Exception) -> str:
    """A vim fault's type and message (pyVmomi's own text spans many lines)."""
    msg = getattr(err, "msg", None)
    return f"{type(err).__name__}: {msg}" if msg else str(err).splitlines()[0] if str(err) else type(err).__name__


def _destroy(session: Session, obj: Any) -> None:
    from pyVim.task import WaitForTask

    def destroy() -> None:
        session.invoke(WaitForTask, session.invoke(obj.Destroy_Task))

    guarded(f"cannot remove the lock folder {obj._moId}", "Destroy_Task", destroy)


def live_leases(session: Session, values: dict[str, str]) -> dict[str, LeaseInfo]:
    """Hosts whose `vgpuctl.lease` value describes a lease still live by vCenter's clock (one CurrentTime call,
    only when some host has a lease value)."""
    infos = {h: info for h, text in values.items() if (info := parse_lease(text)) is not None}
    if not infos:
        return {}
    now = vcenter_now(session)
    return {h: info for h, info in infos.items() if info.live(now) and not info.holder_gone()}
