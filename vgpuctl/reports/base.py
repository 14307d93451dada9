"""The documents vgpuctl prints: one dataclass per report, `to_dict()` for JSON, `render_text()` for people.

Both come from the same object, so the text shows nothing the JSON document lacks. One vocabulary in every
document (snake_case): `kind` names the report; `vm`, `folder`, `host`, `cluster`, `gpu` (PCI id), `profile`,
`fb_gb`, `vgpus` (a list of {profile, count}), `nvlink_group`. Errors are
`{"error": {"type", "message", "details": [...]}}`. Fields marked `optional()` are left out when None
(diagnostics such as round trips appear only with -v). docs/schemas/ holds the JSON Schemas generated from
these types (vgpuctl.reports.schemas).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

from vgpuctl.lazyclass import dataclass

if TYPE_CHECKING:
    from rich.console import RenderableType

Scalar = str | int | float | bool | None

# What render_text gives the terminal: a str, a rich renderable, several printed one after the other, or None
# when the report has no text form (stdout stays empty; the command says what it did on stderr).
Rendered: TypeAlias = "str | RenderableType | list[RenderableType] | None"


def optional(default: Any = None) -> Any:
    """A field left out of the JSON document while it is None."""
    return field(default=default, metadata={"omit_none": True})


def to_json(value: Any) -> Any:
    """Dataclasses, enums, lists and dicts to plain JSON data; optional() fields dropped while None."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    shape = _shape(kind)
    if shape is not None:
        return _fields_json(value, shape, _NOTHING_GIVEN)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


def to_json_given(value: Any, given: Mapping[str, Any]) -> dict[str, Any]:
    """to_json of a dataclass, the JSON of the fields named in `given` taken from it (made once already: the plan
    the run printed is the plan its record keeps); a given field that is None on the object stays out."""
    shape = _shape(type(value))
    if shape is None:
        raise TypeError(f"{type(value).__name__} is no dataclass")
    return _fields_json(value, shape, given)


def _fields_json(value: Any, shape: tuple[bool, tuple[tuple[str, bool], ...]], given: Mapping[str, Any]
                 ) -> dict[str, Any]:
    is_report, fields = shape
    out: dict[str, Any] = {"kind": value.kind} if is_report else {}
    for name, omit_none in fields:
        item = getattr(value, name)
        if item is None and omit_none:
            continue
        out[name] = given[name] if name in given and item is not None else to_json(item)
    return out


_NOTHING_GIVEN: Mapping[str, Any] = {}
_PLAIN = frozenset({str, int, float, bool, type(None)})  # exactly these: an enum that is also a str is not plain
_SHAPES: dict[type, tuple[bool, tuple[tuple[str, bool], ...]] | None] = {}


def _shape(kind: type) -> tuple[bool, tuple[tuple[str, bool], ...]] | None:
    """A dataclass's JSON shape, found once per class (a large plan's document has tens of thousands of parts):
    whether it is a Report (`kind` first), and each field's name and whether it is left out while None."""
    try:
        return _SHAPES[kind]
    except KeyError:
        pass
    shape = None
    if dataclasses.is_dataclass(kind):
        shape = (issubclass(kind, Report),
                 tuple((f.name, bool(f.metadata.get("omit_none"))) for f in dataclasses.fields(kind)))
    _SHAPES[kind] = shape
    return shape


def from_json(cls: type[Any], data: Any) -> Any:
    """A report (or any of its parts) back from its JSON document, by its type hints: the inverse of to_json.
    Raises ValueError for a document that does not fit the types (unknown or missing keys)."""
    import typing

    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names - ({"kind"} if isinstance(getattr(cls, "kind", None), str) else set())
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown keys {sorted(unknown)}")
    values = {name: _at(name, partial(_from_json, hints[name], data[name])) for name in names if name in data}
    try:
        return cls(**values)
    except TypeError as err:
        raise ValueError(f"{cls.__name__}: {err}") from None


