"""`vgpuctl report ...`: documents drawn from what vCenter measures (reports: vgpuctl.reports.usage)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.status import OptionalInventory, observe_farm, read_usage

if TYPE_CHECKING:
    from vgpuctl.model import Observed
    from vgpuctl.records.perf import UsageRead
    from vgpuctl.vsphere.session import Session

app = typer.Typer(help="Reports drawn from what vCenter measures.", no_args_is_help=True)


@app.command("idle")
def idle_cmd(
    ctx: typer.Context,
    since: Annotated[str, typer.Option("--since", metavar="DURATION", help="The window, e.g. 12h, 7d or 2w; "
                                       "beyond an hour vCenter's statistics intervals answer, which keep the GPU "
                                       "counters only at statistics level 4.")] = "7d",
    below: Annotated[str, typer.Option("--below", metavar="PERCENT", help="The utilization threshold, 0 to 100, "
                                       "e.g. 5%.")] = "5%",
    file: OptionalInventory = None,
) -> None:
    """The VMs holding vGPUs on GPUs whose utilization stayed below a threshold over the whole window, with their
    framebuffer. vSphere measures physical GPUs, not vGPUs: a VM is idle when every GPU it holds vGPUs on stayed
    below; a GPU shared by several VMs that did not stay below makes none of them idle.

    Examples:
      vgpuctl report idle --since 7d --below 5%
      vgpuctl report idle --since 30d --below 1% -o json
    """
    from vgpuctl.farm.usage import gpu_usage, judge_vms, parse_percent, parse_since
    from vgpuctl.reports.usage import idle_report

    opts: GlobalOptions = ctx.obj
    seconds, threshold = parse_since(since), parse_percent(below)  # bad input before any connection
    reads: list[UsageRead] = []

    def usage(session: Session, observed: Observed, inventory: Any) -> None:
        reads.append(read_usage(session, observed, seconds, since))

    observed, round_trips = observe_farm(opts, file, also=usage)
    figures = gpu_usage(observed, reads[0])
    judged = judge_vms(observed, figures, threshold)
    common.emit(idle_report(judged, figures, reads[0], threshold, round_trips if opts.verbose else None), opts)
