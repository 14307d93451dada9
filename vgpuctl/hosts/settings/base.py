"""What a host setting is: the `HostSetting` protocol, and the plain data its methods take and give.

A host setting is one thing vgpuctl manages on an ESXi host (graphics default type, a GPU's MIG mode, NVLink,
the scheduler, ...). Its module in this package is its one home: the inventory key it is set by, what it
reads (bulk-read properties, ObservedHost/ObservedGpu fields, host facts), its value now, the changes that
bring a host to the inventory (each with its Phase), the host as vSphere shows it after them, how apply
writes them, what verification checks afterwards, and how `plan --explain`, `export`, `host show`/`status`
and a saved plan's drift check see it. Host planning, apply, explain, export, status and the plan file loop
over the registry (vgpuctl.hosts.settings.SETTINGS); docs/architecture.md has the recipe for a new one.

Pure except `HostSetting.apply`, which writes through a HostWriter: vCenter calls live in vgpuctl.vsphere,
shell commands in vgpuctl.esxi; the writer carries the session and the host's shell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from vgpuctl.domain import ChangeKind, Phase
from vgpuctl.esxi.modopts import Options
from vgpuctl.hosts.facts import GpuFacts, HostFacts
from vgpuctl.model import HOST_TARGET, HostChange, ObservedGpu, ObservedHost
from vgpuctl.strictmodel import KeyPath

if TYPE_CHECKING:
    from vgpuctl.inventory import HostSpec
    from vgpuctl.vsphere.session import Session


# ------------------------------------------------------------------------------------------ what it reads


@dataclass(frozen=True)
class SettingPrivileges:
    """What applying a setting asks of vCenter beyond the shared writes (graphics config, module options): the
    operation in the words of the README's role table, the calls, and the privilege ids (preflight checks them on
    the host)."""

    what: str
    methods: tuple[str, ...]
    privileges: tuple[str, ...]


@dataclass(frozen=True)
class Observes:
    """What a setting reads. `properties`: HostSystem property paths of the bulk read (vsphere/observe.py
    HOST_PROPS); `host_fields` / `gpu_fields`: the ObservedHost / ObservedGpu fields those fill; `facts` /
    `gpu_facts`: the HostFacts / GpuFacts fields (per-host API calls and the ESXi shell, vgpuctl.hosts.facts).
    A test fails when an observed field is read by no setting and not listed as read for something else."""

    properties: tuple[str, ...] = ()
    host_fields: tuple[str, ...] = ()
    gpu_fields: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()
    gpu_facts: tuple[str, ...] = ()

    @property
    def module_options(self) -> bool:
        """It is kept in the nvidia module options (read with the host facts)."""
        return "options_configured" in self.facts


# ------------------------------------------------------------------------------------------ planning


@dataclass
class HostPlan:
    """Changes planned for hosts, and why a plan cannot be made (errors) or what it should say (warnings)."""

    changes: list[HostChange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def extend(self, other: HostPlan) -> None:
        self.changes += other.changes
        self.errors += other.errors
        self.warnings += other.warnings

    def for_host(self, host: str) -> list[HostChange]:
        return [c for c in self.changes if c.host == host]

    @property
    def hosts(self) -> list[str]:
        return sorted({c.host for c in self.changes})


@dataclass
class PlanInput:
    """What one host's settings are planned from: its merged inventory entry, the host as observed, and its
    facts (None in a pure plan: nothing from the shell or the per-host calls is known then)."""

    spec: HostSpec
    host: ObservedHost
    facts: HostFacts | None = None

    @property
    def shell(self) -> bool:
        """The ESXi shell's facts were read."""
        return self.facts is not None and self.facts.shell

    def gpu_facts(self, pci: str) -> GpuFacts | None:
        return self.facts.gpus.get(pci.lower()) if self.facts is not None else None

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
        configured = host.module_options
        if facts is not None and facts.options_configured is not None:
            configured = facts.options_configured
        effective = facts.options_effective if facts is not None and facts.options_effective is not None else configured
        return cls(configured, effective, facts is not None and facts.options_configured is None)


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


