"""Shared fixtures: gpusim, the GPU farm simulator (tests/vcsim), started on a free loopback port.

- `gpusim`: one default farm for the whole session (DC0 / GPU-Cluster, 4 hosts x 4 A100-40GB in NVLink
  pairs, sharedDirect, template ubuntu-22.04-ml). Tests that change it must undo their changes.
- `gpusim_factory(farm=None, args=())`: a private farm per test; `farm` is a dict (JSON farm file),
  YAML text or a Path; `args` are extra gpusim flags. Stopped when the test ends.
- `gpusim_session_factory`: the same for module- or session-scoped fixtures; stopped at session end.
- `gpusim_pair(east, west, args=())`: two private farms at once, two vCenters with their own farms, credentials
  and certificates (a fleet, tests/sim/test_fleet_sim.py). Stopped when the test ends.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from gpusim import BINARY, Gpusim, GpusimError

Factory = Callable[..., Gpusim]


def _require_toolchain() -> None:
    if shutil.which("go") is None and not BINARY.exists():
        pytest.skip("gpusim needs the Go toolchain (go) to build tests/vcsim")


def _factory(stack: list[Gpusim], base: Path) -> Factory:
    def start(farm: dict[str, Any] | str | Path | None = None, args: Sequence[str] = (), **kwargs: Any) -> Gpusim:
        _require_toolchain()
        workdir = base / f"gpusim-{len(stack)}"
        try:
            sim = Gpusim.start(args=args, farm=farm, workdir=workdir, **kwargs)
        except GpusimError as err:
            pytest.fail(str(err))
        stack.append(sim)
        return sim

    return start


@pytest.fixture(scope="session")
def gpusim_session_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Factory]:
    stack: list[Gpusim] = []
    yield _factory(stack, tmp_path_factory.mktemp("gpusim-session"))
    for sim in reversed(stack):
        sim.stop()


@pytest.fixture(scope="session")
def gpusim(gpusim_session_factory: Factory) -> Gpusim:
    return gpusim_session_factory()


@pytest.fixture
def gpusim_factory(tmp_path: Path) -> Iterator[Factory]:
    stack: list[Gpusim] = []
    yield _factory(stack, tmp_path)
    for sim in reversed(stack):
        sim.stop()


@pytest.fixture
def gpusim_pair(gpusim_factory: Factory) -> Callable[..., tuple[Gpusim, Gpusim]]:
    def start(east: dict[str, Any] | str | Path | None, west: dict[str, Any] | str | Path | None,
              args: Sequence[str] = ()) -> tuple[Gpusim, Gpusim]:
        first = gpusim_factory(east, args)
        return first, gpusim_factory(west, args)

    return start


@pytest.fixture
def no_vgpuctl_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of vgpuctl in this test see none of the caller's VGPUCTL_* / GOVC_* settings."""
    for name in list(os.environ):
        if name.startswith(("VGPUCTL_", "GOVC_")):
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _run_history_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs of plan, apply and provision in tests keep their records in a folder of their own, never in the
    home of whoever runs the tests (vgpuctl.history)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
