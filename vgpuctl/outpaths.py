"""Paths vgpuctl writes to (or reads back) below a folder it was given: a name from data (a manifest, a variant,
a workload key, a record's output file) is joined to the folder, resolved, and refused when the result is not
inside that folder (`..`, an absolute name, a symbolic link pointing out)."""

from __future__ import annotations

from pathlib import Path

from vgpuctl.errors import UsageError


class OutsideFolder(UsageError):
    """A path made from data would leave the folder it belongs in."""


def inside(folder: Path | str, *names: str) -> Path:
    """`folder/names...` resolved; OutsideFolder when it is not below `folder` (also resolved)."""
    base = Path(folder).resolve()
    path = base.joinpath(*names).resolve()
    if path == base or base not in path.parents:
        shown = "/".join(names)
        raise OutsideFolder(f"{shown!r} would be written outside {base} (a name must stay inside its folder)")
    return path
