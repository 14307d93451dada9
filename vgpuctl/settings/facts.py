"""What the host settings are planned from beyond the bulk read, read one host at a time, and where each value lands.

A setting declares the facts it reads with it (`Reads` in vgpuctl.settings.base), each a command or call and the
parser of what it answers:
- `GpuQuery`: fields of the one `nvidia-smi --query-gpu` command the registry builds for all the settings, with the
  parser of one GPU's values; it lands per GPU;
- `ShellFact`: another ESXi shell command and its parser (vgpuctl.esxi.facts.Fact);
- `ApiFact`: a per-host vSphere call and what it keeps of the answer;
- `EntryShellFact`: a shell command the host's entry decides (a depot path it names), read with its failure.
Each lands in `HostFacts` under its own name, typed by its parser: a new setting adds its facts, never a field of
a shared record. The facts below are the ones several readers share (the settings, `status`, placement's NVLink
sets); a fact only one setting reads is declared in that setting's module. Gathered by vgpuctl.settings.gather;
no I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from vgpuctl.errors import NotFound
from vgpuctl.esxi import facts as esxi_facts
from vgpuctl.esxi import parsers
from vgpuctl.esxi import software as esxi_software
from vgpuctl.esxi.facts import Fact
from vgpuctl.lazyclass import dataclass
from vgpuctl.records.netfacts import HostNetFacts
from vgpuctl.vsphere import host as vhost
from vgpuctl.vsphere.hostnet import read_net_state

if TYPE_CHECKING:
    from vgpuctl.vsphere.host import HostApiState
    from vgpuctl.vsphere.session import Session

T = TypeVar("T")

NVIDIA_MODULE = "nvidia"
GPU_TABLE_FIELDS = ("index", "pci.bus_id", "name")  # every GPU query begins with these: where a GPU's values land

_BUS = re.compile(r"(?:[0-9a-fA-F]{4,8}:)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")

ShellFact = Fact  # an ESXi shell command and its parser; lands under its name


def vsphere_bus_id(bus_id: str) -> str:
    """nvidia-smi's `00000000:3B:00.0` (or `3b:00.0`) -> vSphere's `0000:3b:00.0`."""
    text = bus_id.strip()
    m = _BUS.fullmatch(text)
    if m is None:
        return text.lower()
    domain = text.split(":")[0] if text.count(":") == 2 else "0"
    return f"{int(domain, 16):04x}:{m[1].lower()}:{m[2].lower()}.{m[3]}"


# ------------------------------------------------------------------------------------------ declarations


Decoder = Callable[[Any], Any]  # a fact's value from its JSON form
Row = Mapping[str, str | None]  # one GPU's values of the query: field -> value (None: nvidia-smi says [N/A])


@dataclass(frozen=True)
class GpuQuery(Generic[T]):
    """Fields of `nvidia-smi --query-gpu` a setting reads per GPU, and the parser of one GPU's row; the value lands
    per GPU under `name`. `decode` rebuilds a value from its JSON form (HostFacts.from_dict)."""

    name: str
    fields: tuple[str, ...]
    parse: Callable[[Row], T]
    decode: Callable[[Any], T] | None = None


@dataclass(frozen=True)
class HostApi:
    """What an ApiFact reads from: the session, the host and the one per-host read every gathering makes
    (vgpuctl.vsphere.host.read_host: boot time, graphics config, the kernel module system), and the host's merged
    entry (None where no entry names the host)."""

    session: Session
    moid: str
    state: HostApiState
    spec: object | None = None


@dataclass(frozen=True)
class ApiFact(Generic[T]):
    """A per-host vSphere call and what a setting keeps of its answer, under `name`; `what` names it in warnings
    ("the nvidia module options"; `plural` for its verb). `when_set`: read only for hosts whose entry sets a
    setting that reads it."""

    name: str
    what: str
    read: Callable[[HostApi], T]
    when_set: bool = False
    decode: Callable[[Any], T] | None = None
    plural: bool = False


Runner = Callable[[str], str]  # runs one command line on the host, returns stdout (raises SshError)


@dataclass(frozen=True)
class EntryShellFact(Generic[T]):
    """A shell command the host's entry decides: `command(spec)` (None: the entry asks for nothing), and `read`,
    which runs it through the runner and keeps what it answers, a failure of the command included (a depot that
    cannot be read is a fact about the depot, not a broken shell). Lands under `name`."""

    name: str
    command: Callable[[object], str | None]
    read: Callable[[Runner, str], T]
    decode: Callable[[Any], T] | None = None


# ------------------------------------------------------------------------------------------ the record


@dataclass
class GpuFacts:
    """A GPU of the shell's GPU table: where the per-GPU facts land."""

    pci_id: str  # vSphere form: 0000:3b:00.0
    index: int | None = None  # nvidia-smi index
    name: str = ""


