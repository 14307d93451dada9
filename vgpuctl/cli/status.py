"""`status` and `profiles`: what the farm has, read in one bulk observe pass (reports: vgpuctl.reports.status)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vgpuctl.cli import common, pages
from vgpuctl.cli import fleet as cli_fleet
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.errors import ConnectionFailure, RestError, TlsError, UsageError
from vgpuctl.lazyclass import dataclass
from vgpuctl.names import host_named
from vgpuctl.records.classes import SupervisorState

if TYPE_CHECKING:
    from vgpuctl.fleet import FleetPart
    from vgpuctl.inventory import Inventory
    from vgpuctl.model import Observed
    from vgpuctl.records.perf import UsageRead
    from vgpuctl.reports.host import HostReport
    from vgpuctl.reports.status import HostLease, StatusReport
    from vgpuctl.vsphere.session import ConnectionSettings, Session

OptionalInventory = Annotated[
    Path | None,
    typer.Option(
        "--file", "-f", help="Take vCenter settings (URL, datacenter, TLS) from this inventory.", dir_okay=False
    ),
]


def register(app: typer.Typer) -> None:
    app.command("status")(status_cmd)
    app.command("profiles")(profiles_cmd)


def observe_farm(
    opts: GlobalOptions, file: Path | None, *, nvlink: bool = False, also: Any = None
) -> tuple[Observed, int]:
    """One bulk observe; with `nvlink`, also each GPU host's NVLink sets (one QueryConfigTarget per host)."""
    from vgpuctl import pipeline

    inventory = common.maybe_inventory(opts, file)
    with common.connect(opts, inventory) as session:
        observed = pipeline.observe(session, common.datacenter_for(opts, inventory), inventory, all_nvlink=nvlink)
        if also is not None:  # more reads in the same session (host facts for status)
            also(session, observed, inventory)
        return observed, session.round_trips


# ------------------------------------------------------------------------------------------ status


ShellOpt = Annotated[
    bool | None,
    typer.Option(
        "--shell/--no-shell",
        help="Read MIG pending and NVLink links over SSH from every host (default: when VGPUCTL_ESXI_* "
        "or the inventory's hosts configure SSH).",
    ),
]


def _host_rows(session: Session, observed: Observed, inventory: Any, shell: bool | None) -> dict[str, HostReport]:
    """Per host MIG current/pending, NVLink links, scheduler (over SSH when configured); what hosts could not say
    joins `observed.warnings`, one line per cause naming the hosts."""
    from vgpuctl.hosts import status as hoststatus
    from vgpuctl.hosts.facts import unread_warnings
    from vgpuctl.hosts.targets import specs_by_host
    from vgpuctl.reports.host import host_status

    specs = specs_by_host(inventory, observed)
    use_shell = hoststatus.shell_configured(specs) if shell is None else shell
    facts = hoststatus.collect_host_facts(session, observed, specs, shell=use_shell)
    observed.warnings += unread_warnings(facts.values())  # the fields themselves say unknown
    return {name: host_status(observed.hosts[name], f, f.shell_error) for name, f in facts.items()}


VmClassesOpt = Annotated[
    bool | None,
    typer.Option(
        "--vm-classes/--no-vm-classes",
        help="List the VM classes with vGPUs and the supervisor namespaces using them, read over the vSphere "
        "Automation REST API (default: on vCenter 7.0 and later, the first with supervisors).",
    ),
]
SUPERVISOR_API = (7, 0)  # vSphere with Kubernetes (supervisor clusters) came with vSphere 7.0


UsageOpt = Annotated[
    bool,
    typer.Option("--usage", help="Add each GPU's utilization (average and peak) and memory used over a window, "
                 "from vCenter's GPU performance counters (default window: the last hour of 20 s samples)."),
]
SinceOpt = Annotated[
    str | None,
    typer.Option("--since", metavar="DURATION", help="The usage window, e.g. 30m, 12h or 7d (implies --usage); "
                 "beyond an hour vCenter's statistics intervals answer, which keep the GPU counters only at "
                 "statistics level 4."),
]
StatusHtmlOpt = Annotated[
    Path | None,
    typer.Option("--html", metavar="FILE",
                 help="Write the status as one self-contained HTML page to FILE (a GPU map per cluster and host: "
                 "vGPUs and MIG instances to scale, NVLink sets, held hosts, unfinished work) instead of its text."),
]


