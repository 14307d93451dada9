"""What a variant should show, what a run showed, and where the two disagree. Pure.

Expectations come from the merged inventory: NVLink `on` when the hosts of the experiment are set to
`nvlink: enabled` (or a participating VM requires NVLink), `off` when they are set to `disabled`, the vGPU
profile of each participating VM, and per VM whether its vGPUs reach each other over NVLink (only whole-GPU
time-sliced C-series vGPUs with NVLink on) or over PCIe (MIG-backed and fractional vGPUs). Facts are the raw
outputs the runner collected: from the guests
`nvidia-smi topo -m`, `nvidia-smi nvlink -s` and `nvidia-smi --query-gpu=driver_version,name`,
and from the hosts the shell facts (NVLink links up, MIG mode) of vgpuctl.hosts.facts.

A contradiction is a run whose facts say the variant was not in force: NVLink links up in an `off` run, P2P
not over NVLink where NVLink P2P is expected, NVLink between vGPUs that NVIDIA connects over PCIe, or a vGPU
profile (a MIG slice) other than the one asked.
"""

from __future__ import annotations

import re
from dataclasses import asdict, field
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import NvlinkRequirement
from vgpuctl.errors import OutputFormatError
from vgpuctl.esxi.parsers import parse_nvlink_status, parse_topo_matrix
from vgpuctl.farm.placement import whole_gpu_compute_types
from vgpuctl.lazyclass import dataclass
from vgpuctl.profiles import BOARDS, ProfileError, parse_profile, try_parse
from vgpuctl.settings.facts import MIG_MODE, MODULE_OPTIONS, HostFacts, nvlink_links
from vgpuctl.settings.nvlink import SETTING as NVLINK_SETTING

if TYPE_CHECKING:
    from vgpuctl.inventory import Inventory

GUEST_GPU_QUERY = "driver_version,name"  # CSV, no header: one "VERSION, NAME" line per GPU


# -------------------------------------------------------------------------------------------- expectations


NVLINK, PCIE = "nvlink", "pcie"  # how a VM's vGPUs reach each other (expect["p2p"])


def expectations(inv: Inventory, vms: list[str]) -> dict[str, Any]:
    """What the merged inventory asks of the participating VMs. `nvlink` is the hosts' NVLink setting (`on`,
    `off`, None when the inventory says nothing); `p2p` says per VM whether its vGPUs should reach each other
    over NVLink, which NVIDIA allows only for time-sliced C-series vGPUs that each take a whole GPU of an
    NVLink-connected board, with NVLink on (vgpu_p2p): MIG-backed and fractional vGPUs talk over PCIe."""
    settings = {value for h in inv.hosts if (value := NVLINK_SETTING.of(h)) is not None}
    nvlink = None
    if settings == {"enabled"}:
        nvlink = "on"
    elif settings == {"disabled"}:
        nvlink = "off"
    profiles: dict[str, list[str]] = {}
    mig: dict[str, bool] = {}
    for name in vms:
        vm = inv.vm(name)
        if vm is None:
            continue
        profiles[name] = vm.vgpu_profiles
        try:
            mig[name] = any(parse_profile(p).is_mig for p in vm.vgpu_profiles)
        except ProfileError:
            mig[name] = False
        if vm.nvlink == NvlinkRequirement.REQUIRED and nvlink is None:
            nvlink = "on"
    rdma = bool(vms) and all((vm := inv.vm(name)) is not None and any(a.kind.is_rdma for a in vm.adapters)
                             for name in vms)
    p2p = {name: vgpu_p2p(asked, nvlink == "on") for name, asked in profiles.items()}
    return {"nvlink": nvlink, "profiles": profiles, "mig": mig, "p2p": p2p, "rdma": rdma}


def vgpu_p2p(profiles: list[str], nvlink_on: bool) -> str:
    """NVLINK when NVIDIA allows P2P over NVLink between these vGPUs (NVLink on, every vGPU a time-sliced
    C-series type that takes a whole GPU of an NVLink-capable board: NVIDIA vGPU "Peer-to-Peer CUDA Transfers"),
    else PCIE: MIG-backed vGPUs (never P2P over NVLink), fractional time-sliced ones, other series."""
    if not nvlink_on or not profiles:
        return PCIE
    for name in profiles:
        p = try_parse(name)
        info = BOARDS.get(p.board) if p is not None else None
        if p is None or info is None or not info.nvlink_capable or p.is_mig:
            return PCIE
        if p.type_name not in whole_gpu_compute_types(p.board):
            return PCIE
    return NVLINK


# ----------------------------------------------------------------------------------------------- facts


