"""YAML files read into plain data plus the position of every key path, for FILE:LINE:COL errors.

`read_yaml(path)` / `read_yaml_text(text, file)` return a `PositionedYaml`: the document as plain Python (dicts,
lists, str, int, float, bool, None) and two maps from key paths (`("vms", 0, "name")`) to 1-based (line, column):
`pos` for values (a nested mapping or sequence is placed at its key) and `keypos` for keys. YAML anchors and
aliases are refused. `schema_errors` turns a pydantic ValidationError on that data into InventoryErrors located
`FILE:LINE:COL: key.path: message`. Inventory, demand and experiment files are read with it.

Two readers give the same result: a fast one over libyaml's event stream (when PyYAML's C binding is present)
and ruamel.yaml's round-trip loader (YAML 1.2), which decides every case the fast one is unsure of.
"""

from __future__ import annotations

import datetime
import difflib
import functools
import re
import types
import typing
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from vgpuctl import filelimits
from vgpuctl.errors import InventoryError
from vgpuctl.lazyclass import dataclass

Pos = tuple[int, int]  # 1-based line, column
KeyPath = tuple[str | int, ...]  # ("vms", 0, "vgpus", 1, "profile")
NO_WRAPPED: frozenset[KeyPath] = frozenset()


@dataclass
class PositionedYaml:
    """One YAML document as plain data, with where each of its key paths is in the file."""

    file: str
    data: Any
    pos: dict[KeyPath, Pos] = field(default_factory=dict)  # values; a nested mapping or sequence: its key
    keypos: dict[KeyPath, Pos] = field(default_factory=dict)  # keys
    size: int = 0  # bytes read from the file (0: not read from a file)

    def where(self, path: KeyPath) -> tuple[int | None, int | None]:
        """(line, col) of `path`, or of its nearest enclosing key path that has one."""
        return lookup(self.pos, path)

    def error(self, path: KeyPath, message: str, wrapped: AbstractSet[KeyPath] = NO_WRAPPED) -> InventoryError:
        """`FILE:LINE:COL: key.path: message` for `path`."""
        return Sources(self, wrapped).error(path, message)

    def schema_errors(self, exc: ValidationError, root: type[BaseModel] | None = None,
                      wrapped: AbstractSet[KeyPath] = NO_WRAPPED) -> list[InventoryError]:
        """Each error of a model validated from `data`, located (see the module function)."""
        return Sources(self, wrapped).schema_errors(exc, root)


@dataclass(frozen=True)
class Graft:
    """A part of a document that was put together from several files: the file it came from and its key path
    there."""

    doc: PositionedYaml
    at: KeyPath


