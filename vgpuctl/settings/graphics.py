"""Host graphics: the default graphics type of the host's GPUs and the vGPU assignment policy.

Inventory: `graphics: {default_type: shared|sharedDirect, assignment_policy: performance|consolidation}`.
vSphere: HostGraphicsConfig (config.graphicsConfig) hostDefaultGraphicsType and
sharedPassthruAssignmentPolicy, written with UpdateGraphicsConfig (vgpuctl.vsphere.host.update_graphics).
A new default type takes effect after a reboot in maintenance mode, and GPUs without a type of their own take
it; the assignment policy changes online (it places the next vGPUs). docs/host-changes.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vgpuctl.domain import AssignmentPolicy, ChangeKind, GraphicsType, Phase
from vgpuctl.model import HostChange, ObservedHost
from vgpuctl.settings.base import (
    GRAPHICS_STEP,
    ApplyStep,
    Exported,
    HostPlan,
    HostSetting,
    HostWriter,
    PlanInput,
    Reads,
    SettingState,
    host_change,
)
from vgpuctl.settings.facts import HostFacts
from vgpuctl.strictmodel import Lax, StrictModel


class GraphicsSpec(StrictModel):
    """`graphics:` of a hosts entry."""

    default_type: Lax[GraphicsType] | None = None
    assignment_policy: Lax[AssignmentPolicy] | None = None


DEFAULT_TYPE_KEY = "graphics.default_type"
ASSIGNMENT_POLICY_KEY = "graphics.assignment_policy"


DEFAULT_TYPE = ChangeKind("graphics.default_type")
ASSIGNMENT_POLICY = ChangeKind("graphics.assignment_policy")


class HostGraphics(HostSetting[GraphicsSpec | None]):
    key = "graphics"
    schema: Any = GraphicsSpec | None
    kinds = (DEFAULT_TYPE, ASSIGNMENT_POLICY)
    offer_kinds = frozenset({DEFAULT_TYPE})
    reads = Reads(
        properties=("config.graphicsConfig",),
        host_fields=("default_graphics_type", "assignment_policy"),
    )
    drift_fields = ("default_graphics_type", "assignment_policy")
    apply_step = GRAPHICS_STEP

    def is_set(self, spec: object) -> bool:
        g = self.of(spec)
        return g is not None and (g.default_type is not None or g.assignment_policy is not None)

    def plan(self, inp: PlanInput) -> HostPlan:
        g, host = self.of(inp.spec), inp.host
        result = HostPlan()
        if g is None:
            return result
        if g.default_type is not None and g.default_type != host.default_graphics_type:
            result.changes.append(
                host_change(inp, DEFAULT_TYPE, host.default_graphics_type, g.default_type, Phase.REBOOT)
            )
        policy = g.assignment_policy
        if policy is not None and policy != host.assignment_policy:
            result.changes.append(host_change(inp, ASSIGNMENT_POLICY, host.assignment_policy, policy, Phase.ONLINE))
        return result

    def predict(self, host: ObservedHost, changes: Sequence[HostChange]) -> None:
        for c in changes:
            if c.kind == DEFAULT_TYPE:
                host.default_graphics_type = str(c.new)
            elif c.kind == ASSIGNMENT_POLICY:
                host.assignment_policy = str(c.new)
        if any(c.kind == DEFAULT_TYPE for c in changes):  # GPUs without a type of their own take it
            for g in host.gpus:
                g.graphics_type = host.default_graphics_type

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        for c in changes:
            if c.kind == DEFAULT_TYPE:
                writer.graphics.default_type = str(c.new)
            elif c.kind == ASSIGNMENT_POLICY:
                writer.graphics.assignment_policy = str(c.new)

    def explain(self, key: str, host: ObservedHost, facts: HostFacts | None) -> str | None:
        if key == DEFAULT_TYPE_KEY:
            return host.default_graphics_type
        if key == ASSIGNMENT_POLICY_KEY:
            return host.assignment_policy
        return None

    def export(self, host: ObservedHost, facts: HostFacts | None) -> Exported:
        return Exported({DEFAULT_TYPE_KEY: host.default_graphics_type, ASSIGNMENT_POLICY_KEY: host.assignment_policy})

    def status(self, host: ObservedHost, facts: HostFacts | None) -> list[SettingState]:
        return [
            SettingState(DEFAULT_TYPE_KEY, host.default_graphics_type),
            SettingState(ASSIGNMENT_POLICY_KEY, host.assignment_policy),
        ]


SETTING = HostGraphics()