@dataclass
class FactSummary:
    guest_links: dict[str, dict[str, str]] = field(default_factory=dict)  # VM -> {"0-1": "NV12"}
    guest_nvlink_up: dict[str, int] = field(default_factory=dict)  # VM -> active NVLinks seen in the guest
    gpu_names: dict[str, list[str]] = field(default_factory=dict)  # VM -> GPU names (the vGPU types)
    drivers: dict[str, list[str]] = field(default_factory=dict)  # VM -> driver versions
    vm_hosts: dict[str, str] = field(default_factory=dict)  # VM -> ESXi host it ran on
    host_nvlink_up: dict[str, int] = field(default_factory=dict)  # host -> NVLinks up
    host_mig: dict[str, list[str]] = field(default_factory=dict)  # host -> PCI ids of GPUs in MIG mode
    unreadable: list[str] = field(default_factory=list)  # facts that could not be parsed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def host_gpus(facts: HostFacts) -> dict[str, Any]:
    """What an experiment keeps of a host's facts: per GPU its NVLink links up and whether MIG is on, and the
    nvidia module's options, configured and in effect (the raw facts a results directory holds; `summarize`
    reads them)."""
    links = nvlink_links(facts)
    options = facts.get(MODULE_OPTIONS)
    gpus = {}
    for pci in sorted(facts.gpus):
        mig = facts.gpu(MIG_MODE, pci)
        gpus[pci] = {"pci_id": pci, "nvlink_active": links[pci].active_links if pci in links else 0,
                     "mig_current": bool(mig and mig.current)}
    return {"gpus": gpus, "options_configured": options.configured if options is not None else None,
            "options_effective": options.effective if options is not None else None}


def summarize(raw: dict[str, Any]) -> FactSummary:
    out = FactSummary(vm_hosts=dict(raw.get("vm_hosts") or {}))
    for vm, g in sorted((raw.get("guests") or {}).items()):
        topo, nvlink, gpus = g.get("topo") or "", g.get("nvlink") or "", g.get("gpus") or ""
        if topo.strip():
            try:
                t = parse_topo_matrix(topo)
                out.guest_links[vm] = {f"{a}-{b}": t.matrix[(a, b)] for a in t.gpus for b in t.gpus if a < b}
            except OutputFormatError as exc:
                out.unreadable.append(f"{vm}: nvidia-smi topo -m: {exc}")
        if nvlink.strip():
            try:
                out.guest_nvlink_up[vm] = sum(x.active_links for x in parse_nvlink_status(nvlink))
            except OutputFormatError as exc:
                out.unreadable.append(f"{vm}: nvidia-smi nvlink -s: {exc}")
        rows = [[c.strip() for c in line.split(",")] for line in gpus.splitlines() if line.strip()]
        out.gpu_names[vm] = [r[1] for r in rows if len(r) > 1]
        out.drivers[vm] = sorted({r[0] for r in rows if len(r) > 1})
    for host, h in sorted((raw.get("hosts") or {}).items()):
        gpus = (h.get("gpus") or {}).values()
        out.host_nvlink_up[host] = sum(int(g.get("nvlink_active") or 0) for g in gpus)
        out.host_mig[host] = sorted(g.get("pci_id", "") for g in gpus if g.get("mig_current"))
    return out


# --------------------------------------------------------------------------------------- contradictions


@dataclass(frozen=True)
class Contradiction:
    kind: str  # nvlink-up-when-off | p2p-not-nvlink | nvlink-where-pcie | profile-mismatch | net-socket-fallback
    message: str


def transport_contradictions(expect: dict[str, Any], parsed: dict[str, Any]) -> list[Contradiction]:
    """A run across VMs with RDMA adapters that NCCL ran over TCP sockets (`parsed`: VM -> the run's parsed
    output with its `transport`, vgpuctl.experiment.parsers.nccl_transport)."""
    if not expect.get("rdma"):
        return []
    out = []
    for vm, result in sorted(parsed.items()):
        transport = (result or {}).get("transport") or {}
        network = transport.get("network")
        if network is not None and not transport.get("rdma"):
            out.append(Contradiction("net-socket-fallback", f"NCCL ran over NET/{network} (TCP sockets), not NET/IB, "
                                     f"in a run across VMs with RDMA adapters: {vm} launched it"))
    return out


def contradictions(expect: dict[str, Any], facts: FactSummary,
                   p2p: dict[str, dict[str, Any]] | None = None) -> list[Contradiction]:
    """The ways a run's facts disagree with its variant; `p2p` is VM -> parsed p2pBandwidthLatencyTest."""
    out: list[Contradiction] = []
    vms = list(expect.get("profiles") or {})
    if expect.get("nvlink") == "off":
        out += _nvlink_up(facts, vms)
    elif expect.get("nvlink") == "on":
        way = expect.get("p2p") or {}  # results written before it was recorded: every VM over NVLink
        over_nvlink = [vm for vm in vms if way.get(vm, NVLINK) == NVLINK]
        out += _p2p_not_nvlink(facts, over_nvlink, p2p or {}) if over_nvlink else []
        out += _nvlink_where_pcie(facts, [vm for vm in vms if vm not in over_nvlink])
    out += _profile_mismatch(expect, facts)
    return out


