"""The JSON text of the documents vgpuctl prints (`-o json`) and keeps (the run history).

pydantic-core's serializer (pydantic's own, already a dependency) writes a plan of 1,000 VMs several times faster
than the standard library's, whose indenting encoder is pure Python. The layout is `json.dumps(indent=2)`'s; the
text is UTF-8 with non-ASCII characters as they are (not `\\uXXXX` escapes), and a few small floats are spelled
otherwise (`0.00001` and `1e-7`, where `json.dumps` writes `1e-05` and `1e-07`): the same values to any JSON reader.
Only plain data goes in (the reports' `to_dict()`): dicts with string keys, lists, strings, numbers, booleans,
None. pydantic-core is imported on the first document, not with this module: `vgpuctl --help` loads the CLI's
modules, and with them this one, and stays quick.
"""

from __future__ import annotations

from typing import Any


def document(data: Any) -> bytes:
    """A document as people and scripts read it on stdout: two-space indents, `"key": value`, UTF-8 whatever the
    terminal's encoding (JSON's own)."""
    from pydantic_core import to_json

    return to_json(data, indent=2)


def compact(data: Any) -> str:
    """The same as text without any space (the run history's records)."""
    from pydantic_core import to_json

    return to_json(data).decode("utf-8")
