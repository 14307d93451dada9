"""The `vgpuctl` command: global options, the command tree, and the error policy.

Exit codes: 0 ok, 1 error (usage errors too), 2 changes pending (`plan --detailed-exitcode`), 130 interrupted.
Global options may come before or after the command; shell completion: `vgpuctl --show-completion bash`.
Errors the user can fix print one line (no traceback unless -v).
"""

from __future__ import annotations

import copy
import functools
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from vgpuctl import __version__
from vgpuctl.cli import (
    capacity,
    common,
    experiment,
    export,
    exporter,
    guest,
    host,
    k8s,
    plan,
    preflight,
    provision,
    report,
    runs,
    show,
    sim,
    status,
    vm,
)
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.globalopts import add_global_options, plain_values_first
from vgpuctl.cli.inventoryopts import add_inventory_options
from vgpuctl.gcpause import one_command_process
from vgpuctl.progress import EXIT_NOW
from vgpuctl.reports.base import ErrorInfo, ErrorReport

if TYPE_CHECKING:
    import logging

MISSING_COMMAND = "Missing command."


class OutputFormat(StrEnum):
    text = "text"
    json = "json"


class VgpuctlGroup(TyperGroup):
    """Root group: every command runs inside this invoke, so one place maps exceptions to exit codes; the global
    options are copied onto every subcommand (vgpuctl.cli.globalopts)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        add_inventory_options(self)  # --values, --env, --allow-include-outside wherever -f FILE is read
        add_global_options(self, _late_option)

    def make_context(self, info_name: str | None, args: list[str], *rest: Any, **kwargs: Any) -> Any:
        self.raw_args = list(args)  # what the user typed, for an error before the options are parsed
        try:
            _refuse_single_dash_long_options(self, args)
            return super().make_context(info_name, args, *rest, **kwargs)
        except Exception as err:
            _usage_exit_code(err)
            _json_usage_error(err, None, self.raw_args)
            raise

    def get_params(self, ctx: Any) -> list[Any]:
        return plain_values_first(super().get_params(ctx))  # the help and completion options typer adds too

    def invoke(self, ctx: Any) -> Any:
        _refuse_a_bare_group(self, ctx)
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None
        except Exception as err:
            if _is_click_exception(err) or isinstance(err, BrokenPipeError):
                _usage_exit_code(err)
                _json_usage_error(err, ctx, getattr(self, "raw_args", []))
                raise  # click reports usage errors and exits quietly on a closed pipe
            opts = ctx.obj if isinstance(ctx.obj, GlobalOptions) else None
            raise typer.Exit(common.report_error(err, opts)) from None


class SingleDashOption(typer.BadParameter):
    """`-out` for `--out`: click would read it as `-o ut` and complain about the value instead."""

    def format_message(self) -> str:
        return self.message


def _refuse_single_dash_long_options(root: Any, args: list[str]) -> None:
    """A word after one dash that is the name of a long option (`-out`, `-yes`, `-file`) is that option mistyped."""
    words = {arg[1:] for arg in args[: args.index("--") if "--" in args else len(args)]
             if len(arg) > 2 and arg[0] == "-" and arg[1] != "-" and "=" not in arg}
    if not words:
        return
    known = _long_option_names(root)
    for word in sorted(words & known):
        raise SingleDashOption(f"No such option: -{word} (one dash takes one letter); did you mean --{word}?")


def _long_option_names(command: Any) -> set[str]:
    names = {opt[2:] for param in command.params for opt in (*param.opts, *param.secondary_opts)
             if opt.startswith("--")}
    for sub in getattr(command, "commands", {}).values():
        names |= _long_option_names(sub)
    return names


def _is_click_exception(err: Exception) -> bool:
    # typer vendors click; its usage errors keep click's own handling (message, hint)
    return any(cls.__name__ in ("ClickException", "Exit", "Abort") for cls in type(err).__mro__)


def _usage_exit_code(err: BaseException) -> None:
    """Usage errors exit 1, like every other error: 2 means "changes pending" (plan --detailed-exitcode)."""
    if any(cls.__name__ == "UsageError" for cls in type(err).__mro__):
        err.exit_code = 1  # type: ignore[attr-defined]


def _json_usage_error(err: Exception, ctx: Any, raw_args: list[str]) -> bool:
    """With --output json a usage error is the run's one document on stdout too (click still explains it, on
    stderr). Before the global options are parsed (an unknown command, a bad option value) the raw arguments and
    VGPUCTL_OUTPUT say whether JSON was asked for. Returns whether it wrote the document."""
    message = getattr(err, "format_message", None)
    exit_code: object = getattr(err, "exit_code", 0)  # click's Exit(0) (--help) is no error
    if message is None or not exit_code:
        return False
    # a command group given no command says nothing itself
    return _json_usage_document(str(message()) or MISSING_COMMAND, ctx, raw_args)


def _json_usage_document(text: str, ctx: Any, raw_args: list[str]) -> bool:
    """The usage error's JSON document on stdout, when JSON was asked for and none was written yet."""
    opts = ctx.obj if ctx is not None and isinstance(ctx.obj, GlobalOptions) else None
    wants_json = (opts is not None and opts.json) or json_asked(raw_args)
    if not wants_json or (opts is not None and opts.emitted):
        return False
    import json

    typer.echo(json.dumps(ErrorReport(ErrorInfo("UsageError", text)).to_dict(), indent=2))
    if opts is not None:
        opts.emitted = True
    return True


