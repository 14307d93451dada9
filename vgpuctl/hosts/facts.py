"""Host GPU facts the bulk observe does not read, from the ESXi shell and per-host vSphere calls.

Shell (vgpuctl.esxi.facts): MIG mode current and pending per GPU, NVLink links, topology, the nvidia module's
declared parameters. API (vgpuctl.vsphere.host): the module options configured and in effect, and the per-GPU
time-sliced vGPU mode. `HostFacts` is plain data, so vgpuctl.hosts.plan stays pure.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from vgpuctl.errors import SshError, VgpuctlError
from vgpuctl.hosts.netfacts import HostNetFacts

if TYPE_CHECKING:
    from vgpuctl.model import Observed
    from vgpuctl.vsphere.session import Session

log = logging.getLogger(__name__)

NVIDIA_MODULE = "nvidia"

_BUS = re.compile(r"^(?:[0-9a-fA-F]{4,8}:)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def vsphere_bus_id(bus_id: str) -> str:
    """nvidia-smi's `00000000:3B:00.0` (or `3b:00.0`) -> vSphere's `0000:3b:00.0`."""
    text = bus_id.strip()
    m = _BUS.match(text)
    if m is None:
        return text.lower()
    domain = text.split(":")[0] if text.count(":") == 2 else "0"
    return f"{int(domain, 16):04x}:{m[1].lower()}:{m[2].lower()}.{m[3]}"


@dataclass
class GpuFacts:
    pci_id: str  # vSphere form: 0000:3b:00.0
    index: int | None = None  # nvidia-smi index
    name: str = ""
    mig_current: bool | None = None  # None: the GPU is not MIG-capable (nvidia-smi says N/A)
    mig_pending: bool | None = None
    nvlink_links: int = 0  # NVLinks of the GPU
    nvlink_active: int = 0  # of which are up
    nvlink_peers: list[str] = field(default_factory=list)  # GPUs connected over NVLink now (topo NV#)
    graphics_type: str | None = None  # graphicsConfig.deviceType[].graphicsType (None: not read)
    vgpu_mode: str | None = None  # graphicsConfig.deviceType[].vgpuMode: the time-sliced mode (sameSize|mixedSize)

    @property
    def mig_capable(self) -> bool:
        return self.mig_current is not None


@dataclass(frozen=True)
class Unread:
    """Something a host could not say, and why: the same cause on several hosts is one warning naming them."""

    what: str  # "the nvidia module options"
    cause: str  # "NoPermission: Host.Config.Settings missing", "the host has no kernel module system"


@dataclass
class HostFacts:
    host: str
    gpus: dict[str, GpuFacts] = field(default_factory=dict)  # pci id -> facts
    options_configured: str | None = None  # nvidia module options for the next boot (None: not read)
    options_effective: str | None = None  # options of the loaded module
    shell: bool = False  # the shell facts (MIG, NVLink, topology) were read
    boot_time: str | None = None
    declared_params: list[str] | None = None  # parameters the nvidia module declares (None: not read)
    warnings: list[str] = field(default_factory=list)  # calls the host could not answer
    unread: list[Unread] = field(default_factory=list)  # the same, typed (unread_warnings groups them)
    shell_error: str | None = None  # the ESXi shell was set up but could not be read (why)
    shell_deferred: bool = False  # a plan: the apply that starts the host's SSH service reads its shell
    network: HostNetFacts | None = None  # NICs, VMkernel adapters, PVRDMA, firewall (None: not read)
    network_error: str | None = None  # why `network` could not be read

    def gpu(self, pci_id: str) -> GpuFacts:
        return self.gpus.setdefault(pci_id, GpuFacts(pci_id))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostFacts:
        d = dict(data)
        d["gpus"] = {k: GpuFacts(**{"pci_id": k, **v}) for k, v in (d.get("gpus") or {}).items()}
        d["unread"] = [Unread(**u) for u in d.get("unread") or []]
        if d.get("network") is not None:
            d["network"] = HostNetFacts.from_dict(d["network"])
        return cls(**d)


# ------------------------------------------------------------------------------------------ shell side

Runner = Callable[[str], str]  # runs one command line on the host, returns stdout (raises SshError)


def shell_runner(shell: Any) -> Runner:
    """A Runner over a vgpuctl.esxi.ssh.EsxiShell."""
    return lambda command: shell.run(command).stdout


def gather_shell_facts(host: str, run: Runner, facts: HostFacts | None = None) -> HostFacts:
    """MIG current/pending per GPU, NVLink links and topology from nvidia-smi on the host."""
    from vgpuctl.esxi.facts import GPU_MODES, MODULE_PARAMETERS, NVLINK_STATUS, TOPOLOGY

    facts = facts or HostFacts(host)
    by_index: dict[int, GpuFacts] = {}
    for row in GPU_MODES.gather(run):
        g = facts.gpu(vsphere_bus_id(row.bus_id))
        g.index, g.name = row.index, row.name or ""
        g.mig_current, g.mig_pending = row.mig_current, row.mig_pending
        by_index[row.index] = g
    for links in NVLINK_STATUS.gather(run):
        linked = by_index.get(links.index)
        if linked is not None:
            linked.nvlink_links, linked.nvlink_active = len(links.links), links.active_links
    if len(by_index) > 1:
        topo = TOPOLOGY.gather(run)
        for a, g in by_index.items():
            g.nvlink_peers = sorted(by_index[b].pci_id for b in topo.gpus if b in by_index and topo.nvlinks(a, b))
    listed = MODULE_PARAMETERS.gather(run)
    facts.declared_params = sorted(p.name for p in listed)
    facts.shell = True
    return facts


def nvlink_sets(facts: HostFacts) -> list[list[str]]:
    """Groups of GPUs connected over NVLink right now (each at least 2 GPUs), by PCI id."""
    seen: set[str] = set()
    out = []
    for pci in sorted(facts.gpus):
        if pci in seen or not facts.gpus[pci].nvlink_peers:
            continue
        group, todo = {pci}, [pci]
        while todo:
            for peer in facts.gpus[todo.pop()].nvlink_peers:
                if peer not in group and peer in facts.gpus:
                    group.add(peer)
                    todo.append(peer)
        seen |= group
        out.append(sorted(group))
    return out


def adopt_nvlink_sets(observed: Observed, facts: HostFacts) -> bool:
    """Record the NVLink sets the ESXi shell shows (`nvlink_sets`) on the observed host where vCenter reported
    no NVLink device groups (a real vCenter names no PCI ids in vendorDeviceGroupInfo); returns whether it did.
    The shell tells which GPUs are linked, not the groups: their sizes and profile then come from the board's
    catalogue, and placement's reasons say so."""
    from vgpuctl.vsphere.observe import set_nvlink_sets

    host = facts.host
    gpus = observed.hosts[host].gpus if facts.shell and host in observed.hosts else []
    known = {g.pci_id.lower() for g in gpus}
    linked = [s for s in nvlink_sets(facts) if len({p.lower() for p in s} & known) >= 2]
    if not linked or any(g.nvlink_set is not None for g in gpus):
        return False
    set_nvlink_sets(observed, host, [[p for p in s if p.lower() in known] for s in linked])
    observed.hosts[host].nvlink_from_shell = True
    return True


