"""What the bulk reads return and how they ask for it: `Obj` (one object's MoRef, type and properties) and
`view_filter_spec`, the one PropertyCollector FilterSpec over a ContainerView. Used by observe and rawread.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from vgpuctl.lazyclass import dataclass


@dataclass
class Obj:
    """One object of the bulk read: its MoRef, vim type name and properties by path."""

    ref: Any
    type: str
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def moid(self) -> str:
        return str(self.ref._moId)

    def get(self, path: str, default: Any = None) -> Any:
        value = self.props.get(path)
        return default if value is None else value


def view_filter_spec(view: Any, type_props: list[tuple[str, list[str]]]) -> Any:
    """A FilterSpec reading these properties of these types from every object in a ContainerView."""
    from pyVmomi import vim, vmodl

    pc_ns = vmodl.query.PropertyCollector
    traverse = pc_ns.TraversalSpec(name="view", path="view", skip=False, type=vim.view.ContainerView)
    return pc_ns.FilterSpec(
        objectSet=[pc_ns.ObjectSpec(obj=view, skip=True, selectSet=[traverse])],
        propSet=[pc_ns.PropertySpec(type=getattr(vim, t), pathSet=paths) for t, paths in type_props],
    )
