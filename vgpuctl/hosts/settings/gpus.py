"""Per GPU: its mode (MIG or time-sliced), its time-sliced vGPU mode and its graphics type.

Inventory: `gpus: [{select: all|PCI id, mode: mig|time-sliced, vgpu_mode: sameSize|mixedSize,
graphics_type: shared|sharedDirect}]`; a GPU takes the `all` item, then its own on top.
vSphere: HostGraphicsInfo (config.graphicsInfo) graphicsType and vgpuMode per GPU, HostGraphicsConfig
deviceType[] (read with the host facts) for the time-sliced mode configured, written with UpdateGraphicsConfig;
MIG mode with `nvidia-smi -i GPU -mig 0|1` in the ESXi shell, which also says whether it is pending until a
reboot (Ampere) or in effect at once (Hopper; the catalogue's `mig.apply`). docs/host-changes.md, docs/gpu-rules.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from vgpuctl.domain import TIME_SLICED_MODES, ChangeKind, GpuMode, GpuVgpuMode, GraphicsType, Phase, VgpuMode
from vgpuctl.hosts.facts import GpuFacts, HostFacts
from vgpuctl.hosts.settings.base import (
    GRAPHICS_STEP,
    MIG_STEP,
    ApplyStep,
    Exported,
    HostPlan,
    HostWriter,
    Observes,
    PlanInput,
    SettingPrivileges,
    SettingState,
    host_change,
    names,
)
from vgpuctl.model import HostChange, ObservedGpu, ObservedHost
from vgpuctl.profiles import BOARDS, board_for_device
from vgpuctl.strictmodel import KeyPath, Lax, StrictModel

if TYPE_CHECKING:
    from vgpuctl.inventory import HostSpec

ALL = "all"  # GpuSpec.select of the item every GPU takes
_BUS_ID = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


class GpuSpec(StrictModel):
    """One item of `gpus:` in a hosts entry."""

    select: str = ALL  # all | a PCI bus id (0000:3b:00.0)
    mode: Lax[GpuMode] | None = None
    vgpu_mode: Lax[VgpuMode] | None = None  # time-sliced only
    graphics_type: Lax[GraphicsType] | None = None

    @field_validator("select")
    @classmethod
    def _select(cls, v: str) -> str:
        if v != ALL and not _BUS_ID.fullmatch(v):
            raise ValueError(f"must be 'all' or a PCI bus id like 0000:3b:00.0 (got {v!r})")
        return v.lower()


@dataclass
class Want:
    """What the inventory asks of one GPU (None: leave it as it is)."""

    mode: GpuMode | None = None
    vgpu_mode: VgpuMode | None = None
    graphics_type: GraphicsType | None = None


def wanted_gpus(spec: HostSpec, host: ObservedHost) -> tuple[dict[str, Want], list[str]]:
    """PCI id -> what the entry asks of that GPU (its `all` item, then its own), and errors for items that
    select a GPU the host does not have."""
    pcis = {g.pci_id.lower() for g in host.gpus}
    everything: GpuSpec | None = next((g for g in spec.gpus if g.select == ALL), None)
    errors = [
        f"host {host.name}: GPU {g.select} is not on this host (GPUs: {names(pcis)})"
        for g in spec.gpus
        if g.select != ALL and g.select.lower() not in pcis
    ]
    by_id = {g.select.lower(): g for g in spec.gpus if g.select != ALL}
    out: dict[str, Want] = {}
    for pci in sorted(pcis):
        want = Want()
        for source in (everything, by_id.get(pci)):
            if source is None:
                continue
            want.mode = source.mode or want.mode
            want.vgpu_mode = source.vgpu_mode or want.vgpu_mode
            want.graphics_type = source.graphics_type or want.graphics_type
        if want.mode == GpuMode.MIG:
            want.vgpu_mode = None
        out[pci] = want
    return out, errors


def board_of(gpu: ObservedGpu, offered: Sequence[str] = ()) -> str | None:
    """The GPU's board by device id, exact device name, or the host's offered profiles (never substrings)."""
    board = board_for_device(gpu.device_name, gpu.memory_kb / (1024 * 1024) or None, gpu.device_id, offered)
    return board if board in BOARDS else None


def mig_capable(gpu: ObservedGpu, gf: GpuFacts | None, shell: bool) -> bool:
    """What nvidia-smi says when the shell was read, else what the catalogue says of the board."""
    if shell and gf is not None:
        return gf.mig_capable
    board = board_of(gpu)
    return board is not None and BOARDS[board].mig_capable


def _mig_needs_reboot(board: str | None) -> bool:
    """Ampere applies a MIG mode switch at the next reboot, Hopper at once (catalogue `mig.apply`)."""
    return board is None or board not in BOARDS or BOARDS[board].mig_needs_reboot


def mode_name(mig: bool | None) -> GpuMode:
    return GpuMode.MIG if mig else GpuMode.TIME_SLICED


def time_sliced_mode(gpu: ObservedGpu, want: Want, gf: GpuFacts | None) -> str | None:
    """The GPU's time-sliced vGPU mode after the plan, or None when it will run in MIG mode."""
    if want.mode == GpuMode.MIG or (want.mode is None and gpu.vgpu_mode == GpuVgpuMode.MIG):
        return None
    if want.vgpu_mode:
        return want.vgpu_mode
    if gf is not None and gf.vgpu_mode:
        return gf.vgpu_mode
    return gpu.vgpu_mode if gpu.vgpu_mode in TIME_SLICED_MODES else None


