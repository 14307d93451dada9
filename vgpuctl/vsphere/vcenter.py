"""vCenter-wide reads: advanced settings."""

from __future__ import annotations

from vgpuctl.vsphere.session import Session


def advanced_setting_true(session: Session, name: str) -> bool:
    """Whether vCenter's advanced setting `name` is "true" (one read; absent means false)."""
    from pyVmomi import vim

    manager = session.content.setting
    if manager is None:
        return False
    try:
        values = session.invoke(manager.QueryOptions, name)
    except vim.fault.InvalidName:
        return False
    return any(str(v.value).strip().lower() == "true" for v in values or [])
