"""`vgpuctl host show/graphics/mig/nvlink/scheduler HOST`: imperative host GPU operations.

Each change builds a one-host desired state (a HostSpec) and runs the pipeline's host stages, as `apply`
does; it says what it will do (changes, maintenance, reboot, VMs affected) and asks unless --yes. SSH and
maintenance settings come from the host's inventory entry (-f), else defaults and VGPUCTL_ESXI_* variables.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.domain import (
    AssignmentPolicy,
    ConnectionState,
    Evacuate,
    GpuMode,
    GraphicsType,
    NvlinkState,
    Outcome,
    SchedulerPolicy,
    VgpuMode,
)
from vgpuctl.errors import PlanError, UsageError, VgpuctlError
from vgpuctl.names import host_named
from vgpuctl.progress import StepLog
from vgpuctl.visible import visible

if TYPE_CHECKING:
    from vgpuctl.inventory import HostSpec
    from vgpuctl.model import HostChange, Observed
    from vgpuctl.reports.apply import AffectedVm
    from vgpuctl.reports.base import VgpuCount
    from vgpuctl.vsphere.session import Session

app = typer.Typer(help="Host GPU configuration: graphics, MIG mode, NVLink, scheduler.", no_args_is_help=True)


HostName = Annotated[
    str, typer.Argument(help="ESXi host: its name as vCenter knows it, or a short name only it has (esx-01).")
]
InventoryOpt = Annotated[
    Path | None,
    typer.Option("--file", "-f", dir_okay=False, help="Inventory whose entry for the host gives ssh and maintenance."),
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before maintenance mode, power-offs or reboots.")]
EvacuateOpt = Annotated[
    Evacuate | None,
    typer.Option(
        help="Running VMs on the host when it must enter maintenance mode: refuse (stop before any change and list "
        "them), power-off (power them off, and on again after the change) or migrate (vMotion them to another host "
        "of the cluster that offers their profiles and has room; a vGPU VM only where vCenter allows vMotion of "
        "running vGPU VMs; a VM that cannot move is powered off when the inventory allows it, else the plan "
        "refuses). Default: the inventory entry's, else refuse."
    ),
]
RebootTimeout = Annotated[
    int | None, typer.Option(min=1, max=24 * 3600, help="Seconds to wait for the host after a reboot (at most a day).")
]
Tofu = Annotated[
    bool,
    typer.Option("--ssh-trust-on-first-use", help="Accept and record an unknown SSH host key (reported)."),
]


# ------------------------------------------------------------------------------------------- show


@app.command("show")
def show_cmd(
    ctx: typer.Context,
    host: HostName,
    file: InventoryOpt = None,
    no_shell: Annotated[bool, typer.Option("--no-shell", help="vSphere API only (no SSH).")] = False,
    tofu: Tofu = False,
) -> None:
    """Per GPU: graphics type, vGPU mode, MIG current/pending, NVLink links; host: module options, scheduler."""
    from vgpuctl import pipeline
    from vgpuctl.hosts.facts import gather_facts
    from vgpuctl.reports.host import host_status

    opts: GlobalOptions = ctx.obj
    inventory = common.maybe_inventory(opts, file)
    with common.connect(opts, inventory) as session:
        observed = pipeline.observe(session, common.datacenter_for(opts, inventory), inventory)
        found = _host(observed, host)
        host = found.name  # a unique short name names the host too
        spec = _base_spec(inventory, observed, host)
        facts = None
        if found.connection_state == ConnectionState.CONNECTED:
            facts = gather_facts(
                session,
                {host: (found.moid, spec)},
                shell=not no_shell,
                trust_on_first_use=tofu,
                on_new_host_key=common.new_host_key,
                degrade=False,  # the one host asked for: its shell's failure is the answer
            )[host]
    common.emit(host_status(found, facts), opts)


# ------------------------------------------------------------------------------------------- work record


@app.command("forget-work")
def forget_work_cmd(
    ctx: typer.Context,
    host: HostName,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before clearing it.")] = False,
) -> None:
    """Clear the host's work record (its vgpuctl.work attribute): what an unfinished apply left to finish there.
    For a value that is no work record (plan names it), or work you finished by hand; the next apply then
    resumes nothing on the host. The clear takes the host's lease: refused while a run holds it, or when the
    record changed after it was shown."""
    from vgpuctl import pipeline
    from vgpuctl.records.work import WORK_FIELD
    from vgpuctl.reports.work import forget_work_report

    opts: GlobalOptions = ctx.obj
    with common.connect(opts, None) as session:
        observed = pipeline.observe(session, common.datacenter_for(opts, None))
        found = _host(observed, host)
        held = pipeline.leases_of(session, observed, [found.name])
        if found.name in held:  # said before the prompt; the lease taken for the clear decides
            raise VgpuctlError(_in_use(found.name, pipeline.held_text(held[found.name])))
        text = found.custom_values.get(WORK_FIELD, "")
        report = forget_work_report(found.name, text, cleared=bool(text))
        if text:
            if not yes:
                what = f"no work record: {report.problem}" if report.problem else report.unfinished
                common.confirm(f"Clear the work record of {found.name} ({what})?", action="forget-work")
            _forget(session, found.name, found.moid, text)
    common.emit(report, opts)


def _forget(session: Any, host: str, moid: str, shown: str) -> None:
    """Clear the record under the host's lease, taken now (not only looked at before the prompt), and only while
    it is the one shown."""
    from vgpuctl import pipeline
    from vgpuctl.vsphere.workrecord import LeaseHeld, forget_work, new_run_id

    try:
        forget_work(session, host, moid, shown, new_run_id())
    except LeaseHeld as held:
        who = pipeline.held_text(held.holder) if held.holder is not None else "held by another run"
        raise VgpuctlError(_in_use(host, who)) from None


def _in_use(host: str, held: str) -> str:
    return f"{host}: {held}: its work record is in use; not cleared"


# ------------------------------------------------------------------------------------------- changes


@app.command("graphics")
def graphics_cmd(
    ctx: typer.Context,
    host: HostName,
    default_type: Annotated[GraphicsType | None, typer.Option(help="Host default graphics type.")] = None,
    policy: Annotated[AssignmentPolicy | None, typer.Option(help="vGPU assignment policy.")] = None,
    gpu: Annotated[str | None, typer.Option(help="all or a PCI bus id, for --type / --vgpu-mode.")] = None,
    gpu_type: Annotated[GraphicsType | None, typer.Option("--type", help="Graphics type of --gpu.")] = None,
    vgpu_mode: Annotated[VgpuMode | None, typer.Option(help="Time-sliced vGPU mode of --gpu.")] = None,
    file: InventoryOpt = None,
    evacuate: EvacuateOpt = None,
    reboot_timeout: RebootTimeout = None,
    tofu: Tofu = False,
    yes: Yes = False,
) -> None:
    """Set the host default graphics type, the assignment policy, or a GPU's graphics type / vGPU mode."""
    if (gpu_type or vgpu_mode) and gpu is None:
        raise UsageError("--type and --vgpu-mode need --gpu all|BUSID")
    if gpu is not None and not (gpu_type or vgpu_mode):
        raise UsageError("--gpu needs --type or --vgpu-mode")
    if not (default_type or policy or gpu):
        raise UsageError("nothing to change: give --default-type, --policy, or --gpu with --type / --vgpu-mode")
    fields: dict[str, Any] = {}
    if default_type or policy:
        fields["graphics"] = {"default_type": _v(default_type), "assignment_policy": _v(policy)}
    if gpu is not None:
        fields["gpus"] = [{"select": gpu, "graphics_type": _v(gpu_type), "vgpu_mode": _v(vgpu_mode)}]
    change(ctx.obj, host, fields, file=file, evacuate=evacuate, reboot_timeout=reboot_timeout, tofu=tofu, yes=yes)