@dataclass(frozen=True)
class Unread:
    """Something a host could not say, and why: the same cause on several hosts is one warning naming them."""

    what: str  # "the nvidia module options"
    cause: str  # "NoPermission: Host.Config.Settings missing", "the host has no kernel module system"
    plural: bool = True  # "are unknown" (else "is unknown")

    @property
    def unknown(self) -> str:
        """`what` and that it is unknown: "the nvidia module options are unknown"."""
        return f"{self.what} {'are' if self.plural else 'is'} unknown"


@dataclass
class HostFacts:
    """One host's facts: the shell's GPU table, each fact's value by its name (a GpuQuery's: PCI id -> value), and
    what could not be read."""

    host: str
    gpus: dict[str, GpuFacts] = field(default_factory=dict)  # pci id -> its row of the GPU table
    values: dict[str, Any] = field(default_factory=dict)  # fact name -> value (None: read, nothing there)
    shell: bool = False  # the shell facts were read
    boot_time: str | None = None
    warnings: list[str] = field(default_factory=list)  # calls the host could not answer
    unread: list[Unread] = field(default_factory=list)  # the same, typed (unread_warnings groups them)
    shell_error: str | None = None  # the ESXi shell was set up but could not be read (why)
    shell_deferred: bool = False  # a plan: the apply that starts the host's SSH service reads its shell

    def get(self, fact: ShellFact[T] | ApiFact[T] | EntryShellFact[T]) -> T | None:
        """The fact's value; None when it was not read."""
        return cast("T | None", self.values.get(fact.name))

    def has(self, fact: ShellFact[Any] | ApiFact[Any] | GpuQuery[Any] | EntryShellFact[Any]) -> bool:
        return fact.name in self.values

    def gpu(self, query: GpuQuery[T], pci: str) -> T | None:
        """One GPU's value of a GPU query; None when the shell was not read or the GPU is not in its table."""
        return cast("T | None", self.values.get(query.name, {}).get(pci.lower()))

    def pci_of(self, index: int) -> str | None:
        """The PCI id of nvidia-smi's GPU `index`."""
        return next((g.pci_id for g in self.gpus.values() if g.index == index), None)

    def unread_what(self, fact: ApiFact[Any]) -> str | None:
        """Why an ApiFact could not be read (None when it was, or was not asked for)."""
        return next((u.cause for u in self.unread if u.what == fact.what), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], decoders: Mapping[str, Decoder] | None = None) -> HostFacts:
        """From `to_dict`'s form; `decoders` (fact name -> decoder of its whole value: vgpuctl.settings.decoders())
        rebuild the typed values."""
        d = dict(data)
        d["gpus"] = {k: GpuFacts(**{"pci_id": k, **v}) for k, v in (d.get("gpus") or {}).items()}
        d["unread"] = [Unread(**u) for u in d.get("unread") or []]
        decode = decoders or {}
        d["values"] = {k: decode[k](v) if k in decode and v is not None else v
                       for k, v in (d.get("values") or {}).items()}
        return cls(**d)


