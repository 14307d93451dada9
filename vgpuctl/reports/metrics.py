"""The Prometheus metrics of `vgpuctl exporter`, built from what one read of the farm returned (pure: no I/O, no
prometheus_client). `METRICS` is the catalogue: every family's name, type, labels and help, documented in
docs/exporter.md and used by dashboards/vgpuctl.json (tests check both). Names follow Prometheus' conventions:
`vgpuctl_` first, base units in the name (bytes, seconds, ratio, celsius, watts), `_total` only on counters,
`_info` on series whose value is 1 and whose labels say something.

`build_families` turns the exporter's state (the last good read, why the newest one failed, the inventories'
plans) into families with their samples; vgpuctl.cli.scrape hands them to prometheus_client.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import field
from enum import StrEnum

from vgpuctl.domain import GpuMode, GpuVgpuMode
from vgpuctl.farm.usage import KB_PER_GB, GpuUsage
from vgpuctl.lazyclass import dataclass
from vgpuctl.records.work import HostRecord
from vgpuctl.reports.plan import PlanSummary
from vgpuctl.reports.status import StatusGpu, StatusHost, StatusReport

BYTES_PER_GB = 1024 * KB_PER_GB  # the catalogue's and vSphere's GB are 2^30 bytes
REASON_CHARS = 240  # a reason label holds the first line of an error, at most this long


class Kind(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True)
class MetricSpec:
    kind: Kind
    labels: tuple[str, ...]
    help: str


GPU = ("cluster", "host", "gpu")
HOST = ("cluster", "host")
PLAN = ("inventory",)
_G, _C = Kind.GAUGE, Kind.COUNTER

METRICS: dict[str, MetricSpec] = {
    # the read itself
    "vgpuctl_up": MetricSpec(_G, (), "1 when the newest read of vCenter succeeded, 0 when it failed"),
    "vgpuctl_read_error_info": MetricSpec(_G, ("reason",), "Why the newest read of vCenter failed (only while "
                                          "vgpuctl_up is 0)"),
    "vgpuctl_last_read_timestamp_seconds": MetricSpec(_G, (), "When the last good read of vCenter ended (Unix time)"),
    "vgpuctl_read_age_seconds": MetricSpec(_G, (), "Age of the last good read of vCenter"),
    "vgpuctl_read_duration_seconds": MetricSpec(_G, (), "How long the last good read of vCenter took"),
    "vgpuctl_read_round_trips": MetricSpec(_G, (), "SOAP round trips of the last good read of vCenter"),
    "vgpuctl_read_interval_seconds": MetricSpec(_G, (), "How often the exporter reads vCenter (--interval)"),
    "vgpuctl_reads_total": MetricSpec(_C, (), "Reads of vCenter the exporter made"),
    "vgpuctl_read_failures_total": MetricSpec(_C, (), "Reads of vCenter that failed"),
    # the GPU counters
    "vgpuctl_usage_up": MetricSpec(_G, (), "1 when vCenter answered the newest GPU counter query, 0 when it "
                                   "refused it (the figures served are the last good ones)"),
    "vgpuctl_usage_error_info": MetricSpec(_G, ("reason",), "Why vCenter refused the newest GPU counter query"),
    "vgpuctl_usage_age_seconds": MetricSpec(_G, (), "Age of the GPU counter figures served"),
    "vgpuctl_usage_window_seconds": MetricSpec(_G, (), "The window the utilization figures average over "
                                               "(--usage-window)"),
    # per GPU
    "vgpuctl_gpu_info": MetricSpec(_G, (*GPU, "model", "mode", "vgpu_mode", "nvlink_set"),
                                   "A physical GPU: its model, mode (time-sliced or mig), vSphere's vGPU mode and "
                                   "the NVLink set it belongs to (\"\" when none)"),
    "vgpuctl_gpu_framebuffer_bytes": MetricSpec(_G, GPU, "Framebuffer of the GPU"),
    "vgpuctl_gpu_framebuffer_allocated_bytes": MetricSpec(_G, GPU, "Framebuffer the GPU's vGPUs hold"),
    "vgpuctl_gpu_framebuffer_free_bytes": MetricSpec(_G, GPU, "Framebuffer of the GPU no vGPU holds"),
    "vgpuctl_gpu_framebuffer_stranded_bytes": MetricSpec(_G, GPU, "Free framebuffer of the GPU no offered vGPU "
                                                         "profile can use in its current mode"),
    "vgpuctl_gpu_vgpus": MetricSpec(_G, (*GPU, "profile"), "vGPUs of a profile on the GPU"),
    "vgpuctl_gpu_utilization_ratio": MetricSpec(_G, GPU, "Average utilization of the GPU over the usage window "
                                                "(vCenter's gpu.utilization, 0 to 1)"),
    "vgpuctl_gpu_utilization_peak_ratio": MetricSpec(_G, GPU, "Highest utilization of the GPU in the usage window"),
    "vgpuctl_gpu_memory_used_bytes": MetricSpec(_G, GPU, "Average GPU memory used over the usage window "
                                                "(gpu.mem.used)"),
    "vgpuctl_gpu_memory_used_ratio": MetricSpec(_G, GPU, "Average share of the GPU's memory used over the usage "
                                                "window (gpu.mem.usage, 0 to 1)"),
    "vgpuctl_gpu_temperature_celsius": MetricSpec(_G, GPU, "Highest GPU temperature in the usage window"),
    "vgpuctl_gpu_power_watts": MetricSpec(_G, GPU, "Average power the GPU drew over the usage window (where the "
                                          "host has the gpu.power.used counter)"),
    # per host
    "vgpuctl_host_info": MetricSpec(_G, (*HOST, "connection_state", "power_state", "graphics_type"),
                                    "A host: its connection and power state and its default graphics type"),
    "vgpuctl_host_in_maintenance": MetricSpec(_G, HOST, "1 when the host is in maintenance mode"),
    "vgpuctl_host_vgpu_types": MetricSpec(_G, HOST, "vGPU types the host offers (0 on a GPU host: no vGPU Manager "
                                          "running, or not Shared Direct)"),
    "vgpuctl_host_vgpu_manager_info": MetricSpec(_G, (*HOST, "version", "after_reboot"),
                                                 "The NVIDIA vGPU Manager installed on the host (its "
                                                 "packages), and the one it runs after its next reboot where that "
                                                 "differs and is known (\"\" otherwise)"),
    "vgpuctl_host_nvlink_info": MetricSpec(_G, (*HOST, "state", "after_reboot"),
                                           "The host's NVLink setting, and what it is after the next reboot "
                                           "(\"\" when the same)"),
    "vgpuctl_host_lease_held": MetricSpec(_G, HOST, "1 while another vgpuctl run holds a live lease on the host"),
    "vgpuctl_host_lease_info": MetricSpec(_G, (*HOST, "run", "holder"), "The run holding the host's lease and who "
                                          "started it (only while held)"),
    "vgpuctl_host_unfinished_work": MetricSpec(_G, HOST, "1 when an interrupted or failed apply left a work record "
                                               "on the host (the next apply resumes it)"),
    "vgpuctl_host_unfinished_work_vms": MetricSpec(_G, HOST, "VMs the host's work record still has to power on"),
    "vgpuctl_host_work_record_unreadable": MetricSpec(_G, HOST, "1 when the host's vgpuctl.work value is no work "
                                                      "record vgpuctl can read"),
    # per inventory (-f)
    "vgpuctl_plan_up": MetricSpec(_G, PLAN, "1 when the newest plan of the inventory was made, 0 when it failed"),
    "vgpuctl_plan_error_info": MetricSpec(_G, (*PLAN, "reason"), "Why the newest plan of the inventory failed"),
    "vgpuctl_plan_age_seconds": MetricSpec(_G, PLAN, "Age of the plan counts served"),
    "vgpuctl_plan_drift": MetricSpec(_G, PLAN, "1 when the farm differs from the inventory (the plan has changes)"),
    "vgpuctl_plan_changes": MetricSpec(_G, (*PLAN, "kind"), "Steps of the inventory's plan, by kind (create, change, "
                                       "remove, power_off, power_on, host_changes, maintenance, reboots)"),
    "vgpuctl_plan_problems": MetricSpec(_G, (*PLAN, "severity"), "Errors and warnings of the inventory's plan"),
}

PLAN_KINDS = ("create", "change", "remove", "power_off", "power_on", "host_changes", "maintenance", "reboots")


@dataclass(frozen=True)
class Sample:
    labels: tuple[str, ...]  # in the order of the family's labels
    value: float


@dataclass
class Family:
    name: str
    spec: MetricSpec
    samples: list[Sample] = field(default_factory=list)

    def add(self, value: float, *labels: str) -> None:
        if len(labels) != len(self.spec.labels):
            raise ValueError(f"{self.name}: {len(labels)} label values for labels {self.spec.labels}")
        self.samples.append(Sample(tuple(str(v) for v in labels), float(value)))


@dataclass(frozen=True)
class FarmRead:
    """One good read of the farm: status's report (hosts, GPUs, framebuffer, stranded, vGPU Manager, NVLink,
    leases), the hosts' work records (None: a value that is no record) and what it cost."""

    report: StatusReport
    work: dict[str, HostRecord | None]
    round_trips: int
    duration_s: float
    ended: float  # Unix time


