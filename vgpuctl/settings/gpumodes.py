"""Per GPU: its mode (MIG or time-sliced), its time-sliced vGPU mode and its graphics type.

Inventory: `gpus: [{select: all|PCI id, mode: mig|time-sliced, vgpu_mode: sameSize|mixedSize,
graphics_type: shared|sharedDirect}]`; a GPU takes the `all` item, then its own on top.
vSphere: HostGraphicsInfo (config.graphicsInfo) graphicsType and vgpuMode per GPU, HostGraphicsConfig
deviceType[] (read with the host's facts) for the time-sliced mode configured, written with UpdateGraphicsConfig;
MIG mode with `nvidia-smi -i GPU -mig 0|1` in the ESXi shell, which also says whether it is pending until a
reboot (Ampere) or in effect at once (Hopper; the catalogue's `mig.apply`). docs/host-changes.md, docs/gpu-rules.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from vgpuctl.domain import TIME_SLICED_MODES, ChangeKind, GpuMode, GpuVgpuMode, GraphicsType, Phase, VgpuMode
from vgpuctl.errors import VgpuctlError
from vgpuctl.esxi import commands, parsers
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import HostChange, ObservedGpu, ObservedHost
from vgpuctl.profiles import BOARDS, gpu_board
from vgpuctl.settings.base import (
    GRAPHICS_STEP,
    ApplyStep,
    GpuField,
    GpuSetting,
    HostPlan,
    HostWriter,
    PlanInput,
    Reads,
    host_change,
)
from vgpuctl.settings.facts import MIG_MODE, ApiFact, HostApi, HostFacts
from vgpuctl.strictmodel import KeyPath, Lax
from vgpuctl.vsphere.tasks import in_flight

MODE: GpuField[GpuMode] = GpuField("mode", Lax[GpuMode])
VGPU_MODE: GpuField[VgpuMode] = GpuField("vgpu_mode", Lax[VgpuMode])  # time-sliced only
GRAPHICS_TYPE: GpuField[GraphicsType] = GpuField("graphics_type", Lax[GraphicsType])

GPU_TYPE_KIND = ChangeKind("graphics.type")
VGPU_MODE_KIND = ChangeKind("graphics.vgpu_mode")
MIG = ChangeKind("mig")

MIG_STEP = ApplyStep("mig", 10)  # nvidia-smi on the host, one GPU after the other
API_MIXED_SIZE = (8, 0, 3)  # HostGraphicsConfig vgpuMode sameSize | mixedSize (docs/preflight.md, "Versions")


@dataclass(frozen=True)
class ConfiguredType:
    """A GPU's entry of HostGraphicsConfig.deviceType: what is configured for it (None: its own is not set)."""

    graphics_type: str | None
    vgpu_mode: str | None  # the time-sliced mode (sameSize|mixedSize)


def _device_types(api: HostApi) -> dict[str, ConfiguredType]:
    return {d.pci_id.lower(): ConfiguredType(d.graphics_type, d.vgpu_mode) for d in api.state.device_types}


DEVICE_TYPES: ApiFact[dict[str, ConfiguredType]] = ApiFact(
    "device_types", "the GPUs' configured graphics types", _device_types,
    decode=lambda d: {pci: ConfiguredType(**v) for pci, v in d.items()}, plural=True,
)


def configured(gpu: ObservedGpu, facts: HostFacts | None) -> ConfiguredType:
    types = facts.get(DEVICE_TYPES) if facts is not None else None
    return (types or {}).get(gpu.pci_id.lower()) or ConfiguredType(None, None)


def mig_capable(gpu: ObservedGpu, facts: HostFacts | None) -> bool:
    """What nvidia-smi says when the shell was read, else what the catalogue says of the board."""
    if facts is not None and facts.shell and gpu.pci_id.lower() in facts.gpus:
        return facts.gpu(MIG_MODE, gpu.pci_id) is not None
    board = gpu_board(gpu)
    return board is not None and BOARDS[board].mig_capable


def _mig_needs_reboot(board: str | None) -> bool:
    """Ampere applies a MIG mode switch at the next reboot, Hopper at once (catalogue `mig.apply`)."""
    return board is None or board not in BOARDS or BOARDS[board].mig_needs_reboot


def mode_name(mig: bool | None) -> GpuMode:
    return GpuMode.MIG if mig else GpuMode.TIME_SLICED


