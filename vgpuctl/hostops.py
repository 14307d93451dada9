"""Apply host changes host by host, with maintenance mode, reboots and verification (issue 5).

Per host (at most `maintenance.max_unavailable` hosts at once, default 1):
 1. powered-on VMs: `evacuate: refuse` stops with their list (nothing changed); `evacuate: power-off` records
    them in the state file first, then shuts them down gracefully (hard power-off after a timeout);
 2. enter maintenance mode (only for disruptive changes; an assignment policy alone needs none);
 3. MIG modes over SSH (`nvidia-smi -i <bus id> -mig 0|1`), graphics (UpdateGraphicsConfig), the nvidia
    module option string (read, merge, UpdateModuleOptionString);
 4. reboot only when a change needs it (or a MIG switch stayed pending), wait for the host to reconnect
    (maintenance.reboot_timeout_s, progress reported);
 5. verify from the API and the shell (vgpuctl.hostplan.verify_host: no change left, MIG current == desired,
    NVLink links as desired, module options in effect);
 6. exit maintenance mode, power the recorded VMs on again, drop the host's record.
A failure stops that host where it is (in maintenance mode when it got there), and the outcome says what state
it is in; the state file keeps what a re-run needs, so running apply again continues. No further host starts
after a failure unless keep_going.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from vgpuctl import hostplan
from vgpuctl.errors import SshError, SshHostKeyError, VgpuctlError
from vgpuctl.hostfacts import HostFacts, gather_host_facts, shell_runner
from vgpuctl.inventory import HostSpec
from vgpuctl.model import HostChange, ObservedGpu, ObservedHost

log = logging.getLogger(__name__)

CHANGED, FAILED, SKIPPED, UNCHANGED = "changed", "failed", "skipped", "unchanged"
SSH_AFTER_REBOOT_S = 60.0


class RefusedError(VgpuctlError):
    """Maintenance mode would stop running VMs and `evacuate: refuse` is set."""


class VerificationError(VgpuctlError):
    """After apply (and reboot) the host does not show the desired state."""

    def __init__(self, host: str, problems: list[str]):
        self.problems = problems
        super().__init__(f"{host}: verification failed: " + "; ".join(problems))


class HostProgress(Protocol):
    def host_step(self, host: str, step: str, detail: str | None) -> None: ...


# ------------------------------------------------------------------------------------------ state file


def default_state_path(vcenter_url: str | None = None) -> Path:
    """$VGPUCTL_STATE_DIR, else $XDG_STATE_HOME/vgpuctl, else ~/.local/state/vgpuctl; one file per vCenter."""
    base = os.environ.get("VGPUCTL_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "vgpuctl"
    )
    tag = "".join(c if c.isalnum() or c in "-." else "_" for c in (vcenter_url or "default").split("://")[-1])
    return Path(base) / f"hostops-{tag.strip('_') or 'default'}.json"


@dataclass
class HostRecord:
    """What a re-run needs to finish a host: VMs to power on again and whether we put it in maintenance."""

    host: str
    vms: list[dict[str, str]] = field(default_factory=list)  # [{"name", "moid"}]
    entered_maintenance: bool = False
    phase: str = ""
    message: str = ""
    updated: float = 0.0


class StateStore:
    """A small JSON file of HostRecords, written atomically after every change (thread-safe)."""

    def __init__(self, path: Path | str | None):
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._records: dict[str, HostRecord] = {}
        if self.path is not None and self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self._records = {k: HostRecord(**v) for k, v in (data.get("hosts") or {}).items()}
            except (OSError, ValueError, TypeError) as err:
                raise VgpuctlError(f"cannot read the host state file {self.path}: {err}") from err

    def get(self, host: str) -> HostRecord | None:
        with self._lock:
            return self._records.get(host)

    def hosts(self) -> list[str]:
        with self._lock:
            return sorted(self._records)

    def update(self, host: str, **fields: Any) -> HostRecord:
        with self._lock:
            rec = self._records.setdefault(host, HostRecord(host))
            for k, v in fields.items():
                setattr(rec, k, v)
            rec.updated = time.time()
            self._save()
            return rec

    def add_vm(self, host: str, name: str, moid: str) -> None:
        with self._lock:
            rec = self._records.setdefault(host, HostRecord(host))
            if not any(v["moid"] == moid for v in rec.vms):
                rec.vms.append({"name": name, "moid": moid})
            rec.updated = time.time()
            self._save()

    def drop(self, host: str) -> None:
        with self._lock:
            if self._records.pop(host, None) is not None:
                self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"version": 1, "hosts": {k: asdict(v) for k, v in self._records.items()}}, indent=2),
            encoding="utf-8",
        )
        os.replace(tmp, self.path)


# ------------------------------------------------------------------------------------------ results


@dataclass
class HostOutcome:
    host: str
    status: str = UNCHANGED
    steps: list[str] = field(default_factory=list)
    phase: str = ""  # where it stopped (failed) or "done"
    message: str = ""
    error_type: str | None = None
    in_maintenance: bool | None = None
    vms_to_restore: list[str] = field(default_factory=list)
    powered_off: list[str] = field(default_factory=list)
    powered_on: list[str] = field(default_factory=list)
    rebooted: bool = False

    def describe(self) -> str:
        if self.status != FAILED:
            return f"{self.host}: {self.status}" + (f" ({', '.join(self.steps)})" if self.steps else "")
        lines = [f"{self.host}: failed at {self.phase}: {self.message}"]
        state = []
        if self.in_maintenance:
            state.append("left in maintenance mode")
        elif self.in_maintenance is False:
            state.append("not in maintenance mode")
        if self.steps:
            state.append("done before: " + ", ".join(self.steps))
        if self.vms_to_restore:
            state.append("VMs to power on again: " + ", ".join(self.vms_to_restore))
        if state:
            lines.append(f"  state: {'; '.join(state)}")
        if self.error_type != RefusedError.__name__:
            lines.append("  run apply again to continue from there")
        return "\n".join(lines)


@dataclass
class HostApplyResult:
    hosts: list[HostOutcome] = field(default_factory=list)

    def _names(self, status: str) -> list[str]:
        return [o.host for o in self.hosts if o.status == status]

    @property
    def failed(self) -> list[str]:
        return self._names(FAILED)

    @property
    def changed(self) -> list[str]:
        return self._names(CHANGED)

    @property
    def skipped(self) -> list[str]:
        return self._names(SKIPPED)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.skipped

    @property
    def done_hosts(self) -> set[str]:
        return {o.host for o in self.hosts if o.status in (CHANGED, UNCHANGED)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "hosts": [asdict(o) for o in self.hosts],
            "changed": self.changed,
            "failed": self.failed,
            "skipped": self.skipped,
        }


# ------------------------------------------------------------------------------------------ apply


@dataclass
class HostTarget:
    name: str
    moid: str
    spec: HostSpec
    changes: list[HostChange]


ShellOpener = Callable[[str, HostSpec], AbstractContextManager[Any]]


@dataclass
class HostOpsOptions:
    keep_going: bool = False
    trust_on_first_use: bool = False
    shutdown_timeout_s: float = 120.0
    poll_s: float = 0.5
    progress: HostProgress | None = None
    stop_event: threading.Event | None = None
    open_shell: ShellOpener | None = None  # default: vgpuctl.hostfacts.open_shell with known_hosts checks


def targets_for(changes: Sequence[HostChange], specs: dict[str, HostSpec], moids: dict[str, str]) -> list[HostTarget]:
    """One HostTarget per host with changes, in host order (hosts without a spec get a default one)."""
    out = []
    for host in sorted({c.host for c in changes}):
        spec = specs.get(host) or HostSpec(name=host)
        out.append(HostTarget(host, moids[host], spec, [c for c in changes if c.host == host]))
    return out


def apply_host_changes(
    session: Any, targets: Sequence[HostTarget], state: StateStore, options: HostOpsOptions | None = None
) -> HostApplyResult:
    """Apply every target's changes, `max_unavailable` hosts at a time; stop starting hosts after a failure
    unless options.keep_going."""
    from vgpuctl.vsphere.tasks import TaskWatcher

    opts = options or HostOpsOptions()
    result = HostApplyResult()
    if not targets:
        return result
    width = max(1, min(t.spec.maintenance.max_unavailable for t in targets))
    with TaskWatcher(session) as watcher:
        stopped = ""
        for i in range(0, len(targets), width):
            batch = targets[i : i + width]
            if stopped:
                result.hosts += [HostOutcome(t.name, SKIPPED, message=stopped) for t in batch]
                continue
            with ThreadPoolExecutor(max_workers=len(batch), thread_name_prefix="vgpuctl-host") as pool:
                outcomes = list(pool.map(lambda t: _HostRun(session, watcher, t, state, opts).run(), batch))
            result.hosts += outcomes
            failed = [o.host for o in outcomes if o.status == FAILED]
            if failed and not opts.keep_going:
                stopped = f"not started: {', '.join(failed)} failed (--keep-going continues with other hosts)"
            if opts.stop_event is not None and opts.stop_event.is_set():
                stopped = "not started: interrupted"
    return result


class _HostRun:
    def __init__(self, session: Any, watcher: Any, target: HostTarget, state: StateStore, opts: HostOpsOptions):
        self.session, self.watcher, self.t, self.state, self.opts = session, watcher, target, state, opts
        self.out = HostOutcome(target.name)
        self.phase = "check"

    # -------------------------------------------------------------------- driver

    def run(self) -> HostOutcome:
        try:
            self._run()
            self.out.phase = "done"
            self.out.status = CHANGED if self.out.steps else UNCHANGED
        except Exception as err:  # one host's failure is a result, never a crash of the whole run
            if not isinstance(err, VgpuctlError):
                log.exception("%s: unexpected error in %s", self.t.name, self.phase)
            self.out.status = FAILED
            self.out.phase = self.phase
            self.out.message = str(err)
            self.out.error_type = type(err).__name__
            self._record_failure()
        self._step(self.out.status, self.out.message if self.out.status == FAILED else None)
        return self.out

    def _record_failure(self) -> None:
        from vgpuctl.vsphere import host as vhost

        try:
            self.out.in_maintenance = vhost.read_host(self.session, self.t.moid).in_maintenance
        except VgpuctlError as err:
            log.debug("%s: cannot read the host after the failure: %s", self.t.name, err)
        rec = self.state.get(self.t.name)
        if rec is not None:
            self.out.vms_to_restore = [v["name"] for v in rec.vms]
            self.state.update(self.t.name, phase=self.phase, message=self.out.message)

    def _step(self, step: str, detail: str | None = None) -> None:
        if self.opts.progress is not None:
            self.opts.progress.host_step(self.t.name, step, detail)

    def _done(self, step: str) -> None:
        self.out.steps.append(step)

    # -------------------------------------------------------------------- the steps

    def _run(self) -> None:
        from vgpuctl.vsphere import host as vhost

        t = self.t
        work = [c for c in t.changes if c.kind != hostplan.RESUME]
        api = vhost.read_host(self.session, t.moid)
        if api.connection_state != "connected":
            raise VgpuctlError(f"{t.name}: host is {api.connection_state}")
        entered = False
        if hostplan.needs_maintenance(work) and not api.in_maintenance:
            self.phase = "evacuate"
            self._evacuate()
            self.phase = "enter-maintenance"
            self._step("enter-maintenance")
            self.state.update(t.name, entered_maintenance=True, phase=self.phase)
            vhost.enter_maintenance(self.session, t.moid, self.watcher, t.name)
            self._done("enter-maintenance")
            entered = True
        if self._apply(work):
            self._reboot()
        if work:
            self.phase = "verify"
            self._step("verify")
            self._verify()
            self._done("verify")
        record = self.state.get(t.name)
        if entered or (record is not None and record.entered_maintenance):
            self.phase = "exit-maintenance"
            if vhost.read_host(self.session, t.moid).in_maintenance:
                self._step("exit-maintenance")
                vhost.exit_maintenance(self.session, t.moid, self.watcher, t.name)
                self._done("exit-maintenance")
            self.state.update(t.name, entered_maintenance=False)
        self._restore()
        self.state.drop(t.name)

    def _evacuate(self) -> None:
        from vgpuctl.vsphere import host as vhost

        t = self.t
        running = [v for v in vhost.host_vms(self.session, t.moid) if v.running]
        if not running:
            return
        listed = ", ".join(f"{v.name} ({', '.join(v.vgpus)})" if v.vgpus else v.name for v in running)
        if t.spec.maintenance.evacuate == "refuse":
            self.out.in_maintenance = False
            raise RefusedError(
                f"{t.name}: maintenance mode needs these powered-on VMs stopped: {listed}; vGPU VMs cannot "
                "migrate (maintenance.evacuate is refuse: stop them, or set evacuate: power-off)"
            )
        for vm in running:  # record first: a crash after the power-off must still know what to restore
            self.state.add_vm(t.name, vm.name, vm.moid)
        for vm in running:
            self._step("power-off", vm.name)
            how = vhost.shutdown_vm(
                self.session, vm, timeout_s=self.opts.shutdown_timeout_s, poll_s=self.opts.poll_s, watcher=self.watcher
            )
            self.out.powered_off.append(vm.name)
            self._done(f"{how} {vm.name}")

    def _apply(self, work: list[HostChange]) -> bool:
        """MIG, graphics, module options; returns whether a reboot is needed."""
        reboot = hostplan.needs_reboot(work)
        mig = [c for c in work if c.kind == hostplan.MIG]
        if mig:
            self.phase = "mig"
            reboot = self._set_mig(mig) or reboot
        graphics = [c for c in work if c.kind in hostplan.GRAPHICS_KINDS]
        if graphics:
            self.phase = "graphics"
            self._set_graphics(graphics)
        modules = [c for c in work if c.kind in hostplan.MODULE_KINDS]
        if modules:
            self.phase = "module-options"
            self._set_module_options(modules)
        return reboot

    def _shell(self) -> AbstractContextManager[Any]:
        if self.opts.open_shell is not None:
            return self.opts.open_shell(self.t.name, self.t.spec)
        from vgpuctl.hostfacts import open_shell

        return open_shell(self.t.name, self.t.spec, trust_on_first_use=self.opts.trust_on_first_use)

    def _set_mig(self, changes: list[HostChange]) -> bool:
        from vgpuctl.esxi import commands, parsers

        pending = False
        with self._shell() as shell:
            for c in changes:
                self._step("mig", f"{c.target} -> {c.new}")
                out = shell.run(commands.set_mig_mode(c.target, c.new == "mig")).stdout
                for res in parsers.parse_mig_set(out):
                    if not res.supported:
                        raise VgpuctlError(f"{self.t.name}: GPU {c.target}: MIG mode: {res.reason}")
                    pending = pending or res.pending
                self._done(f"mig {c.target} {c.new}")
        return pending

    def _set_graphics(self, changes: list[HostChange]) -> None:
        from vgpuctl.vsphere import host as vhost

        kwargs: dict[str, Any] = {}
        devices: dict[str, dict[str, str]] = {}
        for c in changes:
            if c.kind == hostplan.DEFAULT_TYPE:
                kwargs["default_type"] = c.new
            elif c.kind == hostplan.ASSIGNMENT_POLICY:
                kwargs["assignment_policy"] = c.new
            elif c.kind == hostplan.GPU_TYPE:
                devices.setdefault(c.target, {})["graphics_type"] = c.new
            elif c.kind == hostplan.VGPU_MODE:
                devices.setdefault(c.target, {})["vgpu_mode"] = c.new
        self._step("graphics", ", ".join(f"{c.kind} {c.new}" for c in changes))
        vhost.update_graphics(self.session, self.t.moid, devices=devices, host=self.t.name, **kwargs)
        self._done("graphics")

    def _set_module_options(self, changes: list[HostChange]) -> None:
        from vgpuctl.vsphere import host as vhost

        current = vhost.configured_module_options(self.session, self.t.moid)
        wanted = hostplan.options_for(current, changes)
        self._step("module-options", wanted)
        if wanted != current:
            vhost.update_module_options(self.session, self.t.moid, wanted)
        self._done("module-options")

    def _reboot(self) -> None:
        from vgpuctl.vsphere import host as vhost

        t = self.t
        self.phase = "reboot"
        self._step("reboot")
        before = vhost.reboot(self.session, t.moid, self.watcher, t.name)
        self.out.rebooted = True
        self._done("reboot")
        self.phase = "wait-reconnect"
        timeout = float(t.spec.maintenance.reboot_timeout_s)
        vhost.wait_reconnected(
            self.session,
            t.moid,
            before,
            timeout,
            poll_s=self.opts.poll_s,
            host=t.name,
            progress=lambda s, state: self._step("wait-reconnect", f"{s:.0f}s of {timeout:g}s, {state}"),
        )
        self._done("reconnected")

    def _verify(self) -> None:
        from vgpuctl.vsphere import host as vhost

        t = self.t
        api = vhost.read_host(self.session, t.moid)
        facts = self._facts_after_reboot() if self.out.rebooted else self._facts()
        problems = hostplan.verify_host(t.spec, observed_host(api, facts), facts)
        if problems:
            raise VerificationError(t.name, problems)

    def _facts(self) -> HostFacts:
        with self._shell() as shell:
            return gather_host_facts(self.session, self.t.moid, self.t.name, shell_runner(shell))

    def _facts_after_reboot(self) -> HostFacts:
        """The SSH service of a host that just reconnected to vCenter may still be starting: retry connection
        failures (never host key errors) for up to SSH_AFTER_REBOOT_S."""
        deadline = time.monotonic() + SSH_AFTER_REBOOT_S
        while True:
            try:
                return self._facts()
            except SshHostKeyError:
                raise
            except SshError as err:
                if err.exit_status is not None or time.monotonic() >= deadline:
                    raise
                log.info("%s: SSH not ready after the reboot (%s); retrying", self.t.name, err)
                self._step("verify", "waiting for SSH")
                time.sleep(max(self.opts.poll_s, 0.5))

    def _restore(self) -> None:
        from vgpuctl.vsphere import host as vhost

        rec = self.state.get(self.t.name)
        if rec is None or not rec.vms:
            return
        self.phase = "power-on"
        for vm in list(rec.vms):
            self._step("power-on", vm["name"])
            vhost.power_on_vm(self.session, vm["moid"], vm["name"], self.watcher)
            self.out.powered_on.append(vm["name"])
            self._done(f"power-on {vm['name']}")
            self.state.update(self.t.name, vms=[v for v in rec.vms if v["moid"] != vm["moid"]])
            rec = self.state.get(self.t.name) or rec


def observed_host(api: Any, facts: HostFacts | None = None) -> ObservedHost:
    """An ObservedHost from vgpuctl.vsphere.host.read_host (and the module options from facts)."""
    host = ObservedHost(
        name=api.name,
        moid=api.moid,
        connection_state=api.connection_state,
        in_maintenance=api.in_maintenance,
        default_graphics_type=api.default_graphics_type or "shared",
        assignment_policy=api.assignment_policy or "performance",
        offered_profiles=list(api.offered_profiles),
        module_options=(facts.options_configured or "") if facts is not None else "",
    )
    host.gpus = [
        ObservedGpu(
            pci_id=g.pci_id,
            device_name=g.device_name,
            memory_kb=g.memory_kb,
            graphics_type=g.graphics_type,
            vgpu_mode=g.vgpu_mode,
        )
        for g in api.gpus
    ]
    return host


# ------------------------------------------------------------------------------------------ plan + run


def gather_for_plan(
    session: Any,
    observed: Any,
    specs: dict[str, HostSpec],
    *,
    trust_on_first_use: bool = False,
    on_new_host_key: Callable[[str, str], None] | None = None,
) -> tuple[dict[str, HostFacts], list[str]]:
    """API and shell facts of the hosts the specs name (connected ones); errors for the others. Fills each
    ObservedHost.module_options with the configured nvidia option string."""
    from vgpuctl.hostfacts import gather_facts

    errors = []
    hosts = {}
    for name, spec in sorted(specs.items()):
        host = observed.hosts[name]
        if host.connection_state != "connected":
            errors.append(f"host {name}: {host.connection_state}; its GPU state cannot be read")
        else:
            hosts[name] = (host.moid, spec)
    facts = gather_facts(session, hosts, trust_on_first_use=trust_on_first_use, on_new_host_key=on_new_host_key)
    for name, f in facts.items():
        observed.hosts[name].module_options = f.options_configured or ""
    return facts, errors


def plan_host_changes(
    session: Any,
    observed: Any,
    specs: Sequence[HostSpec],
    state: StateStore | None = None,
    *,
    trust_on_first_use: bool = False,
    on_new_host_key: Callable[[str, str], None] | None = None,
) -> tuple[hostplan.HostPlan, dict[str, HostFacts]]:
    """Resolve the specs, read the facts of their hosts, and plan (hosts in the state file resume)."""
    resolved, errors = hostplan.resolve_hosts(specs, observed)
    if errors:
        return hostplan.HostPlan(errors=errors), {}
    facts, errors = gather_for_plan(
        session, observed, resolved, trust_on_first_use=trust_on_first_use, on_new_host_key=on_new_host_key
    )
    resume = [h for h in (state.hosts() if state is not None else []) if h in observed.hosts]
    plan = hostplan.plan_hosts(specs, observed, facts, resume=resume)
    plan.errors = errors + plan.errors
    return plan, facts


def run_host_changes(
    session: Any,
    observed: Any,
    specs: Sequence[HostSpec],
    changes: Sequence[HostChange],
    state: StateStore,
    options: HostOpsOptions | None = None,
) -> HostApplyResult:
    """Apply planned host changes (from plan_host_changes) host by host."""
    resolved, _ = hostplan.resolve_hosts(specs, observed)
    moids = {name: h.moid for name, h in observed.hosts.items()}
    return apply_host_changes(session, targets_for(changes, resolved, moids), state, options)


def host_status(host: ObservedHost, facts: HostFacts | None) -> dict[str, Any]:
    """One host's GPU state for `host show` and `status`: per GPU MIG current/pending, NVLink, scheduler."""
    configured = (
        facts.options_configured if facts is not None and facts.options_configured is not None else host.module_options
    )
    effective = facts.options_effective if facts is not None and facts.options_effective is not None else configured
    out: dict[str, Any] = {
        "host": host.name,
        "connection_state": host.connection_state,
        "in_maintenance": host.in_maintenance,
        "default_graphics_type": host.default_graphics_type,
        "assignment_policy": host.assignment_policy,
        "module_options": {"configured": configured, "effective": effective},
        "nvlink": hostplan.nvlink_of(effective),
        "scheduler": str(hostplan.scheduler_of(effective)),
        "gpus": [],
    }
    if hostplan.nvlink_of(configured) != out["nvlink"]:
        out["nvlink_after_reboot"] = hostplan.nvlink_of(configured)
    if str(hostplan.scheduler_of(configured)) != out["scheduler"]:
        out["scheduler_after_reboot"] = str(hostplan.scheduler_of(configured))
    for g in host.gpus:
        gf = facts.gpus.get(g.pci_id.lower()) if facts is not None else None
        row: dict[str, Any] = {
            "pci_id": g.pci_id,
            "device": g.device_name,
            "graphics_type": g.graphics_type,
            "vgpu_mode": g.vgpu_mode,
            "mig_current": gf.mig_current if gf is not None and facts is not None and facts.shell else None,
            "mig_pending": gf.mig_pending if gf is not None and facts is not None and facts.shell else None,
            "nvlink_links": gf.nvlink_links if gf is not None else None,
            "nvlink_active": gf.nvlink_active if gf is not None else None,
            "nvlink_peers": list(gf.nvlink_peers) if gf is not None else [],
            "vms": list(g.vms),
        }
        out["gpus"].append(row)
    return out


