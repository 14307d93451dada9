"""The pages of `status --html`, `show PLANFILE --html` and `runs show RUN --html`: one self-contained HTML file
each (inline CSS, no script, no external asset; a Content-Security-Policy that forbids loading any), drawn by the
Jinja2 templates in reports/templates/ from the same report dataclasses the text and JSON come from.

The templates get the reports and the text's own helpers (host_state, steps_text, disruption_line, ...), so a page
says what the text says in the same words; what this module adds is layout only: widths in percent of a GPU's
framebuffer or MIG memory slices, NVLink sets as runs of GPUs, lookups by name, a colour per profile. Every value
is escaped (autoescape: names from vCenter and the inventory are data, never markup).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgpuctl import __version__
from vgpuctl.lazyclass import dataclass
from vgpuctl.reports import apply as applytext
from vgpuctl.reports import plan as plantext
from vgpuctl.reports import runs as runtext
from vgpuctl.reports import status as statustext
from vgpuctl.reports import window as windowtext

if TYPE_CHECKING:
    import jinja2

    from vgpuctl.reports.fleet import FleetStatusReport
    from vgpuctl.reports.plan import Disruption, HostDiff, PlanReport, VmDiff
    from vgpuctl.reports.runs import RunPart, RunRecord
    from vgpuctl.reports.status import StatusGpu, StatusHost, StatusReport

TEMPLATES = Path(__file__).parent / "templates"
PALETTE = 8  # colours of vGPU segments (CSS classes c0..c7), one per profile
NO_CLUSTER = "hosts in no cluster"


@cache
def environment() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,  # every template: names from vCenter and the inventory are data
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(version=__version__, percent=percent, colour=colour, heat=heat, plan=plantext, status=statustext,
                       runs=runtext, apply_text=applytext, window_text=windowtext)
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


# ------------------------------------------------------------------------------------------ layout helpers


def percent(part: float, whole: float) -> str:
    """`part` of `whole` as a CSS width (`37.5%`), within 0 and 100."""
    if whole <= 0:
        return "0%"
    return f"{max(0.0, min(100.0, 100.0 * part / whole)):.2f}".rstrip("0").rstrip(".") + "%"


def colour(profile: str) -> str:
    """The CSS class of a profile's colour: the same profile the same colour on every page."""
    return f"c{int(hashlib.sha256(profile.encode()).hexdigest()[:8], 16) % PALETTE}"


HEAT_BANDS = (5.0, 30.0, 70.0)  # average utilization (percent) where a GPU's colour changes: idle, light, busy, hot


def heat(gpu: StatusGpu) -> str:
    """The CSS class of a GPU's colour by its average utilization over the usage window (`status --usage`);
    empty when usage was not read or the GPU has no samples. The lowest band is `report idle`'s default."""
    usage = gpu.usage
    if usage is None or usage.util_avg is None:
        return ""
    return f"heat{sum(usage.util_avg >= band for band in HEAT_BANDS)}"


@dataclass
class NvlinkRun:
    """GPUs of one host side by side: an NVLink set (`group` its number), or one GPU in none (`group` None)."""

    group: int | None
    gpus: list[StatusGpu]


def nvlink_runs(host: StatusHost) -> list[NvlinkRun]:
    """The host's GPUs in index order, those of one NVLink set together where the set first appears."""
    runs: list[NvlinkRun] = []
    by_group: dict[int, NvlinkRun] = {}
    for gpu in host.gpus:
        if gpu.nvlink_group is None:
            runs.append(NvlinkRun(None, [gpu]))
        elif gpu.nvlink_group in by_group:
            by_group[gpu.nvlink_group].gpus.append(gpu)
        else:
            by_group[gpu.nvlink_group] = NvlinkRun(gpu.nvlink_group, [gpu])
            runs.append(by_group[gpu.nvlink_group])
    return runs


def by_cluster(hosts: Iterable[StatusHost]) -> list[tuple[str, list[StatusHost]]]:
    """Hosts per cluster, clusters by name, hosts in no cluster last."""
    groups: dict[str | None, list[StatusHost]] = {}
    for h in hosts:
        groups.setdefault(h.cluster, []).append(h)
    named = sorted((c, hs) for c, hs in groups.items() if c is not None)
    return [(c, hs) for c, hs in named] + ([(NO_CLUSTER, groups[None])] if None in groups else [])