def time_sliced_mode(gpu: ObservedGpu, want: object, facts: HostFacts | None) -> str | None:
    """The GPU's time-sliced vGPU mode after the plan, or None when it will run in MIG mode."""
    mode = MODE.of(want)
    if mode == GpuMode.MIG or (mode is None and gpu.vgpu_mode == GpuVgpuMode.MIG):
        return None
    wanted = VGPU_MODE.of(want)
    if wanted:
        return wanted
    now = configured(gpu, facts).vgpu_mode
    if now:
        return now
    return gpu.vgpu_mode if gpu.vgpu_mode in TIME_SLICED_MODES else None


def _current_vgpu_mode(gpu: ObservedGpu, facts: HostFacts | None) -> str | None:
    now = configured(gpu, facts).vgpu_mode
    if now is None and gpu.vgpu_mode in TIME_SLICED_MODES:
        now = gpu.vgpu_mode
    return now


def _plan_type(inp: PlanInput, gpu: ObservedGpu, want: object) -> list[HostChange]:
    current = configured(gpu, inp.facts).graphics_type or gpu.graphics_type
    wanted = GRAPHICS_TYPE.of(want)
    if wanted is None or wanted == current:
        return []
    return [host_change(inp, GPU_TYPE_KIND, current, wanted, Phase.REBOOT, gpu.pci_id.lower())]


def _plan_mig(inp: PlanInput, gpu: ObservedGpu, want: object) -> HostPlan:
    result = HostPlan()
    pci, wanted = gpu.pci_id.lower(), MODE.of(want)
    capable = mig_capable(gpu, inp.facts)
    read = inp.facts.gpu(MIG_MODE, pci) if inp.shell and inp.facts is not None and capable else None
    mig_now = read.current if read is not None else gpu.vgpu_mode == GpuVgpuMode.MIG
    pending = read.pending if read is not None else None
    if wanted == GpuMode.MIG and not capable:
        result.errors.append(
            f"host {inp.host.name}: GPU {pci} ({gpu.device_name or 'unknown model'}) is not MIG-capable"
        )
    elif wanted is not None and capable:
        desired = wanted == GpuMode.MIG
        if mig_now != desired or (pending is not None and pending != desired):
            old = str(mode_name(mig_now))
            if pending is not None and pending != mig_now:
                old += f" ({mode_name(pending)} pending)"
            needs_reboot = mig_now != desired and _mig_needs_reboot(gpu_board(gpu))
            result.changes.append(host_change(inp, MIG, old, wanted,
                                              Phase.REBOOT if needs_reboot else Phase.MAINTENANCE, pci))
    return result


def _plan_vgpu_mode(inp: PlanInput, gpu: ObservedGpu, want: object) -> list[HostChange]:
    wanted = None if MODE.of(want) == GpuMode.MIG else VGPU_MODE.of(want)  # MIG GPUs run multiInstanceGpu
    if wanted is None:
        return []
    current = _current_vgpu_mode(gpu, inp.facts)
    if current == wanted:
        return []
    return [host_change(inp, VGPU_MODE_KIND, current, wanted, Phase.MAINTENANCE, gpu.pci_id.lower())]