def vm_plan_after_hosts(inventory: Any, observed_after: Any, pending: Sequence[HostChange]) -> Any:
    """The VM part of `apply`, planned again against what vCenter shows after the host changes ran.

    `pending` are the host changes that did not land (failed or skipped hosts): they stay in the plan's
    host_changes, the hosts are predicted as if they had landed, and VMs on them wait (apply_plan skips VMs
    whose depends_on_hosts are pending)."""
    from vgpuctl.plan import make_plan

    base = hostplan.predict_observed(observed_after, pending) if pending else observed_after
    plan = make_plan(inventory.model_copy(update={"hosts": []}), base)
    plan.host_changes = list(pending)
    hostplan.mark_dependencies(plan.vm_changes, base, pending)
    return plan


def pending_changes(changes: Sequence[HostChange], result: HostApplyResult) -> list[HostChange]:
    """The planned host changes of hosts that did not finish (failed or not started)."""
    done = result.done_hosts
    return [c for c in changes if c.host not in done]


class StepProgress:
    """HostProgress onto a per-object progress display with `vm_step(name, step, percent)` (cli/plan.py's)."""

    def __init__(self, display: Any):
        self.display = display

    def host_step(self, host: str, step: str, detail: str | None) -> None:
        self.display.vm_step(f"host {host}", step + (f" {detail}" if detail else ""), None)


