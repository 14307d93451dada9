"""Progress and cancellation as small interfaces the pipeline takes, and a live display base for the CLI.

`VmProgress` / `HostProgress` receive each step as it starts; `Progress` (a whole apply) also learns which VMs
the apply will change (`vms_planned`, again after the host changes). `Fanout` hands every call to several sinks
(the display and the event stream see the same steps). `Cancel` is asked before new work starts (a
threading.Event fits). `LiveOnTerminal` shows a rich Live view on a terminal, plain lines elsewhere.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from vgpuctl.errors import Interrupted
from vgpuctl.visible import visible

T = TypeVar("T")
U = TypeVar("U")

if TYPE_CHECKING:
    from rich.console import Console


class Cancel(Protocol):
    """Set when the user asked to stop: running steps finish, no new ones start."""

    def is_set(self) -> bool: ...


class VmProgress(Protocol):
    """One VM's step (check, shutdown, reconfigure, power-on, done, failed, ...) and its task's percent."""

    def vm_step(self, vm: str, step: str, percent: int | None) -> None: ...


class HostProgress(Protocol):
    """One host's step (enter-maintenance, mig, reboot, verify, ...) and what it is doing."""

    def host_step(self, host: str, step: str, detail: str | None) -> None: ...


class Progress(VmProgress, HostProgress, Protocol):
    """A display for a whole apply: VM and host steps, and the VMs the apply changes."""

    def vms_planned(self, vms: Sequence[str]) -> None:
        """The VMs the VM stage will change (called before it starts, after any host changes)."""


class Fanout:
    """One Progress that hands every call to each of its sinks, in order."""

    def __init__(self, *sinks: Progress):
        self.sinks = sinks

    def vm_step(self, vm: str, step: str, percent: int | None) -> None:
        for sink in self.sinks:
            sink.vm_step(vm, step, percent)

    def host_step(self, host: str, step: str, detail: str | None) -> None:
        for sink in self.sinks:
            sink.host_step(host, step, detail)

    def vms_planned(self, vms: Sequence[str]) -> None:
        for sink in self.sinks:
            sink.vms_planned(vms)


def cancelled(cancel: Cancel | None) -> bool:
    return cancel is not None and cancel.is_set()


class RunningTasks:
    """The vCenter tasks and waits in flight ("reconfigure train-03 (task-41)"), for the line a second Ctrl-C
    prints: those may still be running in vCenter when vgpuctl exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, None] = {}

    def add(self, label: str) -> None:
        with self._lock:
            self._items[label] = None

    def discard(self, label: str) -> None:
        with self._lock:
            self._items.pop(label, None)

    def labels(self) -> list[str]:
        with self._lock:
            return list(self._items)


RUNNING = RunningTasks()
EXIT_NOW = threading.Event()  # a second Ctrl-C: the process exits without waiting for any worker thread


def log_stamp() -> str:
    """Local time with its date and UTC offset (`2026-12-01T09:15:02+01:00`): a log line read later, or beside
    another machine's, says when it happened without knowing where it was written."""
    from datetime import datetime

    return datetime.now().astimezone().isoformat(timespec="seconds")


class StepLog:
    """Progress as plain lines for logs (CI, pipes): a timestamped line when a subject's step changes, and while
    one step lasts at most one heartbeat line per `heartbeat_s` with its latest detail (seconds waited, percent)."""

    heartbeat_s = 30.0

    def __init__(
        self,
        write: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        stamp: Callable[[], str] | None = None,
    ):
        self._write = write
        self._clock = clock
        self._stamp = stamp or log_stamp
        self._lock = threading.Lock()
        self._last: dict[str, tuple[str, float]] = {}  # subject -> (step, when its last line was written)

    def step(self, subject: str, step: str, detail: str | None = None) -> None:
        now = self._clock()
        with self._lock:
            last = self._last.get(subject)
            if last is not None and last[0] == step and now - last[1] < self.heartbeat_s:
                return
            self._last[subject] = (step, now)
        self._write(visible(f"{self._stamp()} {subject}: {step}" + (f" {detail}" if detail else ""), False))


