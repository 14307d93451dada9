"""The guest-run and provision documents."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from vgpuctl.lazyclass import dataclass
from vgpuctl.reports.apply import ApplyReport
from vgpuctl.reports.base import TERMINAL, Rendered, Report, TextLayout
from vgpuctl.visible import lines_text, visible

if TYPE_CHECKING:
    from rich.console import RenderableType

    from vgpuctl.guest.runner import DeployResult

STATUS_STYLE = {"ok": "green", "changed": "yellow", "failed": "red", "unreachable": "red", "running": "cyan"}
COUNTED = ("ok", "changed", "failed", "unreachable")


@dataclass
class GuestResult:
    vm: str
    group: str
    status: str  # ok | changed | failed | unreachable
    ok: int
    changed: int
    failed: int
    unreachable: int
    skipped: int
    message: str


@dataclass
class GuestRunReport(Report):
    """`guest deploy`: each guest's playbook result."""

    kind: ClassVar[str] = "guests"
    guests: list[GuestResult]
    check: bool
    runner_status: str
    rc: int
    artifacts: str | None

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        """The per-guest table and the counts (the messages are in the table); in a pipe, a plain line per guest."""
        if layout.plain:
            lines = [f"guest {g.vm}  group {g.group}  status {g.status}  ok {g.ok}  changed {g.changed}  failed "
                     f"{g.failed}  unreachable {g.unreachable}" + (f"  message {g.message}" if g.message else "")
                     for g in self.guests]
            return "\n".join([*lines, self.summary_text(with_messages=False)])
        return [self.table(), self.summary_text(with_messages=False)]

    def table(self) -> RenderableType:
        from rich.table import Table
        from rich.text import Text

        title = "Guest deploy (check mode)" if self.check else "Guest deploy"
        table = Table(title=title, title_justify="left", box=None, pad_edge=False, header_style="bold")
        for col in ("host", "group", "status", "ok", "changed", "failed", "unreachable", "message"):
            table.add_column(col, justify="right" if col in COUNTED else "left")
        for g in self.guests:
            table.add_row(Text(visible(g.vm, False)), Text(visible(g.group, False)),
                          Text(g.status, style=STATUS_STYLE.get(g.status, "")), str(g.ok), str(g.changed),
                          str(g.failed), str(g.unreachable), Text(visible(g.message)))
        return table

    def summary_text(self, with_messages: bool = True) -> str:
        """The counts per status, each guest's message (with_messages), the artifacts folder."""
        counts: dict[str, int] = {}
        for g in self.guests:
            counts[g.status] = counts.get(g.status, 0) + 1
        parts = [f"{counts.get(k, 0)} {k}" for k in COUNTED]
        lines = [f"Guest deploy{' (check)' if self.check else ''}: " + ", ".join(parts) + "."]
        if with_messages:
            lines += [f"  {g.status}: {g.vm}: {g.message}" for g in self.guests if g.message]
        if self.artifacts:
            lines.append(f"  artifacts: {self.artifacts}")
        return lines_text(lines)


def guest_run_report(result: DeployResult) -> GuestRunReport:
    guests = [
        GuestResult(h.host, h.group, h.status, h.ok, h.changed, h.failed, h.unreachable, h.skipped, h.message)
        for h in result.hosts
    ]
    artifacts = str(result.artifacts) if result.artifacts else None
    return GuestRunReport(guests, result.check, result.runner_status, result.rc, artifacts)


@dataclass
class ProvisionReport(Report):
    kind: ClassVar[str] = "provision"
    apply: ApplyReport
    guests: GuestRunReport | None  # None: no VM has a guest group

    def render_text(self, layout: TextLayout = TERMINAL) -> None:
        """None: in text mode provision shows the apply's progress and summary, then the guests' table."""
        return None
