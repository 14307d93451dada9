"""Fleets (an inventory of several vCenters) without a vCenter: the split into one inventory per vCenter,
--vcenter, each vCenter's credentials (its own, never another's), the refusals that come before anything
connects (one line, exit 1), saved plans with a part per vCenter, and the fleet's report text.

The file rules and their FILE:LINE:COL errors are the fixtures tests/fixtures/inventory/{good,bad}/fleet*.yaml
(tests/unit/test_inventory.py); against two gpusims: tests/sim/test_fleet_sim.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vgpuctl import fleet, planfile
from vgpuctl.cli import common
from vgpuctl.cli import fleet as cli_fleet
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.main import app
from vgpuctl.errors import InventoryErrors, UsageError
from vgpuctl.fleetrun import FleetPlanned, PartRun, part_error
from vgpuctl.inventory import load_inventory, load_inventory_text, validate
from vgpuctl.model import Observed, ObservedHost, Plan, VmChange
from vgpuctl.outcome import Planned
from vgpuctl.reports.base import TextLayout
from vgpuctl.reports.fleet import FleetPlanPart, fleet_plan_report
from vgpuctl.reports.plan import plan_report
from vgpuctl.scope import Scope, ScopeResult, select

pytestmark = pytest.mark.unit

GOOD = Path(__file__).resolve().parents[1] / "fixtures" / "inventory" / "good" / "fleet.yaml"

FLEET = """\
apiVersion: vgpuctl/v1
vcenters:
  - {name: east, url: "https://vc-east.invalid/sdk", datacenter: DC0}
  - {name: lab-west, url: "https://vc-west.invalid/sdk"}
default_vcenter: east
vms:
  - name: train-01
    vgpus: {profile: grid_a100-20c}
  - name: infer-01
    vcenter: lab-west
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("VGPUCTL_", "GOVC_")):
            monkeypatch.delenv(name)


def loaded(text: str = FLEET) -> object:
    inv = load_inventory_text(text, "fleet.yaml")
    validate(inv)
    return inv


# ------------------------------------------------------------------------------------------ the split


def test_each_vcenter_gets_its_own_entries_and_its_section() -> None:
    inv = load_inventory(GOOD)
    validate(inv)
    east, west = fleet.split(inv)
    assert (east.name, west.name) == ("east", "lab-west")
    assert [(v.name, v.vgpu_profiles) for v in east.inventory.vms] == [
        ("train-01", ["grid_a100-20c"]), ("train-02", ["grid_a100-20c"])]
    assert [(v.name, v.vgpu_profiles) for v in west.inventory.vms] == [("train-01", ["grid_a100-3-20c"]),
                                                                      ("infer-01", [])]
    assert [h.graphics is not None for h in east.inventory.hosts] == [True] and len(west.inventory.hosts) == 1
    assert [c.vgpu_profiles for c in west.inventory.vm_classes] == [["grid_a100-3-20c"]]
    assert [n.name for n in east.inventory.namespaces] == ["ml"] == [n.name for n in west.inventory.namespaces]
    assert east.inventory.vcenter.url == "https://vc-east.example.com/sdk"
    assert east.inventory.vcenter.datacenter == "DC-East" and west.inventory.vcenter.datacenter is None
    assert west.inventory.vcenter.tls.thumbprint is not None and east.inventory.vcenter.tls.thumbprint is None
    assert not east.inventory.is_fleet and east.inventory.vcenters == []
    # errors of a part still point into the file: its entries keep their places
    err = west.inventory.error(("vms", west.inventory.vms[1]._index, "name"), "x")
    assert (err.file, err.line) == (str(GOOD), 25)


def test_a_single_vcenter_inventory_is_no_fleet_and_names_no_vcenter() -> None:
    inv = load_inventory_text("apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms: [{name: a}]\n")
    assert not inv.is_fleet and inv.vcenter_of(None) is None
    with pytest.raises(UsageError, match="--vcenter east: the inventory names no vCenters"):
        fleet.refuse_vcenter_option(inv, ["east"])


def test_the_only_vcenter_of_the_list_is_the_default() -> None:
    inv = load_inventory_text("apiVersion: vgpuctl/v1\nvcenters: [{name: solo}]\nvms: [{name: a}]\n")
    validate(inv)
    (part,) = fleet.split(inv)
    assert [v.name for v in part.inventory.vms] == ["a"]


