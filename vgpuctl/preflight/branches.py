"""The NVIDIA vGPU Manager (host) / guest driver compatibility rule as preflight reads it, branch by branch.

The release table, the rule and the vGPU Manager's VIB names live in vgpuctl.releases (the rules floor, so the
host settings and the upgrade window read the same rule); this module names what preflight uses of them. The
branch-level reading: the same branch passes; a guest one branch older, or the previous LTS branch under an LTS
manager, is compatible with a warning (NVIDIA limits it to the older branch's features); anything else fails, a
guest driver newer than the manager in particular. A branch the release table does not list is a warning.
docs/preflight.md, "The branch rule".
"""

from __future__ import annotations

from vgpuctl.releases import (
    Branch,
    Track,
    Verdict,
    branch_of,
    branches,
    compatibility,
    driver_version,
    is_manager_vib,
    known,
    manager_in,
)

__all__ = [
    "Branch", "Track", "Verdict", "branch_of", "branches", "compatibility", "driver_version", "is_manager_vib",
    "known", "manager_in",
]
