"""The inventory schema (apiVersion vgpuctl/v1): one pydantic model per section, unknown keys refused.

Every field is documented in inventory.example.yaml. A VM entry without `vgpus` leaves the VM's vGPUs as they
are (`VmSpec.manages_vgpus`); `vgpus: []` removes them. Loading is in vgpuctl.inventory.load, the checks that
need more than one field in vgpuctl.inventory.checks.
"""

from __future__ import annotations

import re
import typing
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, PrivateAttr, create_model, field_validator, model_validator

from vgpuctl.domain import (
    MAX_VGPUS_PER_VM,
    AdapterType,
    Evacuate,
    Keep,
    NvlinkRequirement,
    Power,
    SshService,
    VmState,
)
from vgpuctl.durations import DURATION_EXPECTED, duration_seconds
from vgpuctl.errors import InventoryError
from vgpuctl.inventory.classes import NamespaceList, VmClassList, VmCpus, VmMemoryGb
from vgpuctl.inventory.network import AdapterSpec, IdentitySpec
from vgpuctl.inventory.yamlpos import InventoryErrorLocation, KeyPath, Sources, shown_value
from vgpuctl.settings import SETTINGS
from vgpuctl.strictmodel import Lax, StrictModel
from vgpuctl.vmlimits import vm_limits

API_VERSION = "vgpuctl/v1"
MAX_VM_NAME = 80  # characters in a VM's name (docs/sources.md: vSphere Virtual Machine Administration)
MAX_REBOOT_TIMEOUT_S = 24 * 3600  # vgpuctl's own bound: a host not back within a day is not coming back by waiting

_THUMB_PLAIN = re.compile(r"[0-9a-fA-F]{64}")
_THUMB_COLONS = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){31}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_name(v: str | None) -> str | None:
    if v is not None and not _ENV_NAME.fullmatch(v):
        raise ValueError("must be the name of an environment variable, not a secret (what it holds is not shown)")
    return v


# vSphere keeps these escaped in a name (%2F, %5C, %25: docs/sources.md), so it would not read back as written.
_ESCAPED_BY_VSPHERE = "/\\%"
# Control, format (invisible) and line-separator characters: no source says vSphere refuses them; a name is
# also written into YAML, logs and file names, so they are refused.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def vm_name_problem(name: str, check_length: bool = True) -> str | None:
    """Why `name` cannot be a VM's name, or None. `check_length=False` for a name range, whose names are
    measured once expanded."""
    if not name.strip():
        return "must not be empty"
    hidden = next((c for c in name if unicodedata.category(c) in _HIDDEN_CATEGORIES), None)
    if hidden is not None:
        return f"must not contain control or invisible characters (found {hidden!r} in {name!r})"
    escaped = next((c for c in name if c in _ESCAPED_BY_VSPHERE), None)
    if escaped is not None:
        return (f"must not contain {escaped!r} (in {name!r}): vSphere stores '/', '\\' and '%' escaped, so the VM "
                "would not be found by this name")
    if check_length and len(name) > MAX_VM_NAME:
        return f"is {len(name)} characters long; vSphere takes VM names of at most {MAX_VM_NAME}"
    return None




# --------------------------------------------------------------------------------------------- vcenter


class TlsSpec(StrictModel):
    verify: bool = True
    ca_file: str | None = None
    thumbprint: str | None = None  # sha256 of the server certificate, hex, with or without colons

    @field_validator("thumbprint")
    @classmethod
    def _thumbprint(cls, v: str | None) -> str | None:
        if v is not None and not (_THUMB_PLAIN.fullmatch(v) or _THUMB_COLONS.fullmatch(v)):
            raise ValueError(
                f"must be a sha256 fingerprint: 64 hex digits, optionally as 32 colon-separated pairs (got {v!r})"
            )
        return v

    @property
    def thumbprint_hex(self) -> str | None:
        """The pinned fingerprint as upper-case hex without colons."""
        return self.thumbprint.replace(":", "").upper() if self.thumbprint else None


class VcenterSpec(StrictModel):
    url: str | None = None  # --url / VGPUCTL_URL / GOVC_URL win over this
    datacenter: str | None = None
    tls: TlsSpec = Field(default_factory=TlsSpec)

    @field_validator("url")
    @classmethod
    def _no_password(cls, v: str | None) -> str | None:
        if carries_password(v):
            raise ValueError("must not carry a password (secrets never live in the inventory): give it with "
                             "VGPUCTL_PASSWORD, --password-file or the prompt")
        return v


def carries_password(url: str | None) -> bool:
    """Whether a URL holds a password: the user info is all before the last @ (a password may hold @, /, ? or
    #). The URL is never repeated in a message."""
    user_info = (url.partition("://")[2] if url is not None and "://" in url else url or "").rpartition("@")[0]
    return ":" in user_info