def test_vcenter_selects_by_name_or_glob_and_names_none_is_an_error() -> None:
    parts = fleet.split(loaded())
    chosen, left_out = fleet.select(parts, ["lab-*"])
    assert [p.name for p in chosen] == ["lab-west"] and left_out == ["east"]
    assert [p.name for p in fleet.select(parts, [])[0]] == ["east", "lab-west"]
    with pytest.raises(UsageError, match=r"--vcenter north: no vCenter of the inventory matches \(vcenters: east, "
                                         r"lab-west\)"):
        fleet.select(parts, ["east", "north"])


def test_the_scope_within_each_vcenter_is_lenient_and_must_match_somewhere() -> None:
    assert fleet.part_scope(Scope(vcenters=["east"])) is None
    part = fleet.part_scope(Scope(vms=["train-*"], vcenters=["east"]))
    assert part is not None and part.lenient and part.vms == ["train-*"] and part.vcenters == []
    scope = Scope(hosts=["esx-9"], vms=["train-*"])

    def result(unmatched: list[str]) -> ScopeResult:
        return ScopeResult(scope, [], [], {}, {}, [], [], False, unmatched)

    assert fleet.unmatched_anywhere(scope, [result(["--host esx-9"]), result([])]) == []
    assert fleet.unmatched_anywhere(scope, [result(["--host esx-9"]), result(["--host esx-9"]), None]) == \
        ["--host esx-9"]
    assert fleet.unmatched_anywhere(scope, [None]) == []  # nothing read decides nothing


def test_a_lenient_scope_lists_what_matched_nothing_instead_of_failing() -> None:
    inv = load_inventory_text("apiVersion: vgpuctl/v1\nvms: [{name: a}]\n")
    observed = Observed(hosts={"esx-01": ObservedHost("esx-01")})
    with pytest.raises(UsageError, match="--vm b: no VM"):
        select(Scope(vms=["b"]), inv, observed)
    picked = select(Scope(vms=["b", "a"], hosts=["esx-09", "esx-01"], clusters=["C*"], lenient=True), inv, observed)
    assert picked.vms == {"a"} and picked.hosts == {"esx-01"}
    assert picked.unmatched == ["--host esx-09", "--cluster C*", "--vm b"]


# ------------------------------------------------------------------------------------------ credentials


def opts(**fields: object) -> GlobalOptions:
    return GlobalOptions(**fields)  # type: ignore[arg-type]


def test_each_vcenter_has_its_own_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    east, west = fleet.split(loaded())
    pw = tmp_path / "west.pw"
    pw.write_text("west-secret\n")
    pw.chmod(0o600)
    monkeypatch.setenv("VGPUCTL_PASSWORD_EAST", "east-secret")
    monkeypatch.setenv("VGPUCTL_PASSWORD_FILE_LAB_WEST", str(pw))
    monkeypatch.setenv("VGPUCTL_USERNAME_LAB_WEST", "svc-west")
    monkeypatch.setenv("VGPUCTL_PASSWORD", "the-single-one")  # never read for a fleet
    settings = cli_fleet.fleet_settings(opts(username="admin"), [east, west])
    assert (settings["east"].username, settings["east"].password) == ("admin", "east-secret")
    assert (settings["lab-west"].username, settings["lab-west"].password) == ("svc-west", "west-secret")
    assert settings["east"].sdk_url == "https://vc-east.invalid/sdk"
    monkeypatch.setenv("VGPUCTL_URL_LAB_WEST", "https://bob:url%40pw@vc-other.invalid/sdk")
    monkeypatch.delenv("VGPUCTL_PASSWORD_FILE_LAB_WEST")
    monkeypatch.delenv("VGPUCTL_USERNAME_LAB_WEST")
    other = cli_fleet.part_settings(opts(username="admin"), west)
    assert (other.url, other.username, other.password) == ("https://vc-other.invalid/sdk", "bob", "url@pw")


def test_missing_credentials_name_the_vcenter_and_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = fleet.split(loaded())
    monkeypatch.setenv("VGPUCTL_PASSWORD_EAST", "east-secret")
    monkeypatch.setenv("VGPUCTL_PASSWORD", "shared")
    with pytest.raises(UsageError, match=r"^vCenter lab-west: no password: set VGPUCTL_PASSWORD_LAB_WEST or "
                                         "VGPUCTL_PASSWORD_FILE_LAB_WEST"):
        cli_fleet.fleet_settings(opts(username="admin"), parts)
    with pytest.raises(UsageError, match=r"^vCenter east: no user name: set VGPUCTL_USERNAME_EAST"):
        cli_fleet.fleet_settings(opts(), parts)
    no_url = fleet.split(loaded(FLEET.replace('url: "https://vc-west.invalid/sdk"', "datacenter: DC1")))
    monkeypatch.setenv("VGPUCTL_PASSWORD_LAB_WEST", "w")
    with pytest.raises(UsageError, match=r"^vCenter lab-west: no URL: set url in its vcenters entry, or "
                                         "VGPUCTL_URL_LAB_WEST"):
        cli_fleet.fleet_settings(opts(username="admin"), no_url)


