"""`vgpuctl exporter` against gpusim: /metrics scraped over HTTP (the series per GPU and host, utilization from the
counters), a gpusim restart in the middle of a read (up 0 with the reason, then 1 again), a refused counter query
(the last good figures with their age), and a real Prometheus server scraping it (Debian's `prometheus`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gpusim import Gpusim

pytestmark = pytest.mark.sim

prometheus_client = pytest.importorskip("prometheus_client", reason="the exporter extra (prometheus_client)")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

H1, H2 = "esx-01.gpu.sim", "esx-02.gpu.sim"
GPU0 = "0000:3b:00.0"
GIB = 1024**3
PROMETHEUS = Path("/usr/bin/prometheus")
WAIT_S = 90.0  # a bound on waiting for a state, so that a broken exporter fails instead of hanging


def vm(name: str, host: str, profile: str) -> dict[str, Any]:
    return {"name": name, "host": host, "memory_mb": 8192, "memory_locked": True, "firmware": "efi",
            "vgpus": [profile], "power_on": True}


FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "assignment_policy": "consolidation", "vgpu_mode": "sameSize"}],
    "vms": [vm("busy-01", H1, "grid_a100-20c"), vm("small-01", H2, "grid_a100-10c")],
}
Series = dict[str, list[tuple[dict[str, str], float]]]


class Exporter:
    """A `vgpuctl exporter` process and its /metrics."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path, url: str):
        self.proc, self.log, self.url = proc, log, url

    def scrape(self) -> Series:
        with urllib.request.urlopen(self.url, timeout=10) as answer:
            text = answer.read().decode()
        out: Series = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.setdefault(s.name, []).append((dict(s.labels), s.value))
        return out

    def wait_for(self, what: str, check: Callable[[Series], bool]) -> Series:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            series = self.scrape()
            if check(series):
                return series
            time.sleep(0.2)
        raise AssertionError(f"waited {WAIT_S:.0f} s for {what}; last scrape: {series}\n{self.log.read_text()}")


def up(series: Series) -> float | None:
    return series["vgpuctl_up"][0][1] if "vgpuctl_up" in series else None


def value(series: Series, name: str, **labels: str) -> list[float]:
    return [v for lab, v in series.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]


def start_exporter(sim: Gpusim, tmp_path: Path, *args: str) -> Exporter:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    env |= sim.vgpuctl_env(esxi=False)
    log = tmp_path / "exporter.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "vgpuctl", "exporter", "--listen", "127.0.0.1:0",
                                 "--interval", "1s", "--usage-window", "2m", *args],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        m = re.search(r"serving metrics on (http://\S+/metrics)", log.read_text())
        if m:
            return Exporter(proc, log, m[1])
        assert proc.poll() is None, log.read_text()
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the exporter did not start:\n{log.read_text()}")


@pytest.fixture
def sim(gpusim_factory: Any) -> Gpusim:
    return gpusim_factory(FARM)


@pytest.fixture
def exporter(sim: Gpusim, tmp_path: Path) -> Iterator[Exporter]:
    ex = start_exporter(sim, tmp_path)
    yield ex
    ex.proc.terminate()
    assert ex.proc.wait(30) == 0, ex.log.read_text()  # SIGTERM: a clean exit


