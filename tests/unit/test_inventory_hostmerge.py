"""Host entries merge like Ansible group and host variables: the cluster's entry, then the host's own."""

from __future__ import annotations

import pytest

from vgpuctl.cli.main import app
from vgpuctl.hosts.plan import resolve_hosts
from vgpuctl.inventory import load_inventory_text
from vgpuctl.inventory.merge import Origin, merge_hosts
from vgpuctl.model import Observed

pytestmark = pytest.mark.unit

CLUSTERS = {"C1": ["esx-01", "esx-02"], "C2": ["esx-09"]}
HOSTS = {"esx-01", "esx-02", "esx-09"}

BASE = """\
apiVersion: vgpuctl/v1
hosts:
  - cluster: C1
    graphics: {default_type: sharedDirect, assignment_policy: performance}
    gpus:
      - {select: all, mode: time-sliced, vgpu_mode: sameSize}
    nvlink: enabled
    ssh: {user: admin, known_hosts: /etc/kh}
    maintenance: {evacuate: power-off}
  - name: esx-02
    graphics: {assignment_policy: consolidation}
    gpus:
      - {select: '0000:3b:00.0', mode: mig}
      - {select: all, graphics_type: sharedDirect}
    nvlink: disabled
    ssh: {port: 2222}
"""


def _merge(text: str):
    inv = load_inventory_text(text, "inv.yaml")
    return merge_hosts(inv.hosts, CLUSTERS, HOSTS)


def test_host_entry_merges_over_its_cluster_entry_key_by_key() -> None:
    merged, errors = _merge(BASE)
    assert errors == []
    spec = merged["esx-02"].spec
    assert spec.graphics is not None
    assert (spec.graphics.default_type, spec.graphics.assignment_policy) == ("sharedDirect", "consolidation")
    assert [(g.select, g.mode, g.vgpu_mode, g.graphics_type) for g in spec.gpus] == [
        ("all", "time-sliced", "sameSize", "sharedDirect"),  # merged on select
        ("0000:3b:00.0", "mig", None, None),
    ]
    assert spec.nvlink == "disabled"
    assert (spec.ssh.user, spec.ssh.known_hosts, spec.ssh.port) == ("admin", "/etc/kh", 2222)
    assert spec.maintenance.evacuate == "power-off"
    assert (spec.name, spec.cluster, spec.target) == ("esx-02", None, "host esx-02")


def test_hosts_without_their_own_entry_keep_the_cluster_entry() -> None:
    inv = load_inventory_text(BASE, "inv.yaml")
    merged, _ = merge_hosts(inv.hosts, CLUSTERS, HOSTS)
    assert merged["esx-01"].spec is inv.hosts[0]
    assert "esx-09" not in merged


def test_origins_name_the_entry_and_line_of_each_value() -> None:
    merged, _ = _merge(BASE)
    o = merged["esx-02"].origins
    assert o["graphics.default_type"] == Origin("cluster C1", "inv.yaml", 4)
    assert o["graphics.assignment_policy"] == Origin("host esx-02", "inv.yaml", 11)
    assert o["gpus[all].vgpu_mode"] == Origin("cluster C1", "inv.yaml", 6)
    assert o["gpus[all].graphics_type"] == Origin("host esx-02", "inv.yaml", 14)
    assert o["gpus[0000:3b:00.0].mode"] == Origin("host esx-02", "inv.yaml", 13)
    assert o["nvlink"] == Origin("host esx-02", "inv.yaml", 15)
    assert o["ssh.user"].entry == "cluster C1" and o["ssh.port"].entry == "host esx-02"
    assert merged["esx-02"].origin("scheduler.policy") is None  # a default: set by no entry
    assert str(o["nvlink"]) == "inv.yaml:15 (host esx-02)"
    assert "cluster" not in o and "name" not in o


