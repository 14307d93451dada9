"""Run playbooks/site.yml over the guests with ansible-runner.

Each run gets a fresh private data directory (inventory, ansible.cfg) that is deleted afterwards; the
artifacts (job events, stdout, command) go to STATE/runs/<ident>, the last `keep_runs` kept. Secrets never
reach those files: the guest password is referenced by a lookup of a 0600 file outside both directories,
the licence token is only a path (its tasks run with no_log), and variables that look like secrets (by name, a
URL with user info, a value known to be secret) are removed from the environment ansible-runner records in
`command` and hands to ansible-playbook.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgpuctl import trace
from vgpuctl.errors import GuestError, UsageError
from vgpuctl.extras import ansible_playbook
from vgpuctl.guest import targets as tg
from vgpuctl.lazyclass import dataclass

if TYPE_CHECKING:
    from vgpuctl.inventory import Inventory

DEFAULT_KEEP_RUNS = 10
RUN_PREFIX = "run-"
SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|API_?KEY|COOKIE|SESSION_?ID", re.IGNORECASE)

EventHandler = Callable[[dict[str, Any]], None]


# ---------------------------------------------------------------------------------------------- paths


def state_dir() -> Path:
    override = os.environ.get("VGPUCTL_STATE_DIR")
    return Path(override).expanduser() if override else Path.home() / ".vgpuctl"


def runs_dir(base: Path | None = None) -> Path:
    return (base or state_dir()) / "runs"


def prune_runs(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` run directories; returns the deleted ones."""
    if not directory.is_dir():
        return []
    runs = sorted(
        (p for p in directory.iterdir() if p.is_dir() and p.name.startswith(RUN_PREFIX)), key=lambda p: p.name
    )
    doomed = runs[: max(len(runs) - keep, 0)]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def new_ident() -> str:
    # sortable by name: prune keeps the newest by name, not by a clock that might jump
    return f"{RUN_PREFIX}{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 1_000_000:06d}-{os.getpid()}"


# --------------------------------------------------------------------------------------------- result


@dataclass
class GuestOutcome:
    """One guest after the playbooks: its counts per task result and a status (ok, changed, failed, unreachable)."""

    host: str
    group: str
    status: str  # ok | changed | failed | unreachable
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DeployResult:
    hosts: list[GuestOutcome]
    artifacts: Path | None
    runner_status: str
    rc: int
    check: bool = False

    @property
    def failed(self) -> list[GuestOutcome]:
        return [h for h in self.hosts if h.status in ("failed", "unreachable")]

    def to_dict(self) -> dict[str, Any]:
        return {
            "hosts": [h.to_dict() for h in self.hosts],
            "artifacts": str(self.artifacts) if self.artifacts else None,
            "runner_status": self.runner_status,
            "rc": self.rc,
            "check": self.check,
        }

    def raise_for_failures(self) -> None:
        bad = self.failed
        if bad:
            names = ", ".join(h.host for h in bad)
            raise GuestError(f"guest deploy failed for {len(bad)} of {len(self.hosts)} host(s): {names}")


# ------------------------------------------------------------------------------------------- events


