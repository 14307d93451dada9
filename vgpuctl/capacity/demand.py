"""The demand file (kind: Demand): schema and loading with FILE:LINE:COL errors (the inventory's loader).

The file format: docs/capacity.md (`vgpuctl capacity --demand`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from vgpuctl.domain import MAX_VGPUS_PER_VM, NvlinkRequirement
from vgpuctl.errors import InventoryError, InventoryErrors
from vgpuctl.inventory.classes import VmCpus, VmMemoryGb
from vgpuctl.inventory.schema import API_VERSION, MAX_VM_NAME, StrictModel, vm_name_problem
from vgpuctl.inventory.yamlpos import KeyPath, PositionedYaml, read_yaml
from vgpuctl.profiles import BOARDS, PROFILE_GRAMMAR, ProfileError, parse_profile

ALLOW = ("mig", "vgpu-mode", "profile", "graphics")
SERIES = ("a", "b", "c", "q")
MAX_DEMAND_VMS = 100_000
# The VMs of a demand entry are named `<name>-NNN`, numbered with at least 3 digits and up to as many as
# MAX_DEMAND_VMS has: the name leaves room for that suffix in a VM name.
MAX_DEMAND_NAME = MAX_VM_NAME - len(f"-{MAX_DEMAND_VMS}")


class DemandVgpus(StrictModel):
    profile: str | None = None
    fb_gb: int | None = Field(default=None, ge=1)
    series: Literal["a", "b", "c", "q"] | None = None
    count: int = 1

    @field_validator("count")
    @classmethod
    def _count(cls, v: int) -> int:
        if not 1 <= v <= MAX_VGPUS_PER_VM:
            raise ValueError(f"must be between 1 and {MAX_VGPUS_PER_VM} vGPUs per VM (got {v})")
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> DemandVgpus:
        if (self.profile is None) == (self.fb_gb is None):
            raise ValueError("set either 'profile' or 'fb_gb' (with 'series')")
        if self.profile is not None and self.series is not None:
            raise ValueError("'series' goes with 'fb_gb', not with 'profile'")
        return self


class DemandItem(StrictModel):
    name: str
    count: int = Field(ge=1, le=MAX_DEMAND_VMS)
    vgpus: DemandVgpus
    nvlink: Literal["none", "required"] = "none"
    priority: int = Field(default=1, ge=1, le=9)
    template: str | None = None
    cpus: VmCpus = Field(default=None, ge=1)  # a VM's, with a VM's limits
    memory_gb: VmMemoryGb = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        problem = vm_name_problem(v, check_length=False)
        if problem:
            raise ValueError(problem)
        if len(v) > MAX_DEMAND_NAME:
            raise ValueError(f"is {len(v)} characters long; a demand name takes at most {MAX_DEMAND_NAME}, so that "
                             f"its VMs' names (NAME-NNN) fit vSphere's {MAX_VM_NAME}")
        return v


class Demand(StrictModel):
    api_version: Literal["vgpuctl/v1"] = Field(alias="apiVersion")
    kind: Literal["Demand"]
    clusters: list[str] | None = None
    allow: list[Literal["mig", "vgpu-mode", "profile", "graphics"]] = Field(default_factory=list)
    frozen_hosts: list[str] = Field(default_factory=list)
    template: str | None = None
    demand: list[DemandItem]


def load_demand(path: str | Path) -> Demand:
    """Read and check a demand file; raises InventoryError(s) located FILE:LINE:COL."""
    file = str(path)
    p = Path(path)
    if not p.exists():
        raise InventoryError("demand file not found", file)
    doc = read_yaml(p)
    if not isinstance(doc.data, dict):
        raise InventoryError(f"the demand file must be a mapping with apiVersion: {API_VERSION}, kind: Demand",
                             file, 1, 1)
    try:
        demand = Demand.model_validate(doc.data)
    except ValidationError as exc:
        raise InventoryErrors(doc.schema_errors(exc, Demand)) from None
    errors = list(_semantic_errors(demand, doc))
    if errors:
        raise InventoryErrors(errors)
    return demand


def _semantic_errors(demand: Demand, doc: PositionedYaml) -> list[InventoryError]:
    error = doc.error
    errors = []
    if not demand.demand:
        errors.append(error(("demand",), "lists no demand"))
    seen: set[str] = set()
    for i, item in enumerate(demand.demand):
        base: KeyPath = ("demand", i)
        if item.name in seen:
            errors.append(error((*base, "name"), f"duplicate demand name {item.name!r}"))
        seen.add(item.name)
        v = item.vgpus
        if v.profile is not None:
            try:
                profile = parse_profile(v.profile)
            except ProfileError:
                errors.append(error((*base, "vgpus", "profile"),
                                    f"unknown vGPU profile {v.profile!r} (expected {PROFILE_GRAMMAR})"))
                continue
            if profile.board not in BOARDS:
                errors.append(error((*base, "vgpus", "profile"), f"unknown vGPU profile {v.profile!r}: no GPU board "
                                    f"{profile.board!r} (boards: {', '.join(sorted(BOARDS))})"))
                continue
            if item.nvlink == NvlinkRequirement.REQUIRED and (profile.is_mig or profile.series != "c"):
                errors.append(error((*base, "nvlink"), f"NVLink P2P works only with time-sliced C-series vGPUs "
                                    f"({v.profile} is not one)"))
        elif v.series is None:
            errors.append(error((*base, "vgpus", "fb_gb"), "'fb_gb' needs 'series' (a, b, c or q)"))
        if item.nvlink == NvlinkRequirement.REQUIRED and v.count < 2:
            errors.append(error((*base, "nvlink"), "NVLink needs at least 2 vGPUs per VM"))
    frozen = set(demand.frozen_hosts)
    if len(frozen) != len(demand.frozen_hosts):
        errors.append(error(("frozen_hosts",), "names a host twice"))
    if demand.clusters is not None and not demand.clusters:
        errors.append(error(("clusters",), "is empty: leave it out to mean every cluster"))
    if len(set(demand.allow)) != len(demand.allow):
        errors.append(error(("allow",), "names a change twice"))
    return errors
