"""The exporter's metrics, built from fixture farms (no network): names and labels follow Prometheus' conventions,
each family's samples say what status says, vCenter down gives `up 0` and a reason, a refused counter query keeps
the last good figures with their age."""

from __future__ import annotations

import re

import pytest
from perfseries import observed_for, usage_read, window_of

from vgpuctl.farm.usage import gpu_usage
from vgpuctl.records.work import HostRecord
from vgpuctl.reports.metrics import (
    BYTES_PER_GB,
    METRICS,
    ExporterState,
    Family,
    FarmRead,
    Kind,
    PlanState,
    UsageState,
    build_families,
    reason,
)
from vgpuctl.reports.plan import PlanSummary
from vgpuctl.reports.status import HostLease, status_report

pytestmark = pytest.mark.unit

GIB = 1024**3
NOW = 1_800_000_100.0
UNITS = ("bytes", "seconds", "ratio", "celsius", "watts")
COUNT_NAMES = ("vgpuctl_gpu_vgpus", "vgpuctl_read_round_trips", "vgpuctl_host_vgpu_types",
               "vgpuctl_host_unfinished_work_vms", "vgpuctl_plan_changes", "vgpuctl_plan_problems")
GPUS = [
    {"host": "esx-01", "gpu": "0000:3b:00.0", "vms": ["train-01"], "series": {
        "utilization.average": "15 x 40", "utilization.maximum": "15 x 90",
        "mem.used.average": "15 x 10485760", "mem.usage.average": "15 x 25", "temperature.average": "15 x 61"}},
    {"host": "esx-01", "gpu": "0000:af:00.0"},
    {"host": "esx-02", "gpu": "0000:3b:00.0"},
]


def farm_read() -> tuple[FarmRead, UsageState]:
    observed = observed_for(GPUS)
    report = status_report(observed)
    h1, h2 = report.hosts
    h1.vgpu_manager, h1.vgpu_manager_after_reboot, h1.nvlink = "580.65.05", "580.82.02", "enabled"
    h2.held = HostLease(run="3f2a", holder="alice@ws", since="10:00:00", until="10:01:00")
    work = {"esx-02": HostRecord("esx-02", vms=[{"name": "a", "moid": "vm-1", "after": "power-on"}]), "esx-01": None}
    window = window_of("realtime", 300)
    figures = gpu_usage(observed, usage_read(window, GPUS))
    return FarmRead(report, work, 9, 0.4, NOW - 30), UsageState(figures.gpus, 300.0, NOW - 30)


def families(state: ExporterState) -> dict[str, Family]:
    return {f.name: f for f in build_families(state, NOW)}


def values(family: Family, **labels: str) -> list[float]:
    """The values of the samples whose labels include these."""
    names = family.spec.labels
    return [s.value for s in family.samples if all(s.labels[names.index(k)] == v for k, v in labels.items())]


def good_state() -> ExporterState:
    farm, usage = farm_read()
    summary = PlanSummary(create=2, change=1, remove=0, power_off=1, power_on=0, host_changes=1, maintenance=1,
                          reboots=0, errors=0, warnings=3)
    plan = PlanState("inventory.yaml", summary, True, NOW - 60)
    return ExporterState(60.0, farm, reads=3, failures=1, usage=usage, plans=(plan,))


# ------------------------------------------------------------------------------------------ names and labels


@pytest.mark.parametrize("name", sorted(METRICS))
def test_names_follow_prometheus_conventions(name: str) -> None:
    spec = METRICS[name]
    assert re.fullmatch(r"vgpuctl_[a-z][a-z0-9_]*[a-z0-9]", name)
    assert name.endswith("_total") == (spec.kind == Kind.COUNTER)  # _total only, and always, on counters
    for bad in ("_bytes_total", "_percent", "_kb", "_gb", "_ms", "_milliseconds", "_minutes"):
        assert bad not in name  # base units only
    if name.endswith("_info"):
        assert spec.labels, name
    elif spec.kind == Kind.GAUGE and not name.startswith(("vgpuctl_up", "vgpuctl_usage_up", "vgpuctl_plan_up")):
        flags = ("_in_maintenance", "_held", "_unfinished_work", "_unreadable", "_drift")
        assert name.endswith(UNITS) or name.endswith(flags) or name in COUNT_NAMES, name
    for label in spec.labels:
        assert re.fullmatch(r"[a-z][a-z_]*", label) and label not in ("le", "quantile", "job", "instance")
    assert spec.help and not spec.help.endswith(".")


def test_every_sample_has_a_value_for_each_label_of_its_family() -> None:
    built = build_families(good_state(), NOW)
    assert [f.name for f in built] == list(METRICS)
    for family in built:
        for sample in family.samples:
            assert len(sample.labels) == len(family.spec.labels)
            assert all(isinstance(v, str) for v in sample.labels)


