"""The CLI without a vCenter: help, validate, error policy, options and environment, JSON output, sim helpers."""

from __future__ import annotations

import _thread
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import kinds
import pytest
from typer.testing import CliRunner

from vgpuctl import __version__, pipeline
from vgpuctl.cli import common, sim
from vgpuctl.cli import plan as plan_cli
from vgpuctl.cli import vm as vm_cli
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.display import ApplyDisplay
from vgpuctl.cli.main import app
from vgpuctl.cli.sim import with_esxi_env
from vgpuctl.domain import Phase
from vgpuctl.errors import UsageError, VgpuctlError
from vgpuctl.inventory import load_inventory, load_inventory_text
from vgpuctl.model import (
    ApplyResult,
    HostChange,
    Observed,
    ObservedGpu,
    ObservedHost,
    ObservedProfile,
    ObservedVgpu,
    ObservedVm,
    Plan,
    VmChange,
    VmOutcome,
)
from vgpuctl.pipeline import RunOptions
from vgpuctl.reports.profiles import host_profiles
from vgpuctl.reports.sim import SimEnvReport
from vgpuctl.reports.status import status_report
from vgpuctl.vms import apply

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-Pa55word!"
UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1: connection refused at once

GOOD = """\
apiVersion: vgpuctl/v1
vcenter:
  url: https://vc.example.com/sdk
  datacenter: DC0
hosts:
  - cluster: GPU-Cluster
    graphics: {default_type: sharedDirect}
vms:
  - name: train-{01..03}
    template: ubuntu
    cluster: GPU-Cluster
    vgpus: {profile: grid_a100-40c, count: 2}
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VGPUCTL_STATE_DIR", str(tmp_path / "state"))


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def write(tmp_path: Path, text: str, name: str = "inv.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------------- --help


# pydantic is not listed: typer itself uses it to coerce parameters of any command it runs.
HEAVY = ("pyVmomi", "paramiko", "ansible_runner", "ruamel", "yaml", "jinja2", "vgpuctl.vsphere", "vgpuctl.vms.apply")

PROBE = """
import json, sys
HEAVY = sys.argv.pop(1).split(",")
from typer.testing import CliRunner
from vgpuctl.cli.main import app
result = CliRunner().invoke(app, sys.argv[1:])
heavy = sorted({m for m in sys.modules for h in HEAVY if m == h or m.startswith(h + ".")})
print(json.dumps({"exit": result.exit_code, "heavy": heavy, "out": result.output}))
"""


def probe(*args: str) -> dict:
    # a fresh interpreter: this test process has long imported everything
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(HEAVY), *args], capture_output=True, text=True, cwd=REPO, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_help_imports_no_heavy_module() -> None:
    for args in (["--help"], ["vm", "vgpu", "add", "--help"], ["apply", "--help"], ["host", "mig", "--help"]):
        got = probe(*args)
        assert got["exit"] == 0, got["out"]
        assert "Usage" in got["out"]
        top = {m.split(".")[0] if not m.startswith("vgpuctl") else ".".join(m.split(".")[:2]) for m in got["heavy"]}
        assert not top, f"{args} imported {sorted(top)}"


def test_import_probe_sees_imports(tmp_path: Path) -> None:
    # the probe above is able to fail: a command that loads the inventory does import the YAML parser
    got = probe("validate", "-f", str(write(tmp_path, GOOD)))
    assert got["exit"] == 0, got["out"]
    assert any(m.startswith(("ruamel", "yaml")) for m in got["heavy"])
    assert not any(m.startswith(("pyVmomi", "paramiko", "ansible_runner")) for m in got["heavy"])


# What the process itself (the console script's entry point, not CliRunner) has imported when it exits: help and
# usage errors stop before any command runs, so none of what plan needs before and after vCenter is loaded.
ENTRY_PROBE = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "vgpuctl"
from vgpuctl.cli.main import run
run()
"""
NOT_BEFORE_A_COMMAND = ("pyVmomi", "paramiko", "ortools", "vgpuctl.planner", "vgpuctl.pipeline", "vgpuctl.vsphere",
                        "vgpuctl.reports", "vgpuctl.inventory", "pydantic")  # pydantic: typer's coercion of values


