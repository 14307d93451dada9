"""Stranded framebuffer, one computation for `capacity`, `status` and the exporter's records: per GPU in each mode
(time-sliced same-size, mixed-size, MIG), per host and per cluster."""

from __future__ import annotations

import pytest

from vgpuctl.capacity.fitnow import what_fits
from vgpuctl.capacity.stranded import stranded_by_cluster, stranded_by_host
from vgpuctl.capacity.synthetic import RunningVm, SynthHost, make_farm
from vgpuctl.domain import GpuVgpuMode
from vgpuctl.model import Observed
from vgpuctl.reports.capacity import capacity_report
from vgpuctl.reports.status import render_status, status_report

pytestmark = pytest.mark.unit


def one_gpu(board: str, mode: str, profiles: list[str], offered: list[str] | None = None,
            name: str = "esx-01", cluster: str = "GPU-Cluster") -> Observed:
    host = SynthHost(name, board=board, gpus=1, modes=mode, nvlink="none", cluster=cluster,
                     running=[RunningVm(f"vm-{i}", [p], [0]) for i, p in enumerate(profiles)])
    farm = make_farm([host])
    if offered is not None:
        farm.hosts[name].offered_profiles = offered
    return farm


def test_same_size_a_gpu_locked_to_a_type_whose_maximum_leaves_memory_over() -> None:
    # L40S-1B: 1 GB each, at most 32 per GPU (max_equal): a 48 GB GPU holding one takes 31 more; 16 GB stranded
    farm = one_gpu("l40s", GpuVgpuMode.SAME_SIZE, ["grid_l40s-1b"], ["grid_l40s-1b", "grid_l40s-2b", "grid_l40s-48q"])
    (host,) = stranded_by_host(farm)
    assert (host.free_gb, host.stranded_gb) == (47, 16)
    (gpu,) = host.stranded
    assert gpu.why == "same-size GPU locked to grid_l40s-1b" and gpu.mode == GpuVgpuMode.SAME_SIZE


def test_same_size_an_idle_gpu_strands_nothing() -> None:
    farm = one_gpu("l40s", GpuVgpuMode.SAME_SIZE, [], ["grid_l40s-1b", "grid_l40s-48q"])
    (host,) = stranded_by_host(farm)
    assert (host.free_gb, host.stranded_gb, host.stranded) == (48, 0, [])


def test_mixed_size_placement_ids_leave_a_gap_no_size_fits() -> None:
    farm = one_gpu("h100", GpuVgpuMode.MIXED_SIZE, ["grid_h100-8c", "grid_h100-8c"])
    (host,) = stranded_by_host(farm)
    assert (host.free_gb, host.stranded_gb) == (64, 4)
    assert host.stranded[0].why == "no offered size fits the gap"
    assert host.stranded[0].mode == GpuVgpuMode.MIXED_SIZE


def test_mixed_size_without_a_gap() -> None:
    farm = one_gpu("a100", GpuVgpuMode.MIXED_SIZE, ["grid_a100-20c", "grid_a100-10c"])
    (host,) = stranded_by_host(farm)
    assert (host.free_gb, host.stranded_gb) == (10, 0)


def test_mig_free_slices_no_gpu_instance_profile_fits() -> None:
    farm = one_gpu("a100", GpuVgpuMode.MIG, ["grid_a100-3-20c", "grid_a100-2-10c"], ["grid_a100-3-20c"])
    (host,) = stranded_by_host(farm)
    assert (host.free_gb, host.stranded_gb) == (10, 10)
    assert host.stranded[0].why == "MIG slots that no instance placement fits"


def test_a_gpu_that_takes_no_vgpus_strands_all_its_free_memory() -> None:
    farm = one_gpu("a100", GpuVgpuMode.SAME_SIZE, [])
    farm.hosts["esx-01"].gpus[0].graphics_type = "shared"
    (host,) = stranded_by_host(farm)
    assert (host.free_gb, host.stranded_gb) == (40, 40) and "Shared Direct" in host.stranded[0].why