def test_a_label_value_count_that_does_not_match_is_refused() -> None:
    family = Family("vgpuctl_gpu_vgpus", METRICS["vgpuctl_gpu_vgpus"])
    with pytest.raises(ValueError, match="label values"):
        family.add(1, "c", "h")


# ------------------------------------------------------------------------------------------ what they say


def test_per_gpu_model_mode_framebuffer_and_vgpus() -> None:
    f = families(good_state())
    info = f["vgpuctl_gpu_info"]
    assert len(info.samples) == 3
    assert info.samples[0].labels == ("GPU-Cluster", "esx-01", "0000:3b:00.0", "NVIDIA A100-PCIE-40GB",
                                      "time-sliced", "sameSize", "")
    at = {"host": "esx-01", "gpu": "0000:3b:00.0"}
    assert values(f["vgpuctl_gpu_framebuffer_bytes"], **at) == [40 * GIB]
    assert values(f["vgpuctl_gpu_framebuffer_allocated_bytes"], **at) == [20 * GIB]
    assert values(f["vgpuctl_gpu_framebuffer_free_bytes"], **at) == [20 * GIB]
    assert values(f["vgpuctl_gpu_framebuffer_free_bytes"], host="esx-02") == [40 * GIB]
    assert values(f["vgpuctl_gpu_vgpus"], **at, profile="grid_a100-20c") == [1]
    assert values(f["vgpuctl_gpu_vgpus"], gpu="0000:af:00.0") == []
    assert len(f["vgpuctl_gpu_framebuffer_stranded_bytes"].samples) == 3
    assert BYTES_PER_GB == GIB


def test_stranded_framebuffer_is_status_s_figure_in_bytes() -> None:
    state = good_state()
    assert state.last is not None
    state.last.report.hosts[0].gpus[0].stranded_gb = 4.0
    f = families(state)
    assert values(f["vgpuctl_gpu_framebuffer_stranded_bytes"], host="esx-01", gpu="0000:3b:00.0") == [4 * GIB]


def test_utilization_figures_as_ratios_and_bytes() -> None:
    f = families(good_state())
    at = {"host": "esx-01", "gpu": "0000:3b:00.0"}
    assert values(f["vgpuctl_gpu_utilization_ratio"], **at) == [pytest.approx(0.40)]
    assert values(f["vgpuctl_gpu_utilization_peak_ratio"], **at) == [pytest.approx(0.90)]
    assert values(f["vgpuctl_gpu_memory_used_bytes"], **at) == [10 * GIB]
    assert values(f["vgpuctl_gpu_memory_used_ratio"], **at) == [pytest.approx(0.25)]
    assert values(f["vgpuctl_gpu_temperature_celsius"], **at) == [61]
    assert f["vgpuctl_gpu_power_watts"].samples == []  # the host lists no power counter: no series, not 0
    assert values(f["vgpuctl_gpu_utilization_ratio"], gpu="0000:af:00.0") == []  # no samples read: no series
    assert values(f["vgpuctl_usage_up"]) == [1] and values(f["vgpuctl_usage_age_seconds"]) == [30]
    assert values(f["vgpuctl_usage_window_seconds"]) == [300]


def test_per_host_manager_nvlink_leases_and_work_records() -> None:
    f = families(good_state())
    (manager,) = f["vgpuctl_host_vgpu_manager_info"].samples
    assert manager.labels == ("GPU-Cluster", "esx-01", "580.65.05", "580.82.02")
    assert [s.labels for s in f["vgpuctl_host_nvlink_info"].samples] == [("GPU-Cluster", "esx-01", "enabled", "")]
    assert values(f["vgpuctl_host_lease_held"], host="esx-01") == [0]
    assert values(f["vgpuctl_host_lease_held"], host="esx-02") == [1]
    assert [s.labels for s in f["vgpuctl_host_lease_info"].samples] == [("GPU-Cluster", "esx-02", "3f2a",
                                                                          "alice@ws")]
    assert values(f["vgpuctl_host_unfinished_work"], host="esx-02") == [1]
    assert values(f["vgpuctl_host_unfinished_work_vms"], host="esx-02") == [1]
    assert values(f["vgpuctl_host_unfinished_work"], host="esx-01") == [0]
    assert values(f["vgpuctl_host_work_record_unreadable"], host="esx-01") == [1]
    assert values(f["vgpuctl_host_work_record_unreadable"], host="esx-02") == [0]
    assert [s.labels[2:] for s in f["vgpuctl_host_info"].samples] == [("connected", "poweredOn", "shared")] * 2


