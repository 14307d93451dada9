"""The host settings vgpuctl manages, one module each, and their registry.

`SETTINGS` is the ordered registry: plans list changes in this order (kind by kind), and host planning,
apply, verification, `plan --explain`, `export`, `host show`/`status` and the saved-plan check loop over it.
The protocol every setting follows is vgpuctl.hosts.settings.base.HostSetting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vgpuctl.domain import ChangeKind
from vgpuctl.hosts.settings import gpus, graphics, nvlink, pvrdma, scheduler, sriov
from vgpuctl.hosts.settings.base import ApplyStep, HostSetting

if TYPE_CHECKING:
    from vgpuctl.inventory import HostSpec

SETTINGS: tuple[HostSetting, ...] = (
    graphics.SETTING, gpus.SETTING, nvlink.SETTING, scheduler.SETTING, sriov.SETTING, pvrdma.SETTING
)

SETTING_KINDS: tuple[ChangeKind, ...] = tuple(k for s in SETTINGS for k in s.kinds)
_BY_KIND: dict[ChangeKind, HostSetting] = {k: s for s in SETTINGS for k in s.kinds}


def setting_of(kind: ChangeKind) -> HostSetting | None:
    """The setting that plans changes of this kind (None for evacuations and resumptions)."""
    return _BY_KIND.get(kind)


def setting_for_key(display_key: str) -> HostSetting | None:
    """The setting a display key belongs to: "graphics.default_type", "gpus[all].mode", "scheduler.policy"."""
    head = display_key.split(".", 1)[0].split("[", 1)[0]
    return next((s for s in SETTINGS if s.key == head), None)


def step_of(kind: ChangeKind) -> ApplyStep | None:
    setting = setting_of(kind)
    return setting.step(kind) if setting is not None else None


def apply_steps() -> list[ApplyStep]:
    """Every apply step a setting writes in, in order."""
    steps = {s.step(k) for s in SETTINGS for k in s.kinds}
    return sorted(steps, key=lambda step: step.order)


def wants_network(spec: HostSpec | None) -> bool:
    """A setting the entry sets reads the host's network facts (HostFacts.network, read one host at a time)."""
    return spec is not None and any(s.is_set(spec) and "network" in s.observes.facts for s in SETTINGS)


def drift_fields() -> tuple[str, ...]:
    """The ObservedHost fields the settings are planned from: a saved plan is refused when one changed."""
    return tuple(dict.fromkeys(f for s in SETTINGS for f in s.drift_fields))


__all__ = [
    "SETTINGS", "SETTING_KINDS", "apply_steps", "drift_fields", "setting_for_key", "setting_of", "step_of",
    "wants_network",
]