class Sources:
    """Where each part of a document's data is written. One file (`Sources(doc)`), or several put together (an
    inventory's includes, overlays and values files): each part of the data is grafted from its file at a key
    path there, and a key path of the data is found in the file of the nearest graft at or above it. A path
    under a `wrapped` one (a mapping read as a one-item list: `vgpus: {profile, count}`) skips that list's [0]
    in the file."""

    def __init__(self, doc: PositionedYaml | None = None, wrapped: AbstractSet[KeyPath] = NO_WRAPPED):
        self.roots: dict[KeyPath, Graft] = {} if doc is None else {(): Graft(doc, ())}
        self.wrapped: set[KeyPath] = set(wrapped)
        self._by_head: dict[KeyPath, set[KeyPath]] = {}  # grafts by their first two keys, to replace them fast

    @property
    def file(self) -> str | None:
        """The file the document's root is in (an inventory's top file)."""
        root = self.roots.get(())
        return root.doc.file if root is not None else None

    def graft(self, path: KeyPath, doc: PositionedYaml, at: KeyPath) -> None:
        """The data at `path` is now `doc`'s at `at`; grafts below `path` no longer apply."""
        head = path[:2]
        if len(path) < 2:
            below = [r for h, rs in self._by_head.items() if h[:len(path)] == path for r in rs]
        else:
            below = [r for r in self._by_head.get(head, ()) if len(r) > len(path) and r[:len(path)] == path]
        for root in below:
            del self.roots[root]
            self._by_head[root[:2]].discard(root)
        self.roots[path] = Graft(doc, at)
        self._by_head.setdefault(head, set()).add(path)

    def local(self, path: KeyPath) -> tuple[Graft | None, KeyPath]:
        """The graft `path` is in and its key path in that graft's file."""
        if self.wrapped:  # grafts and files know the mapping, not the one-item list it was read as
            path = tuple(part for i, part in enumerate(path)
                         if not (part == 0 and type(part) is int and path[:i] in self.wrapped))
        for n in range(len(path), -1, -1):
            graft = self.roots.get(path[:n])
            if graft is not None:
                return graft, (*graft.at, *path[n:])
        return None, path

    def where(self, path: KeyPath, key: bool = False) -> tuple[str | None, KeyPath, int | None, int | None]:
        """(file, key path in that file, line, col) of `path`: of its key when `key` and it has one, else of its
        value; a path with no position of its own takes its nearest enclosing one's."""
        graft, local = self.local(path)
        if graft is None:
            return None, path, None, None
        table = graft.doc.keypos if key and local in graft.doc.keypos else graft.doc.pos
        line, col = lookup(table, local)
        return graft.doc.file, local, line, col

    def error(self, path: KeyPath, message: str, *, key: bool = False, drop: int = 0) -> InventoryError:
        """`FILE:LINE:COL: key.path: message` for `path`, the key path as the file holding it writes it (less its
        last `drop` keys)."""
        file, local, line, col = self.where(path, key)
        shown = format_path(local[:len(local) - drop] if drop else local)
        return InventoryError(f"{shown}: {message}" if shown else message, file or "<inventory>", line, col)

    def schema_errors(self, exc: ValidationError, root: type[BaseModel] | None = None) -> list[InventoryError]:
        """Each error of a model validated from the data, located (see the module function schema_errors)."""
        out: list[InventoryError] = []
        for err in exc.errors(include_url=False):
            raw = tuple(err["loc"])
            # An unknown key is the user's own text: never mistake it for a type tag.
            loc = (*_clean_loc(raw[:-1]), raw[-1]) if err["type"] == "extra_forbidden" else _clean_loc(raw)
            message = _schema_message({**err, "loc": loc}, root)
            if err["type"] == "missing":
                out.append(self.error(loc[:-1], message))
            elif err["type"] == "extra_forbidden":
                out.append(self.error(loc, message, key=True, drop=1))
            else:
                out.append(self.error(loc, message))
        return out


class InventoryErrorLocation:
    """Turns a key path into `FILE:LINE:COL: path: message` using the positions recorded at load time."""

    def __init__(self, sources: Sources | None, path: KeyPath):
        self.sources, self.path = sources, path

    def error(self, message: str) -> InventoryError:
        if self.sources is None:
            shown = format_path(self.path)
            return InventoryError(f"{shown}: {message}" if shown else message, "<inventory>")
        return self.sources.error(self.path, message)


def format_path(path: KeyPath, wrapped: AbstractSet[KeyPath] = NO_WRAPPED) -> str:
    """`vms[3].vgpus[0].count`; a path under a `wrapped` one (a mapping read as a one-item list) omits the [0]."""
    out = ""
    for i, part in enumerate(path):
        if isinstance(part, int):
            if tuple(path[:i]) in wrapped:
                continue  # `vgpus: {profile, count}` was written as a mapping: no [0] in messages
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def lookup(pos: Mapping[KeyPath, Pos], path: KeyPath) -> tuple[int | None, int | None]:
    """(line, col) of `path` in `pos`, or of its nearest enclosing key path that has one."""
    p = tuple(path)
    while p:
        if p in pos:
            return pos[p]
        p = p[:-1]
    return pos.get((), (None, None))  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------- YAML loading


