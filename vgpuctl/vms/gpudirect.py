"""GPUDirect RDMA on a VM: the settings NVIDIA names for vSphere (extraConfig, vgpuctl/data/network.yaml) and
the warning when a VM's GPUs and its RDMA NIC sit on different NUMA nodes or PCIe root complexes of their
host. Pure. Which profiles and adapters allow it is checked when the inventory is read
(vgpuctl.inventory.netchecks); docs/multi-node.md gives the sources.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from vgpuctl.model import ObservedHost
from vgpuctl.netrules import network_rules


def extra_config(current: Mapping[str, str]) -> dict[str, str | None]:
    """The GPUDirect RDMA keys whose value differs from what the VM has."""
    wanted = network_rules().gpudirect.extra_config
    return {k: v for k, v in wanted.items() if str(current.get(k, "")).lower() != v.lower()}


def topology_warnings(host: ObservedHost, gpus: Iterable[str], nics: Iterable[str]) -> list[str]:
    """A warning per GPU and NIC pair the host places apart: another NUMA node, or no common root bridge (the
    API names no root complex; a common topmost bridge stands for it). Pairs the host does not describe are
    not judged."""
    by_gpu = {g.pci_id: g for g in host.gpus}
    by_nic = {n.pci_id: n for n in host.nics}
    out = []
    for gpu_id in sorted(set(gpus)):
        gpu = by_gpu.get(gpu_id)
        for nic_id in sorted(set(nics)):
            nic = by_nic.get(nic_id)
            if gpu is None or nic is None:
                continue
            if gpu.numa_node is not None and nic.numa_node is not None and gpu.numa_node != nic.numa_node:
                out.append(f"GPUDirect RDMA: GPU {gpu_id} is on NUMA node {gpu.numa_node} and NIC {nic_id} on node "
                           f"{nic.numa_node} of host {host.name}: traffic crosses the CPU interconnect")
            elif gpu.pci_root and nic.pci_root and gpu.pci_root != nic.pci_root:
                out.append(f"GPUDirect RDMA: GPU {gpu_id} (under {gpu.pci_root}) and NIC {nic_id} (under "
                           f"{nic.pci_root}) are on different PCIe root complexes of host {host.name}")
    return out
