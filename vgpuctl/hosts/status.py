"""What `host show`, `status` and `profiles` read of the hosts beyond the bulk read: every connected host's facts
(the vSphere API and, when SSH is set up, the ESXi shell), and the MIG instance totals the hosts report. Their
reports are built in vgpuctl.reports (host, status, profiles).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import ConnectionState, GpuVgpuMode
from vgpuctl.errors import VgpuctlError
from vgpuctl.esxi.facts import MIG_PROFILES
from vgpuctl.esxi.ssh import ENV_HOST_MAP, ENV_KEY_FILE, ENV_PASSWORD
from vgpuctl.hosts.facts import api_facts, esxi_timeout, open_shell, shell_runner
from vgpuctl.inventory import HostSpec
from vgpuctl.model import Observed
from vgpuctl.settings.facts import HostFacts
from vgpuctl.settings.gather import gather_host_facts

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

def collect_host_facts(
    session: Session, observed: Observed, specs: dict[str, HostSpec] | None = None, *, shell: bool = True
) -> dict[str, HostFacts]:
    """The facts of every connected host for `vgpuctl status`: API facts always, shell facts (MIG pending, NVLink
    links) when `shell`; a host whose SSH fails keeps its API facts with `shell_error` saying why, instead of
    failing the command. What a host could not say is in its facts' `unread` (hosts.facts.unread_warnings: one
    warning per cause). Never fails for what one or all hosts could not say."""
    specs = specs or {}

    def one(name: str) -> HostFacts:
        host = observed.hosts[name]
        spec = specs.get(name)
        if not shell:
            return api_facts(session, host.moid, name, spec)
        try:
            with open_shell(name, specs.get(name), timeout_s=esxi_timeout(session)) as sh:
                return gather_host_facts(session, host.moid, name, shell_runner(sh), spec)
        except VgpuctlError as err:
            facts = api_facts(session, host.moid, name, spec)
            facts.shell_error = str(err)
            return facts

    names = sorted(n for n, h in observed.hosts.items() if h.connection_state == ConnectionState.CONNECTED)
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(names)), thread_name_prefix="vgpuctl-status") as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


def mig_instance_totals(run: Any) -> dict[str, int]:
    """GPU instance profile name -> total instances per GPU, as `nvidia-smi mig -lgip` reports them on the host
    (the smallest over its MIG GPUs); empty on a host without MIG GPUs."""
    totals: dict[str, int] = {}
    for row in MIG_PROFILES.gather(run):
        totals[row.name] = min(row.total, totals.get(row.name, row.total))
    return totals


def read_reported_maxima(
    observed: Observed, names: list[str], specs: dict[str, HostSpec], timeout_s: float | None = None
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """For `profiles`: each named host with a MIG GPU reports its GPU instance totals over SSH (host -> GPU instance
    profile -> total, reports.profiles.with_reported_maxima records them as the maxima of its MIG-backed types).
    Also returns one warning per host whose shell could not be read (its rows keep the catalogue's maxima)."""
    totals: dict[str, dict[str, int]] = {}
    warnings = []
    for name in names:
        host = observed.hosts[name]
        has_mig = any(g.vgpu_mode == GpuVgpuMode.MIG for g in host.gpus)
        if host.connection_state != ConnectionState.CONNECTED or not has_mig:
            continue
        try:
            with open_shell(name, specs.get(name), timeout_s=timeout_s) as sh:
                totals[name] = mig_instance_totals(shell_runner(sh))
        except VgpuctlError as err:
            warnings.append(f"host {name}: MIG instance totals not read ({err}); showing the catalogue's maxima")
    return totals, warnings


def shell_configured(specs: Mapping[str, HostSpec | None], env: dict[str, str] | None = None) -> bool:
    """Whether SSH to the hosts is set up: VGPUCTL_ESXI_* variables (password, key file, host map) or an
    inventory hosts entry with ssh credentials. `status` reads shell facts only then."""
    env = dict(os.environ) if env is None else env
    if any(env.get(name) for name in (ENV_PASSWORD, ENV_KEY_FILE, ENV_HOST_MAP)):
        return True
    return any(s is not None and (s.ssh.key_file or s.ssh.password_env) for s in specs.values())