MAX_VCENTER_NAME = 40
_VCENTER_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?")


def vcenter_env_key(name: str) -> str:
    """The part of a vCenter's name its environment variables end in (`VGPUCTL_PASSWORD_LAB_EAST` of `lab-east`):
    upper case, `-` as `_`. Two names with one key are one name."""
    return name.upper().replace("-", "_")


class VcenterEntry(VcenterSpec):
    """One vCenter of a fleet (`vcenters:`): its name, which entries name and its credentials' variables end
    in (vgpuctl.inventory.fleet), and the `vcenter:` section's fields."""

    name: str
    _index: int = PrivateAttr(default=0)  # its place in the file's vcenters list

    @field_validator("url")
    @classmethod
    def _no_password(cls, v: str | None) -> str | None:
        if carries_password(v):
            raise ValueError("must not carry a password (secrets never live in the inventory): give it with "
                             "VGPUCTL_PASSWORD_<NAME> or VGPUCTL_PASSWORD_FILE_<NAME> (docs/fleet.md)")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if len(v) > MAX_VCENTER_NAME or not _VCENTER_NAME.fullmatch(v):
            raise ValueError(f"a vCenter's name is letters, digits, '-' and '_' (at most {MAX_VCENTER_NAME}, "
                             f"starting and ending with a letter or digit): it ends its environment variables' "
                             f"names (got {v!r})")
        return v


# ----------------------------------------------------------------------------------------------- hosts