def test_single_vcenter_options_are_refused_with_a_fleet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    parts = fleet.split(loaded())
    with pytest.raises(UsageError, match="--url names one vCenter"):
        cli_fleet.fleet_settings(opts(url="https://vc/sdk", url_from_command_line=True, username="u"), parts)
    with pytest.raises(UsageError, match="--password-file holds one vCenter's password"):
        cli_fleet.fleet_settings(opts(password_file=tmp_path / "pw", username="u"), parts)


def run(tmp_path: Path, *args: str, text: str = FLEET, env: dict[str, str] | None = None) -> object:
    inv = tmp_path / "fleet.yaml"
    inv.write_text(text)
    return CliRunner().invoke(app, [a.replace("INV", str(inv)) for a in args], env=env or {})


@pytest.mark.parametrize("command", [["plan", "-f", "INV"], ["apply", "-f", "INV", "--yes"], ["status", "-f", "INV"],
                                     ["export", "-f", "INV"], ["preflight", "-f", "INV"],
                                     ["capacity", "-f", "INV"]])
def test_refusals_come_before_anything_connects(tmp_path: Path, command: list[str]) -> None:
    env = {"VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD_EAST": "e"}  # *.invalid: a connection would fail otherwise
    result = run(tmp_path, *command, "--vcenter", "north", env=env)
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert result.stderr.strip() == "error: --vcenter north: no vCenter of the inventory matches (vcenters: " \
        "east, lab-west)"  # type: ignore[attr-defined]
    result = run(tmp_path, *command, env=env)
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert result.stderr.strip().splitlines() == ["error: vCenter lab-west: no password: set "  # type: ignore
                                                  "VGPUCTL_PASSWORD_LAB_WEST or VGPUCTL_PASSWORD_FILE_LAB_WEST (a "
                                                  "fleet takes no shared password and never prompts)"]


def test_a_bad_fleet_file_is_one_line_per_problem_with_its_place(tmp_path: Path) -> None:
    bad = FLEET + "  - name: gpu-01\n    vcenter: north\n"
    result = run(tmp_path, "-o", "json", "plan", "-f", "INV", text=bad)
    assert result.exit_code == 1  # type: ignore[attr-defined]
    detail = json.loads(result.stdout)["error"]["details"]  # type: ignore[attr-defined]
    assert detail == [{"message": "unknown vCenter 'north' (vcenters: east, lab-west)",
                       "file": str(tmp_path / "fleet.yaml"), "line": 12, "col": 14, "path": "vms[2].vcenter"}]


def test_vcenter_on_a_single_inventory_and_one_vcenter_commands_refuse(tmp_path: Path) -> None:
    single = "apiVersion: vgpuctl/v1\nvcenter: {url: https://vc.invalid/sdk}\n"
    result = run(tmp_path, "plan", "-f", "INV", "--vcenter", "east", text=single)
    assert result.exit_code == 1 and "--vcenter east: the inventory names no vCenters" in result.stderr  # type: ignore
    result = run(tmp_path, "profiles", "-f", "INV", env={"VGPUCTL_USERNAME": "u"})
    assert result.exit_code == 1 and "names several vCenters (vcenters:) and this command works on one" in \
        result.stderr  # type: ignore[attr-defined]
    result = run(tmp_path, "plan", "-f", "INV", "--events", "-")
    assert result.exit_code == 1 and "a fleet's runs are not streamed" in result.stderr  # type: ignore


def test_demand_and_drain_answer_for_the_one_vcenter_named(tmp_path: Path) -> None:
    env = {"VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD_EAST": "e", "VGPUCTL_PASSWORD_LAB_WEST": "w"}
    result = run(tmp_path, "capacity", "-f", "INV", "--drain", "esx-01", env=env)
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert result.stderr.strip() == "error: --demand or --drain works on one vCenter of the fleet: name it with " \
        "--vcenter (vcenters: east, lab-west)"  # type: ignore[attr-defined]
    result = run(tmp_path, "--url", "https://vc.invalid/sdk", "capacity", "-f", "INV", "--drain", "esx-01",
                 "--vcenter", "east", env=env)
    assert result.exit_code == 1 and "--url names one vCenter" in result.stderr  # type: ignore[attr-defined]


