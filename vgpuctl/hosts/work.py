"""Host work records: what an interrupted or failed host apply left to finish, so that a re-run resumes.

`HostRecord` is the record, `WorkRecords` one run's view of every host's record, written through after each
change. The records live in vCenter on the hosts themselves (vgpuctl.vsphere.workrecord.VcenterWorkStore, the
one store), so any operator's next run sees them. Pure: parsing and the record-keeping; where a record is
written is the store's `_write`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)

WORK_FIELD = "vgpuctl.work"  # the custom attribute that holds a host's record in vCenter (vsphere/workrecord)
POWER_ON = "power-on"  # HostRecord.vms[]["after"]: powered on again by the host run
VM_CHANGE = "vm-change"  # reconfigured and powered on by the VM's own change


@dataclass
class HostRecord:
    """What a re-run needs to finish a host: VMs to power on again and whether we put it in maintenance."""

    host: str
    vms: list[dict[str, str]] = field(default_factory=list)  # [{"name", "moid", "after"}]
    entered_maintenance: bool = False
    phase: str = ""
    message: str = ""
    updated: float = 0.0
    run: str = ""  # the run that wrote it
    steps: list[str] = field(default_factory=list)  # the host's planned steps, in order


class Lease(Protocol):
    """A run's hold on one host while it works there (vsphere.workrecord.Lease)."""

    def acquire(self) -> Lease: ...
    def release(self) -> None: ...


class WorkStore(Protocol):
    """Where host work records live, and the leases that keep two runs off one host."""

    def get(self, host: str) -> HostRecord | None: ...
    def hosts(self) -> list[str]: ...
    def update(self, host: str, **fields: object) -> HostRecord: ...
    def add_vm(self, host: str, name: str, moid: str, after: str = ...) -> None: ...
    def drop(self, host: str) -> None: ...
    def lease(self, host: str) -> Lease: ...


class WorkRecords:
    """One run's records of every host, read from their stored text and written through `_write` after every
    change (thread-safe: hosts are applied in parallel). Subclasses say where the text goes."""

    def __init__(self, values: dict[str, str], run_id: str):
        self.run_id = run_id
        self._lock = threading.Lock()
        self._records: dict[str, HostRecord] = {}
        for host, text in values.items():
            rec = parse_record(host, text)
            if rec is not None:
                self._records[host] = rec

    def _write(self, host: str, text: str) -> None:
        """Store a host's record text ("" clears it)."""
        raise NotImplementedError

    def get(self, host: str) -> HostRecord | None:
        with self._lock:
            return self._records.get(host)

    def hosts(self) -> list[str]:
        with self._lock:
            return sorted(self._records)

    def update(self, host: str, **fields: object) -> HostRecord:
        with self._lock:
            rec = self._records.setdefault(host, HostRecord(host))
            for k, v in fields.items():
                setattr(rec, k, v)
            return self._save(rec)

    def add_vm(self, host: str, name: str, moid: str, after: str = POWER_ON) -> None:
        """Record a VM the host run powers off; `after`: POWER_ON (the run powers it on again) or VM_CHANGE
        (its own VM change reconfigures and powers it on)."""
        with self._lock:
            rec = self._records.setdefault(host, HostRecord(host))
            if not any(v["moid"] == moid for v in rec.vms):
                rec.vms.append({"name": name, "moid": moid, "after": after})
            self._save(rec)

    def drop(self, host: str) -> None:
        with self._lock:
            if self._records.pop(host, None) is not None:
                self._write(host, "")

    def _save(self, rec: HostRecord) -> HostRecord:
        rec.run = self.run_id
        rec.updated = time.time()
        self._write(rec.host, record_text(rec))
        return rec


def record_text(rec: HostRecord) -> str:
    """A record as its stored text (compact JSON)."""
    return json.dumps(asdict(rec), separators=(",", ":"))


def parse_record(host: str, text: str) -> HostRecord | None:
    """A work record from its attribute value (None when empty or unreadable, with a warning)."""
    if not text:
        return None
    try:
        data = json.loads(text)
        known = {k: v for k, v in data.items() if k in HostRecord.__dataclass_fields__}
        return HostRecord(**{**known, "host": host})
    except (ValueError, TypeError, AttributeError) as err:
        log.warning("host %s: unreadable vgpuctl work record (%s); ignored", host, err)
        return None


def describe_record(rec: HostRecord) -> str:
    """One line for plans: what an unfinished run left to do on the host."""
    todo = []
    if rec.entered_maintenance:
        todo.append("exit maintenance")
    back = [v["name"] for v in rec.vms if v.get("after", POWER_ON) == POWER_ON]
    if back:
        todo.append("power on " + ", ".join(back))
    again = [v["name"] for v in rec.vms if v.get("after", POWER_ON) != POWER_ON]
    if again:
        todo.append("reconfigure and power on " + ", ".join(again))
    where = f" (stopped at {rec.phase})" if rec.phase else ""
    return f"unfinished work of run {rec.run or '?'}{where}: " + ("; ".join(todo) or "verify")