def test_metrics_per_gpu_and_host(sim: Gpusim, exporter: Exporter) -> None:
    s = exporter.wait_for("a good read with GPU figures", lambda s: up(s) == 1 and
                          bool(value(s, "vgpuctl_gpu_utilization_ratio")))
    assert len(s["vgpuctl_gpu_info"]) == 4
    (info,) = [lab for lab, _ in s["vgpuctl_gpu_info"] if lab["host"] == H1 and lab["gpu"] == GPU0]
    assert info["model"].startswith("NVIDIA A100") and info["mode"] == "time-sliced"
    assert info["vgpu_mode"] == "sameSize" and info["cluster"] == "GPU-Cluster"
    at = {"host": H1, "gpu": GPU0}
    assert value(s, "vgpuctl_gpu_framebuffer_bytes", **at) == [40 * GIB]
    assert value(s, "vgpuctl_gpu_framebuffer_allocated_bytes", **at) == [20 * GIB]
    assert value(s, "vgpuctl_gpu_framebuffer_free_bytes", **at) == [20 * GIB]
    assert value(s, "vgpuctl_gpu_framebuffer_stranded_bytes", **at) == [0]
    assert value(s, "vgpuctl_gpu_vgpus", **at, profile="grid_a100-20c") == [1]
    assert value(s, "vgpuctl_gpu_utilization_ratio", **at) == [pytest.approx(0.6)]  # gpusim's default pattern
    assert value(s, "vgpuctl_gpu_memory_used_bytes", **at) == [20 * GIB]
    assert value(s, "vgpuctl_usage_up") == [1] and value(s, "vgpuctl_usage_window_seconds") == [120]
    assert {lab["host"] for lab, _ in s["vgpuctl_host_info"]} == {H1, H2}
    assert value(s, "vgpuctl_host_lease_held", host=H1) == [0]
    assert value(s, "vgpuctl_host_unfinished_work", host=H1) == [0]
    assert [lab["version"] for lab, _ in s["vgpuctl_host_vgpu_manager_info"] if lab["host"] == H1]
    assert value(s, "vgpuctl_read_round_trips")[0] > 0
    assert value(s, "vgpuctl_reads_total")[0] >= 1 and value(s, "vgpuctl_read_failures_total") == [0]


def test_every_scrape_between_reads_is_served_from_one_read(sim: Gpusim, tmp_path: Path) -> None:
    ex = start_exporter(sim, tmp_path, "--interval", "1h")
    try:
        ex.wait_for("the first read", lambda s: up(s) == 1)
        queries = sim.perf()["queries"]
        reads = [value(ex.scrape(), "vgpuctl_reads_total")[0] for _ in range(20)]
        assert set(reads) == {1} and sim.perf()["queries"] == queries  # 20 scrapes, no read of vCenter
    finally:
        ex.proc.terminate()
        ex.proc.wait(30)


def test_a_gpusim_restart_in_the_middle_of_a_read(gpusim_factory: Any, sim: Gpusim, exporter: Exporter) -> None:
    exporter.wait_for("a good read", lambda s: up(s) == 1)
    hold = sim.hold("QueryPerf", "PerfMgr")
    deadline = time.monotonic() + WAIT_S
    while not any(h["id"] == hold and h["started"] for h in sim.holds()):
        assert time.monotonic() < deadline, sim.holds()
        time.sleep(0.1)
    host, port = sim.host_port
    sim.stop()  # the read waits on its QueryPerf: vCenter goes away under it
    down = exporter.wait_for("up 0", lambda s: up(s) == 0)
    (reason,) = [lab["reason"] for lab, _ in down["vgpuctl_read_error_info"]]
    assert reason and "Traceback" not in reason
    assert "vgpuctl_gpu_info" not in down and value(down, "vgpuctl_read_age_seconds")
    gpusim_factory(FARM, args=["-listen", f"{host}:{port}"])  # the same address again
    again = exporter.wait_for("up 1 again", lambda s: up(s) == 1)
    assert len(again["vgpuctl_gpu_info"]) == 4 and "vgpuctl_read_error_info" not in again
    assert value(again, "vgpuctl_read_failures_total")[0] >= 1
    log = exporter.log.read_text()
    assert "Traceback" not in log and log.count("reading vCenter failed") == 1  # one line, not one per read


def test_a_refused_counter_query_serves_the_last_figures_with_their_age(sim: Gpusim, exporter: Exporter) -> None:
    exporter.wait_for("GPU figures", lambda s: bool(value(s, "vgpuctl_gpu_utilization_ratio")))
    sim.arm_fault("PerfMgr", "QueryPerf", "NoPermission", count=1000,
                  message="Permission to perform this operation was denied.")
    s = exporter.wait_for("usage up 0", lambda s: value(s, "vgpuctl_usage_up") == [0])
    assert up(s) == 1  # the rest of the read is served
    (reason,) = [lab["reason"] for lab, _ in s["vgpuctl_usage_error_info"]]
    assert "QueryPerf" in reason and "NoPermission" in reason
    assert value(s, "vgpuctl_gpu_utilization_ratio", host=H1, gpu=GPU0) == [pytest.approx(0.6)]  # the last good
    first = value(s, "vgpuctl_usage_age_seconds")[0]
    older = exporter.wait_for("the figures to age", lambda s: value(s, "vgpuctl_usage_age_seconds")[0] > first + 1)
    assert value(older, "vgpuctl_usage_up") == [0]
    assert exporter.log.read_text().count("refused QueryPerf") == 1 and "Traceback" not in exporter.log.read_text()