def _plain(node: Any, path: KeyPath, pos: dict[KeyPath, Pos], keypos: dict[KeyPath, Pos],
           file: str = "<inventory>") -> Any:
    """ruamel's round-trip objects -> plain Python, recording 1-based positions by key path."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(node, CommentedMap):
        out: dict[str, Any] = {}
        for k in node:
            kl, kc = node.lc.key(k)
            if not isinstance(k, str | int | float | bool) and k is not None:  # `? [a, b]`: a list or mapping as a key
                raise InventoryError("a key must be a plain name, not a list or a mapping", file, kl + 1, kc + 1)
            kp = (*path, str(k))
            vl, vc = node.lc.value(k)
            keypos[kp] = (kl + 1, kc + 1)
            value = node[k]
            _refuse_anchor(value, (vl + 1, vc + 1), file)
            # A nested block mapping/sequence is best pointed at by its key; scalars by their value.
            pos[kp] = (kl + 1, kc + 1) if isinstance(value, CommentedMap | CommentedSeq) else (vl + 1, vc + 1)
            out[str(k)] = _plain(value, kp, pos, keypos, file)
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for i, item in enumerate(node):
            il, ic = node.lc.item(i)
            pos[(*path, i)] = (il + 1, ic + 1)
            _refuse_anchor(item, (il + 1, ic + 1), file)
            items.append(_plain(item, (*path, i), pos, keypos, file))
        return items
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def _refuse_anchor(node: Any, at: Pos, file: str) -> None:
    """ruamel keeps an anchored node once; its first visit is the anchor, so an alias bomb is never expanded. A tag
    (`!x [1]`, `!!python/object:...`) is refused here too: an inventory is plain data, and ruamel keeps a tagged
    node as an object of its own."""
    anchor = getattr(getattr(node, "anchor", None), "value", None)
    if anchor is not None:
        raise InventoryError(_anchor_message("&", anchor), file, *at)
    tag = getattr(node, "tag", None)
    tag = getattr(tag, "value", tag)
    if isinstance(tag, str) and tag:
        raise InventoryError(f"YAML tag {tag}: tags are not allowed in vgpuctl's files (write the value plainly)",
                             file, *at)


def _anchor_message(sigil: str, name: str) -> str:
    return (f"YAML anchor or alias {sigil}{name}: anchors and aliases are not allowed in vgpuctl's files "
            "(write the values out; in an inventory, a name range makes similar VMs)")


def read_yaml(path: str | Path) -> PositionedYaml:
    """Read and parse a YAML file; InventoryError (one line, located where YAML knows where) when it cannot."""
    file = str(path)
    try:
        text = filelimits.read_text(path)
    except FileNotFoundError:
        raise InventoryError("inventory file not found", file) from None
    except filelimits.FileTooLarge as exc:
        raise InventoryError(str(exc), file) from None
    except UnicodeDecodeError as exc:
        line, col = _byte_position(exc.object, exc.start)
        raise InventoryError(f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x}): vgpuctl reads YAML files as "
                             "UTF-8", file, line, col) from None
    except OSError as exc:
        raise InventoryError(f"cannot read the inventory: {exc.strerror or exc}", file) from None
    doc = read_yaml_text(text, file)
    doc.size = len(text.encode("utf-8"))
    return doc


def _byte_position(data: bytes, offset: int) -> Pos:
    """1-based line and column (in characters) of a byte offset, line ends read as a text file's are."""
    before = filelimits.universal_newlines(data[:offset].decode("utf-8", "replace"))
    return filelimits.text_position(before, len(before))


def read_yaml_text(text: str, file: str) -> PositionedYaml:
    """Parse YAML text; `file` names it in errors. Line ends are read as a text file's are (CR LF, CR: LF).
    Nesting deeper than filelimits.MAX_NESTING is refused where it starts."""
    text = filelimits.universal_newlines(text)
    try:
        data, pos, keypos = _fast_yaml(text, file)
    except _NotFast:
        data, pos, keypos = _ruamel_yaml(text, file)
    return PositionedYaml(file, data, pos, keypos)


def _ruamel_yaml(text: str, file: str) -> tuple[Any, dict[KeyPath, Pos], dict[KeyPath, Pos]]:
    """The reference reader: ruamel.yaml's round-trip loader (YAML 1.2), the source of every YAML error."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.reader import ReaderError

    yaml = YAML(typ="rt")
    yaml.Scanner, yaml.Composer = _depth_counting_readers()
    try:
        data = yaml.load(text)
    except _SecondDocument as exc:
        raise InventoryError(SECOND_DOCUMENT, file, *exc.at) from None
    except _TooDeep as exc:
        raise InventoryError(filelimits.TOO_DEEP, file, *exc.at) from None
    except ReaderError as exc:  # a character YAML does not allow (NUL, other control characters)
        line, col = filelimits.text_position(text, exc.position)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise InventoryError(f"invalid YAML: the character U+{code:04X} is not allowed in YAML text", file, line,
                             col) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(s for s in (exc.problem, exc.context) if s) or "invalid YAML"
        if mark is None:
            raise InventoryError(f"invalid YAML: {message}", file) from None
        raise InventoryError(f"invalid YAML: {message}", file, mark.line + 1, mark.column + 1) from None
    except YAMLError as exc:
        raise InventoryError(f"invalid YAML: {exc}", file) from None
    pos: dict[KeyPath, Pos] = {(): (1, 1)}
    keypos: dict[KeyPath, Pos] = {}
    _refuse_anchor(data, (1, 1), file)
    plain = _plain(data, (), pos, keypos, file)
    return plain, pos, keypos


class _MarkedStop(Exception):
    """The reader stops at a mark of ruamel's; `at` is its 1-based line and column."""

    def __init__(self, mark: Any):
        super().__init__()
        self.at: Pos = (mark.line + 1, mark.column + 1)


