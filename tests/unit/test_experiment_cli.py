"""`vgpuctl experiment validate` and `report` through the CLI (no vCenter needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.experiment import apply_or_refuse
from vgpuctl.cli.main import app
from vgpuctl.cli.plan import CliHooks
from vgpuctl.errors import PlanError, VgpuctlError
from vgpuctl.experiment.runner import NotApplied

pytestmark = pytest.mark.unit

sys.path.insert(0, str(Path(__file__).parent))
from test_experiment_report import results as recorded_results  # noqa: E402, F401  (the recorded results fixture)
from test_experiment_schema import EXPERIMENT, write  # noqa: E402


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_validate(tmp_path):
    path = write(tmp_path)
    out = invoke("experiment", "validate", str(path))
    assert out.exit_code == 0, out.output
    assert out.output.strip() == f"{path}: valid (3 variants: nvlink-on, nvlink-off, mig)"
    bad = write(tmp_path, EXPERIMENT.replace("nvlink: disabled}", "nvlink: of}"))
    out = invoke("experiment", "validate", str(bad))
    assert out.exit_code == 1
    assert "experiment.yaml:10:13: variants[1].hosts[0]: variant 'nvlink-off' merged onto inventory.yaml: " \
           "hosts[0].nvlink: must be 'enabled' or 'disabled' (got 'of')" in out.output
    assert "Traceback" not in out.output


def test_report_writes_markdown_json_and_plots(recorded_results, tmp_path):  # noqa: F811 (pytest fixture)
    root = recorded_results.root
    out = invoke("experiment", "report", str(root))
    assert out.exit_code == 0, out.output
    assert out.output.strip() == f"{root}/report.md (5 flagged run(s))"
    assert (root / "plots" / "nccl-tests.all_reduce_perf.across-vms.png").stat().st_size > 10_000
    doc = json.loads((root / "report.json").read_text())
    assert [t["key"] for t in doc["tables"]] == ["nccl-tests.all_reduce_perf.across-vms", "p2pBandwidthLatencyTest"]
    assert "## Flagged runs" in (root / "report.md").read_text()
    as_json = invoke("-o", "json", "experiment", "report", str(root))
    assert json.loads(as_json.stdout)["applied"] == "nvlink-off"


def test_report_refuses_a_folder_that_is_not_a_results_directory(tmp_path):
    out = invoke("experiment", "report", str(tmp_path))
    assert out.exit_code == 1 and "not an experiment results directory (no experiment.json)" in out.output


def test_an_apply_refused_before_it_began_is_not_applied_and_one_that_began_is_not() -> None:
    """The experiment's farm tells a refusal (plan errors, no confirmation: nothing changed) from a failure of
    an apply that began (the farm may have changed) by whether the apply's progress started."""
    def refused(hooks: CliHooks) -> None:
        raise PlanError(["vm train-01: host 'esx-99' not found"])

    with pytest.raises(NotApplied) as caught:
        apply_or_refuse(refused, CliHooks(GlobalOptions(), yes=True))
    assert isinstance(caught.value.error, PlanError)

    def failed_midway(hooks: CliHooks) -> None:
        hooks.began = True  # what apply_progress says as the apply starts
        raise VgpuctlError("apply failed on host(s) esx-01")

    with pytest.raises(VgpuctlError) as midway:
        apply_or_refuse(failed_midway, CliHooks(GlobalOptions(), yes=True))
    assert not isinstance(midway.value, NotApplied)
