"""`plan --explain HOST` without a vCenter: the merged host entry, where each value came from, vCenter's value."""

from __future__ import annotations

import kinds
import pytest

from vgpuctl.domain import Phase
from vgpuctl.errors import NotFound
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import HostChange, Observed, ObservedGpu, ObservedHost, Plan
from vgpuctl.reports.explain import explain_host

pytestmark = pytest.mark.unit

INVENTORY = """\
apiVersion: vgpuctl/v1
hosts:
  - cluster: GPU-Cluster
    graphics: {default_type: sharedDirect, assignment_policy: performance}
    gpus: [{select: all, mode: time-sliced, vgpu_mode: sameSize}]
    nvlink: enabled
  - name: esx-01.example.com
    graphics: {assignment_policy: consolidation}
    gpus: [{select: all, vgpu_mode: mixedSize}]
"""


def farm() -> Observed:
    gpus = [ObservedGpu(pci_id=f"0000:{b}:00.0", device_name="NVIDIA A100", vgpu_mode="sameSize") for b in ("3b", "5e")]
    hosts = {
        n: ObservedHost(n, cluster="GPU-Cluster", default_graphics_type="shared", gpus=list(gpus),
                        module_options="NVreg_NvLinkDisable=1")
        for n in ("esx-01.example.com", "esx-02.example.com")
    }  # fmt: skip
    return Observed(hosts=hosts, clusters={"GPU-Cluster": sorted(hosts)})


def test_merged_values_with_their_entry_line_and_vcenter_value() -> None:
    inv = load_inventory_text(INVENTORY, "inv.yaml")
    plan = Plan(host_changes=[HostChange("esx-01.example.com", kinds.DEFAULT_TYPE, "host", "shared",
                                         "sharedDirect", Phase.REBOOT)])  # fmt: skip
    report = explain_host("esx-01.example.com", inv, farm(), plan)
    assert report.entries == ["cluster GPU-Cluster", "host esx-01.example.com"]
    got = {s.setting: (s.value, s.source, s.vcenter) for s in report.settings}
    assert got["graphics.default_type"] == ("sharedDirect", "inv.yaml:4 (cluster GPU-Cluster)", "shared")
    assert got["graphics.assignment_policy"] == ("consolidation", "inv.yaml:8 (host esx-01.example.com)", "performance")
    assert got["gpus[all].mode"] == ("time-sliced", "inv.yaml:5 (cluster GPU-Cluster)", "time-sliced")
    assert got["gpus[all].vgpu_mode"] == ("mixedSize", "inv.yaml:9 (host esx-01.example.com)", "sameSize")
    assert got["nvlink"] == ("enabled", "inv.yaml:6 (cluster GPU-Cluster)", "disabled")
    assert [(c.setting, c.new) for c in report.changes] == [("graphics.default_type", "sharedDirect")]
    text = report.render_text()
    assert text.startswith("host esx-01.example.com (cluster GPU-Cluster): cluster GPU-Cluster then host esx-01")
    lines = text.splitlines()
    assert "  setting                     inventory      vCenter now           from" in lines
    assert ("  graphics.assignment_policy  consolidation  performance  differs  inv.yaml:8 (host esx-01.example.com)"
            in lines)
    mode = "  gpus[all].mode              time-sliced    time-sliced           inv.yaml:5 (cluster GPU-Cluster)"
    assert mode in lines
    starts = {line.index("inv.yaml") for line in lines if "inv.yaml:" in line}
    assert len(starts) == 1  # the columns line up
    assert "the plan changes:" in text


def test_the_selector_is_no_difference_and_each_gpu_is_compared() -> None:
    observed = farm()
    observed.hosts["esx-01.example.com"].gpus[1].vgpu_mode = "mixedSize"  # one GPU already as wanted
    report = explain_host("esx-01", load_inventory_text(INVENTORY, "inv.yaml"), observed, Plan())  # a short name
    by = {s.setting: s for s in report.settings}
    assert by["gpus[all].select"].vcenter is None and by["gpus[all].select"].differs is None
    assert by["gpus[all].vgpu_mode"].differs is True  # the other GPU still differs
    assert by["gpus[all].vgpu_mode"].vcenter == "0000:3b:00.0: sameSize, 0000:5e:00.0: mixedSize"
    assert by["gpus[all].mode"].differs is False
    both = observed.hosts["esx-01.example.com"].gpus[0]
    both.vgpu_mode = "mixedSize"
    again = explain_host("esx-01", load_inventory_text(INVENTORY, "inv.yaml"), observed, Plan())
    assert {s.setting: s.differs for s in again.settings}["gpus[all].vgpu_mode"] is False


def test_mig_makes_the_time_sliced_mode_moot() -> None:
    inv = load_inventory_text(INVENTORY.replace("vgpu_mode: mixedSize}", "mode: mig}"), "inv.yaml")
    by = {s.setting: s for s in explain_host("esx-01.example.com", inv, farm(), Plan()).settings}
    assert by["gpus[all].mode"].value == "mig" and by["gpus[all].mode"].differs is True
    assert by["gpus[all].vgpu_mode"].vcenter is None and by["gpus[all].vgpu_mode"].differs is None


def test_the_other_host_gets_the_cluster_entry_only() -> None:
    report = explain_host("esx-02.example.com", load_inventory_text(INVENTORY, "inv.yaml"), farm(), Plan())
    got = {s.setting: s.value for s in report.settings}
    assert got["graphics.assignment_policy"] == "performance" and got["gpus[all].vgpu_mode"] == "sameSize"
    assert report.entries == ["cluster GPU-Cluster"]
    assert "the plan changes nothing on this host" in report.render_text()


def test_unknown_host() -> None:
    with pytest.raises(NotFound, match="no such host in vCenter"):
        explain_host("nope", load_inventory_text(INVENTORY), farm(), Plan())
