"""The `experiment` documents: validate, run, restore, and the report of a results directory."""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from vgpuctl.experiment.report import NCCL, P2P
from vgpuctl.lazyclass import dataclass
from vgpuctl.reports.base import TERMINAL, Report, TextLayout
from vgpuctl.visible import lines_text

if TYPE_CHECKING:
    from vgpuctl.experiment import report as experiment
    from vgpuctl.experiment.schema import MergedVariant
    from vgpuctl.experiment.store import RunSummary
    from vgpuctl.inventory import Inventory


@dataclass
class ExperimentValidateReport(Report):
    """`experiment validate`: the file and its variants, each merged onto the base inventory and checked."""

    kind: ClassVar[str] = "experiment-validate"
    file: str
    valid: bool
    variants: list[str]

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        return f"{self.file}: valid ({len(self.variants)} variants: {', '.join(self.variants)})"


def experiment_validate_report(file: Path, checked: list[tuple[MergedVariant, Inventory]]) -> ExperimentValidateReport:
    return ExperimentValidateReport(str(file), True, [merged.name for merged, _ in checked])


@dataclass
class VariantRuns:
    ran: int  # repetitions run now
    skipped: int  # recorded as ok by an earlier run
    failed: int


@dataclass
class ExperimentRunReport(Report):
    """`experiment run`: per variant the repetitions run, skipped and failed; whether the base is back."""

    kind: ClassVar[str] = "experiment-run"
    variants: dict[str, VariantRuns]
    restored: bool
    results: str  # the results directory

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        lines = [f"{name}: {v.ran} run, {v.skipped} already done, {v.failed} failed"
                 for name, v in self.variants.items()]
        lines.append("base inventory restored" if self.restored else "last variant left applied (--keep-last)")
        return lines_text(lines)

    @property
    def failed(self) -> int:
        return sum(v.failed for v in self.variants.values())


def experiment_run_report(summary: RunSummary) -> ExperimentRunReport:
    variants = {name: VariantRuns(v["ran"], v["skipped"], v["failed"]) for name, v in summary.variants.items()}
    return ExperimentRunReport(variants, summary.restored, summary.results)


@dataclass
class ExperimentRestoreReport(Report):
    """`experiment restore`: the base inventory applied again."""

    kind: ClassVar[str] = "experiment-restore"
    restored: bool
    results: str

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        return "base inventory restored" if self.restored else "base inventory not restored"


# ------------------------------------------------------------------------------------------ the report


@dataclass
class Spread:
    """The median of a number over repetitions and VMs, its range and how many samples."""

    median: float
    low: float
    high: float
    n: int


@dataclass
class NcclCell:
    busbw_gbs: Spread | None
    time_us: Spread | None


@dataclass
class NcclPoint:
    """One message size of an nccl-tests table: each variant's numbers and its ratio to the first variant."""

    size_bytes: int
    variants: dict[str, NcclCell]
    ratio: dict[str, float | None]


@dataclass
class P2pPoint:
    """One GPU pair of a p2pBandwidthLatencyTest table: per variant bidirectional_gbs, unidirectional_gbs and
    latency_us (those measured), and the bidirectional ratio to the first variant."""

    pair: str
    variants: dict[str, dict[str, Spread | None]]
    ratio: dict[str, float | None]


@dataclass
class CommandCount:
    """A command workload: how many runs of the variant succeeded and failed."""

    variant: str
    ok: int
    failed: int


@dataclass
class ResultTable:
    key: str
    label: str
    kind: str  # nccl-tests | p2pBandwidthLatencyTest | command
    variants: list[str]
    header: list[str]
    rows: list[list[str]]  # as the Markdown report shows them
    data: list[NcclPoint | P2pPoint | CommandCount]  # the same numbers, unformatted
    plot: str | None  # the PNG, relative to the results directory


Expectation = str | bool | None | dict[str, list[str]] | dict[str, bool] | dict[str, str]


@dataclass
class VariantResult:
    name: str
    description: str | None
    workload: str
    repetitions_ok: int
    repetitions_failed: int
    expect: dict[str, Expectation]  # nvlink, profiles, mig and rdma as the merged inventory asks them
    facts: list[str]  # one line per fact, for the reader


@dataclass
class FlaggedRun:
    variant: str
    repetition: int
    kind: str  # a contradiction between facts and variant, or workload-failed
    message: str


@dataclass
class ExperimentReport(Report):
    """`experiment report` (also report.json): per workload a table of each variant's numbers, the facts
    beside them, and the runs left out of the numbers (failed, or contradicting their variant)."""

    kind: ClassVar[str] = "experiment-report"
    title: str
    results_dir: str
    applied: str | None  # the configuration last wholly applied (base: the base inventory)
    applied_note: str
    partial: str | None  # the one an apply stopped part-way into (the farm is between the two); None: none
    variants: list[VariantResult] = field(default_factory=list)
    tables: list[ResultTable] = field(default_factory=list)
    flags: list[FlaggedRun] = field(default_factory=list)

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        """Where the Markdown report is, and how many runs were flagged."""
        flagged = f" ({len(self.flags)} flagged run(s))" if self.flags else ""
        return f"{Path(self.results_dir) / 'report.md'}{flagged}"


def experiment_report(built: experiment.Report) -> ExperimentReport:
    return ExperimentReport(
        title=built.title,
        results_dir=built.results_dir,
        applied=built.applied,
        applied_note=built.applied_note,
        partial=built.partial,
        variants=[VariantResult(v.name, v.description, v.workload, v.repetitions_ok, v.repetitions_failed,
                                dict(v.expect), list(v.facts)) for v in built.variants],
        tables=[_table(t) for t in built.tables],
        flags=[FlaggedRun(f.variant, f.repetition, f.kind, f.message) for f in built.flags],
    )


def _table(t: experiment.Table) -> ResultTable:
    points: list[NcclPoint | P2pPoint | CommandCount]
    if t.kind == NCCL:
        points = [_nccl_point(e) for e in t.data]
    elif t.kind == P2P:
        points = [_p2p_point(e) for e in t.data]
    else:
        points = [CommandCount(e["variant"], e["ok"], e["failed"]) for e in t.data]
    return ResultTable(t.key, t.label, t.kind, list(t.variants), list(t.header), [list(r) for r in t.rows], points,
                       t.plot)


def _spread(data: dict[str, Any] | None) -> Spread | None:
    return None if data is None else Spread(data["median"], data["low"], data["high"], data["n"])


def _nccl_point(e: dict[str, Any]) -> NcclPoint:
    cells = {name: NcclCell(_spread(c["busbw_gbs"]), _spread(c["time_us"])) for name, c in e["variants"].items()}
    return NcclPoint(e["size_bytes"], cells, dict(e["ratio"]))


def _p2p_point(e: dict[str, Any]) -> P2pPoint:
    cells = {name: {k: _spread(v) for k, v in c.items()} for name, c in e["variants"].items()}
    return P2pPoint(e["pair"], cells, dict(e["ratio"]))
