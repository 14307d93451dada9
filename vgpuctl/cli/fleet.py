"""What the commands that take a fleet (an inventory of several vCenters, docs/fleet.md) share: `--vcenter`, each
vCenter's connection settings and credentials, and reading every vCenter in scope in parallel.

A fleet's credentials are per vCenter, never shared: `VGPUCTL_URL_<NAME>` (or the entry's `url`),
`VGPUCTL_USERNAME_<NAME>` (else the URL's user, else --username / VGPUCTL_USERNAME), and the password from
`VGPUCTL_PASSWORD_FILE_<NAME>`, `VGPUCTL_PASSWORD_<NAME>` or the user info of `VGPUCTL_URL_<NAME>` (the only
place a URL may carry one). `<NAME>` is the vCenter's name in upper case with `-` as `_`. Every vCenter's
credentials are checked before any is connected to; a fleet never prompts.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.errors import UsageError, VgpuctlError

if TYPE_CHECKING:
    from vgpuctl.cli.display import ApplyDisplay
    from vgpuctl.fleet import FleetPart
    from vgpuctl.fleetrun import PartRead
    from vgpuctl.inventory import Inventory
    from vgpuctl.progress import Progress
    from vgpuctl.vsphere.session import ConnectionSettings, Session

T = TypeVar("T")

VcenterScope = Annotated[
    list[str] | None,
    typer.Option("--vcenter", metavar="NAME", help="Only this vCenter of a fleet inventory (its vcenters: list; "
                 "name or glob; repeatable): the others are neither read nor changed, and are listed as out of "
                 "scope."),
]


def env_names(name: str) -> dict[str, str]:
    """The environment variables of one vCenter of a fleet, by what they hold."""
    from vgpuctl.inventory.schema import vcenter_env_key

    key = vcenter_env_key(name)
    return {what: f"VGPUCTL_{what}_{key}" for what in
            ("URL", "USERNAME", "PASSWORD", "PASSWORD_FILE", "THUMBPRINT", "CA_FILE")}


def parts_in_scope(inventory: Inventory, patterns: Sequence[str] | None) -> tuple[list[FleetPart], list[str]]:
    """The fleet's vCenters `--vcenter` selects (all without it), and the names of those it leaves out."""
    from vgpuctl import fleet

    fleet.refuse_vcenter_option(inventory, patterns or [])
    return fleet.select(fleet.split(inventory), patterns or [])


def refuse_single_vcenter_options(opts: GlobalOptions) -> None:
    """--url and --password-file name one vCenter's: a fleet's come per vCenter (the module's doc)."""
    if opts.url_from_command_line:
        raise UsageError("--url names one vCenter; a fleet's come from each vcenters entry's url or "
                         "VGPUCTL_URL_<NAME> (docs/fleet.md)")
    if opts.password_file is not None:
        raise UsageError("--password-file holds one vCenter's password; a fleet's come from "
                         "VGPUCTL_PASSWORD_FILE_<NAME> or VGPUCTL_PASSWORD_<NAME> per vCenter (docs/fleet.md)")


def fleet_settings(opts: GlobalOptions, parts: Sequence[FleetPart]) -> dict[str, ConnectionSettings]:
    """Each vCenter's connection settings, all checked before any vCenter is connected to."""
    refuse_single_vcenter_options(opts)
    return {part.name: part_settings(opts, part) for part in parts}


def part_settings(opts: GlobalOptions, part: FleetPart) -> ConnectionSettings:
    """One vCenter's settings: its own variables, then its vcenters entry, then the shared options (--username,
    --insecure, --ca-file, --thumbprint, --timeout)."""
    from vgpuctl import trace
    from vgpuctl.vsphere.session import DEFAULT_TIMEOUT_S, ConnectionSettings, parse_timeout

    env = env_names(part.name)
    url = os.environ.get(env["URL"]) or part.entry.url
    if not url:
        raise UsageError(f"vCenter {part.name}: no URL: set url in its vcenters entry, or {env['URL']}")
    url, url_user, url_password = common.split_url_credentials(url)
    username = os.environ.get(env["USERNAME"]) or url_user or opts.username
    if not username:
        raise UsageError(f"vCenter {part.name}: no user name: set {env['USERNAME']} (or --username for every "
                         "vCenter)")
    password = part_password(part.name, env, url_password)
    trace.add_secret(password)
    tls = part.entry.tls
    insecure = opts.insecure if opts.insecure is not None else not tls.verify
    ca_file = os.environ.get(env["CA_FILE"]) or tls.ca_file or (str(opts.ca_file) if opts.ca_file else None)
    if ca_file:
        common.check_ca_file(Path(ca_file).expanduser())
    if insecure:
        common.warn_once(f"TLS certificate verification is disabled for vCenter {part.name} (--insecure, "
                         "VGPUCTL_INSECURE or its tls.verify): its identity is not checked")
    return ConnectionSettings(
        url=url, username=username, password=password, insecure=bool(insecure),
        ca_file=str(Path(ca_file).expanduser()) if ca_file else None,
        thumbprint=os.environ.get(env["THUMBPRINT"]) or tls.thumbprint or opts.thumbprint,
        timeout_s=parse_timeout(opts.timeout) if opts.timeout is not None else DEFAULT_TIMEOUT_S,
        esxi_timeout_s=common.esxi_timeout(opts),
    )


