"""Per GPU: its ECC memory, on or off.

Inventory: `gpus: [{select: all|PCI id, ecc: on|off}]`. Host: `nvidia-smi -i GPU -e 1|0` in the ESXi shell; the
mode nvidia-smi reports as current stays until the next reboot, the pending one is the mode after it
(`--query-gpu=ecc.mode.current,ecc.mode.pending`; `nvidia-smi -q` shows the same as "Ecc Mode: Current,
Pending"). So a change reboots the host in maintenance mode. A GPU that reports no ECC mode ([N/A]) does not
support it, and nothing but the shell tells the mode: without ESXi SSH an `ecc` entry is a plan error.
docs/host-changes.md, "ecc".
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from enum import StrEnum
from functools import partial
from typing import Annotated, Any

from pydantic import BeforeValidator

from vgpuctl.domain import ChangeKind, Phase
from vgpuctl.model import HostChange, ObservedGpu, ObservedHost
from vgpuctl.settings.base import (
    ApplyStep,
    GpuField,
    GpuSetting,
    HostPlan,
    HostWriter,
    PlanInput,
    Reads,
    SettingState,
    host_change,
)
from vgpuctl.settings.facts import GpuQuery, HostFacts, PendingMode, pending_mode
from vgpuctl.strictmodel import Lax
from vgpuctl.vsphere.tasks import in_flight


class EccMode(StrEnum):
    ON = "on"
    OFF = "off"


def _words(value: Any) -> Any:
    """YAML 1.1 reads `on` and `off` as booleans: they mean the modes."""
    return {True: EccMode.ON, False: EccMode.OFF}.get(value, value) if isinstance(value, bool) else value


ECC: GpuField[EccMode] = GpuField("ecc", Annotated[Lax[EccMode], BeforeValidator(_words)])
ECC_KIND = ChangeKind("ecc")
ECC_STEP = ApplyStep("ecc", 15)  # nvidia-smi on the host, one GPU after the other
UNKNOWN = "unknown"  # its mode when the shell was not read

# ECC mode per GPU (None: the GPU reports no ECC mode, [N/A])
ECC_MODE: GpuQuery[PendingMode | None] = GpuQuery(
    "ecc", ("ecc.mode.current", "ecc.mode.pending"), pending_mode("ecc.mode.current", "ecc.mode.pending"),
    lambda d: PendingMode(**d),
)


def word(on: bool) -> EccMode:
    return EccMode.ON if on else EccMode.OFF


def mode_text(read: PendingMode) -> str:
    """`on`, or `on (off pending)` while a switch waits for the next reboot."""
    now = str(word(read.current))
    return f"{now} ({word(read.pending)} pending)" if read.switching else now


class Ecc(GpuSetting):
    fields: tuple[GpuField[Any], ...] = (ECC,)
    kinds = (ECC_KIND,)
    shell_kinds = frozenset(kinds)
    reads = Reads(gpu_queries=(ECC_MODE,))
    apply_step = ECC_STEP

    def plan_gpu(self, inp: PlanInput, gpu: ObservedGpu, want: object) -> HostPlan:
        wanted, pci = ECC.of(want), gpu.pci_id.lower()
        result = HostPlan()
        if wanted is None:
            return result
        if not inp.shell or inp.facts is None:  # only the shell tells: the plan says so (hosts.plan refuses it)
            result.changes.append(host_change(inp, ECC_KIND, UNKNOWN, wanted, Phase.REBOOT, pci))
            return result
        if pci not in inp.facts.gpus:
            result.errors.append(f"host {inp.host.name}: GPU {pci}: nvidia-smi does not list it, so its ECC mode "
                                 "is unknown")
            return result
        read = inp.facts.gpu(ECC_MODE, pci)
        if read is None:
            result.errors.append(f"host {inp.host.name}: GPU {pci} ({gpu.device_name or 'unknown model'}) does "
                                 "not support ECC memory (nvidia-smi reports no ECC mode)")
        elif word(read.current) != wanted or word(read.pending) != wanted:
            result.changes.append(host_change(inp, ECC_KIND, mode_text(read), wanted, Phase.REBOOT, pci))
        return result

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        with writer.open_shell() as shell:
            for c in changes:
                writer.progress("ecc", f"{c.target} -> {c.new}")
                command = shlex.join(["nvidia-smi", "-i", c.target, "-e", "1" if c.new == EccMode.ON else "0"])
                in_flight(f"ecc {c.target} host {writer.host}", partial(shell.run, command))  # 2nd Ctrl-C
                writer.reboot_pending = True  # in effect after the next reboot
                writer.done(f"ecc {c.target} {c.new}")

    def explain_gpu(self, name: str, gpu: ObservedGpu, facts: HostFacts | None) -> str | None:
        read = facts.gpu(ECC_MODE, gpu.pci_id) if facts is not None else None
        return mode_text(read) if read is not None else None

    def export_gpu(self, gpu: ObservedGpu, facts: HostFacts | None) -> dict[str, Any]:
        """The mode after the next reboot (a pending switch is written as done; the notes say so)."""
        read = facts.gpu(ECC_MODE, gpu.pci_id) if facts is not None else None
        return {ECC.name: str(word(read.pending))} if read is not None else {}

    def export_notes(self, host: ObservedHost, facts: HostFacts | None) -> list[str]:
        notes = []
        for gpu in sorted(host.gpus, key=lambda g: g.pci_id):
            read = facts.gpu(ECC_MODE, gpu.pci_id) if facts is not None else None
            if read is not None and read.switching:
                notes.append(f"GPU {gpu.pci_id.lower()}: ECC is {word(read.current)} with a switch to "
                             f"{word(read.pending)} pending (nvidia-smi): written as {word(read.pending)}, so plan "
                             "shows the reboot that completes it")
        return notes

    def status_gpu(self, gpu: ObservedGpu, facts: HostFacts | None) -> list[SettingState]:
        read = facts.gpu(ECC_MODE, gpu.pci_id) if facts is not None else None
        if read is None:
            return []
        then = str(word(read.pending))
        return [SettingState(ECC.name, str(word(read.current)), then if read.switching else None)]


SETTING = Ecc()
