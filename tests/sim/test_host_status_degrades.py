"""`vgpuctl status` and host facts degrade per host, against gpusim: a host whose kernel module system does not
answer (NotSupported, as on a simulator without one) or refuses (NoPermission) is shown with what vCenter lists,
its module options as unknown and one warning per cause naming the hosts; the other hosts are read as usual and
the command exits 0, also when no host could say.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

H1, H2, H3 = "esx-01.gpu.sim", "esx-02.gpu.sim", "esx-03.gpu.sim"

FARM = {
    "datacenter": "DC0",
    "clusters": [
        {"name": "GPU-Cluster", "hosts": 3, "gpus_per_host": 2, "model": "A100-40GB", "graphics_type": "sharedDirect",
         "nvidia_options": "NVreg_NvLinkDisable=1"},
    ],
}  # fmt: skip


def test_status_shows_hosts_that_cannot_answer_with_a_warning(gpusim_factory: Callable[..., Any]) -> None:
    sim = gpusim_factory(FARM)
    for method in ("QueryConfiguredModuleOptionString", "QueryModules"):
        sim.arm_fault(H2, method, "NotSupported", count=100)  # a host's faults cover its managers
        sim.arm_fault(H3, method, "NoPermission", count=100)
    env = {
        "VGPUCTL_URL": sim.url,
        "VGPUCTL_USERNAME": sim.username,
        "VGPUCTL_PASSWORD": sim.password,
        "VGPUCTL_INSECURE": "1",
        "VGPUCTL_ESXI_HOSTS": "",
        "VGPUCTL_ESXI_PASSWORD": "",
        "VGPUCTL_ESXI_KEY_FILE": "",
    }
    result = CliRunner().invoke(app, ["-o", "json", "status"], env=env)
    assert result.exit_code == 0, result.output
    hosts = {h["host"]: h for h in json.loads(result.stdout)["hosts"]}
    assert sorted(hosts) == [H1, H2, H3]
    assert hosts[H1]["nvlink"] == "disabled"  # read as usual
    assert hosts[H2]["nvlink"] == hosts[H3]["nvlink"] == "unknown"
    assert all(len(hosts[h]["gpus"]) == 2 for h in (H2, H3))  # what vCenter lists is still shown
    warnings = json.loads(result.stdout)["warnings"]
    unknown = [w for w in warnings if "nvidia module options are unknown" in w]
    assert len(unknown) == 2  # one per cause, each naming its host
    assert any(w.startswith(f"the nvidia module options are unknown on host {H2}: NotSupported") for w in unknown)
    assert any(w.startswith(f"the nvidia module options are unknown on host {H3}: NoPermission") for w in unknown)

    text = CliRunner().invoke(app, ["status"], env=env)
    assert text.exit_code == 0, text.output
    assert H2 in text.stdout and "unknown" in text.stdout


def test_status_exits_0_also_when_no_host_could_say(gpusim_factory: Callable[..., Any]) -> None:
    sim = gpusim_factory(FARM)
    for host in (H1, H2, H3):
        sim.arm_fault(host, "QueryConfiguredModuleOptionString", "NoPermission", count=100)
    env = {
        "VGPUCTL_URL": sim.url,
        "VGPUCTL_USERNAME": sim.username,
        "VGPUCTL_PASSWORD": sim.password,
        "VGPUCTL_INSECURE": "1",
        "VGPUCTL_ESXI_HOSTS": "",
        "VGPUCTL_ESXI_PASSWORD": "",
        "VGPUCTL_ESXI_KEY_FILE": "",
    }
    result = CliRunner().invoke(app, ["status"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.count("nvidia module options are unknown") == 1  # one cause: one line naming all hosts
    assert f"the nvidia module options are unknown on 3 hosts {H1}, {H2}, {H3}: NoPermission" in result.stdout


def test_a_host_name_dns_cannot_look_up_is_one_hosts_warning(gpusim_factory: Callable[..., Any]) -> None:
    """vCenter may name a host what no resolver can be asked for (a label over 63 characters): status and export
    say it of that host, as of an unreachable one, instead of failing as a bug."""
    domain = "h" * 64 + ".sim"
    sim = gpusim_factory({"datacenter": "DC0", "host_domain": domain, "clusters": [
        {"name": "C", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "graphics_type": "sharedDirect"}]})
    host = f"esx-01.{domain}"
    env = {
        "VGPUCTL_URL": sim.url,
        "VGPUCTL_USERNAME": sim.username,
        "VGPUCTL_PASSWORD": sim.password,
        "VGPUCTL_INSECURE": "1",
        "VGPUCTL_ESXI_HOSTS": "",  # no host map: the shell is reached by the host's name
        "VGPUCTL_ESXI_PASSWORD": sim.password,
        "VGPUCTL_ESXI_KEY_FILE": "",
    }
    result = CliRunner().invoke(app, ["-o", "json", "status"], env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [h["host"] for h in report["hosts"]] == [host]
    assert "not a name DNS can look up" in report["hosts"][0]["shell_error"], result.stdout[-3000:]
    assert len(report["hosts"][0]["gpus"]) == 2  # what vCenter lists is still shown

    exported = CliRunner().invoke(app, ["export"], env=env)
    assert exported.exit_code == 0, exported.output
    assert "a bug in vgpuctl" not in exported.output
