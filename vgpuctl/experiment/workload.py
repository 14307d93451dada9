"""Run one repetition of a workload in the guests: playbooks/experiment.yml through ansible-runner.

The guest runner's pieces are reused (the rendered Ansible inventory, ansible.cfg, the environment without
secrets, artifacts under the state folder); only the playbook and its variables differ. Each participating VM
reports its output, exit status and GPU facts in the event of the task "Report the result to vgpuctl".
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgpuctl.guest import runner as gr
from vgpuctl.guest import targets as tg
from vgpuctl.lazyclass import dataclass

if TYPE_CHECKING:
    from vgpuctl.experiment.schema import WorkloadSpec
    from vgpuctl.inventory import Inventory

PLAYBOOK = "experiment.yml"
RESULT_TASK = "Report the result to vgpuctl"
RESULT_VAR = "experiment_result"


@dataclass
class GuestRun:
    """What the guests reported for one repetition."""

    outputs: dict[str, str] = field(default_factory=dict)  # VM -> output (stdout, then stderr)
    rcs: dict[str, int | None] = field(default_factory=dict)  # VM -> exit status (VMs that ran the workload)
    facts: dict[str, dict[str, str]] = field(default_factory=dict)  # VM -> {topo, nvlink, gpus}
    errors: list[str] = field(default_factory=list)  # "VM: message" for VMs that did not report
    artifacts: str | None = None


def extravars(workload: WorkloadSpec, vms: list[str], group_vars: dict[str, Any]) -> dict[str, Any]:
    """The playbook's variables: the workload, the VMs, and experiment_* settings from the guest group vars."""
    out = {k: v for k, v in group_vars.items() if k.startswith("experiment_")}
    out["experiment_workload"] = workload.model_dump()
    out["experiment_vms"] = list(vms)
    return out


def collect(events: list[dict[str, Any]], vms: list[str], tracker: gr.HostTracker) -> GuestRun:
    """Fold the run's events into a GuestRun (pure: tested from recorded events)."""
    run = GuestRun()
    for event in events:
        data = event.get("event_data") or {}
        if event.get("event") != "runner_on_ok" or data.get("task") != RESULT_TASK:
            continue
        host = data.get("host")
        result = (data.get("res") or {}).get(RESULT_VAR)
        if not host or not isinstance(result, dict):
            continue
        run.facts[host] = {k: str(result.get(k) or "") for k in ("topo", "nvlink", "gpus")}
        if _truthy(result.get("ran")):
            run.outputs[host] = str(result.get("output") or result.get("message") or "")
            rc = result.get("rc")
            run.rcs[host] = int(rc) if isinstance(rc, int) or (isinstance(rc, str) and rc.lstrip("-").isdigit()) \
                else None
    for vm in vms:
        if vm not in run.facts:
            outcome = tracker.outcome(vm, "")
            run.errors.append(f"{vm}: {outcome.message or outcome.status}")
    return run


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("true", "yes", "1"))


def run_guests(
    inv: Inventory,
    addresses: dict[str, str | None],
    vms: list[str],
    workload: WorkloadSpec,
    *,
    state: Path | None = None,
    keep_runs: int = gr.DEFAULT_KEEP_RUNS,
) -> GuestRun:
    """Run playbooks/experiment.yml on `vms` (those with an address); VMs without one are reported as errors."""
    base = state or gr.state_dir()
    targets = tg.build_targets(inv, addresses)
    runnable = [h for h in targets.runnable if h.name in vms]
    missing = [vm for vm in vms if vm not in {h.name for h in runnable}]
    if not runnable:
        return GuestRun(errors=[f"{vm}: no guest IP address (VM powered off, or VMware Tools not running)"
                                for vm in missing])
    group_vars: dict[str, Any] = {}
    for group in targets.groups:
        if any(h.name in vms for h in group.hosts):
            group_vars.update(group.vars)
    artifacts_root = gr.runs_dir(base)
    artifacts_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    tracker = gr.HostTracker()
    events: list[dict[str, Any]] = []
    ident = gr.new_ident()

    def handler(event: dict[str, Any]) -> bool:
        tracker.feed(event)
        if event.get("event") == "runner_on_ok":
            events.append(event)
        return True

    playbook_run = gr.PlaybookRun(
        inv, targets, base / "known_hosts", artifacts_root, ident, forks=max(1, len(runnable)), playbook=PLAYBOOK
    )
    try:
        result = playbook_run.execute(
            limit=",".join(h.name for h in runnable),
            handler=handler,
            extravars=extravars(workload, [h.name for h in runnable], group_vars),
        )
    finally:
        gr.prune_runs(artifacts_root, keep_runs)
    run = collect(events, [h.name for h in runnable], tracker)
    run.errors = [f"{vm}: no guest IP address (VM powered off, or VMware Tools not running)" for vm in missing] \
        + run.errors
    if result.rc != 0 and not run.facts:
        error = gr.playbook_error(artifacts_root / ident / "stdout") or f"ansible-runner {result.status}"
        run.errors.append(f"ansible-playbook exited with status {result.rc}: {error}")
    run.artifacts = str(artifacts_root / ident)
    return run