def _from_json(hint: Any, value: Any) -> Any:
    """`value` as `hint` says; ValueError when it is not of that type (a document edited by hand is refused where
    it differs, never carried on to fail later as a bug)."""
    import types
    import typing

    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        return _from_union(typing.get_args(hint), value)
    if hint is type(None) or value is None:
        if value is None and hint is type(None):
            return None
        raise ValueError(f"expected {_type_name(hint)}, got {_json_name(value)}")
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return from_json(hint, value)
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_at(f"[{i}]", partial(_from_json, item, v)) for i, v in enumerate(_checked(value, list))]
    if origin is dict:
        _, item = typing.get_args(hint)
        return {str(k): _at(f"[{k!r}]", partial(_from_json, item, v)) for k, v in _checked(value, dict).items()}
    if origin is typing.Literal:
        if value not in typing.get_args(hint):
            raise ValueError(f"expected one of {list(typing.get_args(hint))}, got {value!r}")
        return value
    if hint in _SCALARS:
        if not _SCALARS[hint](value):
            raise ValueError(f"expected {_type_name(hint)}, got {_json_name(value)}")
        return value
    return value


# JSON's scalars as the report types hold them (a float field takes an integer; a bool is no number).
_SCALARS: dict[Any, Any] = {
    str: lambda v: isinstance(v, str),
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


class _Misfit(ValueError):
    """A value that does not fit its type, with the key path down to it (`vm_changes[0].clone`)."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


def _at(key: str, convert: Callable[[], Any]) -> Any:
    """convert(), a misfit inside it located under `key`."""
    try:
        return convert()
    except _Misfit as err:
        joined = f"{key}{err.path}" if err.path.startswith("[") else f"{key}.{err.path}"
        raise _Misfit(joined, err.why) from None
    except ValueError as err:
        raise _Misfit(key, str(err)) from None


def _from_union(options: tuple[Any, ...], value: Any) -> Any:
    """The value as the first option it fits (null only where the union has None); ValueError when none does."""
    inside: list[_Misfit] = []
    for option in options:
        try:
            return _from_json(option, value)
        except _Misfit as err:  # the value had the option's shape; something in it did not fit
            inside.append(err)
        except ValueError:
            continue
    if inside:
        raise inside[0]
    raise ValueError(f"expected {' or '.join(_type_name(o) for o in options)}, got {_json_name(value)}")


def _type_name(hint: Any) -> str:
    return "null" if hint is type(None) else getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _json_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _checked(value: Any, kind: type) -> Any:
    if not isinstance(value, kind):
        raise ValueError(f"expected {kind.__name__}, got {_json_name(value)}")
    return value


@dataclass(frozen=True)
class TextLayout:
    """Where the text goes: a terminal `width` columns wide, or `plain` lines for a pipe or a file; `full`
    (-v): lists are never cut."""

    width: int = 200
    plain: bool = False
    full: bool = False


TERMINAL = TextLayout()


class Report:
    """Base of the printed documents: `kind` first, then the fields; `render_text` draws only on them."""

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return dict(to_json(self))

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        raise NotImplementedError(f"{type(self).__name__} has no text form")


@dataclass
class VgpuCount:
    profile: str
    count: int


def whole(gb: float) -> float:
    """20.0 -> 20 for the documents; fractions (0.5 GB profiles) stay."""
    return int(gb) if float(gb).is_integer() else gb


def vgpu_counts(profiles: Iterable[str]) -> list[VgpuCount]:
    """Profiles in the order they first appear, with how many of each."""
    return [VgpuCount(p, n) for p, n in Counter(profiles).items()]


@dataclass
class ErrorDetail:
    message: str
    file: str | None = optional()
    line: int | None = optional()
    col: int | None = optional()
    path: str | None = optional()  # key path in the inventory, e.g. vms[2].vgpus


@dataclass
class ErrorInfo:
    type: str
    message: str
    details: list[ErrorDetail] = field(default_factory=list)


@dataclass
class ErrorReport:
    """`{"error": {...}}`: the only document of a command that failed."""

    error: ErrorInfo

    def to_dict(self) -> dict[str, Any]:
        return {"error": to_json(self.error)}