@dataclass(frozen=True)
class UsageState:
    """The GPU counter figures served: the last good ones, when they were read, and why the newest query failed."""

    gpus: dict[tuple[str, str], GpuUsage]  # (host, PCI id) -> figures
    window_s: float
    read_at: float | None  # None: never read
    error: str | None = None


@dataclass(frozen=True)
class PlanState:
    """An inventory's plan counts: the last good ones and why the newest plan failed."""

    inventory: str
    summary: PlanSummary | None
    drift: bool
    planned_at: float | None
    error: str | None = None


@dataclass(frozen=True)
class ExporterState:
    """What the exporter serves: the last good read, why the newest read failed (None: it did not), counts."""

    interval_s: float
    last: FarmRead | None = None
    error: str | None = None
    reads: int = 0
    failures: int = 0
    usage: UsageState | None = None
    plans: tuple[PlanState, ...] = ()


def reason(text: str) -> str:
    """The first line of an error, bounded: a label value."""
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 3] + "..."


def build_families(state: ExporterState, now: float) -> list[Family]:
    """Every family of the catalogue, in its order, with the samples this state gives. While vCenter is down
    (`state.error`) only the read's families have samples: the farm's series go away rather than go stale."""
    families = {name: Family(name, spec) for name, spec in METRICS.items()}
    _read_samples(families, state, now)
    if state.last is not None and state.error is None:
        _farm_samples(families, state.last)
        if state.usage is not None:
            _usage_samples(families, state.last.report, state.usage, now)
    for plan in state.plans:
        _plan_samples(families, plan, now)
    return list(families.values())