@app.command("mig")
def mig_cmd(
    ctx: typer.Context,
    host: HostName,
    gpu: Annotated[str, typer.Option(help="all or a PCI bus id (0000:3b:00.0).")] = "all",
    enable: Annotated[bool | None, typer.Option("--enable/--disable", help="MIG mode on or off.")] = None,
    file: InventoryOpt = None,
    evacuate: EvacuateOpt = None,
    reboot_timeout: RebootTimeout = None,
    tofu: Tofu = False,
    yes: Yes = False,
) -> None:
    """Switch MIG mode of one GPU or all (maintenance mode; a reboot on Ampere GPUs)."""
    if enable is None:
        raise UsageError("say --enable or --disable")
    fields = {"gpus": [{"select": gpu, "mode": str(GpuMode.MIG if enable else GpuMode.TIME_SLICED)}]}
    change(ctx.obj, host, fields, file=file, evacuate=evacuate, reboot_timeout=reboot_timeout, tofu=tofu, yes=yes)


@app.command("nvlink")
def nvlink_cmd(
    ctx: typer.Context,
    host: HostName,
    enable: Annotated[bool | None, typer.Option("--enable/--disable", help="NVLink on or off.")] = None,
    file: InventoryOpt = None,
    evacuate: EvacuateOpt = None,
    reboot_timeout: RebootTimeout = None,
    tofu: Tofu = False,
    yes: Yes = False,
) -> None:
    """Turn NVLink on or off (nvidia module option NVreg_NvLinkDisable; maintenance mode and a reboot)."""
    if enable is None:
        raise UsageError("say --enable or --disable")
    fields = {"nvlink": str(NvlinkState.ENABLED if enable else NvlinkState.DISABLED)}
    change(ctx.obj, host, fields, file=file, evacuate=evacuate, reboot_timeout=reboot_timeout, tofu=tofu, yes=yes)


