"""The `status` and `profiles` reports built from one Observed: GPUs with their VMs and framebuffer use, the
VMs' vGPUs, and the profiles each host offers; the VM classes with vGPUs in `status` and the VM-class diff in
`plan`'s document. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from vgpuctl.domain import VgpuMode
from vgpuctl.model import Observed, ObservedGpu, ObservedHost, Op
from vgpuctl.profiles import ProfileError, VgpuProfile, board_for_device, parse_profile, try_parse
from vgpuctl.profiles import max_per_gpu as profiles_max
from vgpuctl.reports import (
    FieldDiff,
    GpuVm,
    HostProfiles,
    NamespaceDiff,
    PlanReport,
    ProfileRow,
    ProfilesReport,
    StatusGpu,
    StatusHost,
    StatusReport,
    StatusVm,
    StatusVmClass,
    VgpuCount,
    VmClassDiff,
    vgpu_counts,
)
from vgpuctl.vmclasses import ClassChange, SupervisorPlan, SupervisorState
from vgpuctl.vsphere.gpu_types import profile_from_name

KB_PER_GB = 1024 * 1024


def gpu_gb(gpu: ObservedGpu) -> int:
    return round(gpu.memory_kb / KB_PER_GB)


def gpu_mode(gpu: ObservedGpu) -> str:
    if gpu.vgpu_mode == "multiInstanceGpu":
        return "mig"
    if gpu.vgpu_mode in ("sameSize", "mixedSize"):
        return f"time-sliced ({gpu.vgpu_mode})"
    return "time-sliced"


def whole(gb: float) -> float:
    """20.0 -> 20 for the documents; fractions (0.5 GB profiles) stay."""
    return int(gb) if float(gb).is_integer() else gb


def profile_fb(name: str, host: ObservedHost | None) -> float:
    """A profile's framebuffer as the host describes it, else from its name (0 when neither knows)."""
    if host is not None and name in host.profiles:
        return whole(host.profiles[name].fb_gb)
    try:
        return whole(parse_profile(name).fb_gb)
    except ProfileError:
        return 0


def gpu_occupancy(observed: Observed, host: ObservedHost) -> dict[str, list[GpuVm]]:
    """(vm, profile) per GPU pci id. graphicsInfo says which VMs sit on a GPU, not which of a VM's vGPUs:
    each vGPU of a VM is on its own GPU, so a VM's vGPUs (largest first) are matched to its GPUs in PCI order,
    which is exact whenever a VM's vGPUs share one profile; otherwise each pairing is marked `guessed`."""
    by_vm: dict[str, list[str]] = {}
    for gpu in sorted(host.gpus, key=lambda g: g.pci_id):
        for held_by in gpu.vms:
            by_vm.setdefault(held_by, []).append(gpu.pci_id)
    occupancy: dict[str, list[GpuVm]] = {g.pci_id: [] for g in host.gpus}
    for vm_name, pci_ids in by_vm.items():
        vm = observed.vms.get(vm_name)
        profiles = sorted((d.profile for d in vm.vgpus), key=lambda p: -profile_fb(p, host)) if vm else []
        guessed = len(set(profiles)) > 1
        for i, pci in enumerate(pci_ids):
            occupancy[pci].append(GpuVm(vm_name, profiles[i] if i < len(profiles) else "", guessed))
    return occupancy


def _status_gpu(index: int, gpu: ObservedGpu, held: list[GpuVm], host: ObservedHost) -> StatusGpu:
    used_gb = whole(sum(profile_fb(v.profile, host) for v in held))
    return StatusGpu(
        index=index,
        gpu=gpu.pci_id,
        model=gpu.device_name,
        graphics_type=gpu.graphics_type,
        vgpu_mode=gpu.vgpu_mode,
        mode=gpu_mode(gpu),
        nvlink_group=gpu.nvlink_set,
        fb_gb=gpu_gb(gpu),
        used_gb=used_gb,
        free_gb=whole(max(gpu_gb(gpu) - used_gb, 0)),
        vgpus=vgpu_counts(v.profile for v in held if v.profile),
        vms=held,
    )


def _status_host(observed: Observed, host: ObservedHost) -> StatusHost:
    occupancy = gpu_occupancy(observed, host)
    gpus = sorted(host.gpus, key=lambda g: g.pci_id)
    return StatusHost(
        host=host.name,
        cluster=host.cluster,
        connection_state=host.connection_state,
        in_maintenance=host.in_maintenance,
        power_state=host.power_state,
        default_graphics_type=host.default_graphics_type,
        assignment_policy=host.assignment_policy,
        gpus=[_status_gpu(i, g, occupancy.get(g.pci_id, []), host) for i, g in enumerate(gpus)],
        vgpu_types=len(host.offered_profiles),
    )


def status_report(observed: Observed, round_trips: int | None = None) -> StatusReport:
    """Hosts with their GPU maps, and every VM (templates left out) with its vGPUs."""
    vms = [
        StatusVm(vm.name, vm.host, vm.cluster, vm.folder, str(vm.power_state), vgpu_counts(d.profile for d in vm.vgpus))
        for vm in sorted(observed.vms.values(), key=lambda v: v.name)
        if not vm.is_template
    ]
    hosts = [_status_host(observed, h) for h in sorted(observed.hosts.values(), key=lambda h: h.name)]
    return StatusReport(observed.datacenter, observed.api_version, hosts, vms, round_trips)


# ------------------------------------------------------------------------------------------ profiles


