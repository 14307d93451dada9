"""What `vgpuctl exporter` reads and serves: one read of the farm per interval in a background thread, whatever the
number of scrapers; every scrape is answered from the last read (vgpuctl.reports.metrics builds the families).

A read is `status --usage` without the shell or the VM classes: the bulk observe with every GPU host's NVLink sets,
each connected host's API facts (its NVLink setting) and installed vGPU Manager, the live leases (one CurrentTime
read when one is set), the GPU counters (vgpuctl.vsphere.perf) and the hosts' work records (read with the bulk
observe). The inventories given with -f are planned on their own, slower schedule. A read that fails leaves
`vgpuctl_up 0` and its reason; a GPU counter query vCenter refuses is one logged line and the last good figures are
served with their age. Only the newest state is kept: memory does not grow with time or scrapes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.status import held_hosts, read_usage
from vgpuctl.domain import ConnectionState
from vgpuctl.errors import VgpuctlError
from vgpuctl.extras import require
from vgpuctl.farm.usage import gpu_usage
from vgpuctl.hosts.status import collect_host_facts
from vgpuctl.lazyclass import dataclass
from vgpuctl.records.work import WORK_FIELD, HostRecord, read_record
from vgpuctl.releases import driver_version, manager_in
from vgpuctl.reports.host import host_status
from vgpuctl.reports.metrics import ExporterState, FarmRead, Kind, PlanState, UsageState, build_families
from vgpuctl.reports.plan import plan_summary
from vgpuctl.reports.status import merge_status, status_report, with_leases
from vgpuctl.vsphere.faults import fault_message, fault_type
from vgpuctl.vsphere.hostaccess import software_packages

if TYPE_CHECKING:
    from vgpuctl.farm.usage import GpuUsage
    from vgpuctl.model import Observed
    from vgpuctl.vsphere.session import ConnectionSettings, Session

log = logging.getLogger("vgpuctl.exporter")


@dataclass(frozen=True)
class Schedule:
    interval_s: float  # between reads of the farm
    usage_window_s: float  # the GPU counters' window
    plan_interval_s: float  # between plans of the inventories


@dataclass(frozen=True)
class UsageResult:
    """What one GPU counter read gave: each GPU's figures, or why vCenter refused the query."""

    window_s: float
    gpus: dict[tuple[str, str], GpuUsage]
    refused: str | None = None


def describe(err: BaseException) -> str:
    """One line for a failed read: vgpuctl's own errors as they print, anything else with its type."""
    if hasattr(err, "_wsdlName"):  # a pyVmomi fault that came through unwrapped: its type and message

        return f"{fault_type(err)}: {fault_message(err)}"
    text = str(err).strip()
    if isinstance(err, VgpuctlError):
        return text or type(err).__name__
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def work_records(observed: Observed) -> dict[str, HostRecord | None]:
    """The hosts that carry a vgpuctl.work value: its record, or None when it is none vgpuctl can read."""
    out: dict[str, HostRecord | None] = {}
    for name, host in observed.hosts.items():
        text = host.custom_values.get(WORK_FIELD, "")
        if text:
            out[name] = read_record(name, text)[0]
    return out


def read_farm(settings: ConnectionSettings, datacenter: str | None, usage_window_s: float
              ) -> tuple[FarmRead, UsageResult]:
    """One read of the farm (module docstring), in one session."""
    from vgpuctl import pipeline
    from vgpuctl.vsphere.session import open_session

    start = time.monotonic()
    with open_session(settings) as session:
        observed = pipeline.observe(session, datacenter, None, all_nvlink=True)
        facts = collect_host_facts(session, observed, {}, shell=False)
        managers = read_managers(session, observed)
        leases = held_hosts(session, observed)
        usage = read_usage(session, observed, usage_window_s, None)
        round_trips = session.round_trips
    rows = {name: host_status(observed.hosts[name], f, f.shell_error) for name, f in facts.items()}
    report = with_leases(merge_status(status_report(observed), rows), leases)
    for host in report.hosts:
        host.vgpu_manager = host.vgpu_manager or managers.get(host.host)
    farm = FarmRead(report, work_records(observed), round_trips, time.monotonic() - start, time.time())
    figures = gpu_usage(observed, usage).gpus if usage.refused is None else {}
    return farm, UsageResult(usage.window.seconds, figures, usage.refused)


