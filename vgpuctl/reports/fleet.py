"""The documents of a fleet (an inventory of several vCenters, docs/fleet.md): one report per command with a
section per vCenter, each section the document the command prints for one vCenter, or the one line why that
vCenter's part failed (it could not be read, it refused, its plan has errors).

`plan`, `apply`, `status`, `preflight` and `capacity` print `fleet-plan`, `fleet-apply`, `fleet-status`,
`fleet-preflight` and `fleet-capacity`; `export` prints `fleet-export`, one inventory of every vCenter. Each
lists `failed` (the vCenters whose part failed: the command exits 1) and `out_of_scope` (those `--vcenter` left
out). The text shows each vCenter's section under a `== vCenter NAME (URL) ==` line, then one closing line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, ClassVar

from vgpuctl.lazyclass import dataclass
from vgpuctl.reports.apply import ApplyReport, render_apply_summary
from vgpuctl.reports.base import TERMINAL, Rendered, Report, TextLayout, optional
from vgpuctl.reports.capacity import CapacityReport
from vgpuctl.reports.plan import PlanReport, PlanSummary, plan_counts, plan_report, with_class_plan
from vgpuctl.reports.preflight import PreflightReport
from vgpuctl.reports.status import StatusReport
from vgpuctl.visible import lines_text, visible

if TYPE_CHECKING:
    from vgpuctl.fleetrun import FleetPlanned


@dataclass
class FleetPlanPart:
    """One vCenter's plan; `plan` is None when the vCenter could not be read (`error` says why)."""

    vcenter: str  # its name in the inventory
    url: str
    plan: PlanReport | None
    error: str | None = optional()


@dataclass
class FleetPlanReport(Report):
    """`plan` of a fleet: every vCenter's plan, the summary of them all (the sum of their counts)."""

    kind: ClassVar[str] = "fleet-plan"
    vcenters: list[FleetPlanPart]
    summary: PlanSummary
    failed: list[str]  # vCenters not read, or whose plan has errors: the plan exits 1
    out_of_scope: list[str] = field(default_factory=list)  # vCenters --vcenter left out, untouched

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        shown = [(_header(p.vcenter, p.url), p.plan.render_text(layout) if p.plan is not None else None, p.error)
                 for p in self.vcenters]
        return sections(shown, [*_scope_lines(self.out_of_scope), fleet_plan_line(self)], layout)

    @property
    def is_empty(self) -> bool:
        return all(p.plan is None or p.plan.is_empty for p in self.vcenters)


@dataclass
class FleetApplyPart:
    """One vCenter's apply: `apply` when it applied, else its plan (nothing to change, or errors) or nothing
    (it could not be read), and `error` when its part failed before its plan or on its way."""

    vcenter: str
    url: str
    apply: ApplyReport | None
    plan: PlanReport | None
    error: str | None = optional()


@dataclass
class FleetApplyReport(Report):
    """`apply` of a fleet: each vCenter's apply, side by side; no text of its own (the progress and each
    vCenter's summary show while it runs)."""

    kind: ClassVar[str] = "fleet-apply"
    vcenters: list[FleetApplyPart]
    failed: list[str]  # vCenters whose part failed: apply exits 1
    interrupted: bool
    out_of_scope: list[str] = field(default_factory=list)

    def render_text(self, layout: TextLayout = TERMINAL) -> None:
        return None


@dataclass
class FleetStatusPart:
    vcenter: str
    url: str
    status: StatusReport | None
    error: str | None = optional()


@dataclass
class FleetStatusReport(Report):
    kind: ClassVar[str] = "fleet-status"
    vcenters: list[FleetStatusPart]
    failed: list[str]
    out_of_scope: list[str] = field(default_factory=list)

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        shown = [(_header(p.vcenter, p.url), p.status.render_text(layout) if p.status is not None else None, p.error)
                 for p in self.vcenters]
        return sections(shown, [*_scope_lines(self.out_of_scope), _read_line(self.vcenters, self.failed)], layout)


@dataclass
class FleetPreflightPart:
    vcenter: str
    url: str
    preflight: PreflightReport | None
    error: str | None = optional()


