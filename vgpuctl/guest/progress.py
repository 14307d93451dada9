"""Live per-host progress of a guest deploy (stderr) and the per-host summary table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vgpuctl.guest.runner import DeployResult, HostTracker
from vgpuctl.progress import LiveOnTerminal

if TYPE_CHECKING:
    from rich.console import Console

MAX_ROWS = 40
STATUS_STYLE = {"ok": "green", "changed": "yellow", "failed": "red", "unreachable": "red", "running": "cyan"}


class DeployProgress(LiveOnTerminal):
    """Feeds on ansible-runner events. On a terminal: a live table, one row per host (its current task and
    counts). Elsewhere: one line per new task and one per host failure, so logs stay readable."""

    def __init__(self, console: Console, hosts: list[str]):
        self.console = console
        self.hosts = hosts
        self.tracker = HostTracker()
        self._last_task = ""

    def __call__(self, event: dict[str, Any]) -> None:
        host = self.tracker.feed(event)
        if self.live is not None:
            return
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_task_start" and data.get("task") != self._last_task:
            self._last_task = data.get("task", "")
            self.console.print(f"TASK {self._last_task}", markup=False)
        elif host and kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            word = "UNREACHABLE" if kind == "runner_on_unreachable" else "FAILED"
            self.console.print(f"{host}: {word}: {self.tracker.messages.get(host, '')}", markup=False)

    def _state(self, host: str) -> str:
        if host in self.tracker.unreachable:
            return "unreachable"
        counts = self.tracker.counts.get(host, {})
        if counts.get("failed"):
            return "failed"
        return "running" if host in self.tracker.task else "waiting"

    def __rich__(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
        for col in ("host", "state", "task", "ok", "changed", "failed"):
            table.add_column(col, justify="right" if col in ("ok", "changed", "failed") else "left")
        for host in self.hosts[:MAX_ROWS]:
            counts = self.tracker.counts.get(host, {})
            state = self._state(host)
            table.add_row(
                Text(host),
                Text(state, style=STATUS_STYLE.get(state, "dim")),
                Text(self.tracker.task.get(host, "")),
                str(counts.get("ok", 0)),
                str(counts.get("changed", 0)),
                str(counts.get("failed", 0)),
            )
        if len(self.hosts) > MAX_ROWS:
            table.add_row(f"... {len(self.hosts) - MAX_ROWS} more", "", "", "", "", "")
        return table


def summary_table(result: DeployResult) -> Any:
    from rich.table import Table
    from rich.text import Text

    title = "Guest deploy (check mode)" if result.check else "Guest deploy"
    table = Table(title=title, title_justify="left", box=None, pad_edge=False, header_style="bold")
    for col in ("host", "group", "status", "ok", "changed", "failed", "unreachable", "message"):
        table.add_column(col, justify="right" if col in ("ok", "changed", "failed", "unreachable") else "left")
    for h in result.hosts:
        table.add_row(
            Text(h.host),
            Text(h.group),
            Text(h.status, style=STATUS_STYLE.get(h.status, "")),
            str(h.ok),
            str(h.changed),
            str(h.failed),
            str(h.unreachable),
            Text(h.message),
        )
    return table


def summary_text(result: DeployResult, with_messages: bool = True) -> str:
    """Plain-text summary (what non-rich consumers and tests read)."""
    counts: dict[str, int] = {}
    for h in result.hosts:
        counts[h.status] = counts.get(h.status, 0) + 1
    parts = [f"{counts.get(k, 0)} {k}" for k in ("ok", "changed", "failed", "unreachable")]
    lines = [f"Guest deploy{' (check)' if result.check else ''}: " + ", ".join(parts) + "."]
    if with_messages:
        lines += [f"  {h.status}: {h.host}: {h.message}" for h in result.hosts if h.message]
    if result.artifacts:
        lines.append(f"  artifacts: {result.artifacts}")
    return "\n".join(lines)
