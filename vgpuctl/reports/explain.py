"""`plan --explain HOST`: a host's merged settings, where each came from, vCenter's value and the plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vgpuctl.reports.base import Report
from vgpuctl.reports.plan import HostDiff


@dataclass
class ExplainedValue:
    setting: str  # graphics.default_type, gpus[all].mode, scheduler.policy, ...
    value: str  # as the merged entries say
    source: str  # FILE:LINE (cluster X | host Y): the entry that set it last
    vcenter: str | None  # what vCenter or the host reports now; None for vgpuctl's own settings (ssh, ...)


@dataclass
class ExplainReport(Report):
    """`plan --explain HOST`: the host's merged entry against vCenter, and what the plan changes there."""

    kind: ClassVar[str] = "explain"
    host: str
    cluster: str | None
    entries: list[str]  # the inventory entries that apply to the host, merged in this order
    settings: list[ExplainedValue]
    changes: list[HostDiff]
    errors: list[str]