def time_sliced_modes_after(inp: PlanInput) -> dict[str, str | None]:
    """PCI id -> the GPU's time-sliced vGPU mode once the entry is applied (None: MIG)."""
    wanted, _ = wanted_gpus(inp.spec, inp.host)
    gpus = inp.gpus
    return {pci: time_sliced_mode(gpus[pci], want, inp.gpu_facts(pci)) for pci, want in wanted.items()}


def _plan_type(inp: PlanInput, gpu: ObservedGpu, want: Want, gf: GpuFacts | None) -> list[HostChange]:
    current = gf.graphics_type if gf is not None and gf.graphics_type else gpu.graphics_type
    if want.graphics_type is None or want.graphics_type == current:
        return []
    pci = gpu.pci_id.lower()
    return [host_change(inp, ChangeKind.GPU_TYPE, current, want.graphics_type, Phase.REBOOT, pci)]


def _plan_mig(inp: PlanInput, gpu: ObservedGpu, want: Want, gf: GpuFacts | None) -> HostPlan:
    result = HostPlan()
    pci, shell = gpu.pci_id.lower(), inp.shell
    capable = mig_capable(gpu, gf, shell)
    mig_now = bool(gf.mig_current) if shell and gf is not None and capable else gpu.vgpu_mode == GpuVgpuMode.MIG
    pending = gf.mig_pending if shell and gf is not None and capable else None
    if want.mode == GpuMode.MIG and not capable:
        result.errors.append(
            f"host {inp.host.name}: GPU {pci} ({gpu.device_name or 'unknown model'}) is not MIG-capable"
        )
    elif want.mode is not None and capable:
        desired = want.mode == GpuMode.MIG
        if mig_now != desired or (pending is not None and pending != desired):
            old = str(mode_name(mig_now))
            if pending is not None and pending != mig_now:
                old += f" ({mode_name(pending)} pending)"
            phase = Phase.REBOOT if mig_now != desired and _mig_needs_reboot(board_of(gpu)) else Phase.MAINTENANCE
            result.changes.append(host_change(inp, ChangeKind.MIG, old, want.mode, phase, pci))
    return result