class _TooDeep(_MarkedStop):
    """A mapping or list nested deeper than MAX_NESTING; `at` is where it starts."""


class _SecondDocument(_MarkedStop):
    """A second YAML document (after `---`) where a file holds one; `at` is where it starts."""


SECOND_DOCUMENT = "a second YAML document starts here: a file holds one (remove this '---' and what follows it)"


@functools.cache
def _depth_counting_readers() -> tuple[Any, Any]:
    """ruamel's round-trip scanner and composer, refusing a mapping or list nested deeper than MAX_NESTING where
    it starts. The composer counts every level, before its recursion could come near Python's limit. The scanner
    counts flow levels (`[`, `{`) only, which it reads ahead of the composer: on a line of thousands of brackets,
    its look-ahead for simple keys would otherwise take about a second before the composer saw the 65th (it may
    then name a later bracket than the composer would, where block levels are around them)."""
    from ruamel.yaml.composer import Composer
    from ruamel.yaml.scanner import RoundTripScanner

    class DepthCountingScanner(RoundTripScanner):  # type: ignore[misc]
        def fetch_flow_collection_start(self, token_class: Any, to_push: str) -> None:
            if self.flow_level >= filelimits.MAX_NESTING:
                raise _TooDeep(self.reader.get_mark())
            super().fetch_flow_collection_start(token_class, to_push)

    class DepthCountingComposer(Composer):  # type: ignore[misc]
        nesting = 0

        def get_single_node(self) -> Any:
            """ruamel's, with a second document refused in words of its own (ruamel's read "but found another
            document expected a single document in the stream" once joined)."""
            from ruamel.yaml.events import StreamEndEvent

            self.parser.get_event()  # STREAM-START
            document = None if self.parser.check_event(StreamEndEvent) else self.compose_document()
            if not self.parser.check_event(StreamEndEvent):
                raise _SecondDocument(self.parser.get_event().start_mark)
            self.parser.get_event()  # STREAM-END
            return document

        def compose_sequence_node(self, anchor: Any) -> Any:
            return self._nested(super().compose_sequence_node, anchor)

        def compose_mapping_node(self, anchor: Any) -> Any:
            return self._nested(super().compose_mapping_node, anchor)

        def _nested(self, compose: Any, anchor: Any) -> Any:
            if self.nesting >= filelimits.MAX_NESTING:
                raise _TooDeep(self.parser.peek_event().start_mark)
            self.nesting += 1
            try:
                return compose(anchor)
            finally:
                self.nesting -= 1

    return DepthCountingScanner, DepthCountingComposer


# ----------------------------------------------------------------------------- fast path (libyaml events)
#
# ruamel's pure-Python round-trip loader takes about a second for an inventory of 1,000 VMs. When PyYAML's
# libyaml binding is present, the same file is first read from libyaml's event stream (C), recording the same
# positions. Scalars whose meaning depends on ruamel's YAML 1.2 rules (numbers, dates, block scalars) are
# resolved by ruamel itself one at a time; a parse error, duplicate key, tag, directive, tab or other form
# where libyaml and ruamel could disagree sends the whole file to ruamel, so errors and values stay ruamel's.
# Anchors and aliases are refused by both readers (an alias bomb is never expanded).


class _NotFast(Exception):
    """The fast reader is unsure about this file; ruamel reads it."""


_NULLS = frozenset({"~", "null", "Null", "NULL"})
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_DEC_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_DEC_FLOAT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)\.[0-9]+")
_SPECIAL = frozenset({"<<", "=", ".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN"})
_NEVER_PLAIN = frozenset("!&*|>%@`")  # the parser never lets a plain scalar start so
# Tabs (libyaml accepts some that ruamel refuses), YAML 1.1-only line breaks, a BOM, a carriage return.
_UNSURE_CHARS = ("\t", "\x85", "\u2028", "\u2029", "\ufeff", "\r")


