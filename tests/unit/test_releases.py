"""NVIDIA's vGPU Manager / guest driver rule, version by version (vgpuctl.releases.pair), from the release notes'
table: "Virtual GPU Software R580 for VMware vSphere Release Notes" 19.0 section 1.2 (the same release; a later
major release branch with guest drivers from the previous branch; a later long-term support branch with guest
drivers from the previous long-term support branch) and the R525 notes (which also list different releases
within the branch)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vgpuctl import releases
from vgpuctl.releases import Fit

PAIRS = [
    # the same release: vGPU 19.0's manager with its Linux and its Windows guest driver (R580 notes, 1.1)
    ("580.65.05", "580.65.06", Fit.YES, "the same release (vGPU 19.0)"),
    ("580.65.05", "580.88", Fit.YES, "the same release (vGPU 19.0)"),
    # R580's notes list no other release of the branch: a 19.x guest of another (unlisted) release is unknown
    ("580.65.05", "580.82.07", Fit.UNKNOWN, "does not list 580.82.07"),
    # R525's notes list different releases within the branch: 15.1's manager with 15.0's guest
    ("525.85.07", "525.60.13", Fit.YES, "releases of one branch R525"),
    # a later major branch with the previous branch: R580 with R570, R550 with R535
    ("580.65.05", "570.124.06", Fit.YES, "the branch before"),
    ("550.90.05", "535.161.07", Fit.YES, "the branch before"),
    # a later LTS branch with the previous LTS branch: R580 (LTS) with R535 (LTS), two branches apart
    ("580.65.05", "535.161.07", Fit.YES, "LTS branch before"),
    # nothing else: two branches apart (R550 is no LTS branch), a guest newer than the manager
    ("580.65.05", "550.90.07", Fit.NO, "more than one branch"),
    ("550.90.05", "580.65.06", Fit.NO, "newer than the manager's"),
    ("570.124.03", "525.60.13", Fit.NO, "more than one branch"),
    ("535.161.05", "527.41", Fit.YES, "the branch before"),  # vGPU 15.0's Windows driver: R525 by the table
    # a branch the table does not know, and a text that is no version
    ("999.1.1", "580.65.06", Fit.UNKNOWN, "not in vgpuctl's release table"),
    ("580.65.05", "latest", Fit.UNKNOWN, "is not a driver version"),
]


@pytest.mark.parametrize(("manager", "guest", "fit", "says"), PAIRS)
def test_pairs_by_nvidias_table(manager: str, guest: str, fit: Fit, says: str) -> None:
    verdict = releases.pair(manager, guest)
    assert verdict.fit == fit, verdict.rule
    assert says in verdict.rule and manager in verdict.rule
    assert verdict.ok is (fit == Fit.YES)


def test_releases_and_their_versions() -> None:
    r = releases.manager_release("580.65.05-1OEM.800.1.0.20613240")
    assert r is not None and r.vgpu == "19.0" and r.linux == "580.65.06" and r.windows == "580.88"
    assert releases.guest_release("NVIDIA-Linux-x86_64-580.65.06-grid.run") == r
    assert releases.manager_release("580.65.06") is None  # a guest driver is not a manager


def test_every_release_and_branch_has_a_source_and_a_known_branch() -> None:
    data = yaml.safe_load((Path(releases.__file__).parent / "data" / "vgpu-releases.yaml").read_text())
    rows = data["branches"] + data["releases"]
    assert all(row["source"] in data["sources"] for row in rows)
    assert {r["branch"] for r in data["releases"]} <= {b["branch"] for b in data["branches"]}
    for r in releases.releases():
        assert releases.branch_of(r.manager) == r.branch and releases.branch_of(r.linux) == r.branch
        assert releases.guest_branch(r.windows) == r.branch  # 15.0's Windows driver is 527.41, of R525


@pytest.mark.parametrize(("text", "ok"), [("580.65.05", True), ("580.88", True), ("580", False), ("latest", False),
                                          ("580.65.05.1", False), ("58.65.05", False)])
def test_what_is_a_version(text: str, ok: bool) -> None:
    assert releases.is_version(text) is ok
