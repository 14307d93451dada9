"""The limits on the files vgpuctl reads (inventory, capacity demand, experiment, saved plan): size and nesting.

A file over the limits is refused with one line naming the file. /dev/zero would hang or exhaust memory if any
of these readers read a file whole; 50,000 nested brackets would end in a RecursionError if a reader recursed
without counting.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vgpuctl import filelimits, planfile
from vgpuctl.capacity.demand import load_demand
from vgpuctl.cli.main import app
from vgpuctl.errors import InventoryError, VgpuctlError
from vgpuctl.experiment.schema import load_experiment
from vgpuctl.inventory import load_inventory, load_inventory_text, yamlpos

pytestmark = pytest.mark.unit

LIMIT = filelimits.MAX_FILE_BYTES
DEPTH = filelimits.MAX_NESTING
DEV_ZERO = Path("/dev/zero")

LOADERS: dict[str, Callable[[Path], Any]] = {
    "inventory": load_inventory,
    "demand": load_demand,
    "experiment": load_experiment,
    "plan": planfile.load,
}


def _refusal(load: Callable[[Path], Any], path: Path) -> str:
    with pytest.raises(VgpuctlError) as info:
        load(path)
    text = str(info.value)
    assert len(text.splitlines()) == 1, text
    return text


@pytest.mark.skipif(not DEV_ZERO.exists(), reason="no /dev/zero")
@pytest.mark.parametrize("kind", LOADERS)
def test_dev_zero_is_refused_without_being_read_whole(kind: str) -> None:
    assert _refusal(LOADERS[kind], DEV_ZERO) == f"{DEV_ZERO}: {filelimits.TOO_LARGE}"


@pytest.mark.parametrize("kind", LOADERS)
def test_a_file_one_byte_over_the_limit_is_refused(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"#" * (LIMIT + 1))
    assert _refusal(LOADERS[kind], path) == f"{path}: {filelimits.TOO_LARGE}"


def test_a_file_at_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "full"
    path.write_bytes(b"a: 1\r\n" + b"#" * (LIMIT - 6))
    text = filelimits.read_text(path)
    assert len(text) == LIMIT - 1 and text.startswith("a: 1\n#")  # CR LF read as LF, as Path.read_text does


def test_the_limits_are_documented() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert f"{LIMIT // (1024 * 1024)} MiB" in readme and f"{DEPTH} levels" in readme


# ------------------------------------------------------------------------------------------------ nesting

DEEP_FLOW = "[" * 50_000


@pytest.mark.parametrize("kind", ["inventory", "demand", "experiment"])
def test_fifty_thousand_nested_brackets_are_one_clear_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(DEEP_FLOW)
    assert _refusal(LOADERS[kind], path) == f"{path}:1:{DEPTH + 1}: {filelimits.TOO_DEEP}"


def test_fifty_thousand_nested_brackets_in_a_plan_file(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(DEEP_FLOW + "]" * 50_000)
    assert _refusal(planfile.load, path) == f"{path}: not a vgpuctl plan file ({filelimits.TOO_DEEP})"


def _plan_file(tmp_path: Path, depth: int) -> Path:
    nested: Any = "x"
    for _ in range(depth - 2):  # the document and its "plan" are two levels
        nested = [nested]
    document = {"format": planfile.FORMAT, "version": planfile.VERSION, "vcenter": "v", "inventory_path": "i",
                "basis": "b", "plan": {"deep": nested}, "inventory": ""}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**document, "digest": planfile.content_digest(document)}))
    return path


def test_plan_file_nesting_limit(tmp_path: Path) -> None:
    planfile.load(_plan_file(tmp_path, DEPTH))
    path = _plan_file(tmp_path, DEPTH + 1)
    assert _refusal(planfile.load, path) == f"{path}: not a vgpuctl plan file ({filelimits.TOO_DEEP})"


def _block(depth: int) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(depth - 1)) + "  " * (depth - 1) + "leaf: 1\n"


DEEP = {
    "flow, closed": "[" * (DEPTH + 1) + "]" * (DEPTH + 1) + "\n",
    "flow mappings": "a: " + "{b: " * (DEPTH + 5) + "1" + "}" * (DEPTH + 5) + "\n",
    "block mappings": _block(DEPTH + 1),
    "block sequences": "".join("  " * i + "-\n" for i in range(DEPTH + 3)),
    "block then flow": "a:\n  b:\n    - " + "[" * DEPTH + "]" * DEPTH + "\n",
    "one line per bracket": "[\n" * (DEPTH + 1),
}


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_both_readers_refuse_too_deep_at_the_same_place(text: str) -> None:
    refusals = []
    for reader in (yamlpos._fast_yaml, yamlpos._ruamel_yaml):
        with pytest.raises(InventoryError) as info:
            reader(text, "f")
        refusals.append(info.value.located())
    fast, ruamel = refusals
    assert fast == ruamel and fast.endswith(f": {filelimits.TOO_DEEP}")


def test_the_deepest_nesting_allowed_is_read_by_both_readers() -> None:
    text = _block(DEPTH) + "flow: " + "[" * (DEPTH - 1) + "]" * (DEPTH - 1) + "\n"
    fast, ruamel = yamlpos._fast_yaml(text, "f"), yamlpos._ruamel_yaml(text, "f")
    assert fast == ruamel and filelimits.nesting(fast[0]) == DEPTH


def test_nesting_in_a_second_document_is_ruamels_to_word() -> None:
    text = "a: 1\n---\n" + DEEP_FLOW
    with pytest.raises(yamlpos._NotFast):
        yamlpos._fast_yaml(text, "f")
    with pytest.raises(InventoryError) as info:
        yamlpos._ruamel_yaml(text, "f")
    assert info.value.located() == f"f:2:1: {yamlpos.SECOND_DOCUMENT}"


def test_inventory_text_is_held_to_the_nesting_limit() -> None:
    with pytest.raises(InventoryError) as info:
        load_inventory_text("apiVersion: vgpuctl/v1\nguests:\n  groups:\n    g:\n      vars: {x: " + DEEP_FLOW, "t")
    # Thousands of brackets on one line: ruamel reads it (libyaml gives up at 1,000 levels) and its scanner names
    # the 65th flow level, `{` being the first (the composer would have named the 60th bracket, 65 levels in all)
    column = len("      vars: {x: ") + DEPTH
    assert info.value.located() == f"t:5:{column}: {filelimits.TOO_DEEP}"


def test_nesting_counts_mappings_and_lists() -> None:
    assert filelimits.nesting("x") == 0
    assert filelimits.nesting({"a": [1, {"b": []}], "c": {}}) == 4


def test_cli_refuses_dev_zero_in_one_line() -> None:
    if not DEV_ZERO.exists():
        pytest.skip("no /dev/zero")
    result = CliRunner().invoke(app, ["validate", "-f", str(DEV_ZERO)])
    assert result.exit_code == 1
    assert f"{DEV_ZERO}: {filelimits.TOO_LARGE}" in result.output
    assert "Traceback" not in result.output