@dataclass(frozen=True)
class UsageWindow:
    """--usage and --since: whether to read the GPUs' usage and over which window (None: vCenter's last hour)."""

    wanted: bool
    seconds: float | None
    since: str | None


def status_cmd(
    ctx: typer.Context, file: OptionalInventory = None, shell: ShellOpt = None, vm_classes: VmClassesOpt = None,
    usage: UsageOpt = False, since: SinceOpt = None, html: StatusHtmlOpt = None,
    vcenter: cli_fleet.VcenterScope = None,
) -> None:
    """Hosts, GPUs (model, mode, NVLink, used/free), a GPU map per host, free and stranded framebuffer per host
    and cluster, the VMs' vGPUs, and the VM classes with vGPUs with the namespaces that use them; with --usage
    the GPUs' utilization and memory used; with --html one self-contained page instead of the text. With a fleet
    inventory (-f, vcenters:), each vCenter's (on the page too).

    Examples:
      vgpuctl status
      vgpuctl status --usage
      vgpuctl status --usage --since 1d -o json
      vgpuctl status --usage --html farm.html
    """
    from vgpuctl.farm.usage import parse_since

    opts: GlobalOptions = ctx.obj
    pages.check_html_file(html, opts, {"the inventory": file})
    seconds = parse_since(since) if since is not None else None  # a bad duration before any connection
    window = UsageWindow(usage or since is not None, seconds, since)
    inventory = common.maybe_inventory(opts, file)
    if vcenter and inventory is None:
        raise UsageError("--vcenter names a vCenter of a fleet inventory: give the inventory with -f")
    if inventory is not None and (inventory.is_fleet or vcenter):
        return status_fleet(opts, inventory, vcenter, shell, vm_classes, window, html)
    with common.connect(opts, inventory) as session:
        report = status_in_session(opts, session, common.datacenter_for(opts, inventory), inventory, shell,
                                   vm_classes, window)
    if html is not None:
        from vgpuctl.reports.html import status_page

        pages.write_page(html, status_page(report), opts, report)
        return
    common.emit(report, opts)


def status_in_session(opts: GlobalOptions, session: Session, datacenter: str | None, inventory: Inventory | None,
                      shell: bool | None, vm_classes: bool | None, window: UsageWindow) -> StatusReport:
    """One vCenter's status: the bulk read with every GPU host's NVLink sets, the hosts' facts, their leases, the
    VM classes and, when asked, the GPUs' usage."""
    from vgpuctl import pipeline
    from vgpuctl.farm.usage import gpu_usage
    from vgpuctl.reports.status import merge_status, status_report, with_leases, with_supervisor, with_usage

    observed = pipeline.observe(session, datacenter, inventory, all_nvlink=True)
    rows = _host_rows(session, observed, inventory, shell)
    leases = held_hosts(session, observed)
    supervisor = read_supervisor(session.settings, observed) if reads_vm_classes(vm_classes, observed.api_version) \
        else None
    usage = read_usage(session, observed, window.seconds, window.since) if window.wanted else None
    report = with_leases(merge_status(status_report(observed, session.round_trips if opts.verbose else None), rows),
                         leases)
    report.warnings += observed.warnings  # what the hosts could not say, one line per cause
    if supervisor is not None:
        with_supervisor(report, *supervisor)
    if usage is not None:
        with_usage(report, gpu_usage(observed, usage), usage)
    return report


def status_fleet(opts: GlobalOptions, inventory: Inventory, patterns: list[str] | None, shell: bool | None,
                 vm_classes: bool | None, window: UsageWindow, html: Path | None) -> None:
    """Each vCenter's status, read in parallel, one report with a section per vCenter (with `html`, one page
    with a section per vCenter instead of the text); exit 1 when one of them could not be read (after the
    others are shown)."""
    from vgpuctl.reports.fleet import FleetStatusPart, fleet_status_report

    def read(part: FleetPart, session: Session) -> StatusReport:
        datacenter = part.inventory.vcenter.datacenter or opts.datacenter
        return status_in_session(opts, session, datacenter, part.inventory, shell, vm_classes, window)

    results, left_out = cli_fleet.read_each(opts, inventory, patterns, read)
    parts = [FleetStatusPart(r.name, r.url, r.result, cli_fleet.error_text(r.error)) for r in results]
    report = fleet_status_report(parts, left_out)
    if html is not None:
        from vgpuctl.reports.html import fleet_status_page

        pages.write_page(html, fleet_status_page(report), opts, report)
    else:
        common.emit(report, opts)
    cli_fleet.raise_for_parts([(r.name, r.error) for r in results if r.error is not None])


