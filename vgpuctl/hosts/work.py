"""Host work records: what an interrupted or failed host apply left to finish, so that a re-run resumes.

`HostRecord` is the record; by default it lives in vCenter on the host itself (vgpuctl.vsphere.workrecord), so
any operator's next run sees it. `StateStore` keeps the same records in a local JSON file instead (one per
vCenter under $VGPUCTL_STATE_DIR, else ~/.local/state/vgpuctl), written
atomically after every change; tests and offline tools use it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from vgpuctl.errors import VgpuctlError

log = logging.getLogger(__name__)


def default_state_path(vcenter_url: str | None = None) -> Path:
    """$VGPUCTL_STATE_DIR, else ~/.local/state/vgpuctl; one file per vCenter."""
    base = os.environ.get("VGPUCTL_STATE_DIR") or os.path.expanduser("~/.local/state/vgpuctl")
    tag = "".join(c if c.isalnum() or c in "-." else "_" for c in (vcenter_url or "default").split("://")[-1])
    return Path(base) / f"hostops-{tag.strip('_') or 'default'}.json"


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
    # stops it again at its end, or a later run does from this record
    ssh: dict[str, object] | None = None

    @property
    def only_ssh(self) -> bool:
        """The record holds nothing but the SSH service to put back (no host work to resume)."""
        return (self.ssh is not None and not self.vms and not self.entered_maintenance and not self.steps
                and not self.phase)


class WorkStore(Protocol):
    """Where host work records live: StateStore (a local file) or vsphere.workrecord.VcenterWorkStore."""

    def get(self, host: str) -> HostRecord | None: ...
    def hosts(self) -> list[str]: ...
    def update(self, host: str, **fields: object) -> HostRecord: ...
    def add_vm(self, host: str, name: str, moid: str, after: str = ...) -> None: ...
    def drop(self, host: str) -> None: ...


class StateStore:
    """A small JSON file of HostRecords, written atomically after every change (thread-safe)."""

    def __init__(self, path: Path | str | None):
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._records: dict[str, HostRecord] = {}
        if self.path is not None and self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self._records = {k: HostRecord(**v) for k, v in (data.get("hosts") or {}).items()}
            except (OSError, ValueError, TypeError) as err:
                raise VgpuctlError(f"cannot read the host state file {self.path}: {err}") from err

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
            rec.updated = time.time()
            self._save()
            return rec

    def add_vm(self, host: str, name: str, moid: str, after: str = POWER_ON) -> None:
        """Record a VM the host run powers off; `after`: POWER_ON (the run powers it on again) or VM_CHANGE
        (its own VM change reconfigures and powers it on)."""
        with self._lock:
            rec = self._records.setdefault(host, HostRecord(host))
            if not any(v["moid"] == moid for v in rec.vms):
                rec.vms.append({"name": name, "moid": moid, "after": after})
            rec.updated = time.time()
            self._save()

    def drop(self, host: str) -> None:
        """The host's work is done; an SSH service a run started and has yet to stop stays recorded."""
        with self._lock:
            rec = self._records.pop(host, None)
            if rec is not None and rec.ssh is not None:
                self._records[host] = HostRecord(host, ssh=rec.ssh, run=rec.run, updated=time.time())
            if rec is not None:
                self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"version": 1, "hosts": {k: asdict(v) for k, v in self._records.items()}}, indent=2),
            encoding="utf-8",
        )
        os.replace(tmp, self.path)


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
    if rec.ssh is not None:
        todo.append("stop the SSH service again")
    where = f" (stopped at {rec.phase})" if rec.phase else ""
    return f"unfinished work of run {rec.run or '?'}{where}: " + ("; ".join(todo) or "verify")
