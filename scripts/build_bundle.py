"""setuptools build step: ship the top-level playbooks/ and templates/ inside the vgpuctl package.

The product keeps both folders at the repository's top level; a wheel carries them as
vgpuctl/_bundled/{playbooks,templates}, where vgpuctl.guest.targets looks first. Editable installs read
them from the checkout, so nothing is copied then.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools.command.build_py import build_py

BUNDLED = ("playbooks", "templates")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".*", "*.retry")


class BuildPy(build_py):
    """build_py that also copies playbooks/ and templates/ into the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        root = Path(__file__).resolve().parents[1]
        target = Path(self.build_lib) / "vgpuctl" / "_bundled"
        for name in BUNDLED:
            source = root / name
            if not (source / ("site.yml" if name == "playbooks" else "")).exists():
                raise RuntimeError(f"{source} is missing: build vgpuctl from a full source tree")
            shutil.rmtree(target / name, ignore_errors=True)
            shutil.copytree(source, target / name, ignore=IGNORED)
