"""Generated farms (plain `Observed` data) for tests, benchmarks and what-if questions: hosts of one board
each, GPUs in given modes, NVLink sets, running VMs holding GPUs. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

from vgpuctl.domain import AssignmentPolicy, Firmware, GpuVgpuMode, GraphicsType, PowerState
from vgpuctl.farm.predict import mig_profile_names, time_sliced_profile_names
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed, ObservedGpu, ObservedHost, ObservedVgpu, ObservedVm
from vgpuctl.profiles import BOARDS

DEVICE_NAMES = {"a100": "NVIDIA A100-PCIE-40GB", "a100d": "NVIDIA A100 80GB PCIe", "h100": "NVIDIA H100 PCIe",
                "l40s": "NVIDIA L40S", "a40": "NVIDIA A40"}
PCI_IDS = ("0000:3b:00.0", "0000:3c:00.0", "0000:5e:00.0", "0000:5f:00.0",
           "0000:86:00.0", "0000:87:00.0", "0000:af:00.0", "0000:b0:00.0")
KB_PER_GB = 1024 * 1024


@dataclass
class RunningVm:
    name: str
    profiles: list[str]
    gpus: list[int]  # GPU index of each vGPU


@dataclass
class SynthHost:
    name: str
    board: str = "a100"
    gpus: int = 4
    modes: Sequence[str] | str = GpuVgpuMode.SAME_SIZE  # one for all GPUs, or one per GPU
    nvlink: str = "pairs"  # pairs | quads | all | none
    nvlink_groups: Sequence[int] = ()  # device group sizes the host reports for each set (empty: none)
    policy: str = AssignmentPolicy.PERFORMANCE
    cluster: str = "GPU-Cluster"
    running: list[RunningVm] = field(default_factory=list)
    api_version: str = "8.0.3.0"


def _set_of(index: int, nvlink: str, gpus: int) -> int | None:
    size = {"pairs": 2, "quads": 4, "all": gpus}.get(nvlink)
    return None if size is None else index // size


def make_host(spec: SynthHost) -> tuple[ObservedHost, list[ObservedVm]]:
    modes = [spec.modes] * spec.gpus if isinstance(spec.modes, str) else list(spec.modes)
    fb = BOARDS[spec.board].fb_gb
    gpus = [ObservedGpu(PCI_IDS[i] if i < len(PCI_IDS) else f"0000:{0xc0 + i:02x}:00.0", DEVICE_NAMES[spec.board],
                        memory_kb=int(fb * KB_PER_GB), graphics_type=GraphicsType.SHARED_DIRECT, vgpu_mode=modes[i],
                        nvlink_set=_set_of(i, spec.nvlink, spec.gpus) if modes[i] != GpuVgpuMode.MIG else None)
            for i in range(spec.gpus)]
    for g in gpus:
        g.nvlink_groups = list(spec.nvlink_groups) if g.nvlink_set is not None else []
    vms = []
    for vm in spec.running:
        for gi in vm.gpus:
            gpus[gi].vms.append(vm.name)
        vms.append(ObservedVm(vm.name, host=spec.name, cluster=spec.cluster, power_state=PowerState.ON,
                              memory_reservation_locked=True, firmware=Firmware.EFI,
                              vgpus=[ObservedVgpu(4000 + i, p) for i, p in enumerate(vm.profiles)]))
    offered: set[str] = set()
    for mode in set(modes):
        names = mig_profile_names if mode == GpuVgpuMode.MIG else time_sliced_profile_names
        offered.update(names(spec.board))
    host = ObservedHost(spec.name, cluster=spec.cluster, api_version=spec.api_version,
                        default_graphics_type=GraphicsType.SHARED_DIRECT, assignment_policy=spec.policy, gpus=gpus,
                        offered_profiles=sorted(offered))
    return host, vms


def make_farm(hosts: Sequence[SynthHost]) -> Observed:
    observed = Observed()
    for spec in hosts:
        host, vms = make_host(spec)
        observed.hosts[host.name] = host
        observed.clusters.setdefault(spec.cluster, []).append(host.name)
        observed.vms.update({v.name: v for v in vms})
    return observed
