"""Each ESXi host's settings, merged like Ansible group and host variables.

A host takes its cluster's entry first, then its own `name:` entry on top: mappings (graphics, scheduler,
ssh, maintenance) merge key by key, scalars and lists from the host's entry replace the cluster's, and
`gpus` merges item by item on `select`. `merge_hosts` is pure: per host it returns the merged HostSpec and
where each value came from (FILE:LINE and entry); its errors name unknown clusters and hosts, and settings
that each entry allows alone but that their merge makes invalid, with both entries' lines.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import field
from typing import TypeVar

from pydantic import BaseModel

from vgpuctl.inventory.checks import host_problems
from vgpuctl.inventory.schema import HostSpec
from vgpuctl.inventory.yamlpos import KeyPath, format_path
from vgpuctl.lazyclass import dataclass
from vgpuctl.settings import SETTINGS
from vgpuctl.settings.base import names
from vgpuctl.settings.pergpu import GPUS_KEY

M = TypeVar("M", bound=BaseModel)
_SETTINGS = {s.key: s for s in SETTINGS}


@dataclass(frozen=True)
class Origin:
    """The inventory entry a value was set in."""

    entry: str  # "cluster GPU-Cluster" | "host esx-01.example.com"
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file or '<inventory>'}:{self.line}" if self.line else self.file or "<inventory>"
        return f"{where} ({self.entry})"


@dataclass
class MergedHost:
    name: str
    spec: HostSpec
    origins: dict[str, Origin] = field(default_factory=dict)  # "graphics.default_type", "gpus[all].mode", ...

    def origin(self, key: str) -> Origin | None:
        """Where `key` was set; None when it has its default."""
        return self.origins.get(key)


def merge_hosts(
    specs: Sequence[HostSpec], clusters: Mapping[str, Iterable[str]], hosts: Collection[str]
) -> tuple[dict[str, MergedHost], list[str]]:
    """Host name -> its merged settings, for every host an entry names directly or through its cluster."""
    layers: dict[str, list[HostSpec]] = {}
    errors: list[str] = []
    for spec in sorted(specs, key=lambda s: s.name is not None):  # cluster entries first, then host entries
        if spec.cluster is not None:
            if spec.cluster not in clusters:
                errors.append(f"cluster {spec.cluster}: not found (clusters: {names(clusters)})")
                continue
            for name in clusters[spec.cluster]:
                layers.setdefault(name, []).append(spec)
        elif spec.name is not None and spec.name in hosts:
            layers.setdefault(spec.name, []).append(spec)
        else:
            errors.append(f"host {spec.name}: not found (hosts: {names(hosts)})")
    merged: dict[str, MergedHost] = {}
    for name, entries in layers.items():
        result = merge_host(name, entries)
        errors += _conflicts(result, entries)
        merged[name] = result
    return merged, errors


def merge_host(name: str, entries: Sequence[HostSpec]) -> MergedHost:
    """The settings of host `name` from its entries, in order (its cluster's, then its own)."""
    origins: dict[str, Origin] = {}
    for entry in entries:
        origins.update(_origins_of(entry))
    if len(entries) == 1:
        return MergedHost(name, entries[0], origins)
    spec = entries[0]
    for entry in entries[1:]:
        spec = _merge(spec, entry)
    spec = spec.model_copy(update={"cluster": None, "name": name})
    spec._line, spec._index, spec._sources = entries[-1]._line, entries[-1]._index, entries[-1]._sources
    return MergedHost(name, spec, origins)


# ------------------------------------------------------------------------------------------------ merging


def _merge(base: M, over: M) -> M:
    """`over`'s explicitly set keys on top of `base`: a setting's own way when it has one (`gpus` by select),
    models recursively, the rest replaced."""
    values = {}
    for key in type(base).model_fields:
        ours, theirs = getattr(base, key), getattr(over, key)
        setting = _SETTINGS.get(key)
        own = setting.merge(ours, theirs) if setting is not None and key in over.model_fields_set else None
        if key not in over.model_fields_set:
            values[key] = ours
        elif own is not None:
            values[key] = own
        elif isinstance(ours, BaseModel) and isinstance(theirs, BaseModel):
            values[key] = _merge(ours, theirs)
        else:
            values[key] = theirs
    return type(base).model_construct(_fields_set=base.model_fields_set | over.model_fields_set, **values)


# ------------------------------------------------------------------------------------------------ origins


def _origins_of(entry: HostSpec) -> dict[str, Origin]:
    out: dict[str, Origin] = {}
    for key, path in _set_leaves(entry, ()):
        if key in ("cluster", "name"):
            continue
        file, line = entry.located(path)
        out[key] = Origin(entry.target, file, line)
    return out


def _set_leaves(model: BaseModel, path: KeyPath) -> Iterable[tuple[str, KeyPath]]:
    """(display key, key path in the entry) of every value the entry sets itself."""
    for key in type(model).model_fields:
        if key not in model.model_fields_set:
            continue
        value = getattr(model, key)
        here = (*path, key)
        if key == GPUS_KEY and isinstance(value, list):
            for j, g in enumerate(value):
                for sub, sub_path in _set_leaves(g, (*here, j)):
                    yield f"{GPUS_KEY}[{g.select}].{sub.rsplit('.', 1)[-1]}", sub_path
        elif isinstance(value, BaseModel):
            yield from _set_leaves(value, here)
        else:
            yield format_path(here), here


# ---------------------------------------------------------------------------------------------- conflicts


def possible_conflicts(specs: Sequence[HostSpec]) -> list[str]:
    """What `validate` can say about merges without vCenter: for each host entry over each cluster entry, the
    problems their merge would have if the host is in that cluster (plan, which knows the clusters, refuses them)."""
    out = []
    hosts = [s for s in specs if s.name is not None]
    for cluster in (s for s in specs if s.cluster is not None):
        for host in hosts:
            assert host.name is not None
            merged = merge_host(host.name, [cluster, host])
            out += [f"if host {host.name} is in cluster {cluster.cluster}: {c}" for c in _conflicts(merged,
                                                                                                 [cluster, host])]
    return out


def _conflicts(merged: MergedHost, entries: Sequence[HostSpec]) -> list[str]:
    """Problems of the merged settings that no entry has alone (validate reports those at their entry)."""
    if len(entries) < 2:
        return []
    alone = {message for e in entries for _, message in host_problems(e)}
    out = []
    for path, message in host_problems(merged.spec):
        if message in alone:
            continue
        lines = " and ".join(_where(e, _entry_path(merged.spec, e, path)) for e in entries)
        out.append(f"{lines}: host {merged.name}: {format_path(path)}: {message} "
                   f"(its {' and '.join(e.target for e in entries)} entries merged)")
    return out


def _entry_path(merged: HostSpec, entry: HostSpec, path: KeyPath) -> KeyPath:
    """A key path of the merged settings as a key path of one entry (GPU items are matched by select)."""
    if len(path) > 1 and path[0] == GPUS_KEY and isinstance(path[1], int):
        select = getattr(merged, GPUS_KEY)[path[1]].select
        j = next((k for k, g in enumerate(getattr(entry, GPUS_KEY)) if g.select == select), None)
        return (GPUS_KEY,) if j is None else (GPUS_KEY, j, *path[2:])
    return path


def _where(entry: HostSpec, path: KeyPath) -> str:
    file, line = entry.located(path)
    file = file or "<inventory>"
    return f"{file}:{line}" if line else file