def entry_probe(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    env["VGPUCTL_URL"] = "https://127.0.0.1:1/sdk"  # never reached: a plan that got that far fails to connect
    env["VGPUCTL_USERNAME"], env["VGPUCTL_PASSWORD"] = "user", "not-used"
    proc = subprocess.run([sys.executable, "-c", ENTRY_PROBE, str(out), *args], capture_output=True, text=True,
                          cwd=REPO, env=env, check=False)
    # with -o json a usage error is a document: its two small dataclasses modules are allowed
    loaded = set(json.loads(out.read_text())) - {"vgpuctl.reports", "vgpuctl.reports.base"}
    return proc.returncode, sorted(m for m in loaded for h in NOT_BEFORE_A_COMMAND if m == h or m.startswith(h + "."))


def test_help_and_usage_errors_import_no_command_implementation(tmp_path: Path) -> None:
    for args in (["--help"], ["plan", "--help"], ["plan", "--no-such-option"], ["no-such-command"], ["plan"],
                 ["-o", "json", "vm", "vgpu", "add"], ["-v", "--lock-timeout", "5m", "apply", "--no-such-option"]):
        code, heavy = entry_probe(tmp_path, *args)
        assert code == (0 if "--help" in args else 1), args
        assert not heavy, f"{args} imported {heavy}"


def test_entry_probe_sees_what_plan_imports(tmp_path: Path) -> None:
    # the probe above is able to fail: a plan that reaches for vCenter has imported pyVmomi and the pipeline
    inventory = write(tmp_path, "apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms: []\n")
    code, heavy = entry_probe(tmp_path, "plan", "-f", str(inventory))
    assert code == 1  # connection refused
    assert {"pyVmomi", "vgpuctl.pipeline", "vgpuctl.vsphere.session", "pydantic"} <= set(heavy), heavy


def test_global_option_values_are_still_checked(tmp_path: Path) -> None:
    # values of the type asked for pass through as they are; anything else gets typer's own check and message
    result = invoke("--output", "yaml", "validate", "-f", str(write(tmp_path, GOOD)))
    assert result.exit_code == 1 and "'yaml' is not one of 'text', 'json'" in result.output
    result = invoke("validate", "-f", str(write(tmp_path, GOOD)), env={"VGPUCTL_TIMEOUT": "soon"})
    assert result.exit_code == 1 and "--timeout" in result.output
    result = invoke("-o", "json", "validate", "-f", str(write(tmp_path, GOOD)), env={"VGPUCTL_TIMEOUT": "30"})
    assert result.exit_code == 0 and json.loads(result.stdout)["kind"] == "validate", result.output


def test_every_documented_command_is_there() -> None:
    out = invoke("--help").output
    for command in ("validate", "plan", "apply", "provision", "status", "profiles", "vm", "host", "guest", "sim"):
        assert command in out
    assert "--password-file" in out
    no_flag = invoke("--password", SECRET, "status")
    assert no_flag.exit_code == 1 and "No such option" in no_flag.output
    sub = invoke("vm", "vgpu", "--help").output
    for command in ("add", "remove", "list"):
        assert command in sub


# ----------------------------------------------------------------------------------------- validate


def test_validate_good(tmp_path: Path) -> None:
    result = invoke("validate", "-f", str(write(tmp_path, GOOD)))
    assert result.exit_code == 0, result.output
    assert "valid" in result.stdout and "3 VMs" in result.stdout


def test_validate_good_json_is_one_document(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    result = invoke("--output", "json", "validate", "-f", str(path))
    assert result.exit_code == 0
    doc = json.loads(result.stdout)  # the whole of stdout is one JSON document
    assert doc == {"kind": "validate", "file": str(path), "valid": True, "hosts": 1, "vms": 3, "vm_classes": 0,
                   "namespaces": 0, "warnings": []}


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        (GOOD.replace("    template: ubuntu\n", "    template: ubuntu\n    colour: red\n"), ":11:5:", "colour"),
        (GOOD.replace("count: 2", "count: 9"), ":12:44:", "9"),
        (GOOD.replace("grid_a100-40c", "a100-40"), ":12:22:", "a100-40"),
        (GOOD.replace("datacenter: DC0", "datacenter: [DC0"), ":", "YAML"),
    ],
    ids=["unknown-key", "nine-vgpus", "bad-profile", "bad-yaml"],
)
def test_validate_bad_file_points_at_the_line(tmp_path: Path, text: str, where: str, words: str) -> None:
    path = write(tmp_path, text)
    result = invoke("validate", "-f", str(path))
    assert result.exit_code == 1
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"{path}{where}"), result.stderr
    assert words in result.stderr
    assert "Traceback" not in result.output
    assert len(result.stderr.splitlines()) == len(set(result.stderr.splitlines()))  # 3 VMs, one message
    assert result.stdout == ""


