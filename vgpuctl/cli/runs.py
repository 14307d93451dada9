"""`vgpuctl runs` and `vgpuctl runs show RUN`: the run history (vgpuctl.history), and the recording of a run by
`plan`, `apply` and `provision` (`recording`), which never fails the run it records."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vgpuctl.cli import common, pages
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.errors import VgpuctlError

if TYPE_CHECKING:
    from vgpuctl.history import Recorder, RunHistory

app = typer.Typer(
    help="The runs of plan, apply and provision this user made, newest first. Kept in $XDG_STATE_HOME/vgpuctl/runs "
    "(default ~/.local/state/vgpuctl/runs): the newest VGPUCTL_HISTORY_KEEP runs (200) within VGPUCTL_HISTORY_MAX_MB "
    "MiB (100); --no-history or VGPUCTL_HISTORY=off keeps none.",
    invoke_without_command=True,
    no_args_is_help=False,
)

NoHistory = Annotated[
    bool,
    typer.Option("--no-history", help="Keep no record of this run in the run history (`vgpuctl runs`; also "
                 "VGPUCTL_HISTORY=off)."),
]


def register(main: typer.Typer) -> None:
    main.add_typer(app, name="runs")


def _history() -> RunHistory:
    from vgpuctl.history import RunHistory, bounds_from_env, history_folder

    return RunHistory(history_folder(), bounds_from_env(common.warn))


# ------------------------------------------------------------------------------------------ recording


@contextmanager
def recording(command: str, opts: GlobalOptions, no_history: bool, inventory: Path | None,
              run_id: str) -> Iterator[Recorder | None]:
    """The record of this run (None with --no-history or VGPUCTL_HISTORY=off): started now, finished with the
    exit code and error the command ends with, whatever ends it."""
    from vgpuctl import history

    if no_history or not history.enabled():
        yield None
        return
    try:
        kept = _history()
    except VgpuctlError as err:  # the history never stops a run
        common.warn(f"no record of this run kept ({err}); the run goes on")
        yield None
        return
    recorder = history.Recorder(kept, history.new_record(command, run_id, inventory), common.warn)
    try:
        yield recorder
    except typer.Exit as done:
        recorder.finish(done.exit_code)
        raise
    except KeyboardInterrupt:
        recorder.finish(130, "interrupted")
        raise
    except VgpuctlError as err:
        recorder.finish(err.exit_code, str(err))
        raise
    except BaseException as err:
        recorder.finish(1, f"unexpected {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        raise
    recorder.finish(0)


# ------------------------------------------------------------------------------------------ the commands


@app.callback()
def runs_cmd(ctx: typer.Context) -> None:
    """List the runs kept, newest first: id, command, how it ended, user, start, inventory, vCenter, the plan's
    counts. `vgpuctl runs show RUN` shows one."""
    if ctx.invoked_subcommand is not None:
        return
    from vgpuctl.reports.runs import RunsReport, listing

    opts: GlobalOptions = ctx.obj
    history = _history()
    records, problems = history.records()
    common.emit(RunsReport(str(history.folder), [listing(r) for r in records], problems), opts)


HtmlOpt = Annotated[
    Path | None,
    typer.Option("--html", metavar="FILE",
                 help="Write the run as one self-contained HTML page (the plan for a change review, what the "
                 "apply did, the events) to FILE instead of printing its text."),
]


@app.command("show")
def show_cmd(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(metavar="RUN", help="The run's id as `vgpuctl runs` lists it, its run id, or "
                                       "the start of either that only it has.")],
    html: HtmlOpt = None,
) -> None:
    """One run: who ran what with which vgpuctl and inventory, when, how it ended, the plan, what the apply did to
    each host and VM, and its events."""
    opts: GlobalOptions = ctx.obj
    pages.check_html_file(html, opts, {})
    record = _history().find(run)
    if html is not None:
        from vgpuctl.reports.html import run_page

        pages.write_page(html, run_page(record), opts, record)
        return
    common.emit(record, opts)
