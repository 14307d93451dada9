"""`--events FILE|-`: the run's events (vgpuctl.events) as JSON lines, each written and flushed as it happens.

With `-` the events go to stdout and every text vgpuctl would print there goes to stderr instead, so stdout is
nothing but events. `--events -` with `-o json` is refused: both would be stdout (give the events a file).
"""

from __future__ import annotations

import json
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from vgpuctl.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

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
    """One JSON object per line, flushed after each: a reader following the file sees each event at once."""

    def __init__(self, stream: IO[str], close: bool):
        self._stream = stream
        self._close = close
        self._lock = threading.Lock()

    def write(self, event: Event) -> None:
        line = json.dumps(event.to_dict(), separators=(",", ":"))
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        if self._close:
            self._stream.close()


def check(target: str | None, opts: GlobalOptions) -> None:
    """Refuse what cannot work before anything runs; with `-`, text moves to stderr."""
    if target == STDOUT:
        if opts.json:
            raise UsageError("--events - and -o json would both write to stdout: give --events a FILE")
        opts.text_to_stderr = True


@contextmanager
def event_stream(target: str | None, opts: GlobalOptions, run_id: str | None) -> Iterator[EventStream | None]:
    """The run's event stream (None without --events), its file closed at the end."""
    if target is None:
        yield None
        return
    from vgpuctl.events import EventStream
    from vgpuctl.vsphere.workrecord import new_run_id

    check(target, opts)
    if target == STDOUT:
        out = EventFile(sys.stdout, close=False)
    else:
        try:
            out = EventFile(Path(target).open("w", encoding="utf-8"), close=True)  # noqa: SIM115 - closed below
        except OSError as err:
            raise UsageError(f"--events {target}: {err.strerror or err}") from None
    try:
        yield EventStream(out.write, run_id or new_run_id())
    finally:
        out.close()
