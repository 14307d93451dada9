"""The host settings vgpuctl manages, one module each, and their registry.

`SETTINGS` is the ordered registry of a hosts entry's keys: plans list changes in this order (kind by kind), and host
planning, apply, verification, `plan --explain`, `export`, `host show`/`status` and the saved-plan check loop over
it. The per-GPU settings make the `gpus` key together (vgpuctl.settings.gpus). The registry also builds what is
read for them: the bulk read's host properties (`host_properties`) and each host's facts (vgpuctl.settings.gather).
The base classes every setting derives from are in vgpuctl.settings.base.
"""

from __future__ import annotations

from typing import Any

from vgpuctl.domain import ChangeKind
from vgpuctl.settings import gpus, graphics, nvlink, pvrdma, scheduler, sriov, vgpu_manager
from vgpuctl.settings.base import ApplyStep, GpuSetting, HostSetting
from vgpuctl.settings.facts import (
    GPU_TABLE_FIELDS,
    SHARED_API_FACTS,
    SHARED_SHELL_FACTS,
    ApiFact,
    Decoder,
    EntryShellFact,
    GpuQuery,
    ShellFact,
    decoder,
)

SETTINGS: tuple[HostSetting[Any], ...] = (
    graphics.SETTING, gpus.SETTING, nvlink.SETTING, scheduler.SETTING, sriov.SETTING, pvrdma.SETTING,
    vgpu_manager.SETTING,
)
GPU_SETTINGS: tuple[GpuSetting, ...] = gpus.GPU_SETTINGS

SETTING_KINDS: tuple[ChangeKind, ...] = tuple(k for s in SETTINGS for k in s.kinds)
_BY_KIND: dict[str, HostSetting[Any]] = {k: s for s in SETTINGS for k in s.kinds}


def setting_of(kind: ChangeKind) -> HostSetting[Any] | None:
    """The setting that plans changes of this kind (None for evacuations and resumptions)."""
    return _BY_KIND.get(kind)


def setting_for_key(display_key: str) -> HostSetting[Any] | None:
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


def drift_fields() -> tuple[str, ...]:
    """The ObservedHost fields the settings are planned from: a saved plan is refused when one changed."""
    return tuple(dict.fromkeys(f for s in SETTINGS for f in s.drift_fields))


# ------------------------------------------------------------------------------------------ what is read


def host_properties() -> tuple[str, ...]:
    """The HostSystem properties the settings read, for the one bulk read."""
    return tuple(dict.fromkeys(p for s in SETTINGS for p in s.reads.properties))


def gpu_queries() -> tuple[GpuQuery[Any], ...]:
    """Every GPU query of the settings: their fields make one `nvidia-smi --query-gpu` command."""
    return tuple(dict.fromkeys(q for s in SETTINGS for q in s.reads.gpu_queries))


def gpu_query_fields() -> tuple[str, ...]:
    """The fields of that one command: the GPU table's, then each query's."""
    return tuple(dict.fromkeys((*GPU_TABLE_FIELDS, *(f for q in gpu_queries() for f in q.fields))))


def shell_facts() -> tuple[ShellFact[Any], ...]:
    """The other shell commands the settings read (and the ones shared with placement and status)."""
    return tuple(dict.fromkeys((*(f for s in SETTINGS for f in s.reads.shell), *SHARED_SHELL_FACTS)))


def api_facts(spec: object | None) -> tuple[ApiFact[Any], ...]:
    """The per-host calls for a host with this entry: every setting's, those marked `when_set` only where the entry
    sets a setting that reads them."""
    out: dict[str, ApiFact[Any]] = {}
    for s in SETTINGS:
        for fact in s.reads.api:
            if not fact.when_set or (spec is not None and s.is_set(spec)):
                out.setdefault(fact.name, fact)
    for fact in SHARED_API_FACTS:
        if not fact.when_set:
            out.setdefault(fact.name, fact)
    return tuple(out.values())


def entry_shell_facts(spec: object | None) -> tuple[EntryShellFact[Any], ...]:
    """The shell commands the settings an entry sets decide (none without an entry)."""
    if spec is None:
        return ()
    return tuple(f for s in SETTINGS if s.is_set(spec) for f in s.reads.entry_shell)


def wants_network(spec: object | None) -> bool:
    """A setting the entry sets reads a `when_set` fact (the host's network state, read one host at a time)."""
    return any(f.when_set for f in api_facts(spec))


def decoders() -> dict[str, Decoder]:
    """Fact name -> how its value comes back from JSON (vgpuctl.settings.facts.HostFacts.from_dict)."""
    facts: list[GpuQuery[Any] | ShellFact[Any] | ApiFact[Any] | EntryShellFact[Any]] = [
        *gpu_queries(), *shell_facts(), *SHARED_API_FACTS, *(f for s in SETTINGS for f in s.reads.api),
        *(f for s in SETTINGS for f in s.reads.entry_shell),
    ]
    return {f.name: d for f in facts if (d := decoder(f)) is not None}


__all__ = [
    "GPU_SETTINGS", "SETTINGS", "SETTING_KINDS", "api_facts", "apply_steps", "decoders", "drift_fields",
    "entry_shell_facts",
    "gpu_queries", "gpu_query_fields", "host_properties", "setting_for_key", "setting_of", "shell_facts",
    "step_of", "wants_network",
]
