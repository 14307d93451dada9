"""Outputs never overwrite inputs, and a file is written whole or not at all.

`--out` and `--events` refuse, before anything runs, a path that names the inventory, a saved plan about to be
read, a demand file, the password or CA file, or each other (also through a link). Files are written into a
temporary file beside them and renamed, so a write that fails leaves the old file as it was; the failure (a full
disk, a read-only file) is one line naming the option, never "a bug". The event stream is written as it happens:
a first event that cannot be written stops the run before anything runs, a later one when the run ends."""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vgpuctl import outpaths, planfile
from vgpuctl.cli.events import EventFile
from vgpuctl.cli.main import app
from vgpuctl.errors import OutputError, UsageError
from vgpuctl.reports.events import Noted

pytestmark = pytest.mark.unit

DEV_FULL = Path("/dev/full")
INVENTORY = "apiVersion: vgpuctl/v1\nvms:\n  - name: a\n    power: 'off'\n"
ENV = {"VGPUCTL_URL": "https://vc.invalid/sdk", "VGPUCTL_USERNAME": "admin", "VGPUCTL_PASSWORD": "x"}


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=ENV)


def one_error(result: Any) -> str:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "bug" not in result.output and "Traceback" not in result.output, result.stderr
    return lines[0]


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return path


# ------------------------------------------------------------------------------------------ overlaps


@pytest.mark.parametrize("option", ["--out", "--events"])
def test_plan_refuses_to_write_over_its_inventory(inv: Path, option: str) -> None:
    error = one_error(run("plan", "-f", str(inv), option, str(inv)))
    assert error == (f"error: {option} {inv} is the inventory, which this command reads: vgpuctl never writes over "
                     "a file it reads; give another path")
    assert inv.read_text() == INVENTORY


def test_plan_refuses_one_file_for_out_and_events(inv: Path, tmp_path: Path) -> None:
    both = tmp_path / "plan.out"
    error = one_error(run("plan", "-f", str(inv), "--out", str(both), "--events", str(both)))
    assert error == f"error: --out and --events name the same file ({both}): give each its own"
    assert not both.exists()


def test_a_link_to_the_inventory_is_the_inventory(inv: Path, tmp_path: Path) -> None:
    (tmp_path / "soft.yaml").symlink_to(inv)
    os.link(inv, tmp_path / "hard.yaml")
    for name in ("soft.yaml", "hard.yaml"):
        error = one_error(run("plan", "-f", str(inv), "--out", str(tmp_path / name)))
        assert "is the inventory" in error, error
    assert inv.read_text() == INVENTORY
    relative = os.path.relpath(inv)
    assert "is the inventory" in one_error(run("plan", "-f", relative, "--events", str(inv)))


def test_apply_refuses_events_over_its_plan_file_or_inventory(inv: Path, tmp_path: Path) -> None:
    saved = tmp_path / "saved.plan"
    saved.write_text("{}")
    error = one_error(run("apply", str(saved), "--events", str(saved)))
    assert error.startswith(f"error: --events {saved} is the plan file, which this command reads"), error
    assert saved.read_text() == "{}"
    assert "is the inventory" in one_error(run("apply", "-f", str(inv), "--events", str(inv)))