_WORDS: dict[str, Any] = {**dict.fromkeys(_NULLS), **_BOOLS}
# a plain scalar starting otherwise is a null, a boolean or a string (the common case, decided by one lookup)
_MAY_BE_TYPED = frozenset("+-.0123456789<=") | _NEVER_PLAIN


def _plain_scalar(value: str) -> Any:
    if not value:
        raise _NotFast  # an empty value: ruamel places it at the next token
    if value[0] not in _MAY_BE_TYPED:
        return _WORDS.get(value, value)
    if _DEC_INT.fullmatch(value):
        return int(value)
    if _DEC_FLOAT.fullmatch(value):
        return float(value)
    if _maybe_typed(value):
        return _typed_scalar(value)
    return value


@functools.lru_cache(maxsize=4096)
def _typed_scalar(value: str) -> Any:
    """A plain scalar that may be a number, date or other typed value, resolved by ruamel itself (YAML 1.2)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="rt").load(f"v: {value}\n")
    except (YAMLError, ValueError):  # ValueError: ruamel's float constructor on forms like `._`
        raise _NotFast from None
    if not isinstance(data, dict) or list(data) != ["v"]:
        raise _NotFast
    return _plain(data["v"], (), {}, {})


def _maybe_typed(value: str) -> bool:
    """Could a YAML 1.2 resolver of ruamel's (number, date, merge key, value key) claim this plain scalar?"""
    first = value[0]
    if first in "0123456789":
        return True
    if first in "+-.":
        return value[1:2] in ("", *"0123456789._") or value in _SPECIAL
    if first in "<=":
        return value in _SPECIAL
    return first in _NEVER_PLAIN


def _fast_yaml(text: str, file: str = "<inventory>") -> tuple[Any, dict[KeyPath, Pos], dict[KeyPath, Pos]]:
    try:
        from yaml import CSafeLoader  # libyaml; without it the pure-Python PyYAML would be no faster
    except ImportError:
        raise _NotFast from None
    if any(c in text for c in _UNSURE_CHARS):
        raise _NotFast
    events, anchored = _events(CSafeLoader(text), file)
    kinds = [type(e).__name__ for e in events[:2]] + [type(e).__name__ for e in events[-2:]]
    if len(events) < 5 or kinds != ["StreamStartEvent", "DocumentStartEvent", "DocumentEndEvent", "StreamEndEvent"]:
        raise _NotFast  # empty stream, several documents: ruamel words those
    _refuse_anchor_event(anchored, file)
    doc = events[1]
    if doc.version is not None or doc.tags:
        raise _NotFast
    pos: dict[KeyPath, Pos] = {(): (1, 1)}
    keypos: dict[KeyPath, Pos] = {}
    reader = _EventReader(events, pos, keypos, text)
    reader.i = 2
    data = reader.node(())
    if reader.i != len(events) - 2:
        raise _NotFast
    return data, pos, keypos


def _events(loader: Any, file: str) -> tuple[list[Any], Any]:
    """libyaml's events and the first one with an anchor or alias (None without), refusing a mapping or list
    nested deeper than MAX_NESTING at its start (in a second document, ruamel refuses the file for having
    several)."""
    import yaml

    depth_change = {yaml.MappingStartEvent: 1, yaml.SequenceStartEvent: 1, yaml.MappingEndEvent: -1,
                    yaml.SequenceEndEvent: -1}
    nodes = frozenset({yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent, yaml.AliasEvent})
    events: list[Any] = []
    anchored = None
    depth = 0
    try:
        while (event := loader.get_event()) is not None:
            kind = type(event)
            change = depth_change.get(kind)
            if change is not None:
                depth += change
                if depth > filelimits.MAX_NESTING:
                    _too_deep(event, events, file)
            if anchored is None and kind in nodes and event.anchor is not None:
                anchored = event
            events.append(event)
    except yaml.YAMLError:
        raise _NotFast from None
    finally:
        loader.dispose()
    return events, anchored


