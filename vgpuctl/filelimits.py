"""The limits on the files vgpuctl reads: inventories, capacity demand files, experiment files and saved plans,
and the files named by options and variables (password files, the ESXi host map, known_hosts, SSH keys,
address files, licence tokens, CA files).

A file larger than MAX_FILE_BYTES or nested deeper than MAX_NESTING levels is refused with one clear line, in
well under a second: at most MAX_FILE_BYTES + 1 bytes are ever read (so /dev/zero or a huge file is never read
whole), and the readers count the nesting while they parse (so thousands of nested brackets never exhaust the
stack). The files named by options and variables must also be regular files (`read_regular_*`): a FIFO, a
device, a socket or a directory is refused at once, before anything waits on it. Both limits are documented in
the README.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

MAX_FILE_BYTES = 16 * 1024 * 1024  # 16 MiB: a 100,000-VM inventory written out one VM per entry fits
MAX_NESTING = 64  # mappings and lists inside each other; vgpuctl's own formats need fewer than ten

TOO_LARGE = f"the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB, the most vgpuctl reads from one file"
TOO_DEEP = f"nested more than {MAX_NESTING} levels deep, the most vgpuctl reads"


class FileTooLarge(Exception):
    """The file holds more than MAX_FILE_BYTES bytes."""

    def __init__(self) -> None:
        super().__init__(TOO_LARGE)


def read_text(path: str | Path, limit: int = MAX_FILE_BYTES) -> str:
    """The file's UTF-8 text, line ends read as a text file's are (CR LF and CR become LF), reading at most
    `limit` + 1 bytes. Raises FileTooLarge past `limit`; OSError and UnicodeDecodeError as Path.read_text does."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge
    return universal_newlines(data.decode("utf-8"))


class NotAFile(Exception):
    """The path names a FIFO, a device, a socket or a directory, where vgpuctl reads only a regular file."""

    def __init__(self, mode: int) -> None:
        super().__init__(f"{_kind(mode)}, not a regular file (vgpuctl reads this only from a file)")


class TooDeep(Exception):
    """The document is nested deeper than MAX_NESTING levels."""

    def __init__(self) -> None:
        super().__init__(TOO_DEEP)


def require_regular(path: str | Path) -> None:
    """NotAFile unless `path` is a regular file (or a link to one); OSError as os.stat raises it. For a file
    another reader opens (a CA file): nothing is opened here."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotAFile(mode)


def open_regular(path: str | Path) -> BinaryIO:
    """A regular file opened for reading in binary. Anything else is refused (NotAFile) without waiting on it: the
    path is checked before it is opened, opened without waiting for a writer, and the open file checked again
    (the path may have changed in between). OSError as open raises it."""
    require_regular(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    f = os.fdopen(fd, "rb")
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        f.close()
        raise NotAFile(mode)
    return f


def read_regular_bytes(path: str | Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """At most `limit` bytes of a regular file (open_regular); FileTooLarge past `limit`."""
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge
    return data


def read_regular_text(path: str | Path, limit: int = MAX_FILE_BYTES) -> str:
    """read_regular_bytes as UTF-8 text, line ends read as a text file's are; UnicodeDecodeError when it is not."""
    return universal_newlines(read_regular_bytes(path, limit).decode("utf-8"))


def parse_json(text: str) -> Any:
    """JSON within the limits: FileTooLarge past MAX_FILE_BYTES, TooDeep past MAX_NESTING (Python's decoder
    recurses, so thousands of brackets are caught as they exhaust the stack, fewer by counting); ValueError when
    it is not JSON or holds NaN or Infinity, which JSON has no numbers for."""
    if len(text) > MAX_FILE_BYTES:
        raise FileTooLarge
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise TooDeep from None
    if nesting(data) > MAX_NESTING:
        raise TooDeep
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def universal_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def text_position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset in text whose line ends are LF (universal_newlines)."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def nesting(data: Any) -> int:
    """How many mappings and lists deep `data` (plain JSON or YAML data) goes; counted without recursion."""
    deepest = 0
    for depth in _depths(data):
        deepest = max(deepest, depth)
    return deepest


def _depths(data: Any) -> Iterator[int]:
    todo: list[tuple[Any, int]] = [(data, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            yield depth + 1
            todo.extend((child, depth + 1) for child in item)
