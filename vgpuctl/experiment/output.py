"""What `experiment run` and `experiment report` leave in the results directory: report.md, report.json (the
`experiment-report` document) and plots/."""

from __future__ import annotations

import json
from pathlib import Path

from vgpuctl.experiment.report import build_report, render_markdown, write_plots
from vgpuctl.experiment.store import ResultsDir, write_atomic
from vgpuctl.reports.experiment import ExperimentReport, experiment_report


def write_report(results: ResultsDir) -> tuple[Path, ExperimentReport]:
    """report.md, report.json and plots/ in the results directory; the Markdown file and the report printed."""
    report = build_report(results)
    write_plots(report, results.root / "plots")
    document = experiment_report(report)
    write_atomic(results.root / "report.json", json.dumps(document.to_dict(), indent=2, sort_keys=True) + "\n")
    path = results.root / "report.md"
    write_atomic(path, render_markdown(report))
    return path, document
