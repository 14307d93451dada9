"""GPU usage against gpusim's PerformanceManager: `status --usage` and `report idle` over series set through the
control endpoint (busy and idle GPUs, a shared GPU, a short peak only the maximum rollup keeps), the statistics
level warning, a refused QueryPerf, and the round trips of a bulk read (a fixed number of QueryPerf calls
whatever the number of GPUs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from gpusim import Gpusim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

H1, H2, H3 = "esx-01.gpu.sim", "esx-02.gpu.sim", "esx-03.gpu.sim"
GPU0 = "0000:3b:00.0"
DAY = 86400
SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def vm(name: str, host: str, profile: str) -> dict[str, Any]:
    return {"name": name, "host": host, "memory_mb": 8192, "memory_locked": True, "firmware": "efi",
            "vgpus": [profile], "power_on": True}


FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 3, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "assignment_policy": "consolidation", "vgpu_mode": "sameSize"}],
    "vms": [vm("busy-01", H1, "grid_a100-20c"), vm("idle-01", H2, "grid_a100-10c"),
            vm("share-a", H3, "grid_a100-10c"), vm("share-b", H3, "grid_a100-10c")],
}
# idle-01's GPU: 1% for nine days. The GPU share-a and share-b share: 2%, but 12% for five minutes two days ago,
# which a 30-minute average hides (3.7%) and the maximum rollup keeps. busy-01's GPU: the default pattern (60%).
SERIES = [
    {"host": H2, "gpu": GPU0, "counter": "utilization", "points": [{"ago_s": 9 * DAY, "value": 1}]},
    {"host": H3, "gpu": GPU0, "counter": "utilization",
     "points": [{"ago_s": 9 * DAY, "value": 2}, {"ago_s": 2 * DAY, "value": 12}, {"ago_s": 2 * DAY - 300, "value": 2}]},
]


@pytest.fixture
def sim(gpusim_factory: Any) -> Gpusim:
    sim = gpusim_factory(FARM)
    sim.set_perf(SERIES)
    return sim


@pytest.fixture
def env(sim: Gpusim, no_vgpuctl_env: None) -> dict[str, str]:
    return sim.vgpuctl_env(esxi=False)


def vgpuctl(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def document(result: Any, kind: str) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, json.loads((SCHEMAS / f"{kind}.schema.json").read_text()))
    return dict(doc)


def gpu_of(doc: dict[str, Any], host: str, pci: str = GPU0) -> dict[str, Any]:
    h = next(h for h in doc["hosts"] if h["host"] == host)
    return dict(next(g for g in h["gpus"] if g["gpu"] == pci))


def test_status_usage_shows_busy_and_idle_gpus_over_the_last_hour(sim: Gpusim, env: dict[str, str]) -> None:
    doc = document(vgpuctl(env, "status", "--usage", "-o", "json"), "status")
    assert doc["usage_window"] == {"seconds": 3600, "interval": "realtime", "sampling_s": 20}
    busy, idle = gpu_of(doc, H1)["usage"], gpu_of(doc, H2)["usage"]
    assert (busy["util_avg"], busy["util_max"], busy["mem_used_gb"], busy["covered"]) == (60, 60, 20, True)
    assert (idle["util_avg"], idle["util_max"], idle["mem_used_gb"], idle["samples"]) == (1, 1, 10, 180)
    assert gpu_of(doc, H1, "0000:3c:00.0")["usage"]["util_max"] == 0  # no vGPU: the default pattern's idle GPU
    text = vgpuctl(env, "status", "--usage", "--since", "30m")
    assert text.exit_code == 0, text.output
    assert "usage 60/60% 20 GB" in text.output and "usage 1/1% 10 GB" in text.output
    assert "over the last 30m (realtime, 20s samples)" in text.output
    assert "cluster GPU-Cluster  hosts 3  gpus 6  free/stranded GB 190/0" in text.output  # 240 - 20 - 10 - 2 x 10
    assert "usage" not in gpu_of(document(vgpuctl(env, "status", "-o", "json"), "status"), H1)  # only with --usage


def test_report_idle_over_a_week(sim: Gpusim, env: dict[str, str]) -> None:
    sim.set_perf(statistics_level=4)  # vCenter keeps the gpu counters in its intervals only at level 4
    doc = document(vgpuctl(env, "report", "idle", "--since", "7d", "--below", "5%", "-o", "json"), "idle")
    assert doc["window"] == {"seconds": 604800, "interval": "Past Week", "sampling_s": 1800}
    assert [v["vm"] for v in doc["idle"]] == ["idle-01"]
    (idle,) = doc["idle"]
    assert idle["fb_gb"] == 10 and idle["vgpus"] == [{"profile": "grid_a100-10c", "count": 1}]
    assert idle["gpus"] == [{"host": H2, "gpu": GPU0, "util_avg": 1, "util_max": 1, "peak_from": "maximum",
                             "shared_with": []}]
    assert doc["judged"] == 4 and doc["not_judged"] == [] and doc["warnings"] == []
    # the five-minute peak: below 5% in the averages, caught by the maximum rollup
    text = vgpuctl(env, "report", "idle", "--since", "7d", "--below", "13%")
    assert text.exit_code == 0, text.output
    assert "share-a" in text.output and "shared with share-b" in text.output and "busy-01" not in text.output
    assert "3 of 4 judged, 30 GB of framebuffer" in text.output


def test_a_statistics_level_below_the_gpu_counters_is_one_warning(sim: Gpusim, env: dict[str, str]) -> None:
    result = vgpuctl(env, "report", "idle", "--since", "1d")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stdout.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "statistics level 4" in warnings[0] and "Past Day" in warnings[0]
    assert "not judged: idle-01" in result.output  # nothing read: nobody is called idle
    assert sim.perf()["queries"] == 0  # no counter the interval keeps: nothing to ask


def test_a_refused_counter_query_is_a_warning_and_status_still_shows(sim: Gpusim, env: dict[str, str]) -> None:
    sim.arm_fault("PerfMgr", "QueryPerf", "NoPermission", message="Permission to perform this operation was denied.")
    result = vgpuctl(env, "status", "--usage")
    assert result.exit_code == 0, result.output
    assert f"host {H1}" in result.output and "vm busy-01" in result.output
    (line,) = [line for line in result.output.splitlines() if "GPU usage not read" in line]
    assert "vim.fault.NoPermission" in line and "QueryPerf" in line
    assert "usage -" in result.output  # each GPU: nothing read
    sim.arm_fault("PerfMgr", "QueryPerf", "NoPermission", message="Permission to perform this operation was denied.")
    doc = document(vgpuctl(env, "report", "idle", "--since", "30m", "-o", "json"), "idle")
    assert doc["idle"] == [] and doc["judged"] == 0  # nothing read: nobody is called idle
    assert {v["vm"] for v in doc["not_judged"]} == {"busy-01", "idle-01", "share-a", "share-b"}
    (warning,) = doc["warnings"]
    assert warning.startswith("GPU usage not read: vCenter refused QueryPerf: vim.fault.NoPermission: Permission")


def test_a_window_longer_than_vcenter_keeps_is_one_line(env: dict[str, str]) -> None:
    result = vgpuctl(env, "report", "idle", "--since", "800d")
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == ["error: --since 800d: vCenter keeps statistics for at most 365d"]
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("hosts_per_query", "queries"), [(32, 1), (2, 3)])
def test_one_usage_read_is_a_fixed_number_of_queryperf_calls(
    gpusim_factory: Any, no_vgpuctl_env: None, monkeypatch: pytest.MonkeyPatch, hosts_per_query: int, queries: int
) -> None:
    sim = gpusim_factory({**FARM, "vms": [], "clusters": [{**FARM["clusters"][0], "hosts": 6, "gpus_per_host": 4}]})
    monkeypatch.setattr("vgpuctl.vsphere.perf.HOSTS_PER_QUERY", hosts_per_query)
    doc = document(vgpuctl(sim.vgpuctl_env(esxi=False), "status", "--usage", "-o", "json"), "status")
    assert sum(1 for h in doc["hosts"] for g in h["gpus"] if g["usage"]["covered"]) == 24
    perf = sim.perf()
    assert (perf["queries"], perf["specs"]) == (queries, 6)  # one spec per host, every GPU and counter in it


# One GPU per cluster, in each mode: a mixed-size GPU holding one A100-8C (its placement ids leave 2 GB no offered
# size reaches), a MIG GPU whose seven 1g instances leave the eighth memory slice no instance placement fits, and
# a same-size GPU whose A100-5C leaves 35 GB seven more A100-5C use.
MODES_FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": name, "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "assignment_policy": "performance", **mode}
                 for name, mode in (("Mixed", {"vgpu_mode": "mixedSize"}), ("Mig", {"mig": True}),
                                    ("Same", {"vgpu_mode": "sameSize"}))],
    "vms": [vm("mixed-8c", H1, "grid_a100-8c"), *(vm(f"mig-1g-{i}", H2, "grid_a100-1-5c") for i in range(7)),
            vm("same-5c", H3, "grid_a100-5c")],
}


def test_stranded_framebuffer_per_mode_in_status_and_capacity(gpusim_factory: Any, no_vgpuctl_env: None) -> None:
    env = gpusim_factory(MODES_FARM).vgpuctl_env(esxi=False)
    status = document(vgpuctl(env, "status", "-o", "json"), "status")
    assert {h["host"]: (h["free_gb"], h["stranded_gb"]) for h in status["hosts"]} == {
        H1: (32, 2), H2: (5, 5), H3: (35, 0)}
    assert gpu_of(status, H1)["stranded_why"] == "no offered size fits the gap"
    assert gpu_of(status, H2)["stranded_why"] == "MIG slots that no instance placement fits"
    assert "stranded_gb" not in gpu_of(status, H3)
    assert [(c["cluster"], c["free_gb"], c["stranded_gb"]) for c in status["clusters"]] == [
        ("Mig", 5, 5), ("Mixed", 32, 2), ("Same", 35, 0)]
    capacity = document(vgpuctl(env, "-o", "json", "capacity"), "capacity")
    assert {h["host"]: (h["free_gb"], h["stranded_gb"]) for h in capacity["hosts"]} == {
        H1: (32, 2), H2: (5, 5), H3: (35, 0)}
    assert [(c["cluster"], c["free_gb"], c["stranded_gb"]) for c in capacity["stranded_clusters"]] == [
        ("Mig", 5, 5), ("Mixed", 32, 2), ("Same", 35, 0)]
    text = vgpuctl(env, "status")
    assert text.exit_code == 0, text.output
    assert "cluster Mixed  hosts 1  gpus 1  free/stranded GB 32/2" in text.output
