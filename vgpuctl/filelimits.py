"""The limits on the files vgpuctl reads: inventories, capacity demand files, experiment files and saved plans.

A file larger than MAX_FILE_BYTES or nested deeper than MAX_NESTING levels is refused with one clear line, in
well under a second: at most MAX_FILE_BYTES + 1 bytes are ever read (so /dev/zero or a huge file is never read
whole), and the readers count the nesting while they parse (so thousands of nested brackets never exhaust the
stack). Both limits are documented in the README.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def universal_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


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