def test_validate_bad_file_json(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("count: 2", "count: 9"))
    result = invoke("-o", "json", "validate", "-f", str(path))
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert sorted(doc) == ["error"] and sorted(doc["error"]) == ["details", "message", "type"]
    problem = doc["error"]["details"][0]
    assert problem["file"] == str(path) and problem["line"] == 12 and "9" in problem["message"]
    assert problem["path"] == "vms[0].vgpus.count" and not problem["message"].startswith("vms[")


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    result = invoke("validate", "-f", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: {tmp_path / 'nope.yaml'}: no such file"


def test_traceback_only_with_verbose(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("count: 2", "count: 9"))
    quiet = invoke("validate", "-f", str(path))
    loud = invoke("-v", "validate", "-f", str(path))
    assert "Traceback" not in quiet.stderr
    assert loud.exit_code == 1 and "Traceback" in loud.stderr


def test_unexpected_exception_is_one_line_with_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def boom(_path: Path, _composition: object = None) -> None:
        raise RuntimeError("kaputt\nsecond line")

    monkeypatch.setattr(pipeline, "load", boom)
    quiet = invoke("validate", "-f", str(write(tmp_path, GOOD)))
    assert quiet.exit_code == 1
    assert quiet.stderr.splitlines() == [
        "error: unexpected RuntimeError: kaputt",
        "hint: this is a bug in vgpuctl; rerun with -v to see the traceback",
    ]
    loud = invoke("-v", "validate", "-f", str(write(tmp_path, GOOD)))
    assert loud.exit_code == 1 and "Traceback" in loud.stderr and "boom" in loud.stderr


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def interrupted(_path: Path, _composition: object = None) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "load", interrupted)
    result = invoke("validate", "-f", str(write(tmp_path, GOOD)))
    assert result.exit_code == 130
    assert "interrupted" in result.stderr


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"vgpuctl {__version__}"


def test_usage_error_exits_1_not_the_changes_pending_code() -> None:
    result = invoke("plan")  # -f missing
    assert result.exit_code == 1
    assert "--file" in result.output