@dataclass(frozen=True)
class ApplyStep:
    """A step of host apply, between entering and leaving maintenance mode, in `order`. Its name is the phase
    a work record names while it runs. `finish` makes the one write the settings of the step collected."""

    name: str
    order: int
    finish: Callable[[HostWriter, Sequence[HostChange]], None] | None = None


def _write_graphics(writer: HostWriter, changes: Sequence[HostChange]) -> None:
    from vgpuctl.vsphere import host as vhost

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
    from vgpuctl.esxi.modopts import format_module_options, parse_module_options
    from vgpuctl.vsphere import host as vhost

    current = vhost.configured_module_options(writer.session, writer.moid)
    options = parse_module_options(current or "")
    for edit in writer.option_edits:
        edit(options)
    wanted = format_module_options(options)
    writer.progress("module-options", wanted)
    if wanted != current:
        vhost.update_module_options(writer.session, writer.moid, wanted, host=writer.host)
    writer.done("module-options")


MIG_STEP = ApplyStep("mig", 10)  # nvidia-smi on the host, one GPU after the other
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
    gpus: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ the protocol


class HostSetting(Protocol):
    """One host setting. Attributes are data; methods are pure except `apply`."""

    @property
    def key(self) -> str:
        """Its inventory key in a hosts entry."""
        ...

    @property
    def schema(self) -> Any:
        """The type of that key: its part of the inventory schema (vgpuctl.inventory.HostSpec is made of them)."""
        ...

    @property
    def default(self) -> Any:
        """Its value when an entry does not set it (a value, or a pydantic Field with a default factory)."""
        ...

    @property
    def kinds(self) -> tuple[ChangeKind, ...]:
        """The changes it plans, in the order plans list them."""
        ...

    @property
    def offer_kinds(self) -> frozenset[ChangeKind]:
        """Those of its changes after which the host may offer other vGPU profiles."""
        ...

    @property
    def observes(self) -> Observes: ...

    @property
    def drift_fields(self) -> tuple[str, ...]:
        """ObservedHost fields a saved plan must find as they were (vgpuctl.planfile)."""
        ...

    @property
    def privileges(self) -> SettingPrivileges | None:
        """The vCenter privileges its apply needs of its own (preflight); None when it writes only through the
        shared graphics-config and module-option calls, or in the ESXi shell."""
        ...

    def is_set(self, spec: HostSpec) -> bool:
        """The inventory entry sets it (else the host keeps what it has)."""
        ...

    def problems(self, spec: HostSpec) -> list[tuple[KeyPath, str]]:
        """What its part of an entry (or of a host's merged entries) must meet beyond its schema: (key path in
        the entry, message) each; `validate` and the host-entry merge report them."""
        ...

    def plan(self, inp: PlanInput) -> HostPlan:
        """The changes that bring the host to the entry, each with its Phase; errors when it cannot be met."""
        ...

    def predict(self, host: ObservedHost, changes: Sequence[HostChange]) -> None:
        """Make `host` (a copy) what vSphere shows once its changes of this setting are applied."""
        ...

    def step(self, kind: ChangeKind) -> ApplyStep:
        """The apply step that writes a change of this kind."""
        ...

    def needs_shell(self, kind: ChangeKind) -> bool:
        """Planning or applying a change of this kind needs the ESXi shell."""
        ...

    def param_written(self, change: HostChange) -> str | None:
        """The nvidia module parameter the change writes (the module must declare it); None when none."""
        ...

    def ends_nvlink_groups(self, change: HostChange) -> bool:
        """After the change the host offers no NVLink device groups (VMs that use one cannot run there)."""
        ...

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        """Write its changes of `step`: through the writer's shell, or into what the step collects."""
        ...

    def verify(self, inp: PlanInput) -> list[str]:
        """What apply checks after the change beyond planning again (e.g. NVLink links up); one line each."""
        ...

    def explain(self, key: str, host: ObservedHost) -> str | None:
        """vCenter's value now for one of its display keys (`plan --explain`); None for vgpuctl's own values."""
        ...

    def export(self, host: ObservedHost, facts: HostFacts | None) -> Exported:
        """Its part of an inventory that describes the host as it is (`vgpuctl export`)."""
        ...

    def status(self, host: ObservedHost, facts: HostFacts | None) -> list[SettingState]:
        """Its values for `host show` and `status`."""
        ...


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
