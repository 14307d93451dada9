"""The run history: a record of every `plan`, `apply` and `provision` (vgpuctl.reports.runs.RunRecord), kept in the
user's state folder, `$XDG_STATE_HOME/vgpuctl/runs` (default `~/.local/state/vgpuctl/runs`), one JSON file per run.

A run's record is written when it starts (state `running`) and again, whole, when it ends: each write goes to a
temporary file renamed over the record (vgpuctl.outpaths.write_whole), and each run has its own file, named by
its start time and its run id, so runs at the same time each keep theirs. After its last write a run drops the
oldest records past the bounds: `VGPUCTL_HISTORY_KEEP` runs (default 200) and `VGPUCTL_HISTORY_MAX_MB` MiB in all
(default 100); its own record always stays. A record holds no secret: every string in it is redacted as the -vv
trace is (the run's password, session cookies and tokens become ***) and loses any URL user info.

The history never blocks or fails a run: a folder that cannot be written is one warning line and the run goes on
without its record. `--no-history` or `VGPUCTL_HISTORY=off` keeps none.
"""

from __future__ import annotations

import getpass
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vgpuctl import __version__, filelimits, jsontext, trace
from vgpuctl.errors import UsageError, VgpuctlError
from vgpuctl.lazyclass import dataclass
from vgpuctl.outpaths import write_whole
from vgpuctl.reports.events import Event
from vgpuctl.reports.plan import PlanReport
from vgpuctl.reports.runs import RunPart, RunRecord, RunResult, RunState, record_from_json, state_of_exit

ENV_HISTORY = "VGPUCTL_HISTORY"  # off, 0, false or no: keep no records
ENV_KEEP = "VGPUCTL_HISTORY_KEEP"
ENV_MAX_MB = "VGPUCTL_HISTORY_MAX_MB"
OFF_WORDS = frozenset({"off", "0", "false", "no"})
DEFAULT_KEEP = 200
DEFAULT_MAX_MB = 100
MIB = 1024 * 1024
RECORD_SUFFIX = ".json"
# one record stays readable by vgpuctl's own file limit: past it, its events are left out (their count said)
MAX_RECORD_BYTES = filelimits.MAX_FILE_BYTES


