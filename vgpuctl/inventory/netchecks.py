"""The inventory's network checks that need no vCenter: adapters against GPUDirect RDMA, identities against
the VM's adapters and name, address pools against the VMs that draw from them, fixed MAC addresses against
each other. Each problem is located FILE:LINE:COL. Port groups, NICs and addresses in use are checked when
planning (vgpuctl.vms.network, vgpuctl.vms.identity).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from vgpuctl.domain import AdapterType
from vgpuctl.errors import InventoryError
from vgpuctl.inventory.network import AddressPool, hostname_problem
from vgpuctl.inventory.schema import Inventory, VmSpec
from vgpuctl.inventory.yamlpos import KeyPath
from vgpuctl.lazyclass import dataclass
from vgpuctl.netrules import network_rules
from vgpuctl.profiles import ProfileError, parse_profile


def network_problems(inv: Inventory) -> Iterator[InventoryError]:
    """Every network problem of the inventory's VMs (range-expanded), one per cause and place."""
    seen: set[int] = set()
    for vm in inv.vms:
        first = vm._index not in seen  # an entry's own rules: once for its whole name range
        seen.add(vm._index)
        if first:
            yield from _entry_problems(inv, vm)
        if vm.gpudirect_rdma and first:
            yield from _gpudirect_problems(inv, vm)
    yield from _pool_problems(inv)
    yield from _mac_problems(inv)


def _base(vm: VmSpec) -> KeyPath:
    return ("vms", vm._index)


def _entry_problems(inv: Inventory, vm: VmSpec) -> Iterator[InventoryError]:
    identity = vm.identity
    if identity is None:
        return
    path: KeyPath = (*_base(vm), "guest", "identity")
    problem = hostname_problem(vm.name)
    if problem:
        yield inv.error((*path, "hostname"), problem)
    if identity.addresses and vm.network is None:
        yield inv.error((*path, "addresses"), "addresses are given per adapter: list the VM's adapters in 'network'")
        return
    for portgroup in identity.addresses:
        matching = [a for a in vm.adapters if a.portgroup == portgroup]
        if not matching:
            named = ", ".join(sorted({a.portgroup for a in vm.adapters if a.portgroup})) or "none"
            yield inv.error((*path, "addresses", portgroup),
                            f"no adapter of this VM is on port group {portgroup!r} (its port groups: {named})")
        elif len(matching) > 1:
            yield inv.error((*path, "addresses", portgroup),
                            f"{len(matching)} adapters are on port group {portgroup!r}: the addresses cannot say "
                            "which one they are for")


def _gpudirect_problems(inv: Inventory, vm: VmSpec) -> Iterator[InventoryError]:
    rule = network_rules().gpudirect
    path: KeyPath = (*_base(vm), "gpudirect_rdma")
    if not vm.manages_vgpus or not vm.vgpus:
        yield inv.error(path, "GPUDirect RDMA needs the VM's vGPUs listed in 'vgpus'")
    kinds = {a.kind for a in vm.adapters}
    if not kinds & set(rule.adapters):
        have = (" (PVRDMA is paravirtual: no source says the NIC behind it reads the vGPU's framebuffer)"
                if AdapterType.PVRDMA in kinds else "")
        yield inv.error(path, "GPUDirect RDMA needs an SR-IOV or passthrough RDMA adapter in 'network'" + have)
    for profile in vm.vgpu_profiles:
        try:
            p = parse_profile(profile)
        except ProfileError:
            continue  # the vGPU checks say so
        if p.is_mig and not rule.allow_mig_backed:
            yield inv.error(path, f"GPUDirect RDMA is refused on MIG-backed vGPUs ({p.name}): vgpuctl allows it on "
                            "time-sliced C-series vGPUs only (docs/multi-node.md)")
            return
        if p.series not in rule.series:
            yield inv.error(path, f"GPUDirect RDMA is a feature of NVIDIA vGPU for Compute: C-series vGPUs only "
                            f"({p.name} is {p.series.upper()}-series)")
            return


# ------------------------------------------------------------------------------------------------ pools


@dataclass(frozen=True)
class _PoolUse:
    index: int  # the VM entry
    portgroup: str
    pool: AddressPool
    vms: int  # VMs of the entry's name range drawing from it


def _pool_uses(inv: Inventory) -> list[_PoolUse]:
    counts = Counter(vm._index for vm in inv.vms)
    uses: dict[tuple[int, str], _PoolUse] = {}
    for vm in inv.vms:
        identity = vm.identity
        for portgroup, how in (identity.addresses if identity else {}).items():
            if how.static and (vm._index, portgroup) not in uses:
                uses[(vm._index, portgroup)] = _PoolUse(vm._index, portgroup, how.addresses, counts[vm._index])
    return list(uses.values())


def _pool_path(use: _PoolUse) -> KeyPath:
    return ("vms", use.index, "guest", "identity", "addresses", use.portgroup, "pool")


def _pool_problems(inv: Inventory) -> Iterator[InventoryError]:
    uses = _pool_uses(inv)
    for use in uses:
        if use.vms > use.pool.size:
            yield inv.error(_pool_path(use), f"pool {use.pool} holds {use.pool.size} address(es) for "
                            f"{use.vms} VMs: exhausted")
    for i, use in enumerate(uses):
        for other in uses[:i]:
            if use.pool.overlaps(other.pool):
                line = inv.locate(_pool_path(other)).error("").line
                where = f" (line {line})" if line else ""
                yield inv.error(_pool_path(use), f"pool {use.pool} overlaps pool {other.pool} of "
                                f"vms[{other.index}]{where}: two VMs would be given one address")


def pool_address(vm: VmSpec, portgroup: str) -> tuple[str, int] | None:
    """The static address (and prefix length) a VM is given on a port group: the VM's position in its entry's
    name range, counted into the pool; None for DHCP, no identity, or a pool too small (refused at load)."""
    identity = vm.identity
    how = identity.addresses.get(portgroup) if identity else None
    if how is None or not how.static:
        return None
    pool = how.addresses
    if vm._ordinal >= pool.size:
        return None
    return str(pool.address(vm._ordinal)), pool.network.prefixlen


# ------------------------------------------------------------------------------------------------- MACs


def _mac_problems(inv: Inventory) -> Iterator[InventoryError]:
    counts = Counter(vm._index for vm in inv.vms)
    first: dict[str, tuple[int, int]] = {}
    reported: set[int] = set()
    for vm in inv.vms:
        if vm._index in reported:
            continue
        for j, adapter in enumerate(vm.adapters):
            if adapter.mac is None:
                continue
            path: KeyPath = (*_base(vm), "network", j, "mac")
            if counts[vm._index] > 1:
                reported.add(vm._index)
                yield inv.error(path, f"a fixed MAC address on a name range gives {counts[vm._index]} VMs the "
                                f"address {adapter.mac}")
                continue
            if adapter.mac in first and first[adapter.mac] != (vm._index, j):
                index, k = first[adapter.mac]
                yield inv.error(path, f"MAC address {adapter.mac} is also given to vms[{index}].network[{k}]")
                continue
            first[adapter.mac] = (vm._index, j)
