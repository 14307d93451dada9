"""Waiting for many vCenter tasks at once, and small bulk reads by MoRef.

TaskWatcher runs one background thread that reads the state of ALL pending tasks with a single
RetrievePropertiesEx per poll (not one read per task per loop). The poll interval starts short and grows while
nothing changes, so quick tasks return fast and slow ones cost little. Stateless polling (no server-side
filters) also survives a re-login: every call goes through Session.invoke.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any, TypeVar

from vgpuctl.errors import ConnectionFailure, VgpuctlError, VsphereFault
from vgpuctl.lazyclass import dataclass
from vgpuctl.progress import RUNNING
from vgpuctl.vsphere.faults import to_error

T = TypeVar("T")

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

TASK_PATHS = ["info.state", "info.progress", "info.error", "info.result"]


def dispatch(label: str, start: Callable[[], Any], wait: Callable[[Any], T]) -> T:
    """Start a vCenter task (`start` sends the request, returns the task) and `wait` for it, listed in RUNNING for
    the line a second Ctrl-C prints: from the moment the request is sent ("reconfigure web-01 (requested)":
    vCenter may act on it even when the answer never comes back), then by the task's id."""
    requested = f"{label} (requested)"
    RUNNING.add(requested)
    try:
        task = start()
        running = f"{label} ({getattr(task, '_moId', '?')})"
        RUNNING.add(running)
    finally:
        RUNNING.discard(requested)
    try:
        return wait(task)
    finally:
        RUNNING.discard(running)


def in_flight(label: str, call: Callable[[], T]) -> T:
    """A call that changes something without a task (UpdateGraphicsConfig, an ESXi command), listed in RUNNING
    while its answer is awaited: once sent, it may take effect even when vgpuctl exits first."""
    requested = f"{label} (requested)"
    RUNNING.add(requested)
    try:
        return call()
    finally:
        RUNNING.discard(requested)


def retrieve(session: Session, spec: Any, max_objects: int | None = None) -> list[Any]:
    """RetrievePropertiesEx plus every ContinueRetrievePropertiesEx page, as one unit under Session.invoke.

    A session that expired shows either as a NotAuthenticated fault or (vcsim) as NotAuthenticated in every
    object's missingSet; both make invoke log in again and run the whole paged read once more.
    """
    from pyVmomi import vmodl

    pc = session.content.propertyCollector
    options = vmodl.query.PropertyCollector.RetrieveOptions(maxObjects=max_objects)

    def run() -> list[Any]:
        objects: list[Any] = []
        result = pc.RetrievePropertiesEx([spec], options)
        while result is not None:
            for content in result.objects or []:
                _raise_if_unauthenticated(content)
                objects.append(content)
            if not result.token:
                break
            result = pc.ContinueRetrievePropertiesEx(result.token)
        return objects

    return session.invoke(run)


def _raise_if_unauthenticated(content: Any) -> None:
    from pyVmomi import vim

    for missing in content.missingSet or []:
        if isinstance(missing.fault, vim.fault.NotAuthenticated):
            raise missing.fault


def read_props(session: Session, refs: list[Any], vim_type: str, paths: list[str]) -> dict[str, dict[str, Any]]:
    """One RetrievePropertiesEx for the given objects of one type: moid -> {path: value}."""
    from pyVmomi import vim, vmodl

    pc_ns = vmodl.query.PropertyCollector
    spec = pc_ns.FilterSpec(
        objectSet=[pc_ns.ObjectSpec(obj=r, skip=False) for r in refs],
        propSet=[pc_ns.PropertySpec(type=getattr(vim, vim_type), pathSet=paths)],
    )
    return {str(c.obj._moId): {p.name: p.val for p in c.propSet or []} for c in retrieve(session, spec)}


@dataclass
class _Pending:
    task: Any
    on_progress: Callable[[int], None] | None
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    progress: int = -1


class TaskWatcher:
    """Wait for tasks from many threads; one collector round trip per poll covers all of them."""

    def __init__(self, session: Session, min_interval: float = 0.02, max_interval: float = 1.0):
        self.session = session
        self.min_interval = min_interval
        self.max_interval = max_interval
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def wait(self, task: Any, on_progress: Callable[[int], None] | None = None) -> Any:
        """Block until `task` ends; return its result or raise VsphereFault with the task's fault."""
        entry = _Pending(task=task, on_progress=on_progress)
        with self._lock:
            if self._closed:
                raise VgpuctlError("task watcher is closed")
            self._pending[str(task._moId)] = entry
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="vgpuctl-tasks", daemon=True)
                self._thread.start()
        self._wake.set()
        entry.done.wait()
        if entry.error is not None:
            raise entry.error
        return entry.result

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> TaskWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        interval = self.min_interval
        while True:
            with self._lock:
                pending = dict(self._pending)
                if not pending:
                    self._thread = None
                    return
            try:
                changed = self._poll(pending)
            except ConnectionFailure as err:  # AuthenticationError and TlsError included
                self._fail_all(pending, err)
                continue
            except Exception:
                # One task whose state cannot be read (an undecodable fault, say) must not fail the others:
                # read them one by one so that only that task gets the error.
                changed = self._poll_each(pending)
            interval = self.min_interval if changed else min(interval * 1.5, self.max_interval)
            self._wake.wait(interval)
            self._wake.clear()

    def _poll(self, pending: dict[str, _Pending]) -> bool:
        states = read_props(self.session, [p.task for p in pending.values()], "Task", TASK_PATHS)
        changed = False
        for moid, entry in pending.items():
            props = states.get(moid)
            if props is None:
                continue
            state = str(props.get("info.state"))
            progress = props.get("info.progress")
            if progress is not None and int(progress) != entry.progress:
                entry.progress = int(progress)
                changed = True
                if entry.on_progress is not None:
                    entry.on_progress(entry.progress)
            if state == "success":
                entry.result = props.get("info.result")
                self._finish(moid, entry)
                changed = True
            elif state == "error":
                fault = props.get("info.error")
                entry.error = to_error(fault) if fault is not None else VsphereFault("Task", "task failed")
                if fault is not None:
                    entry.error.__cause__ = fault if isinstance(fault, BaseException) else None
                self._finish(moid, entry)
                changed = True
        return changed

    def _poll_each(self, pending: dict[str, _Pending]) -> bool:
        changed = False
        for moid, entry in pending.items():
            try:
                changed = self._poll({moid: entry}) or changed
            except Exception as err:
                entry.error = VsphereFault(type(err).__name__, f"cannot read the state of task {moid}: {err!r}")
                self._finish(moid, entry)
                changed = True
        return changed

    def _finish(self, moid: str, entry: _Pending) -> None:
        with self._lock:
            self._pending.pop(moid, None)
        entry.done.set()

    def _fail_all(self, pending: dict[str, _Pending], err: BaseException) -> None:
        for moid, entry in pending.items():
            entry.error = err
            self._finish(moid, entry)
