"""`plan --explain HOST`: a host's merged settings, where each came from, vCenter's value and the plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vgpuctl.reports.base import TERMINAL, Report, TextLayout
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

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        head = " then ".join(self.entries) or "no entry"
        lines = [f"host {self.host} (cluster {self.cluster or '-'}): {head}"]
        if self.settings:
            width = max(len(s.setting) for s in self.settings)
            lines += [_setting_line(s, width) for s in self.settings]
        else:
            lines.append("  no inventory entry sets anything for this host: vgpuctl leaves it as it is")
        if self.changes:
            lines.append("  the plan changes:")
            lines += [f"    {c.setting}{'' if c.gpu is None else ' ' + c.gpu}: {c.old} -> {c.new}"
                      for c in self.changes]
        else:
            lines.append("  the plan changes nothing on this host")
        lines += [f"  error: {e}" for e in self.errors]
        return "\n".join(lines)


def _setting_line(s: ExplainedValue, width: int) -> str:
    now = "" if s.vcenter is None else f"   vCenter: {s.vcenter}" + ("" if s.vcenter == s.value else " (differs)")
    return f"  {s.setting:<{width}}  {s.value}   from {s.source}{now}"