def test_a_mig_gpu_placement_cannot_lay_out_again_strands_its_free_memory_with_the_reason() -> None:
    # the instances in the order the host lists them (1g, 2g, 4g) leave no 4g placement: placement blocks the GPU
    farm = one_gpu("a100", GpuVgpuMode.MIG, ["grid_a100-1-5c", "grid_a100-2-10c", "grid_a100-4-20c"])
    (host,) = stranded_by_host(farm)
    assert (host.free_gb, host.stranded_gb) == (5, 5)  # 40 - 5 - 10 - 20, as status counts it
    assert host.stranded[0].why.startswith("takes no more vGPUs: holds vGPU 'grid_a100-4-20c'")


def test_a_gpu_used_by_a_vm_whose_vgpus_were_not_read_strands_what_is_free_with_the_reason() -> None:
    farm = one_gpu("a100", GpuVgpuMode.SAME_SIZE, ["grid_a100-10c"])
    farm.hosts["esx-01"].gpus[0].vms = ["vm-0", "mystery"]  # graphicsInfo names a VM the VMs' read did not return
    (host,) = stranded_by_host(farm)
    assert (host.free_gb, host.stranded_gb) == (30, 30)
    assert host.stranded[0].why == "takes no more vGPUs: used by mystery, whose vGPUs were not read"


def farm_of_two_clusters() -> Observed:
    farm = one_gpu("l40s", GpuVgpuMode.SAME_SIZE, ["grid_l40s-1b"], ["grid_l40s-1b", "grid_l40s-48q"])
    for name, cluster, board, mode, vms in (("esx-02", "GPU-Cluster", "h100", GpuVgpuMode.MIXED_SIZE,
                                             ["grid_h100-8c", "grid_h100-8c"]),
                                            ("esx-03", "Train", "a100", GpuVgpuMode.SAME_SIZE, []),
                                            ("esx-04", "Train", "a100", GpuVgpuMode.SAME_SIZE, [])):
        other = one_gpu(board, mode, vms, name=name, cluster=cluster)
        farm.hosts.update(other.hosts)
        farm.vms.update({f"{name}-{k}": v for k, v in other.vms.items()})
        for g in farm.hosts[name].gpus:
            g.vms = [f"{name}-{v}" for v in g.vms]
    farm.hosts["esx-04"].in_maintenance = True  # takes no vGPUs now: left out, as capacity leaves it out
    return farm


def test_hosts_and_clusters_sum_their_gpus() -> None:
    farm = farm_of_two_clusters()
    hosts = stranded_by_host(farm)
    assert [(h.host, h.free_gb, h.stranded_gb) for h in hosts] == [
        ("esx-01", 47, 16), ("esx-02", 64, 4), ("esx-03", 40, 0)]
    clusters = stranded_by_cluster(hosts)
    assert [(c.cluster, c.hosts, c.gpus, c.free_gb, c.stranded_gb) for c in clusters] == [
        ("GPU-Cluster", 2, 2, 111, 20), ("Train", 1, 1, 40, 0)]


def test_capacity_and_status_show_the_same_figures() -> None:
    farm = farm_of_two_clusters()
    capacity = capacity_report(what_fits(farm))
    status = status_report(farm)
    assert {h.host: (h.free_gb, h.stranded_gb) for h in capacity.hosts if h.skipped is None} == {
        h.host: (h.free_gb, h.stranded_gb) for h in status.hosts if h.free_gb is not None}
    assert [(c.cluster, c.free_gb, c.stranded_gb) for c in capacity.stranded_clusters] == [
        (c.cluster, c.free_gb, c.stranded_gb) for c in status.clusters] == [
        ("GPU-Cluster", 111, 20), ("Train", 40, 0)]
    text = render_status(status, plain=True)
    assert "cluster GPU-Cluster  hosts 2  gpus 2  free/stranded GB 111/20" in text
    assert "free/stranded GB 47/16" in text and "(stranded 16: same-size GPU locked to grid_l40s-1b)" in text
    doc = status.to_dict()
    assert doc["hosts"][0]["gpus"][0]["stranded_gb"] == 16 and doc["clusters"][1]["cluster"] == "Train"
    assert "free_gb" not in doc["hosts"][3]  # in maintenance mode: takes no vGPUs now
    assert "cluster GPU-Cluster: 111 GB free, stranded 20 GB" in capacity.render_text()