def history_folder() -> Path:
    """$XDG_STATE_HOME/vgpuctl/runs, else ~/.local/state/vgpuctl/runs (a relative XDG_STATE_HOME is ignored, as
    the XDG Base Directory Specification asks). UsageError when neither is there (no home folder)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    if os.path.isabs(state):
        return Path(state) / "vgpuctl" / "runs"
    try:
        return Path.home() / ".local" / "state" / "vgpuctl" / "runs"
    except RuntimeError:  # no HOME and no home in the user database (a container)
        raise UsageError("the run history has no folder: no home folder and no XDG_STATE_HOME") from None


def enabled() -> bool:
    return os.environ.get(ENV_HISTORY, "").strip().lower() not in OFF_WORDS


@dataclass(frozen=True)
class Bounds:
    runs: int = DEFAULT_KEEP
    bytes: int = DEFAULT_MAX_MB * MIB


DEFAULT_BOUNDS = Bounds()


def bounds_from_env(warn: Callable[[str], None]) -> Bounds:
    """The bounds the environment sets; a value that is no positive number is warned about and the default used."""
    return Bounds(_positive(ENV_KEEP, DEFAULT_KEEP, warn), _positive(ENV_MAX_MB, DEFAULT_MAX_MB, warn) * MIB)


def _positive(name: str, default: int, warn: Callable[[str], None]) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if text.isdigit() and int(text) > 0:
        return int(text)
    warn(f"{name}={text!r} is no positive whole number: the run history keeps its default ({default})")
    return default


# ------------------------------------------------------------------------------------------ the folder


class RunHistory:
    """The records in one folder: written whole, listed newest first, found by id, kept within `bounds`."""

    def __init__(self, folder: Path, bounds: Bounds = DEFAULT_BOUNDS):
        self.folder = folder
        self.bounds = bounds

    def path(self, record_id: str) -> Path:
        return self.folder / f"{record_id}{RECORD_SUFFIX}"

    def write(self, record: RunRecord, plan: dict[str, Any] | None = None) -> None:
        """The record, redacted, whole or not at all (`plan`: its plan's document, made already); OSError or
        OutputError when it cannot be written."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_whole(self.path(record.id), record_text(record, plan), "the run history", mode=0o600)

    def files(self) -> list[Path]:
        """The record files, oldest first (their names begin with the start time)."""
        try:
            return sorted(p for p in self.folder.iterdir()
                          if p.name.endswith(RECORD_SUFFIX) and not p.name.startswith("."))
        except FileNotFoundError:
            return []

    def prune(self, keep: str) -> None:
        """Drop the oldest records past the bounds; `keep` (a record id) always stays."""
        sizes = []
        for p in self.files():
            try:
                sizes.append((p, p.stat().st_size))
            except OSError:
                continue  # another run dropped it meanwhile
        count, total = len(sizes), sum(size for _, size in sizes)
        for p, size in sizes:
            if count <= self.bounds.runs and total <= self.bounds.bytes:
                break
            if p == self.path(keep):
                continue
            p.unlink(missing_ok=True)
            count, total = count - 1, total - size

    def records(self) -> tuple[list[RunRecord], list[str]]:
        """Every readable record, newest first, and one line per file that is no record."""
        found, problems = [], []
        for p in reversed(self.files()):
            try:
                found.append(self.read(p))
            except (OSError, ValueError, UnicodeDecodeError, filelimits.FileTooLarge, filelimits.TooDeep) as err:
                problems.append(f"{p}: not a run record ({getattr(err, 'strerror', None) or err})")
        return found, problems

    def read(self, path: Path) -> RunRecord:
        record = record_from_json(filelimits.parse_json(filelimits.read_text(path)))
        return with_liveness(record)

    def find(self, wanted: str) -> RunRecord:
        """The record named by its id, its run id, or a prefix of either that only it has; UsageError else."""
        names = [p.name.removesuffix(RECORD_SUFFIX) for p in self.files()]
        exact = [n for n in names if n == wanted or n.endswith(f"-{wanted}")]
        matches = exact or [n for n in names if wanted and (n.startswith(wanted) or _run_part(n).startswith(wanted))]
        if not matches:
            raise UsageError(f"no run {wanted!r} in {self.folder}: `vgpuctl runs` lists the runs kept")
        if len(matches) > 1:
            raise UsageError(f"run {wanted!r} names {len(matches)} runs ({', '.join(matches[:5])}"
                             f"{' ...' if len(matches) > 5 else ''}): give more of its id")
        try:
            return self.read(self.path(matches[0]))
        except (OSError, ValueError, UnicodeDecodeError, filelimits.FileTooLarge, filelimits.TooDeep) as err:
            raise UsageError(f"{self.path(matches[0])}: not a run record ({err})") from None


def _run_part(record_id: str) -> str:
    return record_id.rpartition("-")[2]


def with_liveness(record: RunRecord) -> RunRecord:
    """A record still `running` whose process on this machine is gone ended without its last write."""
    if record.state != RunState.RUNNING or record.machine != socket.gethostname():
        return record
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return replace(record, state=RunState.ENDED_UNRECORDED)
    except OSError:
        pass  # another user's process: alive
    return record


# ------------------------------------------------------------------------------------------ secrets


def redacted(value: Any) -> Any:
    """Every string in a JSON value with the registered secrets replaced (vgpuctl.trace) and URL user info gone."""
    if isinstance(value, str):
        return trace.without_url_user_info(trace.redact(value))
    if isinstance(value, list):
        return [redacted(v) for v in value]
    if isinstance(value, dict):
        return {redacted(k): redacted(v) for k, v in value.items()}
    return value


def needs_redacting(text: str) -> bool:
    """Whether a JSON text holds a registered secret or URL user info in any of its strings. JSON escapes each
    character on its own, so a secret inside a string appears in the text as its own escaped form; a user info
    match in a string is one in the text too."""
    if trace.URL_USER_INFO.search(text):
        return True
    return any(jsontext.compact(s)[1:-1] in text for s in trace.registered_secrets())


def record_text(record: RunRecord, plan: dict[str, Any] | None = None) -> str:
    """The record's JSON, redacted; past MAX_RECORD_BYTES without its events (a note says how many). Compact: the
    record of a large plan is read by `runs show`, and compact JSON is written several times faster. `plan`: the
    plan's document when the run made it already."""
    document = record.to_dict(plan)
    text = _compact(document)
    if needs_redacting(text):  # rare: walking every string of a large record costs more than writing it
        document = redacted(document)
        text = _compact(document)
    if len(text.encode("utf-8")) > MAX_RECORD_BYTES and document.get("events"):
        dropped = len(document["events"])
        document["events"] = []
        document["error"] = (document.get("error") or "") + f" ({dropped} events left out: the record was too large)"
        text = _compact(document)
    return text


def _compact(document: dict[str, Any]) -> str:
    return jsontext.compact(document) + "\n"


# ------------------------------------------------------------------------------------------ one run


def utc_stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_record(command: str, run_id: str, inventory: Path | None, now: datetime | None = None) -> RunRecord:
    """A run's record as it starts: who runs which vgpuctl on which inventory (its digest), from when."""
    started = now or datetime.now(UTC)
    record_id = f"{started:%Y%m%dT%H%M%S}{started.microsecond // 1000:03d}Z-{run_id}"
    return RunRecord(
        id=record_id, run_id=run_id, command=command, state=RunState.RUNNING, user=_user(),
        machine=socket.gethostname(), pid=os.getpid(), version=__version__, started=utc_stamp(started), ended=None,
        exit_code=None, error=None, inventory=str(inventory) if inventory is not None else None,
        inventory_sha256=inventory_digest(inventory), vcenter=None,
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container)
        return str(os.getuid())


def inventory_digest(path: Path | None) -> str | None:
    """sha256 of the inventory file's bytes (None without one, or when it cannot be read)."""
    if path is None:
        return None
    import hashlib

    try:
        return hashlib.sha256(filelimits.read_regular_bytes(path)).hexdigest()
    except (OSError, filelimits.FileTooLarge, filelimits.NotAFile):
        return None


class Recorder:
    """One run's record: written as the run starts and when it ends; the events of the run's stream are added as
    they come (`event` is an EventStream writer). Nothing it does raises: a record that cannot be written is one
    warning (`warn`) and the run goes on."""

    def __init__(self, history: RunHistory, record: RunRecord, warn: Callable[[str], None]):
        self.history, self.record, self._warn = history, record, warn
        self._lock = threading.Lock()
        self._failed = False
        self._plan_document: dict[str, Any] | None = None
        self._write()

    def event(self, event: Event) -> None:
        with self._lock:
            self.record.events.append(event)  # type: ignore[arg-type]  # one of the stream's types

    def planned(self, report: PlanReport | None, vcenter: str | None = None,
                document: dict[str, Any] | None = None) -> None:
        """The run's plan; `document`: the plan's document as the run printed it, kept instead of made again (the
        report is not changed after it)."""
        if report is not None:
            self.record.plan = report
            self._plan_document = document
        if vcenter:
            self.record.vcenter = vcenter

    def from_saved_plan(self, plan_file: Path, inventory: str, inventory_text: str) -> None:
        """`apply PLANFILE`: the inventory is the one the file holds (its digest over the text it holds)."""
        import hashlib

        self.record.plan_file = str(plan_file)
        self.record.inventory = inventory
        self.record.inventory_sha256 = hashlib.sha256(inventory_text.encode("utf-8")).hexdigest()

    def applied(self, result: RunResult) -> None:
        self.record.result = result

    def fleet(self, parts: list[RunPart]) -> None:
        """A fleet's run: each vCenter's plan, what the apply did there, or why its part failed."""
        self.record.vcenters = parts

    def finish(self, exit_code: int, error: str | None = None) -> None:
        """The run's end: its state, exit code and error; the last write, then the oldest records past the bounds
        go."""
        self.record.ended = utc_stamp(datetime.now(UTC))
        self.record.exit_code, self.record.error = exit_code, error
        self.record.state = state_of_exit(exit_code)
        self._write()
        if not self._failed:
            try:
                self.history.prune(self.record.id)
            except OSError as err:
                self._warn(f"the run history in {self.history.folder}: old records not dropped ({err.strerror or err})")

    def _write(self) -> None:
        if self._failed:
            return
        try:
            with self._lock:
                self.history.write(self.record, self._plan_document)
        except VgpuctlError as err:  # write_whole's one line names the file
            self._gave_up(str(err))
        except OSError as err:
            self._gave_up(f"{self.history.folder}: {err.strerror or err}")

    def _gave_up(self, why: str) -> None:
        self._failed = True
        self._warn(f"no record of this run kept ({why}); the run goes on (--no-history or {ENV_HISTORY}=off keeps "
                   "none)")
