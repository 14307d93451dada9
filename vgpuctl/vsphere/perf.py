"""GPU usage from vCenter's PerformanceManager: the `gpu` counters per GPU instance of the hosts, read in bulk.

One read costs 1 + ceil(hosts / HOSTS_PER_QUERY) round trips, whatever the number of GPUs:
- one RetrievePropertiesEx of the PerformanceManager's `perfCounter` and `historicalInterval` (the counter ids
  and the intervals, once per run);
- one QueryPerf per HOSTS_PER_QUERY hosts: a PerfQuerySpec per host naming every wanted counter for every GPU
  instance (`*`), in CSV format (one string per series: far less XML than a value element per sample).
A window up to an hour reads the hosts' realtime samples (intervalId 20, the newest `maxSample`; realtime data
bypasses the statistics levels), a longer one the historical interval vgpuctl.records.perf.choose_window picks
(its `startTime` from this machine's clock). A counter the interval does not keep at its statistics level is not
asked for and is one warning naming the level to set. A query vCenter refuses (NoPermission, NotSupported, ...)
ends the read with the fault's type and message in `UsageRead.refused`; the caller shows the rest.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from vgpuctl.records.perf import (
    GPU_GROUP,
    CounterInfo,
    GpuCounter,
    GpuSeries,
    PerfCatalog,
    StatsInterval,
    UsageRead,
    UsageWindow,
    choose_window,
    level_warning,
    wanted_counters,
)
from vgpuctl.vsphere.faults import fault_message, fault_type

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

HOSTS_PER_QUERY = 32  # hosts per QueryPerf: 32 hosts x 8 GPUs x 6 counters is 1,536 series in one answer


def read_catalog(session: Session) -> PerfCatalog:
    """The gpu counters and the historical intervals, in one RetrievePropertiesEx."""
    from pyVmomi import vim, vmodl

    pm = session.content.perfManager
    pc = vmodl.query.PropertyCollector
    spec = pc.FilterSpec(objectSet=[pc.ObjectSpec(obj=pm, skip=False)],
                         propSet=[pc.PropertySpec(type=vim.PerformanceManager,
                                                  pathSet=["perfCounter", "historicalInterval"])])
    result = session.invoke(session.content.propertyCollector.RetrievePropertiesEx, [spec], pc.RetrieveOptions())
    props = {p.name: p.val for o in (result.objects if result else []) for p in o.propSet}
    counters = tuple(_counter(c) for c in props.get("perfCounter") or [] if c.groupInfo.key == GPU_GROUP)
    intervals = tuple(StatsInterval(str(i.name), int(i.samplingPeriod), int(i.length), int(i.level or 0),
                                    bool(i.enabled)) for i in props.get("historicalInterval") or [])
    return PerfCatalog(counters, intervals)


def _counter(info: Any) -> CounterInfo:
    return CounterInfo(int(info.key), str(info.nameInfo.key), str(info.rollupType), str(info.unitInfo.key),
                       int(info.level or 0))


def read_gpu_usage(session: Session, hosts: Mapping[str, str], seconds: float | None) -> UsageRead:
    """The gpu counters of these hosts (name -> moid) over the last `seconds` (None: the last hour).
    Raises records.perf.WindowTooLong when no interval of vCenter keeps that much."""
    from pyVmomi import vmodl

    try:
        catalog = read_catalog(session)
    except vmodl.MethodFault as fault:
        return UsageRead(choose_window(None, ()), refused=_refusal("reading the counters", fault))
    window = choose_window(seconds, catalog.intervals)
    counters = wanted_counters(catalog, window)
    read = UsageRead(window, counters)
    if not any(c.name == GpuCounter.UTILIZATION for c in counters):
        read.warnings.append("vCenter lists no gpu.utilization counter: it reports no GPU usage")
    if (warning := level_warning(counters, window)) is not None:
        read.warnings.append(warning)
    kept = [c for c in counters if window.interval.keeps(c)]
    if not kept:
        return read
    names = {moid: name for name, moid in hosts.items()}
    for batch in _chunks(sorted(names), HOSTS_PER_QUERY):
        try:
            answer = session.invoke(session.content.perfManager.QueryPerf, _specs(session, batch, kept, window))
        except vmodl.MethodFault as fault:
            read.refused = _refusal("QueryPerf", fault)
            break
        read.queries += 1
        read.series += [s for metric in answer or [] for s in _series(metric, names, kept)]
    return read


def _refusal(what: str, fault: Any) -> str:
    return f"vCenter refused {what}: {fault_type(fault)}: {fault_message(fault)}"


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _specs(session: Session, moids: Sequence[str], counters: list[CounterInfo], window: UsageWindow) -> list[Any]:
    """One PerfQuerySpec per host: every counter for every GPU instance, CSV."""
    from pyVmomi import vim

    metrics = [vim.PerformanceManager.MetricId(counterId=c.key, instance="*") for c in counters]
    specs = []
    for moid in moids:
        spec = vim.PerformanceManager.QuerySpec(entity=vim.HostSystem(moid, session.stub), metricId=metrics,
                                                intervalId=window.interval.sampling_s, format="csv")
        if window.interval.realtime:
            spec.maxSample = window.samples
        else:
            spec.startTime = datetime.fromtimestamp(time.time() - window.seconds).astimezone()
        specs.append(spec)
    return specs


def _series(metric: Any, names: Mapping[str, str], counters: list[CounterInfo]) -> Iterator[GpuSeries]:
    """The series of one host's answer (CSV, or the normal format where a server answers that)."""
    host = names.get(str(metric.entity._moId))
    if host is None:
        return
    by_key = {c.key: c for c in counters}
    times = _times(metric)
    for value in metric.value or []:
        counter = by_key.get(int(value.id.counterId))
        instance = str(value.id.instance or "")
        if counter is None or not instance:  # "" is the host's aggregate of its GPUs
            continue
        raw = value.value
        samples = [int(v) for v in raw.split(",") if v] if isinstance(raw, str) else [int(v) for v in raw or []]
        yield GpuSeries(host, instance, counter, times[-len(samples):] if samples else (),
                        tuple(counter.scaled(v) for v in samples[-len(times):]))


def _times(metric: Any) -> tuple[float, ...]:
    """The end of each sample: sampleInfoCSV is `interval,timestamp,interval,timestamp,...`."""
    csv = getattr(metric, "sampleInfoCSV", None)
    if csv is not None:
        stamps = str(csv).split(",")[1::2]
        return tuple(datetime.fromisoformat(s.strip()).timestamp() for s in stamps if s.strip())
    return tuple(info.timestamp.timestamp() for info in getattr(metric, "sampleInfo", None) or [])
