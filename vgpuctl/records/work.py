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
from collections.abc import Callable
from dataclasses import asdict, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vgpuctl.lazyclass import dataclass

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
    # the SSH service as it was before a run started it (`ssh.service: manage`): {"running", "policy"}; the run
    # stops it again at its end, or a later run does from this record (vgpuctl.hosts.sshservice)
    ssh: dict[str, object] | None = None

    @property
    def only_ssh(self) -> bool:
        """The record holds nothing but the SSH service to put back (no host work to resume)."""
        return (self.ssh is not None and not self.vms and not self.entered_maintenance and not self.steps
                and not self.phase)


class Lease(Protocol):
    """A run's hold on one host while it works there (vsphere.workrecord.Lease)."""

    def acquire(self, wait_s: float = ..., on_wait: Callable[[Exception, float], None] | None = ...) -> Lease: ...
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
    change (thread-safe: hosts are applied in parallel). Subclasses say where the text goes. A host whose text is
    no work record is in `problems` (host -> the one line that says so), not in the records."""

    def __init__(self, values: dict[str, str], run_id: str):
        self.run_id = run_id
        self._lock = threading.Lock()
        self._records: dict[str, HostRecord] = {}
        self.problems: dict[str, str] = {}
        for host, text in values.items():
            rec, why = read_record(host, text)
            if rec is not None:
                self._records[host] = rec
            elif why is not None:
                self.problems[host] = record_problem(host, why)

    def _write(self, host: str, text: str) -> None:
        """Store a host's record text ("" clears it)."""
        raise NotImplementedError

    def reload(self, host: str, text: str) -> None:
        """Take the host's record as it is stored now (read again when the run got the host's lease)."""
        rec, why = read_record(host, text)
        with self._lock:
            self._records.pop(host, None)
            self.problems.pop(host, None)
            if rec is not None:
                self._records[host] = rec
            elif why is not None:
                self.problems[host] = record_problem(host, why)

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
        """The host's work is done; an SSH service a run started and has yet to stop stays recorded."""
        with self._lock:
            rec = self._records.pop(host, None)
            if rec is not None and rec.ssh is not None:
                self._records[host] = self._save(HostRecord(host, ssh=rec.ssh))
            elif rec is not None:
                self._write(host, "")

    def _save(self, rec: HostRecord) -> HostRecord:
        rec.run = self.run_id
        rec.updated = time.time()
        self._write(rec.host, record_text(rec))
        return rec


def record_text(rec: HostRecord) -> str:
    """A record as its stored text (compact JSON)."""
    return json.dumps(asdict(rec), separators=(",", ":"))


class _VmEntry(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: str
    moid: str = Field(min_length=1)
    after: Literal["power-on", "vm-change"] = "power-on"  # POWER_ON, VM_CHANGE


class _SshEntry(BaseModel):
    """The SSH service's state a run recorded before it started the service (`ssh.service: manage`)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    running: bool
    policy: str


class _RecordSchema(BaseModel):
    """What a `vgpuctl.work` value must be: every field typed; fields a later vgpuctl adds are left alone."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    vms: list[_VmEntry] = Field(default_factory=list)
    entered_maintenance: bool = False
    phase: str = ""
    message: str = ""
    updated: float = 0.0
    run: str = ""
    steps: list[str] = Field(default_factory=list)
    ssh: _SshEntry | None = None  # the SSH service as it was before a run started it

    @field_validator("updated", mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


def forget_hint(host: str) -> str:
    return f"clear it with `vgpuctl host forget-work {host}` once you have checked the host by hand"


def record_problem(host: str, why: str) -> str:
    """The one line for a host whose `vgpuctl.work` value is no work record: the host, the attribute, what is
    wrong and how to clear it."""
    return f"host {host}: its {WORK_FIELD} attribute is no vgpuctl work record ({why}); {forget_hint(host)}"


def read_record(host: str, text: str) -> tuple[HostRecord | None, str | None]:
    """A host's work record from its attribute value, checked against the record's schema: (record, None), or
    (None, what is wrong with it), or (None, None) for no record."""
    if not text:
        return None, None
    try:
        data = _RecordSchema.model_validate_json(text)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the value"
        return None, "not JSON" if first["type"] == "json_invalid" else f"{where}: {first['msg']}"
    vms = [v.model_dump() for v in data.vms]
    ssh = data.ssh.model_dump() if data.ssh is not None else None
    return HostRecord(host, vms, data.entered_maintenance, data.phase, data.message, data.updated, data.run,
                      list(data.steps), ssh), None  # fmt: skip


def parse_record(host: str, text: str) -> HostRecord | None:
    """A work record from its attribute value (None when empty, or not a work record: read_record says why)."""
    record, why = read_record(host, text)
    if why is not None:
        log.warning("%s", record_problem(host, why))
    return record


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
    if rec.ssh is not None:
        todo.append("stop the SSH service again")
    where = f" (stopped at {rec.phase})" if rec.phase else ""
    return f"unfinished work of run {rec.run or '?'}{where}: " + ("; ".join(todo) or "verify")