def collect_host_status(
    session: Any, observed: Any, specs: dict[str, HostSpec] | None = None, *, shell: bool = True
) -> dict[str, dict[str, Any]]:
    """host_status of every connected host for `vgpuctl status`: API facts always, shell facts (MIG pending,
    NVLink links) when `shell`; a host whose SSH fails gets "shell_error" instead of failing the command."""
    from concurrent.futures import ThreadPoolExecutor

    from vgpuctl.hostfacts import open_shell

    specs = specs or {}

    def one(name: str) -> dict[str, Any]:
        host = observed.hosts[name]
        error = None
        try:
            if shell:
                with open_shell(name, specs.get(name)) as sh:
                    facts = gather_host_facts(session, host.moid, name, shell_runner(sh))
            else:
                facts = gather_host_facts(session, host.moid, name, None)
        except VgpuctlError as err:
            error = str(err)
            facts = gather_host_facts(session, host.moid, name, None)
        doc = host_status(host, facts)
        if error is not None:
            doc["shell_error"] = error
        return doc

    names = sorted(n for n, h in observed.hosts.items() if h.connection_state == "connected")
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(names)), thread_name_prefix="vgpuctl-status") as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


# ------------------------------------------------------------------------------------------ plan + apply


def plan_with_hosts(
    session: Any,
    observed: Any,
    inventory: Any,
    *,
    state: StateStore | None = None,
    trust_on_first_use: bool = False,
    on_new_host_key: Callable[[str, str], None] | None = None,
) -> Any:
    """`vgpuctl plan`: host facts (API and SSH) of the inventory's hosts, then make_plan with them, so the plan
    shows host changes first and VMs that depend on them. Hosts left unfinished in the state file resume."""
    from vgpuctl.plan import make_plan

    state = state if state is not None else StateStore(default_state_path(_url(session)))
    resume = [h for h in state.hosts() if h in observed.hosts]
    resolved, _ = hostplan.resolve_hosts(inventory.hosts, observed)  # make_plan reports the resolve errors
    facts, errors = (
        gather_for_plan(
            session, observed, resolved, trust_on_first_use=trust_on_first_use, on_new_host_key=on_new_host_key
        )
        if resolved
        else ({}, [])
    )
    plan = _make_plan_with_facts(make_plan, inventory, observed, facts, resume)
    plan.errors = errors + plan.errors
    return plan


