"""The vgpuctl_apply module of the vgpuctl.guest collection without a vCenter: its documentation as ansible-doc
renders it (every option documented as the argument spec has it, the examples use only real options), the
command lines it gives vgpuctl (options that exist, no secret among them) and what it reads back.
The module against gpusim through ansible-playbook: tests/sim/test_ansible_module_sim.py."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer.main
import yaml

from vgpuctl.cli.common import PASSWORD_ENV
from vgpuctl.cli.main import app
from vgpuctl.esxi import ssh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from docs_commands import check_vgpuctl

from vgpuctl.cli.common import error_report
from vgpuctl.errors import PlanError, PlanRefused

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MODULE_PATH = ROOT / "playbooks" / "plugins" / "modules" / "vgpuctl_apply.py"
FQCN = "vgpuctl.guest.vgpuctl_apply"
BIN = Path(sys.executable).parent
SECRET = "s3cret-Never-Shown"
CLI = typer.main.get_command(app)


def load_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vgpuctl_apply", MODULE_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MOD = load_module()


def collections_path(tmp_path: Path) -> Path:
    """An ansible_collections tree whose vgpuctl.guest is the repository's playbooks/ folder."""
    root = tmp_path / "collections"
    (root / "ansible_collections" / "vgpuctl").mkdir(parents=True)
    (root / "ansible_collections" / "vgpuctl" / "guest").symlink_to(ROOT / "playbooks")
    return root


def ansible_doc(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections_path(tmp_path)), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_HOME": str(tmp_path / "ansible-home"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
    return subprocess.run([BIN / "ansible-doc", *args, FQCN], env=env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    proc = ansible_doc(tmp_path_factory.mktemp("doc"), "--json")
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout)[FQCN])


