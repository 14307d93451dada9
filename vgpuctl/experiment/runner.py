"""`vgpuctl experiment run` and `restore`: every variant applied, benchmarked and recorded, then the base back.

For each variant with repetitions still to do: write its merged inventory, apply it through the normal
plan/apply (plan shown, confirmation unless --yes), wait for the participating guests' addresses, then per
repetition run the workload in the guests, read the facts (guests and hosts) and record the result. At the
end the base inventory is applied again (unless --keep-last).

Each variant is checked against the farm as it will be when it runs: the first against the farm as it is,
before anything changes; every later one again just before its apply, against the farm the variant before it
left (up front, a later variant that does not plan against today's farm is only a warning). One that does not
plan stops the experiment there, naming it, with nothing of it changed. `state.json` in the results directory
says which configuration the farm was last wholly brought to (`applied`) and, while an apply runs or after one
stopped part-way, which one it is on its way to (`partial`): it never names a variant as applied that was not.
An interrupted run is continued by running again; `experiment restore` applies the base.

The I/O goes through `Farm`; `VsphereFarm` is the real one (vCenter, ESXi shells, guests over Ansible).
Plan and apply are reached only through `VsphereFarm.plan_errors` and `VsphereFarm.apply` (vgpuctl.pipeline).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from vgpuctl.errors import OutputFormatError, PlanError, VgpuctlError
from vgpuctl.experiment import parsers
from vgpuctl.experiment.facts import expectations, host_gpus
from vgpuctl.experiment.schema import Experiment, MergedVariant, WorkloadSpec, dump_inventory, summary, workload_dict
from vgpuctl.experiment.store import BASE, STATUS_FAILED, STATUS_OK, ResultsDir, RunRecord, RunSummary, now
from vgpuctl.experiment.workload import GuestRun, run_guests
from vgpuctl.guest.addresses import read_addresses, wait_for_addresses
from vgpuctl.hosts.plan import resolve_hosts
from vgpuctl.lazyclass import dataclass

if TYPE_CHECKING:
    from vgpuctl.inventory import Inventory
    from vgpuctl.outcome import RunOutcome
    from vgpuctl.pipeline import RunOptions
    from vgpuctl.vsphere.session import ConnectionSettings

Events = Callable[[str, dict[str, Any]], None]  # ("applied", {"variant": ...}) and the like, for progress


class ExperimentStopped(VgpuctlError):
    """A repetition failed and the experiment file says on_failure: stop."""


class NotApplied(VgpuctlError):
    """The farm refused an apply before it changed anything (the plan's errors, no confirmation); `error` is
    why, as the apply raised it."""

    def __init__(self, error: BaseException):
        self.error = error
        super().__init__(str(error))


class Farm(Protocol):
    def plan_errors(self, inventory: Inventory) -> list[str]: ...

    def apply(self, inventory: Inventory) -> None:
        """Apply the inventory; raise NotApplied when it was refused before any change."""

    def guest_addresses(self, inventory: Inventory, vms: list[str]) -> dict[str, str | None]: ...

    def host_facts(self, inventory: Inventory, vms: list[str]) -> dict[str, Any]: ...

    def run_workload(self, inventory: Inventory, addresses: dict[str, str | None], vms: list[str],
                     workload: WorkloadSpec) -> GuestRun: ...


# ------------------------------------------------------------------------------------------ orchestration


def prepare(exp: Experiment, checked: list[tuple[MergedVariant, Inventory]], results: ResultsDir) -> None:
    """Write what the results directory keeps of the experiment: summary, merged inventories, expectations."""
    results.write_experiment(summary(exp))
    for merged, inv in checked:
        results.write_inventory(merged.name, dump_inventory(merged.data))
        results.write_expectations(merged.name, expectations(inv, list(exp.vms)))


def pending(exp: Experiment, results: ResultsDir, variant: str) -> list[int]:
    return [rep for rep in range(1, exp.repetitions + 1) if not results.is_done(variant, rep)]


def run_experiment(
    exp: Experiment,
    checked: list[tuple[MergedVariant, Inventory]],
    base: Inventory,
    results: ResultsDir,
    farm: Farm,
    *,
    keep_last: bool = False,
    events: Events | None = None,
) -> RunSummary:
    emit = events or (lambda _kind, _data: None)
    prepare(exp, checked, results)
    todo = [(m, inv) for m, inv in checked if pending(exp, results, m.name)]
    out = RunSummary(results=str(results.root))
    for m, _inv in checked:
        out.variants[m.name] = {"ran": 0, "skipped": exp.repetitions - len(pending(exp, results, m.name)), "failed": 0}
    plan_all(todo, farm, emit)
    for i, (merged, inv) in enumerate(todo):
        if i > 0:  # the first was planned just now, on the farm as it is
            check_variant(merged, inv, farm, emit, after=todo[i - 1][0].name)
        _run_variant(exp, merged, inv, results, farm, out, emit)
    if not keep_last:
        restore(base, results, farm, emit)
        out.restored = True
    return out


def plan_all(todo: list[tuple[MergedVariant, Inventory]], farm: Farm, emit: Events) -> None:
    """Before anything changes: the first variant must plan against the farm as it is, the farm it will run on.
    The later ones run on the farm the variant before leaves, so a plan error against today's farm is only a
    warning here (event `plan-warning`); each is checked again just before it runs (check_variant)."""
    for i, (merged, inv) in enumerate(todo):
        emit("planning", {"variant": merged.name})
        errors = farm.plan_errors(inv)
        if errors and i == 0:
            raise PlanError([f"variant {merged.name!r} does not plan (nothing was changed): {e}" for e in errors])
        if errors:
            emit("plan-warning", {"variant": merged.name, "errors": errors, "after": todo[i - 1][0].name})


def check_variant(merged: MergedVariant, inv: Inventory, farm: Farm, emit: Events, after: str) -> None:
    """The variant against the farm as it is now, the farm it runs on (as the variant `after` left it)."""
    emit("planning", {"variant": merged.name})
    errors = farm.plan_errors(inv)
    if errors:
        raise PlanError([f"variant {merged.name!r} does not plan on the farm as variant {after!r} left it (nothing "
                         f"of it was changed; the farm stays in {after!r}): {e}" for e in errors])


def _run_variant(exp: Experiment, merged: MergedVariant, inv: Inventory, results: ResultsDir, farm: Farm,
                 out: RunSummary, emit: Events) -> None:
    name = merged.name
    workload = exp.workload_of(exp.variant(name))
    emit("applying", {"variant": name})
    _apply(farm, inv, results, name)
    results.set_applied(name, "applied")
    emit("applied", {"variant": name})
    addresses = farm.guest_addresses(inv, list(exp.vms))
    for rep in pending(exp, results, name):
        emit("repetition", {"variant": name, "repetition": rep})
        started = now()
        guest = farm.run_workload(inv, addresses, list(exp.vms), workload)
        facts = _facts(farm, inv, list(exp.vms), guest)
        rec = record_of(name, rep, workload, guest, list(exp.vms))
        rec.started, rec.finished = started, now()
        results.record(rec, guest.outputs, facts)
        out.variants[name]["ran"] += 1
        emit("recorded", {"variant": name, "repetition": rep, "status": rec.status, "errors": rec.errors})
        if rec.status != STATUS_OK:
            out.variants[name]["failed"] += 1
            if exp.on_failure == "stop":
                raise ExperimentStopped(
                    f"variant {name!r} repetition {rep} failed ({'; '.join(rec.errors)}); on_failure is stop: "
                    f"the farm is left in variant {name!r} (rerun to continue, `experiment restore` to go back)"
                )


def _apply(farm: Farm, inv: Inventory, results: ResultsDir, name: str) -> None:
    """Apply, with state.json saying so first (`partial`: the farm may be on its way to `name` from here on).
    Refused before any change (the plan's errors, no confirmation, a cancelled prompt): the farm is still in
    the configuration it was, and the refusal is raised as the apply raised it. Failed later: the farm is noted
    as part-way into `name`."""
    results.set_applying(name)
    try:
        farm.apply(inv)
    except NotApplied as refused:
        results.not_applied(name, f"{name} not applied: {_one_line(refused.error)}")
        raise refused.error from None
    except BaseException as err:
        message = _one_line(err)
        results.set_partial(name, message if message.startswith("apply failed") else f"apply failed: {message}")
        raise


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _facts(farm: Farm, inv: Inventory, vms: list[str], guest: GuestRun) -> dict[str, Any]:
    try:
        hosts = farm.host_facts(inv, vms)
    except VgpuctlError as err:  # the numbers are still worth keeping; the report shows what is missing
        hosts = {"hosts": {}, "vm_hosts": {}, "errors": [str(err)]}
    return {"guests": guest.facts, **hosts}


def restore(base: Inventory, results: ResultsDir, farm: Farm, emit: Events | None = None) -> None:
    """Apply the base inventory and record that the farm is back in it."""
    emit = emit or (lambda _kind, _data: None)
    emit("restoring", {"variant": BASE})
    errors = farm.plan_errors(base)
    if errors:
        raise PlanError([f"the base inventory does not plan: {e}" for e in errors])
    _apply(farm, base, results, BASE)
    results.set_applied(BASE, "restored")
    emit("restored", {"variant": BASE})


# -------------------------------------------------------------------------------------------- parsing


def record_of(variant: str, rep: int, workload: WorkloadSpec, guest: GuestRun, vms: list[str]) -> RunRecord:
    """One repetition's record: per-VM exit status, parsed numbers, and why it failed if it did. Pure."""
    errors = list(guest.errors)
    parsed: dict[str, Any] = {}
    expected = [vms[0]] if workload.builtin == "nccl-tests" and workload.scope == "across-vms" else list(vms)
    for vm in expected:
        if vm not in guest.outputs:
            if not any(e.startswith(f"{vm}:") for e in errors):
                errors.append(f"{vm}: the workload did not run")
            continue
        rc = guest.rcs.get(vm)
        text = guest.outputs[vm]
        if rc != 0:
            errors.append(f"{vm}: exit status {rc}: {_last_line(text)}")
            continue
        if workload.builtin is None:
            continue  # a command's output is kept as it is
        try:
            parsed[vm] = parse_output(workload, text)
        except OutputFormatError as err:
            errors.append(f"{vm}: {err}")
    outputs = {vm: {"rc": guest.rcs.get(vm)} for vm in guest.outputs}
    status = STATUS_OK if not errors else STATUS_FAILED
    return RunRecord(variant, rep, workload_dict(workload), status, outputs, parsed, errors)


def parse_output(workload: WorkloadSpec, text: str) -> dict[str, Any]:
    if workload.builtin == "nccl-tests" and workload.scope == "across-vms":
        # across VMs also the transport NCCL used (its NCCL_DEBUG=INFO lines): a run that fell back to sockets
        # is flagged (vgpuctl.experiment.facts.transport_contradictions)
        return {**parsers.parse_nccl_tests(text).to_dict(), "transport": parsers.nccl_transport(text).to_dict()}
    if workload.builtin == "nccl-tests":
        return parsers.parse_nccl_tests(text).to_dict()
    if workload.builtin == "p2pBandwidthLatencyTest":
        return parsers.parse_p2p_bandwidth_latency(text).to_dict()
    return {}


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


# --------------------------------------------------------------------------------------------- vSphere


@dataclass
class VsphereFarm:
    """The real farm: plan and apply through vgpuctl.pipeline, guests over Ansible, hosts over SSH.

    `apply_run` is pipeline.run with the caller's hooks (the plan shown, confirmation, progress, the summary);
    `settings_for` and `options_for` give the connection and the run options for an inventory."""

    settings_for: Callable[[Inventory], ConnectionSettings]
    options_for: Callable[[Inventory], RunOptions]
    apply_run: Callable[[Inventory], RunOutcome]
    warn: Callable[[str], None] = lambda _message: None
    ip_timeout_s: float = 600.0
    ip_poll_s: float = 5.0
    state: Path | None = None

    def plan_errors(self, inventory: Inventory) -> list[str]:
        from vgpuctl import pipeline

        planned = pipeline.plan_only(self.settings_for(inventory), inventory, self.options_for(inventory))
        return list(planned.plan.errors)

    def apply(self, inventory: Inventory) -> None:
        outcome = self.apply_run(inventory)
        failure = outcome.failure()
        if failure is None:
            return
        hosts = outcome.applied.hosts if outcome.applied is not None else None
        details = [" ".join(o.describe().split()) for o in hosts.hosts if o.host in hosts.failed] if hosts else []
        if not details:
            raise failure
        raise VgpuctlError(f"{failure}: {'; '.join(details)}") from None

    # guests and hosts

    def guest_addresses(self, inventory: Inventory, vms: list[str]) -> dict[str, str | None]:
        from vgpuctl.vsphere.session import open_session

        with open_session(self.settings_for(inventory)) as session:
            found = wait_for_addresses(lambda: read_addresses(session, vms), timeout_s=self.ip_timeout_s,
                                       poll_s=self.ip_poll_s)
        missing = [vm for vm, ip in found.items() if not ip]
        if missing:
            self.warn(f"no guest IP address after {self.ip_timeout_s:g} s for: {', '.join(missing)}")
        return found

    def host_facts(self, inventory: Inventory, vms: list[str]) -> dict[str, Any]:
        from vgpuctl import pipeline
        from vgpuctl.vsphere.session import open_session

        options = self.options_for(inventory)
        with open_session(self.settings_for(inventory)) as session:
            observed = pipeline.observe(session, options.datacenter, inventory)
            vm_hosts: dict[str, str] = {}
            for vm in vms:
                host = observed.vms[vm].host if vm in observed.vms else None
                if host:
                    vm_hosts[vm] = host
            merged, _ = resolve_hosts(inventory.hosts, observed)  # cluster and host entries merged per host
            specs = {h: merged[h] for h in sorted(set(vm_hosts.values())) if h in merged}
            facts, errors = pipeline.host_facts(session, observed, specs, options)
        return {"hosts": {h: host_gpus(f) for h, f in facts.items()}, "vm_hosts": vm_hosts,
                "errors": [str(e) for e in errors]}

    def run_workload(self, inventory: Inventory, addresses: dict[str, str | None], vms: list[str],
                     workload: WorkloadSpec) -> GuestRun:

        return run_guests(inventory, addresses, vms, workload, state=self.state)