class LiveOnTerminal:
    """Context manager showing `self` (a rich renderable) live while the console is a terminal.

    One console: every write (a line printed above the live view, each refresh of it) happens under one lock,
    so lines from worker threads and the refresh never interleave their cursor movements; the view is
    refreshed by one ticker thread, not by rich's own. Subclasses set `console`, render themselves (`__rich__`,
    at most the terminal's height) and print lines with `print_line`; `self.live` is None off a terminal, which
    tells them to print plain lines instead (CI logs stay readable).
    """

    refresh_per_second = 4
    console: Console
    live: Any = None
    _ticker: threading.Thread | None = None

    @property
    def out_lock(self) -> threading.RLock:
        return self.__dict__.setdefault("_out_lock", threading.RLock())  # type: ignore[no-any-return]

    def __enter__(self) -> Self:
        if self.console.is_terminal:
            from rich.live import Live

            with self.out_lock:
                self.live = Live(self, console=self.console, auto_refresh=False, transient=True,
                                 vertical_overflow="crop")
                self.live.start(refresh=True)
            self._stop_ticker = threading.Event()
            self._ticker = threading.Thread(target=self._tick, name="vgpuctl-display", daemon=True)
            self._ticker.start()
        return self

    def _tick(self) -> None:
        while not self._stop_ticker.wait(1 / self.refresh_per_second):
            with self.out_lock:
                if self.live is not None:
                    self.live.refresh()

    def print_line(self, text: str) -> None:
        """A line above the live view (or a plain line), never cut, never read as markup."""
        with self.out_lock:
            self.console.print(visible(text), markup=False, highlight=False, soft_wrap=True)

    def __rich__(self) -> Any:
        raise NotImplementedError("a live display renders itself")

    def __exit__(self, *exc: object) -> None:
        if self._ticker is not None:
            self._stop_ticker.set()
            self._ticker.join()
            self._ticker = None
        with self.out_lock:
            if self.live is not None:
                self.live.stop()
                self.live = None


# ------------------------------------------------------------------------------------------ Ctrl-C


def second_interrupt_message(running: Sequence[str]) -> str:
    if not running:
        return "interrupted again: exiting now; no vCenter task was running"
    return "interrupted again: exiting now; these vCenter tasks may still be running: " + ", ".join(running)


def run_interruptible(
    work: Callable[[Cancel], T], on_interrupt: Callable[[str], None], on_exit_now: Callable[[], None] | None = None
) -> tuple[T, bool]:
    """`work(cancel)` in a worker thread. The first Ctrl-C sets `cancel` (running and restoring steps finish,
    no new forward step starts) and calls `on_interrupt`; a second one exits at once (Interrupted, naming the
    vCenter tasks that may still run). Returns (result, interrupted)."""
    cancel = threading.Event()
    finished = threading.Event()  # not Thread.join: a KeyboardInterrupt inside join() can corrupt is_alive()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = work(cancel)
        except BaseException as err:  # re-raised in the calling thread
            box["error"] = err
        finally:
            finished.set()

    interrupts: list[int] = []

    def on_sigint(signum: int, frame: object) -> None:
        # A handler, not `except KeyboardInterrupt`: the exception could land between two statements of the
        # wait loop and escape it.
        interrupts.append(signum)
        if len(interrupts) > 1:
            EXIT_NOW.set()
            running = RUNNING.labels()
            if on_exit_now is not None:
                on_exit_now()  # before the process ends: what it holds (leases, claims) is let go
            raise Interrupted(second_interrupt_message(running))
        cancel.set()
        on_interrupt(
            "interrupted: no new step starts; waiting for running vCenter tasks and restoring what this run "
            "stopped (hosts out of maintenance, VMs powered on again). Ctrl-C again to exit at once"
        )

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        threading.Thread(target=run, name="vgpuctl-apply", daemon=True).start()
        while not finished.wait(0.2):
            pass
    finally:
        signal.signal(signal.SIGINT, previous)
    if "error" in box:
        raise box["error"]
    return box["result"], bool(interrupts)


def beside(main: Callable[[], T], side: Callable[[], U], name: str = "vgpuctl-beside") -> tuple[T, U]:
    """`side()` in a daemon thread (a second Ctrl-C does not wait for it) while `main()` runs in this one; both
    have ended when it returns. An exception of either is raised here, `main`'s first."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = side()
        except BaseException as err:  # raised again in the caller's thread
            box["error"] = err

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    try:
        result = main()
    finally:
        worker.join()
    if "error" in box:
        raise box["error"]
    return result, box["result"]
