"""The patterns that validate inventory values, options and files match whole strings: a value with a trailing
newline (which Python's `$` lets through with `re.match`) is refused, never written to a VM or a manifest."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpuctl.errors import InventoryError, InventoryErrors, UsageError
from vgpuctl.experiment.schema import load_experiment
from vgpuctl.guest.addresses import load_address_file
from vgpuctl.guest.targets import _check_roles
from vgpuctl.inventory import load_inventory_text, validate
from vgpuctl.inventory.network import DeviceSelect, hostname_problem
from vgpuctl.inventory.ranges import expand_name
from vgpuctl.profiles import ProfileError, is_host_spelling, parse_profile
from vgpuctl.supervisor.render import RenderOptions, check_options

pytestmark = pytest.mark.unit

HEAD = "apiVersion: vgpuctl/v1\n"
VgpuctlErrorTypes = (UsageError, InventoryError)


def _errors(text: str) -> list[str]:
    with pytest.raises(InventoryError) as info:
        validate(load_inventory_text(HEAD + text, "inv.yaml"))
    err = info.value
    return [e.located() for e in err.errors] if isinstance(err, InventoryErrors) else [err.located()]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('vms:\n  - name: a\n    network: [{portgroup: p, mac: "00:50:56:12:34:57\\n"}]\n', "must be a MAC address"),
        ('vms:\n  - name: a\n    template: t\n    cluster: c\n    network: [{portgroup: p}]\n'
         '    guest: {identity: {domain: "example.com\\n"}}\n', "must be a DNS domain"),
        ('vcenter: {tls: {thumbprint: "' + "ab" * 32 + '\\n"}}\n', "must be a sha256 fingerprint"),
        ('hosts:\n  - name: esx-01\n    ssh: {password_env: "ESXI_PW\\n"}\n', "must be the name of an environment"),
        ('hosts:\n  - name: esx-01\n    gpus: [{select: "0000:3b:00.0\\n", mode: mig}]\n', "must be 'all' or a PCI"),
        ('vm_classes:\n  - name: "gpu-small\\n"\n    cpus: 4\n    memory_gb: 16\n', "must be a DNS label"),
        ('vms:\n  - name: a\n    vgpus: {profile: "grid_a100-40c\\n"}\n', "not a vGPU profile name"),
    ],
)
def test_a_trailing_newline_is_refused_in_the_inventory(entry: str, message: str) -> None:
    found = _errors(entry)
    assert any(message in e and e.startswith("inv.yaml:") for e in found), found


def test_a_mac_without_a_newline_still_passes() -> None:
    inv = load_inventory_text(HEAD + "vms:\n  - name: a\n    network: [{portgroup: p, mac: '00:50:56:12:34:57'}]\n")
    assert inv.vms[0].adapters[0].mac == "00:50:56:12:34:57"


def test_the_value_checks_themselves_match_whole_strings() -> None:
    assert DeviceSelect.parse("0000:3b:00.0").by == "pci" and DeviceSelect.parse("vmnic4").by == "vmnic"
    assert DeviceSelect.parse("0000:3b:00.0\n").by == "model" and DeviceSelect.parse("vmnic4\n").by == "model"
    assert hostname_problem("train-01") is None and hostname_problem("train-01\n") is not None
    assert is_host_spelling("grid_a100-40c") and not is_host_spelling("grid_a100-40c\n")
    assert parse_profile("grid_a100-3-20c").slices == 3
    with pytest.raises(ProfileError):
        parse_profile("grid_a100-3-20c\n")
    with pytest.raises(ValueError, match="bad name range"):
        expand_name("train-{01..02\n}")


@pytest.mark.parametrize(
    ("option", "value"),
    [("cluster_name", "gpu\n"), ("image", "ubuntu-2204-efi\n"), ("registry", "registry.example.com/nvidia\n"),
     ("driver_version", "550.90.07\n"), ("storage_class", "vsan\n")],
)
def test_k8s_render_options_match_whole_strings(option: str, value: str) -> None:
    check_options(RenderOptions())
    with pytest.raises(UsageError, match="must be"):
        check_options(RenderOptions(**{option: value}))


def test_an_experiment_name_with_a_newline_names_no_folder(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text('apiVersion: vgpuctl/v1\nkind: Experiment\nname: "nccl\\n"\ninventory: inv.yaml\nvms: [a]\n'
                    "variants: [{name: base}]\n")
    with pytest.raises(InventoryError, match="it names a folder"):
        load_experiment(path)


def test_a_guest_setting_name_with_a_newline_is_refused() -> None:
    inv = load_inventory_text(HEAD + "guests:\n  groups:\n    ml:\n      roles: [nccl]\n"
                              '      vars: {nccl_extra: {"NCCL_DEBUG\\n": INFO}}\n', "inv.yaml")
    with pytest.raises(InventoryErrors, match="is no setting name"):
        _check_roles(inv)


def test_an_address_with_a_newline_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "addresses.yaml"
    path.write_text('train-01: "10.0.0.5\\n"\n')
    with pytest.raises(VgpuctlErrorTypes, match="not an IP address or host name"):
        load_address_file(path)
    path.write_text("train-01: 10.0.0.5\n")
    assert load_address_file(path) == {"train-01": "10.0.0.5"}


# ------------------------------------------------------------------------------------ the rule, kept

ROOT = Path(__file__).resolve().parents[2] / "vgpuctl"
VALIDATING = ["inventory", "supervisor", "guest", "settings", "nicselect.py", "experiment/schema.py", "profiles.py",
              "capacity/demand.py"]


def _sources() -> list[Path]:
    out: list[Path] = []
    for part in VALIDATING:
        path = ROOT / part
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def test_validating_patterns_are_used_whole() -> None:
    """In the modules that check what users write, a compiled pattern is never anchored with `$` (which lets a
    trailing newline through) and never applied with `.match` (a prefix): `fullmatch` only."""
    import re

    anchored = re.compile(r're\.compile\(\s*rb?"[^"]*\$"')
    applied = re.compile(r"\b(_?[A-Z][A-Z0-9_]*)\.match\(")
    parses_messages = {"_ENTRY"}  # reads pydantic's own error text, never a user's value
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in _sources()
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if anchored.search(line) or any(m[1] not in parses_messages for m in applied.finditer(line))]
    assert not found, found


def test_no_pydantic_pattern_constraints() -> None:
    """pydantic's `pattern=` runs on another engine than the validators' `fullmatch`: its default Rust engine
    refuses a trailing newline, but a model set to `regex_engine="python-re"` applies `re.match`, which lets
    one through. vgpuctl's validators use `fullmatch` alone, so the two never disagree."""
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    class Rust(BaseModel):
        v: str = Field(pattern=r"^[a-z]+$")

    class PythonRe(BaseModel):
        model_config = ConfigDict(regex_engine="python-re")
        v: str = Field(pattern=r"^[a-z]+$")

    with pytest.raises(ValidationError):
        Rust(v="abc\n")
    assert PythonRe(v="abc\n").v == "abc\n"  # why vgpuctl keeps to fullmatch
    used = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
            if "pattern=" in p.read_text() or "regex_engine" in p.read_text()]
    assert not used, used
