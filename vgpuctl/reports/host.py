"""`vgpuctl host show`'s document: one host's GPU state (module options, its settings, per GPU MIG and NVLink) from
the bulk read and the host's facts; `status` adds the same to its hosts (vgpuctl.reports.status.merge_status)."""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, ClassVar

from vgpuctl.domain import GpuVgpuMode
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import ObservedGpu, ObservedHost
from vgpuctl.reports.base import TERMINAL, Report, TextLayout, optional
from vgpuctl.settings import SETTINGS
from vgpuctl.settings.base import ModuleOptions as ModuleOptionsView
from vgpuctl.settings.facts import MIG_MODE, HostFacts, guest_drivers, nvlink_links, nvlink_peers
from vgpuctl.visible import lines_text

if TYPE_CHECKING:
    pass


@dataclass
class ModuleOptions:
    configured: str  # for the next boot
    effective: str  # of the loaded module


@dataclass
class SettingValue:
    """One host setting's value (vgpuctl.settings), and what it will be after the next reboot when that
    differs (a module option written but not yet loaded)."""

    setting: str  # display key: nvlink, scheduler, graphics.default_type, ...
    value: str
    after_reboot: str | None = optional()


@dataclass
class GuestDriver:
    """The guest driver a running vGPU VM on the host reports (`nvidia-smi vgpu -q`); None: it reports none (no
    driver loaded in the guest)."""

    vm: str
    version: str | None


@dataclass
class HostGpu:
    gpu: str
    device: str
    graphics_type: str
    vgpu_mode: str
    mig_current: bool | None  # None: not MIG-capable, or the shell was not read
    mig_pending: bool | None
    nvlink_links: int | None
    nvlink_active: int | None
    nvlink_peers: list[str]
    vms: list[str]


@dataclass
class HostReport(Report):
    """`host show`: one host's GPU state from the API and the ESXi shell."""

    kind: ClassVar[str] = "host"
    host: str
    connection_state: str
    in_maintenance: bool
    default_graphics_type: str
    assignment_policy: str
    module_options: ModuleOptions
    nvlink: str
    scheduler: str
    gpus: list[HostGpu]
    nvlink_after_reboot: str | None = optional()
    scheduler_after_reboot: str | None = optional()
    shell_error: str | None = optional()
    settings: list[SettingValue] = field(default_factory=list)  # every host-wide setting, in registry order
    guest_drivers: list[GuestDriver] | None = optional()

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        options = self.module_options
        next_boot = "" if options.configured == options.effective else f" (next boot: {options.configured or '(none)'})"
        nvlink_later = f" ({self.nvlink_after_reboot} after reboot)" if self.nvlink_after_reboot else ""
        scheduler_later = f" ({self.scheduler_after_reboot} after reboot)" if self.scheduler_after_reboot else ""
        lines = [
            f"host {self.host}: {self.connection_state}" + (", in maintenance mode" if self.in_maintenance else ""),
            f"  graphics: default {self.default_graphics_type}, assignment {self.assignment_policy}",
            f"  nvlink: {self.nvlink}{nvlink_later}",
            f"  scheduler: {self.scheduler}{scheduler_later}",
        ]
        shown = {"graphics.default_type", "graphics.assignment_policy", "nvlink", "scheduler"}  # the lines above
        for v in self.settings:
            if v.setting not in shown:
                later = f" ({v.after_reboot} after reboot)" if v.after_reboot else ""
                lines.append(f"  {v.setting}: {v.value}{later}")
        lines.append(f"  nvidia module options: {options.effective or '(none)'}{next_boot}")
        if self.guest_drivers:
            drivers = ", ".join(f"{d.vm} {d.version or 'none'}" for d in self.guest_drivers)
            lines.append(f"  guest drivers: {drivers}")
        lines.append("  GPUs:")
        for g in self.gpus:
            links = "" if not g.nvlink_links else f", NVLink {g.nvlink_active}/{g.nvlink_links} up"
            peers = f" to {', '.join(g.nvlink_peers)}" if g.nvlink_peers else ""
            vms = f", VMs: {', '.join(g.vms)}" if g.vms else ""
            mig = mig_text(g.mig_current, g.mig_pending)
            lines.append(f"    {g.gpu} {g.device}: {g.graphics_type}, {g.vgpu_mode}, MIG {mig}{links}{peers}{vms}")
        return lines_text(lines)


