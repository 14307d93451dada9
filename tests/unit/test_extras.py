"""Installs that run: a missing optional module (the `capacity` and `experiment` extras) or a missing
ansible-playbook is one line naming what to install, exit 1, never "a bug in vgpuctl"."""

from __future__ import annotations

import builtins
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vgpuctl import extras
from vgpuctl.cli.main import app

pytestmark = pytest.mark.unit

sys.path.insert(0, str(Path(__file__).parent))
from test_experiment_report import results as recorded_results  # noqa: E402, F401  (the recorded results fixture)


def hide(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make `import name` (and its submodules) fail as when the package is not installed."""
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        monkeypatch.delitem(sys.modules, loaded)
    real = builtins.__import__

    def fake(module: str, *args: Any, **kwargs: Any) -> Any:
        if module == name or module.startswith(name + "."):
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
        return real(module, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    monkeypatch.setitem(sys.modules, name, None)  # importlib.import_module goes through sys.modules


def test_experiment_report_without_matplotlib_names_the_extra(recorded_results, monkeypatch) -> None:  # noqa: F811
    hide(monkeypatch, "matplotlib")
    out = CliRunner().invoke(app, ["experiment", "report", str(recorded_results.root)])
    assert out.exit_code == 1
    assert "pip install 'vgpuctl[experiment]'" in out.output
    assert "bug" not in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1
    as_json = CliRunner().invoke(app, ["-o", "json", "experiment", "report", str(recorded_results.root)])
    error = json.loads(as_json.stdout)["error"]
    assert as_json.exit_code == 1 and error["type"] == "MissingExtra" and "vgpuctl[experiment]" in error["message"]


def test_capacity_solver_without_ortools_names_the_extra(monkeypatch) -> None:
    hide(monkeypatch, "ortools")
    with pytest.raises(extras.MissingExtra, match=r"pip install 'vgpuctl\[capacity\]'"):
        extras.require("ortools")


def test_the_hint_names_the_package_install_and_the_source_checkout_install(monkeypatch) -> None:
    hide(monkeypatch, "ortools")
    with pytest.raises(extras.MissingExtra) as caught:
        extras.require("ortools", instead="use --greedy")
    message = str(caught.value)
    assert "pip install 'vgpuctl[capacity]'" in message and "pip install -e '.[capacity]'" in message
    assert message.endswith("; or use --greedy") and "\n" not in message


def test_capacity_demand_without_ortools_says_so_before_reading_the_farm(monkeypatch, tmp_path) -> None:
    from vgpuctl.cli import capacity

    def no_farm(*_args: Any) -> None:
        raise AssertionError("the farm was read before the missing solver was named")

    hide(monkeypatch, "ortools")
    monkeypatch.setattr(capacity, "_observe", no_farm)
    demand = tmp_path / "demand.yaml"
    demand.write_text(DEMAND)
    out = CliRunner().invoke(app, ["capacity", "--demand", str(demand)])
    assert out.exit_code == 1, out.output
    (line,) = out.output.strip().splitlines()
    assert "pip install 'vgpuctl[capacity]'" in line and "pip install -e '.[capacity]'" in line
    assert line.endswith("or use --greedy (first-fit decreasing only)")


DEMAND = ("apiVersion: vgpuctl/v1\nkind: Demand\n"
          "demand:\n  - {name: a, count: 1, vgpus: {profile: grid_a100-40c, count: 1}}\n")


def test_any_import_error_of_an_optional_module_is_reported_as_the_missing_extra(monkeypatch) -> None:
    """An import of an optional module on a path that does not call `require` still names the extra."""
    from vgpuctl.cli import common

    hide(monkeypatch, "matplotlib")
    try:
        import matplotlib.pyplot  # noqa: F401
    except ImportError as err:
        problem = err
    lines: list[str] = []
    monkeypatch.setattr(common.typer, "echo", lambda message, err=False: lines.append(str(message)))
    assert common.report_error(problem, None) == 1
    assert lines == ["error: the experiment plots (experiment run/report) needs matplotlib, which is not "
                     "installed: pip install 'vgpuctl[experiment]' (in a source checkout: pip install -e "
                     "'.[experiment]')"]


def test_an_import_error_inside_an_installed_extra_is_not_hidden(monkeypatch) -> None:
    def broken(name: str) -> None:
        raise ModuleNotFoundError("No module named 'kiwisolver'", name="kiwisolver")  # matplotlib's own dependency

    monkeypatch.setattr(extras.importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="kiwisolver"):
        extras.require("matplotlib")


def test_guest_deploy_without_ansible_playbook_says_what_to_install(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(extras.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(extras.UsageError, match=r"ansible-playbook, which is not installed: pip install 'ansible-core"):
        extras.ansible_playbook()
    tool = tmp_path / "ansible-playbook"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert extras.ansible_playbook() == str(tool)


def test_ansible_core_is_a_dependency() -> None:
    import tomllib

    deps = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("ansible-core") for d in deps)