def _make_plan_with_facts(
    make_plan: Callable[..., Any], inventory: Any, observed: Any, facts: dict[str, HostFacts], resume: list[str]
) -> Any:
    import inspect

    if "host_facts" in inspect.signature(make_plan).parameters:
        return make_plan(inventory, observed, host_facts=facts, resume=resume)
    hp = hostplan.plan_hosts(inventory.hosts, observed, facts, resume)  # a make_plan without host support
    base = hostplan.predict_observed(observed, hp.changes) if hp.changes else observed
    plan = make_plan(inventory.model_copy(update={"hosts": []}), base)
    plan.host_changes = hp.changes
    plan.errors = hp.errors + plan.errors
    plan.warnings = hp.warnings + plan.warnings
    hostplan.mark_dependencies(plan.vm_changes, base, hp.changes)
    return plan


def _url(session: Any) -> str | None:
    settings = getattr(session, "settings", None)
    return getattr(settings, "sdk_url", None)


@dataclass
class FullApply:
    hosts: HostApplyResult
    vms: Any  # vgpuctl.apply.ApplyResult
    vm_plan: Any  # the VM plan applied after the hosts


def apply_all(
    session: Any,
    inventory: Any,
    plan: Any,
    observed: Any,
    *,
    datacenter: str | None = None,
    parallel: int = 8,
    progress: Any = None,
    stop_event: threading.Event | None = None,
    keep_going: bool = False,
    trust_on_first_use: bool = False,
    state: StateStore | None = None,
) -> FullApply:
    """`vgpuctl apply` with host changes: the hosts first (rolling, hostops), then the VMs, planned again
    against vCenter; VMs that depend on a host that did not finish are skipped. `progress` is the VM
    progress display (vm_step); host steps are shown on it as "host NAME"."""
    from vgpuctl.apply import apply_plan
    from vgpuctl.vsphere.observe import observe

    state = state if state is not None else StateStore(default_state_path(_url(session)))
    opts = HostOpsOptions(
        keep_going=keep_going,
        trust_on_first_use=trust_on_first_use,
        stop_event=stop_event,
        progress=StepProgress(progress) if progress is not None else None,
    )
    hosts = run_host_changes(session, observed, inventory.hosts, plan.host_changes, state, opts)
    after = observe(session, datacenter)
    vm_plan = vm_plan_after_hosts(inventory, after, pending_changes(plan.host_changes, hosts))
    if vm_plan.errors:  # reported by the caller; the host results stand
        from vgpuctl.apply import ApplyResult

        return FullApply(hosts, ApplyResult(), vm_plan)
    vms = apply_plan(session, vm_plan, after, parallel=parallel, progress=progress, stop_event=stop_event)
    return FullApply(hosts, vms, vm_plan)


