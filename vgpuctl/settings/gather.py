"""Gathering one host's facts, built from what the settings declare (vgpuctl.settings): the per-host vSphere read
and each ApiFact, then, with the ESXi shell, the one `nvidia-smi --query-gpu` command of every GpuQuery's fields and
each ShellFact's command. Each value lands in HostFacts under its fact's name.

What a host cannot answer through vSphere is recorded (HostFacts.unread, a warning), never a failure of the run: the
settings that need it say so in the plan. The shell's commands fail as the shell does (SshError,
OutputFormatError): the caller decides whether the host's shell facts are then missing (vgpuctl.hosts.facts).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from vgpuctl.errors import VgpuctlError, VsphereFault
from vgpuctl.esxi import commands, parsers
from vgpuctl.settings import api_facts, entry_shell_facts, gpu_queries, gpu_query_fields, shell_facts
from vgpuctl.settings.facts import TOPOLOGY, ApiFact, GpuFacts, HostApi, HostFacts, Runner, Unread, vsphere_bus_id
from vgpuctl.vsphere import host as vhost
from vgpuctl.vsphere.faults import cause as fault_cause

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

log = logging.getLogger(__name__)



def gather_host_facts(session: Session, moid: str, host: str, run: Runner | None, spec: object | None = None
                      ) -> HostFacts:
    """The host's facts: the per-host vSphere read (boot time), each ApiFact the entry needs, then the shell's when
    `run` is given."""
    facts = HostFacts(host)
    state = vhost.read_host(session, moid)
    facts.boot_time = state.boot_time
    api = HostApi(session, moid, state, spec)
    for fact in api_facts(spec):
        try:
            facts.values[fact.name] = fact.read(api)
        except VgpuctlError as err:  # not responding, not implemented, no permission: this host only
            unknown(facts, fact, err)
    if run is not None:
        gather_shell_facts(facts, run, spec)
    return facts


def gather_shell_facts(facts: HostFacts, run: Runner, spec: object | None = None) -> HostFacts:
    """The GPU table and every GpuQuery from one `nvidia-smi --query-gpu`, then each shell fact (the topology only
    where there are GPUs to connect), then the commands the host's entry decides."""
    fields = gpu_query_fields()
    rows = parsers.parse_query_csv(run(commands.query_gpu(fields, header=False, units=False)), fields)
    queries = gpu_queries()
    for query in queries:
        facts.values[query.name] = {}
    for row in rows:
        if row.get("index") is None or row.get("pci.bus_id") is None:
            raise parsers.OutputFormatError(f"nvidia-smi --query-gpu: index and pci.bus_id are required, got {row}")
        pci = vsphere_bus_id(row["pci.bus_id"] or "")
        facts.gpus[pci] = GpuFacts(pci, int(row["index"] or 0), row.get("name") or "")
        for query in queries:
            facts.values[query.name][pci] = query.parse(row)
    for fact in shell_facts():
        if fact is TOPOLOGY and len(facts.gpus) < 2:
            facts.values[fact.name] = []
            continue
        facts.values[fact.name] = fact.gather(run)
    for entry_fact in entry_shell_facts(spec):
        command = entry_fact.command(spec)
        if command is not None:
            facts.values[entry_fact.name] = entry_fact.read(run, command)
    facts.shell = True
    return facts


def unknown(facts: HostFacts, fact: ApiFact[Any], err: VgpuctlError) -> None:
    """Record that the host could not say what `fact` reads, and why."""
    unread = Unread(fact.what, cause(err), fact.plural)
    facts.warnings.append(f"host {facts.host}: {unread.unknown} ({err})")
    facts.unread.append(unread)
    log.debug("host %s: %s (%s)", facts.host, unread.unknown, err)


def cause(err: VgpuctlError) -> str:
    """The cause of a failed read as warnings name it: a vCenter fault's type and message, else the reason."""
    if isinstance(err, VsphereFault):
        return fault_cause(err)
    return str(getattr(err, "reason", None) or err)
