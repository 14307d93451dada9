"""`--events FILE|-`: the run's events (vgpuctl.events) as JSON lines, each written and flushed as it happens.

With `-` the events go to stdout and every text vgpuctl would print there goes to stderr instead, so stdout is
nothing but events. `--events -` with `-o json` is refused: both would be stdout (give the events a file).
The events are a stream, written as they happen (not whole-or-nothing as `--out` files are). A FILE that names a
file the command reads (the inventory, a saved plan) or its `--out` is refused before anything runs; a write that
fails (a full disk) is one line: on the first event before anything runs, on a later one when the run ends (the
stream stops there, the run goes on).
"""

from __future__ import annotations

import json
import sys
import threading
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from vgpuctl.cli import common
from vgpuctl.errors import OutputError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from vgpuctl.cli.common import GlobalOptions
    from vgpuctl.events import EventStream
    from vgpuctl.reports.events import Event

STDOUT = "-"

EventsOpt = Annotated[
    str | None,
    typer.Option(
        "--events",
        metavar="FILE|-",
        help="Write the run's events as JSON lines (run start, plan, each host's and VM's steps, warnings, "
        "summary; schema: docs/schemas/event.schema.json) to FILE, or to stdout with - (text then goes to "
        "stderr; not with -o json, which holds stdout).",
    ),
]


class EventFile:
    """One JSON object per line, flushed after each: a reader following the file sees each event at once. A write
    that fails ends the stream: OutputError at once when it is the first event (nothing has run yet), else kept
    for `close` to raise, so that no step of a run stops because its event could not be written."""

    def __init__(self, stream: IO[str], close: bool, target: str = STDOUT):
        self._stream = stream
        self._close = close
        self._target = target
        self._lock = threading.Lock()
        self._written = 0
        self.failure: OutputError | None = None

    def write(self, event: Event) -> None:
        line = json.dumps(event.to_dict(), separators=(",", ":"))
        with self._lock:
            if self.failure is not None:
                return
            try:
                self._stream.write(line + "\n")
                self._stream.flush()
            except OSError as err:
                self.failure = OutputError(f"--events {self._target}: {err.strerror or err} (the events stop "
                                           f"after {self._written})")
                if not self._written:
                    raise self.failure from None
            self._written += 1

    def close(self) -> None:
        """Close the file; OutputError when a write failed or the file cannot be closed (its last bytes lost)."""
        if self._close:
            try:
                self._stream.close()
            except OSError as err:
                self.failure = self.failure or OutputError(f"--events {self._target}: {err.strerror or err}")
        if self.failure is not None:
            raise self.failure


def check(target: str | None, opts: GlobalOptions) -> None:
    """Refuse what cannot work before anything runs; with `-`, text moves to stderr."""
    if target == STDOUT:
        if opts.json:
            raise UsageError("--events - and -o json would both write to stdout: give --events a FILE")
        opts.text_to_stderr = True
    elif target is not None:
        common.check_out_file(Path(target), "--events", "event stream")  # `--events json`, a folder, no folder


def as_output(target: str | None) -> Path | None:
    """The file --events writes (None for none, or stdout), for outpaths.refuse_overlaps."""
    return Path(target) if target is not None and target != STDOUT else None


@contextmanager
def event_stream(target: str | None, opts: GlobalOptions, run_id: str | None,
                 also: Callable[[Event], None] | None = None) -> Iterator[EventStream | None]:
    """The run's event stream (None without --events and without `also`, the run history's writer, which sees
    every event too), its file closed at the end."""
    if target is None and also is None:
        yield None
        return
    from vgpuctl.events import EventStream
    from vgpuctl.vsphere.workrecord import new_run_id

    out = _event_file(target, opts) if target is not None else None
    writers = [w for w in (also, out.write if out is not None else None) if w is not None]

    def write(event: Event) -> None:
        for writer in writers:
            writer(event)

    try:
        yield EventStream(write, run_id or new_run_id())
    except BaseException:
        with suppress(OutputError):  # the run's own error is the one to report
            if out is not None:
                out.close()
        raise
    if out is not None:
        out.close()


def _event_file(target: str, opts: GlobalOptions) -> EventFile:
    check(target, opts)
    if target == STDOUT:
        return EventFile(sys.stdout, close=False)
    try:
        stream = Path(target).open("w", encoding="utf-8")  # noqa: SIM115 - closed by EventFile.close
    except OSError as err:
        raise OutputError(f"--events {target}: {err.strerror or err}") from None
    return EventFile(stream, close=True, target=target)
