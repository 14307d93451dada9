"""Every YAML file vgpuctl writes comes from here: data serialized by PyYAML's emitter, never text with values put in
by hand, so a name holding a newline, a colon or a quote stays a value and never becomes structure.

`dump(data)`: block style, collections of scalars on one line (`vgpus: {profile: grid_a100-40c, count: 1}`),
keys in the order given, strings that YAML 1.1 or 1.2 would read as something else quoted (`'on'`, `'1.10'`).
`comment(text, indent)`: a comment line for people, control and invisible characters (line breaks too) shown
escaped, so a comment can never end early and start structure.
`item(data, comments, indent)`: one sequence item with its comments, for documents written item by item.
`section(key, items)`: `key:` (a name the code chooses, never data) and its items, or `key: []`.
"""

from __future__ import annotations

from typing import Any

import yaml

from vgpuctl.visible import visible


class _Dumper(yaml.SafeDumper):
    """Sequences indented under their key (`gpus:` then `  - ...`), as people write inventories."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True  # a value used twice is written twice: vgpuctl's readers refuse anchors


class _Block(dict):  # type: ignore[type-arg]
    """A mapping written in block style even when its values are all scalars (a document, a list item)."""


_Dumper.add_representer(
    _Block, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=False)
)
# vgpuctl's StrEnums (vgpuctl.domain) are written as their values
_Dumper.add_multi_representer(str, lambda dumper, data: dumper.represent_str(str(data)))


def dump(data: Any, compact: bool = True) -> str:
    """`data` as YAML; a mapping at the top in block style, collections of scalars on one line when `compact`
    (inventories), every collection in block style otherwise (Kubernetes manifests)."""
    top = _Block(data) if isinstance(data, dict) else data
    return yaml.dump(top, Dumper=_Dumper, sort_keys=False, default_flow_style=None if compact else False,
                     width=1_000_000, allow_unicode=True)  # fmt: skip


def comment(text: str, indent: int = 0) -> str:
    """One `# ` line for `text`, indented, its line breaks and other control characters shown escaped."""
    return f"{' ' * indent}# {visible(text, keep_line_breaks=False)}".rstrip() + "\n"


def item(data: Any, comments: list[str] | tuple[str, ...] = (), indent: int = 2) -> str:
    """One sequence item (`- key: value ...`) indented by `indent`, after its comment lines."""
    pad = " " * indent
    lines = dump([_Block(data) if isinstance(data, dict) else data]).splitlines()
    return "".join(comment(c, indent) for c in comments) + "".join(f"{pad}{line}\n" for line in lines)


def section(key: str, items: list[tuple[list[str], Any]]) -> str:
    """`key:` and its items, each after its comment lines, or `key: []`."""
    if not key.isidentifier():
        raise ValueError(f"a section key is chosen by vgpuctl, not taken from data: {key!r}")
    if not items:
        return dump({key: []})
    return f"{key}:\n" + "".join(item(data, comments) for comments, data in items)