def _plan_vgpu_mode(inp: PlanInput, gpu: ObservedGpu, want: Want, gf: GpuFacts | None) -> list[HostChange]:
    if want.vgpu_mode is None:
        return []
    current = gf.vgpu_mode if gf is not None and gf.vgpu_mode else None
    if current is None and gpu.vgpu_mode in TIME_SLICED_MODES:
        current = gpu.vgpu_mode
    if current == want.vgpu_mode:
        return []
    pci = gpu.pci_id.lower()
    return [host_change(inp, ChangeKind.VGPU_MODE, current, want.vgpu_mode, Phase.MAINTENANCE, pci)]


class GpuModes:
    key = "gpus"
    schema: Any = list[GpuSpec]
    default: Any = Field(default_factory=list)
    kinds = (ChangeKind.GPU_TYPE, ChangeKind.VGPU_MODE, ChangeKind.MIG)
    offer_kinds = frozenset(kinds)
    observes = Observes(
        properties=("config.graphicsInfo", "hardware.pciDevice"),
        host_fields=("gpus",),
        gpu_fields=("pci_id", "device_name", "vendor_id", "device_id", "memory_kb", "graphics_type", "vgpu_mode"),
        gpu_facts=("mig_current", "mig_pending", "graphics_type", "vgpu_mode"),
    )
    drift_fields = ("gpus",)
    privileges: SettingPrivileges | None = None

    def is_set(self, spec: HostSpec) -> bool:
        return bool(spec.gpus)

    def problems(self, spec: HostSpec) -> list[tuple[KeyPath, str]]:
        """A GPU selected twice; a vGPU mode on a MIG GPU."""
        out: list[tuple[KeyPath, str]] = []
        selects: set[str] = set()
        for j, g in enumerate(spec.gpus):
            if g.select in selects:
                out.append((("gpus", j, "select"), f"GPU selection {g.select!r} appears twice"))
            selects.add(g.select)
            if g.mode == GpuMode.MIG and g.vgpu_mode is not None:
                out.append((("gpus", j, "vgpu_mode"),
                            "vgpu_mode applies to time-sliced GPUs only (MIG GPUs are multiInstanceGpu)"))
        return out

    def plan(self, inp: PlanInput) -> HostPlan:
        wanted, errors = wanted_gpus(inp.spec, inp.host)
        result = HostPlan(errors=errors)
        gpus = inp.gpus
        for pci, want in wanted.items():
            gf = inp.gpu_facts(pci)
            result.changes += _plan_type(inp, gpus[pci], want, gf)
            result.extend(_plan_mig(inp, gpus[pci], want, gf))
            result.changes += _plan_vgpu_mode(inp, gpus[pci], want, gf)
        return result

    def predict(self, host: ObservedHost, changes: Sequence[HostChange]) -> None:
        gpus = {g.pci_id.lower(): g for g in host.gpus}
        for c in changes:
            gpu = gpus.get(c.target)
            if gpu is None:
                continue
            if c.kind == ChangeKind.GPU_TYPE:
                gpu.graphics_type = str(c.new)
            elif c.kind == ChangeKind.VGPU_MODE and gpu.vgpu_mode != GpuVgpuMode.MIG:
                gpu.vgpu_mode = str(c.new)
            elif c.kind == ChangeKind.MIG:
                gpu.vgpu_mode = GpuVgpuMode.MIG if c.new == GpuMode.MIG else GpuVgpuMode.SAME_SIZE

    def step(self, kind: ChangeKind) -> ApplyStep:
        return MIG_STEP if kind == ChangeKind.MIG else GRAPHICS_STEP

    def needs_shell(self, kind: ChangeKind) -> bool:
        return kind == ChangeKind.MIG

    def param_written(self, change: HostChange) -> str | None:
        return None

    def ends_nvlink_groups(self, change: HostChange) -> bool:
        return False

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        if step == MIG_STEP:
            _set_mig(changes, writer)
            return
        for c in changes:
            field = "graphics_type" if c.kind == ChangeKind.GPU_TYPE else "vgpu_mode"
            writer.graphics.device(c.target)[field] = str(c.new)

    def verify(self, inp: PlanInput) -> list[str]:
        return []

    def explain(self, key: str, host: ObservedHost) -> str | None:
        select, _, field = key[len("gpus[") :].partition("].")
        gpus = [g for g in host.gpus if select in (ALL, g.pci_id)]
        if field == "mode":
            values = [str(mode_name(g.vgpu_mode == GpuVgpuMode.MIG)) for g in gpus]
        elif field in ("vgpu_mode", "graphics_type"):
            values = [str(getattr(g, field)) for g in gpus]
        else:
            return "-"
        distinct = sorted(set(values))
        if len(distinct) == 1:
            return distinct[0]
        return ", ".join(f"{g.pci_id}: {v}" for g, v in zip(gpus, values, strict=True))

    def export(self, host: ObservedHost, facts: HostFacts | None) -> Exported:
        gpus = {g.pci_id.lower(): export_gpu(g, facts) for g in host.gpus}
        return Exported(gpus=gpus, notes=_pending_mig_notes(host, facts))

    def status(self, host: ObservedHost, facts: HostFacts | None) -> list[SettingState]:
        return []  # per GPU rows: vgpuctl.hosts.status