def test_a_port_in_use_is_one_line(sim: Gpusim, exporter: Exporter) -> None:
    address = exporter.url.removeprefix("http://").removesuffix("/metrics")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    done = subprocess.run([sys.executable, "-m", "vgpuctl", "exporter", "--listen", address],
                          env=env | sim.vgpuctl_env(esxi=False), capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == f"error: --listen {address}: the address is in use"
    assert "Traceback" not in done.stderr


# ------------------------------------------------------------------------------------------ a real Prometheus


def prometheus_query(base: str, query: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        doc = json.loads(answer.read())
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


@pytest.mark.skipif(not PROMETHEUS.exists(), reason="Prometheus is not installed (/usr/bin/prometheus: Debian's "
                    "`prometheus` package, in scripts/guest-test-packages.txt)")
def test_a_real_prometheus_scrapes_the_exporter(exporter: Exporter, tmp_path: Path) -> None:
    import socket

    target = exporter.url.removeprefix("http://").removesuffix("/metrics")
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "vgpuctl", "static_configs": [{"targets": [target]}]}],
    }))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        web = f"127.0.0.1:{s.getsockname()[1]}"
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address={web}"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline, result = time.monotonic() + WAIT_S, []
        while time.monotonic() < deadline and not result:
            assert proc.poll() is None, log.read_text()[-3000:]
            with contextlib.suppress(OSError):  # Prometheus still starting
                result = prometheus_query(f"http://{web}", 'vgpuctl_gpu_framebuffer_bytes{job="vgpuctl"}')
            time.sleep(0.5)
        assert len(result) == 4, log.read_text()[-3000:]
        assert {r["metric"]["host"] for r in result} == {H1, H2}
        assert {float(r["value"][1]) for r in result} == {40.0 * GIB}
        (up_now,) = prometheus_query(f"http://{web}", 'vgpuctl_up{job="vgpuctl"}')
        assert float(up_now["value"][1]) == 1
    finally:
        proc.terminate()
        proc.wait(30)


def test_an_inventory_s_plan_counts_are_served(sim: Gpusim, tmp_path: Path) -> None:
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms:\n"
                         "  - {name: busy-01, vgpus: {profile: grid_a100-10c}, power: restart}\n")
    ex = start_exporter(sim, tmp_path, "-f", str(inventory), "--plan-interval", "1s")
    try:
        s = ex.wait_for("a plan", lambda s: value(s, "vgpuctl_plan_up") == [1])
        at = {"inventory": str(inventory)}
        assert value(s, "vgpuctl_plan_drift", **at) == [1]
        assert value(s, "vgpuctl_plan_changes", **at, kind="change") == [1]
        assert value(s, "vgpuctl_plan_changes", **at, kind="power_off") == [1]  # a running VM changes vGPUs
        assert value(s, "vgpuctl_plan_problems", **at, severity="error") == [0]
        inventory.write_text("apiVersion: vgpuctl/v1\nvms: [\n")  # edited into something invalid: read again
        s = ex.wait_for("the plan to fail", lambda s: value(s, "vgpuctl_plan_up") == [0])
        (reason,) = [lab["reason"] for lab, _ in s["vgpuctl_plan_error_info"]]
        assert reason.startswith(f"{inventory}:") and value(s, "vgpuctl_plan_drift", **at) == [1]  # the last counts
        assert up(s) == 1 and "Traceback" not in ex.log.read_text()
    finally:
        ex.proc.terminate()
        ex.proc.wait(30)
