"""VM classes and supervisor namespaces as the vSphere Automation REST API lists them (vgpuctl.vsphere.rest), in
vgpuctl's terms; the plan compares the inventory's classes with them (vgpuctl.supervisor.vmclasses)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, field
from typing import Any

from vgpuctl.lazyclass import dataclass


@dataclass
class ClassState:
    """A VM class, in vgpuctl's terms: what vCenter shows, or what the inventory asks for."""

    name: str
    cpus: int
    memory_mb: int
    cpu_reservation: int = 0
    memory_reservation: int = 0
    vgpus: list[str] = field(default_factory=list)  # one profile name per vGPU device
    extra_config: dict[str, str] = field(default_factory=dict)
    direct_path: list[str] = field(default_factory=list)  # Dynamic DirectPath devices, `vvvv:dddd[@label]`


@dataclass
class NamespaceState:
    name: str
    cluster: str  # managed object id of the supervisor cluster (domain-c8)
    vm_classes: list[str] = field(default_factory=list)
    content_libraries: list[str] = field(default_factory=list)


@dataclass
class SupervisorState:
    """VM classes, namespaces and supervisor clusters (moid -> name) as the REST API lists them."""

    classes: dict[str, ClassState] = field(default_factory=dict)
    namespaces: dict[str, NamespaceState] = field(default_factory=dict)
    supervisor_clusters: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SupervisorState:
        return cls(
            classes={k: ClassState(**{"name": k, **v}) for k, v in (data.get("classes") or {}).items()},
            namespaces={k: NamespaceState(**{"name": k, **v}) for k, v in (data.get("namespaces") or {}).items()},
            supervisor_clusters=dict(data.get("supervisor_clusters") or {}),
        )
