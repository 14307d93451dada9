"""What vCenter's PerformanceManager says about the hosts' GPUs: the `gpu` counters it defines, the intervals it
keeps statistics in, and the samples one read returned. Plain records: vgpuctl.vsphere.perf fills them (one
read of the counters and intervals, then QueryPerf for many hosts per call), vgpuctl.farm.usage turns them into
per-GPU figures and the idle rule, and an exporter can read them as they are. Which interval serves a window
and which counters it holds are decided here, from vCenter's own answers (docs/usage.md: the sources).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field
from enum import StrEnum

from vgpuctl.lazyclass import dataclass

GPU_GROUP = "gpu"  # PerfCounterInfo.groupInfo.key of the GPU counters
REALTIME_S = 20  # hosts sample every counter every 20 s and keep the samples for an hour (raw data feed)
REALTIME_KEEP_S = 3600
REALTIME_NAME = "realtime"


class GpuCounter(StrEnum):
    """The counters of the gpu group vgpuctl reads (PerfCounterInfo.nameInfo.key)."""

    UTILIZATION = "utilization"  # percent of time the GPU was busy
    MEM_USED = "mem.used"  # kiloBytes of GPU memory used
    MEM_USAGE = "mem.usage"  # percent of the GPU's memory used
    TEMPERATURE = "temperature"  # celsius
    POWER_USED = "power.used"  # watt (newer hosts list it; read only where perfCounter does)


class Rollup(StrEnum):
    """PerfSummaryType: how samples roll up into an interval's value."""

    NONE = "none"
    AVERAGE = "average"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    LATEST = "latest"
    SUMMATION = "summation"


class PerfUnit(StrEnum):
    """PerformanceManagerUnit values of the gpu counters."""

    PERCENT = "percent"  # answered in hundredths of a percent
    KILOBYTES = "kiloBytes"
    CELSIUS = "celsius"
    WATT = "watt"


@dataclass(frozen=True)
class CounterInfo:
    """One PerfCounterInfo of the gpu group."""

    key: int
    name: str  # a GpuCounter where vgpuctl knows it
    rollup: str  # a Rollup
    unit: str  # a PerfUnit
    level: int  # the statistics level a historical interval needs to keep it

    @property
    def full_name(self) -> str:
        """As vSphere writes it: gpu.utilization.average."""
        return f"{GPU_GROUP}.{self.name}.{self.rollup}"

    def scaled(self, raw: int) -> float | None:
        """A sample in the counter's unit (percent 0-100); None for vSphere's -1, no data."""
        if raw < 0:
            return None
        return raw / 100 if self.unit == PerfUnit.PERCENT else float(raw)


@dataclass(frozen=True)
class StatsInterval:
    """Where samples come from: the hosts' realtime samples, or one of vCenter's historical intervals
    (PerformanceManager.historicalInterval) with the statistics level it keeps."""

    name: str
    sampling_s: int  # what QueryPerf's intervalId names
    length_s: int  # how far back it keeps samples
    level: int | None  # None: realtime, every counter whatever the level
    enabled: bool = True

    @property
    def realtime(self) -> bool:
        return self.level is None

    def keeps(self, counter: CounterInfo) -> bool:
        return self.level is None or counter.level <= self.level


REALTIME = StatsInterval(REALTIME_NAME, REALTIME_S, REALTIME_KEEP_S, None)


@dataclass(frozen=True)
class PerfCatalog:
    """The gpu counters vCenter lists and its historical intervals (one read per run)."""

    counters: tuple[CounterInfo, ...]
    intervals: tuple[StatsInterval, ...]

    def counter(self, name: str, rollup: str) -> CounterInfo | None:
        return next((c for c in self.counters if c.name == name and c.rollup == rollup), None)


@dataclass(frozen=True)
class UsageWindow:
    """The window a usage read covers: the last `seconds`, from `interval`."""

    seconds: float
    interval: StatsInterval

    @property
    def samples(self) -> int:
        """How many samples of the interval the window holds."""
        return max(1, round(self.seconds / self.interval.sampling_s))


class WindowTooLong(ValueError):
    """No enabled interval of vCenter keeps statistics that far back."""


def choose_window(seconds: float | None, intervals: Iterable[StatsInterval]) -> UsageWindow:
    """The interval a window of `seconds` reads (None: the last hour): the hosts' realtime samples up to an hour,
    else the finest enabled historical interval that keeps the whole window."""
    if seconds is None or seconds <= REALTIME_KEEP_S:
        return UsageWindow(float(seconds or REALTIME_KEEP_S), REALTIME)
    enabled = sorted((i for i in intervals if i.enabled and not i.realtime), key=lambda i: i.sampling_s)
    for interval in enabled:
        if interval.length_s >= seconds:
            return UsageWindow(float(seconds), interval)
    longest = max((i.length_s for i in enabled), default=REALTIME_KEEP_S)
    raise WindowTooLong(f"vCenter keeps statistics for at most {duration_text(longest)}")


# What a read asks for: per counter the rollups, the realtime samples needing only one (a 20 s sample is its own
# average and peak); utilization's maximum rollup gives a historical interval's peaks.
WANTED: dict[str, tuple[str, ...]] = {
    GpuCounter.UTILIZATION: (Rollup.AVERAGE, Rollup.MAXIMUM),
    GpuCounter.MEM_USED: (Rollup.AVERAGE,),
    GpuCounter.MEM_USAGE: (Rollup.AVERAGE,),
    GpuCounter.TEMPERATURE: (Rollup.AVERAGE,),
    GpuCounter.POWER_USED: (Rollup.AVERAGE,),
}


def wanted_counters(catalog: PerfCatalog, window: UsageWindow) -> list[CounterInfo]:
    """The counters a read asks for, among those vCenter lists."""
    out = []
    for name, rollups in WANTED.items():
        for rollup in rollups[:1] if window.interval.realtime else rollups:
            counter = catalog.counter(name, rollup)
            if counter is not None:
                out.append(counter)
    return out


def level_warning(counters: Iterable[CounterInfo], window: UsageWindow) -> str | None:
    """One line when the window's historical interval does not keep some of the counters at its level."""
    missing = [c for c in counters if not window.interval.keeps(c)]
    if not missing:
        return None
    need = max(c.level for c in missing)
    names = ", ".join(sorted({c.full_name for c in missing}))
    return (f"vCenter keeps {names} only at statistics level {need}; its {window.interval.name} interval "
            f"({duration_text(window.interval.sampling_s)} samples) runs at level {window.interval.level}: set "
            f"that interval's statistics level to {need} (vSphere Client: vCenter Server > Configure > Settings > "
            "General > Statistics) to read GPU usage further back than an hour")


@dataclass(frozen=True)
class GpuSeries:
    """One counter's samples for one GPU instance of a host, in the counter's unit; None where vCenter had none."""

    host: str
    instance: str  # as vCenter names the GPU instance
    counter: CounterInfo
    times: tuple[float, ...]  # end of each sample, seconds since the epoch (vCenter's clock)
    values: tuple[float | None, ...]


@dataclass
class UsageRead:
    """What one usage read returned: its window, the series, and what kept some of it from being read."""

    window: UsageWindow
    counters: list[CounterInfo] = field(default_factory=list)
    series: list[GpuSeries] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    refused: str | None = None  # vCenter refused the query: the fault's type and message
    queries: int = 0  # QueryPerf calls made


def duration_text(seconds: float) -> str:
    """90 -> 90s, 1800 -> 30m, 7200 -> 2h, 604800 -> 7d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