def decoder(fact: ShellFact[Any] | ApiFact[Any] | GpuQuery[Any] | EntryShellFact[Any]) -> Callable[[Any], Any] | None:
    """How a fact's whole value comes back from JSON (a GpuQuery's: per GPU), None when it needs nothing."""
    if isinstance(fact, GpuQuery):
        one = fact.decode
        if one is None:
            return None
        return lambda value: {pci: one(v) if v is not None else None for pci, v in value.items()}
    if isinstance(fact, ApiFact | EntryShellFact):
        return fact.decode
    return SHELL_DECODERS.get(fact.name)


# ------------------------------------------------------------------------------------------ shared facts


@dataclass(frozen=True)
class PendingMode:
    """A GPU mode nvidia-smi reports as current and pending (in effect after the next reboot or reset)."""

    current: bool
    pending: bool

    @property
    def switching(self) -> bool:
        return self.current != self.pending


def pending_mode(current: str, pending: str) -> Callable[[Row], PendingMode | None]:
    """The parser of a current/pending pair of query fields (None: the GPU does not support the mode: [N/A])."""

    def parse(row: Row) -> PendingMode | None:
        now = parsers.enabled_state(row.get(current) or "N/A")
        then = parsers.enabled_state(row.get(pending) or "N/A")
        if now is None:
            return None
        return PendingMode(now, now if then is None else then)

    return parse


def _pending_mode(data: Any) -> PendingMode:
    return PendingMode(**data)


# MIG mode per GPU (None: not MIG-capable): the GPU modes setting plans from it, `status` shows it
MIG_MODE: GpuQuery[PendingMode | None] = GpuQuery(
    "mig", ("mig.mode.current", "mig.mode.pending"), pending_mode("mig.mode.current", "mig.mode.pending"),
    _pending_mode,
)


def _links(data: Any) -> list[parsers.GpuNvLinks]:
    return [parsers.GpuNvLinks(g["index"], g["name"], g.get("uuid"), tuple(parsers.NvLink(**link) for link in
                                                                           g.get("links") or ()))
            for g in data]


# NVLink links per GPU (`nvidia-smi nvlink -s`, by nvidia-smi index): the nvlink setting verifies them, status shows
NVLINK_LINKS = esxi_facts.NVLINK_STATUS
# which GPUs are NVLink-connected now (`nvidia-smi topo -m`): placement's NVLink sets where vCenter lists none
TOPOLOGY = esxi_facts.TOPOLOGY
# the parameters the nvidia module declares: a setting that writes an undeclared one is refused at plan time
MODULE_PARAMETERS = esxi_facts.MODULE_PARAMETERS
# what the driver runs on each GPU at once (`nvidia-smi -q`): placement's rule for types of one size on one GPU
VGPU_CAPABILITIES = esxi_facts.VGPU_CAPABILITIES
SHARED_SHELL_FACTS = (NVLINK_LINKS, TOPOLOGY, MODULE_PARAMETERS, VGPU_CAPABILITIES)
SHELL_DECODERS: dict[str, Callable[[Any], Any]] = {
    NVLINK_LINKS.name: _links, TOPOLOGY.name: lambda pairs: [tuple(p) for p in pairs],
    VGPU_CAPABILITIES.name: lambda caps: tuple(parsers.VgpuCapability(**c) for c in caps),
}


# The vGPU Manager each GPU's driver is (`nvidia-smi --query-gpu=driver_version`: on an ESXi host the version of the
# vGPU Manager running now; None without one): the vgpu_manager setting, its window and `status` read it
RUNNING_MANAGER: GpuQuery[str | None] = GpuQuery(
    "manager", ("driver_version",), lambda row: row.get("driver_version") or None,
)
# The guest driver each running vGPU VM reports (`nvidia-smi vgpu -q` on its host; NVML's
# nvmlVgpuInstanceGetVmDriverVersion): VM name -> version, None where the guest reports none
GUEST_DRIVERS: ShellFact[dict[str, str | None]] = ShellFact(
    "guest_drivers", esxi_software.VGPU_QUERY, esxi_software.guest_drivers,
)


