"""`dataclass`: the standard library's dataclasses, with their methods made on first use.

The standard library writes each dataclass's `__init__`, `__repr__`, `__eq__`, `__hash__` and, when frozen,
`__setattr__` and `__delattr__` as source text and compiles it when the class is defined. With some 280 dataclasses
loaded by a plan, that compiling was about a third of what importing vgpuctl cost -- paid by every command,
although a plan calls `__init__` of fewer than a hundred of them and the other methods of almost none.

Here the standard library still makes the class a dataclass (its fields, `dataclasses.fields`, `replace`,
`asdict`, `__match_args__`; `__dataclass_params__` says what the class has), but:
- `__init__` is written on the class's first instantiation, as the standard library writes it (the same text:
  parameters, annotations, defaults, factories, `__post_init__`), and replaces a stand-in on the class;
- equality, hashing, ordering, `repr` and a frozen class's refusal to be assigned are small closures over the
  class's field names: the same results, errors and `repr` text as the generated methods, with nothing compiled.
tests/unit/test_lazyclass.py holds each of these to the standard library's, class shape by class shape.

Supported: `frozen`, `eq`, `order`, the fields' `default`, `default_factory`, `init`, `repr`, `hash`, `compare`
and `metadata`, and `__post_init__` -- what vgpuctl uses; keyword-only fields and `InitVar` are refused when the
class is defined. A class without a docstring gets `Name(field, ...)`, not the standard library's signature text.
To type checkers this is `dataclasses.dataclass` itself; ruff's dataclass rules (RUF008, RUF009) do not see
through the import, the standard library's refusal of a list, dict or set default still holds.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

_T = TypeVar("_T")
_Key = Callable[[Any], tuple[Any, ...]]


def _dataclass(cls: type[_T] | None = None, /, *, frozen: bool = False, eq: bool = True, order: bool = False
               ) -> Any:
    """`@dataclass`, `@dataclass(frozen=True)`, `@dataclass(eq=False)`, `@dataclass(frozen=True, order=True)`."""

    def wrap(cls: type[_T]) -> type[_T]:
        return _make(cls, frozen=frozen, eq=eq, order=order)

    return wrap if cls is None else wrap(cls)


if TYPE_CHECKING:
    from dataclasses import dataclass as dataclass
else:
    dataclass = _dataclass


def _make(cls: type[_T], *, frozen: bool, eq: bool, order: bool) -> type[_T]:
    if order and not eq:
        raise ValueError("eq must be true if order is true")
    class_hash = cls.__dict__.get("__hash__", dataclasses.MISSING)
    explicit_hash = not (class_hash is dataclasses.MISSING or (class_hash is None and "__eq__" in cls.__dict__))
    documented = bool(cls.__doc__)
    if not documented:
        cls.__doc__ = cls.__name__  # the standard library would compute a signature for it
    frozen_base = _frozen_base(cls, frozen)
    # Below a frozen base the standard library writes the frozen methods itself (such subclasses are rare).
    dataclasses.dataclass(cls, init=False, repr=False, eq=False, frozen=frozen_base)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    _refuse_unsupported(cls, fields)
    _refuse_misordered_defaults(fields)
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    params.init, params.repr, params.eq, params.order, params.frozen = True, True, eq, order, frozen
    if "__init__" not in cls.__dict__:
        _install(cls, __init__=_InitOnFirstUse(cls, frozen))
    if "__repr__" not in cls.__dict__:
        _install(cls, __repr__=_repr_of(tuple(f.name for f in fields if f.repr)))
    compared = _key_of(tuple(f.name for f in fields if f.compare))
    if eq and "__eq__" not in cls.__dict__:
        _install(cls, __eq__=_eq_of(compared))
    if order:
        _add_ordering(cls, compared)
    if eq and not explicit_hash:
        hashed = _key_of(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))
        _install(cls, __hash__=_hash_of(hashed) if frozen else None)
    if frozen and not frozen_base:
        _add_frozen_refusals(cls, frozenset(f.name for f in fields))
    if not documented:
        cls.__doc__ = f"{cls.__name__}({', '.join(f.name for f in fields if f.init)})"
    return cls


def _frozen_base(cls: type, frozen: bool) -> bool:
    """Whether a dataclass base is frozen; the standard library's rule that frozen and mutable dataclasses do not
    inherit from one another."""
    dataclass_bases = [base for base in cls.__mro__[1:] if "__dataclass_fields__" in base.__dict__]
    any_frozen = any(base.__dataclass_params__.frozen for base in dataclass_bases)  # type: ignore[attr-defined]
    if frozen and dataclass_bases and not any_frozen:
        raise TypeError("cannot inherit frozen dataclass from a non-frozen one")
    if any_frozen and not frozen:
        raise TypeError("cannot inherit non-frozen dataclass from a frozen one")
    return any_frozen


def _install(cls: type, **methods: Any) -> None:
    for name, method in methods.items():
        setattr(cls, name, method)


def _refuse_unsupported(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> None:
    """Keyword-only fields and init-only variables: what vgpuctl does not use, and `_init_of` does not write."""
    plain = {f.name for f in fields}
    init_only = [name for name, f in cls.__dataclass_fields__.items()  # type: ignore[attr-defined]
                 if name not in plain and "InitVar" in str(f.type)]
    if init_only or any(f.kw_only for f in fields):
        raise TypeError(f"{cls.__name__}: keyword-only fields and InitVar are not supported by vgpuctl's dataclass")


def _refuse_misordered_defaults(fields: tuple[dataclasses.Field[Any], ...]) -> None:
    """The standard library checks this while writing `__init__`; here it is checked when the class is defined."""
    seen_default = False
    for f in fields:
        if not f.init:
            continue
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if seen_default and not has_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
        seen_default = seen_default or has_default


class _InitOnFirstUse:
    """A class's `__init__` until it is first called for: then written and compiled, and put in its place."""

    def __init__(self, cls: type, frozen: bool):
        self.cls, self.frozen = cls, frozen

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        init = _init_of(self.cls, self.frozen)
        _install(self.cls, __init__=init)
        return init if instance is None else init.__get__(instance, owner)


