"""What every command shares: global options, connecting to vCenter, printing results, reporting errors.

Nothing heavy is imported here at module level (pyVmomi, rich, pydantic): `vgpuctl --help` must stay quick.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from vgpuctl import filelimits, jsontext
from vgpuctl.durations import DAY_S, Deadline, duration_seconds, parse_deadline
from vgpuctl.errors import Interrupted, InventoryError, PlanError, UsageError, VgpuctlError
from vgpuctl.extras import missing_extra
from vgpuctl.lazyclass import dataclass
from vgpuctl.outpaths import refuse_overlaps as refuse
from vgpuctl.reports.base import ErrorDetail, ErrorInfo, ErrorReport, Rendered, Report, TextLayout
from vgpuctl.visible import visible

if TYPE_CHECKING:
    from rich.console import Console

    from vgpuctl.inventory import Inventory
    from vgpuctl.inventory.compose import Composition
    from vgpuctl.pipeline import RunOptions
    from vgpuctl.vsphere.session import ConnectionSettings, Session

PASSWORD_ENV = ("VGPUCTL_PASSWORD", "GOVC_PASSWORD")


@dataclass
class GlobalOptions:
    """The global options after flags and environment are resolved. Secrets are read only on demand."""

    url: str | None = field(default=None, repr=False)  # may carry govc-style user:password@
    username: str | None = None
    password_file: Path | None = None
    insecure: bool | None = None  # None: neither flag nor environment said; the inventory may
    ca_file: Path | None = None
    thumbprint: str | None = None
    datacenter: str | None = None
    timeout: float | None = None  # seconds; None: the session's default
    lock_timeout: float = 0.0  # seconds to wait for a host or VM another run holds
    output: str = "text"
    verbose: int = 0
    text_to_stderr: bool = False  # stdout holds something else (--events -): text goes to stderr
    url_from_command_line: bool = False
    # how the command's inventory (-f FILE) is composed: --values, --env, --allow-include-outside
    values: list[Path] = field(default_factory=list)
    env: str | None = None
    allow_include_outside: bool = False
    emitted: bool = field(default=False, repr=False)  # a JSON document already went to stdout
    prompted_password: str | None = field(default=None, repr=False)  # asked once per run, never shown

    @property
    def json(self) -> bool:
        return self.output == "json"


# ---------------------------------------------------------------------------------------- consoles


def stdout_console() -> Console:
    from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def info(message: str) -> None:
    """A progress or status line: always stderr, so stdout stays clean for --output json."""
    typer.echo(visible(message), err=True)


def warn(message: str) -> None:
    typer.echo(f"warning: {visible(message)}", err=True)


_WARNED: set[str] = set()  # cleared at the start of each run (the root command's callback)


def start_run() -> None:
    _WARNED.clear()


def warn_once(message: str) -> None:
    """A warning printed once per run however often its cause comes up (the TLS one, per connection)."""
    if message not in _WARNED:
        _WARNED.add(message)
        warn(message)


def emit(report: Report, opts: GlobalOptions, document: dict[str, Any] | None = None) -> None:
    """Print a command's result: its JSON document (`document`: made already from the report), or its text (laid
    out for the terminal, plain when piped)."""
    if opts.json:
        typer.echo(jsontext.document(report.to_dict() if document is None else document))
        opts.emitted = True
        return
    show(report.render_text(text_layout(opts)), err=opts.text_to_stderr)


def show(rendered: Rendered, err: bool = False, *, wrap: bool = False) -> None:
    """Text on stdout (stderr with `err`): a str as it is (with `wrap`, a plan's or a summary's prose, fitted to
    a terminal at word boundaries; never YAML, scripts or export lines, which must stay as they are), rich
    renderables one after the other; None prints nothing."""
    if rendered is None:
        return
    if isinstance(rendered, str):
        text = visible(rendered.rstrip("\n"))
        typer.echo(for_terminal(text, err) if wrap else text, err=err)
        return
    console = stderr_console() if err else stdout_console()
    for item in rendered if isinstance(rendered, list) else [rendered]:
        console.print(item)


def for_terminal(text: str, err: bool = False, reserve: int = 0) -> str:
    """On a terminal, lines fitted to its width at word boundaries (the terminal would cut words), `reserve`
    columns left free on the last (a prompt's answer); piped, the text as it is (whole lines, for grep and logs)."""
    import shutil

    stream = sys.stderr if err else sys.stdout
    return fit_lines(text, shutil.get_terminal_size().columns - reserve) if stream.isatty() else text


def fit_lines(text: str, width: int) -> str:
    """Each line wrapped at spaces to `width` columns, never inside a word or a hyphenated name; a continuation
    is indented two columns past its line (under a list's first name)."""
    import textwrap

    out = []
    for line in text.splitlines():
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out += textwrap.wrap(line, max(width, 20), subsequent_indent=indent + "  ", break_long_words=False,
                             break_on_hyphens=False) or [line]
    return "\n".join(out)


def text_layout(opts: GlobalOptions | None = None, err: bool = False) -> TextLayout:
    """The terminal's width, and plain lines when the stream is not a terminal (pipes, files, CI logs); with
    -v, lists are never cut."""
    import shutil

    stream = sys.stderr if err or (opts is not None and opts.text_to_stderr) else sys.stdout
    full = opts is not None and opts.verbose > 0
    return TextLayout(shutil.get_terminal_size().columns, not stream.isatty(), full)


OUTPUT_FORMATS = ("text", "json")


def check_out_file(path: Path | None, option: str = "--out", what: str = "output") -> None:
    """Refuse, before anything runs, an output file that cannot be written where it is named: a folder, a path whose
    folder is not there, `-` (the option writes a file; without it the output goes to stdout), or a file named like
    an output format (`--out json` is nearly always `-o json` mistyped)."""
    if path is None:
        return
    if path.name in OUTPUT_FORMATS:
        raise UsageError(
            f"{option} {path}: a file named {path.name!r} looks like an output format; for {path.name} on stdout use "
            f"`-o {path.name}` (the global --output), else give the file an extension"
        )
    if str(path) == "-":
        raise UsageError(f"{option} -: {option} writes a file, give it a name (without {option} the command prints "
                         "to stdout)")
    if path.is_dir():
        raise UsageError(f"{option} {path} is a folder: give the {what} a file name in it")
    if not path.parent.is_dir():
        raise UsageError(f"{option} {path}: there is no folder {path.parent}")


def refuse_overlaps(outputs: dict[str, Path | None], opts: GlobalOptions, inputs: dict[str, Path | None]) -> None:
    """Before anything runs: no output path may name a file the command reads (`inputs`, the password and CA files
    of the global options, the ESXi shell's known_hosts, key and host map files) or another output
    (vgpuctl.outpaths)."""
    from vgpuctl.esxi.ssh import files_read

    values = {f"the --values file {path}": path for path in opts.values}
    refuse(outputs, {**inputs, **values, "the --password-file": opts.password_file, "the --ca-file": opts.ca_file,
                     **files_read(os.environ)})


# --------------------------------------------------------------------------------------- inventory


COMPOSING_OPTIONS = "--values, --env and --allow-include-outside"


def composition(opts: GlobalOptions) -> Composition:
    """How the command line composes the inventory (vgpuctl.inventory.compose)."""
    from vgpuctl.inventory.compose import Composition

    return Composition(tuple(opts.values), opts.env, opts.allow_include_outside)


def composes(opts: GlobalOptions) -> bool:
    """Whether --values, --env or --allow-include-outside was given."""
    return bool(opts.values or opts.env is not None or opts.allow_include_outside)


def load_inventory(opts: GlobalOptions, file: Path, outputs: dict[str, Path | None] | None = None) -> Inventory:
    """The -f inventory, composed as the command line says, schema and semantic checks done. `outputs`: the
    command's output files, refused when one names a file the inventory was read from (an included file)."""
    from vgpuctl import pipeline

    inventory = pipeline.load(file, composition(opts))
    if outputs:
        refuse_overlaps(outputs, opts, inventory_inputs(opts, file, inventory))
    return inventory


def inventory_inputs(opts: GlobalOptions, file: Path | None, inventory: Inventory | None) -> dict[str, Path | None]:
    """Every file the inventory was read from (itself, what it includes, the values files), for refuse_overlaps."""
    inputs: dict[str, Path | None] = {"the inventory": file}
    for name in (inventory.composed_from[1:] if inventory is not None else []):
        if Path(name) not in opts.values:
            inputs[f"the included file {name}"] = Path(name)
    for i, host in enumerate(inventory.hosts if inventory is not None else []):
        for what, path in (("known_hosts", host.ssh.known_hosts), ("key_file", host.ssh.key_file)):
            if path:
                inputs[f"hosts[{i}].ssh.{what}"] = Path(path).expanduser()
    return {**inputs, **{f"the --values file {path}": path for path in opts.values}}


def maybe_inventory(opts: GlobalOptions, file: Path | None,
                    outputs: dict[str, Path | None] | None = None) -> Inventory | None:
    """load_inventory when -f FILE is given; without it, None (and the composing options are refused)."""
    if file is None:
        refuse_composing(opts, "they compose the inventory given with -f FILE")
        return None
    return load_inventory(opts, file, outputs)


def refuse_composing(opts: GlobalOptions, why: str) -> None:
    if composes(opts):
        raise UsageError(f"{COMPOSING_OPTIONS} go with an inventory: {why}")


# -------------------------------------------------------------------------------------- connection


def split_url_credentials(url: str) -> tuple[str, str | None, str | None]:
    """govc accepts https://user:pass@host/sdk; take the credentials out so they never travel further."""
    from vgpuctl.vsphere.session import parse_url

    parsed = parse_url(url)  # a malformed URL is one clear error here
    if parsed.username is None and parsed.password is None:
        return url, None, None
    return parsed.url, parsed.username, parsed.password


def read_password_file(path: Path, option: str = "--password-file") -> str:
    """The first line of the file, read within vgpuctl's file limits; a FIFO or a device is refused at once;
    errors name the option or variable that named the file."""
    try:
        mode = path.stat().st_mode
        text = filelimits.read_regular_text(path)
    except (filelimits.NotAFile, filelimits.FileTooLarge) as e:
        raise UsageError(f"{option} {path}: {e}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{option} {path}: not UTF-8 text") from None
    except OSError as e:
        raise UsageError(f"{option} {path}: {e.strerror or e}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warn(f"{path} is readable by other users; chmod 600 it")
    password = text.splitlines()[0] if text else ""
    if not password:
        raise UsageError(f"{option} {path}: the file is empty")
    return password


def resolve_password(opts: GlobalOptions, username: str | None = None, url_password: str | None = None) -> str:
    """--password-file, then VGPUCTL_PASSWORD/GOVC_PASSWORD (or a password in the URL), then a prompt."""
    if opts.password_file is not None:
        return read_password_file(opts.password_file)
    for name in PASSWORD_ENV:
        value = os.environ.get(name)
        if value:
            return value
    if url_password:
        return url_password
    if opts.prompted_password is not None:
        return opts.prompted_password
    if sys.stdin.isatty():
        opts.prompted_password = str(
            typer.prompt(f"Password for {username or opts.username or 'vCenter'}", hide_input=True, err=True)
        )
        return opts.prompted_password
    raise UsageError("no password: set VGPUCTL_PASSWORD, use --password-file, or run in a terminal to be prompted")


def connection_settings(opts: GlobalOptions, inventory: Inventory | None = None) -> ConnectionSettings:
    """Flags and environment win; the inventory's vcenter section fills what they leave unset. A fleet's
    vCenters each have their own (vgpuctl.cli.fleet): a command that works on one vCenter refuses a fleet."""
    from vgpuctl.vsphere.session import DEFAULT_TIMEOUT_S, ConnectionSettings, parse_timeout

    if getattr(inventory, "is_fleet", False):
        raise UsageError(f"{getattr(inventory, 'source_path', None)}: the inventory names several vCenters "
                         "(vcenters:) and this command works on one: plan, apply, status, export, preflight and "
                         "capacity take a fleet (docs/fleet.md)")

    vcenter = getattr(inventory, "vcenter", None)
    tls = getattr(vcenter, "tls", None)
    url = opts.url or getattr(vcenter, "url", None)
    if not url:
        raise UsageError("no vCenter URL: use --url, VGPUCTL_URL (or GOVC_URL), or vcenter.url in the inventory")
    url, url_user, url_password = split_url_credentials(url)
    if url_password is not None and opts.url_from_command_line:
        raise UsageError("do not put a password in --url; use VGPUCTL_PASSWORD, --password-file or the prompt")
    username = opts.username or url_user
    if not username:
        raise UsageError("no user name: use --username or VGPUCTL_USERNAME (or GOVC_USERNAME)")
    password = resolve_password(opts, username, url_password)
    from vgpuctl import trace

    trace.add_secret(password)  # from here on, redacted from traces and kept out of guest runs
    insecure = opts.insecure if opts.insecure is not None else (tls is not None and not getattr(tls, "verify", True))
    ca_file = opts.ca_file or getattr(tls, "ca_file", None)
    if ca_file:
        check_ca_file(Path(ca_file).expanduser())
    thumbprint = opts.thumbprint or getattr(tls, "thumbprint", None)
    if insecure:
        warn_once(
            "TLS certificate verification is disabled (--insecure or VGPUCTL_INSECURE): "
            "the identity of vCenter is not checked"
        )
    return ConnectionSettings(
        url=url,
        username=username,
        password=password,
        insecure=bool(insecure),
        ca_file=str(Path(ca_file).expanduser()) if ca_file else None,
        thumbprint=thumbprint,
        timeout_s=parse_timeout(opts.timeout) if opts.timeout is not None else DEFAULT_TIMEOUT_S,
        esxi_timeout_s=esxi_timeout(opts),
    )


def check_ca_file(path: Path) -> None:
    """The CA file is read by the TLS libraries: a FIFO, a device or a file over vgpuctl's size limit is refused
    before they read it. A file that is missing is left to them (their error names it)."""
    try:
        filelimits.require_regular(path)
        if path.stat().st_size > filelimits.MAX_FILE_BYTES:
            raise filelimits.FileTooLarge
    except (filelimits.NotAFile, filelimits.FileTooLarge) as e:
        raise UsageError(f"CA file {path}: {e}") from None
    except OSError:
        return


def esxi_timeout(opts: GlobalOptions) -> float | None:
    """The bound on each ESXi shell command: --timeout (VGPUCTL_TIMEOUT) bounds them too; else VGPUCTL_ESXI_TIMEOUT;
    else None (vgpuctl.esxi.ssh.DEFAULT_COMMAND_TIMEOUT_S)."""
    from vgpuctl.esxi.ssh import ENV_TIMEOUT
    from vgpuctl.vsphere.session import parse_timeout

    if opts.timeout is not None:
        return parse_timeout(opts.timeout)
    value = os.environ.get(ENV_TIMEOUT)
    try:
        return parse_timeout(value) if value else None
    except UsageError as err:
        raise UsageError(f"{ENV_TIMEOUT}: {err}") from None


def datacenter_for(opts: GlobalOptions, inventory: Inventory | None = None) -> str | None:
    vcenter = getattr(inventory, "vcenter", None)
    return opts.datacenter or getattr(vcenter, "datacenter", None)


@contextmanager
def connect(opts: GlobalOptions, inventory: Inventory | None = None) -> Iterator[Session]:
    """One vCenter session for the run; logs out at the end. `-v` reports the SOAP round trips."""
    from vgpuctl.vsphere.session import open_session

    settings = connection_settings(opts, inventory)
    with open_session(settings) as session:
        try:
            yield session
        finally:
            if opts.verbose:
                info(f"round trips: {session.round_trips}")


# ------------------------------------------------------------------------------------------ runs


EXIT_CHANGES_PENDING = 2  # plan --detailed-exitcode: changes are pending


def run_options(opts: GlobalOptions, inventory: Inventory | None, **fields: Any) -> RunOptions:
    """The pipeline's options from the global options and the command's flags."""
    from vgpuctl.pipeline import RunOptions
    from vgpuctl.vsphere.workrecord import new_run_id

    fields.setdefault("lock_timeout_s", opts.lock_timeout)
    fields.setdefault("on_lock_wait", info)  # --lock-timeout: the line per run a plan waits for
    fields.setdefault("run_id", new_run_id())  # named in events, work records and leases
    return RunOptions(datacenter=datacenter_for(opts, inventory), on_new_host_key=new_host_key, **fields)


MAX_LOCK_WAIT_S = DAY_S


def parse_duration(text: str, option: str) -> float:
    """Seconds from `90`, `90s`, `5m`, `1h30m`, `2m30s`: finite, 0 to a day."""
    try:
        return duration_seconds(text, MAX_LOCK_WAIT_S)
    except ValueError as err:
        raise UsageError(f"{option} {text!r}: {err}") from None


def parse_deadline_option(text: str, option: str = "--deadline") -> Deadline:
    """`--deadline`: a time with its date and UTC offset, or a duration from now; a usage error when it is not in
    the future."""
    try:
        return parse_deadline(text, time.time())
    except ValueError as err:
        raise UsageError(f"{option}: {err}") from None


def new_host_key(host: str, fingerprint: str) -> None:
    warn(f"trusted the new SSH host key of {host} ({fingerprint}) and recorded it in known_hosts")


CONFIRM_WORD = "yes"


def confirm(question: str, action: str = "apply", *, word: bool = False) -> None:
    """Ask before a change; the one place that does. `word`: a disruptive change (maintenance mode, a reboot, a
    VM powered off or destroyed) needs the word `yes` typed out; others a y/N. Refused without a terminal (use
    --yes); any other answer, or Ctrl-C at the prompt, stops with nothing changed."""
    if not sys.stdin.isatty():
        raise UsageError(f"{action} needs confirmation but stdin is not a terminal: rerun with --yes")
    try:
        if word:
            question = (f"{question} This takes hosts into maintenance, reboots them, powers VMs off or destroys "
                        f"them. Type '{CONFIRM_WORD}' to go on")
            answer = str(typer.prompt(for_terminal(question, True, len(": yes")), default="", show_default=False,
                                      err=True))
            ok = answer.strip() == CONFIRM_WORD
        else:
            ok = typer.confirm(for_terminal(question, True, len(" [y/N]: n")), default=False, err=True)
    except typer.Abort:
        raise Interrupted("interrupted: nothing was changed") from None
    if not ok:
        raise VgpuctlError(f"{action} cancelled: nothing was changed")


# ------------------------------------------------------------------------------------------ errors


def report_error(err: BaseException, opts: GlobalOptions | None) -> int:
    """Print an error the way users should see it; return the exit code."""
    verbose = bool(opts and opts.verbose)

    err = missing_extra(err) or err  # an optional module that is not installed: name its extra, no "bug"
    if isinstance(err, VgpuctlError):
        if verbose:
            traceback.print_exception(err, file=sys.stderr)
        _print_error_lines(err)
        code = err.exit_code
    else:
        if verbose:
            traceback.print_exception(err, file=sys.stderr)
        message = str(err).splitlines()[0] if str(err) else ""
        typer.echo(f"error: unexpected {type(err).__name__}: {visible(message)}", err=True)
        if not verbose:
            typer.echo("hint: this is a bug in vgpuctl; rerun with -v to see the traceback", err=True)
        code = 1
    if opts is not None and opts.json and not opts.emitted:
        typer.echo(jsontext.document(error_report(err).to_dict()))
        opts.emitted = True
    return code


def _print_error_lines(err: VgpuctlError) -> None:
    if isinstance(err, InventoryError):
        lines = err.located().splitlines()  # FILE:LINE:COL: message, one per problem
    else:
        lines = [f"error: {line}" for line in (str(err) or type(err).__name__).splitlines()]
    for line in dict.fromkeys(lines):  # a range of VMs repeats its entry's problem once per name
        typer.echo(visible(line), err=True)


def error_report(err: BaseException) -> ErrorReport:
    """The `{"error": ...}` document: inventory problems located in `details`, plan problems one per line."""
    details: list[ErrorDetail] = []
    if isinstance(err, InventoryError):
        for e in getattr(err, "errors", None) or [err]:
            path, message = split_key_path(e.message)
            details.append(ErrorDetail(message, file=e.file, line=e.line, col=e.col, path=path))
    elif isinstance(err, PlanError):
        details = [ErrorDetail(p) for p in err.problems]
    return ErrorReport(ErrorInfo(type(err).__name__, str(err), details))


_KEY_PATH = re.compile(r"^((?:[A-Za-z_][\w-]*|\[\d+\])(?:\.[A-Za-z_][\w-]*|\[\d+\])*): (.+)$", re.DOTALL)


def split_key_path(message: str) -> tuple[str | None, str]:
    """("vms[0].vgpus.count", "must be ...") from "vms[0].vgpus.count: must be ..."; (None, message) otherwise."""
    m = _KEY_PATH.match(message)
    return (m[1], m[2]) if m else (None, message)