@dataclass
class FleetPreflightReport(Report):
    """`preflight` of a fleet: `ok` when every vCenter was read and passed."""

    kind: ClassVar[str] = "fleet-preflight"
    vcenters: list[FleetPreflightPart]
    ok: bool
    failed: list[str]
    out_of_scope: list[str] = field(default_factory=list)

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        shown = [(_header(p.vcenter, p.url), p.preflight.render_text(layout) if p.preflight is not None else None,
                  p.error) for p in self.vcenters]
        closing = _read_line(self.vcenters, self.failed, "all passed")
        return sections(shown, [*_scope_lines(self.out_of_scope), closing], layout)


@dataclass
class FleetCapacityPart:
    vcenter: str
    url: str
    capacity: CapacityReport | None
    error: str | None = optional()


@dataclass
class FleetCapacityReport(Report):
    kind: ClassVar[str] = "fleet-capacity"
    vcenters: list[FleetCapacityPart]
    failed: list[str]
    out_of_scope: list[str] = field(default_factory=list)

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        shown = [(_header(p.vcenter, p.url), p.capacity.render_text(layout) if p.capacity is not None else None,
                  p.error) for p in self.vcenters]
        return sections(shown, [*_scope_lines(self.out_of_scope), _read_line(self.vcenters, self.failed)], layout)


@dataclass
class FleetExportPart:
    vcenter: str
    url: str
    error: str | None = optional()  # why its entries are missing from the inventory


@dataclass
class FleetExportReport(Report):
    """`export` of a fleet: one inventory of every vCenter read (`vcenters:`, each entry naming its vCenter);
    `file` when it was written to one."""

    kind: ClassVar[str] = "fleet-export"
    file: str | None
    inventory: str
    vcenters: list[FleetExportPart]
    failed: list[str]
    out_of_scope: list[str] = field(default_factory=list)

    def render_text(self, layout: TextLayout = TERMINAL) -> str | None:
        return self.inventory if self.file is None else None


# ------------------------------------------------------------------------------------------ building them


def fleet_plan_report(parts: Sequence[FleetPlanPart], out_of_scope: Sequence[str] = ()) -> FleetPlanReport:
    """The fleet's plan from each vCenter's plan report (None and its error for a vCenter not read)."""
    plans = [p.plan for p in parts if p.plan is not None]
    total = PlanSummary.total(p.summary for p in plans)
    failed = [p.vcenter for p in parts if p.plan is None or p.plan.errors]
    return FleetPlanReport(list(parts), total, failed, list(out_of_scope))


def fleet_plan_section(planned: FleetPlanned) -> dict[str, Any]:
    """A fleet's plan file's plan section: `plan`'s fleet document without round trips, each vCenter's plan as
    its plan section (vgpuctl.reports.plan.plan_section); what `plan --out` saves and `apply PLANFILE` compares
    the fleet's plan made again with."""
    parts = [FleetPlanPart(r.name, r.url, None if r.planned is None else
                           with_class_plan(plan_report(r.planned.plan, None, r.planned.scope), r.planned.classes),
                           None if r.error is None else str(r.error)) for r in planned.parts]
    return dict(json.loads(json.dumps(fleet_plan_report(parts, planned.out_of_scope).to_dict())))


def fleet_apply_report(parts: Sequence[FleetApplyPart], failed: Sequence[str], interrupted: bool,
                       out_of_scope: Sequence[str] = ()) -> FleetApplyReport:
    """`failed`: the vCenters whose run failed (the run's outcome says: vgpuctl.fleetrun.PartRun.failure)."""
    return FleetApplyReport(list(parts), list(failed), interrupted, list(out_of_scope))


def fleet_status_report(parts: Sequence[FleetStatusPart], out_of_scope: Sequence[str] = ()) -> FleetStatusReport:
    return FleetStatusReport(list(parts), [p.vcenter for p in parts if p.status is None], list(out_of_scope))


