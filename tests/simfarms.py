"""Helpers shared by the sim tests (importable like gpusim.py: tests/ is on sys.path)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pyVim.connect import Connect


def direct_connect(sim: Any) -> Any:
    """A pyVmomi ServiceInstance pinned to vSphere API 8.0.3, independent of vgpuctl's session; Disconnect it."""
    parts = urlsplit(sim.url)
    return Connect(
        host=parts.hostname,
        port=parts.port,
        user=sim.username,
        pwd=sim.password,
        version="vim.version.v8_0_3_0",
        disableSslCertValidation=True,
    )