def read_usage(session: Session, observed: Observed, seconds: float | None, since: str | None) -> UsageRead:
    """The gpu counters of every connected GPU host over the window (vgpuctl.vsphere.perf: a few round trips)."""
    from vgpuctl.farm.usage import hosts_to_read
    from vgpuctl.records.perf import WindowTooLong
    from vgpuctl.vsphere.perf import read_gpu_usage

    try:
        return read_gpu_usage(session, hosts_to_read(observed), seconds)
    except WindowTooLong as err:
        raise UsageError(f"--since {since}: {err}") from None


def held_hosts(session: Session, observed: Observed) -> dict[str, HostLease]:
    """Hosts another live run holds (one CurrentTime read, only when a host has a lease value)."""
    from vgpuctl import pipeline
    from vgpuctl.reports.status import host_lease

    leases = pipeline.leases_of(session, observed, observed.hosts)
    return {h: host_lease(i.run, i.holder, i.since, i.renewed, i.ttl_s) for h, i in leases.items()}


def reads_vm_classes(wanted: bool | None, api_version: str) -> bool:
    """--vm-classes / --no-vm-classes, else whether the vCenter is recent enough to have a supervisor."""
    if wanted is not None:
        return wanted
    try:
        version = tuple(int(part) for part in api_version.split(".")[:2])
    except ValueError:
        return True
    return version >= SUPERVISOR_API


def read_supervisor(settings: ConnectionSettings, observed: Observed) -> tuple[SupervisorState | None, str | None]:
    """VM classes and namespaces over REST with the SOAP session's settings (one login): the state, or None and
    why it could not be read. Supervisor clusters are asked first: without one, nothing else is read."""
    from vgpuctl.supervisor.stage import observe_supervisor
    from vgpuctl.vsphere.rest import RestClient

    try:
        with RestClient(settings) as rest:
            if not rest.supervisor_clusters():
                return SupervisorState(), None
            return observe_supervisor(rest, observed), None
    except (RestError, ConnectionFailure, TlsError) as err:
        return None, str(err)


# ---------------------------------------------------------------------------------------- profiles


ProfilesShellOpt = Annotated[
    bool | None,
    typer.Option(
        "--shell/--no-shell",
        help="Read the MIG instance totals over SSH from hosts with MIG GPUs; the host's figure wins over the "
        "catalogue's (default: when VGPUCTL_ESXI_* or the inventory's hosts configure SSH).",
    ),
]


def profiles_cmd(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option("--host", "-H", help="Only this host (a short name it alone has will "
                                                                  "do).")] = None,
    file: OptionalInventory = None,
    shell: ProfilesShellOpt = None,
) -> None:
    """vGPU profiles the hosts offer: framebuffer, series, sharing (time-sliced or MIG), and NVIDIA's maximum
    per GPU for the GPU's current mode (equal-size, mixed-size or MIG; the host's own figure when it gives one)."""
    from vgpuctl.reports.profiles import profiles_report

    opts: GlobalOptions = ctx.obj
    wanted: list[str] = []

    def reported_maxima(session: Session, observed: Observed, inventory: Any) -> None:
        from vgpuctl.hosts import status as hoststatus
        from vgpuctl.hosts.targets import specs_by_host
        from vgpuctl.reports.profiles import with_reported_maxima

        specs = specs_by_host(inventory, observed)
        if (hoststatus.shell_configured(specs) if shell is None else shell) and wanted:
            bound = hoststatus.esxi_timeout(session)
            totals, warnings = hoststatus.read_reported_maxima(observed, wanted, specs, bound)
            for name, instance_totals in totals.items():
                with_reported_maxima(observed.hosts[name], instance_totals)
            for warning in warnings:
                common.warn(warning)

    def scope(session: Session, observed: Observed, inventory: Any) -> None:
        wanted.extend([host_named(host, observed.hosts)] if host else sorted(observed.hosts))
        reported_maxima(session, observed, inventory)

    observed, round_trips = observe_farm(opts, file, also=scope)
    hosts = [observed.hosts[name] for name in wanted]
    common.emit(profiles_report(hosts, round_trips if opts.verbose else None), opts)
