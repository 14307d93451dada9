"""The Grafana dashboard shipped with `vgpuctl exporter` (dashboards/vgpuctl.json), built from the metric catalogue
(vgpuctl.reports.metrics.METRICS) so that every expression names metrics the exporter serves (a unit test checks
the committed file is this one). Regenerate: `python -m vgpuctl.reports.dashboard dashboards/vgpuctl.json`.

The JSON is Grafana's dashboard model (schemaVersion 39): a Prometheus data source variable, cluster and host
variables filled from vgpuctl_host_info, and rows of stat, time series and table panels.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from vgpuctl.lazyclass import dataclass

UID = "vgpuctl-farm"
SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'cluster=~"$cluster", host=~"$host"'  # the variables' selection, in every per-host expression


@dataclass(frozen=True)
class Panel:
    title: str
    kind: str  # stat, timeseries, table
    exprs: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    width: int = 6
    height: int = 5
    instant: bool = False


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    ("Exporter", (
        Panel("vCenter read", "stat", (("vgpuctl_up", "up"),), "bool_yes_no", 4),
        Panel("Age of the data", "stat", (("vgpuctl_read_age_seconds", "read"),
                                          ("vgpuctl_usage_age_seconds", "GPU counters")), "s", 5),
        Panel("Read duration", "timeseries", (("vgpuctl_read_duration_seconds", "duration"),), "s", 5),
        Panel("Round trips per read", "timeseries", (("vgpuctl_read_round_trips", "round trips"),), "short", 5),
        Panel("Failed reads", "timeseries", (("increase(vgpuctl_read_failures_total[1h])", "failed reads / 1h"),),
              "short", 5),
    )),
    ("Framebuffer", (
        Panel("Free framebuffer", "stat", ((f"sum(vgpuctl_gpu_framebuffer_free_bytes{{{SEL}}})", "free"),),
              "bytes"),
        Panel("Stranded framebuffer", "stat",
              ((f"sum(vgpuctl_gpu_framebuffer_stranded_bytes{{{SEL}}})", "stranded"),), "bytes"),
        Panel("Allocated framebuffer", "stat",
              ((f"sum(vgpuctl_gpu_framebuffer_allocated_bytes{{{SEL}}}) / "
                f"sum(vgpuctl_gpu_framebuffer_bytes{{{SEL}}})", "allocated"),), "percentunit"),
        Panel("vGPUs", "stat", ((f"sum(vgpuctl_gpu_vgpus{{{SEL}}})", "vGPUs"),), "short"),
        Panel("Free and stranded per cluster", "timeseries",
              ((f"sum by (cluster) (vgpuctl_gpu_framebuffer_free_bytes{{{SEL}}})", "free {{cluster}}"),
               (f"sum by (cluster) (vgpuctl_gpu_framebuffer_stranded_bytes{{{SEL}}})", "stranded {{cluster}}")),
              "bytes", 12, 8),
        Panel("vGPUs per profile", "timeseries",
              ((f"sum by (profile) (vgpuctl_gpu_vgpus{{{SEL}}})", "{{profile}}"),), "short", 12, 8),
    )),
    ("Utilization", (
        Panel("GPU utilization", "timeseries",
              ((f"vgpuctl_gpu_utilization_ratio{{{SEL}}}", "{{host}} {{gpu}}"),), "percentunit", 12, 8),
        Panel("GPU memory used", "timeseries",
              ((f"vgpuctl_gpu_memory_used_bytes{{{SEL}}}", "{{host}} {{gpu}}"),), "bytes", 12, 8),
        Panel("Idle GPUs holding vGPUs", "table",
              ((f"vgpuctl_gpu_utilization_peak_ratio{{{SEL}}} < 0.05 and on (host, gpu) "
                f"(sum by (host, gpu) (vgpuctl_gpu_vgpus{{{SEL}}}) > 0)", ""),), "percentunit", 12, 8, True),
        Panel("GPU temperature", "timeseries",
              ((f"vgpuctl_gpu_temperature_celsius{{{SEL}}}", "{{host}} {{gpu}}"),), "celsius", 12, 8),
    )),
    ("Hosts", (
        Panel("GPUs", "table", ((f"vgpuctl_gpu_info{{{SEL}}}", ""),), "short", 24, 8, True),
        Panel("vGPU Manager", "table", ((f"vgpuctl_host_vgpu_manager_info{{{SEL}}}", ""),), "short", 12, 8, True),
        Panel("NVLink", "table", ((f"vgpuctl_host_nvlink_info{{{SEL}}}", ""),), "short", 12, 8, True),
        Panel("Held leases", "stat", ((f"sum(vgpuctl_host_lease_held{{{SEL}}})", "held"),), "short"),
        Panel("Unfinished work records", "stat",
              ((f"sum(vgpuctl_host_unfinished_work{{{SEL}}})", "unfinished"),
               (f"sum(vgpuctl_host_work_record_unreadable{{{SEL}}})", "unreadable")), "short"),
        Panel("Hosts in maintenance", "stat", ((f"sum(vgpuctl_host_in_maintenance{{{SEL}}})", "hosts"),), "short"),
    )),
    ("Inventories", (
        Panel("Drift", "stat", (("vgpuctl_plan_drift", "{{inventory}}"),), "bool_yes_no"),
        Panel("Plan steps", "timeseries", (("sum by (inventory, kind) (vgpuctl_plan_changes) > 0",
                                            "{{inventory}} {{kind}}"),), "short", 12, 8),
        Panel("Plan problems", "stat", (('vgpuctl_plan_problems{severity="error"}', "{{inventory}}"),), "short"),
    )),
)


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    targets = [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend,
                "instant": panel.instant, "range": not panel.instant}
               for i, (expr, legend) in enumerate(panel.exprs)]
    out: dict[str, Any] = {
        "id": panel_id, "type": panel.kind, "title": panel.title, "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y}, "targets": targets,
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []}, "options": {},
    }
    if panel.kind == "table":
        out["transformations"] = [{"id": "labelsToFields", "options": {}}]
    return out


def _variable(name: str, query: str) -> dict[str, Any]:
    return {"name": name, "label": name, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": f"{name}-values"}, "definition": query, "refresh": 2,
            "includeAll": True, "multi": True, "allValue": ".*", "current": {}, "options": [], "sort": 1}


def _panels() -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = []
    y, next_id = 0, 1
    for title, row in ROWS:
        panels.append({"id": next_id, "type": "row", "title": title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        next_id, y, x, tallest = next_id + 1, y + 1, 0, 0
        for panel in row:
            if x + panel.width > 24:
                x, y, tallest = 0, y + tallest, 0
            panels.append(_panel(panel, next_id, x, y))
            next_id, x, tallest = next_id + 1, x + panel.width, max(tallest, panel.height)
        y += tallest
    return panels


def dashboard() -> dict[str, Any]:
    """The dashboard model."""
    datasource = {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
                  "current": {}, "options": [], "refresh": 1}
    return {
        "uid": UID, "title": "vgpuctl: vGPU farm", "tags": ["vgpuctl", "vgpu", "vsphere"], "editable": True,
        "schemaVersion": SCHEMA_VERSION, "version": 1, "refresh": "1m", "timezone": "browser",
        "time": {"from": "now-6h", "to": "now"}, "graphTooltip": 1,
        "annotations": {"list": []},
        "templating": {"list": [datasource, _variable("cluster", "label_values(vgpuctl_host_info, cluster)"),
                                _variable("host", 'label_values(vgpuctl_host_info{cluster=~"$cluster"}, host)')]},
        "panels": _panels(),
    }


def dashboard_text() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "dashboards/vgpuctl.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dashboard_text())
    print(target)
