"""What a host setting is: the `HostSetting` and `GpuSetting` base classes, and the plain data their methods take and
give.

A host setting is one thing vgpuctl manages on an ESXi host (graphics default type, a GPU's MIG mode, its ECC
memory, NVLink, the scheduler, ...). Its module in this package is its one home: the inventory key it is set by
and its type, what it reads (bulk-read properties and its facts: `Reads`), its value now, the changes that bring a
host to the inventory (each with its Phase), the host as vSphere shows it after them, how apply writes them, what
verification checks afterwards, and how `plan --explain`, `export`, `host show`/`status` and a saved plan's drift
check see it, all from the same `(host, facts)`. A setting subclasses `HostSetting` (a key of a hosts entry) or
`GpuSetting` (fields of each `gpus:` item, planned per GPU) and states only what differs from their defaults.
Host planning, apply, explain, export, status and the plan file loop over the registry (vgpuctl.settings.SETTINGS);
docs/architecture.md has the recipe for a new one.

Pure except `apply`, which writes through a HostWriter: vCenter calls live in vgpuctl.vsphere, shell commands in
vgpuctl.esxi; the writer carries the session and the host's shell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from vgpuctl.domain import ChangeKind, CheckStatus, Phase
from vgpuctl.esxi.modopts import Options, format_module_options, parse_module_options
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import HOST_TARGET, HostChange, ObservedGpu, ObservedHost, Problem, UpgradeWindow
from vgpuctl.settings.facts import MODULE_OPTIONS, ApiFact, EntryShellFact, GpuQuery, HostFacts, ShellFact
from vgpuctl.strictmodel import KeyPath
from vgpuctl.vsphere import host as vhost

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

S = TypeVar("S")  # a setting's part of a hosts entry
V = TypeVar("V")  # a GPU field's value


# ------------------------------------------------------------------------------------------ what it reads


@dataclass(frozen=True)
class SettingPrivileges:
    """What applying a setting asks of vCenter beyond the shared writes (graphics config, module options): the
    operation in the words of the README's role table, the calls, and the privilege ids (preflight checks them on
    the host)."""

    what: str
    methods: tuple[str, ...]
    privileges: tuple[str, ...]
    # what some of its changes ask on other objects than the host (a cluster, vCenter itself): its own row of
    # the role table, the objects and privileges each change asks named by `privileges_beyond_host`
    beyond_host: SettingPrivileges | None = None


class PrivilegePlace(StrEnum):
    """Where a privilege a change asks beyond its host is checked."""

    CLUSTER = "cluster"  # the host's cluster (ClusterComputeResource)
    VCENTER = "vcenter"  # an operation of vCenter's own, on no object: checked on the root folder


@dataclass(frozen=True)
class PrivilegeNeed:
    """Privileges one change's apply asks on an object other than its host."""

    place: PrivilegePlace
    moid: str  # the cluster's moid (CLUSTER); "" for VCENTER
    privileges: tuple[str, ...]


@dataclass(frozen=True)
class Reads:
    """What a setting reads. The bulk read: `properties` (HostSystem property paths; the registry adds them to the
    one bulk read) and the ObservedHost / ObservedGpu fields they fill (`host_fields`, `gpu_fields`). One host at a
    time: `gpu_queries` (fields of the one `nvidia-smi --query-gpu` command), `shell` (other ESXi shell commands)
    and `api` (per-host vSphere calls), each landing in HostFacts under its own name. A test fails when an observed
    field is read by no setting and not listed as read for something else."""

    properties: tuple[str, ...] = ()
    host_fields: tuple[str, ...] = ()
    gpu_fields: tuple[str, ...] = ()
    gpu_queries: tuple[GpuQuery[Any], ...] = ()
    shell: tuple[ShellFact[Any], ...] = ()
    api: tuple[ApiFact[Any], ...] = ()
    entry_shell: tuple[EntryShellFact[Any], ...] = ()  # shell commands the host's entry decides

    @property
    def module_options(self) -> bool:
        """It is kept in the nvidia module options (read with the host's facts)."""
        return MODULE_OPTIONS in self.api

    @property
    def facts(self) -> tuple[GpuQuery[Any] | ShellFact[Any] | ApiFact[Any] | EntryShellFact[Any], ...]:
        return (*self.gpu_queries, *self.shell, *self.api, *self.entry_shell)


# ------------------------------------------------------------------------------------------ planning


