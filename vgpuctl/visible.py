"""Text from outside (names vCenter gives, what an ESXi host answers) shown on a terminal or in a comment line with
its control and invisible characters written as escapes: a carriage return, a tab, an 8-bit control or a bidi
override (`\\r`, `\\t`, `\\x9b`, `\\u202e`) would move the cursor, hide what came before or reorder what follows.

One rule: what `str.isprintable` refuses (Unicode's "Other" and "Separator" categories except the ASCII space) is
written with Python's escapes; the line breaks a text is made of are kept where asked. A report made of lines
(`lines_text`) keeps its own line breaks only: one inside a line came from a value (a VM name vCenter gives with a
line break in it) and would start a line of its own that looks like the report's.
"""

from __future__ import annotations

from collections.abc import Iterable


def visible(text: str, keep_line_breaks: bool = True) -> str:
    """`text` with every character `str.isprintable` refuses escaped (line breaks kept unless asked otherwise)."""
    if text.isprintable():
        return text
    if not keep_line_breaks:
        return _escaped(text)
    return "\n".join(line if line.isprintable() else _escaped(line) for line in text.split("\n"))


def lines_text(lines: Iterable[str]) -> str:
    """Lines joined as a text, each with its own line breaks escaped too."""
    return "\n".join(visible(line, keep_line_breaks=False) for line in lines)


def _escaped(line: str) -> str:
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in line)