def _read_samples(families: dict[str, Family], state: ExporterState, now: float) -> None:
    up = state.last is not None and state.error is None
    families["vgpuctl_up"].add(1 if up else 0)
    if state.error is not None:
        families["vgpuctl_read_error_info"].add(1, reason(state.error))
    families["vgpuctl_read_interval_seconds"].add(state.interval_s)
    families["vgpuctl_reads_total"].add(state.reads)
    families["vgpuctl_read_failures_total"].add(state.failures)
    if state.last is not None:
        families["vgpuctl_last_read_timestamp_seconds"].add(state.last.ended)
        families["vgpuctl_read_age_seconds"].add(max(now - state.last.ended, 0.0))
        families["vgpuctl_read_duration_seconds"].add(state.last.duration_s)
        families["vgpuctl_read_round_trips"].add(state.last.round_trips)


def _farm_samples(families: dict[str, Family], read: FarmRead) -> None:
    for host in read.report.hosts:
        _host_samples(families, host, read.work)
        for gpu in host.gpus:
            _gpu_samples(families, host, gpu)


def _host_samples(families: dict[str, Family], host: StatusHost, work: dict[str, HostRecord | None]) -> None:
    at = (host.cluster or "", host.host)
    families["vgpuctl_host_info"].add(1, *at, host.connection_state, host.power_state, host.default_graphics_type)
    families["vgpuctl_host_in_maintenance"].add(host.in_maintenance, *at)
    families["vgpuctl_host_vgpu_types"].add(host.vgpu_types, *at)
    if host.vgpu_manager is not None:
        families["vgpuctl_host_vgpu_manager_info"].add(1, *at, host.vgpu_manager, host.vgpu_manager_after_reboot or "")
    if host.nvlink is not None:
        families["vgpuctl_host_nvlink_info"].add(1, *at, host.nvlink, host.nvlink_after_reboot or "")
    families["vgpuctl_host_lease_held"].add(host.held is not None, *at)
    if host.held is not None:
        families["vgpuctl_host_lease_info"].add(1, *at, host.held.run, host.held.holder)
    record = work.get(host.host)
    families["vgpuctl_host_unfinished_work"].add(record is not None, *at)
    families["vgpuctl_host_unfinished_work_vms"].add(len(record.vms) if record is not None else 0, *at)
    families["vgpuctl_host_work_record_unreadable"].add(host.host in work and record is None, *at)