def merge_status(doc: dict[str, Any], rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Add host facts (collect_host_status) to `vgpuctl status`'s document: per host nvlink and scheduler,
    per GPU mig_current / mig_pending and nvlink_links / nvlink_active; `mig` is a short label for tables."""
    for host in doc.get("hosts", []):
        row = rows.get(host.get("name"))
        if row is None:
            continue
        for key in ("nvlink", "nvlink_after_reboot", "scheduler", "scheduler_after_reboot", "shell_error"):
            if key in row:
                host[key] = row[key]
        by_pci = {g["pci_id"]: g for g in row["gpus"]}
        for gpu in host.get("gpus", []):
            facts = by_pci.get(gpu.get("pci_id"))
            if facts is None:
                continue
            for key in ("mig_current", "mig_pending", "nvlink_links", "nvlink_active", "nvlink_peers"):
                gpu[key] = facts[key]
            gpu["mig"] = mig_label(facts["mig_current"], facts["mig_pending"], gpu.get("vgpu_mode"))
    return doc


def mig_label(current: bool | None, pending: bool | None, vgpu_mode: str | None = None) -> str:
    """on / off / "off (on pending)" / n/a; from vSphere's vgpuMode when the shell was not read."""
    if current is None:
        if vgpu_mode == "multiInstanceGpu":
            return "on"
        return "n/a" if vgpu_mode is None else "off?"
    text = "on" if current else "off"
    if pending is not None and pending != current:
        text += f" ({'on' if pending else 'off'} pending)"
    return text


def specs_by_host(inventory: Any, observed: Any) -> dict[str, HostSpec]:
    """Host name -> the inventory entry that applies to it (empty without an inventory)."""
    if inventory is None or not inventory.hosts:
        return {}
    resolved, _ = hostplan.resolve_hosts(inventory.hosts, observed)
    return resolved


def shell_configured(specs: dict[str, HostSpec], env: dict[str, str] | None = None) -> bool:
    """Whether SSH to the hosts is set up: VGPUCTL_ESXI_* variables (password, key file, host map) or an
    inventory hosts entry with ssh credentials. `status` reads shell facts only then."""
    from vgpuctl.esxi.ssh import ENV_KEY_FILE, ENV_PASSWORD
    from vgpuctl.hostfacts import ENV_HOST_MAP

    env = dict(os.environ) if env is None else env
    if any(env.get(name) for name in (ENV_PASSWORD, ENV_KEY_FILE, *ENV_HOST_MAP)):
        return True
    return any(s.ssh.key_file or s.ssh.password_env for s in specs.values())