@app.command("scheduler")
def scheduler_cmd(
    ctx: typer.Context,
    host: HostName,
    policy: Annotated[SchedulerPolicy, typer.Option(help="best-effort, equal-share or fixed-share.")],
    timeslice_ms: Annotated[int | None, typer.Option(min=1, max=30, help="Time slice in ms (not best-effort).")] = None,
    file: InventoryOpt = None,
    evacuate: EvacuateOpt = None,
    reboot_timeout: RebootTimeout = None,
    tofu: Tofu = False,
    yes: Yes = False,
) -> None:
    """Set the time-sliced vGPU scheduler (RmPVMRL; maintenance mode and a reboot)."""
    if timeslice_ms is not None and policy == SchedulerPolicy.BEST_EFFORT:
        raise UsageError("--timeslice-ms applies to equal-share and fixed-share only")
    fields = {"scheduler": {"policy": policy.value, "timeslice_ms": timeslice_ms}}
    change(ctx.obj, host, fields, file=file, evacuate=evacuate, reboot_timeout=reboot_timeout, tofu=tofu, yes=yes)


def _v(value: StrEnum | None) -> str | None:
    return value.value if value is not None else None


# ------------------------------------------------------------------------------------------- shared path


def _host(observed: Observed, name: str) -> Any:
    """The host a name means: its full name, or a short name only it has."""
    return observed.hosts[host_named(name, observed.hosts)]


def _base_spec(inventory: Any, observed: Observed, host: str) -> HostSpec | None:
    """The inventory entry that applies to the host (a name entry wins over its cluster's)."""
    if inventory is None:
        return None
    from vgpuctl.hosts.plan import resolve_hosts

    resolved, _ = resolve_hosts(inventory.hosts, observed)
    return resolved.get(host)