def _set_mig(changes: Sequence[HostChange], writer: HostWriter) -> None:
    from functools import partial

    from vgpuctl.errors import VgpuctlError
    from vgpuctl.esxi import commands, parsers
    from vgpuctl.vsphere.tasks import in_flight

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


def export_gpu(gpu: ObservedGpu, facts: HostFacts | None) -> dict[str, str]:
    """mode, vgpu_mode and graphics_type of one GPU, read the way the planner compares them; with the ESXi
    shell's facts, the MIG mode configured for the next boot."""
    gf = facts.gpus.get(gpu.pci_id.lower()) if facts is not None else None
    out: dict[str, str] = {}
    mig = gpu.vgpu_mode == GpuVgpuMode.MIG
    if gf is not None and gf.mig_current is not None:
        mig = bool(gf.mig_current)
        if gf.mig_pending is not None:
            mig = bool(gf.mig_pending)  # the mode a pending switch leaves at the next reboot (see the notes)
    out["mode"] = str(mode_name(mig))
    if not mig:
        current = gf.vgpu_mode if gf is not None and gf.vgpu_mode else None
        if current is None and gpu.vgpu_mode in TIME_SLICED_MODES:
            current = gpu.vgpu_mode
        if current in TIME_SLICED_MODES:
            out["vgpu_mode"] = str(current)
    graphics = gf.graphics_type if gf is not None and gf.graphics_type else gpu.graphics_type
    if graphics in (GraphicsType.SHARED, GraphicsType.SHARED_DIRECT):
        out["graphics_type"] = graphics
    return out


def _pending_mig_notes(host: ObservedHost, facts: HostFacts | None) -> list[str]:
    """A note per GPU whose MIG switch is pending (configured, applied at the next reboot): no inventory plans
    to no change for it, so the file completes the switch and says so."""
    if facts is None or not facts.shell:
        return []
    notes = []
    for gpu in sorted(host.gpus, key=lambda g: g.pci_id):
        gf = facts.gpus.get(gpu.pci_id.lower())
        if gf is None or gf.mig_current is None or gf.mig_pending is None or gf.mig_pending == gf.mig_current:
            continue
        now, then = ("on", "off") if gf.mig_current else ("off", "on")
        notes.append(
            f"GPU {gpu.pci_id.lower()}: MIG is {now} with a switch to {then} pending (nvidia-smi): written "
            f"as {then}, so plan shows the reboot that completes it; write '{mode_name(gf.mig_current)}' to "
            "cancel the switch instead"
        )
    return notes


SETTING = GpuModes()
