"""Host names as people type them: the full name vCenter knows (`esx-01.gpu.sim`), or its short name (`esx-01`)
when exactly one host has it; names with glob characters (`esx-0*`) match every host they fit. Pure."""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Iterable

from vgpuctl.errors import NotFound, UsageError

GLOB = frozenset("*?[")


def short(name: str) -> str:
    """`esx-01` of `esx-01.gpu.sim`; an IP address stays whole."""
    head = name.split(".", 1)[0]
    return name if head.isdigit() else head


def is_glob(pattern: str) -> bool:
    return any(c in GLOB for c in pattern)


def host_named(name: str, hosts: Collection[str]) -> str:
    """The host `name` means: itself, or the one host whose short name it is. NotFound names the hosts; a short
    name several hosts share is a UsageError naming them."""
    if name in hosts:
        return name
    lowered = {h.lower(): h for h in hosts}
    if name.lower() in lowered:
        return lowered[name.lower()]
    same = sorted(h for h in hosts if short(h).lower() == name.lower())
    if len(same) == 1:
        return same[0]
    if same:
        raise UsageError(f"host {name!r} is the short name of {len(same)} hosts ({', '.join(same)}): "
                         "give the full name")
    raise NotFound(f"host {name!r} not found (hosts: {listing(hosts)})")


def matching(pattern: str, names: Iterable[str], *, short_names: bool = False) -> list[str]:
    """The names a pattern (a name or a glob) matches, case-insensitively; with `short_names`, a host's short
    name matches as well."""
    found = []
    for name in names:
        candidates = [name, short(name)] if short_names else [name]
        if any(fnmatch.fnmatchcase(c.lower(), pattern.lower()) for c in candidates):
            found.append(name)
    return sorted(found)


def listing(names: Iterable[str], limit: int = 8) -> str:
    ordered = sorted(names)
    more = f", ... ({len(ordered) - limit} more)" if len(ordered) > limit else ""
    return ", ".join(ordered[:limit]) + more if ordered else "none"