def _nvlink_where_pcie(facts: FactSummary, vms: list[str]) -> list[Contradiction]:
    """MIG-backed and fractional vGPUs reach each other over PCIe: a guest that shows NVLink between them is not
    running the variant (a whole-GPU profile crept in)."""
    out = []
    for vm in vms:
        links = {pair: kind for pair, kind in facts.guest_links.get(vm, {}).items() if kind.startswith("NV")}
        if links:
            shown = ", ".join(f"GPU{p.replace('-', '-GPU')} {k}" for p, k in sorted(links.items()))
            out.append(Contradiction("nvlink-where-pcie", f"NVLink between vGPUs NVIDIA connects over PCIe "
                                     f"(MIG-backed or fractional): {vm}: {shown}"))
    return out


def _nvlink_up(facts: FactSummary, vms: list[str]) -> list[Contradiction]:
    out = []
    for vm in vms:
        links = {pair: kind for pair, kind in facts.guest_links.get(vm, {}).items() if kind.startswith("NV")}
        if links:
            shown = ", ".join(f"GPU{p.replace('-', '-GPU')} {k}" for p, k in sorted(links.items()))
            out.append(Contradiction("nvlink-up-when-off", f"NVLink links up in an 'off' run: {vm}: {shown}"))
        if facts.guest_nvlink_up.get(vm):
            out.append(Contradiction("nvlink-up-when-off", f"NVLink links up in an 'off' run: {vm}: "
                                     f"{facts.guest_nvlink_up[vm]} link(s) active in nvidia-smi nvlink -s"))
    for host in _hosts_of(facts, vms):
        if facts.host_nvlink_up.get(host):
            out.append(Contradiction("nvlink-up-when-off", f"NVLink links up in an 'off' run: host {host}: "
                                     f"{facts.host_nvlink_up[host]} link(s) active"))
    return out


def _p2p_not_nvlink(facts: FactSummary, vms: list[str], p2p: dict[str, dict[str, Any]]) -> list[Contradiction]:
    out = []
    for vm in vms:
        other = {pair: kind for pair, kind in facts.guest_links.get(vm, {}).items() if not kind.startswith("NV")}
        if other:
            shown = ", ".join(f"GPU{p.replace('-', '-GPU')} {k}" for p, k in sorted(other.items()))
            out.append(Contradiction("p2p-not-nvlink", f"P2P not over NVLink in an 'on' run: {vm}: {shown}"))
        access = (p2p.get(vm) or {}).get("peer_access") or {}
        denied = sorted(pair for pair, ok in access.items() if ok is False and _ordered(pair))
        if denied:
            out.append(Contradiction("p2p-not-nvlink", f"P2P not over NVLink in an 'on' run: {vm}: "
                                     f"p2pBandwidthLatencyTest: no peer access for GPU pair(s) {', '.join(denied)}"))
    for host in _hosts_of(facts, vms):
        if host in facts.host_nvlink_up and not facts.host_nvlink_up[host]:
            out.append(Contradiction("p2p-not-nvlink", f"P2P not over NVLink in an 'on' run: host {host}: "
                                     "no NVLink link active"))
    return out


def _ordered(pair: str) -> bool:
    a, _, b = pair.partition("-")
    return a.isdigit() and b.isdigit() and int(a) < int(b)


def _profile_key(profile: str) -> str:
    return re.sub(r"^(grid|nvidia)_", "", profile.lower())


def _profile_mismatch(expect: dict[str, Any], facts: FactSummary) -> list[Contradiction]:
    out = []
    for vm, asked in (expect.get("profiles") or {}).items():
        names = facts.gpu_names.get(vm)
        if not asked or not names:
            continue  # nothing asked, or the guest facts were not read
        keys = sorted({_profile_key(p) for p in asked})
        shown = [n for n in names if not any(k in n.lower() for k in keys)]
        if shown or len(names) != len(asked):
            what = "MIG slice" if (expect.get("mig") or {}).get(vm) else "vGPU profile"
            out.append(Contradiction("profile-mismatch", f"{what} different from the one asked: {vm} asked "
                                     f"{', '.join(asked)}; the guest shows {', '.join(names) or 'no GPU'}"))
    return out


def _hosts_of(facts: FactSummary, vms: list[str]) -> list[str]:
    hosts = sorted({facts.vm_hosts[vm] for vm in vms if vm in facts.vm_hosts})
    return hosts or sorted(facts.host_nvlink_up)