def _refuse_a_bare_group(root: Any, ctx: Any) -> None:
    """With --output json, a command group named without a command (`vgpuctl -o json host`) is a usage error
    with its one JSON document: the group would print its help on stdout (typer writes it while the error is
    made, before any handler sees it)."""
    if not json_asked(getattr(root, "raw_args", [])):  # the global options are not parsed into ctx.obj yet
        return
    args = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", None) or []), *ctx.args]
    command: Any = root
    path = [ctx.command_path]
    while args and not args[0].startswith("-") and hasattr(command, "get_command"):
        command = command.get_command(ctx, args[0])
        path.append(args.pop(0))
        if command is None:
            return  # click says the command does not exist
    if command is root or not hasattr(command, "get_command") or args or not command.no_args_is_help:
        return
    _json_usage_document(MISSING_COMMAND, ctx, getattr(root, "raw_args", []))
    name = " ".join(path)
    typer.echo(f"Usage: {name} [OPTIONS] COMMAND [ARGS]...\nTry '{name} -h' for help.", err=True)
    raise typer.Exit(1)


def json_asked(args: list[str]) -> bool:
    """Whether the arguments (or VGPUCTL_OUTPUT) ask for JSON output, read without parsing the command line."""
    import os

    wanted = os.environ.get("VGPUCTL_OUTPUT", "")
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg in ("-o", "--output") and i + 1 < len(args):
            wanted = args[i + 1]
        elif arg.startswith("--output="):
            wanted = arg.split("=", 1)[1]
        elif arg.startswith("-o") and arg[2:] in ("text", "json"):  # `-out` is no -o (a mistyped --out)
            wanted = arg[2:]
    return wanted == "json"


def _late_option(ctx: Any, name: str, value: Any) -> None:
    """A global option typed after the command: update the run's GlobalOptions."""
    opts = ctx.find_object(GlobalOptions)
    if opts is None:
        return
    if name == "verbose":
        opts.verbose += int(value)
        _setup_logging(opts.verbose)
    elif name == "output":
        opts.output = str(getattr(value, "value", value))
    elif name == "url":
        opts.url, opts.url_from_command_line = value, True
    elif name == "insecure":
        opts.insecure = bool(value)
    elif name == "lock_timeout":
        opts.lock_timeout = common.parse_duration(value, "--lock-timeout") if value else 0.0
    else:
        setattr(opts, name, value)


app = typer.Typer(
    name="vgpuctl",
    cls=VgpuctlGroup,
    help="Infrastructure as code for NVIDIA vGPU on VMware vSphere.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vgpuctl {__version__}")
        raise typer.Exit()


