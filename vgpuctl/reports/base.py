"""The documents vgpuctl prints: one dataclass per report, `to_dict()` for JSON, a text renderer beside it.

One vocabulary in every document (snake_case): `kind` names the report; `vm`, `folder`, `host`, `cluster`,
`gpu` (PCI id), `profile`, `fb_gb`, `vgpus` (a list of {profile, count}), `nvlink_group`. Errors are
`{"error": {"type", "message", "details": [...]}}`. Fields marked `optional()` are left out when None
(diagnostics such as round trips appear only with -v). docs/schemas/ holds the JSON Schemas generated from
these types (vgpuctl.schemas).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

Scalar = str | int | float | bool | None


def optional(default: Any = None) -> Any:
    """A field left out of the JSON document while it is None."""
    return field(default=default, metadata={"omit_none": True})


def to_json(value: Any) -> Any:
    """Dataclasses, enums, lists and dicts to plain JSON data; optional() fields dropped while None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = to_json(item)
        return out
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


class Report:
    """Base of the printed documents: `kind` first, then the fields."""

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **to_json(self)}


@dataclass
class VgpuCount:
    profile: str
    count: int


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