def gpu_mode_label(gpu: StatusGpu) -> str:
    return str(GpuMode.MIG if gpu.vgpu_mode == GpuVgpuMode.MIG else GpuMode.TIME_SLICED)


def _gpu_samples(families: dict[str, Family], host: StatusHost, gpu: StatusGpu) -> None:
    at = (host.cluster or "", host.host, gpu.gpu)
    nvlink = "" if gpu.nvlink_group is None else str(gpu.nvlink_group)
    families["vgpuctl_gpu_info"].add(1, *at, gpu.model, gpu_mode_label(gpu), gpu.vgpu_mode, nvlink)
    families["vgpuctl_gpu_framebuffer_bytes"].add(gpu.fb_gb * BYTES_PER_GB, *at)
    families["vgpuctl_gpu_framebuffer_allocated_bytes"].add(gpu.used_gb * BYTES_PER_GB, *at)
    families["vgpuctl_gpu_framebuffer_free_bytes"].add(gpu.free_gb * BYTES_PER_GB, *at)
    families["vgpuctl_gpu_framebuffer_stranded_bytes"].add((gpu.stranded_gb or 0.0) * BYTES_PER_GB, *at)
    for count in gpu.vgpus:
        families["vgpuctl_gpu_vgpus"].add(count.count, *at, count.profile)


def _usage_samples(families: dict[str, Family], report: StatusReport, usage: UsageState, now: float) -> None:
    families["vgpuctl_usage_up"].add(usage.error is None)
    if usage.error is not None:
        families["vgpuctl_usage_error_info"].add(1, reason(usage.error))
    families["vgpuctl_usage_window_seconds"].add(usage.window_s)
    if usage.read_at is None:
        return
    families["vgpuctl_usage_age_seconds"].add(max(now - usage.read_at, 0.0))
    for host in report.hosts:
        for gpu in host.gpus:
            figures = usage.gpus.get((host.host, gpu.gpu))
            if figures is not None:
                _figures(families, (host.cluster or "", host.host, gpu.gpu), figures)


def _figures(families: dict[str, Family], at: tuple[str, ...], u: GpuUsage) -> None:
    for name, value in _usage_values(u):
        if value is not None:
            families[name].add(value, *at)


def _usage_values(u: GpuUsage) -> Iterator[tuple[str, float | None]]:
    yield "vgpuctl_gpu_utilization_ratio", _ratio(u.util_avg)
    yield "vgpuctl_gpu_utilization_peak_ratio", _ratio(u.util_max)
    yield "vgpuctl_gpu_memory_used_bytes", None if u.mem_used_gb is None else u.mem_used_gb * BYTES_PER_GB
    yield "vgpuctl_gpu_memory_used_ratio", _ratio(u.mem_usage_avg)
    yield "vgpuctl_gpu_temperature_celsius", u.temperature_max
    yield "vgpuctl_gpu_power_watts", u.power_avg


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100


def _plan_samples(families: dict[str, Family], plan: PlanState, now: float) -> None:
    at = (plan.inventory,)
    families["vgpuctl_plan_up"].add(plan.error is None, *at)
    if plan.error is not None:
        families["vgpuctl_plan_error_info"].add(1, *at, reason(plan.error))
    if plan.summary is None or plan.planned_at is None:
        return
    families["vgpuctl_plan_age_seconds"].add(max(now - plan.planned_at, 0.0), *at)
    families["vgpuctl_plan_drift"].add(plan.drift, *at)
    for kind in PLAN_KINDS:
        families["vgpuctl_plan_changes"].add(getattr(plan.summary, kind), *at, kind)
    families["vgpuctl_plan_problems"].add(plan.summary.errors, *at, "error")
    families["vgpuctl_plan_problems"].add(plan.summary.warnings, *at, "warning")