UrlOpt = Annotated[
    str | None,
    typer.Option(envvar=["VGPUCTL_URL", "GOVC_URL"], help="vCenter URL (https://host/sdk or host[:port])."),
]
UsernameOpt = Annotated[
    str | None, typer.Option("--username", "-u", envvar=["VGPUCTL_USERNAME", "GOVC_USERNAME"], help="User name.")
]
PasswordFileOpt = Annotated[
    Path | None,
    typer.Option(
        help="Read the password from this file (first line). Otherwise VGPUCTL_PASSWORD or GOVC_PASSWORD, "
        "else a prompt. There is no --password flag: command lines leak.",
        dir_okay=False,
    ),
]
InsecureOpt = Annotated[
    bool,
    typer.Option(
        "--insecure/--no-insecure",
        envvar=["VGPUCTL_INSECURE", "GOVC_INSECURE"],
        show_default=False,
        help="Do not verify the vCenter TLS certificate (warned about); --no-insecure verifies it even where "
        "the inventory or the environment turn it off.",
    ),
]
CaFileOpt = Annotated[
    Path | None,
    typer.Option(envvar=["VGPUCTL_CA_FILE", "GOVC_TLS_CA_CERTS"], help="CA bundle to verify vCenter with."),
]
ThumbprintOpt = Annotated[
    str | None,
    typer.Option(envvar="VGPUCTL_THUMBPRINT", help="Pin vCenter's certificate by its SHA-256 thumbprint."),
]
DatacenterOpt = Annotated[
    str | None,
    typer.Option(envvar=["VGPUCTL_DATACENTER", "GOVC_DATACENTER"], help="Datacenter (default: the inventory's)."),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        envvar="VGPUCTL_TIMEOUT",
        help="Seconds to wait for vCenter to accept a connection and to answer each request (default 30), and for "
        "each ESXi shell command (default VGPUCTL_ESXI_TIMEOUT, else 120).",
    ),
]
LockTimeoutOpt = Annotated[
    str | None,
    typer.Option(
        envvar="VGPUCTL_LOCK_TIMEOUT",
        metavar="DURATION",
        help="Wait up to this long (90, 90s, 5m, 1h30m) for a host or VM another run is changing, with a progress "
        "line, instead of failing it at once (default 0).",
    ),
]
OutputOpt = Annotated[
    OutputFormat,
    typer.Option("--output", "-o", envvar="VGPUCTL_OUTPUT", help="text, or one JSON document on stdout."),
]
VerboseOpt = Annotated[
    int,
    typer.Option(
        "--verbose",
        "-v",
        count=True,
        metavar="",
        show_default=False,
        help="-v: tracebacks, round trips, info logs; -vv: also a SOAP and SSH trace (secrets redacted).",
    ),
]
VersionOpt = Annotated[
    bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
]


@app.callback()
def main(
    ctx: typer.Context,
    url: UrlOpt = None,
    username: UsernameOpt = None,
    password_file: PasswordFileOpt = None,
    insecure: InsecureOpt = False,
    ca_file: CaFileOpt = None,
    thumbprint: ThumbprintOpt = None,
    datacenter: DatacenterOpt = None,
    timeout: TimeoutOpt = None,
    lock_timeout: LockTimeoutOpt = None,
    output: OutputOpt = OutputFormat.text,
    verbose: VerboseOpt = 0,
    version: VersionOpt = False,
) -> None:
    """Plan and apply vGPUs for VMs and GPU modes for hosts from one inventory file."""
    common.start_run()
    ctx.obj = GlobalOptions(
        url=url,
        username=username,
        password_file=password_file,
        insecure=insecure if _source(ctx, "insecure") != "DEFAULT" else None,
        ca_file=ca_file,
        thumbprint=thumbprint,
        datacenter=datacenter,
        timeout=timeout,
        output=output.value,
        verbose=verbose,
        url_from_command_line=_source(ctx, "url") == "COMMANDLINE",
    )
    _setup_logging(verbose)
    if lock_timeout:  # parsed once the options exist, so that a bad value is reported as -o asks
        ctx.obj.lock_timeout = common.parse_duration(lock_timeout, "--lock-timeout")


@functools.cache
def _stderr_handler_class() -> type[logging.StreamHandler]:  # type: ignore[type-arg]
    import logging

    class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
        """Writes to whatever sys.stderr is now (tests swap it), not the stream of the first run."""

        @property  # type: ignore[override]
        def stream(self) -> Any:
            import sys

            return sys.stderr

        @stream.setter
        def stream(self, _value: Any) -> None:
            pass

    return StderrHandler


def _setup_logging(verbose: int) -> None:
    """vgpuctl's library logs on stderr: warnings always, info with -v, debug with -vv. (logging is imported here:
    `--help` and a usage error never need it.)"""
    import logging

    handler_class = _stderr_handler_class()
    logger = logging.getLogger("vgpuctl")
    for handler in [h for h in logger.handlers if isinstance(h, handler_class)]:
        logger.removeHandler(handler)
    handler = handler_class()
    if verbose:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("warning: %(message)s"))
    level = logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    handler.setLevel(level)  # the handler filters; the logger's own level only ever opens up
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)


def _source(ctx: typer.Context, name: str) -> str:
    source = ctx.get_parameter_source(name)
    return getattr(source, "name", "DEFAULT")


plan.register(app)
preflight.register(app)
show.register(app)
status.register(app)
capacity.register(app)
export.register(app)
app.add_typer(vm.app, name="vm")
app.add_typer(host.app, name="host")
app.add_typer(guest.app, name="guest")
provision.register(app)
runs.register(app)
app.add_typer(sim.app, name="sim")
app.add_typer(report.app, name="report")
experiment.register(app)
k8s.register(app)
exporter.register(app)


