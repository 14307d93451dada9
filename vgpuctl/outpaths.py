"""Paths vgpuctl writes to (or reads back), and how it writes them.

A name from data (a manifest, a variant, a workload key, a record's output file) is joined to its folder, resolved,
and refused when the result is not inside that folder (`..`, an absolute name, a symbolic link pointing out).
An output never overwrites an input: `refuse_overlaps` refuses, before anything runs, an output path that names a
file the command reads (the inventory, a saved plan, a demand file) or another output. A file is written whole or
not at all (`write_whole`: a temporary file beside it, renamed over it), and a write that fails (a full disk, a
read-only file) is one line naming the option.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from vgpuctl.errors import OutputError, UsageError


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


# ------------------------------------------------------------------------------------- outputs and inputs


def same_file(a: Path | str, b: Path | str) -> bool:
    """Whether two paths name one file: the same path once resolved (links followed), or, both existing, one file
    under two names (a hard link)."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def refuse_overlaps(outputs: Mapping[str, Path | str | None], inputs: Mapping[str, Path | str | None]) -> None:
    """UsageError when an output (option -> path) names an input (what it is -> path) or another output; None
    values are left out. Called before anything runs."""
    given = [(option, Path(path)) for option, path in outputs.items() if path is not None]
    for i, (option, path) in enumerate(given):
        for what, source in inputs.items():
            if source is not None and same_file(path, source):
                raise UsageError(f"{option} {path} is {what}, which this command reads: vgpuctl never writes over a "
                                 "file it reads; give another path")
        for other, other_path in given[i + 1:]:
            if same_file(path, other_path):
                raise UsageError(f"{option} and {other} name the same file ({path}): give each its own")


def refuse_inside(folder: Path | str, option: str, inputs: Mapping[str, Path | str | None]) -> None:
    """UsageError when an input lies in `folder`, a folder vgpuctl writes its files into."""
    base = Path(folder).resolve()
    for what, source in inputs.items():
        if source is not None and base in Path(source).resolve().parents:
            raise UsageError(f"{option} {folder} holds {what} ({source}), and vgpuctl writes its files there: give a "
                             "folder of their own")


def write_whole(path: Path | str, content: str | bytes, option: str, mode: int | None = None) -> None:
    """Write `content` (text as UTF-8) to `path` whole or not at all: into a temporary file in the same folder,
    flushed to disk, then renamed over `path` (a link is followed: the file it names is replaced). A path that
    exists and is no regular file (/dev/stdout, a named pipe) is written to directly. `mode`: the new file's
    permissions (default: an existing file's, else 0o666 less the umask). Any failure is one OutputError line
    naming `option`; no temporary file is left."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    target = Path(path)
    try:
        real = target.resolve()
        existing = os.stat(real) if real.exists() else None
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            with open(real, "wb") as stream:
                stream.write(data)
            return
        if mode is None and existing is not None:
            mode = stat.S_IMODE(existing.st_mode)
        _replace(real, data, mode)
    except OSError as err:
        raise OutputError(f"{option} {target}: {err.strerror or err}") from None


def _replace(real: Path, data: bytes, mode: int | None) -> None:
    tmp = real.with_name(f".{real.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)  # the umask narrowed what os.open was given
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, real)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