def _too_deep(event: Any, before: list[Any], file: str) -> None:
    import yaml

    if any(isinstance(e, yaml.DocumentEndEvent) for e in before):
        raise _NotFast
    mark = event.start_mark
    raise InventoryError(filelimits.TOO_DEEP, file, mark.line + 1, mark.column + 1)


def _refuse_anchor_event(event: Any, file: str) -> None:
    """The first anchor or alias of a parsed stream is an error at its own position."""
    import yaml

    if event is None:
        return
    mark = event.start_mark
    sigil = "*" if isinstance(event, yaml.AliasEvent) else "&"
    raise InventoryError(_anchor_message(sigil, event.anchor), file, mark.line + 1, mark.column + 1)


def _is_empty(event: Any) -> bool:
    """An empty plain scalar with no anchor or tag (the caller knows it is a scalar)."""
    return not event.style and event.value == "" and event.anchor is None and event.tag is None


def _at(mark: Any) -> Pos:
    return (mark.line, mark.column)


class _EventReader:
    def __init__(self, events: list[Any], pos: dict[KeyPath, Pos], keypos: dict[KeyPath, Pos], text: str = ""):
        import yaml

        self.events, self.pos, self.keypos, self.i = events, pos, keypos, 0
        self.lines = text.split("\n")
        self.yaml = yaml  # its event classes, looked up once per read rather than imported per node

    def _block_scalar(self, event: Any) -> Any:
        """A literal or folded scalar, folded by ruamel itself from its own lines of the file."""
        start, end = event.start_mark, event.end_mark
        header = self.lines[start.line][start.column:]
        if any(c.isdigit() for c in header.split("#", 1)[0]):
            raise _NotFast  # an indentation indicator counts from the parent's indentation
        raw = "\n".join([header, *self.lines[start.line + 1:end.line]])
        return _typed_scalar(raw)

    def _nothing_after(self, mark: Any) -> bool:
        return mark.line < len(self.lines) and not self.lines[mark.line][mark.column:].strip()

    def node(self, path: KeyPath) -> Any:
        yaml = self.yaml
        event = self.events[self.i]
        self.i += 1
        if getattr(event, "anchor", None) is not None or getattr(event, "tag", None) is not None:
            raise _NotFast
        if type(event) is yaml.ScalarEvent:
            return self._scalar(event)
        if type(event) is yaml.MappingStartEvent:
            first = self.events[self.i]
            if event.flow_style and _at(first.start_mark) == _at(event.start_mark):
                raise _NotFast  # a single-pair mapping inside a flow sequence (`[a: b]`): not always ruamel's
            return self.mapping(path)
        if type(event) is yaml.SequenceStartEvent:
            return self.sequence(path)
        raise _NotFast  # aliases

    def _scalar(self, event: Any) -> Any:
        style = event.style
        if not style:  # plain: '' from libyaml, None from PyYAML's own parser
            return _plain_scalar(event.value)
        if style == "'" or style == '"':
            return event.value
        return self._block_scalar(event)

    def mapping(self, path: KeyPath) -> dict[str, Any]:
        # the loop of a 1,000-VM inventory: each key and plain value read here, not through node()
        MappingEndEvent, ScalarEvent = self.yaml.MappingEndEvent, self.yaml.ScalarEvent
        out: dict[str, Any] = {}
        events, pos, keypos = self.events, self.pos, self.keypos
        i = self.i
        while type(key_event := events[i]) is not MappingEndEvent:
            if type(key_event) is not ScalarEvent or key_event.anchor is not None or key_event.tag:
                raise _NotFast
            style = key_event.style
            key = _plain_scalar(key_event.value) if not style else key_event.value
            if not isinstance(key, str) or key in out or key == "<<" or style not in (None, "", "'", '"'):
                raise _NotFast  # duplicate keys are ruamel's error; non-string keys its str()
            i += 1
            kp = (*path, key)
            kmark = key_event.start_mark
            kpos = (kmark.line + 1, kmark.column + 1)
            keypos[kp] = kpos
            value_event = events[i]
            if type(value_event) is ScalarEvent:
                vmark = value_event.start_mark
                if _is_empty(value_event):  # `key:` alone is null, placed (as ruamel does) at the next token
                    if not self._nothing_after(vmark):
                        raise _NotFast  # a comment or flow punctuation on the line: ruamel's placement differs
                    vmark = events[i + 1].start_mark
                    pos[kp] = (vmark.line + 1, vmark.column + 1)
                    i += 1
                    out[key] = None
                    continue
                pos[kp] = (vmark.line + 1, vmark.column + 1)
                if value_event.anchor is not None or value_event.tag is not None:
                    raise _NotFast
                out[key] = self._scalar(value_event)
                i += 1
                continue
            pos[kp] = kpos  # a nested mapping/sequence is pointed at by its key
            self.i = i
            out[key] = self.node(kp)
            i = self.i
        self.i = i + 1
        return out

    def sequence(self, path: KeyPath) -> list[Any]:
        SequenceEndEvent = self.yaml.SequenceEndEvent
        items: list[Any] = []
        events, pos = self.events, self.pos
        while type(event := events[self.i]) is not SequenceEndEvent:
            mark = event.start_mark
            ip = (*path, len(items))
            pos[ip] = (mark.line + 1, mark.column + 1)
            items.append(self.node(ip))
        self.i += 1
        return items