@dataclass
class HostTracker:
    """Folds ansible-runner events into per-host state (for the progress display and the summary)."""

    task: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    unreachable: set[str] = field(default_factory=set)
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def feed(self, event: dict[str, Any]) -> str | None:
        """Update from one event; returns the host the event was about (None for play-level events)."""
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_stats":
            for key in ("ok", "changed", "failures", "dark", "skipped", "ignored", "rescued"):
                for host, n in (data.get(key) or {}).items():
                    self.stats.setdefault(host, {})[key] = int(n)
            return None
        host = data.get("host")
        if not host:
            return None
        if kind == "runner_on_start":
            self.task[host] = data.get("task", "")
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped"):
            self._count(host, kind, data)
        return host

    def _count(self, host: str, kind: str, data: dict[str, Any]) -> None:
        c = self.counts.setdefault(host, {"ok": 0, "changed": 0, "failed": 0, "skipped": 0})
        res = data.get("res") or {}
        if kind == "runner_on_ok":
            c["ok"] += 1
            c["changed"] += 1 if res.get("changed") else 0
        elif kind == "runner_on_skipped":
            c["skipped"] += 1
        elif kind == "runner_on_unreachable":
            self.unreachable.add(host)
            self.messages[host] = _one_line(res.get("msg") or "unreachable")
        elif not data.get("ignore_errors"):
            c["failed"] += 1
            self.messages[host] = _failure_message(data.get("task", ""), res)

    def outcome(self, host: str, group: str) -> GuestOutcome:
        s = self.stats.get(host)
        c = self.counts.get(host, {})
        if s is None:  # the play never finished for it (killed, or the run crashed)
            s = {
                "ok": c.get("ok", 0),
                "changed": c.get("changed", 0),
                "failures": c.get("failed", 0),
                "dark": int(host in self.unreachable),
                "skipped": c.get("skipped", 0),
            }
        failures, dark = s.get("failures", 0), s.get("dark", 0)
        if dark:
            status = "unreachable"
        elif failures or (host not in self.stats and host not in self.counts):
            status = "failed"
        else:
            status = "changed" if s.get("changed", 0) else "ok"
        message = self.messages.get(host, "")
        if status == "failed" and not message:
            message = "the playbook did not run on this host"
        return GuestOutcome(
            host=host,
            group=group,
            status=status,
            ok=s.get("ok", 0),
            changed=s.get("changed", 0),
            failed=failures,
            unreachable=dark,
            skipped=s.get("skipped", 0),
            message=message,
        )


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _failure_message(task: str, res: dict[str, Any]) -> str:
    if res.get("censored"):
        return f"{task}: failed (output hidden: no_log)"
    msg = res.get("msg") or ""
    if not msg and res.get("stderr"):
        msg = str(res["stderr"]).strip().splitlines()[-1]
    if not msg and "rc" in res:
        msg = f"exit status {res['rc']}"
    msg = _one_line(msg) or "failed"
    # the roles' own messages already name the role; keep Ansible's task name for the rest
    return msg if msg.split(": ", 1)[0] in tg.ROLES else f"{task}: {msg}"


# --------------------------------------------------------------------------------------------- secrets


def secret_env_names(extra: tuple[str, ...] = ()) -> set[str]:
    """Variables to keep out of a run: secret by name, a URL with user info in it (VGPUCTL_URL, GOVC_URL), or a
    value this process knows is secret (the vCenter password, session cookie and REST token, vgpuctl.trace)."""
    names = {k for k, v in os.environ.items() if SECRET_NAME.search(k) or (k not in PLAIN_NAMES and holds_secret(v))}
    names.update(n for n in extra if n)
    return names


# Variables ansible and ssh need that never hold a secret: a short password that happens to appear in a path
# (HOME=/root) must not take them away.
PLAIN_NAMES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "TMPDIR", "LANG", "TERM", "SSH_AUTH_SOCK"})


def holds_secret(value: str) -> bool:
    return trace.holds_url_user_info(value) or trace.redact(value) != value


@contextmanager
def scrubbed_environ(names: set[str]) -> Iterator[None]:
    """ansible-runner copies os.environ into its `command` artifact: take secrets out for the run's length."""
    saved = {k: os.environ.pop(k) for k in list(names) if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


@contextmanager
def password_file(inv: Inventory) -> Iterator[Path | None]:
    env_name = inv.guests.connection.password_env
    if not env_name:
        yield None
        return
    value = os.environ.get(env_name)
    if value is None:
        raise UsageError(f"guests.connection.password_env names {env_name}, but {env_name} is not set")
    secret_dir = Path(tempfile.mkdtemp(prefix="vgpuctl-secret-"))
    try:
        os.chmod(secret_dir, 0o700)
        path = secret_dir / "guest_password"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(value)
        yield path
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)


