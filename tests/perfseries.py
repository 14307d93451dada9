"""GPU usage reads for the unit tests, from compact descriptions: the gpu counters vCenter lists (keys, units and
levels as govmomi's capture of a vCenter's perfCounter has them), series of samples written `N x V`, and a farm
whose GPUs list the VMs on them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from vgpuctl.model import Observed, ObservedGpu, ObservedHost, ObservedVgpu, ObservedVm
from vgpuctl.records.perf import REALTIME, CounterInfo, GpuSeries, StatsInterval, UsageRead, UsageWindow

COUNTERS = {
    "utilization.average": CounterInfo(559, "utilization", "average", "percent", 4),
    "utilization.maximum": CounterInfo(560, "utilization", "maximum", "percent", 4),
    "mem.used.average": CounterInfo(563, "mem.used", "average", "kiloBytes", 4),
    "mem.usage.average": CounterInfo(567, "mem.usage", "average", "percent", 4),
    "temperature.average": CounterInfo(570, "temperature", "average", "celsius", 4),
    "power.used.average": CounterInfo(571, "power.used", "average", "watt", 4),
}
# vCenter's default intervals (vSphere Web Services SDK Programming Guide, "vCenter Server Performance Intervals")
INTERVALS = (StatsInterval("Past Day", 300, 86400, 1), StatsInterval("Past Week", 1800, 604800, 1),
             StatsInterval("Past Month", 7200, 2592000, 1), StatsInterval("Past Year", 86400, 31536000, 1))
A100 = {"device_name": "NVIDIA A100-PCIE-40GB", "memory_kb": 40 * 1024 * 1024, "graphics_type": "sharedDirect",
        "vgpu_mode": "sameSize"}
END = 1_800_000_000.0  # the newest sample's end


def samples(text: str | list[Any]) -> list[float | None]:
    """`180 x 1.5, 1 x 5` (or a list) as values; `null` is no data."""
    if isinstance(text, list):
        return text
    out: list[float | None] = []
    for part in text.split(","):
        count, _, value = part.strip().partition(" x ")
        out += [None if value.strip() == "null" else float(value)] * int(count)
    return out


def window_of(spec: str | Mapping[str, Any], seconds: float | None = None) -> UsageWindow:
    if spec == "realtime":
        return UsageWindow(seconds or 3600.0, REALTIME)
    assert isinstance(spec, Mapping)
    interval = StatsInterval(spec["name"], spec["sampling_s"], spec["length_s"], spec["level"])
    return UsageWindow(float(seconds or spec["length_s"]), interval)


def series(host: str, instance: str, counter: str, values: list[float | None], window: UsageWindow) -> GpuSeries:
    step = window.interval.sampling_s
    times = tuple(END - step * (len(values) - 1 - i) for i in range(len(values)))
    return GpuSeries(host, instance, COUNTERS[counter], times, tuple(values))


def usage_read(window: UsageWindow, gpus: Iterable[Mapping[str, Any]]) -> UsageRead:
    read = UsageRead(window, list(COUNTERS.values()))
    for g in gpus:
        for counter, text in (g.get("series") or {}).items():
            read.series.append(series(g["host"], g.get("instance", g["gpu"]), counter, samples(text), window))
    return read


def observed_for(gpus: Iterable[Mapping[str, Any]], profile: str = "grid_a100-20c") -> Observed:
    """Hosts with these GPUs (each listing its VMs), every VM powered on holding one vGPU of `profile` per GPU."""
    observed = Observed(datacenter="DC0")
    for g in gpus:
        host = observed.hosts.setdefault(g["host"], ObservedHost(g["host"], cluster="GPU-Cluster",
                                                                 offered_profiles=[profile]))
        host.gpus.append(ObservedGpu(g["gpu"], vms=list(g.get("vms", [])), **A100))
        for vm in g.get("vms", []):
            v = observed.vms.setdefault(vm, ObservedVm(vm, host=g["host"], cluster="GPU-Cluster",
                                                        power_state="poweredOn"))
            v.vgpus.append(ObservedVgpu(len(v.vgpus) + 1, profile))
    return observed
