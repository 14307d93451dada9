"""The pages and the run history against gpusim: `status --html` and `show PLANFILE --html` opened in a real
headless chromium at a phone's width and at 1,920 px (screenshots kept as artifacts, tests/browser.py, their paths
printed), checked for what they must show and for console errors; `runs` and `runs show` after a plan and an
apply; a history folder that cannot be written; the history's bound; no secret in a record."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from browser import WIDTHS, Opened, chromium_or_skip, open_page, screenshots_folder
from typer.testing import CliRunner

from vgpuctl import pipeline
from vgpuctl.cli.main import app
from vgpuctl.records.work import WORK_FIELD
from vgpuctl.vsphere.session import ConnectionSettings, open_session
from vgpuctl.vsphere.workrecord import Fields, Lease

pytestmark = pytest.mark.sim

H1, H2 = "esx-01.gpu.sim", "esx-02.gpu.sim"
HOSTILE = "<img src=x onerror=alert(1)>-vm"  # vCenter keeps '/' out of names: no closing tag
FARM = {
    "datacenter": "DC0",
    "username": "vgpu-admin",
    "password": "Sim-Secret-4821",
    "reboot_seconds": 0.3,
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "pairs",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [
        {"name": "train-01", "host": H1, "cpus": 8, "memory_mb": 16384, "firmware": "efi",
         "vgpus": ["grid_a100-20c"], "memory_locked": True, "power_on": True},
        {"name": "web-01", "host": H1, "cpus": 2, "memory_mb": 4096, "power_on": True},
        {"name": HOSTILE, "host": H2, "cpus": 4, "memory_mb": 8192, "firmware": "efi",
         "vgpus": ["grid_a100-20c"], "memory_locked": True, "power_on": True},
    ],
}  # fmt: skip
# both hosts change their scheduler one at a time (two waves: maintenance, reboot, VMs powered off and on again)
INVENTORY = """apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
hosts:
  - cluster: GPU-Cluster
    scheduler: equal-share
    maintenance: {evacuate: power-off, max_unavailable: 1}
vms:
  - name: train-01
    vgpus: {profile: grid_a100-40c}
    power: restart
  - name: new-01
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    cpus: 4
    memory_gb: 8
    vgpus: {profile: grid_a100-10c}
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any], no_vgpuctl_env: None) -> Any:
    return gpusim_factory(FARM)


@pytest.fixture
def chromium() -> str:
    return chromium_or_skip()


def vgpuctl(sim: Any, state: Path, *args: str, **env: str) -> Any:
    return CliRunner().invoke(app, list(args), env={**sim.vgpuctl_env(), "XDG_STATE_HOME": str(state), **env})


def opened(chromium: str, page: Path, out: Path) -> list[Opened]:
    """The page at each width; none may log a console error."""
    shown = [open_page(chromium, page, width, out) for width in WIDTHS]
    for one in shown:
        assert one.console_errors() == [], (one.width, one.console_errors())
        assert not {"img", "script"} & tags(one.dom)  # the hostile name stayed text
    return shown


def tags(dom: str) -> set[str]:
    found: set[str] = set()

    class Tags(HTMLParser):
        def handle_starttag(self, tag: str, attrs: Any) -> None:
            found.add(tag)

    Tags().feed(dom)
    return found


def elements(dom: str, attribute: str) -> list[str]:
    return re.findall(rf'{attribute}="([^"]*)"', dom)


def test_status_page_in_a_browser(chromium: str, sim: Any, tmp_path: Path) -> None:
    screens = screenshots_folder(tmp_path, "status")
    settings = ConnectionSettings(sim.url, sim.username, sim.password, insecure=True)
    with open_session(settings) as session:
        observed = pipeline.observe(session, "DC0")
        record = '{"run": "gone-run-3", "phase": "reboot", "entered_maintenance": true}'
        Fields(session).set(observed.hosts[H2].moid, WORK_FIELD, record)
        lease = Lease(Fields(session), H1, observed.hosts[H1].moid, "other-run-7", ttl_s=600).acquire()
        try:
            page = tmp_path / "status.html"
            result = vgpuctl(sim, tmp_path / "state", "status", "--no-vm-classes", "--usage", "--html", str(page))
        finally:
            lease.release()
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and f"Wrote {page}" in result.stderr
    doc = json.loads(vgpuctl(sim, tmp_path / "state", "-o", "json", "status", "--no-vm-classes").stdout)
    for shown in opened(chromium, page, screens):
        assert elements(shown.dom, "data-host") == [H1, H2]
        assert len(elements(shown.dom, "data-gpu")) == sum(len(h["gpus"]) for h in doc["hosts"]) == 4
        assert elements(shown.dom, "data-nvlink") == ["0", "0"]  # one pair per host
        assert elements(shown.dom, "data-held") == ["other-run-7"] and elements(shown.dom, "data-work") == [
            "gone-run-3"]
        assert "train-01" in shown.dom and "grid_a100-20c" in shown.dom
        assert "&lt;img src=x onerror=alert(1)&gt;-vm" in shown.dom
        assert 'style="width: 50%"' in shown.dom  # a 20 GB vGPU on a 40 GB GPU
        # usage read: every GPU coloured by its average utilization (gpusim's default: 60% with vGPUs, else 0%)
        assert len(re.findall(r'class="gpu heat\d"', shown.dom)) == 4 and "average utilization" in shown.dom


