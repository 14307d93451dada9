"""The per-GPU settings, in the order plans list their changes, and `SETTING`: the `gpus:` key they make together
(vgpuctl.settings.pergpu). A new per-GPU setting is its module and its line in `GPU_SETTINGS`."""

from __future__ import annotations

from vgpuctl.settings import ecc, gpumodes
from vgpuctl.settings.base import GpuSetting, PlanInput
from vgpuctl.settings.pergpu import GpuList

GPU_SETTINGS: tuple[GpuSetting, ...] = (gpumodes.SETTING, ecc.SETTING)

SETTING = GpuList(GPU_SETTINGS)


def time_sliced_modes_after(inp: PlanInput) -> dict[str, str | None]:
    """PCI id -> the GPU's time-sliced vGPU mode once the entry is applied (None: MIG)."""
    wanted, _ = SETTING.wanted(inp.spec, inp.host)
    gpus = inp.gpus
    return {pci: gpumodes.time_sliced_mode(gpus[pci], want, inp.facts) for pci, want in wanted.items()}