# ------------------------------------------------------------------------------------------ both sides


def gather_host_facts(
    session: Session, host_moid: str, host: str, run: Runner | None, *, network: bool = False
) -> HostFacts:
    """API facts (module options, graphicsConfig.deviceType, boot time), the network facts when `network` (a
    setting that reads them is set for the host: vgpuctl.hosts.settings.wants_network), then shell facts when
    `run` is given."""
    from vgpuctl.vsphere import host as vhost

    facts = HostFacts(host)
    api = vhost.read_host(session, host_moid)
    facts.boot_time = api.boot_time
    for dev in api.device_types:
        g = facts.gpu(dev.pci_id)
        g.graphics_type, g.vgpu_mode = dev.graphics_type, dev.vgpu_mode
    kms = api.kernel_module_system
    if kms is None:
        _unknown(facts, "the host has no kernel module system", "the host has no kernel module system")
    else:
        try:
            facts.options_configured = vhost.configured_module_options(session, host_moid, NVIDIA_MODULE, kms)
            facts.options_effective = vhost.effective_module_options(session, host_moid, NVIDIA_MODULE, kms)
        except VgpuctlError as err:  # not responding, not implemented, no permission: this host only
            _unknown(facts, str(err), _cause(err))
    if network:
        _network_facts(session, host_moid, facts)
    if run is not None:
        gather_shell_facts(host, run, facts)
    return facts


