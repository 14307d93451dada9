"""The schema models' base: private attributes read from pydantic's store, everything else as pydantic does."""

from __future__ import annotations

import pytest
from pydantic import PrivateAttr

from vgpuctl.strictmodel import StrictModel

pytestmark = pytest.mark.unit


class _Entry(StrictModel):
    name: str
    _index: int = PrivateAttr(default=0)
    _pos: dict[str, int] = PrivateAttr(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.name}#{self._index}"


def test_private_attributes_read_their_defaults_and_what_was_set() -> None:
    entry = _Entry(name="a")
    assert (entry._index, entry._pos) == (0, {})
    entry._index = 7
    entry._pos["name"] = 3
    assert (entry._index, entry._pos, entry.label) == (7, {"name": 3}, "a#7")
    assert entry.model_copy()._index == 7


def test_unknown_attributes_still_raise() -> None:
    entry = _Entry(name="a")
    with pytest.raises(AttributeError, match="_missing"):
        entry._missing  # noqa: B018
    with pytest.raises(AttributeError, match="missing"):
        entry.missing  # noqa: B018
    assert not hasattr(entry, "_missing")


def test_a_model_built_without_validation_reads_its_private_defaults() -> None:
    entry = _Entry.model_construct(name="a")
    assert entry._index == 0
