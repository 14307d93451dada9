"""`host forget-work HOST`: the host's work record that was cleared, as it was."""

from __future__ import annotations

from typing import ClassVar

from vgpuctl.lazyclass import dataclass
from vgpuctl.records.work import describe_record, read_record
from vgpuctl.reports.base import TERMINAL, Report, TextLayout


@dataclass
class ForgetWorkReport(Report):
    """What `vgpuctl.work` held on the host and whether it was cleared: `record` is its text as it was ("" for no
    record), `problem` why it was no work record (None when it was one), `unfinished` what it said was left."""

    kind: ClassVar[str] = "host-forget-work"
    host: str
    record: str
    problem: str | None
    unfinished: str | None
    cleared: bool

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        if not self.record:
            return f"{self.host}: no work record: nothing to clear"
        if self.problem is not None:
            return f"{self.host}: work record cleared; it held no work record ({self.problem})"
        return f"{self.host}: work record cleared; it held: {self.unfinished}"



def forget_work_report(host: str, record: str, cleared: bool) -> ForgetWorkReport:
    """The document of `host forget-work` from the host's `vgpuctl.work` text as it was."""
    parsed, problem = read_record(host, record)
    return ForgetWorkReport(host, record, problem, describe_record(parsed) if parsed is not None else None, cleared)
