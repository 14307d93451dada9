"""The live displays on stderr: an apply's (what each host and VM is doing, and a line for each that finished), the
wait for the guests' IP addresses (`AddressWait`) and a guest deploy's (`DeployProgress`, per host; its summary is
the guests report).

On a terminal: a live view (the hosts and VMs in flight with their step and task percentage, as many as the
terminal has rows, and a counter of finished hosts and VMs, counted apart) under the lines of the ones that
finished, each printed exactly once; a finished VM's row leaves the view with its line. Off a terminal (CI
logs, pipes): a timestamped line per step change and at most one heartbeat per 30 s of a long wait.
VMs an interrupted apply never started get no line of their own: the summary counts and names them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import Outcome
from vgpuctl.guest.runner import HostTracker
from vgpuctl.lazyclass import dataclass
from vgpuctl.progress import LiveOnTerminal, StepLog
from vgpuctl.reports.guests import STATUS_STYLE
from vgpuctl.visible import visible

if TYPE_CHECKING:
    from rich.console import Console

VM_FINAL = frozenset({"done", "failed", "skipped", "not-started", "interrupted"})
HOST_FINAL = frozenset(str(o) for o in Outcome)
QUIET_FINAL = frozenset({"not-started"})  # VMs: counted in the summary, no line each
ROWS_KEPT = 3  # terminal rows the view leaves free: the counter, the "more in flight" row, the cursor


@dataclass
class Row:
    label: str  # "vm-0001" or "host esx-01"
    step: str
    percent: int | None = None
    detail: str | None = None


def words(step: str) -> str:
    """A step or outcome as people read it: `not-started` -> `not started`."""
    return "not started" if step == str(Outcome.NOT_STARTED) else step


class ApplyDisplay(LiveOnTerminal):
    """A `Progress` for the whole apply (vgpuctl.progress): host steps, VM steps, the VMs planned."""

    refresh_per_second = 8

    def __init__(self, console: Console, vms: Sequence[str], hosts: Sequence[str] = ()):
        self.console = console
        self.vm_total = len(vms)
        self.host_total = len(hosts)
        self.rows: dict[str, Row] = {}  # in flight, by label
        self.finished: dict[str, str] = {}  # label -> its final step
        self.vms_done = 0
        self.hosts_done = 0
        self.log = StepLog(self.print_line)

    def note(self, message: str) -> None:
        self.print_line(message)

    # ------------------------------------------------------------------------------------- Progress

    def vms_planned(self, vms: Sequence[str]) -> None:
        with self.out_lock:
            self.vm_total = len(vms)

    def vm_step(self, vm: str, step: str, percent: int | float | None = None) -> None:
        pct = None if percent is None else int(percent)
        self._update(vm, step, pct, None, final=step in VM_FINAL, is_host=False)

    def host_step(self, host: str, step: str, detail: str | None) -> None:
        self._update(f"host {host}", step, None, detail, final=step in HOST_FINAL, is_host=True)

    # ------------------------------------------------------------------------------------- state

    def _update(self, label: str, step: str, pct: int | None, detail: str | None, *, final: bool,
                is_host: bool) -> None:
        with self.out_lock:
            if label in self.finished:
                return  # a late report (a task's last percentage) after it finished
            previous = self.rows.get(label)
            if final:
                self.rows.pop(label, None)
                self.finished[label] = step
                if is_host:
                    self.hosts_done += 1
                else:
                    self.vms_done += 1
            else:
                self.rows[label] = Row(label, step, pct, detail)
            changed = previous is None or previous.step != step or (is_host and previous.detail != detail)
            self._write(label, step, pct, detail, final=final, changed=changed)

    def _write(self, label: str, step: str, pct: int | None, detail: str | None, *, final: bool,
               changed: bool) -> None:
        if final and step in QUIET_FINAL and not label.startswith("host "):
            return
        if self.live is None:  # a percentage only while vCenter reports one between start and end
            shown = detail if detail else f"{pct}%" if pct is not None and 0 < pct < 100 and not final else None
            self.log.step(label, words(step), shown)
        elif final:
            self.print_line(f"{label}: {words(step)}" + (f" ({detail})" if detail else ""))

    # ------------------------------------------------------------------------------------- the view

    def counter(self) -> str:
        vms = f"{self.vms_done}/{self.vm_total} VMs finished"
        return f"{self.hosts_done}/{self.host_total} hosts, {vms}" if self.host_total else vms

    def __rich__(self) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        for _ in range(4):
            table.add_column(no_wrap=True, overflow="ellipsis")
        with self.out_lock:
            active = list(self.rows.values())
            room = max(1, self.console.size.height - ROWS_KEPT)
            shown = active if len(active) <= room else active[: room - 1]
            for row in shown:
                bar = ProgressBar(total=100, completed=row.percent or 0, width=20) if row.percent is not None else ""
                after = f"{row.percent}%" if row.percent is not None else (row.detail or "")
                table.add_row(visible(row.label, False), row.step, bar, visible(after, False))
            if len(shown) < len(active):
                table.add_row(f"... and {len(active) - len(shown)} more in flight", "", "", "")
            table.add_row(self.counter(), "", "", "")
        return table


# ------------------------------------------------------------------------------------------ guest addresses

ADDRESS_SUBJECT = "guest IP addresses"
WAITING_SHOWN = 5  # VM names on the line; the rest counted


def seconds(value: float) -> str:
    """`12 s`, `3 min 05 s`."""
    whole = int(value)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"


def waiting_for(names: Sequence[str], shown: int = WAITING_SHOWN) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


class AddressWait(LiveOnTerminal):
    """The wait for the guests' IP addresses, fed each read (VM name -> address or None). On a terminal one line
    that updates: how many have one, how long it has waited, the VMs it still waits for. Off a terminal a dated
    line when the VMs waited for change, and at most one per 30 s while they do not (StepLog). On leaving, a
    line with the outcome: all there, or the VMs that had none."""

    refresh_per_second = 2

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic,
                 stamp: Callable[[], str] | None = None):
        self.console = console
        self.clock = clock
        self.started = clock()
        self.current: dict[str, str | None] = {}
        self.log = StepLog(self.print_line, clock=clock, stamp=stamp)

    def __call__(self, current: dict[str, str | None]) -> None:
        with self.out_lock:
            self.current = dict(current)
            if self.live is None:
                self.log.step(ADDRESS_SUBJECT, self.state(), f"(waited {seconds(self.waited())})")

    def waited(self) -> float:
        return self.clock() - self.started

    def missing(self) -> list[str]:
        return sorted(name for name, address in self.current.items() if not address)

    def state(self) -> str:
        """`3/7, waiting for a, b, c, d, e and 1 more`, or `7/7`."""
        have = len(self.current) - len(self.missing())
        missing = self.missing()
        return f"{have}/{len(self.current)}" + (f", waiting for {waiting_for(missing)}" if missing else "")

    def __rich__(self) -> Any:
        from rich.text import Text

        with self.out_lock:
            line = f"{ADDRESS_SUBJECT}: {self.state()} (waited {seconds(self.waited())})"
        return Text(visible(line, False), no_wrap=True, overflow="ellipsis")

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if not self.current:
            return
        missing = self.missing()
        outcome = f"no address for {waiting_for(missing)}" if missing else "all there"
        have = len(self.current) - len(missing)
        self.print_line(f"{ADDRESS_SUBJECT}: {have}/{len(self.current)} after {seconds(self.waited())}: {outcome}")


# ------------------------------------------------------------------------------------------ guest deploy

DEPLOY_ROWS = 40


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
        for host in self.hosts[:DEPLOY_ROWS]:
            counts = self.tracker.counts.get(host, {})
            state = self._state(host)
            table.add_row(
                Text(visible(host, False)),
                Text(state, style=STATUS_STYLE.get(state, "dim")),
                Text(visible(self.tracker.task.get(host, ""), False)),
                str(counts.get("ok", 0)),
                str(counts.get("changed", 0)),
                str(counts.get("failed", 0)),
            )
        if len(self.hosts) > DEPLOY_ROWS:
            table.add_row(f"... {len(self.hosts) - DEPLOY_ROWS} more", "", "", "", "", "")
        return table
