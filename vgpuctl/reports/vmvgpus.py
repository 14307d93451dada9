"""`vgpuctl vm vgpu list`'s document: one VM's vGPU devices, each with its profile and the GPU it sits on."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed, ObservedVm
from vgpuctl.reports.base import TERMINAL, Rendered, Report, TextLayout, VgpuCount, optional, vgpu_counts
from vgpuctl.reports.profiles import profile_fb
from vgpuctl.visible import lines_text, visible

if TYPE_CHECKING:
    from rich.console import RenderableType


@dataclass
class VmDevice:
    key: int
    profile: str
    fb_gb: float
    nvlink_group: int | None  # the device group instance key, for NVLink-grouped vGPUs


@dataclass
class VmVgpusReport(Report):
    """`vm vgpu list`: one VM's vGPUs, their devices and the GPUs they sit on."""

    kind: ClassVar[str] = "vm-vgpus"
    vm: str
    host: str | None
    power_state: str
    vgpus: list[VgpuCount]
    devices: list[VmDevice]
    gpus: list[str]
    round_trips: int | None = optional()

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        from rich.table import Table
        from rich.text import Text

        title = f"{self.vm} on {self.host or '-'} ({self.power_state})"
        if layout.plain:
            return self.plain_text()
        if not self.devices:
            return Text(f"{title}: no vGPUs")
        table = Table(title=title, title_justify="left")
        for col in ("key", "profile", "framebuffer", "NVLink group"):
            table.add_column(col, overflow="fold")
        for d in self.devices:
            group = "-" if d.nvlink_group is None else str(d.nvlink_group)
            table.add_row(*(Text(visible(cell, False)) for cell in (str(d.key), d.profile, f"{d.fb_gb} GB", group)))
        out: list[RenderableType] = [table]
        if self.gpus:
            out.append(Text(f"on GPUs: {', '.join(self.gpus)}"))
        return out

    def plain_text(self) -> str:
        """One line for the VM, one per vGPU device, one for its GPUs."""
        lines = [f"vm {self.vm}  host {self.host or '-'}  power {self.power_state}  vgpus {len(self.devices)}"]
        for d in self.devices:
            group = "-" if d.nvlink_group is None else str(d.nvlink_group)
            lines.append(f"  vgpu key {d.key}  profile {d.profile}  framebuffer {d.fb_gb} GB  nvlink group {group}")
        if self.gpus:
            lines.append(f"  on GPUs {', '.join(self.gpus)}")
        return lines_text(lines)


def vm_vgpus_report(observed: Observed, vm: ObservedVm, round_trips: int | None = None) -> VmVgpusReport:
    """One VM's vGPUs: each device with its framebuffer and NVLink group, and the GPUs of its host it sits on."""
    host = observed.hosts.get(vm.host or "")
    return VmVgpusReport(
        vm=vm.name,
        host=vm.host,
        power_state=str(vm.power_state),
        vgpus=vgpu_counts(d.profile for d in vm.vgpus),
        devices=[VmDevice(d.key, d.profile, profile_fb(d.profile, host), d.device_group_key) for d in vm.vgpus],
        gpus=sorted(g.pci_id for g in (host.gpus if host else []) if vm.name in g.vms),
        round_trips=round_trips,
    )
