"""GPU usage in the documents: the figures `status --usage` adds per GPU, and `report idle`'s document, the VMs
that hold vGPUs on GPUs that stayed below a threshold (vgpuctl.farm.usage: the idle rule)."""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar

from vgpuctl.farm.usage import GpuUsage, UsageFigures, VmJudgement
from vgpuctl.lazyclass import dataclass
from vgpuctl.records.perf import UsageRead, UsageWindow, duration_text
from vgpuctl.reports.base import TERMINAL, Report, TextLayout, VgpuCount, optional, vgpu_counts
from vgpuctl.visible import lines_text


@dataclass
class UsageRow:
    """One GPU over the window: utilization in percent (average, peak and the rollup the peak comes from),
    memory used in GB, memory usage in percent, highest temperature (celsius), average power (watt)."""

    samples: int
    covered: bool
    util_avg: float | None
    util_max: float | None
    peak_from: str
    mem_used_gb: float | None
    mem_usage_avg: float | None = optional()
    temperature_max: float | None = optional()
    power_avg: float | None = optional()


@dataclass
class WindowRow:
    """The window figures cover: its length, the interval the samples come from and their period."""

    seconds: float
    interval: str  # realtime, or the historical interval's name (Past Day, Past Week, ...)
    sampling_s: int

    def describe(self) -> str:
        return (f"the last {duration_text(self.seconds)} ({self.interval}, "
                f"{duration_text(self.sampling_s)} samples)")


def window_row(window: UsageWindow) -> WindowRow:
    return WindowRow(window.seconds, window.interval.name, window.interval.sampling_s)


def usage_row(u: GpuUsage) -> UsageRow:
    return UsageRow(u.samples, u.covered, _r(u.util_avg), _r(u.util_max), u.peak_from, _r(u.mem_used_gb),
                    _r(u.mem_usage_avg), _r(u.temperature_max), _r(u.power_avg))


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def read_warnings(read: UsageRead, figures: UsageFigures | None = None) -> list[str]:
    """What kept usage from being read, one line each: the refused query, the counters' levels, unmatched GPU
    instances."""
    out = list(read.warnings)
    if read.refused:
        out.append(f"GPU usage not read: {read.refused}")
    for host, instances in sorted((figures.unmatched if figures else {}).items()):
        out.append(f"host {host}: GPU counter instances {', '.join(instances)} name no GPU of the host; their "
                   "usage is left out")
    return out


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def usage_cell(u: UsageRow | None) -> str:
    """avg/max % and memory used, for tables and plain lines."""
    if u is None:
        return "-"
    partial = "" if u.covered else " (partial)"
    return f"{pct(u.util_avg)}/{pct(u.util_max)}% {pct(u.mem_used_gb)} GB{partial}"


# ------------------------------------------------------------------------------------------ report idle


@dataclass
class IdleGpu:
    """A GPU an idle VM holds vGPUs on: its utilization over the window, and the other VMs on it."""

    host: str
    gpu: str
    util_avg: float | None
    util_max: float | None
    peak_from: str
    shared_with: list[str]


@dataclass
class IdleVm:
    vm: str
    host: str
    cluster: str | None
    vgpus: list[VgpuCount]
    fb_gb: float
    gpus: list[IdleGpu]


@dataclass
class UnjudgedVm:
    """A VM holding vGPUs whose GPUs' usage does not cover the window: not called idle, and why."""

    vm: str
    host: str
    why: str


@dataclass
class IdleReport(Report):
    """`report idle`: the VMs holding vGPUs on GPUs whose utilization stayed below `below` percent over the window."""

    kind: ClassVar[str] = "idle"
    window: WindowRow
    below: float  # percent
    idle: list[IdleVm]
    idle_fb_gb: float
    judged: int  # VMs holding vGPUs whose GPUs' usage covers the window
    not_judged: list[UnjudgedVm] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    round_trips: int | None = optional()

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        lines = [f"VMs holding vGPUs on GPUs below {self.below:g}% over {self.window.describe()}: "
                 f"{len(self.idle)} of {self.judged} judged, {self.idle_fb_gb:g} GB of framebuffer"]
        for v in self.idle:
            vgpus = ", ".join(f"{c.count} x {c.profile}" if c.count > 1 else c.profile for c in v.vgpus) or "-"
            lines.append(f"  {v.vm}  host {v.host}  vgpus {vgpus}  fb GB {v.fb_gb:g}")
            for g in v.gpus:
                shared = f"  shared with {', '.join(g.shared_with)}" if g.shared_with else ""
                lines.append(f"    gpu {g.gpu}  utilization avg {pct(g.util_avg)}%  peak {pct(g.util_max)}% "
                             f"({g.peak_from}){shared}")
        lines += [f"not judged: {u.vm} on {u.host}: {u.why}" for u in self.not_judged]
        lines += [f"warning: {w}" for w in self.warnings]
        return lines_text(lines)


def idle_report(judgements: list[VmJudgement], figures: UsageFigures, read: UsageRead, below: float,
                round_trips: int | None = None) -> IdleReport:
    idle = [IdleVm(j.vm, j.host, j.cluster, vgpu_counts(j.profiles), j.fb_gb,
                   [IdleGpu(g.host, g.gpu, _r(g.usage.util_avg), _r(g.usage.util_max), g.usage.peak_from,
                            list(g.shared_with)) for g in j.gpus if g.usage is not None])
            for j in judgements if j.idle]
    unjudged = [UnjudgedVm(j.vm, j.host, j.why) for j in judgements if j.why is not None]
    return IdleReport(window_row(read.window), below, idle, sum(v.fb_gb for v in idle),
                      sum(1 for j in judgements if j.judged), unjudged, read_warnings(read, figures), round_trips)