def max_per_gpu(profile: VgpuProfile, sharing: str, host: ObservedHost) -> int | None:
    """How many vGPUs of this profile one GPU of the host holds at most in its current mode: what the host reports
    for the type, else NVIDIA's maximum from the catalogue (profiles.max_per_gpu) for the mode of the host's GPUs
    of the type's board that can serve it (MIG ones for a MIG-backed type, time-sliced ones otherwise). GPUs in
    both equal-size and mixed-size mode: the smaller maximum."""
    reported = host.profiles.get(profile.name)
    if reported is not None and reported.max_per_gpu is not None:
        return reported.max_per_gpu
    mig = sharing == "mig" or profile.is_mig
    gpus = [g for g in host.gpus if (g.vgpu_mode == "multiInstanceGpu") == mig
            and board_for_device(g.device_name, gpu_gb(g), g.device_id, host.offered_profiles) == profile.board]
    maxima = {profiles_max(profile, g.vgpu_mode, gpu_gb(g)) for g in gpus}
    maxima = maxima or {profiles_max(profile, VgpuMode.SAME_SIZE)}
    known = [m for m in maxima if m is not None]
    return min(known) if known and len(known) == len(maxima) else None


def _profile_row(name: str, host: ObservedHost) -> ProfileRow:
    info = host.profiles.get(name)
    try:
        parsed: VgpuProfile | None = parse_profile(name)
    except ProfileError:
        parsed = None
    sharing = info.sharing if info else ("mig" if parsed and parsed.is_mig else "timeSliced")
    return ProfileRow(
        profile=name,
        fb_gb=profile_fb(name, host) if info or parsed else None,
        series=parsed.series.upper() if parsed else None,
        board=parsed.board if parsed else None,
        sharing=sharing,
        profile_class=info.profile_class if info else None,
        max_per_gpu=max_per_gpu(parsed, sharing, host) if parsed else None,
    )


def host_profiles(host: ObservedHost) -> list[ProfileRow]:
    """The profiles the host's GPUs offer in their current modes."""
    return [_profile_row(name, host) for name in sorted(host.offered_profiles)]


def with_reported_maxima(host: ObservedHost, instance_totals: dict[str, int]) -> None:
    """Record what the host reports as the most vGPUs of its offered MIG-backed types per GPU: the total
    instances of each type's GPU instance profile (`nvidia-smi mig -lgip`, GPU instance name -> total, the
    smallest over the host's MIG GPUs). The host's figure then wins over the catalogue's in `profiles`."""
    for name in host.offered_profiles:
        parsed = try_parse(name)
        gi = parsed.gi_profile if parsed is not None and parsed.is_mig else None
        if gi is None or gi not in instance_totals:
            continue
        known = host.profiles.get(name) or profile_from_name(name)
        host.profiles[name] = dataclasses.replace(known, max_per_gpu=instance_totals[gi])


def profiles_report(hosts: list[ObservedHost], round_trips: int | None = None) -> ProfilesReport:
    return ProfilesReport([HostProfiles(h.name, host_profiles(h)) for h in hosts], round_trips)


# ------------------------------------------------------------------------------------------ VM classes


def _sorted_counts(profiles: list[str]) -> list[VgpuCount]:
    return [VgpuCount(p, n) for p, n in sorted(Counter(profiles).items())]


def status_vm_classes(state: SupervisorState) -> list[StatusVmClass]:
    """The VM classes that have vGPUs, each with the namespaces allowed to use it (classes without vGPUs left out)."""
    rows = []
    for name in sorted(state.classes):
        c = state.classes[name]
        if not c.vgpus:
            continue
        users = sorted(n.name for n in state.namespaces.values() if name in n.vm_classes)
        rows.append(StatusVmClass(name, _sorted_counts(c.vgpus), c.cpus, c.memory_mb, users))
    return rows


def with_supervisor(report: StatusReport, state: SupervisorState | None, problem: str | None = None) -> StatusReport:
    """`status` with the VM classes read over REST, or with the reason they could not be read as a warning."""
    if state is not None:
        report.vm_classes = status_vm_classes(state)
        report.supervisor_clusters = sorted(state.supervisor_clusters.values())
    if problem:
        report.warnings.append(f"VM classes not read: {problem}")
    return report


def _class_fields(c: ClassChange) -> list[FieldDiff]:
    if c.op == Op.ADD and c.desired is not None:
        d = c.desired
        created = (("cpus", d.cpus), ("memoryMB", d.memory_mb), ("cpu_reservation", d.cpu_reservation),
                   ("memory_reservation", d.memory_reservation))
        return [FieldDiff(name, str(Op.ADD), None, value) for name, value in created]
    return [FieldDiff(f.field, str(f.op), f.old, f.new) for f in c.fields]


def vm_class_diff(c: ClassChange) -> VmClassDiff:
    return VmClassDiff(
        vm_class=c.name,
        op=str(c.op),
        fields=_class_fields(c),
        vgpus_added=_sorted_counts(c.vgpus_added),
        vgpus_removed=_sorted_counts(c.vgpus_removed),
        extra_config=dict(c.extra_config),
    )


def with_class_plan(report: PlanReport, plan: SupervisorPlan | None) -> PlanReport:
    """`plan`'s document with the VM-class and namespace diff, in apply order (classes created or updated, the
    namespaces, classes deleted). Its errors and warnings are already the plan's (merged by the caller)."""
    if plan is None:
        return report
    ordered = plan.ordered()
    report.vm_classes = [vm_class_diff(c) for c in ordered if isinstance(c, ClassChange)]
    report.namespaces = [NamespaceDiff(n.namespace, list(n.add), list(n.remove)) for n in plan.namespace_changes]
    report.summary.vm_classes = len(plan.class_changes)
    report.summary.namespaces = len(plan.namespace_changes)
    return report