def test_ansible_doc_renders_the_module(tmp_path: Path) -> None:
    proc = ansible_doc(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr
    for words in ("vgpuctl plan", "vgpuctl apply --yes", "OPTIONS", "EXAMPLES", "RETURN VALUES", "subprocess"):
        assert words in proc.stdout


def test_every_option_is_documented_as_the_argument_spec_has_it(doc: dict[str, Any]) -> None:
    options = doc["doc"]["options"]
    assert set(options) == set(MOD.ARGUMENT_SPEC)
    for name, spec in MOD.ARGUMENT_SPEC.items():
        documented = options[name]
        assert documented["type"] == spec["type"], name
        assert documented.get("elements") == spec.get("elements"), name
        assert documented.get("default") == spec.get("default"), name
        assert documented["description"], name
    assert sorted(n for n, s in MOD.ARGUMENT_SPEC.items() if s.get("no_log")) == ["esxi_password", "password"]
    assert doc["doc"]["attributes"]["check_mode"]["support"] == "full"
    assert doc["doc"]["attributes"]["diff_mode"]["support"] == "full"
    assert set(doc["return"]) == {"plan", "report", "error", "diff"}


def test_the_examples_use_only_real_options(doc: dict[str, Any]) -> None:
    tasks = yaml.safe_load(doc["examples"])
    used = [t[FQCN] for t in tasks if FQCN in t]
    assert len(used) == 3
    for args in used:
        assert set(args) <= set(MOD.ARGUMENT_SPEC), args
        assert ("src" in args) != ("content" in args)
    inline = next(a["content"] for a in used if "content" in a)
    assert inline["apiVersion"] == "vgpuctl/v1"


def every_param(**overrides: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "url": "https://vc.example.com/sdk", "username": "automation@vsphere.local", "password": SECRET,
        "password_file": None, "validate_certs": True, "ca_file": "/etc/pki/vc.pem", "thumbprint": "AB:CD",
        "datacenter": "DC0", "timeout": 45.0, "lock_timeout": "5m", "hosts": ["esx-01"], "clusters": ["GPU-*"],
        "vms": ["train-01", "infer-*"], "parallel": 4, "keep_going": True, "allow_destroy": True,
        "esxi_user": "root", "esxi_password": SECRET + "-esxi", "esxi_key_file": "/keys/esxi", "esxi_known_hosts":
        "/keys/known_hosts", "env": "prod", "values": ["/srv/site-a.yaml", "/srv/site-b.yaml"],
    }
    return params | overrides


@pytest.mark.parametrize("validate_certs", [True, False])
def test_the_command_lines_name_only_options_vgpuctl_has(validate_certs: bool) -> None:
    params = every_param(validate_certs=validate_certs)
    common = ["vgpuctl", *MOD.global_args(params)]
    plan = [*common, "plan", "-f", "inv.yaml", "--detailed-exitcode", "--out", "p.plan", *MOD.scope_args(params)]
    apply = [*common, "apply", "-f", "inv.yaml", *MOD.apply_args(params), *MOD.scope_args(params)]
    saved = [*common, "apply", "p.plan", *MOD.apply_args(params)]
    for line in (plan, apply, saved):
        assert check_vgpuctl(shlex.join(line), CLI) == [], line
        assert not any(SECRET in word for word in line)  # the process list never shows a password
    assert ("--no-insecure" in common) is validate_certs and ("--insecure" in common) is not validate_certs
    assert apply.count("--vm") == 2 and "--yes" in apply and "--allow-destroy" in apply
    assert plan[-6:] == apply[-6:] == ["--env", "prod", "--values", "/srv/site-a.yaml", "--values", "/srv/site-b.yaml"]
    assert "--env" not in saved  # a saved plan holds its inventory as merged then
    assert MOD.global_args(every_param(password=None, password_file="/run/pw"))[4:8] == [
        "--username", "automation@vsphere.local", "--password-file", "/run/pw"]


def test_secrets_and_esxi_settings_go_in_the_environment_vgpuctl_reads() -> None:
    env = MOD.child_environment(every_param())
    assert env == {
        PASSWORD_ENV[0]: SECRET,
        ssh.ENV_USER: "root",
        ssh.ENV_PASSWORD: SECRET + "-esxi",
        ssh.ENV_KEY_FILE: "/keys/esxi",
        ssh.ENV_KNOWN_HOSTS: "/keys/known_hosts",
    }
    unset = {name: None for name in ("password", "esxi_user", "esxi_password", "esxi_key_file", "esxi_known_hosts")}
    assert MOD.child_environment(every_param(**unset)) == {}  # then vgpuctl reads the environment it inherits


def test_only_given_options_reach_vgpuctl() -> None:
    params = {name: spec.get("default") for name, spec in MOD.ARGUMENT_SPEC.items()}
    assert MOD.global_args(params) == ["--output", "json"]
    assert MOD.scope_args(params) == []
    assert MOD.apply_args(params) == ["--yes"]


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("https://vc.example.com/sdk", None),
        ("vc.example.com:8443", None),
        ("https://user@vc.example.com/sdk", None),
        ("https://user:pa%40ss@vc.example.com/sdk", "pa%40ss"),
        ("user:pw@vc.example.com", "pw"),
        ("https://vc.example.com/sdk?x=a@b", None),
    ],
)
def test_a_password_in_the_url_is_found(url: str, password: str | None) -> None:
    assert MOD.url_password(url) == password


def outcome(status: str) -> dict[str, str]:
    return {"status": status}


@pytest.mark.parametrize(
    ("report", "changed"),
    [
        ({"hosts": [], "vms": [], "vm_class_outcomes": []}, False),
        ({"hosts": [outcome("unchanged")], "vms": [outcome("unchanged"), outcome("failed")]}, False),
        ({"hosts": [outcome("changed")], "vms": []}, True),
        ({"hosts": [], "vms": [outcome("failed"), outcome("changed")]}, True),
        ({"hosts": [], "vms": [], "vm_class_outcomes": [outcome("skipped"), outcome("changed")]}, True),
    ],
)
def test_changed_is_read_from_the_outcomes_of_the_apply_document(report: dict[str, Any], changed: bool) -> None:
    assert MOD.apply_changed(report) is changed


def test_a_plan_refused_for_its_problems_fails_with_the_problems_themselves() -> None:
    problems = ["host esx-01: its nvlink change needs maintenance mode", "vm a: cannot power on"]
    refused = error_report(PlanRefused(problems, "nothing can be applied")).to_dict()["error"]
    assert refused["message"].startswith("the plan has 2 problems")
    assert MOD.error_message(refused) == "; ".join(problems)  # the task does not show the plan they were shown with
    other = error_report(PlanError(["vCenter is too old"])).to_dict()["error"]
    assert MOD.error_message(other) == "vCenter is too old"
    assert MOD.error_message({"type": "ConnectionFailure", "message": "", "details": []}) == "ConnectionFailure"
