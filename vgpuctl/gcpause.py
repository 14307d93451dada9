"""`paused_gc`: no cyclic garbage collection while bulk data is built.

Reading an inventory of 1,000 VMs or a bulk read of a farm creates hundreds of thousands of objects, none in a
reference cycle that outlives its step; the collector, started again and again by that many allocations,
scanned them each time (over half the time of loading an inventory, about half of parsing a bulk read).

In the `vgpuctl` command's own process (`one_command_process`), what a pause built is moved to the collector's
permanent generation when the pause ends (`gc.freeze`): the model of the farm and the inventory live as long as
the command, and the collections that would scan them once or twice more after each pause (about 25 ms for a
plan of 1,000 VMs) are not run. Objects there are still freed when nothing refers to them; only a reference
cycle that was already garbage when a pause ended stays until the process ends (a command that plans many
times, as `experiment run` does, keeps the few of each plan), so a process that runs many commands (the tests,
a library user) does not freeze.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pauses = 0
_was_enabled = False
_freeze = False


def one_command_process() -> None:
    """This process runs one vgpuctl command and ends: what each pause built is frozen when it ends."""
    global _freeze
    _freeze = True


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic collector off for the block. Nested and concurrent pauses end with the last one, which restores
    the collector as it was before the first."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                if _freeze:
                    gc.freeze()
                gc.enable()