# ------------------------------------------------------------------------------------------------- run


def ansible_cfg(playbooks: Path, control_dir: Path, forks: int) -> str:
    """ansible.cfg for the run, written by configparser: a path is a value, never a line of its own."""
    import configparser
    import io

    cfg = configparser.ConfigParser(interpolation=None)
    cfg["defaults"] = {
        "roles_path": str(playbooks / "roles"),
        "host_key_checking": "True",
        "forks": str(forks),
        "interpreter_python": "auto_silent",
        "retry_files_enabled": "False",
        "timeout": "30",
    }
    cfg["ssh_connection"] = {
        "pipelining": "True",
        "control_path_dir": str(control_dir),
        "ssh_args": "-o ControlMaster=auto -o ControlPersist=30s -o ServerAliveInterval=15",
    }
    out = io.StringIO()
    cfg.write(out)
    return out.getvalue()


def run_environment(cfg: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    return {
        # ansible-playbook lives next to the running interpreter (a virtualenv's bin/)
        "PATH": bin_dir + (os.pathsep + path if path else ""),
        "ANSIBLE_CONFIG": str(cfg),
        "ANSIBLE_HOST_KEY_CHECKING": "True",  # ansible-runner turns it off unless told
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
    }


def deploy(
    inv: Inventory,
    addresses: dict[str, str | None],
    *,
    check: bool = False,
    limit: str | None = None,
    state: Path | None = None,
    keep_runs: int = DEFAULT_KEEP_RUNS,
    forks: int = 20,
    on_event: EventHandler | None = None,
) -> DeployResult:
    """Run the guest stack on every guest of `inv` that has an address; hosts with problems found before the
    run (no address, an empty group) are reported as failed/unreachable without stopping the others."""
    base = state or state_dir()
    targets = tg.build_targets(inv, addresses)
    outcomes_pre = _problem_outcomes(targets, limit)
    runnable = targets.runnable
    if not runnable:
        return DeployResult(hosts=outcomes_pre, artifacts=None, runner_status="skipped", rc=0, check=check)

    artifacts_root = runs_dir(base)
    artifacts_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    tracker = HostTracker()
    ident = new_ident()
    run = PlaybookRun(inv, targets, base / "known_hosts", artifacts_root, ident, forks)
    try:
        result = run.execute(check=check, limit=limit, handler=_event_handler(tracker, on_event))
    finally:
        prune_runs(artifacts_root, keep_runs)

    outcomes = [tracker.outcome(h.name, h.group) for h in runnable if _in_run(h.name, tracker, limit)]
    _blame_playbook_failure(outcomes, result.rc, result.status, artifacts_root / ident / "stdout")
    return DeployResult(
        hosts=outcomes_pre + outcomes,
        artifacts=artifacts_root / ident,
        runner_status=result.status,
        rc=result.rc,
        check=check,
    )


def _problem_outcomes(targets: tg.GuestTargets, limit: str | None) -> list[GuestOutcome]:
    return [
        GuestOutcome(
            host=p.subject,
            group=p.group,
            status=p.status,
            failed=int(p.status == "failed"),
            unreachable=int(p.status == "unreachable"),
            message=p.message,
        )
        for p in targets.problems
        if limit_matches(limit, p.subject, p.group)
    ]


def _event_handler(tracker: HostTracker, on_event: EventHandler | None) -> Callable[[dict[str, Any]], bool]:
    def handler(event: dict[str, Any]) -> bool:
        tracker.feed(event)
        if on_event is not None:
            on_event(event)
        return True  # keep writing the event to the artifacts

    return handler


@dataclass
class PlaybookRun:
    """One ansible-runner run of a playbook from a private, temporary data directory removed afterwards."""

    inv: Inventory
    targets: tg.GuestTargets
    known_hosts: Path
    artifacts_root: Path
    ident: str
    forks: int
    playbook: str = "site.yml"

    def execute(
        self,
        *,
        check: bool = False,
        limit: str | None,
        handler: Callable[[dict[str, Any]], bool],
        extravars: dict[str, Any] | None = None,
    ) -> Any:
        import ansible_runner


        ansible_playbook()  # ansible-runner only says "command not found" in an event; one line instead
        playbooks = tg.playbooks_dir()
        private = Path(tempfile.mkdtemp(prefix="vgpuctl-guest-"))
        try:
            with password_file(self.inv) as pw_file:
                cfg, inventory_file = self._write_private(private, playbooks, pw_file)
                secrets = secret_env_names((self.inv.guests.connection.password_env or "",))
                with scrubbed_environ(secrets):
                    return ansible_runner.run(
                        private_data_dir=str(private),
                        project_dir=str(playbooks),
                        playbook=self.playbook,
                        inventory=str(inventory_file),
                        artifact_dir=str(self.artifacts_root),
                        ident=self.ident,
                        rotate_artifacts=0,
                        envvars=run_environment(cfg),
                        extravars=extravars or {},
                        limit=limit,
                        cmdline="--check" if check else None,
                        event_handler=handler,
                        quiet=True,
                        suppress_env_files=True,
                    )
        finally:
            shutil.rmtree(private, ignore_errors=True)

    def _write_private(self, private: Path, playbooks: Path, pw_file: Path | None) -> tuple[Path, Path]:
        cfg = private / "ansible.cfg"
        (private / "cp").mkdir(mode=0o700)
        cfg.write_text(ansible_cfg(playbooks, private / "cp", self.forks))
        inventory_dir = private / "inventory"
        inventory_dir.mkdir()
        conn = tg.connection_vars(self.inv, known_hosts=self.known_hosts, password_file=pw_file)
        inventory_file = inventory_dir / "hosts.yml"
        inventory_file.write_text(tg.render_inventory(self.targets, conn, source=self.inv.source_path or "inventory"))
        return cfg, inventory_file


def _blame_playbook_failure(outcomes: list[GuestOutcome], rc: int, status: str, stdout: Path) -> None:
    """ansible-playbook itself failed (a parse error, a bad --limit): no host result can be trusted."""
    if rc == 0 or any(o.status in ("failed", "unreachable") for o in outcomes):
        return
    error = playbook_error(stdout) or f"ansible-runner {status}"
    if not outcomes:
        raise GuestError(f"ansible-playbook exited with status {rc}: {error}")
    for outcome in outcomes:
        outcome.status, outcome.failed = "failed", max(outcome.failed, 1)
        outcome.message = f"ansible-playbook exited with status {rc}: {error}"


def playbook_error(stdout: Path) -> str:
    """The first error line ansible-playbook printed (parse errors and the like never reach a host)."""
    try:
        lines = stdout.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for i, line in enumerate(lines):
        if line.startswith(("[ERROR]", "ERROR!")):
            detail = " ".join(x.strip() for x in lines[i + 1 : i + 2] if x.strip())
            return _one_line(f"{line} {detail}")
    return ""


def limit_matches(limit: str | None, host: str, group: str) -> bool:
    """A simple reading of an Ansible --limit pattern (globs separated by , or :) for hosts that never reach
    Ansible; exclusions (!) and intersections (&) are left to Ansible and do not hide a problem."""
    if not limit:
        return True
    import fnmatch

    names = (host, group, tg.ansible_group_name(group))
    positives = [p for p in re.split(r"[,:]", limit) if p and p[0] not in "!&"]
    return any(fnmatch.fnmatchcase(n, p) for p in positives for n in names) or not positives


def _in_run(host: str, tracker: HostTracker, limit: str | None) -> bool:
    # with --limit, hosts outside the pattern never appear in events; without, every runnable host counts
    return limit is None or host in tracker.stats or host in tracker.counts or host in tracker.task