TWO_TRAIN = FLEET + "  - name: train-01\n    vcenter: lab-west\n"  # one VM name in each vCenter


@pytest.mark.parametrize("command", [["plan", "-f", "INV"], ["apply", "-f", "INV", "--yes"], ["status", "-f", "INV"],
                                     ["export", "-f", "INV"], ["preflight", "-f", "INV"],
                                     ["capacity", "-f", "INV"]])
@pytest.mark.parametrize("composing", [["--env", "prod"], ["--values", "VALUES"]])
def test_an_overlay_entry_of_a_name_two_vcenters_use_must_say_which(tmp_path: Path, command: list[str],
                                                                    composing: list[str]) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("vms:\n  - {name: train-01, cpus: 8}\n")
    text = TWO_TRAIN + "overlays:\n  prod:\n    vms:\n      - {name: train-01, cpus: 8}\n"
    env = {"VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD_EAST": "e", "VGPUCTL_PASSWORD_LAB_WEST": "w"}
    args = [a.replace("VALUES", str(values)) for a in [*command, *composing]]
    result = run(tmp_path, *args, text=text, env=env)
    assert result.exit_code == 1, result.output  # type: ignore[attr-defined]
    where = f"{values}:2:12: vms[0].name" if "--values" in composing else \
        f"{tmp_path / 'fleet.yaml'}:16:16: overlays.prod.vms[0].name"
    assert result.stderr.strip() == f"{where}: VM 'train-01' names entries of 2 vCenters ('east', 'lab-west'): " \
        "give 'vcenter' to say which"  # type: ignore[attr-defined]


def test_a_fleets_overlay_and_values_change_the_entries_of_the_vcenter_they_name(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("vms:\n  - {name: infer-01, cpus: 4}\n")  # one vCenter has it: no need to say which
    path = tmp_path / "fleet.yaml"
    path.write_text(TWO_TRAIN + "overlays:\n  prod:\n    vms:\n      - {name: train-01, vcenter: lab-west, cpus: 8}\n"
                    "    add:\n      vms:\n        - {name: infer-02, cpus: 2}\n")
    inventory = common.load_inventory(opts(env="prod", values=[values]), path)
    cpus = {(p.name, vm.name): vm.cpus for p in fleet.split(inventory) for vm in p.inventory.vms}
    assert cpus == {("east", "train-01"): None, ("east", "infer-02"): 2, ("lab-west", "infer-01"): 4,
                    ("lab-west", "train-01"): 8}
    values.write_text("vms:\n  - {name: train-01, vcenter: north, cpus: 4}\n")
    with pytest.raises(InventoryErrors, match="values.yaml:2:31: vms.0..vcenter: VM 'train-01' has no entry in "
                       r"vCenter 'north' \(its entries: 'east', 'lab-west'\)"):
        common.load_inventory(opts(values=[values]), path)


def test_a_fleet_split_across_files_may_use_a_name_in_each_vcenter(tmp_path: Path) -> None:
    (tmp_path / "west.yaml").write_text("vms:\n  - name: train-01\n    vcenter: lab-west\n")
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET.replace("default_vcenter: east\n", "default_vcenter: east\ninclude: [west.yaml]\n"))
    parts = {p.name: [vm.name for vm in p.inventory.vms] for p in fleet.split(common.load_inventory(opts(), path))}
    assert parts == {"east": ["train-01"], "lab-west": ["train-01", "infer-01"]}
    (tmp_path / "west.yaml").write_text("vms:\n  - name: infer-01\n    vcenter: lab-west\n")
    with pytest.raises(InventoryErrors, match="VM 'infer-01' is defined twice"):  # one vCenter: one file defines it
        common.load_inventory(opts(), path)


def test_a_fleet_composed_of_included_files_splits_as_one_file(tmp_path: Path) -> None:
    (tmp_path / "west.yaml").write_text("vms:\n  - name: infer-02\n    vcenter: lab-west\n")
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET.replace("default_vcenter: east\n", "default_vcenter: east\ninclude: [west.yaml]\n"))
    inventory = common.load_inventory(opts(), path)
    assert inventory.is_merged and inventory.composed_from == [str(path), str(tmp_path / "west.yaml")]
    parts = {p.name: [vm.name for vm in p.inventory.vms] for p in fleet.split(inventory)}
    assert parts == {"east": ["train-01"], "lab-west": ["infer-02", "infer-01"]}  # the included file's first
    west = next(p for p in fleet.split(inventory) if p.name == "lab-west")
    assert west.inventory.composed_from == inventory.composed_from  # its errors name the files as the fleet's do


