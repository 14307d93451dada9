"""scripts/floors.py (the floors of the package against its imports) as a module the tests import."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "floors.py"
_spec = importlib.util.spec_from_file_location("vgpuctl_floors", _PATH)
assert _spec is not None and _spec.loader is not None
floors = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = floors
_spec.loader.exec_module(floors)