def free_slots(gpu: StatusGpu) -> int:
    """MIG memory slices no vGPU on the GPU takes (0 when a vGPU's slices are not known)."""
    if gpu.mig_slots is None or any(v.mig_slots is None for v in gpu.vms):
        return 0
    return max(gpu.mig_slots - sum(v.mig_slots or 0 for v in gpu.vms), 0)


# ------------------------------------------------------------------------------------------ the pages


def status_page(report: StatusReport) -> str:
    """`vgpuctl status --html`: a GPU map per cluster and host."""
    return render("status.html.j2", title=f"vgpuctl status: {report.datacenter}", report=report,
                  **_status_helpers())


def fleet_status_page(report: FleetStatusReport) -> str:
    """`vgpuctl status --html` of a fleet: each vCenter's section as one vCenter's page shows it, in the
    inventory's order; a vCenter that could not be read shows why."""
    read = [p.status for p in report.vcenters if p.status is not None]
    return render("fleet-status.html.j2", title=f"vgpuctl status: {len(report.vcenters)} vCenters", report=report,
                  hosts=sum(len(s.hosts) for s in read), gpus=sum(len(h.gpus) for s in read for h in s.hosts),
                  **_status_helpers())


def _status_helpers() -> dict[str, Any]:
    return {"by_cluster": by_cluster, "nvlink_runs": nvlink_runs, "free_slots": free_slots, "no_cluster": NO_CLUSTER}


def plan_page(report: PlanReport, facts: list[tuple[str, str]], title: str = "Plan for review",
              record: RunRecord | None = None) -> str:
    """The plan for a change review: facts about where it comes from, the window's order (a driver upgrade's
    guest drivers first, the host waves, the guest drivers after them, then the VMs), every disruption, each
    VM's before and after; with a run's `record`, also what the apply did and the run's events."""
    made = record is None or record.plan is not None  # a run that ended before its plan shows none
    return render("plan.html.j2", title=title, facts=facts, report=report, record=record, made=made,
                  **plan_layout(report))


def plan_layout(report: PlanReport) -> dict[str, Any]:
    """Lookups by name for the page: the host changes and disruptions of each host, the disruptions of each VM,
    the VM changes in the order apply starts them (plan order when the report has none)."""
    changes: dict[str, list[HostDiff]] = {}
    for h in report.host_changes:
        changes.setdefault(h.host, []).append(h)
    host_steps: dict[str, list[Disruption]] = {}
    vm_steps: dict[str, list[Disruption]] = {}
    for d in report.disruptions:
        if d.vm is None and d.host is not None:
            host_steps.setdefault(d.host, []).append(d)
        elif d.vm is not None:
            vm_steps.setdefault(d.vm, []).append(d)
    by_name: dict[str, VmDiff] = {v.vm: v for v in report.vm_changes}
    order = report.order
    vms = [by_name[n] for n in order.vms if n in by_name] if order is not None else list(report.vm_changes)
    vms += [v for v in report.vm_changes if v not in vms]
    waves = [list(w) for w in order.host_waves] if order is not None and order.host_waves else (
        [[h] for h in changes])
    window = report.window if report.window is not None and not report.errors else None  # as the text shows it
    return {"host_changes": changes, "host_disruptions": host_steps, "vm_disruptions": vm_steps, "vms": vms,
            "waves": waves, "window": window}


def _part_fact(part: RunPart) -> str:
    """A fleet run's part on its run page: its URL, its plan's counts, its error."""
    said = [part.url, *(plantext.summary_lines(part.plan) if part.plan is not None else [])]
    return " ".join([*said, f"error: {part.error}"] if part.error else said)


def run_page(record: RunRecord) -> str:
    """`vgpuctl runs show RUN --html`: the plan page with the run's facts, outcome and events."""
    facts = [("run", record.id), ("command", record.command), ("state", str(record.state)),
             ("exit code", "-" if record.exit_code is None else str(record.exit_code)),
             ("user", f"{record.user} on {record.machine}"), ("vgpuctl", record.version),
             ("time", runtext.when(record)), ("inventory", record.inventory or "-"),
             ("inventory sha256", record.inventory_sha256 or "-"), ("vCenter", record.vcenter or "-")]
    if record.error:
        facts.append(("error", record.error))
    facts += [(f"vCenter {p.vcenter}", _part_fact(p)) for p in record.vcenters or []]
    report = record.plan if record.plan is not None else plantext.PlanReport(
        [], [], [], [], [], plantext.PlanSummary(0, 0, 0, 0, 0, 0, 0, 0, 0))
    return plan_page(report, facts, title=f"vgpuctl {record.command} run {record.id}", record=record)