def read_managers(session: Session, observed: Observed) -> dict[str, str]:
    """The vGPU Manager each connected GPU host has installed (its packages: one call a host on the image manager
    the bulk read named, 8 hosts at a time); a host that cannot or may not say (privilege Host.Config.Image) is
    left out, one line logged."""
    def one(name: str) -> str | None:
        try:
            packages = software_packages(session, name, observed.hosts[name].image_config_manager_moid)
        except VgpuctlError as err:
            _log_once(f"the vGPU Manager of host {name} cannot be read: {err}")
            return None
        found = manager_in([(p.name, p.version) for p in packages])
        return driver_version(found[1]) if found is not None else None

    names = sorted(n for n, h in observed.hosts.items() if h.gpus and h.connection_state == ConnectionState.CONNECTED)
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(names)), thread_name_prefix="vgpuctl-exporter") as pool:
        return {n: v for n, v in zip(names, pool.map(one, names), strict=True) if v is not None}


_LOGGED: set[str] = set()


def _log_once(line: str) -> None:
    if line not in _LOGGED and len(_LOGGED) < 1000:  # bounded: the lines name hosts, which are few
        _LOGGED.add(line)
        log.warning("%s", line)


def plan_inventory(opts: GlobalOptions, settings: ConnectionSettings, path: Path) -> PlanState:
    """The plan of one inventory (read-only, as `vgpuctl plan` makes it; the file read again each time): its
    counts and whether it drifts."""
    from vgpuctl import pipeline

    inventory = common.load_inventory(opts, path)
    options = common.run_options(opts, inventory, read_only=True)
    planned = pipeline.plan_only(settings, inventory, options)
    return PlanState(str(path), plan_summary(planned.plan), not planned.plan.is_empty, time.time())


FarmReader = Callable[[], tuple[FarmRead, UsageResult]]
Planner = Callable[[Path], PlanState]


class FarmCollector:
    """Reads the farm every `schedule.interval_s` in a thread of its own and serves the last read to every scrape
    (prometheus_client's custom collector protocol: `collect`)."""

    def __init__(self, read: FarmReader, plan: Planner, schedule: Schedule, inventories: Sequence[Path] = ()):
        self._read, self._plan, self.schedule = read, plan, schedule
        self._inventories = list(inventories)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._next_plan = 0.0
        self.state = ExporterState(schedule.interval_s, error="the first read of vCenter has not finished yet",
                                   plans=tuple(PlanState(str(p), None, False, None, "not planned yet")
                                               for p in self._inventories))

    # ------------------------------------------------------------------------------------------ reading

    def refresh(self) -> None:
        """One read of the farm; then the inventories' plans when they are due."""
        try:
            farm, usage = self._read()
        except Exception as err:  # whatever one read raised, the exporter keeps serving
            self._failed(describe(err))
        else:
            self._succeeded(farm, usage)
        if self._inventories and time.monotonic() >= self._next_plan:
            self._next_plan = time.monotonic() + self.schedule.plan_interval_s
            self._set(plans=tuple(self._planned(p, old) for p, old in zip(self._inventories, self.state.plans,
                                                                           strict=True)))

    def _failed(self, why: str) -> None:
        if why != self.state.error:
            log.warning("reading vCenter failed: %s", why)
        self._set(error=why, reads=self.state.reads + 1, failures=self.state.failures + 1)

    def _succeeded(self, farm: FarmRead, usage: UsageResult) -> None:
        if self.state.error is not None and self.state.last is not None:
            log.warning("reading vCenter works again")
        self._set(last=farm, error=None, reads=self.state.reads + 1, usage=self._usage(usage))

    def _usage(self, read: UsageResult) -> UsageState:
        """The new figures; when vCenter refused the query, the last good ones (with their age) and why."""
        old = self.state.usage
        if read.refused is None:
            return UsageState(read.gpus, read.window_s, time.time())
        if old is None or old.error != read.refused:
            log.warning("%s; serving the last good GPU figures", read.refused)
        return replace(old, error=read.refused) if old is not None else UsageState({}, read.window_s, None,
                                                                                   read.refused)

    def _planned(self, path: Path, old: PlanState) -> PlanState:
        try:
            return self._plan(path)
        except Exception as err:  # a plan that fails is a metric, not the exporter's end
            why = describe(err)
            if why != old.error:
                log.warning("planning %s failed: %s", path, why)
            return replace(old, error=why)

    def _set(self, **changes: Any) -> None:
        with self._lock:
            self.state = replace(self.state, **changes)

    # ------------------------------------------------------------------------------------------ the thread

    def run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.schedule.interval_s)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="vgpuctl-exporter", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------------------------------ serving

    def describe(self) -> list[Any]:
        return []  # the families are known only when collected: prometheus_client then skips its check

    def collect(self) -> Iterator[Any]:
        require("prometheus_client")
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            state = self.state
        for family in build_families(state, time.time()):
            if family.spec.kind == Kind.COUNTER:
                out: Any = CounterMetricFamily(family.name.removesuffix("_total"), family.spec.help,
                                               labels=family.spec.labels)
            else:
                out = GaugeMetricFamily(family.name, family.spec.help, labels=family.spec.labels)
            for sample in family.samples:
                out.add_metric(list(sample.labels), sample.value)
            yield out