def part_password(name: str, env: dict[str, str], url_password: str | None) -> str:
    """Its password file, its password variable, or the password its URL variable carries; else one line
    naming the vCenter and its variables (a fleet never prompts, and never sends one vCenter's password to
    another)."""
    path = os.environ.get(env["PASSWORD_FILE"])
    if path:
        return common.read_password_file(Path(path).expanduser(), env["PASSWORD_FILE"])
    password = os.environ.get(env["PASSWORD"]) or url_password
    if not password:
        raise UsageError(f"vCenter {name}: no password: set {env['PASSWORD']} or {env['PASSWORD_FILE']} (a fleet "
                         "takes no shared password and never prompts)")
    return password


# ------------------------------------------------------------------------------------------ reading


def read_each(opts: GlobalOptions, inventory: Inventory, patterns: Sequence[str] | None,
              read: Callable[[FleetPart, Session], T]) -> tuple[list[PartRead[T]], list[str]]:
    """`read(part, session)` on every vCenter in scope, in parallel: what each read (or why it failed), and the
    vCenters `--vcenter` left out. -v reports each vCenter's round trips."""
    from vgpuctl.fleetrun import read_fleet

    parts, left_out = parts_in_scope(inventory, patterns)
    results = read_fleet(parts, fleet_settings(opts, parts), read)
    if opts.verbose:
        for r in results:
            common.info(f"vCenter {r.name}: round trips: {r.round_trips}")
    return results, left_out


def error_text(err: VgpuctlError | None) -> str | None:
    return None if err is None else str(err) or type(err).__name__


def raise_for_parts(failed: Sequence[tuple[str, VgpuctlError | None]]) -> None:
    """After the fleet's document: one error naming each vCenter whose part failed (exit 1), or nothing."""
    if failed:
        lines = [f"vCenter {name}: {(error_text(err) or 'failed').splitlines()[0]}" for name, err in failed]
        raise VgpuctlError("\n".join(lines))


def one_part(inventory: Inventory, patterns: Sequence[str] | None, what: str) -> FleetPart:
    """The one vCenter `--vcenter` names, for what works on one vCenter (`plan --explain`, `capacity --demand`)."""
    parts, _ = parts_in_scope(inventory, patterns)
    if len(parts) != 1:
        raise UsageError(f"{what} works on one vCenter of the fleet: name it with --vcenter "
                         f"(vcenters: {', '.join(p.name for p in parts)})")
    return parts[0]


# ------------------------------------------------------------------------------------------ progress


class PartProgress:
    """One vCenter's progress on the fleet's live display: its hosts and VMs named `VCENTER/NAME`."""

    def __init__(self, display: Progress, name: str, planned: dict[str, list[str]], lock: threading.Lock):
        self.display, self.name, self.planned, self.lock = display, name, planned, lock

    def vm_step(self, vm: str, step: str, percent: int | float | None = None) -> None:
        self.display.vm_step(f"{self.name}/{vm}", step, None if percent is None else int(percent))

    def host_step(self, host: str, step: str, detail: str | None) -> None:
        self.display.host_step(f"{self.name}/{host}", step, detail)

    def vms_planned(self, vms: Sequence[str]) -> None:
        with self.lock:  # the display counts every vCenter's VMs
            self.planned[self.name] = [f"{self.name}/{vm}" for vm in vms]
            every = [vm for names in self.planned.values() for vm in names]
        self.display.vms_planned(every)


@contextmanager
def part_progress(display: ApplyDisplay, planned: dict[str, list[str]]) -> Iterator[Callable[[str], Progress]]:
    """The live display while the fleet applies, and each vCenter's Progress on it (`planned`: each vCenter's
    VMs as the display names them, until its VM plan is made again)."""
    lock = threading.Lock()
    with display:
        yield lambda name: PartProgress(display, name, planned, lock)
