"""`capacity --drain`: hosts emptied for maintenance step after step on the rest of their cluster as it is at
that moment (vgpuctl.capacity.drain), and its document's text."""

from __future__ import annotations

import pytest

from vgpuctl.capacity.drain import drain
from vgpuctl.capacity.synthetic import RunningVm, SynthHost, make_farm
from vgpuctl.model import Observed
from vgpuctl.reports.capacity import capacity_drain_report

pytestmark = pytest.mark.unit

HOSTS = ["esx-01", "esx-02", "esx-03"]


def farm(per_host: int = 1, gpus: int = 2) -> Observed:
    """Three A100 hosts, each running `per_host` VMs of one whole GPU (grid_a100-40c)."""
    return make_farm([
        SynthHost(h, gpus=gpus, running=[RunningVm(f"train-{i * per_host + j + 1:02d}", ["grid_a100-40c"], [j])
                                         for j in range(per_host)])
        for i, h in enumerate(HOSTS)
    ])


def test_one_host_at_a_time_with_the_moves_of_earlier_steps() -> None:
    """Each host's VM goes to a host in service at its step, hosts emptied before first (their GPUs are free
    again), hosts a later step empties last; with every host drained, the first VM moves twice."""
    answer = drain(farm(), HOSTS, vgpu_migration=True)
    assert answer.ok
    moves = [(m.vm, m.host, m.to) for s in answer.steps for m in s.moves]
    assert moves == [("train-01", "esx-01", "esx-02"), ("train-01", "esx-02", "esx-01"),
                     ("train-02", "esx-02", "esx-01"), ("train-03", "esx-03", "esx-02")]
    text = capacity_drain_report(answer, 1).render_text()
    assert "step 2: esx-02 into maintenance mode" in text
    assert "  train-02 (grid_a100-40c) on esx-02 -> esx-01" in text and text.endswith("every step can be emptied")


def test_hosts_not_drained_are_preferred_to_hosts_drained_later() -> None:
    observed = make_farm([SynthHost(h, gpus=2, running=[RunningVm(f"vm-{h}", ["grid_a100-40c"], [0])])
                          for h in [*HOSTS, "esx-04"]])
    answer = drain(observed, HOSTS, vgpu_migration=True)
    assert [(m.vm, m.to) for m in answer.steps[0].moves] == [("vm-esx-01", "esx-04")]
    assert [(m.vm, m.to) for m in answer.steps[1].moves] == [("vm-esx-02", "esx-01")]


def test_a_saturated_cluster_names_the_vms_and_what_is_missing() -> None:
    answer = drain(farm(per_host=2), HOSTS, vgpu_migration=True)
    assert not answer.ok
    stuck = {m.vm: m.why for s in answer.steps for m in s.stuck}
    assert set(stuck) == {f"train-{i:02d}" for i in range(1, 7)}
    assert stuck["train-01"] == ("needs 1 x grid_a100-40c free while esx-01 is in maintenance; the rest of cluster "
                                 "GPU-Cluster has 0")
    text = capacity_drain_report(answer, 1).render_text()
    assert text.endswith("6 running VM(s) cannot be moved: train-01, train-02, train-03, train-04, train-05, train-06")


def test_room_used_by_an_earlier_step_counts() -> None:
    """One GPU free per host: one host at a time can be emptied; two at once leave one free GPU for two VMs."""
    assert drain(farm(), HOSTS, vgpu_migration=True).ok
    two = drain(farm(), HOSTS, max_unavailable=2, vgpu_migration=True)
    assert [s.hosts for s in two.steps] == [["esx-01", "esx-02"], ["esx-03"]] and not two.ok
    assert [(m.vm, m.to, m.why) for m in two.steps[0].moves] == [
        ("train-01", "esx-03", ""),
        ("train-02", None, "needs 1 x grid_a100-40c free while esx-01, esx-02 are in maintenance; the rest of cluster "
                           "GPU-Cluster has 0"),
    ]
    assert [(m.vm, m.to) for m in two.steps[1].moves] == [("train-01", "esx-01"), ("train-03", "esx-01")]


def test_without_vgpu_vmotion_vgpu_vms_stay() -> None:
    answer = drain(farm(), HOSTS[:1], vgpu_migration=False)
    [move] = answer.steps[0].moves
    assert move.to is None and "vgpu.hotmigrate.enabled" in move.why
    assert "does not allow vMotion" in capacity_drain_report(answer, 1).render_text()


def test_hosts_out_of_service_are_left_out() -> None:
    observed = farm()
    observed.hosts["esx-02"].in_maintenance = True
    answer = drain(observed, ["esx-02", "esx-01"], vgpu_migration=True)
    assert answer.steps[0].skipped == {"esx-02": "already in maintenance mode"} and not answer.steps[0].moves
    assert [(m.vm, m.to) for m in answer.steps[1].moves] == [("train-01", "esx-03")]  # not to the host away
    text = capacity_drain_report(answer, 1).render_text()
    assert "step 1: no host into maintenance mode\n  esx-02: left out (already in maintenance mode)" in text