class GpuModes(GpuSetting):
    fields: tuple[GpuField[Any], ...] = (MODE, VGPU_MODE, GRAPHICS_TYPE)
    kinds = (GPU_TYPE_KIND, VGPU_MODE_KIND, MIG)
    offer_kinds = frozenset(kinds)
    shell_kinds = frozenset({MIG})
    reads = Reads(
        properties=("config.graphicsInfo", "hardware.pciDevice"),
        host_fields=("gpus",),
        gpu_fields=("pci_id", "device_name", "vendor_id", "device_id", "memory_kb", "graphics_type", "vgpu_mode"),
        gpu_queries=(MIG_MODE,),
        api=(DEVICE_TYPES,),
    )
    drift_fields = ("gpus",)

    def item_problems(self, item: object) -> list[tuple[KeyPath, str]]:
        """A vGPU mode on a MIG GPU."""
        if MODE.of(item) == GpuMode.MIG and VGPU_MODE.of(item) is not None:
            return [(("vgpu_mode",), "vgpu_mode applies to time-sliced GPUs only (MIG GPUs are multiInstanceGpu)")]
        return []

    def item_api_needs(self, item: object) -> list[tuple[tuple[int, ...], str]]:
        mixed = VGPU_MODE.of(item) == VgpuMode.MIXED_SIZE
        return [(API_MIXED_SIZE, "mixed-size time-sliced vGPUs")] if mixed else []

    def inherits(self, name: str, over: object) -> bool:
        """A GPU's own `mode: mig` item does not take the cluster's time-sliced vGPU mode."""
        return not (name == VGPU_MODE.name and MODE.of(over) == GpuMode.MIG)

    def plan_gpu(self, inp: PlanInput, gpu: ObservedGpu, want: object) -> HostPlan:
        result = HostPlan(changes=_plan_type(inp, gpu, want))
        result.extend(_plan_mig(inp, gpu, want))
        result.changes += _plan_vgpu_mode(inp, gpu, want)
        return result

    def predict(self, host: ObservedHost, changes: Sequence[HostChange]) -> None:
        gpus = {g.pci_id.lower(): g for g in host.gpus}
        for c in changes:
            gpu = gpus.get(c.target)
            if gpu is None:
                continue
            if c.kind == GPU_TYPE_KIND:
                gpu.graphics_type = str(c.new)
            elif c.kind == VGPU_MODE_KIND and gpu.vgpu_mode != GpuVgpuMode.MIG:
                gpu.vgpu_mode = str(c.new)
            elif c.kind == MIG:
                gpu.vgpu_mode = GpuVgpuMode.MIG if c.new == GpuMode.MIG else GpuVgpuMode.SAME_SIZE

    def step(self, kind: ChangeKind) -> ApplyStep:
        return MIG_STEP if kind == MIG else GRAPHICS_STEP

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        if step == MIG_STEP:
            _set_mig(changes, writer)
            return
        for c in changes:
            name = GRAPHICS_TYPE.name if c.kind == GPU_TYPE_KIND else VGPU_MODE.name
            writer.graphics.device(c.target)[name] = str(c.new)

    def explain_gpu(self, name: str, gpu: ObservedGpu, facts: HostFacts | None) -> str | None:
        if name == MODE.name:
            return str(mode_name(gpu.vgpu_mode == GpuVgpuMode.MIG))
        if name == VGPU_MODE.name:
            return str(gpu.vgpu_mode)
        if name == GRAPHICS_TYPE.name:
            return str(gpu.graphics_type)
        return None

    def export_gpu(self, gpu: ObservedGpu, facts: HostFacts | None) -> dict[str, Any]:
        """mode, vgpu_mode and graphics_type of one GPU, read the way the planner compares them; with the ESXi
        shell's facts, the MIG mode configured for the next boot."""
        out: dict[str, Any] = {}
        mig = gpu.vgpu_mode == GpuVgpuMode.MIG
        read = facts.gpu(MIG_MODE, gpu.pci_id) if facts is not None else None
        if read is not None:
            mig = read.pending  # the mode a pending switch leaves at the next reboot (see the notes)
        out[MODE.name] = str(mode_name(mig))
        if not mig:
            current = _current_vgpu_mode(gpu, facts)
            if current in TIME_SLICED_MODES:
                out[VGPU_MODE.name] = str(current)
        graphics = configured(gpu, facts).graphics_type or gpu.graphics_type
        if graphics in (GraphicsType.SHARED, GraphicsType.SHARED_DIRECT):
            out[GRAPHICS_TYPE.name] = graphics
        return out

    def export_notes(self, host: ObservedHost, facts: HostFacts | None) -> list[str]:
        """A note per GPU whose MIG switch is pending (configured, applied at the next reboot): no inventory plans
        to no change for it, so the file completes the switch and says so."""
        if facts is None or not facts.shell:
            return []
        notes = []
        for gpu in sorted(host.gpus, key=lambda g: g.pci_id):
            read = facts.gpu(MIG_MODE, gpu.pci_id)
            if read is None or not read.switching:
                continue
            now, then = ("on", "off") if read.current else ("off", "on")
            notes.append(
                f"GPU {gpu.pci_id.lower()}: MIG is {now} with a switch to {then} pending (nvidia-smi): written "
                f"as {then}, so plan shows the reboot that completes it; write '{mode_name(read.current)}' to "
                "cancel the switch instead"
            )
        return notes


def _set_mig(changes: Sequence[HostChange], writer: HostWriter) -> None:
    with writer.open_shell() as shell:
        for c in changes:
            writer.progress("mig", f"{c.target} -> {c.new}")
            command = commands.set_mig_mode(c.target, c.new == GpuMode.MIG)
            out = in_flight(f"mig {c.target} host {writer.host}", partial(shell.run, command)).stdout  # 2nd Ctrl-C
            for res in parsers.parse_mig_set(out):
                if not res.supported:
                    raise VgpuctlError(f"{writer.host}: GPU {c.target}: MIG mode: {res.reason}")
                writer.reboot_pending = writer.reboot_pending or res.pending
            writer.done(f"mig {c.target} {c.new}")


SETTING = GpuModes()
