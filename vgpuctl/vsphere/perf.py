"""GPU usage from vCenter's PerformanceManager: the `gpu` counters per GPU instance of the hosts, read in bulk.

One read costs 1 + ceil(hosts / HOSTS_PER_QUERY) round trips, whatever the number of GPUs:
- one RetrievePropertiesEx of the PerformanceManager's `perfCounter` and `historicalInterval` (the counter ids
  and the intervals, once per run);
- one QueryPerf per HOSTS_PER_QUERY hosts: a PerfQuerySpec per host naming every wanted counter for every GPU
  instance (`*`), in CSV format (one string per series: far less XML than a value element per sample).
Both answers are parsed with ElementTree straight from the SOAP XML (vsphere.rawread.invoke_raw; faults still come
as pyVmomi's): pyVmomi would build an object for each of vCenter's hundreds of counters first.
A window up to an hour reads the hosts' realtime samples (intervalId 20, the newest `maxSample`; realtime data
bypasses the statistics levels), a longer one the historical interval vgpuctl.records.perf.choose_window picks
(its `startTime` from this machine's clock). A counter the interval does not keep at its statistics level is not
asked for and is one warning naming the level to set. A query vCenter refuses (NoPermission, NotSupported, ...)
ends the read with the fault's type and message in `UsageRead.refused`; the caller shows the rest.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
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
from vgpuctl.vsphere.rawread import invoke_raw

_Q = "{urn:vim25}"

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

HOSTS_PER_QUERY = 32  # hosts per QueryPerf: 32 hosts x 8 GPUs x 6 counters is 1,536 series in one answer


def read_catalog(session: Session) -> PerfCatalog:
    """The gpu counters and the historical intervals, in one RetrievePropertiesEx (its answer parsed lean: the
    perfCounter list holds every counter of every group, hundreds, of which the gpu group is a dozen)."""
    from pyVmomi import vim, vmodl

    pm = session.content.perfManager
    pc = vmodl.query.PropertyCollector
    spec = pc.FilterSpec(objectSet=[pc.ObjectSpec(obj=pm, skip=False)],
                         propSet=[pc.PropertySpec(type=vim.PerformanceManager,
                                                  pathSet=["perfCounter", "historicalInterval"])])
    body = session.invoke(invoke_raw, session.stub, session.content.propertyCollector, "RetrievePropertiesEx",
                          [[spec], pc.RetrieveOptions()])
    root = ET.fromstring(body)
    counters = tuple(_counter(c) for c in root.iter(_Q + "PerfCounterInfo") if _key(c, "groupInfo") == GPU_GROUP)
    intervals = tuple(_interval(i) for i in root.iter(_Q + "PerfInterval"))
    return PerfCatalog(counters, intervals)


def _key(elem: ET.Element, child: str) -> str:
    """An ElementDescription child's key (nameInfo, groupInfo, unitInfo)."""
    return elem.findtext(f"{_Q}{child}/{_Q}key") or ""


def _counter(info: ET.Element) -> CounterInfo:
    return CounterInfo(int(info.findtext(_Q + "key") or 0), _key(info, "nameInfo"), info.findtext(_Q + "rollupType")
                       or "", _key(info, "unitInfo"), int(info.findtext(_Q + "level") or 0))


def _interval(info: ET.Element) -> StatsInterval:
    return StatsInterval(info.findtext(_Q + "name") or "", int(info.findtext(_Q + "samplingPeriod") or 0),
                         int(info.findtext(_Q + "length") or 0), int(info.findtext(_Q + "level") or 0),
                         (info.findtext(_Q + "enabled") or "true") == "true")


def read_gpu_usage(session: Session, hosts: Mapping[str, str], seconds: float | None) -> UsageRead:
    """The gpu counters of these hosts (name -> moid, farm.usage.hosts_to_read) over the last `seconds` (None: the
    last hour), in 1 + ceil(hosts / HOSTS_PER_QUERY) round trips. A fault vCenter answers is never raised: it ends
    the read, its type and message in `UsageRead.refused` (the series read before it kept). Raises
    records.perf.WindowTooLong when no enabled interval of vCenter keeps that much."""
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
            body = session.invoke(invoke_raw, session.stub, session.content.perfManager, "QueryStats",
                                  [_specs(session, batch, kept, window)])
        except vmodl.MethodFault as fault:
            read.refused = _refusal("QueryPerf", fault)
            break
        read.queries += 1
        read.series += [s for metric in ET.fromstring(body).iter(_Q + "returnval")
                        for s in _series(metric, names, kept)]
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


def _series(metric: ET.Element, names: Mapping[str, str], counters: list[CounterInfo]) -> Iterator[GpuSeries]:
    """The series of one host's answer: PerfEntityMetricCSV, or PerfEntityMetric where a server answers that."""
    host = names.get(metric.findtext(_Q + "entity") or "")
    if host is None:
        return
    by_key = {c.key: c for c in counters}
    times = _times(metric)
    for value in metric.findall(_Q + "value"):
        counter = by_key.get(int(value.findtext(f"{_Q}id/{_Q}counterId") or -1))
        instance = value.findtext(f"{_Q}id/{_Q}instance") or ""
        if counter is None or not instance:  # "" is the host's aggregate of its GPUs
            continue
        texts = [e.text or "" for e in value.findall(_Q + "value")]
        parts = (texts[0].split(",") if texts[0] else []) if len(texts) == 1 else texts
        samples = [counter.scaled(v) for v in map(int, parts)]  # percent in hundredths; -1: no data
        yield GpuSeries(host, instance, counter, times[-len(samples):] if samples else (),
                        tuple(samples[-len(times):]))


def _times(metric: ET.Element) -> tuple[float, ...]:
    """The end of each sample: sampleInfoCSV is `interval,timestamp,interval,timestamp,...`."""
    csv = metric.findtext(_Q + "sampleInfoCSV")
    stamps = csv.split(",")[1::2] if csv is not None else [
        i.findtext(_Q + "timestamp") or "" for i in metric.findall(_Q + "sampleInfo")]
    return tuple(datetime.fromisoformat(s.strip()).timestamp() for s in stamps if s.strip())
