"""GPU usage over a window, from the samples vCenter returned (vgpuctl.records.perf), and the idle rule.

What vSphere measures: the `gpu` counters belong to a host's physical GPUs (one instance per GPU); no counter
measures a vGPU or a VM's share of a GPU (docs/usage.md). So the figures here are per physical GPU, and a VM is
judged by the GPUs it holds vGPUs on:

- A GPU's window is covered when its utilization samples with data span the whole window but for at most two
  sampling periods (the sample being collected and a rollup in progress): samples x period >= window - 2 periods.
- A GPU stayed below a threshold when its window is covered and its peak utilization, the largest sample of the
  window, is below the threshold (a historical interval's peak comes from the `maximum` rollup where vCenter keeps
  it, else from the averages, which hide shorter peaks: the figures say which).
- A VM is idle when every GPU that holds one of its vGPUs stayed below the threshold. A time-sliced or MIG GPU
  shared by several VMs is measured as one: when it stayed below, every VM on it is idle there; when it did not,
  vSphere cannot tell which of them used it, so none of them is called idle on its account.
- A VM some of whose GPUs have no covered window (no samples, a GPU instance vgpuctl could not match, a counter
  vCenter does not keep at its statistics level) is not judged: it is listed apart, with the reason.
Only VMs that hold vGPUs now are judged: vSphere places vGPUs at power-on, a powered-off VM holds none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import field

from vgpuctl.domain import ConnectionState, PowerState
from vgpuctl.errors import UsageError
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed, ObservedHost
from vgpuctl.profiles import try_parse
from vgpuctl.records.perf import GpuCounter, GpuSeries, Rollup, UsageRead, UsageWindow

KB_PER_GB = 1024 * 1024
MISSED_PERIODS = 2  # sampling periods a covered window may lack: the sample in progress and a pending rollup

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PERCENT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*%?\s*")


def parse_since(text: str, option: str = "--since") -> float:
    """Seconds from `90s`, `30m`, `12h`, `7d`, `2w` (a bare number is seconds); more than 0."""
    m = _DURATION.fullmatch(text)
    if m is None or float(m.group(1)) <= 0:
        raise UsageError(f"{option} {text!r}: expected a duration such as 30m, 12h or 7d")
    return float(m.group(1)) * _UNIT_S[m.group(2) or "s"]


def parse_percent(text: str, option: str = "--below") -> float:
    """A percentage from `5%` or `5`, 0 to 100."""
    m = _PERCENT.fullmatch(text)
    if m is None or not 0 <= float(m.group(1)) <= 100:
        raise UsageError(f"{option} {text!r}: expected a percentage from 0 to 100, such as 5%")
    return float(m.group(1))


# ------------------------------------------------------------------------------------------ per GPU


@dataclass(frozen=True)
class GpuUsage:
    """One physical GPU over the window: utilization (percent), memory used (GB), temperature, power."""

    host: str
    gpu: str  # PCI id
    samples: int  # utilization samples with data
    covered: bool  # the samples span the window (module docstring)
    util_avg: float | None
    util_max: float | None
    peak_from: str  # the rollup the peak comes from: maximum, or average where vCenter keeps no maximum
    mem_used_gb: float | None  # average
    mem_used_max_gb: float | None
    mem_usage_avg: float | None  # percent of the GPU's memory
    temperature_max: float | None  # celsius
    power_avg: float | None  # watt

    def below(self, threshold: float) -> bool:
        """Stayed below the threshold over the whole window."""
        return self.covered and self.util_max is not None and self.util_max < threshold


@dataclass
class UsageFigures:
    """Per GPU usage of a read, keyed by (host, PCI id), and the GPU instances no GPU of the host matched."""

    window: UsageWindow
    gpus: dict[tuple[str, str], GpuUsage] = field(default_factory=dict)
    unmatched: dict[str, list[str]] = field(default_factory=dict)  # host -> instances


def pci_key(text: str) -> tuple[int, int, int, int] | None:
    """A PCI address (domain:bus:slot.function, any zero padding, hex) as numbers; None when it is none."""
    m = re.fullmatch(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,4}):([0-9a-fA-F]{1,2})\.([0-7])", text.strip())
    if m is None:
        return None
    return int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4))


def match_instance(instance: str, host: ObservedHost) -> str | None:
    """The PCI id of the host's GPU a counter instance names (the instance is read as a PCI address), else None:
    an instance that is no PCI address is not guessed at."""
    key = pci_key(instance)
    if key is None:
        return None
    return next((g.pci_id for g in host.gpus if pci_key(g.pci_id) == key), None)


def hosts_to_read(observed: Observed) -> dict[str, str]:
    """The hosts a usage read asks about (name -> moid, what vsphere.perf.read_gpu_usage takes): the connected
    hosts with GPUs; a disconnected host answers no counter."""
    return {name: h.moid for name, h in sorted(observed.hosts.items())
            if h.gpus and h.connection_state == ConnectionState.CONNECTED}


def gpu_usage(observed: Observed, read: UsageRead) -> UsageFigures:
    """Each GPU's figures over the read's window, keyed by (host, PCI id); series whose GPU instance names no GPU
    of its host are left out and listed in `unmatched`."""
    grouped: dict[tuple[str, str], list[GpuSeries]] = {}
    figures = UsageFigures(read.window)
    for s in read.series:
        observed_host = observed.hosts.get(s.host)
        pci = match_instance(s.instance, observed_host) if observed_host is not None else None
        if pci is None:
            unmatched = figures.unmatched.setdefault(s.host, [])
            if s.instance not in unmatched:
                unmatched.append(s.instance)
            continue
        grouped.setdefault((s.host, pci), []).append(s)
    for (host, pci), series in grouped.items():
        figures.gpus[host, pci] = _figures(host, pci, series, read.window)
    return figures


def _by_counter(series: Iterable[GpuSeries]) -> dict[tuple[str, str], list[float]]:
    """(counter name, rollup) -> the samples with data."""
    out: dict[tuple[str, str], list[float]] = {}
    for s in series:
        out.setdefault((s.counter.name, s.counter.rollup), []).extend(v for v in s.values if v is not None)
    return out


def _figures(host: str, pci: str, series: list[GpuSeries], window: UsageWindow) -> GpuUsage:
    values = _by_counter(series)

    def of(name: str, rollup: str = Rollup.AVERAGE) -> list[float]:
        return values.get((name, rollup), [])

    util, peaks, mem = of(GpuCounter.UTILIZATION), of(GpuCounter.UTILIZATION, Rollup.MAXIMUM), of(GpuCounter.MEM_USED)
    period = window.interval.sampling_s
    covered = len(util) * period >= window.seconds - MISSED_PERIODS * period
    return GpuUsage(
        host=host, gpu=pci, samples=len(util), covered=bool(util) and covered,
        util_avg=_mean(util), util_max=max(peaks or util, default=None),
        peak_from=Rollup.MAXIMUM if peaks else Rollup.AVERAGE,
        mem_used_gb=_scaled(_mean(mem), KB_PER_GB), mem_used_max_gb=_scaled(max(mem, default=None), KB_PER_GB),
        mem_usage_avg=_mean(of(GpuCounter.MEM_USAGE)), temperature_max=max(of(GpuCounter.TEMPERATURE), default=None),
        power_avg=_mean(of(GpuCounter.POWER_USED)),
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _scaled(value: float | None, per: float) -> float | None:
    return None if value is None else value / per


# ------------------------------------------------------------------------------------------ the idle rule


@dataclass(frozen=True)
class VmGpu:
    """A GPU a VM holds vGPUs on, with its figures (None: not read) and the other VMs on it."""

    host: str
    gpu: str
    usage: GpuUsage | None
    shared_with: tuple[str, ...]


@dataclass(frozen=True)
class VmJudgement:
    """One VM that holds vGPUs: idle, busy, or not judged (`why`)."""

    vm: str
    host: str
    cluster: str | None
    profiles: tuple[str, ...]
    fb_gb: float  # framebuffer of its vGPUs
    gpus: tuple[VmGpu, ...]
    idle: bool
    why: str | None = None  # not judged: why

    @property
    def judged(self) -> bool:
        return self.why is None


def judge_vms(observed: Observed, figures: UsageFigures, threshold: float) -> list[VmJudgement]:
    """Every VM that holds vGPUs on a GPU, judged by the idle rule (module docstring), by name."""
    out = []
    for vm_name, held in sorted(_held_gpus(observed).items()):
        host = observed.hosts[held[0][0]]
        vm = observed.vms.get(vm_name)
        profiles = tuple(d.profile for d in vm.vgpus) if vm is not None else ()
        gpus = tuple(VmGpu(h, pci, figures.gpus.get((h, pci)), tuple(sorted(set(others) - {vm_name})))
                     for h, pci, others in held)
        why = _unjudged(gpus, figures)
        idle = why is None and all(g.usage is not None and g.usage.below(threshold) for g in gpus)
        out.append(VmJudgement(vm_name, host.name, host.cluster, profiles, _fb_gb(profiles, host), gpus, idle, why))
    return out


def _held_gpus(observed: Observed) -> dict[str, list[tuple[str, str, list[str]]]]:
    """VM name -> (host, PCI id, the VMs on that GPU) for each GPU graphicsInfo lists it on; a VM the VMs' read
    shows powered off holds nothing any more (observe reads hosts and VMs apart)."""
    stopped = {name for name, vm in observed.vms.items() if vm.power_state == PowerState.OFF}
    held: dict[str, list[tuple[str, str, list[str]]]] = {}
    for name in sorted(observed.hosts):
        for g in sorted(observed.hosts[name].gpus, key=lambda g: g.pci_id):
            on_it = [vm for vm in dict.fromkeys(g.vms) if vm not in stopped]
            for vm in on_it:
                held.setdefault(vm, []).append((name, g.pci_id, on_it))
    return held


def _unjudged(gpus: Iterable[VmGpu], figures: UsageFigures) -> str | None:
    for g in gpus:
        if g.usage is None:
            unmatched = figures.unmatched.get(g.host)
            return (f"no GPU usage read for GPU {g.gpu}" + (f" (vCenter named GPU instances vgpuctl could not "
                    f"match: {', '.join(unmatched)})" if unmatched else " (see the warnings)"))
        if not g.usage.covered:
            return f"GPU {g.gpu}: samples cover only part of the window ({g.usage.samples} samples)"
    return None


def _fb_gb(profiles: Iterable[str], host: ObservedHost) -> float:
    total = 0.0
    for name in profiles:
        info = host.profiles.get(name)
        parsed = try_parse(name)
        total += info.fb_gb if info is not None else (parsed.fb_gb if parsed is not None else 0.0)
    return total

