"""Values with one meaning across vgpuctl, defined once: outcomes of a step, limits, modes and policies.

The inventory schema, the planners, the CLI options and the reports import these; nothing here does I/O.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What happened to one object (VM, host, guest) in a run."""

    CHANGED = "changed"
    UNCHANGED = "unchanged"
    FAILED = "failed"
    SKIPPED = "skipped"


MAX_VGPUS_PER_VM = 8  # vSphere 8.0; the host reports its own limit (ObservedHost.max_vgpus_per_vm)
