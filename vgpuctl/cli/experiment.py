"""`vgpuctl experiment validate/run/restore/report`: variants of an inventory, benchmarked, compared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.domain import DEFAULT_PARALLEL
from vgpuctl.errors import UsageError, VgpuctlError
from vgpuctl.outpaths import inside, refuse_inside

if TYPE_CHECKING:
    from vgpuctl.cli.plan import CliHooks
    from vgpuctl.experiment.runner import VsphereFarm
    from vgpuctl.experiment.schema import Experiment
    from vgpuctl.experiment.store import ResultsDir
    from vgpuctl.inventory import Inventory
    from vgpuctl.pipeline import RunOptions, RunOutcome

app = typer.Typer(
    help="Compare GPU configurations: apply each variant of an inventory, run a benchmark in the guests, "
    "report the numbers beside the facts that explain them.",
    no_args_is_help=True,
)

ExperimentFile = Annotated[Path, typer.Argument(help="Experiment file (apiVersion vgpuctl/v1, kind Experiment).",
                                                dir_okay=False)]
ResultsOption = Annotated[
    Path | None,
    typer.Option("--results", "-r", help="Results directory (default: results/TITLE beside the experiment file).",
                 file_okay=False),
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation before each apply.")]


def register(app_: typer.Typer) -> None:
    app_.add_typer(app, name="experiment")


def default_results(exp: Experiment) -> Path:
    return inside(Path(exp.source_path).resolve().parent / "results", exp.title)


def _results(exp: Experiment, results: Path | None) -> ResultsDir:
    """The results folder; refused when it holds the experiment file or its base inventory (vgpuctl writes its
    records there, and never over a file it reads)."""
    from vgpuctl.experiment.store import ResultsDir

    folder = results or default_results(exp)
    refuse_inside(folder, "--results" if results is not None else "the results folder",
                  {"the experiment file": Path(exp.source_path), "its inventory": exp.base_inventory_path})
    return ResultsDir(folder)


@app.command("validate")
def validate_cmd(ctx: typer.Context, file: ExperimentFile) -> None:
    """Check the experiment file and every variant merged onto the base inventory; needs no vCenter."""
    from vgpuctl.experiment.schema import checked_variants, load_experiment
    from vgpuctl.reports.experiment import experiment_validate_report

    opts: GlobalOptions = ctx.obj
    exp = load_experiment(file)
    common.emit(experiment_validate_report(file, checked_variants(exp)), opts)


def vsphere_farm(
    opts: GlobalOptions,
    *,
    yes: bool,
    parallel: int = DEFAULT_PARALLEL,
    ip_timeout_s: float = 600,
    ip_poll_s: float = 5.0,
    trust_on_first_use: bool = False,
    state: Path | None = None,
) -> VsphereFarm:
    """The experiment's farm with `apply`'s behaviour: the plan shown, confirmation unless `yes`, live progress
    and the summary."""
    from vgpuctl import pipeline
    from vgpuctl.cli.plan import CliHooks, run_apply
    from vgpuctl.experiment.runner import VsphereFarm

    def options(inventory: Inventory) -> RunOptions:
        return common.run_options(opts, inventory, parallel=parallel, trust_on_first_use=trust_on_first_use)

    return VsphereFarm(
        settings_for=lambda inventory: common.connection_settings(opts, inventory),
        options_for=options,
        apply_run=lambda inventory: apply_or_refuse(
            lambda hooks: run_apply(opts, inventory, options(inventory), pipeline.RunRequest(), hooks=hooks),
            CliHooks(opts, yes=yes)),
        warn=common.warn,
        ip_timeout_s=ip_timeout_s,
        ip_poll_s=ip_poll_s,
        state=state,
    )


def apply_or_refuse(run: Callable[[CliHooks], RunOutcome], hooks: CliHooks) -> RunOutcome:
    """`run` with `hooks`; an error raised before the apply itself began (the plan's errors, no confirmation, a
    cancelled prompt) changed nothing, and is raised as NotApplied around it, for the experiment's state."""
    from vgpuctl.experiment.runner import NotApplied

    try:
        return run(hooks)
    except VgpuctlError as err:
        if hooks.began:
            raise
        raise NotApplied(err) from err


