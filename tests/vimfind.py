"""Finding a vSphere object by name in a test, through a container view (pyVmomi)."""

from __future__ import annotations

from typing import Any

from pyVmomi import vim


def find_object(si: Any, name: str, kind: Any = vim.VirtualMachine) -> Any | None:
    """The object of type `kind` (a VM unless said) called `name` under the root folder, or None."""
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [kind], True)
    try:
        return next((o for o in view.view if o.name == name), None)
    finally:
        view.Destroy()