def running_manager(facts: HostFacts | None) -> str | None:
    """The vGPU Manager version the host runs, from its GPUs' driver (None: not read, or no GPU reports one)."""
    if facts is None:
        return None
    versions = sorted({v for v in (facts.values.get(RUNNING_MANAGER.name) or {}).values() if v})
    return versions[0] if versions else None


def guest_drivers(facts: HostFacts | None) -> dict[str, str | None]:
    """VM name -> the guest driver it reports on this host (empty: not read)."""
    return dict(facts.get(GUEST_DRIVERS) or {}) if facts is not None else {}


@dataclass(frozen=True)
class ModuleOptionStrings:
    """The nvidia module's option strings: `configured` for the next boot, `effective` of the loaded module (None:
    the module is not loaded)."""

    configured: str
    effective: str | None


def _read_module_options(api: HostApi) -> ModuleOptionStrings:
    kms = api.state.kernel_module_system
    if kms is None:
        raise NotFound("the host has no kernel module system")
    return ModuleOptionStrings(
        vhost.configured_module_options(api.session, api.moid, NVIDIA_MODULE, kms),
        vhost.effective_module_options(api.session, api.moid, NVIDIA_MODULE, kms),
    )


def _read_network(api: HostApi) -> HostNetFacts:
    return read_net_state(api.session, api.moid)


MODULE_OPTIONS: ApiFact[ModuleOptionStrings] = ApiFact(
    "module_options", "the nvidia module options", _read_module_options,
    decode=lambda d: ModuleOptionStrings(**d), plural=True,
)
# the host's NICs, VMkernel adapters, PVRDMA option and firewall rulesets (the sriov and pvrdma settings)
NETWORK: ApiFact[HostNetFacts] = ApiFact("network", "the network state", _read_network, when_set=True,
                                         decode=HostNetFacts.from_dict)
SHARED_API_FACTS = (MODULE_OPTIONS, NETWORK)


# ------------------------------------------------------------------------------------------ views


def nvlink_links(facts: HostFacts) -> dict[str, parsers.GpuNvLinks]:
    """PCI id -> the GPU's NVLink links, as `nvidia-smi nvlink -s` lists them."""
    out = {}
    for links in facts.get(NVLINK_LINKS) or []:
        pci = facts.pci_of(links.index)
        if pci is not None:
            out[pci] = links
    return out


def nvlink_peers(facts: HostFacts) -> dict[str, list[str]]:
    """PCI id -> the GPUs connected to it over NVLink now (`nvidia-smi topo -m` NV#); every GPU of the table has
    an entry once the topology was read."""
    pairs = facts.get(TOPOLOGY)
    if pairs is None:
        return {}
    out: dict[str, list[str]] = {pci: [] for pci in facts.gpus}
    for a, b, _links in pairs:
        pa, pb = facts.pci_of(a), facts.pci_of(b)
        if pa is not None and pb is not None:
            out.setdefault(pa, []).append(pb)
    return {pci: sorted(set(peers)) for pci, peers in out.items()}


def nvlink_sets(facts: HostFacts) -> list[list[str]]:
    """Groups of GPUs connected over NVLink right now (each at least 2 GPUs), by PCI id."""
    peers = nvlink_peers(facts)
    seen: set[str] = set()
    out = []
    for pci in sorted(peers):
        if pci in seen or not peers[pci]:
            continue
        group, todo = {pci}, [pci]
        while todo:
            for peer in peers.get(todo.pop(), []):
                if peer not in group and peer in peers:
                    group.add(peer)
                    todo.append(peer)
        seen |= group
        out.append(sorted(group))
    return out


def vgpu_capabilities(facts: HostFacts) -> dict[str, parsers.VgpuCapability]:
    """What the driver says it runs on each GPU at once, by vSphere PCI id (empty: the shell was not read)."""
    return {vsphere_bus_id(c.bus_id): c for c in facts.get(VGPU_CAPABILITIES) or ()}


def declared_params(facts: HostFacts) -> list[str] | None:
    """The parameters the host's nvidia module declares (None: not read)."""
    return facts.get(MODULE_PARAMETERS)