@dataclass
class HostPlan:
    """Changes planned for hosts, and why a plan cannot be made (errors) or what it should say (warnings)."""

    changes: list[HostChange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # of plan_hosts: its errors, each with its host
    window: UpgradeWindow | None = None  # a driver upgrade window (vgpuctl.hosts.window)

    def extend(self, other: HostPlan) -> None:
        self.changes += other.changes
        self.errors += other.errors
        self.warnings += other.warnings
        self.problems += other.problems
        self.window = other.window or self.window

    def for_host(self, host: str) -> list[HostChange]:
        return [c for c in self.changes if c.host == host]

    @property
    def hosts(self) -> list[str]:
        return sorted({c.host for c in self.changes})


@dataclass
class PlanInput:
    """What one host's settings are planned from: its merged inventory entry (each setting reads its own part with
    its `of`), the host as observed, and its facts (None in a pure plan: nothing from the shell or the per-host
    calls is known then)."""

    spec: object
    host: ObservedHost
    facts: HostFacts | None = None

    @property
    def shell(self) -> bool:
        """The ESXi shell's facts were read."""
        return self.facts is not None and self.facts.shell

    @property
    def gpus(self) -> dict[str, ObservedGpu]:
        """The host's GPUs by PCI id (lower case)."""
        return {g.pci_id.lower(): g for g in self.host.gpus}

    @property
    def options(self) -> ModuleOptions:
        return ModuleOptions.of(self.host, self.facts)


@dataclass(frozen=True)
class ModuleOptions:
    """The host's nvidia module option strings: `configured` for the next boot, `effective` of the loaded
    module, and whether the per-host calls could not read them (`unread`; the facts' warnings say why)."""

    configured: str
    effective: str
    unread: bool = False

    @classmethod
    def of(cls, host: ObservedHost, facts: HostFacts | None) -> ModuleOptions:
        """From the facts when they were read, else what observe recorded (ObservedHost.module_options)."""
        read = facts.get(MODULE_OPTIONS) if facts is not None else None
        configured = read.configured if read is not None else host.module_options
        effective = read.effective if read is not None and read.effective is not None else configured
        return cls(configured, effective, facts is not None and read is None)


# ------------------------------------------------------------------------------------------ applying


@dataclass
class GraphicsUpdate:
    """One UpdateGraphicsConfig: what the settings of the graphics step change (None: keep the host's)."""

    default_type: str | None = None
    assignment_policy: str | None = None
    devices: dict[str, dict[str, str]] = field(default_factory=dict)  # PCI id -> {"graphics_type", "vgpu_mode"}

    def device(self, pci: str) -> dict[str, str]:
        return self.devices.setdefault(pci, {})


@dataclass
class HostWriter:
    """What a setting's apply writes through, for one host: the session and the host's shell, progress, and
    what the combined steps collect (one graphics update, one module option string)."""

    session: Session
    host: str
    moid: str
    progress: Callable[[str, str | None], None]  # (step, detail): a line of progress
    done: Callable[[str], None]  # a step finished (HostOutcome.steps)
    open_shell: Callable[[], AbstractContextManager[Any]]  # the host's EsxiShell
    graphics: GraphicsUpdate = field(default_factory=GraphicsUpdate)
    option_edits: list[Callable[[Options], None]] = field(default_factory=list)
    reboot_pending: bool = False  # a write reported that it takes effect at the next reboot
    rebooted: bool = False  # the write rebooted the host itself, after every write before it (a vLCM remediation)


@dataclass(frozen=True)
class ApplyStep:
    """A step of host apply, between entering and leaving maintenance mode, in `order`. Its name is the phase
    a work record names while it runs. `finish` makes the one write the settings of the step collected."""

    name: str
    order: int
    finish: Callable[[HostWriter, Sequence[HostChange]], None] | None = None


def _write_graphics(writer: HostWriter, changes: Sequence[HostChange]) -> None:
    g = writer.graphics
    writer.progress("graphics", ", ".join(f"{c.kind} {c.new}" for c in changes))
    vhost.update_graphics(
        writer.session,
        writer.moid,
        default_type=g.default_type,
        assignment_policy=g.assignment_policy,
        devices=g.devices,
        host=writer.host,
    )
    writer.done("graphics")


def _write_module_options(writer: HostWriter, changes: Sequence[HostChange]) -> None:
    current = vhost.configured_module_options(writer.session, writer.moid)
    options = parse_module_options(current or "")
    for edit in writer.option_edits:
        edit(options)
    wanted = format_module_options(options)
    writer.progress("module-options", wanted)
    if wanted != current:
        vhost.update_module_options(writer.session, writer.moid, wanted, host=writer.host)
    writer.done("module-options")


GRAPHICS_STEP = ApplyStep("graphics", 20, _write_graphics)  # one UpdateGraphicsConfig
MODULE_OPTIONS_STEP = ApplyStep("module-options", 30, _write_module_options)  # one UpdateModuleOptionString


# ------------------------------------------------------------------------------------------ showing


@dataclass(frozen=True)
class SettingState:
    """A setting's value as `host show` and `status` report it: now, and after the next reboot when that
    differs (a module option written but not yet loaded)."""

    key: str  # display key: "nvlink", "graphics.default_type"
    value: str
    after_reboot: str | None = None


@dataclass
class Exported:
    """A setting's part of an inventory written by `vgpuctl export`: display key -> value (a dotted key is a
    key of a mapping: "graphics.default_type"), per GPU settings by PCI id, and comments."""

    values: dict[str, Any] = field(default_factory=dict)
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Finding:
    """One check a setting makes of a host before a run (`vgpuctl preflight` shows it, with the host): its id
    (`host.sriov-firmware`), pass, warn or fail, what it saw, and the fix."""

    id: str
    status: CheckStatus
    evidence: str
    fix: str | None = None


# ------------------------------------------------------------------------------------------ the two kinds


class _Setting:
    """What both kinds of setting have: its changes, what it reads, how apply writes them. The defaults are a
    setting that reads nothing, plans nothing and writes nothing; a setting states what differs."""

    kinds: tuple[ChangeKind, ...] = ()  # the changes it plans, in the order plans list them
    offer_kinds: frozenset[ChangeKind] = frozenset()  # after which the host may offer other profiles
    reads: Reads = Reads()
    drift_fields: tuple[str, ...] = ()  # ObservedHost fields a saved plan must find as they were
    privileges: SettingPrivileges | None = None  # vCenter privileges its apply needs of its own
    apply_step: ApplyStep | None = None  # the apply step that writes its changes
    shell_kinds: frozenset[ChangeKind] = frozenset()  # kinds whose planning or apply needs the shell

    def step(self, kind: ChangeKind) -> ApplyStep:
        """The apply step that writes a change of this kind."""
        if self.apply_step is None:
            raise NotImplementedError(f"{type(self).__name__} plans {kind} but names no apply step")
        return self.apply_step

    def needs_shell(self, kind: ChangeKind) -> bool:
        """Planning or applying a change of this kind needs the ESXi shell."""
        return kind in self.shell_kinds

    def privileges_beyond_host(self, change: HostChange) -> tuple[PrivilegeNeed, ...]:
        """The privileges the change's apply asks on other objects than its host (`privileges.beyond_host`'s
        row of the role table): none."""
        return ()

    def param_written(self, change: HostChange) -> str | None:
        """The nvidia module parameter the change writes (the module must declare it); None when none."""
        return None

    def ends_nvlink_groups(self, change: HostChange) -> bool:
        """After the change the host offers no NVLink device groups (VMs that use one cannot run there)."""
        return False

    def replaces_manager(self, change: HostChange) -> str | None:
        """The NVIDIA vGPU Manager version the host runs after the change, when the change replaces it (None: the
        change keeps the one it has). A change that replaces it is a step of a driver upgrade window: every VM
        running on the host must be on a pair NVIDIA lists before and after (vgpuctl.hosts.window)."""
        return None

    def predict(self, host: ObservedHost, changes: Sequence[HostChange]) -> None:
        """Make `host` (a copy) what vSphere shows once its changes of this setting are applied."""

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        """Write its changes of `step`: through the writer's shell, or into what the step collects."""
        if changes:
            raise NotImplementedError(f"{type(self).__name__} plans changes but does not apply them")

    def verify(self, inp: PlanInput) -> list[str]:
        """What apply checks after the change beyond planning again (e.g. NVLink links up); one line each."""
        return []


class HostSetting(_Setting, Generic[S]):
    """A host-wide setting: one key of a hosts entry, of type `schema` (S)."""

    key: str  # its inventory key in a hosts entry
    schema: Any  # the type of that key: its part of the inventory schema
    default: Any = None  # its value when an entry does not set it (a value, or a pydantic Field)

    @property
    def doc(self) -> str:
        """Its documentation: the page and the heading of its section."""
        return f"docs/host-changes.md#{self.key}"

    def of(self, spec: object) -> S:
        """Its part of a hosts entry (HostSpec), typed."""
        return cast(S, getattr(spec, self.key))

    def is_set(self, spec: object) -> bool:
        """The inventory entry sets it (else the host keeps what it has)."""
        value = self.of(spec)
        return value is not None and value != []

    def problems(self, spec: object) -> list[tuple[KeyPath, str]]:
        """What its part of an entry (or of a host's merged entries) must meet beyond its schema: (key path in
        the entry, message) each; `validate` and the host-entry merge report them."""
        return []

    def reads_shell(self, spec: object) -> bool:
        """The entry sets what only the ESXi shell reads or writes (preflight then checks the host's SSH)."""
        return bool(self.shell_kinds) and self.is_set(spec)

    def api_needs(self, spec: object) -> list[tuple[tuple[int, ...], str]]:
        """The vSphere API levels its part of the entry needs: (level, what needs it) each (preflight)."""
        return []

    def preflight(self, spec: object, host: ObservedHost) -> list[Finding]:
        """What preflight checks of the host for its part of the entry, beyond planning it (the firmware of a NIC
        it gives virtual functions, say); none by default."""
        return []

    def wanted_manager(self, spec: object) -> str | None:
        """The NVIDIA vGPU Manager version the entry asks the host to run (None: it does not say): the guest
        drivers of the host's VMs follow it (vgpuctl.hosts.window)."""
        return None

    preflight_reads: bool = False  # preflight gathers the host's facts for `preflight_facts`

    def preflight_facts(self, spec: object, host: ObservedHost, facts: HostFacts) -> list[Finding]:
        """What preflight checks of the host from its facts (a depot the entry names); read only for settings with
        `preflight_reads` that the entry sets."""
        return []

    def merge(self, base: S, over: S) -> S | None:
        """Its part of a host's entry over its cluster entry's (both set); None: the host-entry merge's rule (a
        mapping key by key, anything else replaced)."""
        return None

    def plan(self, inp: PlanInput) -> HostPlan:
        """The changes that bring the host to the entry, each with its Phase; errors when it cannot be met."""
        return HostPlan()

    def explain(self, key: str, host: ObservedHost, facts: HostFacts | None) -> str | None:
        """What the host has now for one of its display keys (`plan --explain`); None where it has no such value."""
        return None

    def export(self, host: ObservedHost, facts: HostFacts | None) -> Exported:
        """Its part of an inventory that describes the host as it is (`vgpuctl export`)."""
        return Exported()

    def status(self, host: ObservedHost, facts: HostFacts | None) -> list[SettingState]:
        """Its values for `host show` and `status`."""
        return []


@dataclass(frozen=True)
class GpuField(Generic[V]):
    """One field of a `gpus:` item a GpuSetting adds, with its type: `of` reads it from an item, typed."""

    name: str
    schema: Any

    def of(self, item: object) -> V | None:
        return cast("V | None", getattr(item, self.name, None))


class GpuSetting(_Setting):
    """A per-GPU setting: fields of each `gpus:` item (vgpuctl.settings.pergpu), planned GPU by GPU from what the
    GPU's items ask (its `all` item, then its own on top)."""

    fields: tuple[GpuField[Any], ...] = ()

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def doc(self) -> str:
        """Its documentation: the page and the heading of its section."""
        return f"docs/host-changes.md#gpus: {', '.join(self.field_names)}"

    def item_problems(self, item: object) -> list[tuple[KeyPath, str]]:
        """What one `gpus:` item must meet beyond its schema (key paths within the item)."""
        return []

    def item_api_needs(self, item: object) -> list[tuple[tuple[int, ...], str]]:
        """The vSphere API levels a `gpus:` item's fields need: (level, what needs it) each (preflight)."""
        return []

    def inherits(self, name: str, over: object) -> bool:
        """Whether a host entry's item `over` takes field `name` from the cluster entry's item of the same
        `select` when it does not set it itself (the host-entry merge)."""
        return True

    def plan_gpu(self, inp: PlanInput, gpu: ObservedGpu, want: object) -> HostPlan:
        """The changes that bring one GPU to `want` (its items merged), each with its Phase."""
        return HostPlan()

    def explain_gpu(self, name: str, gpu: ObservedGpu, facts: HostFacts | None) -> str | None:
        """What the GPU has now for field `name` (`plan --explain`); None where it has no such value."""
        return None

    def export_gpu(self, gpu: ObservedGpu, facts: HostFacts | None) -> dict[str, Any]:
        """Its fields of a `gpus:` item describing the GPU as it is (`vgpuctl export`)."""
        return {}

    def export_notes(self, host: ObservedHost, facts: HostFacts | None) -> list[str]:
        """Comments for an exported entry (what its values leave out)."""
        return []

    def status_gpu(self, gpu: ObservedGpu, facts: HostFacts | None) -> list[SettingState]:
        """Its values for one GPU in `host show` and `status`."""
        return []


# ------------------------------------------------------------------------------------------ shared helpers


def names(items: Iterable[str]) -> str:
    """A short list for messages: at most ten names, then how many in all."""
    listed = sorted(items)
    if len(listed) > 10:
        return ", ".join(listed[:10]) + f", ... ({len(listed)} in all)"
    return ", ".join(listed) or "none"


def host_change(
    inp: PlanInput, kind: ChangeKind, old: Any, new: Any, phase: Phase, target: str | None = None
) -> HostChange:
    """A change of the planned host; `target` a GPU's PCI id, host-wide when None."""
    return HostChange(inp.host.name, kind, target or HOST_TARGET, old, new, phase)
