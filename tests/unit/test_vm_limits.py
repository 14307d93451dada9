"""vSphere's limits on one VM (vgpuctl/data/vm-limits.yaml, each value with its source) are checked when the
inventory is read, each error one line at FILE:LINE:COL: memory (24,560 GB), virtual CPUs (768), virtual network
adapters (10, those a VM keeps counted at plan time); non-finite and overflowing numbers are refused the same way,
never a traceback. VM classes and capacity demand files take a VM's limits too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from vgpuctl.capacity.demand import load_demand
from vgpuctl.cli.main import app
from vgpuctl.errors import InventoryError, InventoryErrors
from vgpuctl.inventory import load_inventory_text
from vgpuctl.vmlimits import limits_path, vm_limits

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
HEAD = "apiVersion: vgpuctl/v1\nvms:\n  - name: a\n"


def _error(text: str) -> str:
    with pytest.raises(InventoryError) as info:
        load_inventory_text(text, "inv.yaml")
    err = info.value
    found = [e.located() for e in err.errors] if isinstance(err, InventoryErrors) else [err.located()]
    assert len(found) == 1, found
    return found[0]


def test_the_limits_come_from_the_data_file_with_their_sources() -> None:
    limits = vm_limits()
    assert (limits.cpus, limits.memory_gb, limits.memory_multiple_mb, limits.network_adapters) == (768, 24560, 4, 10)
    data = yaml.safe_load(limits_path().read_text())
    for name, limit in data["vm"].items():
        for key in ("source", "also"):
            if key in limit:
                assert limit[key] in data["sources"], (name, limit[key])
    for source in data["sources"].values():
        assert source["document"] and source["section"] and source["url"]
    assert "vm-limits.yaml" in (ROOT / "docs" / "sources.md").read_text()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1e308", "must be at most 24560 GB, the most memory vSphere gives one VM (got 1e+308)"),
        ("1e12", "must be at most 24560 GB, the most memory vSphere gives one VM (got 1e+12)"),
        ("24577", "must be at most 24560 GB, the most memory vSphere gives one VM (got 24577)"),
        ("24561", "must be at most 24560 GB, the most memory vSphere gives one VM (got 24561)"),
        ("1" + "0" * 400, "memory_gb:"),  # an integer no float holds
        (".inf", "memory_gb:"),
        (".nan", "memory_gb:"),
        ("0.001", "must be a positive size in GB that is a whole multiple of 4 MB (got 0.001)"),
    ],
)
def test_memory_past_vsphere_limit_or_not_finite_is_one_located_line(value: str, message: str) -> None:
    error = _error(HEAD + f"    memory_gb: {value}\n")
    assert error.startswith("inv.yaml:4:16: vms[0].memory_gb: ") and message in error, error


def test_memory_at_vsphere_limit_is_taken() -> None:
    assert load_inventory_text(HEAD + "    memory_gb: 24560\n").vms[0].memory_mb == 24560 * 1024


def test_cpus_past_vsphere_limit() -> None:
    assert _error(HEAD + "    cpus: 769\n") == (
        "inv.yaml:4:11: vms[0].cpus: must be at most 768, the most virtual CPUs vSphere gives one VM (got 769)")
    assert load_inventory_text(HEAD + "    cpus: 768\n").vms[0].cpus == 768
    assert _error(HEAD + "    cpus: 0\n") == "inv.yaml:4:11: vms[0].cpus: must be at least 1 (got 0)"


def _adapters(count: int, passthrough: int = 0) -> str:
    lines = [f"      - {{portgroup: p{i}}}\n" for i in range(count)]
    lines += [f"      - {{type: passthrough, device: vmnic{i}}}\n" for i in range(passthrough)]
    return HEAD + "    network:\n" + "".join(lines)


def test_eleven_network_adapters_are_refused() -> None:
    assert _error(_adapters(11)) == (
        "inv.yaml:4:5: vms[0].network: 11 network adapters; vSphere gives one VM at most 10 (vmxnet3, PVRDMA and "
        "SR-IOV adapters count, passthrough NICs do not)")
    assert len(load_inventory_text(_adapters(10)).vms[0].adapters) == 10
    assert len(load_inventory_text(_adapters(10, passthrough=2)).vms[0].adapters) == 12


def test_reboot_timeout_that_no_float_holds_is_refused() -> None:
    text = "apiVersion: vgpuctl/v1\nhosts:\n  - name: h\n    maintenance: {reboot_timeout_s: 1" + "0" * 400 + "}\n"
    error = _error(text)
    assert error.startswith("inv.yaml:4:37: hosts[0].maintenance.reboot_timeout_s: must be at most 86400"), error


@pytest.mark.parametrize(("field", "value", "message"), [
    ("memory_gb", "1e308", "must be at most 24560 GB"),
    ("cpus", "769", "must be at most 768"),
])
def test_vm_classes_take_a_vms_limits(field: str, value: str, message: str) -> None:
    values: dict[str, Any] = {"cpus": "4", "memory_gb": "16", field: value}
    text = ("apiVersion: vgpuctl/v1\nvm_classes:\n  - name: gpu-small\n"
            + "".join(f"    {k}: {v}\n" for k, v in values.items()))
    error = _error(text)
    assert error.startswith("inv.yaml:") and f"vm_classes[0].{field}: {message}" in error, error


def test_a_demand_takes_a_vms_limits(tmp_path: Path) -> None:
    path = tmp_path / "demand.yaml"
    path.write_text("apiVersion: vgpuctl/v1\nkind: Demand\ndemand:\n  - name: train\n    count: 1\n"
                    "    vgpus: {profile: grid_a100-40c}\n    memory_gb: 1e308\n")
    with pytest.raises(InventoryError) as info:
        load_demand(path)
    assert f"{path}:7:16: " in str(info.value) and "must be at most 24560 GB" in str(info.value), str(info.value)


def test_validate_says_it_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(HEAD + "    memory_gb: 1e308\n")
    result = CliRunner().invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (f"{path}:4:16: vms[0].memory_gb: must be at most 24560 GB, the most "
                                     "memory vSphere gives one VM (got 1e+308)"), result.stderr