def test_read_figures_and_counters() -> None:
    f = families(good_state())
    assert values(f["vgpuctl_up"]) == [1] and f["vgpuctl_read_error_info"].samples == []
    assert values(f["vgpuctl_read_age_seconds"]) == [30]
    assert values(f["vgpuctl_read_round_trips"]) == [9]
    assert values(f["vgpuctl_read_duration_seconds"]) == [0.4]
    assert values(f["vgpuctl_reads_total"]) == [3] and values(f["vgpuctl_read_failures_total"]) == [1]
    assert values(f["vgpuctl_read_interval_seconds"]) == [60]


def test_plan_counts_per_inventory() -> None:
    f = families(good_state())
    assert values(f["vgpuctl_plan_up"], inventory="inventory.yaml") == [1]
    assert values(f["vgpuctl_plan_drift"], inventory="inventory.yaml") == [1]
    assert values(f["vgpuctl_plan_changes"], kind="create") == [2]
    assert values(f["vgpuctl_plan_changes"], kind="maintenance") == [1]
    assert len(f["vgpuctl_plan_changes"].samples) == 8
    assert values(f["vgpuctl_plan_problems"], severity="warning") == [3]
    assert values(f["vgpuctl_plan_age_seconds"]) == [60]


def test_a_failed_plan_keeps_its_last_counts_and_says_why() -> None:
    state = good_state()
    failed = PlanState("inventory.yaml", state.plans[0].summary, True, NOW - 600, "inventory.yaml:3:5: bad\nmore")
    f = families(ExporterState(60.0, state.last, plans=(failed,), usage=state.usage))
    assert values(f["vgpuctl_plan_up"]) == [0]
    assert [s.labels for s in f["vgpuctl_plan_error_info"].samples] == [("inventory.yaml", "inventory.yaml:3:5: bad")]
    assert values(f["vgpuctl_plan_age_seconds"]) == [600]
    never = PlanState("other.yaml", None, False, None, "not planned yet")
    f = families(ExporterState(60.0, state.last, plans=(never,)))
    assert values(f["vgpuctl_plan_up"]) == [0] and f["vgpuctl_plan_changes"].samples == []


# ------------------------------------------------------------------------------------------ faults


def test_vcenter_down_gives_up_0_a_reason_and_no_stale_farm_series() -> None:
    state = good_state()
    down = ExporterState(60.0, state.last, "cannot connect to vCenter at https://vc:443/sdk: Connection refused",
                         reads=4, failures=2, usage=state.usage)
    f = families(down)
    assert values(f["vgpuctl_up"]) == [0]
    assert [s.labels for s in f["vgpuctl_read_error_info"].samples] == [
        ("cannot connect to vCenter at https://vc:443/sdk: Connection refused",)]
    assert values(f["vgpuctl_read_age_seconds"]) == [30]  # of the last good read
    for name in ("vgpuctl_gpu_info", "vgpuctl_gpu_framebuffer_free_bytes", "vgpuctl_host_info",
                 "vgpuctl_gpu_utilization_ratio", "vgpuctl_usage_up"):
        assert f[name].samples == [], name


def test_before_the_first_read_up_is_0_with_the_reason() -> None:
    f = families(ExporterState(60.0, error="the first read of vCenter has not finished yet"))
    assert values(f["vgpuctl_up"]) == [0]
    assert f["vgpuctl_read_age_seconds"].samples == [] and f["vgpuctl_gpu_info"].samples == []


def test_a_refused_counter_query_keeps_the_last_figures_with_their_age() -> None:
    state = good_state()
    assert state.usage is not None
    refused = UsageState(state.usage.gpus, 300.0, NOW - 200, "vCenter refused QueryPerf: NoPermission: denied")
    f = families(ExporterState(60.0, state.last, usage=refused))
    assert values(f["vgpuctl_usage_up"]) == [0]
    assert [s.labels for s in f["vgpuctl_usage_error_info"].samples] == [(refused.error,)]
    assert values(f["vgpuctl_usage_age_seconds"]) == [200]
    assert values(f["vgpuctl_gpu_utilization_ratio"], host="esx-01") == [pytest.approx(0.40)]
    never = UsageState({}, 300.0, None, "vCenter refused QueryPerf: NoPermission: denied")
    f = families(ExporterState(60.0, state.last, usage=never))
    assert values(f["vgpuctl_usage_up"]) == [0] and f["vgpuctl_usage_age_seconds"].samples == []
    assert f["vgpuctl_gpu_utilization_ratio"].samples == []


def test_a_reason_is_one_bounded_line() -> None:
    assert reason("first\nsecond") == "first"
    long = reason("x" * 1000)
    assert len(long) == 240 and long.endswith("...")