def test_plan_page_runs_and_runs_show_after_a_plan_and_an_apply(chromium: str, sim: Any, tmp_path: Path) -> None:
    screens = screenshots_folder(tmp_path, "plan-and-run")
    state = tmp_path / "state"
    inventory, saved, page = tmp_path / "inv.yaml", tmp_path / "t.plan", tmp_path / "plan.html"
    inventory.write_text(INVENTORY)
    planned = vgpuctl(sim, state, "plan", "-f", str(inventory), "--out", str(saved))
    assert planned.exit_code == 0, planned.output
    plan = json.loads(vgpuctl(sim, state, "-o", "json", "show", str(saved)).stdout)
    shown = vgpuctl(sim, state, "show", str(saved), "--html", str(page))
    assert shown.exit_code == 0, shown.output
    for view in opened(chromium, page, screens):
        assert elements(view.dom, "data-wave") == ["1", "2"] == [str(i + 1) for i in
                                                                 range(len(plan["order"]["host_waves"]))]
        assert "Host wave 1: esx-01.gpu.sim" in view.dom and "Host wave 2: esx-02.gpu.sim" in view.dom
        assert sorted(elements(view.dom, "data-disruption")) == sorted(d["action"] for d in plan["disruptions"])
        assert [v for v in elements(view.dom, "data-vm")] == plan["order"]["vms"]
        assert "grid_a100-40c" in view.dom and "(does not exist)" in view.dom
    listed = json.loads(vgpuctl(sim, state, "-o", "json", "runs").stdout)["runs"]
    assert [(r["command"], r["state"]) for r in listed] == [("plan", "ok")]
    applied = vgpuctl(sim, state, "apply", str(saved), "--yes")
    assert applied.exit_code == 0, applied.output
    runs = vgpuctl(sim, state, "runs")
    assert runs.exit_code == 0 and [line.split()[1] for line in runs.stdout.splitlines()] == ["apply", "plan"]
    latest = json.loads(vgpuctl(sim, state, "-o", "json", "runs").stdout)["runs"][0]
    assert latest["state"] == "ok" and latest["exit_code"] == 0
    assert latest["inventory"] == str(inventory)  # the inventory the saved plan holds
    record = json.loads(vgpuctl(sim, state, "-o", "json", "runs", "show", latest["id"]).stdout)
    assert {h["host"]: h["status"] for h in record["result"]["hosts"]} == {H1: "changed", H2: "changed"}
    assert record["events"][0]["event"] == "run-start" and record["events"][-1]["event"] == "summary"
    assert record["plan"]["order"] == plan["order"]
    assert record["plan_file"] == str(saved)
    assert record["inventory_sha256"] == hashlib.sha256(INVENTORY.encode()).hexdigest()
    text = vgpuctl(sim, state, "runs", "show", latest["run_id"])
    assert "host esx-01.gpu.sim: changed" in text.stdout and "Plan:" in text.stdout
    run_page = tmp_path / "run.html"
    assert vgpuctl(sim, state, "runs", "show", latest["id"][:20], "--html", str(run_page)).exit_code == 0
    view = open_page(chromium, run_page, WIDTHS[1], screens)
    assert view.console_errors() == [] and "What the apply did" in view.dom and 'data-outcome="changed"' in view.dom


def test_a_history_folder_that_cannot_be_written_is_one_warning(sim: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\n")
    result = vgpuctl(sim, blocker, "plan", "-f", str(inventory))
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "run history" in line or "record of this run" in line]
    assert len(warnings) == 1 and "the run goes on" in warnings[0]
    assert "No changes" in result.stdout


def test_the_history_keeps_its_bound(sim: Any, tmp_path: Path) -> None:
    state, inventory = tmp_path / "state", tmp_path / "inv.yaml"
    inventory.write_text("apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\n")
    for _ in range(3):
        assert vgpuctl(sim, state, "plan", "-f", str(inventory), VGPUCTL_HISTORY_KEEP="2").exit_code == 0
    listed = json.loads(vgpuctl(sim, state, "-o", "json", "runs").stdout)["runs"]
    assert len(listed) == 2 == len(list((state / "vgpuctl" / "runs").iterdir()))
    last = vgpuctl(sim, state, "plan", "-f", str(inventory), VGPUCTL_HISTORY_KEEP="1")
    assert last.exit_code == 0, last.output
    (kept,) = json.loads(vgpuctl(sim, state, "-o", "json", "runs").stdout)["runs"]
    assert kept["id"] not in [r["id"] for r in listed]  # the run that pruned stays, the older ones went


def test_no_history_and_no_secret(sim: Any, tmp_path: Path) -> None:
    state, inventory = tmp_path / "state", tmp_path / "inv.yaml"
    inventory.write_text("apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\n")
    assert vgpuctl(sim, state, "plan", "-f", str(inventory), "--no-history").exit_code == 0
    assert vgpuctl(sim, state, "plan", "-f", str(inventory), VGPUCTL_HISTORY="off").exit_code == 0
    assert not (state / "vgpuctl" / "runs").exists()
    with_credentials = sim.url.replace("://", f"://{sim.username}:{sim.password}@", 1)
    result = vgpuctl(sim, state, "plan", "-f", str(inventory), VGPUCTL_URL=with_credentials, VGPUCTL_PASSWORD="")
    assert result.exit_code == 0, result.output
    (record,) = (state / "vgpuctl" / "runs").iterdir()
    text = record.read_text()
    assert sim.password not in text and f"{sim.username}:" not in text and "@" not in json.loads(text)["vcenter"]