def one_host_spec(
    base: HostSpec | None, host: str, fields: dict[str, Any], evacuate: Evacuate | None, reboot_timeout: int | None
) -> HostSpec:
    """The desired state of just this host: the command's fields, ssh/maintenance from the inventory entry."""
    from pydantic import ValidationError

    from vgpuctl.inventory import HostSpec

    data: dict[str, Any] = {"name": host, **fields}
    if base is not None:
        data["ssh"] = base.ssh.model_dump()
        data["maintenance"] = base.maintenance.model_dump()
    maintenance = dict(data.get("maintenance") or {})
    if evacuate is not None:
        maintenance["evacuate"] = evacuate.value
    if reboot_timeout is not None:
        maintenance["reboot_timeout_s"] = reboot_timeout
    data["maintenance"] = maintenance
    try:
        return HostSpec.model_validate(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{where}: {first['msg']}") from None


def change(
    opts: GlobalOptions,
    host: str,
    fields: dict[str, Any],
    *,
    file: Path | None,
    evacuate: Evacuate | None,
    reboot_timeout: int | None,
    tofu: bool,
    yes: bool,
) -> None:
    """Plan the one-host change through the pipeline, say what it will do, confirm, apply, report."""
    from vgpuctl import pipeline
    from vgpuctl.reports.apply import host_change_report

    inventory = common.maybe_inventory(opts, file)
    options = common.run_options(opts, inventory, trust_on_first_use=tofu)
    options.evacuate_by_flag = True  # what to do with running VMs is this command's --evacuate
    with common.connect(opts, inventory) as session:
        observed = pipeline.observe(session, options.datacenter, inventory)
        found = _host(observed, host)
        host = found.name
        spec = one_host_spec(_base_spec(inventory, observed, host), host, fields, evacuate, reboot_timeout)
        plan = pipeline.plan_hosts(session, observed, [spec], options)
        if plan.errors:
            raise PlanError(plan.errors)
        changes = [c for c in plan.changes if c.host == host]
        for w in plan.warnings:
            common.warn(w)
        report = host_change_report(host, changes, _running_vms(session, found.moid, changes))
        if not changes:
            common.emit(report, opts)
            return
        _say(opts, describe_changes(host, changes, spec, report.affected_vms))
        if not yes:  # maintenance mode or a reboot: the word yes; a change applied at once: y/N
            disruptive = any(c.disruptive or c.needs_reboot for c in changes)
            common.confirm(f"Apply {len(changes)} host change(s)?", action="the host change", word=disruptive)
        result, _ = pipeline.run_interruptible(  # Ctrl-C: finish or restore what runs; twice: exit at once
            lambda cancel: pipeline.apply_hosts(
                session, observed, [spec], changes, options, progress=_Progress(), cancel=cancel
            ),
            common.info,
        )
    outcome = report.result = result.hosts[0]
    common.emit(report, opts)
    if outcome.status == Outcome.FAILED:
        raise VgpuctlError(f"host {host}: the change failed at {outcome.phase}")


def _say(opts: GlobalOptions, text: str) -> None:
    """What the host command will do, before its prompt: fitted to the terminal at word boundaries."""
    if opts.json:
        common.info(common.for_terminal(text, err=True))
    else:
        typer.echo(common.for_terminal(visible(text)))


def _running_vms(session: Session, moid: str, changes: list[HostChange]) -> list[tuple[str, list[str]]]:
    """The running VMs on the host with their vGPU profiles, when the changes need maintenance mode."""
    from vgpuctl.hosts.evacuation import needs_maintenance
    from vgpuctl.vsphere import host as vhost

    if not needs_maintenance(changes):
        return []
    return [(v.name, v.vgpus) for v in vhost.host_vms(session, moid) if v.running]


def describe_changes(host: str, changes: list[HostChange], spec: HostSpec, affected: list[AffectedVm]) -> str:
    """What the command will do, for the confirmation: changes, maintenance, reboot, VMs affected."""
    from vgpuctl.hosts.evacuation import needs_maintenance, needs_reboot

    lines = [f"host {host}:"]
    lines += [f"  ~ {c.label}: {c.old} -> {c.new}" for c in changes]
    if needs_maintenance(changes):
        lines.append("  the host enters maintenance mode for the change and leaves it afterwards")
    if needs_reboot(changes):
        lines.append(f"  the host reboots (waiting up to {spec.maintenance.reboot_timeout_s}s for it)")
    if affected:
        names = ", ".join(f"{v.vm} ({_vgpu_text(v.vgpus)})" if v.vgpus else v.vm for v in affected)
        if spec.maintenance.evacuate == Evacuate.POWER_OFF:
            lines.append(f"  running VMs are shut down and powered on again afterwards: {names}")
        elif spec.maintenance.evacuate == Evacuate.MIGRATE:
            lines.append(f"  running VMs move to other hosts of the cluster (--evacuate migrate): {names}")
        else:
            lines.append(f"  running VMs block maintenance mode (--evacuate refuse, nothing will change): {names}")
    return "\n".join(lines)


def _vgpu_text(vgpus: list[VgpuCount]) -> str:
    return ", ".join(f"{v.count} x {v.profile}" if v.count > 1 else v.profile for v in vgpus)


class _Progress:
    """Host steps on stderr: timestamped, one line per step change, a heartbeat at most every 30 s per wait."""

    def __init__(self) -> None:
        self.log = StepLog(common.info)

    def host_step(self, host: str, step: str, detail: str | None) -> None:
        self.log.step(f"host {host}", step, detail)