def _network_facts(session: Session, host_moid: str, facts: HostFacts) -> None:
    from vgpuctl.vsphere.hostnet import read_net_state

    try:
        facts.network = read_net_state(session, host_moid)
    except VgpuctlError as err:  # this host only: the settings that need them say so in the plan
        facts.network_error = str(err)
        facts.warnings.append(f"host {facts.host}: its network state cannot be read ({err})")


def api_facts(session: Session, host_moid: str, host: str, *, network: bool = False) -> HostFacts:
    """gather_host_facts without the shell, for reports: a host that cannot answer at all gets empty facts and a
    reason (the report shows what the bulk observe listed) instead of failing the whole report."""
    try:
        return gather_host_facts(session, host_moid, host, None, network=network)
    except VgpuctlError as err:
        message = f"host {host}: its GPU facts cannot be read ({err}); showing what vCenter lists"
        return HostFacts(host, warnings=[message], unread=[Unread("the GPU facts", _cause(err))])


def _cause(err: VgpuctlError) -> str:
    from vgpuctl.errors import VsphereFault
    from vgpuctl.vsphere.faults import cause

    if isinstance(err, VsphereFault):
        return cause(err)
    return str(getattr(err, "reason", None) or err)


def _unknown(facts: HostFacts, why: str, cause: str) -> None:
    facts.options_configured = facts.options_effective = None
    facts.warnings.append(f"host {facts.host}: the nvidia module options are unknown ({why})")
    facts.unread.append(Unread("the nvidia module options", cause))
    log.debug("host %s: the nvidia module options are unknown (%s)", facts.host, why)


def unread_warnings(facts: Iterable[HostFacts], limit: int = 8) -> list[str]:
    """One line per thing and cause that hosts could not say, naming the hosts (not one line per host)."""
    by_cause: dict[Unread, list[str]] = {}
    for f in facts:
        for u in f.unread:
            by_cause.setdefault(u, []).append(f.host)
    out = []
    for u, hosts in by_cause.items():
        names = sorted(set(hosts))
        shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
        count = f"{len(names)} hosts" if len(names) > 1 else "host"
        out.append(f"{u.what} are unknown on {count} {shown}: {u.cause}")
    return out


# ------------------------------------------------------------------------------------------ SSH settings

# A JSON object (host name -> {"host": address, "port": n}) written out, or the path of a file holding it.
ENV_HOST_MAP = "VGPUCTL_ESXI_HOSTS"


def load_host_map(value: str) -> dict[str, Any]:
    """SshTargets from VGPUCTL_ESXI_HOSTS: the JSON object itself (it starts with `{`) or the path of a file
    holding it; a missing or malformed file or object is one clear UsageError."""
    import json
    from pathlib import Path

    from vgpuctl.errors import UsageError
    from vgpuctl.esxi.ssh import SshTarget

    inline = value.lstrip().startswith("{")
    where = f"{ENV_HOST_MAP} (the JSON written out)" if inline else f"{ENV_HOST_MAP}={value}"
    try:
        data = json.loads(value if inline else Path(value).expanduser().read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"{where}: cannot read the ESXi host map: {err.strerror or err}") from None
    except ValueError as err:
        raise UsageError(f"{where}: not JSON: {err}") from None
    if not isinstance(data, dict):
        raise UsageError(f'{where}: expected an object of host name -> {{"host": address, "port": n}}')
    targets = {}
    for name, entry in data.items():
        try:
            targets[name] = SshTarget(host=name, address=str(entry["host"]), port=int(entry["port"]))
        except (KeyError, TypeError, ValueError):
            raise UsageError(f'{where}: entry {name!r} needs "host" (address) and "port" (number)') from None
    return targets


