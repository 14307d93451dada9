"""Reading the hosts' facts for a run: the ESXi shell of each host (known_hosts-verified, its address from the
inventory or VGPUCTL_ESXI_HOSTS), the facts the settings declare gathered over it in parallel
(vgpuctl.settings.gather), NVLink sets from the shell where vCenter lists none, and one warning per thing and
cause the hosts could not say. `HostFacts` is plain data, so vgpuctl.hosts.plan stays pure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from vgpuctl import filelimits
from vgpuctl.errors import SshError, UsageError, VgpuctlError
from vgpuctl.esxi.ssh import ENV_HOST_MAP, EsxiShell, SshSettings, SshTarget
from vgpuctl.settings.facts import HostFacts, Unread, nvlink_sets, vgpu_capabilities
from vgpuctl.settings.gather import Runner, cause, gather_host_facts

if TYPE_CHECKING:
    from vgpuctl.model import Observed
    from vgpuctl.vsphere.session import Session

log = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------------ the facts


def shell_runner(shell: Any) -> Runner:
    """A Runner over a vgpuctl.esxi.ssh.EsxiShell."""
    return lambda command: shell.run(command).stdout


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


def adopt_vgpu_capabilities(observed: Observed, facts: HostFacts) -> None:
    """Record on the observed host's GPUs whether its driver runs time-sliced vGPUs of different types on one GPU
    at once, as the shell says (the driver's word wins over the vSphere version where it was read)."""
    caps = vgpu_capabilities(facts)
    host = observed.hosts.get(facts.host)
    for gpu in host.gpus if host is not None else []:
        cap = caps.get(gpu.pci_id.lower())
        if cap is not None and cap.types is not None:
            gpu.types_may_mix = cap.types


def api_facts(session: Session, host_moid: str, host: str, spec: object | None = None) -> HostFacts:
    """The host's facts without the shell, for reports: a host that cannot answer at all gets empty facts and a
    reason (the report shows what the bulk observe listed) instead of failing the whole report."""
    try:
        return gather_host_facts(session, host_moid, host, None, spec)
    except VgpuctlError as err:
        message = f"host {host}: its GPU facts cannot be read ({err}); showing what vCenter lists"
        return HostFacts(host, warnings=[message], unread=[Unread("the GPU facts", cause(err))])


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
        out.append(f"{u.unknown} on {count} {shown}: {u.cause}")
    return out


# ------------------------------------------------------------------------------------------ SSH settings

def load_host_map(value: str) -> dict[str, Any]:
    """SshTargets from VGPUCTL_ESXI_HOSTS: the JSON object itself (it starts with `{`) or the path of a file
    holding it, read within vgpuctl's file limits (a FIFO or a device is refused at once); a missing, oversized,
    too deeply nested or malformed file or object is one clear UsageError."""
    from pathlib import Path

    inline = value.lstrip().startswith("{")
    where = f"{ENV_HOST_MAP} (the JSON written out)" if inline else f"{ENV_HOST_MAP}={value}"
    try:
        data = filelimits.parse_json(value if inline else filelimits.read_regular_text(Path(value).expanduser()))
    except (filelimits.NotAFile, filelimits.FileTooLarge, filelimits.TooDeep) as err:
        raise UsageError(f"{where}: {err}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{where}: not JSON: not UTF-8 text") from None
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
        moid, spec = hosts[name]
        if not shell:
            return gather_host_facts(session, moid, name, None, spec)
        try:
            with open_shell(name, spec, trust_on_first_use=trust_on_first_use, on_new_host_key=on_new_host_key,
                            timeout_s=esxi_timeout(session)) as sh:  # fmt: skip
                return gather_host_facts(session, moid, name, shell_runner(sh), spec)
        except SshError as err:  # this host's shell only: its API facts stand, what needs the shell is refused
            if not degrade:
                raise
            facts = gather_host_facts(session, moid, name, None, spec)
            facts.shell_error = str(err.reason)
            facts.unread.append(Unread("the ESXi shell facts (MIG pending, NVLink links)", str(err.reason)))
            return facts

    names = sorted(hosts)
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(names))), thread_name_prefix="vgpuctl-facts") as pool:
        return dict(zip(names, pool.map(one, names), strict=True))
