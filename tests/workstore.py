"""Host work records in tests: an in-memory WorkStore for unit tests, and the record vCenter holds for a host
(read with pyVmomi, the way the bulk observe reads it) for sim tests."""

from __future__ import annotations

from typing import Any

from vgpuctl.records.work import WORK_FIELD, HostRecord, WorkRecords, parse_record


class MemoryWorkStore(WorkRecords):
    """The WorkStore protocol over a dict of host -> record text (what vCenter's `vgpuctl.work` attributes
    hold); leases are always free."""

    def __init__(self, values: dict[str, str] | None = None, run_id: str = "test-run"):
        self.values: dict[str, str] = dict(values or {})
        super().__init__(self.values, run_id)

    def _write(self, host: str, text: str) -> None:
        self.values[host] = text

    def lease(self, host: str) -> _FreeLease:
        return _FreeLease()


class _FreeLease:
    def acquire(self, wait_s: float = 0.0, on_wait: Any = None) -> _FreeLease:
        return self

    def release(self) -> None:
        pass


def vcenter_record(si: Any, host_name: str) -> HostRecord | None:
    """The host's work record as vCenter holds it now (its `vgpuctl.work` custom attribute), or None."""
    from pyVmomi import vim

    cfm = si.content.customFieldsManager
    key = next((f.key for f in cfm.field or [] if f.name == WORK_FIELD), None)
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.HostSystem], True)
    try:
        host = next(h for h in view.view if h.name == host_name)
    finally:
        view.DestroyView()
    text = next((str(v.value) for v in host.customValue or [] if v.key == key), "")
    return parse_record(host_name, text)