def ssh_target(host: str, spec: Any = None, env: dict[str, str] | None = None) -> Any:
    """Where the host's SSH server listens: its entry in the VGPUCTL_ESXI_HOSTS map when given, else the host
    name itself on the inventory's ssh.port."""
    import os

    from vgpuctl.esxi.ssh import SshTarget

    env = dict(os.environ) if env is None else env
    path = env.get(ENV_HOST_MAP)
    if path:
        targets = load_host_map(path)
        if host in targets:
            return targets[host]
    port = spec.ssh.port if spec is not None else 22
    return SshTarget(host=host, port=port)


def ssh_settings(spec: Any = None, *, trust_on_first_use: bool = False, env: dict[str, str] | None = None) -> Any:
    """SshSettings from a HostSpec's ssh section, then VGPUCTL_ESXI_* variables. `ssh.password_env` names the
    variable that holds the password."""
    import dataclasses
    import os

    from vgpuctl.errors import UsageError
    from vgpuctl.esxi.ssh import SshSettings

    env = dict(os.environ) if env is None else env
    ssh = spec.ssh if spec is not None else None
    settings = SshSettings.from_env(
        env,
        user=ssh.user if ssh is not None and ssh.user != "root" else None,
        known_hosts=ssh.known_hosts if ssh is not None else None,
        key_file=ssh.key_file if ssh is not None else None,
        trust_on_first_use=trust_on_first_use,
    )
    if ssh is not None and ssh.password_env:
        if not env.get(ssh.password_env):
            raise UsageError(f"ssh.password_env names {ssh.password_env}, which is not set")
        settings = dataclasses.replace(settings, password=env[ssh.password_env])
    return settings


def open_shell(
    host: str,
    spec: Any = None,
    *,
    trust_on_first_use: bool = False,
    on_new_host_key: Callable[[str, str], None] | None = None,
    timeout_s: float | None = None,
) -> Any:
    """An EsxiShell for the host (known_hosts verified); it connects on `with` or on its first command. Each
    command, and the connection, is bounded by `timeout_s` (esxi_timeout(session)), else the shell's default."""
    from vgpuctl.esxi.ssh import EsxiShell

    return EsxiShell(
        ssh_target(host, spec),
        ssh_settings(spec, trust_on_first_use=trust_on_first_use).limited_to(timeout_s),
        on_new_host_key=on_new_host_key,
    )


def esxi_timeout(session: Session) -> float | None:
    """The run's bound on each ESXi shell command (ConnectionSettings.esxi_timeout_s), None when it sets none."""
    return getattr(getattr(session, "settings", None), "esxi_timeout_s", None)


def gather_facts(
    session: Session,
    hosts: dict[str, tuple[str, Any]],
    *,
    shell: bool = True,
    trust_on_first_use: bool = False,
    on_new_host_key: Callable[[str, str], None] | None = None,
    parallel: int = 8,
    degrade: bool = True,
) -> dict[str, HostFacts]:
    """Facts of several hosts in parallel: host name -> (moid, HostSpec or None); with `shell`, each host's ESXi
    shell facts too. A host whose shell fails (refused, unknown key, wrong credentials) keeps its API facts with
    `shell_error` set, so only what needs its shell is refused; with `degrade` False the SshError propagates."""
    from concurrent.futures import ThreadPoolExecutor

    def one(name: str) -> HostFacts:
        from vgpuctl.hosts.settings import wants_network

        moid, spec = hosts[name]
        network = wants_network(spec)
        if not shell:
            return gather_host_facts(session, moid, name, None, network=network)
        try:
            with open_shell(name, spec, trust_on_first_use=trust_on_first_use, on_new_host_key=on_new_host_key,
                            timeout_s=esxi_timeout(session)) as sh:  # fmt: skip
                return gather_host_facts(session, moid, name, shell_runner(sh), network=network)
        except SshError as err:  # this host's shell only: its API facts stand, what needs the shell is refused
            if not degrade:
                raise
            facts = gather_host_facts(session, moid, name, None, network=network)
            facts.shell_error = str(err.reason)
            facts.unread.append(Unread("the ESXi shell facts (MIG pending, NVLink links)", str(err.reason)))
            return facts

    names = sorted(hosts)
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(names))), thread_name_prefix="vgpuctl-facts") as pool:
        return dict(zip(names, pool.map(one, names), strict=True))