@app.command("run")
def run_cmd(
    ctx: typer.Context,
    file: ExperimentFile,
    yes: Yes = False,
    keep_last: Annotated[bool, typer.Option("--keep-last", help="Leave the last variant applied.")] = False,
    results: ResultsOption = None,
    parallel: Annotated[
        int, typer.Option("--parallel", "-p", min=1, max=64, help="VMs changed at once.")
    ] = DEFAULT_PARALLEL,
    ip_timeout: Annotated[int, typer.Option("--ip-timeout", min=0, help="Seconds to wait for guest IPs.")] = 600,
    ip_poll: Annotated[float, typer.Option("--ip-poll", min=0.1, help="Seconds between address reads.")] = 5.0,
) -> None:
    """Apply each variant (plan shown, confirmation unless --yes), run the workload, record it; restore the base.

    Repetitions already recorded as ok are skipped: run again to continue an interrupted experiment.
    The report (report.md, report.json, plots/) is written into the results directory at the end.

    Examples:
      vgpuctl experiment run nvlink.yaml --yes
      vgpuctl experiment report results/nvlink
    """
    from vgpuctl import pipeline
    from vgpuctl.experiment.output import write_report
    from vgpuctl.experiment.runner import run_experiment
    from vgpuctl.experiment.schema import checked_variants, load_experiment
    from vgpuctl.reports.experiment import experiment_run_report

    opts: GlobalOptions = ctx.obj
    exp = load_experiment(file)
    checked = checked_variants(exp)
    base = pipeline.load(exp.base_inventory_path)
    store = _results(exp, results)
    farm = vsphere_farm(opts, yes=yes, parallel=parallel, ip_timeout_s=ip_timeout, ip_poll_s=ip_poll)
    try:
        summary = run_experiment(exp, checked, base, store, farm, keep_last=keep_last, events=_progress)
    finally:
        if (store.root / "experiment.json").is_file():
            written, _report = write_report(store)
            common.info(f"report: {written}")
    report = experiment_run_report(summary)
    common.emit(report, opts)
    failed = report.failed
    if failed:
        raise VgpuctlError(f"{failed} repetition(s) failed (recorded with their output; run again to retry them)")


@app.command("restore")
def restore_cmd(ctx: typer.Context, file: ExperimentFile, yes: Yes = False, results: ResultsOption = None) -> None:
    """Apply the experiment's base inventory again (after an interrupted run or --keep-last)."""
    from vgpuctl import pipeline
    from vgpuctl.experiment.runner import restore
    from vgpuctl.experiment.schema import load_experiment
    from vgpuctl.reports.experiment import ExperimentRestoreReport

    opts: GlobalOptions = ctx.obj
    exp = load_experiment(file)
    base = pipeline.load(exp.base_inventory_path)
    store = _results(exp, results)
    restore(base, store, vsphere_farm(opts, yes=yes), _progress)
    common.emit(ExperimentRestoreReport(restored=True, results=str(store.root)), opts)


@app.command("report")
def report_cmd(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(help="Results directory of an experiment run.", file_okay=False)],
) -> None:
    """Write report.md, report.json and plots/*.png into the results directory (Markdown path printed)."""
    from vgpuctl.experiment.output import write_report
    from vgpuctl.experiment.store import ResultsDir

    opts: GlobalOptions = ctx.obj
    if not (directory / "experiment.json").is_file():
        raise UsageError(f"{directory}: not an experiment results directory (no experiment.json)")
    _path, report = write_report(ResultsDir(directory))
    common.emit(report, opts)


def _progress(kind: str, data: dict[str, Any]) -> None:
    variant = data.get("variant")
    if kind == "recorded":
        detail = f": {'; '.join(data['errors'])}" if data.get("errors") else ""
        common.info(f"experiment: {variant} repetition {data['repetition']}: {data['status']}{detail}")
    elif kind == "repetition":
        common.info(f"experiment: {variant} repetition {data['repetition']}: running")
    elif kind == "plan-warning":
        for error in data["errors"]:
            common.warn(f"variant {variant!r} does not plan on the farm as it is now (it runs on the farm variant "
                        f"{data['after']!r} leaves, and is checked again then): {error}")
    else:
        common.info(f"experiment: {variant}: {kind}")
