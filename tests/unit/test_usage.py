"""GPU usage: the window vCenter answers a duration from, the counters read and their levels, the per-GPU figures,
and the idle rule case by case from tests/fixtures/usage/idle-cases.yaml."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from perfseries import COUNTERS, INTERVALS, observed_for, series, usage_read, window_of
from typer.testing import CliRunner

from vgpuctl.cli.main import app
from vgpuctl.domain import ConnectionState
from vgpuctl.errors import UsageError
from vgpuctl.farm.usage import (
    gpu_usage,
    hosts_to_read,
    judge_vms,
    match_instance,
    parse_percent,
    parse_since,
    pci_key,
)
from vgpuctl.model import ObservedGpu, ObservedHost
from vgpuctl.records.perf import (
    REALTIME,
    CounterInfo,
    PerfCatalog,
    StatsInterval,
    WindowTooLong,
    choose_window,
    level_warning,
    wanted_counters,
)
from vgpuctl.reports.usage import idle_report
from vgpuctl.vsphere import perf
from vgpuctl.vsphere.perf import _series

pytestmark = pytest.mark.unit

CASES = yaml.safe_load((Path(__file__).parents[1] / "fixtures" / "usage" / "idle-cases.yaml").read_text())["cases"]


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("12h", 43200),
                                               ("7d", 604800), ("2w", 1209600), (" 1.5h ", 5400)])
def test_since_takes_durations(text: str, seconds: float) -> None:
    assert parse_since(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "-1h", "0", "0d", "1y", "abc", "1h30m"])
def test_since_refuses_what_is_no_duration_in_one_line(text: str) -> None:
    with pytest.raises(UsageError, match=r"^--since .*: expected a duration such as 30m, 12h or 7d$"):
        parse_since(text)


@pytest.mark.parametrize(("text", "percent"), [("5%", 5), ("5", 5), ("0", 0), ("100%", 100), ("0.5%", 0.5)])
def test_below_takes_percentages(text: str, percent: float) -> None:
    assert parse_percent(text) == percent


@pytest.mark.parametrize("text", ["150%", "-5%", "five", "5%%", "", "100.1"])
def test_below_refuses_what_is_no_percentage_in_one_line(text: str) -> None:
    with pytest.raises(UsageError, match=r"^--below .*: expected a percentage from 0 to 100, such as 5%$"):
        parse_percent(text)


# ------------------------------------------------------------------------------------------ the window


@pytest.mark.parametrize(("seconds", "interval", "sampling"), [
    (None, "realtime", 20), (1800, "realtime", 20), (3600, "realtime", 20), (7200, "Past Day", 300),
    (86400, "Past Day", 300), (604800, "Past Week", 1800), (8 * 86400, "Past Month", 7200),
    (365 * 86400, "Past Year", 86400)])
def test_the_finest_interval_that_keeps_the_window(seconds: float | None, interval: str, sampling: int) -> None:
    window = choose_window(seconds, INTERVALS)
    assert (window.interval.name, window.interval.sampling_s) == (interval, sampling)
    assert window.seconds == (seconds or 3600)


def test_a_window_longer_than_vcenter_keeps_is_refused() -> None:
    with pytest.raises(WindowTooLong, match="at most 365d"):
        choose_window(2 * 365 * 86400, INTERVALS)


def test_a_disabled_interval_is_skipped() -> None:
    intervals = (StatsInterval("Past Day", 300, 86400, 4, enabled=False), *INTERVALS[1:])
    assert choose_window(7200, intervals).interval.name == "Past Week"


def test_realtime_reads_averages_a_historical_interval_also_utilizations_maximum() -> None:
    catalog = PerfCatalog(tuple(COUNTERS.values()), INTERVALS)
    realtime = [c.full_name for c in wanted_counters(catalog, choose_window(None, INTERVALS))]
    week = [c.full_name for c in wanted_counters(catalog, choose_window(604800, INTERVALS))]
    assert "gpu.utilization.maximum" not in realtime and "gpu.utilization.average" in realtime
    assert set(week) - set(realtime) == {"gpu.utilization.maximum"}
    assert len(realtime) == 5  # utilization, mem.used, mem.usage, temperature, power.used


def test_a_counter_vcenter_does_not_list_is_not_asked_for() -> None:
    catalog = PerfCatalog((COUNTERS["utilization.average"],), INTERVALS)
    assert [c.full_name for c in wanted_counters(catalog, choose_window(None, INTERVALS))] == [
        "gpu.utilization.average"]


def test_a_level_below_the_counters_is_one_warning_naming_the_level_to_set() -> None:
    window = choose_window(604800, INTERVALS)
    warning = level_warning(COUNTERS.values(), window)
    assert warning is not None and "statistics level 4" in warning and "Past Week" in warning
    assert "runs at level 1" in warning and "set that interval's statistics level to 4" in warning
    at_four = window_of({"name": "Past Week", "sampling_s": 1800, "length_s": 604800, "level": 4})
    assert level_warning(COUNTERS.values(), at_four) is None
    assert level_warning(COUNTERS.values(), choose_window(None, INTERVALS)) is None  # realtime: every level


def test_percent_samples_are_hundredths_and_minus_one_is_no_data() -> None:
    util, mem = COUNTERS["utilization.average"], COUNTERS["mem.used.average"]
    assert util.scaled(2067) == 20.67 and mem.scaled(2067) == 2067.0
    assert util.scaled(-1) is None
    assert CounterInfo(1, "utilization", "average", "percent", 4).full_name == "gpu.utilization.average"


# ------------------------------------------------------------------------------------------ per GPU


def test_gpu_instances_are_matched_by_pci_address_never_guessed() -> None:
    host = ObservedHost("esx-01", gpus=[ObservedGpu("0000:3b:00.0", "A100"), ObservedGpu("0000:3c:00.0", "A100")])
    assert match_instance("0000:3b:00.0", host) == "0000:3b:00.0"
    assert match_instance("000:03b:00.0", host) == "0000:3b:00.0"  # other zero padding
    assert match_instance("3c:00.0", host) == "0000:3c:00.0"
    assert match_instance("gpu1", host) is None and match_instance("0000:5e:00.0", host) is None
    assert pci_key("0000:3B:00.0") == pci_key("0000:3b:00.0") == (0, 0x3B, 0, 0)


def test_figures_per_gpu_in_the_counters_units() -> None:
    window = window_of("realtime")
    gpu = {"host": "esx-01", "gpu": "0000:3b:00.0", "vms": ["a"],
           "series": {"utilization.average": "90 x 10, 90 x 30", "mem.used.average": "180 x 20971520",
                      "mem.usage.average": "180 x 50", "temperature.average": "179 x 40, 1 x 71",
                      "power.used.average": "180 x 200"}}
    figures = gpu_usage(observed_for([gpu]), usage_read(window, [gpu]))
    u = figures.gpus["esx-01", "0000:3b:00.0"]
    assert (u.util_avg, u.util_max, u.peak_from, u.samples, u.covered) == (20, 30, "average", 180, True)
    assert (u.mem_used_gb, u.mem_usage_avg, u.temperature_max, u.power_avg) == (20, 50, 71, 200)


def test_an_instance_no_gpu_matches_is_left_out_and_named() -> None:
    gpu = {"host": "esx-01", "gpu": "0000:3b:00.0", "instance": "gpu-1", "vms": ["a"],
           "series": {"utilization.average": "180 x 0"}}
    figures = gpu_usage(observed_for([gpu]), usage_read(window_of("realtime"), [gpu]))
    assert figures.gpus == {} and figures.unmatched == {"esx-01": ["gpu-1"]}
    (judgement,) = judge_vms(observed_for([gpu]), figures, 5)
    assert not judgement.idle and judgement.why is not None and "gpu-1" in judgement.why


# ------------------------------------------------------------------------------------------ the idle rule


def _verdict(j: Any) -> str:
    return "idle" if j.idle else ("busy" if j.judged else f"unjudged: {j.why}")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_idle_rule(case: dict[str, Any]) -> None:
    window = window_of(case["window"], case.get("seconds"))
    observed = observed_for(case["gpus"])
    judged = {j.vm: _verdict(j) for j in judge_vms(observed, gpu_usage(observed, usage_read(window, case["gpus"])),
                                                   case["below"])}
    for vm, want in case["expect"].items():
        if want.startswith("unjudged:"):
            assert judged[vm].startswith("unjudged:") and want.split(":", 1)[1].strip() in judged[vm], judged[vm]
        else:
            assert judged[vm] == want, (vm, judged[vm])


def test_a_powered_off_vm_graphics_info_still_names_holds_nothing() -> None:
    gpu = {"host": "esx-01", "gpu": "0000:3b:00.0", "vms": ["gone-01"], "series": {"utilization.average": "180 x 0"}}
    observed = observed_for([gpu])
    observed.vms["gone-01"].power_state = "poweredOff"
    assert judge_vms(observed, gpu_usage(observed, usage_read(window_of("realtime"), [gpu])), 5) == []


def test_the_idle_report_lists_idle_vms_with_framebuffer_and_who_shares_their_gpu() -> None:
    gpus = [{"host": "esx-01", "gpu": "0000:3b:00.0", "vms": ["share-a", "share-b"],
             "series": {"utilization.average": "180 x 1"}},
            {"host": "esx-01", "gpu": "0000:3c:00.0", "vms": ["busy-01"],
             "series": {"utilization.average": "180 x 80"}},
            {"host": "esx-02", "gpu": "0000:3b:00.0", "vms": ["new-01"], "series": {"utilization.average": "9 x 0"}}]
    observed = observed_for(gpus)
    read = usage_read(window_of("realtime"), gpus)
    figures = gpu_usage(observed, read)
    report = idle_report(judge_vms(observed, figures, 5), figures, read, 5)
    assert [v.vm for v in report.idle] == ["share-a", "share-b"]
    assert report.idle_fb_gb == 40 and report.idle[0].fb_gb == 20
    assert report.idle[0].gpus[0].shared_with == ["share-b"]
    assert report.judged == 3 and [u.vm for u in report.not_judged] == ["new-01"]
    text = report.render_text()
    assert "2 of 3 judged, 40 GB of framebuffer" in text and "busy-01" not in text
    assert "not judged: new-01 on esx-02" in text


def test_a_refused_query_is_a_warning_with_the_faults_type() -> None:
    read = usage_read(window_of("realtime"), [])
    read.refused = "vCenter refused QueryPerf: vim.fault.NoPermission: denied"
    observed = observed_for([{"host": "esx-01", "gpu": "0000:3b:00.0", "vms": ["a"]}])
    figures = gpu_usage(observed, read)
    report = idle_report(judge_vms(observed, figures, 5), figures, read, 5)
    assert report.warnings == ["GPU usage not read: vCenter refused QueryPerf: vim.fault.NoPermission: denied"]
    assert report.idle == [] and report.not_judged[0].vm == "a"


def test_series_times_end_at_the_newest_sample() -> None:
    s = series("esx-01", "0000:3b:00.0", "utilization.average", [1.0, 2.0], window_of("realtime"))
    assert s.times[1] - s.times[0] == REALTIME.sampling_s


@pytest.mark.parametrize(("args", "line"), [
    (["status", "--usage", "--since", "a week"], "error: --since 'a week': expected a duration such as 30m, 12h or 7d"),
    (["report", "idle", "--since", "7days"], "error: --since '7days': expected a duration such as 30m, 12h or 7d"),
    (["report", "idle", "--below", "150%"], "error: --below '150%': expected a percentage from 0 to 100, such as 5%"),
])
def test_bad_input_is_one_line_and_exit_1_before_any_connection(args: list[str], line: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VGPUCTL_URL", "GOVC_URL"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [line]


def test_a_refused_counter_list_ends_the_read_with_the_faults_type(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyVmomi import vim

    def refuse(session: Any) -> Any:
        raise vim.fault.NoPermission(msg="Permission to perform this operation was denied.")

    monkeypatch.setattr(perf, "read_catalog", refuse)
    read = perf.read_gpu_usage(None, {"esx-01": "host-1"}, None)  # type: ignore[arg-type]
    assert read.refused == ("vCenter refused reading the counters: vim.fault.NoPermission: "
                            "Permission to perform this operation was denied.")
    assert (read.series, read.queries, read.window.interval) == ([], 0, REALTIME)


def test_a_read_asks_about_the_connected_hosts_with_gpus() -> None:
    observed = observed_for([{"host": h, "gpu": "0000:3b:00.0", "vms": []} for h in ("esx-01", "esx-02")])
    observed.hosts["esx-03"] = ObservedHost("esx-03", moid="host-3")  # no GPU
    for name, h in observed.hosts.items():
        h.moid = h.moid or f"moid-{name}"
    observed.hosts["esx-02"].connection_state = ConnectionState.DISCONNECTED
    assert hosts_to_read(observed) == {"esx-01": "moid-esx-01"}


def metric_xml(body: str) -> ET.Element:
    return ET.fromstring(f'<returnval xmlns="urn:vim25"><entity type="HostSystem">host-1</entity>{body}</returnval>')


def test_a_hosts_answer_is_read_in_csv_and_as_sample_elements() -> None:
    util, mem = COUNTERS["utilization.average"], COUNTERS["mem.used.average"]
    csv = metric_xml(
        "<sampleInfoCSV>20,2026-12-01T10:00:00Z,20,2026-12-01T10:00:20Z</sampleInfoCSV>"
        f"<value><id><counterId>{util.key}</counterId><instance>0000:3b:00.0</instance></id><value>2067,-1</value></value>"
        f"<value><id><counterId>{util.key}</counterId><instance></instance></id><value>2067,2067</value></value>"
        f"<value><id><counterId>{mem.key}</counterId><instance>0000:3b:00.0</instance></id><value>1024,2048</value></value>")
    got = list(_series(csv, {"host-1": "esx-01"}, [util, mem]))
    assert [(s.host, s.instance, s.counter.name, s.values) for s in got] == [
        ("esx-01", "0000:3b:00.0", "utilization", (20.67, None)),  # hundredths; -1 is no data; "" the aggregate
        ("esx-01", "0000:3b:00.0", "mem.used", (1024.0, 2048.0))]
    assert got[0].times[1] - got[0].times[0] == 20
    elements = metric_xml(
        "<sampleInfo><timestamp>2026-12-01T10:00:00Z</timestamp><interval>20</interval></sampleInfo>"
        "<sampleInfo><timestamp>2026-12-01T10:00:20Z</timestamp><interval>20</interval></sampleInfo>"
        f"<value><id><counterId>{util.key}</counterId><instance>0000:3b:00.0</instance></id>"
        "<value>500</value><value>700</value></value>")
    (s,) = _series(elements, {"host-1": "esx-01"}, [util])
    assert s.values == (5.0, 7.0) and len(s.times) == 2
    assert list(_series(elements, {"host-9": "esx-09"}, [util])) == []  # a host not asked about
