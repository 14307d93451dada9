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
    differs: bool | None = None  # vCenter's value is another, field by field (per GPU); None: no vCenter value


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
            lines += _setting_lines(self.settings)
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


HEADER = ("setting", "inventory", "vCenter now", "", "from")


def _setting_lines(settings: list[ExplainedValue]) -> list[str]:
    """A table in aligned columns: the setting, the merged value, vCenter's value, `differs` where vCenter has
    another value, and the entry that set it."""
    rows = [(s.setting, s.value, "-" if s.vcenter is None else s.vcenter, "differs" if s.differs else "", s.source)
            for s in settings]
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(4)]
    return [("  " + "  ".join(f"{cell:<{w}}" for cell, w in zip(row[:4], widths, strict=True)) + f"  {row[4]}")
            .rstrip() for row in [HEADER, *rows]]