def fleet_preflight_report(parts: Sequence[FleetPreflightPart],
                           out_of_scope: Sequence[str] = ()) -> FleetPreflightReport:
    failed = [p.vcenter for p in parts if p.preflight is None or not p.preflight.ok]
    return FleetPreflightReport(list(parts), not failed, failed, list(out_of_scope))


def fleet_capacity_report(parts: Sequence[FleetCapacityPart],
                          out_of_scope: Sequence[str] = ()) -> FleetCapacityReport:
    return FleetCapacityReport(list(parts), [p.vcenter for p in parts if p.capacity is None], list(out_of_scope))


def fleet_export_report(file: str | None, inventory: str, parts: Sequence[FleetExportPart],
                        out_of_scope: Sequence[str] = ()) -> FleetExportReport:
    return FleetExportReport(file, inventory, list(parts), [p.vcenter for p in parts if p.error is not None],
                             list(out_of_scope))


# ------------------------------------------------------------------------------------------ text


def _header(name: str, url: str) -> str:
    return f"== vCenter {name} ({url}) =="


def _scope_lines(out_of_scope: Sequence[str]) -> list[str]:
    return [f"out of scope (--vcenter), untouched: vCenters {', '.join(out_of_scope)}"] if out_of_scope else []


def fleet_plan_line(report: FleetPlanReport) -> str:
    """`Fleet: 2 vCenters planned; failed: west. Plan: ...` (the counts of the vCenters planned)."""
    planned = len(report.vcenters) - sum(1 for p in report.vcenters if p.plan is None)
    head = f"Fleet: {planned} of {len(report.vcenters)} vCenters planned"
    if report.failed:
        head += f"; failed, nothing of theirs applies: {', '.join(report.failed)}"
    body = "No changes: every farm matches the inventory." if report.is_empty else plan_counts(report.summary)
    return f"{head}. {body}"


def _read_line(parts: Sequence[Any], failed: Sequence[str], ok: str = "all read") -> str:
    line = f"Fleet: {len(parts)} vCenters"
    return line + (f"; failed: {', '.join(failed)}" if failed else f"; {ok}")


def sections(shown: Sequence[tuple[str, Rendered, str | None]], closing: Sequence[str],
             layout: TextLayout) -> Rendered:
    """Each section's header, then its body or its error line, then the closing lines: plain text in a pipe,
    else rich renderables (names never read as markup)."""
    if layout.plain:
        out: list[str] = []
        for header, body, error in shown:
            out.append(header)
            out += [f"error: {line}" for line in (error or "").splitlines()]
            if isinstance(body, str) and body:
                out.append(body)
            out.append("")
        return "\n".join(out + list(closing))
    from rich.text import Text

    items: list[Any] = []
    for header, body, error in shown:
        items.append(Text(visible(header, False), style="bold"))
        items += [Text(visible(f"error: {line}", False), style="red") for line in (error or "").splitlines()]
        if isinstance(body, str):
            items.append(Text(visible(body)))
        elif isinstance(body, list):
            items += body
        elif body is not None:
            items.append(body)
        items.append(Text(""))
    return items + [Text(visible(line, False)) for line in closing]


def render_fleet_apply_summary(report: FleetApplyReport, full: bool = False) -> str:
    """The closing lines of a fleet's apply: each vCenter's summary under its header, then the fleet's line."""
    lines: list[str] = []
    for part in report.vcenters:
        lines.append(_header(part.vcenter, part.url))
        lines += [f"error: {line}" for line in (part.error or "").splitlines()]
        if part.apply is not None:
            lines.append(render_apply_summary(part.apply, full))
        elif part.plan is not None and not part.plan.errors:
            lines.append("No changes: the farm matches the inventory." if part.plan.is_empty else "not applied")
        elif part.plan is not None:
            lines += [f"error: {e}" for e in part.plan.errors] + ["nothing applied: the plan has errors"]
        lines.append("")
    lines += _scope_lines(report.out_of_scope)
    done = len(report.vcenters) - len(report.failed)
    failed = f"; failed: {', '.join(report.failed)}" if report.failed else ""
    return lines_text([*lines, f"Fleet: {done} of {len(report.vcenters)} vCenters done{failed}."])
