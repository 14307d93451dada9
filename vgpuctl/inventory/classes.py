"""The inventory's `vm_classes:` and `namespaces:` sections: VM classes with vGPUs and supervisor namespaces, and
the checks across their entries that need no vCenter. What the plan does with them: vgpuctl.supervisor, docs/k8s.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from vgpuctl.netrules import network_rules
from vgpuctl.profiles import ProfileError, mixing_problem, parse_profile
from vgpuctl.vmlimits import vm_limits

if TYPE_CHECKING:
    from vgpuctl.errors import InventoryError

MAX_VGPUS_PER_CLASS = 8  # vSphere 8's per-VM limit; the hosts' own limit is checked at plan time
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def within_vm_cpus(v: int | None) -> int | None:
    """A VM's virtual CPUs, at most vSphere's maximum (vgpuctl.vmlimits; the field's `ge=1` says so below 1)."""
    problem = vm_limits().cpus_problem(v) if v is not None else None
    if problem:
        raise ValueError(problem)
    return v


def within_vm_memory(v: float | None) -> float | None:
    """A VM's memory in GB within vSphere's limits and granularity (vgpuctl.vmlimits)."""
    problem = vm_limits().memory_problem(v) if v is not None else None
    if problem:
        raise ValueError(problem)
    return v


# A VM's CPUs and memory wherever a file gives them: inventory VMs, VM classes, capacity demands
VmCpus = Annotated[int | None, AfterValidator(within_vm_cpus)]
VmMemoryGb = Annotated[float | None, AfterValidator(within_vm_memory)]


class _Section(BaseModel):
    # The same rules as the rest of the inventory (vgpuctl.inventory): unknown keys and loose types are errors.
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True, allow_inf_nan=False)


def _dns_label(v: str) -> str:
    if not _DNS_LABEL.fullmatch(v):
        raise ValueError(f"must be a DNS label: lower-case letters, digits and '-', at most 63 (got {v!r})")
    return v


class ClassVgpu(_Section):
    profile: str
    count: int = 1

    @field_validator("profile")
    @classmethod
    def _profile(cls, v: str) -> str:
        try:
            parse_profile(v)
        except ProfileError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("count")
    @classmethod
    def _count(cls, v: int) -> int:
        if not 1 <= v <= MAX_VGPUS_PER_CLASS:
            raise ValueError(f"must be between 1 and {MAX_VGPUS_PER_CLASS} (got {v})")
        return v


class ClassNic(_Section):
    """A NIC of the class's VMs by Dynamic DirectPath I/O: the only network device a VM class takes (its
    devices are vGPUs and Dynamic DirectPath I/O devices: vSphere Automation API, VirtualMachineClasses
    VirtualDevices). `device`: a NIC model (`ConnectX-7`) or `VVVV:DDDD` vendor and device id in hex."""

    type: Literal["passthrough"] = "passthrough"
    device: str
    custom_label: str | None = None

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, v: Any) -> Any:
        if v != "passthrough":
            raise ValueError(f"a VM class takes passthrough NICs only (Dynamic DirectPath I/O); {v!r} adapters "
                             "(vmxnet3, pvrdma, sriov) go on the VMs, not on their class")
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:

        if network_rules().nic_ids(v) is None:
            models = ", ".join(m.model for m in network_rules().nic_models)
            raise ValueError(f"must be a NIC model ({models}) or VENDOR:DEVICE in hex (got {v!r})")
        return v

    @property
    def key(self) -> str:
        """`15b3:1021`, with `@label` when it has a custom label (what the class lists)."""

        ids = network_rules().nic_ids(self.device)
        assert ids is not None
        return f"{ids[0]:04x}:{ids[1]:04x}" + (f"@{self.custom_label}" if self.custom_label else "")


