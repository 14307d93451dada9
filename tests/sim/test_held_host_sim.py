"""A host another run is working on (its live lease in vCenter) while that run reboots it: plan and status name
the run that holds it (run id, user, since, until), never call the host unreadable or broken."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vgpuctl import pipeline
from vgpuctl.cli.main import app
from vgpuctl.vsphere.session import ConnectionSettings, open_session
from vgpuctl.vsphere.workrecord import Fields, Lease

pytestmark = pytest.mark.sim

H1, H2 = "esx-01.gpu.sim", "esx-02.gpu.sim"
FARM = {"datacenter": "DC0", "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2,
                                           "model": "A100-40GB", "graphics_type": "sharedDirect"}]}  # fmt: skip
INVENTORY = "apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nhosts:\n  - cluster: GPU-Cluster\n" \
            "    graphics: {assignment_policy: consolidation}\n"


@pytest.fixture
def held(gpusim_factory: Callable[..., Any], no_vgpuctl_env: None) -> Iterator[Any]:
    """gpusim with esx-01 held by another run (run id other-run-7) and down, as while that run reboots it."""
    sim = gpusim_factory(FARM)
    settings = ConnectionSettings(sim.url, sim.username, sim.password, insecure=True)
    with open_session(settings) as session:
        observed = pipeline.observe(session, "DC0")
        lease = Lease(Fields(session), H1, observed.hosts[H1].moid, "other-run-7", ttl_s=600).acquire()
        sim.host_down(H1)
        try:
            yield sim
        finally:
            sim.host_up(H1)
            lease.release()


def vgpuctl(sim: Any, *args: str) -> Any:
    env = {"VGPUCTL_URL": sim.url, "VGPUCTL_USERNAME": sim.username, "VGPUCTL_PASSWORD": sim.password,
           "VGPUCTL_INSECURE": "1"}
    return CliRunner().invoke(app, list(args), env=env)


def test_plan_names_the_run_that_holds_the_host(held: Any, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    result = vgpuctl(held, "plan", "-f", str(inv))
    assert result.exit_code == 1, result.output
    line = next(line for line in result.stdout.splitlines() if f"host {H1}:" in line)  # shown with the plan
    assert "held by run other-run-7 of " in line and "since " in line and "lease until " in line, line
    assert "cannot be read" not in result.output and "notResponding" not in line
    assert f"~ host {H2} graphics.assignment_policy" in result.stdout  # the rest of the plan beside it
    scoped = vgpuctl(held, "plan", "-f", str(inv), "--host", "esx-02")  # scoped around it: plans the rest
    assert scoped.exit_code == 0, scoped.output
    assert f"out of scope, untouched: hosts {H1}" in scoped.stdout


def test_status_shows_the_host_as_held(held: Any) -> None:
    doc = json.loads(vgpuctl(held, "-o", "json", "status", "--no-shell", "--no-vm-classes").stdout)
    by_host = {h["host"]: h for h in doc["hosts"]}
    lease = by_host[H1]["held"]
    assert lease["run"] == "other-run-7" and "pid" in lease["holder"]
    assert lease["since"].endswith("Z") and lease["until"] > lease["since"]
    assert "held" not in by_host[H2]
    text = vgpuctl(held, "status", "--no-shell", "--no-vm-classes").stdout
    line = next(line for line in text.splitlines() if line.startswith(f"host {H1}"))
    assert "held by run other-run-7 of " in line and "lease until" in line