class _DefaultFactory:
    """The standard library's marker for "this argument was not given: call the field's factory"."""

    def __repr__(self) -> str:
        return "<factory>"


_HAS_DEFAULT_FACTORY = _DefaultFactory()


def _init_of(cls: type, frozen: bool) -> Callable[..., None]:
    """The `__init__` the standard library writes for these fields (`dataclasses._init_fn`, Python 3.11 to 3.13):
    one parameter per field in `__init__`, annotated, with its default (a factory's marker shows as `<factory>`);
    each field set in order (a factory called when its argument is not given, a field outside `__init__` with a
    factory set from it, one with a plain default left to the class attribute); a frozen class's set through
    `object.__setattr__`; then `__post_init__`, if the class has one."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    self_name = "__dataclass_self__" if "self" in {f.name for f in fields} else "self"
    names: dict[str, Any] = {"__dataclass_builtins_object__": object, "_HAS_DEFAULT_FACTORY": _HAS_DEFAULT_FACTORY,
                             "_return_type": None}
    params, body = [self_name], []
    for f in fields:
        names[f"_type_{f.name}"] = f.type
        value: str | None = f.name if f.init else None
        if f.default_factory is not dataclasses.MISSING:
            names[f"_dflt_{f.name}"] = f.default_factory
            value = (f"_dflt_{f.name}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}" if f.init
                     else f"_dflt_{f.name}()")
        elif f.default is not dataclasses.MISSING:
            names[f"_dflt_{f.name}"] = f.default
        if f.init:
            default = ("=_HAS_DEFAULT_FACTORY" if f.default_factory is not dataclasses.MISSING
                       else f"=_dflt_{f.name}" if f.default is not dataclasses.MISSING else "")
            params.append(f"{f.name}:_type_{f.name}{default}")
        if value is not None:
            body.append(f"__dataclass_builtins_object__.__setattr__({self_name},{f.name!r},{value})" if frozen
                        else f"{self_name}.{f.name}={value}")
    if hasattr(cls, "__post_init__"):
        body.append(f"{self_name}.__post_init__()")
    text = (f"def __create_fn__({', '.join(names)}):\n"
            f" def __init__({','.join(params)})->_return_type:\n"
            + "".join(f"  {line}\n" for line in body or ["pass"])
            + " return __init__")
    module = sys.modules.get(cls.__module__)
    namespace: dict[str, Any] = {}
    # Compiled apart from this module's `from __future__ import annotations`: the annotations are the fields' types.
    code = compile(text, "<string>", "exec", dont_inherit=True)
    exec(code, module.__dict__ if module is not None else {}, namespace)
    init: Callable[..., None] = namespace["__create_fn__"](**names)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _key_of(names: tuple[str, ...]) -> _Key:
    """The compared fields' values as a tuple, as the standard library's methods compare and hash them."""
    if not names:
        return lambda _obj: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    many: Callable[[Any], tuple[Any, ...]] = operator.attrgetter(*names)
    return many


def _repr_of(names: tuple[str, ...]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__


def _eq_of(key: _Key) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    return __eq__


def _hash_of(key: _Key) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(key(self))

    return __hash__


def _add_ordering(cls: type, key: _Key) -> None:
    for name, compare in (("__lt__", operator.lt), ("__le__", operator.le), ("__gt__", operator.gt),
                          ("__ge__", operator.ge)):
        if name in cls.__dict__:
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}. Consider using "
                            "functools.total_ordering")
        setattr(cls, name, _order_of(key, compare))


def _order_of(key: _Key, compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    def ordered(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return compare(key(self), key(other))
        return NotImplemented

    return ordered


def _add_frozen_refusals(cls: type, names: frozenset[str]) -> None:
    """The standard library's frozen `__setattr__` and `__delattr__`: a field, or any attribute of the class
    itself, cannot be assigned or deleted (a subclass that is not a dataclass may add attributes)."""
    for name in ("__setattr__", "__delattr__"):
        if name in cls.__dict__:
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")

    owner: type[Any] = cls

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is owner or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(owner, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is owner or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(owner, self).__delattr__(name)

    _install(cls, __setattr__=__setattr__, __delattr__=__delattr__)