def test_outputs_refuse_the_password_file(inv: Path, tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    result = CliRunner().invoke(app, ["--password-file", str(secret), "plan", "-f", str(inv), "--events",
                                      str(secret)], env={"VGPUCTL_URL": "https://vc.invalid/sdk"})
    assert "is the --password-file, which this command reads" in one_error(result)
    assert secret.read_text() == "s3cret\n"


@pytest.mark.parametrize("variable", ["VGPUCTL_ESXI_KNOWN_HOSTS", "VGPUCTL_ESXI_KEY_FILE", "VGPUCTL_ESXI_HOSTS"])
def test_outputs_refuse_the_esxi_shells_files(inv: Path, tmp_path: Path, variable: str) -> None:
    """A plan saved over the SSH known_hosts file, the private key or the host map the run reads would replace it."""
    read = tmp_path / "ssh-file"
    read.write_text("kept\n")
    for option in ("--out", "--events"):
        result = CliRunner().invoke(app, ["plan", "-f", str(inv), option, str(read)], env={**ENV, variable: str(read)})
        assert "which this command reads" in one_error(result) and variable in result.stderr
    assert read.read_text() == "kept\n"


def test_outputs_refuse_a_host_entrys_ssh_files(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("kept\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"apiVersion: vgpuctl/v1\nhosts:\n  - cluster: C\n    ssh: {{known_hosts: {known}}}\n")
    result = run("plan", "-f", str(inv), "--out", str(known))
    assert "is hosts[0].ssh.known_hosts, which this command reads" in one_error(result)
    assert known.read_text() == "kept\n"


@pytest.mark.parametrize("command", [["plan", "-f", "INV"], ["export", "-f", "INV"]])
def test_an_out_file_that_cannot_be_written_there_is_refused_before_anything_runs(
        inv: Path, tmp_path: Path, command: list[str]) -> None:
    """ENV names a vCenter that cannot be reached: each line is refused before any connection is tried."""
    args = [str(inv) if a == "INV" else a for a in command]
    missing = tmp_path / "no-such-folder" / "x.out"
    assert one_error(run(*args, "--out", str(missing))) == \
        f"error: --out {missing}: there is no folder {missing.parent}"
    assert one_error(run(*args, "--out", "-")).startswith("error: --out -: --out writes a file, give it a name")
    assert not Path("-").exists()


def test_export_and_capacity_refuse_their_inputs(inv: Path, tmp_path: Path) -> None:
    assert "is the inventory" in one_error(run("export", "-f", str(inv), "--out", str(inv)))
    demand = tmp_path / "demand.yaml"
    demand.write_text("apiVersion: vgpuctl/v1\nkind: Demand\ndemand: []\n")
    assert "is the demand file" in one_error(run("capacity", "--demand", str(demand), "--out", str(demand)))
    assert "is the inventory" in one_error(run("capacity", "-f", str(inv), "--demand", str(demand), "--out",
                                               str(inv)))
    assert inv.read_text() == INVENTORY and demand.read_text().endswith("demand: []\n")


def test_k8s_render_never_writes_a_manifest_over_its_inventory(tmp_path: Path) -> None:
    folder = tmp_path / "manifests"
    folder.mkdir()
    inv = folder / "cluster.yaml"  # the name of the Cluster manifest render writes
    text = textwrap.dedent("""
        apiVersion: vgpuctl/v1
        vm_classes:
          - {name: gpu-small, cpus: 4, memory_gb: 32, vgpus: {profile: grid_a100-10c}}
        namespaces:
          - {name: ml-team, vm_classes: [gpu-small]}
        """)
    inv.write_text(text)
    error = one_error(run("k8s", "render", "-f", str(inv), "-n", "ml-team", "--cluster-kind", "cluster", "--out",
                          str(folder)))
    assert error.startswith(f"error: --out {inv} is the inventory, which this command reads"), error
    assert inv.read_text() == text and sorted(p.name for p in folder.iterdir()) == ["cluster.yaml"]


def test_experiment_results_never_hold_the_experiment_file(tmp_path: Path, inv: Path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"apiVersion: vgpuctl/v1\nkind: Experiment\ninventory: {inv}\nvms: [a]\n"
                   "workload: {command: hostname}\n"
                   "variants: [{name: base}]\n")
    error = one_error(run("experiment", "run", str(exp), "--yes", "--results", str(tmp_path)))
    assert error.startswith(f"error: --results {tmp_path} holds the experiment file ({exp})"), error


# ------------------------------------------------------------------------------------------ write errors


@pytest.mark.skipif(not DEV_FULL.exists(), reason="no /dev/full")
def test_events_to_a_full_disk_stop_the_run_before_anything_runs(inv: Path) -> None:
    error = one_error(run("plan", "-f", str(inv), "--events", str(DEV_FULL)))
    # the first event is written before the plan reads vCenter: vc.invalid was never asked
    assert error == f"error: --events {DEV_FULL}: No space left on device (the events stop after 0)", error


def test_events_to_a_folder_that_is_not_there_are_one_line(inv: Path, tmp_path: Path) -> None:
    target = tmp_path / "missing" / "events.jsonl"
    assert one_error(run("plan", "-f", str(inv), "--events", str(target))) == (
        f"error: --events {target}: there is no folder {target.parent}")
    assert one_error(run("plan", "-f", str(inv), "--events", "json")).startswith(
        "error: --events json: a file named 'json' looks like an output format")


class _FailsAfter:
    """A stream whose writes fail (ENOSPC) once `good` lines are written."""

    def __init__(self, good: int):
        self.good, self.lines = good, 0

    def write(self, text: str) -> int:
        if self.lines >= self.good:
            raise OSError(28, "No space left on device")
        self.lines += 1
        return len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _event(seq: int) -> Noted:
    return Noted(time="2026-01-01T00:00:00.000Z", run_id="r", seq=seq, message="m")


def test_a_later_event_that_cannot_be_written_ends_the_stream_not_the_run() -> None:
    out = EventFile(_FailsAfter(2), close=True, target="ev.jsonl")  # type: ignore[arg-type]
    for seq in range(1, 6):
        out.write(_event(seq))  # no step of a run ever sees the failure
    with pytest.raises(OutputError) as info:
        out.close()
    assert str(info.value) == "--events ev.jsonl: No space left on device (the events stop after 2)"
    first = EventFile(_FailsAfter(0), close=True, target="ev.jsonl")  # type: ignore[arg-type]
    with pytest.raises(OutputError, match="stop after 0"):
        first.write(_event(1))


def test_write_whole_replaces_a_file_or_leaves_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.yaml"
    path.write_text("old\n")
    path.chmod(0o640)
    outpaths.write_whole(path, "new\n", "--out")
    assert path.read_text() == "new\n" and stat.S_IMODE(path.stat().st_mode) == 0o640  # its mode kept

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError) as info:
        outpaths.write_whole(path, "half\n", "--out")
    assert str(info.value) == f"--out {path}: No space left on device"
    assert path.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml"]


def test_write_whole_follows_a_link_and_sets_the_mode_asked(tmp_path: Path) -> None:
    real = tmp_path / "real.plan"
    real.write_text("x")
    link = tmp_path / "link.plan"
    link.symlink_to(real)
    outpaths.write_whole(link, "y", "--out", mode=0o600)
    assert link.is_symlink() and real.read_text() == "y" and stat.S_IMODE(real.stat().st_mode) == 0o600


@pytest.mark.skipif(not DEV_FULL.exists(), reason="no /dev/full")
def test_write_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match=f"^--out {DEV_FULL}: No space left on device$"):
        outpaths.write_whole(DEV_FULL, "x", "--out")
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(OutputError, match="Not a directory"):
        outpaths.write_whole(blocked / "out.yaml", "x", "--out")


def test_a_plan_file_is_written_whole_and_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "saved.plan"
    saved = planfile.SavedPlan("inv", "inv.yaml", "https://vc/sdk", "farm:x plan:y", {"vm_changes": []})
    planfile.save(path, saved)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and planfile.load(path).inventory_text == "inv"
    with pytest.raises(OutputError, match="Not a directory"):
        planfile.save(path / "x.plan", saved)


def test_same_file() -> None:
    assert outpaths.same_file("a/../b.yaml", "b.yaml") and not outpaths.same_file("a.yaml", "b.yaml")
    with pytest.raises(UsageError, match="--out and --events name the same file"):
        outpaths.refuse_overlaps({"--out": Path("x"), "--events": Path("./x")}, {})
