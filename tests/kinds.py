"""The host settings' change kinds under one roof for tests (each setting declares its own in its module)."""

from vgpuctl.settings.ecc import ECC_KIND as ECC
from vgpuctl.settings.gpumodes import GPU_TYPE_KIND as GPU_TYPE
from vgpuctl.settings.gpumodes import MIG
from vgpuctl.settings.gpumodes import VGPU_MODE_KIND as VGPU_MODE
from vgpuctl.settings.graphics import ASSIGNMENT_POLICY, DEFAULT_TYPE
from vgpuctl.settings.nvlink import NVLINK
from vgpuctl.settings.pvrdma import PVRDMA_FIREWALL, PVRDMA_VMKNIC
from vgpuctl.settings.scheduler import SCHEDULER
from vgpuctl.settings.sriov import SRIOV
from vgpuctl.settings.vgpu_manager import VGPU_MANAGER

__all__ = ["ASSIGNMENT_POLICY", "DEFAULT_TYPE", "ECC", "GPU_TYPE", "MIG", "NVLINK", "PVRDMA_FIREWALL", "PVRDMA_VMKNIC",
           "SCHEDULER", "SRIOV", "VGPU_MANAGER", "VGPU_MODE"]
