"""Output paths made from data stay inside their folder: a name with `..`, an absolute name or a symbolic link
pointing out is refused with one line, for every writer that joins data to a folder (k8s render, experiment
results: variants, repetitions, outputs, plots)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vgpuctl.cli.main import app
from vgpuctl.experiment.store import ResultsDir, RunRecord
from vgpuctl.outpaths import OutsideFolder, inside

pytestmark = pytest.mark.unit


def test_a_name_below_the_folder_is_taken(tmp_path: Path) -> None:
    assert inside(tmp_path, "variants", "a.b-c", "rep-001") == tmp_path.resolve() / "variants/a.b-c/rep-001"


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/etc/passwd", ".", ""])
def test_a_name_that_leaves_the_folder_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(OutsideFolder, match="would be written outside"):
        inside(tmp_path, name)


def test_a_symbolic_link_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "variants").symlink_to(tmp_path.parent)
    with pytest.raises(OutsideFolder):
        inside(tmp_path / "out", "variants", "x")


def test_a_tampered_record_cannot_read_outside_its_repetition(tmp_path: Path) -> None:
    store = ResultsDir(tmp_path / "results")
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    rec = RunRecord("base", 1, {"key": "command"}, "ok", outputs={"vm-1": {"file": "../../../../secret.txt"}})
    store.record(rec, {}, {})
    path = store.rep_dir("base", 1) / "result.json"
    data = json.loads(path.read_text())
    data["outputs"] = {"vm-1": {"file": "../../../../secret.txt"}}
    path.write_text(json.dumps(data))
    with pytest.raises(OutsideFolder):
        store.output("base", 1, "vm-1")
    with pytest.raises(OutsideFolder):
        store.variant_dir("../../elsewhere")


INVENTORY = """
apiVersion: vgpuctl/v1
vm_classes:
  - {name: gpu-small, cpus: 4, memory_gb: 32, vgpus: {profile: grid_a100-10c}}
namespaces:
  - {name: ml-team, vm_classes: [gpu-small]}
"""


def test_k8s_render_refuses_a_cluster_name_with_a_newline_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent(INVENTORY))
    out = tmp_path / "manifests"
    args = ["k8s", "render", "-f", str(path), "-n", "ml-team", "--out", str(out), "--cluster-kind", "cluster",
            "--cluster-name", "gpu\nkind: x"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: --cluster-name 'gpu\\nkind: x': must be a Kubernetes name (RFC 1123 label): lower-case letters, digits "
        "and '-', starting and ending with a letter or digit, at most 63 characters"
    )
    assert not out.exists()
    ok = CliRunner().invoke(app, [*args[:-1], "train"])
    assert ok.exit_code == 0, ok.output
    assert sorted(p.name for p in out.iterdir()) == [
        "cluster.yaml", "gpu-operator-values.yaml", "gridd.conf", "licensing-secret.sh",
        "virtualmachine-gpu-small.yaml",
    ]  # fmt: skip
