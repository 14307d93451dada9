"""The `k8s` documents: the VM-class and namespace plan, its apply, the supervisor status, the manifests."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from vgpuctl.lazyclass import dataclass
from vgpuctl.model import ChangeOutcome, Op, SupervisorApplyResult
from vgpuctl.records.classes import ClassState, SupervisorState
from vgpuctl.reports.base import TERMINAL, Report, TextLayout, optional
from vgpuctl.reports.plan import FieldDiff
from vgpuctl.reports.status import StatusVmClass, status_vm_classes
from vgpuctl.supervisor.render import kubernetes_objects
from vgpuctl.supervisor.vmclasses import ClassChange, SupervisorPlan
from vgpuctl.visible import lines_text, visible

if TYPE_CHECKING:
    from rich.text import Text

    from vgpuctl.domain import ClusterKind

INDENT = "    "
VERBS = {Op.ADD: "create", Op.CHANGE: "update", Op.REMOVE: "delete"}
DIFF_STYLES = {"+": "green", "-": "red", "~": "yellow"}


# ------------------------------------------------------------------------------------------------ plan


@dataclass
class VmClassSpecDoc:
    """A VM class as it will be after the change."""

    name: str
    cpus: int
    memory_mb: int
    cpu_reservation: int  # percent
    memory_reservation: int  # percent
    vgpus: list[str]  # one profile per vGPU device
    extra_config: dict[str, str]
    direct_path: list[str] = field(default_factory=list)  # Dynamic DirectPath NICs, `vvvv:dddd[@label]`


@dataclass
class VmClassChange:
    """Create (+), update (~) or delete (-) one VM class."""

    op: str
    name: str
    fields: list[FieldDiff]
    vgpus_added: list[str]
    vgpus_removed: list[str]
    extra_config: dict[str, str | None]  # None removes the key
    desired: VmClassSpecDoc | None  # None for a delete
    nics_added: list[str] = field(default_factory=list)  # Dynamic DirectPath NICs, `vvvv:dddd[@label]`
    nics_removed: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        lines = [f"{self.op} vm class {self.name}  ({VERBS[Op(self.op)]})"]
        if self.op == Op.ADD and self.desired is not None:
            d = self.desired
            lines.append(f"{INDENT}+ cpus {d.cpus}, memoryMB {d.memory_mb}, cpu reservation {d.cpu_reservation}%, "
                         f"memory reservation {d.memory_reservation}%")
        lines += [f"{INDENT}{f.op} {f.field}: {_value(f.old)} -> {_value(f.new)}" for f in self.fields]
        lines += [f"{INDENT}- vgpu {p}" for p in self.vgpus_removed]
        lines += [f"{INDENT}+ vgpu {p}" for p in self.vgpus_added]
        lines += [f"{INDENT}- nic passthrough {d}" for d in self.nics_removed]
        lines += [f"{INDENT}+ nic passthrough {d}" for d in self.nics_added]
        for key in sorted(self.extra_config):
            value = self.extra_config[key]
            lines.append(f"{INDENT}- extraConfig {key}" if value is None else f"{INDENT}+ extraConfig {key} = {value}")
        return lines


@dataclass
class NamespaceClassChange:
    """VM classes associated with (`add`) and taken from (`remove`) one supervisor namespace."""

    namespace: str
    add: list[str]
    remove: list[str]

    def lines(self) -> list[str]:
        lines = [f"{Op.CHANGE} namespace {self.namespace}"]
        lines += [f"{INDENT}+ vm class {c}" for c in self.add]
        lines += [f"{INDENT}- vm class {c}" for c in self.remove]
        return lines


@dataclass
class SupervisorPlanSummary:
    classes_create: int
    classes_update: int
    classes_delete: int
    namespaces_change: int
    errors: int
    warnings: int


@dataclass
class SupervisorPlanReport(Report):
    """`k8s plan`: the VM classes to create, update or delete and the namespaces whose classes change."""

    kind: ClassVar[str] = "supervisor_plan"
    class_changes: list[VmClassChange]
    namespace_changes: list[NamespaceClassChange]
    errors: list[str]
    warnings: list[str]
    summary: SupervisorPlanSummary

    def render_text(self, layout: TextLayout = TERMINAL) -> Text:
        """The diff with + ~ - lines colored (never parsed as rich markup)."""
        from rich.text import Text

        text = Text()
        for line in self.diff_text().rstrip("\n").splitlines():
            text.append(visible(line, False) + "\n", style=DIFF_STYLES.get(line.lstrip()[:1], ""))
        text.rstrip()
        return text

    def diff_text(self) -> str:
        """The plan as a + ~ - diff in apply order, then warnings, errors and a summary line."""
        first = [c for c in self.class_changes if c.op != Op.REMOVE]
        last = [c for c in self.class_changes if c.op == Op.REMOVE]
        ordered: list[VmClassChange | NamespaceClassChange] = [*first, *self.namespace_changes, *last]
        lines = [line for item in ordered for line in item.lines()]
        lines += [f"Warning: {w}" for w in self.warnings]
        lines += [f"Error: {e}" for e in self.errors]
        s = self.summary
        if self.errors:
            lines.append(f"Plan has {s.errors} error{'s' if s.errors != 1 else ''}; nothing can be applied.")
        elif not self.class_changes and not self.namespace_changes:
            lines.append("No changes: the VM classes and namespaces match the inventory.")
        else:
            lines.append(f"Plan: {s.classes_create} VM class(es) to create, {s.classes_update} to update, "
                         f"{s.classes_delete} to delete, {s.namespaces_change} namespace(s) to change.")
        return "\n".join(lines) + "\n"


def _value(v: object) -> str:
    return "(none)" if v is None else str(v)


def _class_spec(c: ClassState | None) -> VmClassSpecDoc | None:
    if c is None:
        return None
    return VmClassSpecDoc(c.name, c.cpus, c.memory_mb, c.cpu_reservation, c.memory_reservation, list(c.vgpus),
                          dict(c.extra_config), list(c.direct_path))


def _class_change(c: ClassChange) -> VmClassChange:
    return VmClassChange(
        op=str(c.op),
        name=c.name,
        fields=[FieldDiff(f.field, str(f.op), f.old, f.new) for f in c.fields],
        vgpus_added=list(c.vgpus_added),
        vgpus_removed=list(c.vgpus_removed),
        extra_config=dict(c.extra_config),
        desired=_class_spec(c.desired),
        nics_added=list(c.nics_added),
        nics_removed=list(c.nics_removed),
    )


def supervisor_plan_report(plan: SupervisorPlan) -> SupervisorPlanReport:
    ops = [c.op for c in plan.class_changes]
    summary = SupervisorPlanSummary(ops.count(Op.ADD), ops.count(Op.CHANGE), ops.count(Op.REMOVE),
                                    len(plan.namespace_changes), len(plan.errors), len(plan.warnings))
    return SupervisorPlanReport(
        class_changes=[_class_change(c) for c in plan.class_changes],
        namespace_changes=[NamespaceClassChange(n.namespace, list(n.add), list(n.remove))
                           for n in plan.namespace_changes],
        errors=list(plan.errors),
        warnings=list(plan.warnings),
        summary=summary,
    )


# ----------------------------------------------------------------------------------------------- apply


@dataclass
class SupervisorOutcomes(Report):
    """What applying the VM-class plan did: one outcome per class or namespace change, in apply order."""

    kind: ClassVar[str] = "supervisor_apply"
    outcomes: list[ChangeOutcome]

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        counts = {s: sum(1 for o in self.outcomes if o.status == s) for s in ("changed", "failed", "skipped")}
        lines = [f"VM classes and namespaces: {counts['changed']} changed, {counts['failed']} failed, "
                 f"{counts['skipped']} skipped."]
        lines += [f"  failed: {o.target}: {o.message}" for o in self.outcomes if o.status == "failed"]
        return "\n".join(lines)


def supervisor_outcomes(result: SupervisorApplyResult) -> SupervisorOutcomes:
    return SupervisorOutcomes(list(result.outcomes))


@dataclass
class SupervisorApplyReport(Report):
    """`k8s apply`: the plan it confirmed and, when something changed, the outcomes."""

    kind: ClassVar[str] = "supervisor_apply"
    plan: SupervisorPlanReport
    result: SupervisorOutcomes | None  # None: nothing to apply

    def render_text(self, layout: TextLayout = TERMINAL) -> str | None:
        """The outcomes (the plan was shown before the confirmation)."""
        return None if self.result is None else self.result.render_text(layout)


# ---------------------------------------------------------------------------------------------- status


@dataclass
class SupervisorStatusReport(Report):
    """`k8s status`: the VM classes with vGPUs and their namespaces (as `status` lists them), the supervisor
    clusters by name."""

    kind: ClassVar[str] = "supervisor_status"
    vm_classes: list[StatusVmClass]
    supervisor_clusters: list[str]

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        lines = [f"Supervisor clusters: {', '.join(self.supervisor_clusters) or 'none'}"]
        if not self.vm_classes:
            return lines_text([*lines, "No VM class has vGPUs."])
        lines.append("VM classes with vGPUs:")
        for c in self.vm_classes:
            vgpus = ", ".join(f"{v.count} x {v.profile}" for v in c.vgpus)
            used = ", ".join(c.namespaces) or "no namespace"
            lines.append(f"  {c.vm_class}: {vgpus}; {c.cpus} CPUs, {c.memory_mb} MB; used by {used}")
        return "\n".join(lines)


def supervisor_status_report(state: SupervisorState) -> SupervisorStatusReport:
    """The same VM-class rows as `status` (one builder for both)."""
    return SupervisorStatusReport(status_vm_classes(state), sorted(state.supervisor_clusters.values()))


# ------------------------------------------------------------------------------------------- manifests


@dataclass
class ManifestsReport(Report):
    """`k8s render`: the Kubernetes objects by file name (printed as one YAML stream, `kubectl apply -f -`), or
    the names of the files written into `folder`; `not_printed` names the files only `--out` writes (Helm
    values, gridd.conf, a script)."""

    kind: ClassVar[str] = "k8s_manifests"
    namespace: str
    files: dict[str, str] | list[str]
    cluster_kind: str  # the one cluster object's kind: Cluster or TanzuKubernetesCluster
    folder: str | None = optional()
    not_printed: list[str] = field(default_factory=list)

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        if isinstance(self.files, list):
            return "\n".join(f"wrote {Path(self.folder or '.') / name}" for name in self.files)
        return yaml_stream(self.files.values())


def yaml_stream(documents: Iterable[str]) -> str:
    """YAML documents as one stream: each starts with `---`."""
    return "\n".join(f"---\n{text.strip(chr(10))}" for text in documents)


def manifests_report(namespace: str, manifests: dict[str, str], folder: Path | None,
                      cluster_kind: ClusterKind) -> ManifestsReport:
    """The Kubernetes objects (the other files are listed in `not_printed`), or (written into `folder`) every
    file name in the order they were written."""
    if folder is None:
        objects = kubernetes_objects(manifests)
        return ManifestsReport(namespace, objects, cluster_kind.object_kind,
                               not_printed=[n for n in manifests if n not in objects])
    return ManifestsReport(namespace, list(manifests), cluster_kind.object_kind, str(folder))
