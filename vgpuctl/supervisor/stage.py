"""The VM-class stage of a run: observe the supervisor side over REST, plan it, apply it.

Entry points (for `vgpuctl k8s plan/apply` and for the plan/apply pipeline); `SupervisorRun` wraps them
for one run (one REST login, plan, apply):
- `observe_supervisor(rest, observed)`: the REST state, cluster ids turned into cluster names;
- `plan_stage(rest, inventory, observed)`: observe + vgpuctl.supervisor.vmclasses.plan_supervisor (pass `observed` as
  predicted after planned host changes so that planned GPU modes count);
- `apply_stage(rest, plan, progress)`: one request per class or namespace change, in plan order; a namespace
  is re-read just before its change so that associations made meanwhile by someone else are kept. The first
  failure stops the stage; nothing is half-applied within one class or namespace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from vgpuctl.errors import DriftError, RestError, VgpuctlError
from vgpuctl.farm.predict import predict_observed
from vgpuctl.model import ChangeOutcome, HostChange, Observed, Op, SupervisorApplyResult
from vgpuctl.records.classes import SupervisorState
from vgpuctl.supervisor.vmclasses import ClassChange, NamespaceChange, SupervisorPlan, plan_supervisor

if TYPE_CHECKING:
    from vgpuctl.inventory.classes import InventorySections
    from vgpuctl.vsphere.rest import RestClient
    from vgpuctl.vsphere.session import ConnectionSettings

Progress = Callable[[str, str], None]  # (what, step) e.g. ("vm class gpu-a100", "created")


def observe_supervisor(rest: RestClient, observed: Observed) -> SupervisorState:
    """Every VM class, supervisor cluster and namespace: namespaces the inventory does not name are read too,
    as the classes they use must stay offered and cannot be deleted under them."""
    state = rest.observe()
    names = {moid: name for name, moid in observed.cluster_moids.items()}
    state.supervisor_clusters = {moid: names.get(moid, label) for moid, label in state.supervisor_clusters.items()}
    return state


def plan_stage(rest: RestClient, inventory: InventorySections, observed: Observed) -> SupervisorPlan:
    return plan_supervisor(inventory, observe_supervisor(rest, observed), observed)


def names_supervisor_objects(inventory: InventorySections) -> bool:
    """Whether the inventory has VM classes or namespaces (without them a run never logs in over REST)."""
    return bool(inventory.vm_classes or inventory.namespaces)


def planning_base(observed: Observed, host_changes: Sequence[HostChange] = ()) -> Observed:
    """The hosts as they will be after the planned host changes (a GPU switched to MIG offers MIG profiles)."""
    return predict_observed(observed, host_changes) if host_changes else observed


class SupervisorRun:
    """The VM-class stage of one run: one REST login (the SOAP session's settings), plan, then apply.

        with SupervisorRun(session.settings, inventory) as run:
            plan = run.plan(observed, the_plan.host_changes)
            ...
            result = run.apply(progress)
    """

    def __init__(self, settings: ConnectionSettings, inventory: InventorySections):
        from vgpuctl.vsphere.rest import RestClient

        self.inventory = inventory
        self.rest = RestClient(settings)
        self.last_plan: SupervisorPlan | None = None

    def __enter__(self) -> SupervisorRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.rest.close()

    def plan(self, observed: Observed, host_changes: Sequence[HostChange] = ()) -> SupervisorPlan:
        self.last_plan = plan_stage(self.rest, self.inventory, planning_base(observed, host_changes))
        return self.last_plan

    def apply(self, progress: Progress | None = None) -> SupervisorApplyResult:
        if self.last_plan is None:
            raise VgpuctlError("the VM class stage was not planned")
        return apply_stage(self.rest, self.last_plan, progress)


def apply_stage(rest: RestClient, plan: SupervisorPlan, progress: Progress | None = None) -> SupervisorApplyResult:
    if plan.errors:
        raise VgpuctlError("the VM class plan has errors; nothing was applied")
    result = SupervisorApplyResult()
    stopped = False
    for item in plan.ordered():
        target, action = _describe(item)
        if stopped:
            result.outcomes.append(ChangeOutcome(target, action, "skipped", "an earlier change failed"))
            continue
        try:
            _apply_one(rest, item)
        except VgpuctlError as err:
            result.outcomes.append(ChangeOutcome(target, action, "failed", str(err)))
            stopped = True
        else:
            result.outcomes.append(ChangeOutcome(target, action, "changed"))
        if progress is not None:
            progress(target, result.outcomes[-1].status)
    return result


def _describe(item: ClassChange | NamespaceChange) -> tuple[str, str]:
    if isinstance(item, NamespaceChange):
        return f"namespace {item.namespace}", "associate"
    return f"vm class {item.name}", {Op.ADD: "create", Op.CHANGE: "update", Op.REMOVE: "delete"}[item.op]


def _apply_one(rest: RestClient, item: ClassChange | NamespaceChange) -> None:
    if isinstance(item, NamespaceChange):
        ns = rest.get_namespace(item.namespace)
        classes = [c for c in ns.vm_classes if c not in item.remove]
        classes += [c for c in item.add if c not in classes]
        if classes != ns.vm_classes:
            rest.set_namespace_classes(ns, classes)
        return
    if item.op == Op.REMOVE:
        rest.delete_vm_class(item.name)
        return
    assert item.desired is not None
    if item.op == Op.ADD:
        if _exists(rest, item.name):
            raise DriftError(f"VM class {item.name} appeared since the plan; plan again")
        rest.create_vm_class(item.desired)
        return
    removed = [k for k, v in item.extra_config.items() if v is None]
    rest.update_vm_class(item.desired, removed_keys=removed)


def _exists(rest: RestClient, name: str) -> bool:
    try:
        rest.get_vm_class(name)
    except RestError as err:
        if err.status == 404:
            return False
        raise
    return True


def open_for_run(settings: ConnectionSettings, inventory: InventorySections, observed: Observed,
                 host_changes: Sequence[HostChange] = ()) -> SupervisorRun | None:
    """The VM-class stage of `vgpuctl plan`/`apply`: logged in and planned, or None when the inventory names no
    VM classes or namespaces (no REST login then). The caller closes it."""
    if not names_supervisor_objects(inventory):
        return None
    run = SupervisorRun(settings, inventory)
    try:
        run.plan(observed, host_changes)
    except BaseException:
        run.rest.close()
        raise
    return run
