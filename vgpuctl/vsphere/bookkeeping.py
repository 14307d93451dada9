"""vgpuctl's own bookkeeping in vCenter and the privileges it needs: the lock folders of host leases and VM claims
(created and removed under the root folder) and the custom attributes that hold work records and describe
leases and claims (defined once, then set on hosts and VMs).

A call vCenter refuses for want of a privilege becomes one line naming the privilege and what vgpuctl needed
it for (BookkeepingError), never a fault dump. PRIVILEGES is the one list of them: the README's role table
names the same, and a preflight checks them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from vgpuctl.errors import VgpuctlError

T = TypeVar("T")

# vCenter method -> the privilege it needs here (vSphere Web Services API reference, "Required Privileges")
PRIVILEGES = {
    "CreateFolder": "Folder.Create",  # a lease's or claim's lock folder, under the root folder
    "Destroy_Task": "Folder.Delete",  # removing it when the work is done, or taking over a dead run's
    "AddCustomFieldDef": "Global.ManageCustomFields",  # vgpuctl.work, vgpuctl.lease, vgpuctl.claim, once
    "SetField": "Global.SetCustomField",  # writing them on hosts and VMs
}

ROLE_HINT = 'vgpuctl\'s role needs it: README, "What a real vCenter needs"'


class BookkeepingError(VgpuctlError):
    """vCenter refused vgpuctl's own bookkeeping (a lock folder, a custom attribute) for want of a privilege."""

    def __init__(self, message: str, privilege: str):
        super().__init__(message)
        self.privilege = privilege


def guarded(what: str, method: str, call: Callable[[], T]) -> T:
    """`call()`, with NoPermission turned into one BookkeepingError line: `WHAT: vCenter refused METHOD: this user
    lacks the privilege P on OBJECT (...role hint)`."""
    from pyVmomi import vim

    try:
        return call()
    except vim.fault.NoPermission as fault:
        privilege = str(getattr(fault, "privilegeId", "") or PRIVILEGES.get(method, "?"))
        where = getattr(getattr(fault, "object", None), "_moId", "")
        on = f" on {where}" if where else ""
        raise BookkeepingError(
            f"{what}: vCenter refused {method}: this user lacks the privilege {privilege}{on} ({ROLE_HINT})", privilege
        ) from None
