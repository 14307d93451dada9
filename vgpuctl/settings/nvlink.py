"""NVLink between the host's GPUs: enabled (the driver's default) or disabled.

Inventory: `nvlink: enabled|disabled`. Host: the nvidia module option `NVreg_NvLinkDisable=1`
(vgpuctl.esxi.modopts), read and written with the module options (QueryConfiguredModuleOptionString /
UpdateModuleOptionString); it takes effect when the module loads again, so a change reboots the host in
maintenance mode. After it, nvidia-smi shows the links up (enabled) or down (disabled). docs/host-changes.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from vgpuctl.domain import ChangeKind, NvlinkState, Phase
from vgpuctl.esxi import modopts
from vgpuctl.model import HostChange, ObservedHost
from vgpuctl.profiles import BOARDS, board_for_device, nvlink_links_problem, nvlink_wired
from vgpuctl.settings.base import (
    MODULE_OPTIONS_STEP,
    ApplyStep,
    Exported,
    HostPlan,
    HostSetting,
    HostWriter,
    ModuleOptions,
    PlanInput,
    Reads,
    SettingState,
    host_change,
)
from vgpuctl.settings.facts import MODULE_OPTIONS, NVLINK_LINKS, HostFacts, nvlink_links
from vgpuctl.strictmodel import Lax

UNKNOWN = "unknown"  # its state when the host could not say


NVLINK = ChangeKind("nvlink")


class Nvlink(HostSetting[NvlinkState | None]):
    key = "nvlink"
    schema: Any = Lax[NvlinkState] | None
    kinds = (NVLINK,)
    offer_kinds = frozenset(kinds)
    shell_kinds = frozenset(kinds)  # the module's declared parameters and the links are read there
    reads = Reads(host_fields=("module_options",), shell=(NVLINK_LINKS,), api=(MODULE_OPTIONS,))
    drift_fields = ("module_options",)
    apply_step = MODULE_OPTIONS_STEP

    def plan(self, inp: PlanInput) -> HostPlan:
        result = HostPlan()
        want = self.of(inp.spec)
        if want is None:
            return result
        options = inp.options
        now, next_boot = modopts.nvlink_of(options.effective), modopts.nvlink_of(options.configured)
        if want not in (now, next_boot) or now != next_boot:
            old = str(now) if now == next_boot else f"{now} ({next_boot} after reboot)"
            result.changes.append(host_change(inp, NVLINK, old, want, Phase.REBOOT))
        return result

    def param_written(self, change: HostChange) -> str | None:
        return modopts.NVLINK_DISABLE if change.new == NvlinkState.DISABLED else None

    def ends_nvlink_groups(self, change: HostChange) -> bool:
        return change.new == NvlinkState.DISABLED

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        for c in changes:
            writer.option_edits.append(partial(modopts.set_nvlink, state=NvlinkState(str(c.new))))

    def verify(self, inp: PlanInput) -> list[str]:
        """The links the board wires up (enabled) or none (disabled), as nvidia-smi shows them
        (profiles.nvlink_links_problem)."""
        want, facts = self.of(inp.spec), inp.facts
        if want is None or facts is None or not facts.shell:
            return []
        observed = inp.gpus
        problems = []
        for pci, g in sorted(nvlink_links(facts).items()):
            og = observed.get(pci.lower())
            wired = nvlink_wired(board_for_device(og.device_name, None, og.device_id) if og is not None else None)
            problem = nvlink_links_problem(want == NvlinkState.ENABLED, g.active_links, len(g.links), wired)
            if problem is not None:
                problems.append(f"nvlink {pci}: {problem}")
        return problems

    def explain(self, key: str, host: ObservedHost, facts: HostFacts | None) -> str | None:
        return str(modopts.nvlink_of(ModuleOptions.of(host, facts).configured))

    def export(self, host: ObservedHost, facts: HostFacts | None) -> Exported:
        """Written for hosts whose GPUs have NVLink (the configured value)."""
        boards = [board_for_device(g.device_name) for g in host.gpus]
        if not any(b in BOARDS and BOARDS[b or ""].nvlink_capable for b in boards):
            return Exported()
        return Exported({self.key: str(modopts.nvlink_of(ModuleOptions.of(host, facts).configured))})

    def status(self, host: ObservedHost, facts: HostFacts | None) -> list[SettingState]:
        options = ModuleOptions.of(host, facts)
        if options.unread and facts is not None and facts.warnings:
            return [SettingState(self.key, UNKNOWN)]
        now, then = str(modopts.nvlink_of(options.effective)), str(modopts.nvlink_of(options.configured))
        return [SettingState(self.key, now, then if then != now else None)]


SETTING = Nvlink()