def test_json_usage_error_is_the_one_document_on_stdout() -> None:
    import jsonschema

    result = invoke("-o", "json", "plan")  # -f missing
    assert result.exit_code == 1 and "Usage:" in result.stderr
    doc = json.loads(result.stdout)  # the whole of stdout is one JSON document
    assert doc["error"]["type"] == "UsageError" and "--file" in doc["error"]["message"]
    schema = json.loads((REPO / "docs" / "schemas" / "error.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert invoke("plan").stdout == ""  # text mode: click's message on stderr only


def test_json_errors_of_every_kind_are_one_document(tmp_path: Path) -> None:
    missing = invoke("-o", "json", "validate", "-f", str(tmp_path / "nope.yaml"))
    no_url = invoke("-o", "json", "status", env={"VGPUCTL_URL": "", "GOVC_URL": ""})
    for result in (missing, no_url):
        assert result.exit_code == 1
        assert sorted(json.loads(result.stdout)["error"]) == ["details", "message", "type"]


# ------------------------------------------------------------------------------- connection options


def connect_failure(*args: str, env: dict[str, str] | None = None):
    return invoke(*args, "status", env=env)


def test_govc_environment_is_the_fallback() -> None:
    result = connect_failure(env={"GOVC_URL": UNREACHABLE, "GOVC_USERNAME": "admin", "GOVC_PASSWORD": SECRET})
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: cannot reach vCenter at https://127.0.0.1:1/sdk: connection refused"


def test_vgpuctl_environment_wins_over_govc() -> None:
    env = {
        "VGPUCTL_URL": UNREACHABLE,
        "GOVC_URL": "127.0.0.1:2",
        "VGPUCTL_USERNAME": "admin",
        "VGPUCTL_PASSWORD": SECRET,
    }
    result = connect_failure(env=env)
    assert "https://127.0.0.1:1/sdk" in result.stderr


def test_flag_wins_over_environment() -> None:
    env = {"VGPUCTL_URL": "127.0.0.1:2", "VGPUCTL_USERNAME": "admin", "VGPUCTL_PASSWORD": SECRET}
    result = connect_failure("--url", UNREACHABLE, env=env)
    assert "https://127.0.0.1:1/sdk" in result.stderr


def test_password_never_printed_even_verbose(tmp_path: Path) -> None:
    secret_file = tmp_path / "pw"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o600)
    runs = [
        connect_failure("-vv", env={"VGPUCTL_URL": UNREACHABLE, "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": SECRET}),
        connect_failure(
            "-vv", "--password-file", str(secret_file), env={"VGPUCTL_URL": UNREACHABLE, "GOVC_USERNAME": "u"}
        ),
        connect_failure("-vv", env={"GOVC_URL": f"https://u:{SECRET}@{UNREACHABLE}/sdk"}),
        connect_failure(
            "-vv", "-o", "json", env={"GOVC_URL": UNREACHABLE, "GOVC_USERNAME": "u", "GOVC_PASSWORD": SECRET}
        ),
    ]
    for result in runs:
        assert result.exit_code == 1, result.output
        assert "Traceback" in result.stderr  # -v shows the traceback ...
        assert SECRET not in result.output  # ... and still no password anywhere


def test_password_in_url_flag_is_refused() -> None:
    result = connect_failure("--url", f"https://u:{SECRET}@{UNREACHABLE}/sdk")
    assert result.exit_code == 1
    assert "do not put a password in --url" in result.stderr
    assert SECRET not in result.output


def test_no_password_without_terminal_is_one_line() -> None:
    result = connect_failure(env={"VGPUCTL_URL": UNREACHABLE, "VGPUCTL_USERNAME": "u"})
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("error: no password: set VGPUCTL_PASSWORD")


def test_missing_url_and_user() -> None:
    assert "no vCenter URL" in connect_failure().stderr
    assert "no user name" in connect_failure(env={"VGPUCTL_URL": UNREACHABLE}).stderr


def test_empty_password_file(tmp_path: Path) -> None:
    empty = tmp_path / "pw"
    empty.write_text("")
    result = connect_failure("--password-file", str(empty), env={"VGPUCTL_URL": UNREACHABLE, "VGPUCTL_USERNAME": "u"})
    assert result.exit_code == 1 and "empty" in result.stderr


@pytest.mark.parametrize("env", [{"VGPUCTL_INSECURE": "1"}, {"GOVC_INSECURE": "true"}])
def test_insecure_from_environment_is_warned(env: dict[str, str]) -> None:
    result = connect_failure(env={"VGPUCTL_URL": UNREACHABLE, "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "x", **env})
    assert "warning: TLS certificate verification is disabled" in result.stderr


def test_secure_by_default_no_warning() -> None:
    result = connect_failure(env={"VGPUCTL_URL": UNREACHABLE, "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "x"})
    assert "warning" not in result.stderr


def test_inventory_fills_what_flags_leave_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    thumb = ":".join(["AB"] * 32)
    text = GOOD.replace(
        "  datacenter: DC0\n",
        f"  datacenter: DC0\n  tls: {{verify: false, ca_file: /etc/ca.pem, thumbprint: '{thumb}'}}\n",
    )
    inventory = load_inventory(write(tmp_path, text))
    monkeypatch.setenv("VGPUCTL_PASSWORD", SECRET)
    from_inventory = common.connection_settings(GlobalOptions(username="u"), inventory)
    assert from_inventory.url == "https://vc.example.com/sdk"
    assert from_inventory.insecure is True
    assert from_inventory.ca_file == "/etc/ca.pem" and from_inventory.thumbprint == thumb
    assert from_inventory.password == SECRET and SECRET not in repr(from_inventory)
    assert common.datacenter_for(GlobalOptions(), inventory) == "DC0"

    flags = GlobalOptions(url="vc2:8443", username="u", insecure=False, ca_file=Path("/x.pem"), datacenter="DC9")
    from_flags = common.connection_settings(flags, inventory)
    assert (from_flags.url, from_flags.insecure, from_flags.ca_file) == ("vc2:8443", False, "/x.pem")
    assert common.datacenter_for(flags, inventory) == "DC9"


def test_url_credentials_are_split_out() -> None:
    assert common.split_url_credentials("https://bob:p%40ss@vc:443/sdk") == ("https://vc:443/sdk", "bob", "p@ss")
    assert common.split_url_credentials("vc.example.com") == ("vc.example.com", None, None)


def test_password_file_beats_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pw = tmp_path / "pw"
    pw.write_text("from-file\nignored\n")
    pw.chmod(0o600)
    monkeypatch.setenv("VGPUCTL_PASSWORD", "from-env")
    assert common.resolve_password(GlobalOptions(password_file=pw)) == "from-file"
    assert common.resolve_password(GlobalOptions()) == "from-env"
    monkeypatch.delenv("VGPUCTL_PASSWORD")
    monkeypatch.setenv("GOVC_PASSWORD", "govc")
    assert common.resolve_password(GlobalOptions()) == "govc"


# ------------------------------------------------------------------------------------ status/profiles


def farm() -> Observed:
    a100 = {"device_name": "NVIDIA A100-PCIE-40GB", "memory_kb": 40 * 1024 * 1024, "graphics_type": "sharedDirect"}
    host = ObservedHost(
        name="esx-01",
        cluster="GPU-Cluster",
        gpus=[
            ObservedGpu(pci_id="0000:3b:00.0", vgpu_mode="sameSize", vms=["a", "b"], nvlink_set=0, **a100),
            ObservedGpu(pci_id="0000:5e:00.0", vgpu_mode="sameSize", vms=["b"], nvlink_set=0, **a100),
            ObservedGpu(pci_id="0000:86:00.0", vgpu_mode="multiInstanceGpu", vms=["c"], **a100),
        ],
        offered_profiles=["grid_a100-20c", "grid_a100-40c", "grid_a100-3-20c", "grid_a100-1-5c"],
        profiles={"grid_a100-3-20c": ObservedProfile("grid_a100-3-20c", 20, "mig")},
    )
    vms = {
        "a": ObservedVm("a", host="esx-01", power_state="poweredOn", vgpus=[ObservedVgpu(1, "grid_a100-20c")]),
        "b": ObservedVm(
            "b",
            host="esx-01",
            power_state="poweredOn",
            vgpus=[ObservedVgpu(1, "grid_a100-20c"), ObservedVgpu(2, "grid_a100-20c")],
        ),
        "c": ObservedVm("c", host="esx-01", vgpus=[ObservedVgpu(1, "grid_a100-3-20c")]),
        "idle": ObservedVm("idle", host="esx-01"),
        "tmpl": ObservedVm("tmpl", is_template=True),
    }
    return Observed(datacenter="DC0", hosts={"esx-01": host}, vms=vms)


def test_status_document_maps_vms_to_gpus() -> None:
    doc = status_report(farm()).to_dict()
    assert doc["kind"] == "status" and "round_trips" not in doc
    gpus = doc["hosts"][0]["gpus"]
    assert [g["vms"] for g in gpus] == [
        [
            {"vm": "a", "profile": "grid_a100-20c", "guessed": False, "fb_gb": 20},
            {"vm": "b", "profile": "grid_a100-20c", "guessed": False, "fb_gb": 20},
        ],
        [{"vm": "b", "profile": "grid_a100-20c", "guessed": False, "fb_gb": 20}],
        [{"vm": "c", "profile": "grid_a100-3-20c", "guessed": False, "fb_gb": 20, "mig_slots": 4}],  # of 8 slices
    ]
    assert [g.get("mig_slots") for g in gpus] == [None, None, 8]
    assert [(g["used_gb"], g["free_gb"], g["mode"]) for g in gpus] == [
        (40, 0, "time-sliced (sameSize)"),
        (20, 20, "time-sliced (sameSize)"),
        (20, 20, "mig"),
    ]
    assert gpus[0]["vgpus"] == [{"profile": "grid_a100-20c", "count": 2}]
    assert [g["nvlink_group"] for g in gpus] == [0, 0, None]
    assert {v["vm"] for v in doc["vms"]} == {"a", "b", "c", "idle"}  # templates are not VMs
    b = next(v for v in doc["vms"] if v["vm"] == "b")
    assert b["vgpus"] == [{"profile": "grid_a100-20c", "count": 2}]


def test_status_text_has_gpu_map() -> None:
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    for item in status_report(farm()).render_text():
        console.print(item)
    text = console.export_text()
    assert "GPU map: esx-01" in text
    assert "a (grid_a100-20c), b (grid_a100-20c)" in text
    assert "set 0" in text
    assert "1 VM(s) without vGPUs" in text


def test_profiles_table_data() -> None:
    rows = {r.profile: r for r in host_profiles(farm().hosts["esx-01"])}
    assert rows["grid_a100-20c"].max_per_gpu == 2
    assert rows["grid_a100-40c"].max_per_gpu == 1
    assert rows["grid_a100-3-20c"].max_per_gpu == 2 and rows["grid_a100-3-20c"].sharing == "mig"
    assert rows["grid_a100-1-5c"].max_per_gpu == 7
    assert rows["grid_a100-20c"].series == "C" and rows["grid_a100-20c"].fb_gb == 20


# ---------------------------------------------------------------------------------------------- vm


def test_vm_vgpu_add_and_remove_arithmetic() -> None:
    current = Counter({"grid_a100-20c": 2})
    assert vm_cli.added(current, "grid_a100-20c", 3) == Counter({"grid_a100-20c": 5})
    assert vm_cli.added(current, "grid_a100-10c", 1) == Counter({"grid_a100-20c": 2, "grid_a100-10c": 1})
    with pytest.raises(UsageError, match="at most 8"):
        vm_cli.added(current, "grid_a100-20c", 7)
    with pytest.raises(UsageError, match="board"):
        vm_cli.added(current, "grid_h100-20c", 1)
    with pytest.raises(UsageError, match="not a vGPU profile"):
        vm_cli.added(current, "a100-20c", 1)
    assert vm_cli.removed(current, None, None, False) == Counter({"grid_a100-20c": 1})
    assert vm_cli.removed(current, None, None, True) == Counter()
    mixed = Counter({"grid_a100-20c": 2, "grid_a100-10c": 1})
    assert vm_cli.removed(mixed, "grid_a100-20c", None, True) == Counter({"grid_a100-10c": 1})
    with pytest.raises(UsageError, match="several profiles"):
        vm_cli.removed(mixed, None, 1, False)
    with pytest.raises(UsageError, match="cannot remove 3"):
        vm_cli.removed(mixed, "grid_a100-20c", 3, False)
    with pytest.raises(UsageError, match="no vGPU"):
        vm_cli.removed(Counter(), None, None, True)


def test_one_vm_inventory_keeps_power_state() -> None:
    running = ObservedVm("a", power_state="poweredOn")
    stopped = ObservedVm("b", power_state="poweredOff")
    inv = vm_cli.one_vm_inventory(GlobalOptions(), running, Counter({"grid_a100-20c": 2}), None)
    (spec,) = inv.vms
    assert (spec.name, spec.power, spec.vgpu_profiles) == ("a", "restart", ["grid_a100-20c"] * 2)
    assert spec.cpus is None and spec.memory_gb is None and spec.template is None
    assert vm_cli.one_vm_inventory(GlobalOptions(), stopped, Counter(), None).vms[0].power == "off"
    assert vm_cli.one_vm_inventory(GlobalOptions(), running, Counter(), "keep").vms[0].power == "keep"


# -------------------------------------------------------------------------------------------- apply


class Recorder:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, text: str, **_kw: object) -> None:
        self.lines.append(text)

    is_terminal = False


def test_progress_prints_one_line_per_step_change() -> None:
    console = Recorder()
    progress = ApplyDisplay(console, ["vm1", "vm2", "vm3"], ["esx-01"])  # type: ignore[arg-type]
    with progress:
        progress.host_step("esx-01", "enter-maintenance", None)
        progress.host_step("esx-01", "changed", None)
        progress.vm_step("vm1", "reconfigure", 0)
        progress.vm_step("vm1", "reconfigure", 50)
        progress.vm_step("vm2", "power-off", None)
        progress.vm_step("vm1", "done", 100)
        progress.vm_step("vm1", "power-on", 100)  # late: vm1 finished
        progress.vm_step("vm3", "not-started", None)  # counted in the summary, no line of its own
    # lines for logs carry the date, the time and the UTC offset: 2026-12-01T09:15:02+01:00 and a space
    stamp = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{2}:\d{2} ")
    assert all(stamp.match(line) for line in console.lines), console.lines
    assert [stamp.sub("", line, count=1) for line in console.lines] == [
        "host esx-01: enter-maintenance", "host esx-01: changed", "vm1: reconfigure", "vm2: power-off", "vm1: done"]
    assert progress.finished == {"host esx-01": "changed", "vm1": "done", "vm3": "not-started"}
    assert progress.counter() == "1/1 hosts, 2/3 VMs finished"  # hosts and VMs counted apart


def test_ctrl_c_during_apply_stops_new_work_and_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """KeyboardInterrupt in the main thread sets the cancel flag; the running apply finishes; we report it."""
    seen: dict[str, object] = {}

    def fake_apply(session, the_plan, observed, *, parallel, progress, cancel, **_timing):
        threading.Timer(0.3, _thread.interrupt_main).start()
        cancel.wait(10)  # a real apply would stop starting VMs now
        seen["stopped"] = cancel.is_set()
        time.sleep(0.3)  # ... and wait for the tasks in flight
        seen["finished"] = True
        return apply.ApplyResult(vms=[apply.VmOutcome("vm1", status="changed")], interrupted=True)

    monkeypatch.setattr(apply, "apply_plan", fake_apply)
    the_plan = Plan(vm_changes=[VmChange("vm1", power_on=True)])
    inventory = load_inventory_text("apiVersion: vgpuctl/v1\n")
    display = ApplyDisplay(Recorder(), ["vm1"])  # type: ignore[arg-type]
    with display:
        applied, interrupted = pipeline.run_interruptible(
            lambda cancel: pipeline.apply(object(), inventory, the_plan, Observed(), RunOptions(parallel=2),  # type: ignore[arg-type]
                                          display, cancel),
            display.note,
        )
    assert interrupted and seen == {"stopped": True, "finished": True}
    assert applied.hosts is None and applied.vm_plan is the_plan
    outcome = pipeline.RunOutcome(pipeline.Planned(inventory, Observed(), the_plan), applied, interrupted=interrupted)
    with pytest.raises(Exception) as info:
        plan_cli.raise_for_outcome(outcome)
    assert getattr(info.value, "exit_code", None) == 130


def test_failed_vms_make_apply_exit_1_naming_them() -> None:
    result = ApplyResult(
        vms=[VmOutcome("a", "changed"), VmOutcome("b", "failed", fault_type="InvalidState", message="no")]
    )
    planned = pipeline.Planned(load_inventory_text("apiVersion: vgpuctl/v1\n"), Observed(), Plan())
    outcome = pipeline.RunOutcome(planned, pipeline.ApplyOutcome(None, result, Plan()))
    with pytest.raises(VgpuctlError, match="apply failed for 1 of 2 VM\\(s\\): b") as info:
        plan_cli.raise_for_outcome(outcome)
    assert info.value.exit_code == 1


def test_confirmation_needs_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115
    with pytest.raises(UsageError, match="--yes"):
        common.confirm("Apply 1 change(s)?")


class Typed(io.StringIO):
    """stdin of a terminal where the user typed `text`."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("word", "typed", "goes_on"), [
    (True, "yes\n", True), (True, "y\n", False), (True, "YES please\n", False), (True, "\n", False),
    (False, "y\n", True), (False, "\n", False),
])  # fmt: skip
def test_disruptive_plans_ask_for_the_word_yes(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                               word: bool, typed: str, goes_on: bool) -> None:
    monkeypatch.setattr(sys, "stdin", Typed(typed))
    if goes_on:
        common.confirm("Apply 3 change(s)?", word=word)
    else:
        with pytest.raises(VgpuctlError, match="cancelled: nothing was changed"):
            common.confirm("Apply 3 change(s)?", word=word)
    asked = capsys.readouterr().err
    assert ("Type 'yes'" in asked) == word and ("[y/N]" in asked) == (not word)


def test_which_plans_need_the_word(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bool] = []
    monkeypatch.setattr(common, "confirm", lambda question, action="apply", word=False: asked.append(word))
    inventory = load_inventory_text("apiVersion: vgpuctl/v1\n")
    hooks = plan_cli.CliHooks(GlobalOptions())
    for the_plan in (Plan(vm_changes=[VmChange("a", power_on=True)]),
                     Plan(vm_changes=[VmChange("a", power_off=True, power_on=True)]),
                     Plan(host_changes=[HostChange("h", kinds.MIG, "0000:3b:00.0", "off", "on", Phase.REBOOT)])):
        hooks.report = None
        hooks.confirm(pipeline.Planned(inventory, Observed(), the_plan))
    assert asked == [False, True, True]  # power-on only: y/N; a power-off or a reboot: the word
    plan_cli.CliHooks(GlobalOptions(), yes=True).confirm(pipeline.Planned(inventory, Observed(), the_plan))
    assert len(asked) == 3  # --yes skips both


# ---------------------------------------------------------------------------------------------- sim


def test_sim_env_when_not_running() -> None:
    result = invoke("sim", "env")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: gpusim is not running: start it with `vgpuctl sim up`"


def test_sim_down_when_not_running_is_fine() -> None:
    result = invoke("sim", "down")
    assert result.exit_code == 0 and "not running" in result.stderr


def test_sim_up_without_go_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "go.mod").write_text("module gpusim\n")
    (src / "main.go").write_text("package main\n")
    monkeypatch.setenv("GPUSIM_SRC", str(src))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = invoke("sim", "up")
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("error: Go is needed to build the simulator")


def test_sim_src_without_go_mod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSIM_SRC", str(tmp_path))
    result = invoke("sim", "up")
    assert result.exit_code == 1 and "has no go.mod" in result.stderr


def test_sim_farm_flags() -> None:
    topology = {"hosts": 4, "gpus": 8, "model": "A100-80GB", "nvlink": None, "mig": True, "vms": None}
    assert sim.farm_args(None, topology) == ["-hosts", "4", "-gpus", "8", "-model", "A100-80GB", "-mig"]
    assert sim.farm_args(Path(__file__), {"hosts": None, "mig": False}) == ["-farm", str(Path(__file__).resolve())]
    with pytest.raises(UsageError, match="--farm describes the whole farm: do not combine it with --hosts"):
        sim.farm_args(Path(__file__), topology)


def test_sim_env_file_round_trip() -> None:
    env = {"VGPUCTL_URL": "https://127.0.0.1:4242/sdk", "VGPUCTL_PASSWORD": "p w'x", "GPUSIM_CONTROL": "http://x"}
    assert sim.parse_env_file(SimEnvReport(env, "env").render_text()) == env
    assert sim.parse_env_file("export A=1 B='two words'\n# c\nC=3\n") == {"A": "1", "B": "two words", "C": "3"}


def test_sim_env_points_host_commands_at_the_simulators_shells() -> None:
    gpusim = {
        "VGPUCTL_PASSWORD": "pass",
        "GPUSIM_SSH_USER": "root",
        "GPUSIM_SSH_HOSTS": "/s/ssh_hosts.json",
        "GPUSIM_SSH_KNOWN_HOSTS": "/s/ssh_known_hosts",
    }
    env = with_esxi_env(gpusim)
    assert env["VGPUCTL_ESXI_HOSTS"] == "/s/ssh_hosts.json"
    assert env["VGPUCTL_ESXI_KNOWN_HOSTS"] == "/s/ssh_known_hosts"
    assert (env["VGPUCTL_ESXI_USER"], env["VGPUCTL_ESXI_PASSWORD"]) == ("root", "pass")
    assert with_esxi_env({"VGPUCTL_PASSWORD": "pass"}) == {"VGPUCTL_PASSWORD": "pass"}  # gpusim -no-ssh


# ------------------------------------------------------------------------ -o json and usage errors


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["-o", "json", "nosuch"], {}, "No such command"),
        (["-o", "json", "--timeout", "abc", "status"], {}, "--timeout"),
        (["--timeout", "abc", "--output=json", "status"], {}, "--timeout"),
        (["status", "-o", "json", "--nope"], {}, "--nope"),
        (["-ojson", "plan"], {}, "--file"),
        (["nosuch"], {"VGPUCTL_OUTPUT": "json"}, "No such command"),
        (["-o", "json", "host"], {}, "Missing command."),  # a command group without its command
        (["vm", "vgpu"], {"VGPUCTL_OUTPUT": "json"}, "Missing command."),
        (["-o", "json", "k8s", "render", "-f", "x.yaml"], {}, "--namespace"),
        (["-o", "json", "host", "show"], {}, "Missing argument 'HOST'"),
    ],
)
def test_a_usage_error_with_json_output_prints_one_json_error_document(
    args: list[str], env: dict[str, str], says: str
) -> None:
    result = invoke(*args, env=env)
    assert result.exit_code == 1
    document = json.loads(result.stdout)  # exactly one document, nothing else on stdout
    assert document["error"]["type"] == "UsageError" and says in document["error"]["message"]


def test_a_usage_error_without_json_output_prints_nothing_on_stdout() -> None:
    result = invoke("--timeout", "abc", "status")
    assert result.exit_code == 1 and result.stdout == ""


def test_help_with_json_output_is_no_error() -> None:
    result = invoke("-o", "json", "--help")
    assert result.exit_code == 0 and "Usage" in result.stdout
