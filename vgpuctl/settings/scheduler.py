"""The time-sliced vGPU scheduler: best effort, equal share or fixed share, with an optional time slice or a
strict round-robin frequency and averaging factor.

Inventory: `scheduler: {policy, timeslice_ms, frequency_hz, averaging_factor}` (or just the policy). Host: the
`RmPVMRL` entry of the nvidia module option `NVreg_RegistryDwords` (vgpuctl.esxi.modopts), whose value
vgpuctl.esxi.rmpvmrl encodes; it takes effect when the module loads again (a reboot in maintenance mode).
Fixed share is not supported on mixed-size GPUs. docs/scheduler.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from vgpuctl.domain import ChangeKind, Phase, SchedulerPolicy, VgpuMode
from vgpuctl.esxi import modopts, rmpvmrl
from vgpuctl.model import HostChange, ObservedHost
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
from vgpuctl.settings.facts import MODULE_OPTIONS, HostFacts
from vgpuctl.settings.gpumodes import VGPU_MODE
from vgpuctl.settings.gpus import SETTING as GPUS
from vgpuctl.settings.gpus import time_sliced_modes_after
from vgpuctl.strictmodel import KeyPath, Lax, StrictModel

MIXED_SIZE_POLICIES = (SchedulerPolicy.BEST_EFFORT, SchedulerPolicy.EQUAL_SHARE)
TUNING = ("timeslice_ms", "frequency_hz", "averaging_factor")
UNKNOWN = "unknown"  # its state when the host could not say


class SchedulerSpec(StrictModel):
    """RmPVMRL fields (docs/scheduler.md): a time slice, or a strict round-robin frequency and averaging factor."""

    policy: Lax[SchedulerPolicy] = SchedulerPolicy.BEST_EFFORT
    timeslice_ms: int | None = Field(default=None, ge=1, le=30)
    frequency_hz: int | None = Field(default=None, ge=63, le=960)
    averaging_factor: int | None = Field(default=None, ge=1, le=60)


def _shorthand(value: Any) -> Any:
    """`scheduler: equal-share` is `scheduler: {policy: equal-share}`."""
    return {"policy": value} if isinstance(value, str) else value


def label(spec: SchedulerSpec) -> str:
    """How plans show the policy: `equal-share`, `fixed-share (24 ms)` (rmpvmrl.label)."""
    return rmpvmrl.label(spec.policy, spec.timeslice_ms, spec.frequency_hz, spec.averaging_factor)


def value_of(change: HostChange) -> str | None:
    """The RmPVMRL value a planned change writes (None: best effort, no entry)."""
    return rmpvmrl.encode(*rmpvmrl.parse_label(str(change.new)))


SCHEDULER = ChangeKind("scheduler")


class Scheduler(HostSetting[SchedulerSpec | None]):
    key = "scheduler"
    schema: Any = Annotated[SchedulerSpec | None, BeforeValidator(_shorthand)]
    kinds = (SCHEDULER,)
    shell_kinds = frozenset(kinds)  # the module's declared parameters are read there
    reads = Reads(host_fields=("module_options",), api=(MODULE_OPTIONS,))
    drift_fields = ("module_options",)
    apply_step = MODULE_OPTIONS_STEP

    def problems(self, spec: object) -> list[tuple[KeyPath, str]]:
        """Fixed share on mixed-size GPUs; tuning that does not go with the policy."""
        sched = self.of(spec)
        if sched is None:
            return []
        out: list[tuple[KeyPath, str]] = []
        mixed = any(VGPU_MODE.of(g) == VgpuMode.MIXED_SIZE for g in GPUS.of(spec))
        if sched.policy == SchedulerPolicy.FIXED_SHARE and mixed:
            out.append(((self.key,), "mixed-size GPUs support only the best-effort and equal-share schedulers"))
        tuning = [k for k in TUNING if getattr(sched, k) is not None]
        if tuning and sched.policy == SchedulerPolicy.BEST_EFFORT:
            what = "a time slice" if tuning[0] == "timeslice_ms" else tuning[0]
            out.append(((self.key, tuning[0]), f"{what} applies to equal-share and fixed-share only"))
        elif "timeslice_ms" in tuning and len(tuning) > 1:
            why = "timeslice_ms cannot be combined with frequency_hz or averaging_factor"
            out.append(((self.key, "timeslice_ms"), why))
        return out

    def plan(self, inp: PlanInput) -> HostPlan:
        sched, host = self.of(inp.spec), inp.host
        result = HostPlan()
        if sched is None:
            return result
        try:
            value = rmpvmrl.encode(sched.policy, sched.timeslice_ms, sched.frequency_hz, sched.averaging_factor)
        except ValueError as err:
            result.errors.append(f"host {host.name}: scheduler: {err}")
            return result
        if sched.policy not in MIXED_SIZE_POLICIES:
            modes = time_sliced_modes_after(inp)
            mixed = [pci for pci, mode in modes.items() if mode == VgpuMode.MIXED_SIZE]
            if mixed:
                result.errors.append(
                    f"host {host.name}: the {sched.policy} scheduler is not supported on mixed-size "
                    f"GPUs ({', '.join(mixed)}): use best-effort or equal-share"
                )
                return result
        options = inp.options
        if modopts.sets_rmpvmrl_per_device(options.effective):
            result.warnings.append(
                f"host {host.name}: {modopts.REGISTRY_PER_DEVICE} sets RmPVMRL per GPU and overrides the host-wide "
                "scheduler there"
            )
        want_n = rmpvmrl.to_int(value)
        now, next_boot = modopts.rmpvmrl_of(options.effective), modopts.rmpvmrl_of(options.configured)
        if rmpvmrl.to_int(now) != want_n or rmpvmrl.to_int(next_boot) != want_n:
            old = str(rmpvmrl.decode(now))
            if rmpvmrl.to_int(now) != rmpvmrl.to_int(next_boot):
                old += f" ({rmpvmrl.decode(next_boot)} after reboot)"
            result.changes.append(host_change(inp, SCHEDULER, old, label(sched), Phase.REBOOT))
        return result

    def param_written(self, change: HostChange) -> str | None:
        return modopts.REGISTRY_DWORDS if value_of(change) is not None else None

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        for c in changes:
            writer.option_edits.append(partial(modopts.set_rmpvmrl, value=value_of(c)))

    def explain(self, key: str, host: ObservedHost, facts: HostFacts | None) -> str | None:
        state = modopts.scheduler_of(ModuleOptions.of(host, facts).configured)
        value = getattr(state, key.partition(".")[2], None)
        return "(none)" if value is None else str(value)

    def export(self, host: ObservedHost, facts: HostFacts | None) -> Exported:
        state = modopts.scheduler_of(ModuleOptions.of(host, facts).configured)
        if state.policy == rmpvmrl.UNKNOWN:
            return Exported(notes=[f"scheduler left out: RmPVMRL={state.value} is not a value vgpuctl writes"])
        sched: dict[str, Any] = {"policy": state.policy}
        for key in TUNING:
            if getattr(state, key, None) is not None:
                sched[key] = getattr(state, key)
        return Exported({self.key: sched})

    def status(self, host: ObservedHost, facts: HostFacts | None) -> list[SettingState]:
        options = ModuleOptions.of(host, facts)
        if options.unread and facts is not None and facts.warnings:
            return [SettingState(self.key, UNKNOWN)]
        now, then = str(modopts.scheduler_of(options.effective)), str(modopts.scheduler_of(options.configured))
        return [SettingState(self.key, now, then if then != now else None)]


SETTING = Scheduler()