def test_a_merge_that_breaks_a_rule_names_both_lines() -> None:
    text = """\
apiVersion: vgpuctl/v1
hosts:
  - cluster: C1
    scheduler: {policy: fixed-share, timeslice_ms: 5}
    gpus: [{select: all, mode: mig}]
  - name: esx-01
    scheduler: best-effort
    gpus: [{select: all, vgpu_mode: mixedSize}]
"""
    merged, errors = _merge(text)
    assert errors == [
        "inv.yaml:5 and inv.yaml:8: host esx-01: gpus[0].vgpu_mode: vgpu_mode applies to time-sliced GPUs only "
        "(MIG GPUs are multiInstanceGpu) (its cluster C1 and host esx-01 entries merged)",
        "inv.yaml:4 and inv.yaml:7: host esx-01: scheduler.timeslice_ms: a time slice applies to equal-share and "
        "fixed-share only (its cluster C1 and host esx-01 entries merged)",
    ]
    assert merged["esx-02"].spec.scheduler is not None and merged["esx-02"].spec.scheduler.timeslice_ms == 5


def test_rule_broken_by_one_entry_alone_is_left_to_validate() -> None:
    text = ("apiVersion: vgpuctl/v1\nhosts:\n  - cluster: C1\n    scheduler: {timeslice_ms: 5}\n"
            "  - name: esx-01\n    nvlink: enabled\n")
    _, errors = _merge(text)
    assert errors == []


def test_unknown_cluster_and_host() -> None:
    _, errors = _merge("apiVersion: vgpuctl/v1\nhosts:\n  - name: esx-77\n  - cluster: Nope\n")
    assert errors == [
        "cluster Nope: not found (clusters: C1, C2)",
        "host esx-77: not found (hosts: esx-01, esx-02, esx-09)",
    ]


def test_plan_resolution_uses_the_merge() -> None:
    inv = load_inventory_text(BASE, "inv.yaml")
    resolved, errors = resolve_hosts(inv.hosts, Observed(hosts=dict.fromkeys(HOSTS), clusters=CLUSTERS))  # type: ignore[arg-type]
    assert errors == []
    graphics = resolved["esx-02"].graphics
    assert graphics is not None and graphics.default_type == "sharedDirect"  # not lost to the host entry


def test_a_host_that_switches_to_mig_does_not_inherit_the_time_sliced_mode() -> None:
    text = """\
apiVersion: vgpuctl/v1
hosts:
  - cluster: C1
    gpus: [{select: all, mode: time-sliced, vgpu_mode: sameSize}]
  - name: esx-01
    gpus: [{select: all, mode: mig}]
"""
    merged, errors = _merge(text)
    assert errors == []
    gpu = merged["esx-01"].spec.gpus[0]
    assert (gpu.mode, gpu.vgpu_mode) == ("mig", None)
    assert merged["esx-02"].spec.gpus[0].vgpu_mode == "sameSize"


def test_validate_reports_what_a_merge_would_break_without_vcenter(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """validate needs no vCenter, so it cannot know a host's cluster: it warns what each host entry merged over
    each cluster entry would break, if the host is in that cluster; plan refuses it once vCenter says so."""
    import json

    from typer.testing import CliRunner

    path = tmp_path / "inv.yaml"
    path.write_text("""\
apiVersion: vgpuctl/v1
hosts:
  - cluster: C1
    scheduler: fixed-share
  - name: esx-01
    gpus: [{select: all, vgpu_mode: mixedSize}]
""")
    out = CliRunner().invoke(app, ["validate", "-f", str(path)])
    assert out.exit_code == 0, out.output
    warning = out.stdout.splitlines()[1]
    assert warning.startswith(f"warning: if host esx-01 is in cluster C1: {path}:4 and {path}:")
    assert warning.endswith(": host esx-01: scheduler: mixed-size GPUs support only the best-effort and equal-share "
                            "schedulers (its cluster C1 and host esx-01 entries merged)")
    doc = json.loads(CliRunner().invoke(app, ["-o", "json", "validate", "-f", str(path)]).stdout)
    assert len(doc["warnings"]) == 1