# --------------------------------------------------------------------------------------- schema errors


def _model_at(root: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class whose fields live at `loc` under `root` (for 'did you mean')."""
    model: Any = root
    for part in loc:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        if isinstance(part, int):
            continue
        info = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if info is None:
            return None
        model = _unwrap(info.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    while True:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        origin = typing.get_origin(tp)
        if origin in (list, typing.Union, types.UnionType):
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            if models:
                tp = models[0]
                continue
            generic = [a for a in args if typing.get_origin(a) is list]
            if generic:
                tp = generic[0]
                continue
            return tp
        if origin is dict:
            return args[-1] if args else tp
        return tp


def _keys_of(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _schema_message(err: Mapping[str, Any], root: type[BaseModel] | None) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    loc = err["loc"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        model = _model_at(root, loc[:-1])
        hint = ""
        if key in ("password", "secret", "token"):
            return f"unknown key '{key}': secrets never live in the inventory (use password_env or a file path)"
        if model is not None:
            close = difflib.get_close_matches(key, _keys_of(model), n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(_keys_of(model))})"
        return f"unknown key '{key}'{hint}"
    if kind == "missing":
        return f"missing required key '{loc[-1]}'"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx.get('expected')} (got {shown_value(value)})"
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", err["msg"]))
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer (got {shown_value(value)})"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number (got {shown_value(value)})"
    if kind == "finite_number":
        return f"must be a finite number (got {shown_value(value)})"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (got {shown_value(value)})"
    if kind in ("string_type",):
        return f"must be a string (got {shown_value(value)})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping (got {type(value).__name__})"
    if kind in ("list_type",):
        return f"must be a list (got {type(value).__name__})"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        bounds = {"greater_than_equal": "at least {ge}", "less_than_equal": "at most {le}",
                  "greater_than": "greater than {gt}", "less_than": "less than {lt}"}
        return f"must be {bounds[kind].format(**ctx)} (got {shown_value(value)})"
    msg = err["msg"]
    return msg[:1].lower() + msg[1:]


def shown_value(value: Any) -> str:
    """A value as the file wrote it, for a message: strings quoted, YAML's own words for true, false and null, a
    date YAML read from an unquoted date named as one, a list or mapping by its kind."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, datetime.date):  # a datetime too
        return f"the date {value.isoformat()}, which YAML reads from an unquoted date"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return repr(value)


def _clean_loc(loc: tuple[Any, ...]) -> KeyPath:
    # Union members and `function-before` validators can add type tags to loc; keep the key path only.
    model_names = {"str", "int", "float", "bool", "list", "dict", "none"}
    out: list[str | int] = []
    for part in loc:
        if isinstance(part, str) and (part in model_names or part.startswith(("function-", "list[", "dict["))):
            continue
        out.append(part)
    return tuple(out)


def schema_errors(exc: ValidationError, file: str, pos: dict[KeyPath, Pos], keypos: dict[KeyPath, Pos],
                  wrapped: AbstractSet[KeyPath] = NO_WRAPPED, root: type[BaseModel] | None = None,
                  ) -> list[InventoryError]:
    """Each error of a model validated from YAML data, as `FILE:LINE:COL: key.path: message`: an unknown key at
    the key (with a 'did you mean' from `root`'s fields, the model the data was validated as), a missing key at
    its mapping, the rest at the value."""
    return Sources(PositionedYaml(file, None, pos, keypos), wrapped).schema_errors(exc, root)
