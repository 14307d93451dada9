"""The base of the inventory's schema models (vgpuctl.inventory and the host settings' parts in
vgpuctl.settings): unknown keys are errors and values are not coerced from other types, except a domain
StrEnum given as its string in YAML (`Lax`)."""

from __future__ import annotations

import typing

from pydantic import BaseModel, ConfigDict, Field

_T = typing.TypeVar("_T")
Lax = typing.Annotated[_T, Field(strict=False)]  # a domain StrEnum given as its string in YAML
KeyPath = tuple[str | int, ...]  # a key path in an inventory entry: ("gpus", 0, "mode")


class StrictModel(BaseModel):
    """Unknown keys are errors, values are not coerced from other types (a domain StrEnum excepted: Lax), and a
    number is finite (YAML's .inf and .nan are refused)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True, frozen=False, allow_inf_nan=False)

    if not typing.TYPE_CHECKING:  # as pydantic's own, so that mypy still refuses unknown attributes

        def __getattr__(self, item: str) -> typing.Any:
            """A private attribute (`_index`, `_pos`) straight from pydantic's store: pydantic's own lookup asks
            each attribute's default whether it is a descriptor, about 2 µs a read, and the checks and the
            planner read these once per VM. None of ours defaults to a descriptor; anything else is pydantic's."""
            private = object.__getattribute__(self, "__pydantic_private__")
            if private is not None and item in private:
                return private[item]
            return super().__getattr__(item)