def app_for(args: list[str]) -> typer.Typer:
    """The root app with only the command `args` name (`vgpuctl -o json plan -f x` -> plan): typer builds every
    command's options from its signature before it parses anything, a tenth of a second for the whole tree that
    one command does not need. The whole app for help, completion, no command, a command it does not know, and
    any option before the command it cannot read plainly: click's own parsing and messages decide those."""
    import os

    if any(key.endswith("_COMPLETE") for key in os.environ):  # shell completion lists every command
        return app
    options = _root_options()
    name = _command_named(args, options)
    if name is None:
        return _listing_app() if _asks_root_help(args, options) else app
    pruned = copy.copy(app)
    pruned.registered_commands = [c for c in app.registered_commands if _command_name(c) == name]
    pruned.registered_groups = [g for g in app.registered_groups if g.name == name]
    return pruned if pruned.registered_commands or pruned.registered_groups else app


def _listing_app() -> typer.Typer:
    """The root app whose commands and groups carry only what the root's help lists (name, help, panel, hidden),
    none of their options: the root's help (`--help`, `-h`, no command) prints the same without building them."""
    listing = copy.copy(app)
    listing.registered_commands = [_listed_command(c) for c in app.registered_commands]
    listing.registered_groups = [_listed_group(g) for g in app.registered_groups]
    return listing


def _listed_command(info: Any) -> Any:
    callback = info.callback

    def listed() -> None:
        raise AssertionError("a command of the root's help listing is never run")

    listed.__doc__, listed.__name__ = callback.__doc__, callback.__name__
    listed.__module__ = callback.__module__
    listed.__qualname__ = callback.__qualname__
    stub = copy.copy(info)
    stub.callback = listed
    return stub


def _listed_group(info: Any) -> Any:
    group = copy.copy(info.typer_instance)
    group.registered_commands, group.registered_groups = [], []
    stub = copy.copy(info)
    stub.typer_instance = group
    return stub


def _asks_root_help(args: list[str], options: dict[str, bool]) -> bool:
    """Whether the arguments ask for the root's help and nothing else: no words at all (the root shows its help),
    or -h / --help among the root's options before any command."""
    words = iter(args)
    asked = not args
    for word in words:
        if word in ("-h", "--help"):
            asked = True
            continue
        takes_value = _takes_value(word, options) if word.startswith("-") and word not in ("-", "--") else None
        if takes_value is None:
            return False
        if takes_value:
            next(words, None)
    return asked


def _command_name(info: Any) -> str:
    return str(info.name or typer.main.get_command_name(info.callback.__name__))


def _root_options() -> dict[str, bool]:
    """Each option flag of the root command (the global options) -> whether it takes a value: read from the
    root command typer builds without its subcommands."""
    bare = copy.copy(app)
    bare.registered_commands, bare.registered_groups = [], []
    root = typer.main.get_command(bare)
    return {flag: not (getattr(p, "is_flag", False) or getattr(p, "count", False))
            for p in root.params for flag in (*p.opts, *p.secondary_opts)}


def _command_named(args: list[str], options: dict[str, bool]) -> str | None:
    """The first word of `args` that is not a global option or its value; None at anything else first."""
    words = iter(args)
    for word in words:
        if not word.startswith("-") or word == "-":
            return word
        if word == "--":
            return None
        takes_value = _takes_value(word, options)
        if takes_value is None:
            return None
        if takes_value:
            next(words, None)
    return None


def _takes_value(word: str, options: dict[str, bool]) -> bool | None:
    """Whether the next word is this option's value (False: it is not, or the value is in the word); None for
    a word that is not the root's option."""
    if word.startswith("--"):
        name, given, _ = word.partition("=")
        known = options.get(name)
        return None if known is None else known and not given
    for i, letter in enumerate(word[1:], start=1):  # -vv, -ojson, -o json
        known = options.get(f"-{letter}")
        if known is None:
            return None
        if known:
            return i == len(word) - 1
    return False


def run() -> None:
    """Console-script entry point. After a second Ctrl-C the process ends at once: worker threads still
    waiting for vCenter (a host's reboot, a VM's task) are not waited for."""
    import os
    import sys

    one_command_process()
    try:
        app_for(sys.argv[1:])(prog_name="vgpuctl")
    except SystemExit as done:
        if EXIT_NOW.is_set():
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(done.code if isinstance(done.code, int) else 130)
        raise


if __name__ == "__main__":
    run()