def mig_text(current: bool | None, pending: bool | None) -> str:
    if current is None:
        return "n/a"
    text = "on" if current else "off"
    if pending is not None and pending != current:
        text += f" ({'on' if pending else 'off'} pending)"
    return text


NVLINK_KEY, SCHEDULER_KEY, MANAGER_KEY = "nvlink", "scheduler", "vgpu_manager"


def setting_values(host: ObservedHost, facts: HostFacts | None) -> list[SettingValue]:
    """Every host-wide setting's value now (and after the next reboot when that differs), in registry order."""
    return [
        SettingValue(state.key, state.value, state.after_reboot)
        for setting in SETTINGS
        for state in setting.status(host, facts)
    ]


def host_status(host: ObservedHost, facts: HostFacts | None, shell_error: str | None = None) -> HostReport:
    """One host's GPU state: module options (configured and in effect), its settings, per GPU facts."""
    options = ModuleOptionsView.of(host, facts)
    values = setting_values(host, facts)
    by_key = {v.setting: v for v in values}  # the fields `host show` documents had before its `settings` list
    return HostReport(
        host=host.name,
        connection_state=host.connection_state,
        in_maintenance=host.in_maintenance,
        default_graphics_type=host.default_graphics_type,
        assignment_policy=host.assignment_policy,
        module_options=ModuleOptions(options.configured, options.effective),
        nvlink=by_key[NVLINK_KEY].value,
        scheduler=by_key[SCHEDULER_KEY].value,
        gpus=[_gpu_row(g, facts) for g in host.gpus],
        nvlink_after_reboot=by_key[NVLINK_KEY].after_reboot,
        scheduler_after_reboot=by_key[SCHEDULER_KEY].after_reboot,
        shell_error=shell_error,
        settings=values,
        guest_drivers=_guest_drivers(facts),
    )


def _guest_drivers(facts: HostFacts | None) -> list[GuestDriver] | None:
    """The running vGPU VMs' guest drivers, when the shell was read."""
    if facts is None or not facts.shell:
        return None
    return [GuestDriver(vm, version) for vm, version in sorted(guest_drivers(facts).items())]


def _gpu_row(gpu: ObservedGpu, facts: HostFacts | None) -> HostGpu:
    pci = gpu.pci_id.lower()
    shell = facts is not None and facts.shell and pci in facts.gpus
    mig = facts.gpu(MIG_MODE, pci) if facts is not None and shell else None
    links = nvlink_links(facts).get(pci) if facts is not None and shell else None
    return HostGpu(
        gpu=gpu.pci_id,
        device=gpu.device_name,
        graphics_type=gpu.graphics_type,
        vgpu_mode=gpu.vgpu_mode,
        mig_current=mig.current if mig is not None else None,
        mig_pending=mig.pending if mig is not None else None,
        nvlink_links=len(links.links) if links is not None else (0 if shell else None),
        nvlink_active=links.active_links if links is not None else (0 if shell else None),
        nvlink_peers=nvlink_peers(facts).get(pci, []) if facts is not None else [],
        vms=list(gpu.vms),
    )


def mig_label(current: bool | None, pending: bool | None, vgpu_mode: str | None = None) -> str:
    """on / off / "off (on pending)" / n/a; from vSphere's vgpuMode when the shell was not read."""
    if current is None:
        if vgpu_mode == GpuVgpuMode.MIG:
            return "on"
        return "n/a" if vgpu_mode is None else "off?"
    text = "on" if current else "off"
    if pending is not None and pending != current:
        text += f" ({'on' if pending else 'off'} pending)"
    return text
