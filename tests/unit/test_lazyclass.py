"""vgpuctl.lazyclass.dataclass against the standard library's: the same class twice, one of each, behaves alike
(construction, defaults, repr, equality, hashing, ordering, frozenness, the dataclasses functions, errors)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vgpuctl import lazyclass
from vgpuctl.history import Bounds  # a module-level dataclass of vgpuctl's own, for pickle

pytestmark = pytest.mark.unit

STANDARD: Callable[..., Any] = dataclasses.dataclass
LAZY: Callable[..., Any] = lazyclass.dataclass


def shapes(decorate: Callable[..., Any]) -> dict[str, type]:
    """Classes of every shape vgpuctl uses, made with one decorator."""

    @decorate
    class Plain:
        name: str
        count: int = 0
        tags: list[str] = dataclasses.field(default_factory=list)
        note: str = dataclasses.field(default="", repr=False)
        cached: int = dataclasses.field(default=0, init=False, compare=False)
        made: list[int] = dataclasses.field(default_factory=lambda: [1], init=False)

    @decorate(frozen=True)
    class Frozen:
        host: str
        gpu: int = 0
        meta: dict[str, int] = dataclasses.field(default_factory=dict, compare=False, hash=False)
        label: str = dataclasses.field(default="x", metadata={"doc": "a label"})

    @decorate(frozen=True, order=True)
    class Ordered:
        major: int
        minor: int = 0

    @decorate(eq=False)
    class Identity:
        value: int

    @decorate
    class Posted:
        items: list[int]
        total: int = dataclasses.field(default=0, init=False)

        def __post_init__(self) -> None:
            self.total = sum(self.items)

    @decorate(frozen=True)
    class Empty:
        pass

    @decorate(frozen=True)
    class Child(Frozen):
        extra: int = 1

    @decorate
    class Selfish:
        self: int
        other: str = "o"

    return {c.__name__: c for c in (Plain, Frozen, Ordered, Identity, Posted, Empty, Child, Selfish)}


CASES: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("Plain", ("a",), {}),
    ("Plain", ("a", 2, ["t"]), {"note": "n"}),
    ("Frozen", ("h",), {"gpu": 3, "meta": {"k": 1}}),
    ("Ordered", (1, 2), {}),
    ("Identity", (5,), {}),
    ("Posted", ([1, 2, 3],), {}),
    ("Empty", (), {}),
    ("Child", ("h", 1), {"extra": 7}),
    ("Selfish", (), {"self": 1}),
]


@pytest.fixture(scope="module")
def both() -> tuple[dict[str, type], dict[str, type]]:
    return shapes(STANDARD), shapes(LAZY)


def state(obj: Any) -> dict[str, Any]:
    return dict(vars(obj))


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES)
def test_instances_repr_equality_and_hash_are_the_standard_ones(both: Any, name: str, args: Any, kwargs: Any) -> None:
    std_cls, lazy_cls = both[0][name], both[1][name]
    std, lazy = std_cls(*args, **kwargs), lazy_cls(*args, **kwargs)
    assert state(std) == state(lazy)
    assert repr(std) == repr(lazy)
    assert (std == std_cls(*args, **kwargs)) == (lazy == lazy_cls(*args, **kwargs))
    assert lazy != object() and (lazy == object()) is False
    assert (std_cls.__hash__ is None) == (lazy_cls.__hash__ is None)
    if std_cls.__hash__ is not None and std_cls.__eq__ is not object.__eq__:
        assert hash(std) == hash(lazy)
    assert dataclasses.asdict(std) == dataclasses.asdict(lazy)
    assert dataclasses.astuple(std) == dataclasses.astuple(lazy)
    assert [f.name for f in dataclasses.fields(std)] == [f.name for f in dataclasses.fields(lazy)]
    assert std_cls.__match_args__ == lazy_cls.__match_args__
    assert str(inspect.signature(std_cls)) == str(inspect.signature(lazy_cls))
    assert state(copy.deepcopy(lazy)) == state(lazy)


def test_params_and_helpers_see_a_dataclass(both: Any) -> None:
    for name, lazy_cls in both[1].items():
        std_params, lazy_params = both[0][name].__dataclass_params__, lazy_cls.__dataclass_params__
        for attr in ("init", "repr", "eq", "order", "frozen", "unsafe_hash"):
            assert getattr(std_params, attr) == getattr(lazy_params, attr), (name, attr)
        assert dataclasses.is_dataclass(lazy_cls)


def test_equality_ignores_what_is_not_compared(both: Any) -> None:
    for classes in both:
        frozen = classes["Frozen"]
        assert frozen("h", meta={"a": 1}) == frozen("h", meta={"b": 2})
        assert hash(frozen("h", meta={"a": 1})) == hash(frozen("h", meta={"b": 2}))
        assert frozen("h") != frozen("i")
        plain = classes["Plain"]
        one, other = plain("a"), plain("a")
        other.cached = 9
        assert one == other
        assert classes["Identity"](1) != classes["Identity"](1)


def test_a_subclass_instance_is_not_equal(both: Any) -> None:
    for classes in both:
        assert classes["Frozen"]("h", 1) != classes["Child"]("h", 1)


def test_ordering_is_by_the_fields_in_order(both: Any) -> None:
    values = [(2, 0), (1, 5), (1, 2)]
    std = sorted(both[0]["Ordered"](*v) for v in values)
    lazy = sorted(both[1]["Ordered"](*v) for v in values)
    assert [repr(o) for o in std] == [repr(o) for o in lazy]
    with pytest.raises(TypeError):
        _ = both[1]["Ordered"](1) < both[1]["Frozen"]("h")


def test_frozen_refuses_assignment_and_deletion_alike(both: Any) -> None:
    errors = []
    for classes in both:
        obj = classes["Frozen"]("h")
        with pytest.raises(dataclasses.FrozenInstanceError) as assigned:
            obj.gpu = 1
        with pytest.raises(dataclasses.FrozenInstanceError) as added:
            obj.other = 1
        with pytest.raises(dataclasses.FrozenInstanceError) as deleted:
            del obj.host
        child = classes["Child"]("h")
        with pytest.raises(dataclasses.FrozenInstanceError):
            child.extra = 2
        errors.append((str(assigned.value), str(added.value), str(deleted.value)))
    assert errors[0] == errors[1]


def test_a_plain_subclass_of_a_frozen_one_may_add_attributes(both: Any) -> None:
    for classes in both:
        class Loose(classes["Frozen"]):  # type: ignore[misc,name-defined]
            pass

        loose = Loose("h")
        loose.scratch = 1
        assert loose.scratch == 1
        with pytest.raises(dataclasses.FrozenInstanceError):
            loose.host = "i"


def test_construction_errors_are_the_standard_ones(both: Any) -> None:
    messages = []
    for classes in both:
        got = []
        for call in (lambda c=classes: c["Plain"](), lambda c=classes: c["Plain"]("a", cached=1),
                     lambda c=classes: c["Frozen"]("h", nope=1), lambda c=classes: c["Ordered"](1, 2, 3)):
            with pytest.raises(TypeError) as err:
                call()
            got.append(str(err.value))
        messages.append(got)
    assert messages[0] == messages[1]


def test_defaults_made_by_a_factory_are_new_for_each_instance(both: Any) -> None:
    plain = both[1]["Plain"]
    one, other = plain("a"), plain("b")
    one.tags.append("x")
    one.made.append(2)
    assert other.tags == [] and other.made == [1]
    assert both[1]["Posted"]([4, 5]).total == 9


def test_replace_and_pickle_round_trip(both: Any) -> None:
    frozen = both[1]["Frozen"]("h", 2)
    assert dataclasses.replace(frozen, gpu=3) == both[1]["Frozen"]("h", 3)
    bounds = Bounds(3, 4)
    assert pickle.loads(pickle.dumps(bounds)) == bounds
    with pytest.raises(ValueError, match="init=False"):
        dataclasses.replace(both[1]["Plain"]("a"), cached=2)


def test_init_is_written_on_first_use_only() -> None:
    @LAZY
    class Late:
        a: int
        b: str = "x"

    assert not inspect.isfunction(Late.__dict__["__init__"])  # nothing compiled yet
    assert Late(1) == Late(1, "x")
    assert inspect.isfunction(Late.__dict__["__init__"])
    assert Late.__init__.__qualname__.endswith("Late.__init__")
    assert Late.__init__.__module__ == __name__


def test_definition_errors_are_the_standard_ones() -> None:
    for decorate in (STANDARD, LAZY):
        with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
            @decorate
            class Misordered:
                a: int = 0
                b: int  # type: ignore[misc]

        with pytest.raises(ValueError, match="mutable default"):
            @decorate
            class Shared:
                a: list[int] = []

        @decorate
        class Mutable:
            a: int

        with pytest.raises(TypeError, match="cannot inherit frozen dataclass from a non-frozen one"):
            @decorate(frozen=True)
            class FrozenChild(Mutable):
                b: int = 0

        @decorate(frozen=True)
        class Fixed:
            a: int

        with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):
            @decorate
            class MutableChild(Fixed):
                b: int = 0

    with pytest.raises(TypeError, match="keyword-only fields and InitVar are not supported"):
        @LAZY
        class KeywordOnly:
            a: int = dataclasses.field(default=0, kw_only=True)

    with pytest.raises(TypeError, match="keyword-only fields and InitVar are not supported"):
        @LAZY
        class InitOnly:
            a: dataclasses.InitVar[int]

    with pytest.raises(ValueError, match="eq must be true if order is true"):
        LAZY(eq=False, order=True)(type("X", (), {"__annotations__": {"a": "int"}}))


def test_every_dataclass_of_vgpuctl_is_a_lazy_one() -> None:
    """The standard library's decorator compiles every method when the module is imported: vgpuctl's modules use
    vgpuctl.lazyclass's (the same dataclasses, their methods made on first use)."""
    package = Path(lazyclass.__file__).parent
    standard_import = re.compile(r"^\s*from dataclasses import [^\n]*\bdataclass\b(?! as dataclass$)", re.MULTILINE)
    offenders = sorted(
        str(path.relative_to(package)) for path in package.rglob("*.py")
        if path.name != "lazyclass.py"
        and (standard_import.search(text := path.read_text()) or "@dataclasses.dataclass" in text))
    assert offenders == []
