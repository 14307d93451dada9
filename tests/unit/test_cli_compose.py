"""Composed inventories on the command line: --values, --env and --allow-include-outside on every command that
reads an inventory with -f, `validate --show-merged` and its round trip, and saved plans of a composed inventory.
No vCenter: every command here stops at its inventory, before it would connect."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer.main
from ruamel.yaml import YAML
from typer.testing import CliRunner

from vgpuctl.cli.main import app
from vgpuctl.cli.plan import load_saved_plan, save_plan
from vgpuctl.inventory import Inventory, load_inventory, load_inventory_text, validate
from vgpuctl.inventory.compose import Composition
from vgpuctl.model import Observed
from vgpuctl.outcome import Planned
from vgpuctl.planner import make_plan
from vgpuctl.reports.plan import plan_to_json

pytestmark = pytest.mark.unit

FARM = Path(__file__).resolve().parents[1] / "fixtures" / "plan" / "_default_farm.yaml"
COMPOSING = ("--values", "--env", "--allow-include-outside")
# required options of the commands that take -f, besides it (each required argument is given "a")
EXTRA = {("vm", "vgpu", "add"): ["--profile", "grid_a100-4c"], ("host", "scheduler"): ["--policy", "best-effort"],
         ("host", "graphics"): ["--default-type", "shared"], ("host", "mig"): ["--enable"],
         ("host", "nvlink"): ["--enable"], ("k8s", "render"): ["-n", "ml-team"]}
FILES = {
    "lab.yaml": "apiVersion: vgpuctl/v1\ninclude: [common/vms.yaml]\nvcenter: {datacenter: DC0}\n"
                "overlays:\n  prod:\n    vms:\n      - {name: 'train-{01..02}', cpus: 16}\n",
    "common/vms.yaml": "vms:\n  - name: train-{01..02}\n    template: ubuntu-22.04-ml\n    cluster: GPU-Cluster\n"
                       "    vgpus: {profile: grid_a100-40c, count: 2}\n",
    "values.yaml": "vms:\n  - name: train-{01..02}\n    memory_gb: 96\n",
}  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VGPUCTL_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path / "lab.yaml"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def commands_with_file() -> list[tuple[tuple[str, ...], Any]]:
    def leaves(group: Any, path: tuple[str, ...] = ()) -> Any:
        for name, command in group.commands.items():
            if getattr(command, "commands", None):
                yield from leaves(command, (*path, name))
            else:
                yield (*path, name), command

    return [(path, c) for path, c in leaves(typer.main.get_command(app)) if any("--file" in p.opts for p in c.params)]


def planned(inv: Inventory) -> dict[str, Any]:
    return plan_to_json(make_plan(inv, Observed.from_dict(YAML(typ="safe").load(FARM.read_text()))))


def test_every_command_with_an_inventory_composes_it() -> None:
    found = commands_with_file()
    assert {" ".join(path) for path, _ in found} >= {"validate", "plan", "apply", "provision", "guest deploy",
                                                     "preflight", "status", "export", "k8s render", "host show"}
    for path, command in found:
        flags = {flag for p in command.params for flag in p.opts}
        assert set(COMPOSING) <= flags, path


@pytest.mark.parametrize(("path", "command"), commands_with_file(), ids=[" ".join(p) for p, _ in commands_with_file()])
def test_each_command_applies_env_to_its_inventory(lab: Path, path: tuple[str, ...], command: Any) -> None:
    arguments = ["a" for p in command.params if p.param_type_name == "argument" and p.required]
    result = invoke(*path, *arguments, "-f", str(lab), *EXTRA.get(path, []), "--env", "staging")
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (f"{lab}:4:1: overlays: no overlay named 'staging' for --env (overlays: 'prod')")


def test_composing_options_need_an_inventory(lab: Path, tmp_path: Path) -> None:
    result = invoke("status", "--env", "prod")
    assert result.exit_code == 1
    assert result.stderr.strip() == ("error: --values, --env and --allow-include-outside go with an inventory: they "
                                     "compose the inventory given with -f FILE")
    saved = tmp_path / "saved.plan"
    saved.write_text("{}")
    result = invoke("apply", str(saved), "--values", str(tmp_path / "values.yaml"))
    assert result.exit_code == 1
    assert result.stderr.strip() == ("error: --values, --env and --allow-include-outside go with an inventory: a saved "
                                     "plan holds the inventory it was made from, as merged then")


def test_help_names_the_composing_options() -> None:
    text = invoke("plan", "--help").stdout
    assert all(flag in text for flag in COMPOSING)
    assert "--show-merged" in invoke("validate", "--help").stdout


def test_show_merged_round_trips(lab: Path, tmp_path: Path) -> None:
    result = invoke("validate", "-f", str(lab), "--env", "prod", "--values", str(tmp_path / "values.yaml"),
                    "--show-merged")
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == f"{lab}: valid (0 host entries, 2 VMs)"
    merged = tmp_path / "merged.yaml"
    merged.write_text(result.stdout)
    data = YAML(typ="safe").load(result.stdout)
    assert data["vms"][0]["cpus"] == 16 and data["vms"][0]["memory_gb"] == 96 and "overlays" not in data
    again = invoke("validate", "-f", str(merged))
    assert again.exit_code == 0 and again.stdout.strip() == f"{merged}: valid (0 host entries, 2 VMs)"
    composed = load_inventory(lab, Composition((tmp_path / "values.yaml",), "prod"))
    flat = load_inventory(merged)
    assert flat.model_dump(mode="json") == composed.model_dump(mode="json")
    assert planned(flat) == planned(composed)
    def body(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("#")]

    assert body(invoke("validate", "-f", str(merged), "--show-merged").stdout) == body(result.stdout)


def test_show_merged_is_yaml_not_json(lab: Path) -> None:
    result = invoke("validate", "-f", str(lab), "--show-merged", "-o", "json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["message"] == ("--show-merged prints the inventory as YAML: leave out "
                                                            "-o json")


@pytest.mark.parametrize("target", ["common/vms.yaml", "values.yaml"])
def test_outputs_never_overwrite_a_file_of_the_inventory(lab: Path, tmp_path: Path, target: str) -> None:
    before = (tmp_path / target).read_text()
    result = invoke("plan", "-f", str(lab), "--values", str(tmp_path / "values.yaml"), "--out", str(tmp_path / target))
    assert result.exit_code == 1
    assert "--out" in result.stderr and str(tmp_path / target) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (tmp_path / target).read_text() == before


def test_a_saved_plan_keeps_the_inventory_as_merged(lab: Path, tmp_path: Path) -> None:
    inv = load_inventory(lab, Composition((tmp_path / "values.yaml",), "prod"))
    validate(inv)
    observed = Observed.from_dict(YAML(typ="safe").load(FARM.read_text()))
    done = Planned(inventory=inv, observed=observed, plan=make_plan(inv, observed), vcenter="https://vc/sdk")
    out = tmp_path / "saved.plan"
    save_plan(out, lab, done, inv)
    (tmp_path / "common" / "vms.yaml").write_text("vms: []\n")  # the files move on: the plan keeps what it planned
    saved, again = load_saved_plan(out)
    assert saved.composed_from == [str(lab), str(tmp_path / "common/vms.yaml"), str(tmp_path / "values.yaml")]
    assert saved.env == "prod" and saved.inventory_path == str(lab)
    assert again.model_dump(mode="json") == inv.model_dump(mode="json")
    assert again.source_path == str(lab)  # relative paths in it are read from the inventory's folder, as before
    assert plan_to_json(make_plan(again, observed)) == plan_to_json(done.plan)
    shown = invoke("show", str(out))
    assert shown.exit_code == 0, shown.output
    assert f"the plan of {lab} (merged from 3 file(s), overlay prod) against https://vc/sdk" in shown.stderr
    document = json.loads(out.read_text())
    document["inventory"] = document["inventory"].replace("cpus: 16", "cpus: 15")
    out.write_text(json.dumps(document))
    assert "the plan file was edited" in invoke("show", str(out)).stderr


def test_a_saved_plan_of_one_plain_file_keeps_its_text(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(FILES["common/vms.yaml"].replace("vms:", "apiVersion: vgpuctl/v1\nvms:", 1)
                    + "overlays:\n  prod: {}\n")
    inv = load_inventory(path)
    observed = Observed.from_dict(YAML(typ="safe").load(FARM.read_text()))
    done = Planned(inventory=inv, observed=observed, plan=make_plan(inv, observed), vcenter="https://vc/sdk")
    out = tmp_path / "saved.plan"
    save_plan(out, path, done, inv)
    document = json.loads(out.read_text())
    assert document["inventory"] == path.read_text() and "inventory_merged_from" not in document
    assert load_inventory_text(document["inventory"]).model_dump() == inv.model_dump()