class SshSpec(StrictModel):
    user: str = "root"
    port: int = Field(default=22, ge=1, le=65535)
    known_hosts: str | None = None
    key_file: str | None = None
    password_env: str | None = None  # NAME of an environment variable holding the password, never the password
    service: Lax[SshService] = SshService.LEAVE  # manage: start the SSH service for the run, stop it afterwards

    @field_validator("password_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        return _env_name(v)


class MaintenanceSpec(StrictModel):
    """How apply takes the hosts through maintenance: what happens to their running VMs, how many at a time
    (a wave), how long a reboot may take, how many failed hosts stop the run and the pause between waves."""

    evacuate: Lax[Evacuate] = Evacuate.REFUSE
    max_unavailable: int = Field(default=1, ge=1)
    reboot_timeout_s: int = Field(default=900, ge=1, le=MAX_REBOOT_TIMEOUT_S)
    max_failures: int | None = Field(default=None, ge=1)  # no host starts once this many hosts of the run failed
    pause_between_waves: float = 0.0  # seconds after a wave ends before the next one starts (a duration)

    @field_validator("pause_between_waves", mode="before")
    @classmethod
    def _pause(cls, v: Any) -> Any:
        try:
            if isinstance(v, str):
                return duration_seconds(v)
            if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0:
                return duration_seconds(f"{v}")
        except ValueError as err:
            raise ValueError(f"{err} (got {shown_value(v)})") from None
        raise ValueError(f"{DURATION_EXPECTED} (got {shown_value(v)})")


# graphics, gpus, nvlink, scheduler: each host setting's part of an entry is in its module (vgpuctl.settings)


class HostEntry(StrictModel):
    """What every hosts entry has: which hosts it is for. HostSpec adds the settings' parts, then ssh and
    maintenance."""

    cluster: str | None = None
    name: str | None = None
    vcenter: str | None = None  # the fleet's vCenter it belongs to (vcenters:); default: the file's default_vcenter
    _line: int | None = PrivateAttr(default=None)
    _index: int = PrivateAttr(default=0)  # its position in the inventory's hosts
    _sources: Sources | None = PrivateAttr(default=None)  # where the inventory's parts are written

    @model_validator(mode="after")
    def _target(self) -> HostEntry:
        if (self.cluster is None) == (self.name is None):
            raise ValueError("set exactly one of 'cluster' or 'name'")
        return self

    @property
    def target(self) -> str:
        return f"cluster {self.cluster}" if self.cluster else f"host {self.name}"

    def located(self, path: KeyPath) -> tuple[str | None, int | None]:
        """(file, line) of a key path within the entry (its nearest enclosing key's when it has none): the file
        that holds it, which for a composed inventory may be an included file, an overlay or a values file."""
        if self._sources is None:
            return None, self._line
        file, _, line, _ = self._sources.where(("hosts", self._index, *path))
        return file, line


def _host_spec() -> Any:
    """A hosts entry: cluster or name, each host setting's key with its schema (in registry order), then ssh and
    maintenance."""
    fields: dict[str, Any] = {s.key: (s.schema, s.default) for s in SETTINGS}
    fields["ssh"] = (SshSpec, Field(default_factory=SshSpec))
    fields["maintenance"] = (MaintenanceSpec, Field(default_factory=MaintenanceSpec))
    return create_model("HostSpec", __base__=HostEntry, __module__=__name__, **fields)


if typing.TYPE_CHECKING:

    class HostSpec(HostEntry):
        """A hosts entry; each host setting's part is read through that setting (`SETTING.of(spec)`), typed."""

        ssh: SshSpec = Field(default_factory=SshSpec)
        maintenance: MaintenanceSpec = Field(default_factory=MaintenanceSpec)

else:
    HostSpec = _host_spec()


# ------------------------------------------------------------------------------------------------- vms


class VgpuSpec(StrictModel):
    profile: str
    count: int = 1

    @field_validator("count")
    @classmethod
    def _count(cls, v: int) -> int:
        if not 1 <= v <= MAX_VGPUS_PER_VM:
            raise ValueError(f"must be between 1 and {MAX_VGPUS_PER_VM} (got {v})")
        return v


class GuestRef(StrictModel):
    group: str | None = None  # the guest group whose playbooks configure it (none: no playbooks)
    identity: IdentitySpec | None = None  # hostname and addresses given to a clone (docs/multi-node.md)


class VmSpec(StrictModel):
    name: str
    vcenter: str | None = None  # the fleet's vCenter it belongs to (vcenters:); default: the file's default_vcenter
    template: str | None = None
    cluster: str | None = None
    host: str | None = None
    folder: str | None = None
    cpus: VmCpus = Field(default=None, ge=1)  # at most vSphere's maximum (vgpuctl.vmlimits)
    memory_gb: VmMemoryGb = None
    vgpus: list[VgpuSpec] = Field(default_factory=list)
    nvlink: Lax[NvlinkRequirement] = NvlinkRequirement.NONE
    power: Lax[Power] = Power.RESTART
    guest: GuestRef | None = None
    keep: list[Lax[Keep]] = Field(default_factory=list)  # what an existing VM keeps although vgpuctl would set it
    state: Lax[VmState] = VmState.PRESENT  # absent: power it off and destroy it (apply --allow-destroy)
    network: list[AdapterSpec] | None = None  # its adapters; None: the VM's adapters are left as they are
    network_exclusive: bool = False  # adapters `network` does not name are removed
    gpudirect_rdma: bool = False  # the RDMA adapter reads and writes the vGPUs' framebuffer (GPUDirect RDMA)
    _line: int | None = PrivateAttr(default=None)
    _index: int = PrivateAttr(default=0)  # position of the YAML entry this VM came from (before expansion)
    _ordinal: int = PrivateAttr(default=0)  # its position among the names of its entry's name range
    _vgpus_invalid: bool = PrivateAttr(default=False)  # its `vgpus` failed the schema (one-pass validation)

    @model_validator(mode="before")
    @classmethod
    def _null_vgpus_is_unset(cls, data: Any) -> Any:
        if isinstance(data, dict) and "vgpus" in data and data["vgpus"] is None:
            return {k: v for k, v in data.items() if k != "vgpus"}  # `vgpus:` alone leaves the vGPUs alone
        return data

    @field_validator("vgpus", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, dict) else v

    @property
    def manages_vgpus(self) -> bool:
        """False when the entry has no `vgpus` key: the VM's vGPUs are left as they are."""
        return "vgpus" in self.model_fields_set

    @field_validator("network")
    @classmethod
    def _adapters(cls, v: list[AdapterSpec] | None) -> list[AdapterSpec] | None:
        virtual = sum(1 for a in v or [] if a.kind != AdapterType.PASSTHROUGH)
        problem = vm_limits().adapters_problem(virtual)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        problem = vm_name_problem(v, check_length="{" not in v)  # a range's names: measured by range_errors
        if problem:
            raise ValueError(problem)
        return v

    @property
    def memory_mb(self) -> int | None:
        return int(self.memory_gb * 1024) if self.memory_gb is not None else None

    @property
    def vgpu_profiles(self) -> list[str]:
        """One profile name per vGPU, in declaration order."""
        return [v.profile for v in self.vgpus for _ in range(v.count)]

    @property
    def vgpu_count(self) -> int:
        return sum(v.count for v in self.vgpus)

    @property
    def adapters(self) -> list[AdapterSpec]:
        return list(self.network or [])

    @property
    def identity(self) -> IdentitySpec | None:
        return self.guest.identity if self.guest is not None else None


# ---------------------------------------------------------------------------------------------- guests


class GuestConnection(StrictModel):
    user: str = "root"
    port: int = Field(default=22, ge=1, le=65535)
    key_file: str | None = None
    password_env: str | None = None

    @field_validator("password_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        return _env_name(v)


# Ansible's connection variables that hold a password (Ansible documentation, "How to build your inventory",
# "Connecting to hosts: behavioral inventory parameters", and "Understanding privilege escalation: become"; the
# older spellings included). A group's vars are written into the run's inventory and kept in saved plans.
ANSIBLE_SECRET_VARS = frozenset({
    "ansible_password", "ansible_ssh_pass", "ansible_ssh_password", "ansible_become_password", "ansible_become_pass",
    "ansible_sudo_pass", "ansible_sudo_password", "ansible_su_pass", "ansible_su_password",
})


class GuestGroup(StrictModel):
    roles: list[str] = Field(default_factory=list)
    vars: dict[str, Any] = Field(default_factory=dict)

    @field_validator("vars")
    @classmethod
    def _no_password(cls, v: dict[str, Any]) -> dict[str, Any]:
        secret = next((name for name in v if name.lower() in ANSIBLE_SECRET_VARS), None)
        if secret is not None:
            raise ValueError(f"{secret} holds a password, and secrets never live in the inventory (its text is kept "
                             "in saved plans): give the guests' password with guests.connection.password_env")
        return v


class GuestsSpec(StrictModel):
    connection: GuestConnection = Field(default_factory=GuestConnection)
    groups: dict[str, GuestGroup] = Field(default_factory=dict)


# ------------------------------------------------------------------------------------------- inventory


def entry_vcenter(named: str | None, vcenters: Sequence[str], default: str | None) -> str | None:
    """The vCenter an entry belongs to: the one it names, else the file's default_vcenter, else the only one
    the file lists; None in a single-vCenter inventory (and for an entry of several no default settles)."""
    if named is not None or not vcenters:
        return named
    if default is not None:
        return default
    return vcenters[0] if len(vcenters) == 1 else None


class Inventory(StrictModel):
    api_version: Literal["vgpuctl/v1"] = Field(alias="apiVersion")
    allow_destroy: bool = False  # VMs with state: absent may be destroyed without apply --allow-destroy
    vcenter: VcenterSpec = Field(default_factory=VcenterSpec)
    vcenters: list[VcenterEntry] = Field(default_factory=list)  # a fleet: several vCenters (docs/fleet.md)
    default_vcenter: str | None = None  # a fleet's vCenter of the entries that name none
    hosts: list[HostSpec] = Field(default_factory=list)
    vms: list[VmSpec] = Field(default_factory=list)
    guests: GuestsSpec = Field(default_factory=GuestsSpec)
    vm_classes: VmClassList = Field(default_factory=list)  # VM classes with vGPUs (vgpuctl.supervisor.vmclasses)
    namespaces: NamespaceList = Field(default_factory=list)  # supervisor namespaces and their VM classes
    _source_path: str | None = PrivateAttr(default=None)
    _sources: Sources | None = PrivateAttr(default=None)  # where each part is written (vgpuctl.inventory.yamlpos)
    _composed: Any = PrivateAttr(default=None)  # what it was put together from (vgpuctl.inventory.compose.Composed)

    @field_validator("hosts", "vms", "vcenters", mode="before")
    @classmethod
    def _empty_list(cls, v: Any) -> Any:
        return [] if v is None else v  # `vms:` with nothing under it

    @property
    def source_path(self) -> str | None:
        return self._source_path

    @property
    def vcenter_names(self) -> list[str]:
        """The names of a fleet's vCenters (none in a single-vCenter inventory)."""
        return [v.name for v in self.vcenters]

    @property
    def is_fleet(self) -> bool:
        """The inventory names its vCenters (`vcenters:`): each entry belongs to one of them."""
        return bool(self.vcenters)

    def vcenter_of(self, named: str | None) -> str | None:
        """The vCenter an entry belongs to (`entry_vcenter`)."""
        return entry_vcenter(named, [v.name for v in self.vcenters], self.default_vcenter)

    @property
    def composed_from(self) -> list[str]:
        """The files the inventory was read from: its own, then those it includes and the values files."""
        return list(self._composed.files) if self._composed is not None else []

    @property
    def is_merged(self) -> bool:
        """Whether it is more than its file's own content: files included, an overlay or a values file applied."""
        return self._composed is not None and bool(self._composed.merged)

    @property
    def env(self) -> str | None:
        """The overlay applied to it (--env)."""
        return self._composed.env if self._composed is not None else None

    def vm(self, name: str) -> VmSpec | None:
        return next((v for v in self.vms if v.name == name), None)

    def locate(self, path: KeyPath) -> InventoryErrorLocation:
        return InventoryErrorLocation(self._sources, path)

    def where(self, path: KeyPath) -> tuple[str | None, int | None]:
        """(file, line) of a key path of the inventory: the file that holds it, which for a composed inventory may
        be an included file, an overlay or a values file."""
        if self._sources is None:
            return None, None
        file, _, line, _ = self._sources.where(path)
        return file, line

    def error(self, path: KeyPath, message: str) -> InventoryError:
        return self.locate(path).error(message)

