"""Live per-host progress of a guest deploy (stderr); the summary is the guests report (vgpuctl.reports.guests)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vgpuctl.guest.runner import HostTracker
from vgpuctl.progress import LiveOnTerminal
from vgpuctl.reports.guests import STATUS_STYLE

if TYPE_CHECKING:
    from rich.console import Console

MAX_ROWS = 40


class DeployProgress(LiveOnTerminal):
    """Feeds on ansible-runner events. On a terminal: a live table, one row per host (its current task and
    counts). Elsewhere: one line per new task and one per host failure, so logs stay readable."""

    def __init__(self, console: Console, hosts: list[str]):
        self.console = console
        self.hosts = hosts
        self.tracker = HostTracker()
        self._last_task = ""

    def __call__(self, event: dict[str, Any]) -> None:
        with self.out_lock:  # the live view reads the tracker under the same lock
            host = self.tracker.feed(event)
        if self.live is not None:
            return
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_task_start" and data.get("task") != self._last_task:
            self._last_task = data.get("task", "")
            self.print_line(f"TASK {self._last_task}")
        elif host and kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            word = "UNREACHABLE" if kind == "runner_on_unreachable" else "FAILED"
            self.print_line(f"{host}: {word}: {self.tracker.messages.get(host, '')}")

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