class VmClassSpec(_Section):
    name: str
    vcenter: str | None = None  # the fleet's vCenter it belongs to (vcenters:); default: the file's default_vcenter
    state: Literal["present", "absent"] = "present"
    cpus: VmCpus = Field(default=None, ge=1)
    memory_gb: VmMemoryGb = None
    cpu_reservation: int = Field(default=0, ge=0, le=100)  # percent of the class's CPU
    memory_reservation: int | None = Field(default=None, ge=0, le=100)  # percent; 100 when there are vGPUs
    vgpus: list[ClassVgpu] = Field(default_factory=list)
    extra_config: dict[str, str] = Field(default_factory=dict)
    network: list[ClassNic] = Field(default_factory=list)  # NICs by Dynamic DirectPath I/O

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _dns_label(v)

    @field_validator("vgpus", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        if v is None:
            return []
        return [v] if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _rules(self) -> VmClassSpec:
        if self.state == "absent":
            return self
        if self.cpus is None or self.memory_gb is None:
            raise ValueError("a VM class needs 'cpus' and 'memory_gb' (or state: absent)")
        total = self.vgpu_count
        if total > MAX_VGPUS_PER_CLASS:
            raise ValueError(f"{total} vGPUs in total; a VM holds at most {MAX_VGPUS_PER_CLASS}")
        problem = mixing_problem(self.vgpu_profiles)
        if problem:
            raise ValueError(problem)
        if (total or self.network) and self.memory_reservation is not None and self.memory_reservation != 100:
            what = "vGPUs need" if total else "Dynamic DirectPath NICs (PCI devices) need"
            raise ValueError(f"{what} all guest memory reserved: memory_reservation must be 100 (or left out)")
        return self

    @property
    def vgpu_profiles(self) -> list[str]:
        """One profile name per vGPU, in declaration order."""
        return [v.profile for v in self.vgpus for _ in range(v.count)]

    @property
    def vgpu_count(self) -> int:
        return sum(v.count for v in self.vgpus)


class NamespaceSpec(_Section):
    name: str
    vcenter: str | None = None  # the fleet's vCenter it belongs to (vcenters:); default: the file's default_vcenter
    supervisor: str | None = None  # the supervisor cluster the namespace must live on (checked, not moved)
    vm_classes: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _dns_label(v)

    @field_validator("vm_classes", mode="before")
    @classmethod
    def _none(cls, v: Any) -> Any:
        return [] if v is None else v


def _empty(v: Any) -> Any:
    return [] if v is None else v  # `vm_classes:` with nothing under it


VmClassList = Annotated[list[VmClassSpec], BeforeValidator(_empty)]
NamespaceList = Annotated[list[NamespaceSpec], BeforeValidator(_empty)]


class InventorySections(Protocol):
    """What the checks and the plan need from an Inventory: its two sections, and locating errors."""

    vm_classes: list[VmClassSpec]
    namespaces: list[NamespaceSpec]

    def error(self, path: tuple[str | int, ...], message: str) -> InventoryError: ...

    def vcenter_of(self, named: str | None) -> str | None: ...

    @property
    def vcenter_names(self) -> list[str]: ...


def iter_problems(inv: InventorySections) -> Iterator[InventoryError]:
    """Checks across entries that need no vCenter: duplicate names, unknown or absent classes in namespaces. In a
    fleet, each vCenter has its own VM classes and namespaces: names repeat across vCenters, and a namespace uses
    the classes of its own vCenter."""
    classes: dict[tuple[str | None, str], VmClassSpec] = {}
    for i, spec in enumerate(inv.vm_classes):
        key = (inv.vcenter_of(spec.vcenter), spec.name)
        if key in classes:
            yield inv.error(("vm_classes", i, "name"), f"VM class {spec.name!r} is defined twice")
        classes[key] = spec
    seen: set[tuple[str | None, str]] = set()
    for i, ns in enumerate(inv.namespaces):
        where = inv.vcenter_of(ns.vcenter)
        if (where, ns.name) in seen:
            yield inv.error(("namespaces", i, "name"), f"namespace {ns.name!r} is listed twice")
        seen.add((where, ns.name))
        for j, name in enumerate(ns.vm_classes):
            listed = classes.get((where, name))
            elsewhere = sorted(str(vc) for vc, n in classes if n == name and vc != where)
            known = where in inv.vcenter_names and all(vc in inv.vcenter_names for vc in elsewhere)
            if listed is None and elsewhere and known:  # an unknown vCenter is its own error
                yield inv.error(("namespaces", i, "vm_classes", j), f"VM class {name!r} belongs to vCenter "
                                f"{', '.join(elsewhere)}, not to this namespace's ({where}): each vCenter has its "
                                "own VM classes")
            if listed is not None and listed.state == "absent":
                yield inv.error(("namespaces", i, "vm_classes", j), f"VM class {name!r} has state: absent")
            if ns.vm_classes.index(name) != j:
                yield inv.error(("namespaces", i, "vm_classes", j), f"VM class {name!r} is listed twice")
