"""HostFacts for tests, written the way people describe a host: per GPU its MIG and ECC modes, NVLink links and
peers, configured types; per host the nvidia module options and declared parameters. Each lands where the settings'
facts put it (vgpuctl.settings.facts), so a test reads like the host it stands for."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpuctl.esxi.parsers import GpuNvLinks, NvLink
from vgpuctl.records.netfacts import HostNetFacts
from vgpuctl.settings.ecc import ECC_MODE
from vgpuctl.settings.facts import (
    MIG_MODE,
    MODULE_OPTIONS,
    MODULE_PARAMETERS,
    NETWORK,
    NVLINK_LINKS,
    TOPOLOGY,
    GpuFacts,
    HostFacts,
    ModuleOptionStrings,
    PendingMode,
    Unread,
    nvlink_links,
)
from vgpuctl.settings.gather import gather_shell_facts
from vgpuctl.settings.gpumodes import DEVICE_TYPES, ConfiguredType


def _mode(current: bool | None, pending: bool | None) -> PendingMode | None:
    return None if current is None else PendingMode(current, current if pending is None else pending)


def host_facts(
    host: str,
    *,
    shell: bool = False,
    gpus: Mapping[str, Mapping[str, Any]] | None = None,
    options_configured: str | None = None,
    options_effective: str | None = None,
    declared_params: list[str] | None = None,
    network: HostNetFacts | Mapping[str, Any] | None = None,
    network_error: str | None = None,
    boot_time: str | None = None,
    warnings: list[str] | None = None,
    unread: list[Any] | None = None,
    shell_error: str | None = None,
) -> HostFacts:
    """`gpus`: PCI id -> any of index, name, mig_current, mig_pending, ecc_current, ecc_pending, nvlink_links,
    nvlink_active, nvlink_peers (shell facts, kept when `shell`), graphics_type, vgpu_mode (configured types)."""
    facts = HostFacts(host, shell=shell, boot_time=boot_time, warnings=list(warnings or []),
                      unread=[u if isinstance(u, Unread) else Unread(**u) for u in unread or []],
                      shell_error=shell_error)
    gpus = gpus or {}
    types = {pci: ConfiguredType(g.get("graphics_type"), g.get("vgpu_mode")) for pci, g in gpus.items()
             if g.get("graphics_type") or g.get("vgpu_mode")}
    if types or options_configured is not None:
        facts.values[DEVICE_TYPES.name] = types
    if options_configured is not None:
        facts.values[MODULE_OPTIONS.name] = ModuleOptionStrings(options_configured, options_effective)
    if network is not None:
        facts.values[NETWORK.name] = network if isinstance(network, HostNetFacts) else HostNetFacts.from_dict(network)
    elif network_error is not None:
        facts.unread.append(Unread(NETWORK.what, network_error, NETWORK.plural))
    if not shell:
        return facts
    _shell_facts(facts, gpus, declared_params)
    return facts


def _shell_facts(facts: HostFacts, gpus: Mapping[str, Mapping[str, Any]], declared: list[str] | None) -> None:
    facts.values[MIG_MODE.name], facts.values[ECC_MODE.name] = {}, {}
    links, pairs = [], []
    for i, pci in enumerate(sorted(gpus)):
        g = gpus[pci]
        index = int(g.get("index", i))
        facts.gpus[pci] = GpuFacts(pci, index, g.get("name", ""))
        facts.values[MIG_MODE.name][pci] = _mode(g.get("mig_current"), g.get("mig_pending"))
        facts.values[ECC_MODE.name][pci] = _mode(g.get("ecc_current"), g.get("ecc_pending"))
        listed, active = int(g.get("nvlink_links", 0)), int(g.get("nvlink_active", 0))
        if "nvlink_links" in g:  # nvidia-smi names the GPU (with no link lines when all are down)
            links.append(GpuNvLinks(index, g.get("name", ""), None,
                                    tuple(NvLink(n, n < active, 25.0 if n < active else None) for n in range(listed))))
    for pci, g in gpus.items():
        for peer in g.get("nvlink_peers", []):
            if peer in facts.gpus:
                pairs.append((facts.gpus[pci].index, facts.gpus[peer].index, 4))
    facts.values[NVLINK_LINKS.name] = links
    facts.values[TOPOLOGY.name] = pairs
    facts.values[MODULE_PARAMETERS.name] = declared


@dataclass(frozen=True)
class GpuState:
    """One GPU as the shell's facts describe it, in one record for assertions."""

    pci_id: str
    mig_current: bool | None
    mig_pending: bool | None
    ecc_current: bool | None
    ecc_pending: bool | None
    nvlink_links: int
    nvlink_active: int


def gpu_states(facts: HostFacts) -> dict[str, GpuState]:
    """PCI id -> the GPU's MIG and ECC modes and NVLink links, from the facts' own places."""
    links = nvlink_links(facts)
    out = {}
    for pci in sorted(facts.gpus):
        mig, ecc, own = facts.gpu(MIG_MODE, pci), facts.gpu(ECC_MODE, pci), links.get(pci)
        out[pci] = GpuState(pci, mig.current if mig else None, mig.pending if mig else None,
                            ecc.current if ecc else None, ecc.pending if ecc else None,
                            len(own.links) if own else 0, own.active_links if own else 0)
    return out


def read_shell(host: str, run: Callable[[str], str]) -> HostFacts:
    """The shell facts the settings declare, read through `run` (an ESXi shell's commands)."""
    return gather_shell_facts(HostFacts(host), run)