# ------------------------------------------------------------------------------------------ saved plans


def test_a_fleet_plan_file_carries_a_part_per_vcenter(tmp_path: Path) -> None:
    path = tmp_path / "fleet.plan"
    parts = {"east": planfile.SavedPart("https://east/sdk", "farm:1 plan:2"),
             "west": planfile.SavedPart("https://west/sdk", "farm:3 plan:4")}
    section = {"kind": "fleet-plan", "vcenters": [{"vcenter": "east", "plan": {"e": 1}},
                                                  {"vcenter": "west", "plan": {"w": 2}}]}
    planfile.save(path, planfile.SavedPlan(FLEET, "fleet.yaml", "", "", section, parts))
    data = json.loads(path.read_text())
    assert data["version"] == planfile.FLEET_VERSION and [p["name"] for p in data["parts"]] == ["east", "west"]
    loaded_plan = planfile.load(path)
    assert loaded_plan.parts == parts
    west = loaded_plan.part("west")
    assert (west.vcenter, west.basis, west.plan) == ("https://west/sdk", "farm:3 plan:4", {"w": 2})
    with pytest.raises(planfile.PlanFileError, match="no part for vCenter north"):
        loaded_plan.part("north")
    data["parts"][1]["basis"] = "farm:0 plan:4"  # an edited part is an edited file
    path.write_text(json.dumps(data))
    with pytest.raises(planfile.PlanFileError, match="was edited"):
        planfile.load(path)


def test_a_moved_part_is_refused_naming_its_vcenter(tmp_path: Path) -> None:
    observed = Observed(datacenter="DC0", hosts={"esx-01": ObservedHost("esx-01")})
    plan = Plan(vm_changes=[VmChange("a", power_on=True)])
    parts = {"east": planfile.SavedPart("https://east/sdk", planfile.basis_of(observed, plan))}
    saved = planfile.SavedPlan(FLEET, "fleet.yaml", "", "", {}, parts)
    planfile.check_still_valid(tmp_path, saved.part("east"), "https://east/sdk", observed, plan)
    moved = Observed(datacenter="DC0", hosts={"esx-02": ObservedHost("esx-02")})
    with pytest.raises(planfile.PlanFileError, match="the farm changed since") as err:
        planfile.check_still_valid(tmp_path, saved.part("east"), "https://east/sdk", moved, plan)
    assert str(part_error("east", err.value)).startswith("vCenter east: the farm changed since")


# ------------------------------------------------------------------------------------------ the report


def a_part(name: str, changes: int) -> PartRun:
    plan = Plan(vm_changes=[VmChange(f"vm-{i}", power_on=True) for i in range(changes)])
    inv = load_inventory_text("apiVersion: vgpuctl/v1\n")
    return PartRun(name, f"https://{name}/sdk", Planned(inv, Observed(), plan, vcenter=f"https://{name}/sdk"))


def test_the_fleet_plan_shows_each_vcenter_and_sums_them() -> None:
    down = PartRun("west", "https://west/sdk", error=UsageError("vCenter not reachable"))
    planned = FleetPlanned([a_part("east", 2), a_part("north", 1), down], ["lab"])
    assert [p.name for p in planned.ready] == ["east", "north"] and str(planned.failure()).startswith("vCenter west")
    report = fleet_plan_report([FleetPlanPart(p.name, p.url, plan_report(p.planned.plan) if p.planned else None,
                                              str(p.error) if p.error else None) for p in planned.parts], ["lab"])
    assert report.summary.change == 3 and report.failed == ["west"]
    text = str(report.render_text(TextLayout(200, plain=True)))
    lines = text.splitlines()
    assert lines[0] == "== vCenter east (https://east/sdk) ==" and "== vCenter north (https://north/sdk) ==" in lines
    west = lines.index("== vCenter west (https://west/sdk) ==")
    assert lines[west + 1] == "error: vCenter not reachable"
    assert lines[-2] == "out of scope (--vcenter), untouched: vCenters lab"
    assert lines[-1].startswith("Fleet: 2 of 3 vCenters planned; failed, nothing of theirs applies: west. Plan: ")
