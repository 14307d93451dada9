"""The vGPU type catalogue file: its JSON schema, the cross-references the schema cannot express, and that
the packaged copy is the one file gpusim reads too."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from vgpuctl.esxi.parsers import parse_nvlink_status
from vgpuctl.profiles import BOARDS, catalogue_digest, catalogue_path, load_catalogue

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = ROOT / "vgpuctl" / "data" / "vgpu-catalogue.yaml"
SCHEMA = ROOT / "docs" / "schemas" / "vgpu-catalogue.schema.json"

# Boards the catalogue must carry: today's gpusim models and the boards NVIDIA publishes tables for.
REQUIRED_MODELS = {
    "A100-40GB", "A100-80GB", "H100-80GB", "L40S",  # today's names, kept
    "A100-HGX-40GB", "A100-HGX-80GB", "A30", "A40", "A16", "A10", "L4", "L40", "H100-SXM5-80GB", "H100-NVL",
    "H100-SXM5-94GB", "H200-NVL", "H200-SXM5",
}


# Rows whose newest published equal-size maximum times the framebuffer exceeds the GPU's: the catalogue uses
# the newest published maximum (the host's report wins), so these stay as NVIDIA prints them.
BEYOND_FRAMEBUFFER = {
    "H100-16C": ("nvaie7-hopper", "Table 179", 6),  # 5 in the vGPU 17 table A.14
    "H100XM-16C": ("nvaie7-hopper", "Table 181", 6),  # 5 in the vGPU 17 table A.15
}


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return yaml.safe_load(CATALOGUE.read_text())


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_catalogue_matches_its_schema(data: dict[str, Any], validator: jsonschema.Draft202012Validator) -> None:
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("boards", 0, "vgpu_types", 0, "series"), "X"),
        (("boards", 0, "mig", "apply"), "later"),
        (("boards", 0, "nvlink", "topology"), "mesh"),
        (("boards", 0, "vgpu_types", 0, "max_equal"), 0),
        (("boards", 0, "framebuffer_gb"), "40"),
        (("boards", 0, "unknown_key"), 1),
    ],
)
def test_schema_refuses_a_broken_catalogue(
    data: dict[str, Any], validator: jsonschema.Draft202012Validator, path: tuple[Any, ...], value: Any
) -> None:
    broken = copy.deepcopy(data)
    node = broken
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert list(validator.iter_errors(broken))


def test_schema_refuses_placement_ids_without_size(
    data: dict[str, Any], validator: jsonschema.Draft202012Validator
) -> None:
    broken = copy.deepcopy(data)
    broken["boards"][0]["vgpu_types"][0]["placement_ids"] = [0]
    assert list(validator.iter_errors(broken))


def test_required_boards_present_and_models_unique(data: dict[str, Any]) -> None:
    models = [b["model"] for b in data["boards"]]
    assert len(models) == len(set(models))
    names = set(models) | {a for b in data["boards"] for a in b.get("aliases", [])}
    assert len(names) == len(models) + sum(len(b.get("aliases", [])) for b in data["boards"])
    assert set(models) >= REQUIRED_MODELS
    tokens = [b["vgpu_board"] for b in data["boards"]]
    assert len(tokens) == len(set(tokens))


def test_every_citation_resolves(data: dict[str, Any]) -> None:
    sources = set(data["sources"])
    for b in data["boards"]:
        assert b["source"] in sources, b["model"]
        if "mig" in b and "source" in b["mig"]:
            assert b["mig"]["source"] in sources
        for t in b["vgpu_types"]:
            assert t["source"] in sources, t["name"]
    assert {data["vsphere"]["source"], data["vsphere"]["driver_source"]} <= sources


def test_type_rows_agree_with_their_board(data: dict[str, Any]) -> None:
    for b in data["boards"]:
        prefix = b["vgpu_board"].upper() + "-"
        gis = {g["name"] for g in b.get("mig", {}).get("gi_profiles", [])}
        names = [t["name"] for t in b["vgpu_types"]]
        assert len(names) == len(set(names)), b["model"]
        for t in b["vgpu_types"]:
            assert t["name"].startswith(prefix), t["name"]
            assert t["fb_gb"] <= b["framebuffer_gb"], t["name"]
            assert t["media"] == t["name"].endswith("ME"), t["name"]
            if t["mig_gi"] is not None:
                assert t["mig_gi"] in gis, t["name"]
                assert t["media"] == t["mig_gi"].endswith("+me"), t["name"]
            if "max_mixed" in t:
                assert t["mig_gi"] is None, t["name"]
                assert t["max_mixed"] <= t.get("max_equal", t["max_mixed"]), t["name"]
            if "max_equal" in t and t["mig_gi"] is None and t["name"] not in BEYOND_FRAMEBUFFER:
                assert t["max_equal"] * t["fb_gb"] <= b["framebuffer_gb"], t["name"]
            if "placement_ids" in t:
                assert all(p + t["placement_size"] <= _line(b) for p in t["placement_ids"]), t["name"]


def test_maxima_beyond_the_framebuffer_are_the_newest_tables(data: dict[str, Any]) -> None:
    rows = {t["name"]: t for b in data["boards"] for t in b["vgpu_types"]}
    for name, (source, table, maximum) in BEYOND_FRAMEBUFFER.items():
        assert (rows[name]["source"], rows[name]["max_equal"]) == (source, maximum)
        assert table in rows[name]["table"] and table in data["sources"][source]["section"]


def test_every_source_names_its_release(data: dict[str, Any]) -> None:
    """A row's maxima are those of its source's release: vGPU 17 for most, NVIDIA AI Enterprise 7 for H200 and
    the H100 rows that release changed."""
    assert all(s["release"] for s in data["sources"].values())
    assert "vGPU 17" in data["sources"]["nvaie5-vgpu17"]["release"]
    assert "NVIDIA AI Enterprise 7" in data["sources"]["nvaie7-hopper"]["release"]


def test_h200_mig_backed_types_and_geometry(data: dict[str, Any]) -> None:
    """NVIDIA AI Enterprise 7, Tables 170 and 172: seven MIG-backed types per H200 board, each on its GPU
    instance profile with NVIDIA's maximum; the MIG guide's H200 table: seven instance profiles on 8 memory
    slots (memory fraction = slots, instance count = starts)."""
    expected = {"7-141C": ("7g.141gb", 1), "4-71C": ("4g.71gb", 1), "3-71C": ("3g.71gb", 2), "2-35C": ("2g.35gb", 3),
                "1-35C": ("1g.35gb", 4), "1-18C": ("1g.18gb", 7), "1-18CME": ("1g.18gb+me", 1)}
    fractions = {"1g.18gb": (1, 7), "1g.18gb+me": (1, 7), "1g.35gb": (2, 4), "2g.35gb": (2, 3), "3g.71gb": (4, 2),
                 "4g.71gb": (4, 1), "7g.141gb": (8, 1)}
    for model, prefix, table in (("H200-NVL", "H200", "Table 170"), ("H200-SXM5", "H200X", "Table 172")):
        board = next(b for b in data["boards"] if b["model"] == model)
        assert board["mig"]["memory_slots"] == 8 and board["mig"]["apply"] == "immediate"
        gis = {g["name"]: g for g in board["mig"]["gi_profiles"]}
        assert {n: (g["size"], len(g["starts"])) for n, g in gis.items()} == fractions
        rows = {t["name"]: t for t in board["vgpu_types"] if t["mig_gi"]}
        assert {n.removeprefix(prefix + "-"): (t["mig_gi"], t["max_equal"]) for n, t in rows.items()} == expected
        assert all(t["source"] == "nvaie7-hopper" and t["table"] == table for t in rows.values())


def test_nvlink_bridges_and_links(data: dict[str, Any]) -> None:
    """H200 NVL bridges connect 2 or 4 GPUs (H200 datasheet); H100 PCIe and H100 NVL have 12 NVLink links
    (600 GB/s at 50 GB/s per fourth-generation link), H100 SXM5 18 (900 GB/s)."""
    nvlink = {b["model"]: b["nvlink"] for b in data["boards"]}
    assert nvlink["H200-NVL"]["bridge_gpus"] == [2, 4] and nvlink["H200-NVL"]["source"] == "h200-datasheet"
    assert nvlink["H100-80GB"]["links"] == 12 and nvlink["H100-NVL"]["links"] == 12
    assert nvlink["H100-SXM5-80GB"]["links"] == 18
    for model, n in nvlink.items():
        if n["topology"].startswith("bridge"):
            assert n.get("bridge_gpus"), model


def test_mixed_size_placements_give_the_mixed_size_maximum(data: dict[str, Any]) -> None:
    """NVIDIA's placement tables list one id per vGPU of the mixed-size maximum, and the ids of one type never
    overlap: so the maximum of a type alone on a GPU is exactly reachable."""
    for b in data["boards"]:
        for t in b["vgpu_types"]:
            ids = t.get("placement_ids")
            if not ids:
                continue
            assert len(ids) == t["max_mixed"], t["name"]
            assert ids == sorted(ids), t["name"]
            assert all(nxt - cur >= t["placement_size"] for cur, nxt in itertools.pairwise(ids)), t["name"]
            assert t["placement_size"] == t["fb_gb"], t["name"]


def test_device_ids_name_one_board(data: dict[str, Any]) -> None:
    ids = [i for b in data["boards"] for i in b["pci_device_ids"]]
    assert len(ids) == len(set(ids))


def _line(board: dict[str, Any]) -> int:
    # Placement ids and sizes count in the units NVIDIA's table uses; no table goes past the framebuffer in GB.
    return int(board["framebuffer_gb"])


def test_mig_placements_stay_inside_the_gpu(data: dict[str, Any]) -> None:
    for b in data["boards"]:
        mig = b.get("mig")
        if not mig:
            continue
        ids = [g["id"] for g in mig["gi_profiles"]]
        assert len(ids) == len(set(ids)), b["model"]
        for g in mig["gi_profiles"]:
            assert g["slices"] <= mig["compute_slices"]
            assert all(s + g["size"] <= mig["memory_slots"] for s in g["starts"]), (b["model"], g["name"])


def test_mig_geometry_matches_the_real_lgipp_capture(data: dict[str, Any]) -> None:
    """tests/fixtures/nvidia-smi/a100-40gb.mig-lgipp.txt is `nvidia-smi mig -lgipp` on a real A100-40GB."""
    capture = (ROOT / "tests" / "fixtures" / "nvidia-smi" / "a100-40gb.mig-lgipp.txt").read_text()
    seen: dict[int, tuple[list[int], int]] = {}
    for line in capture.splitlines():
        head, _, tail = line.partition("Placement")
        gi_id = int(head.split("ID")[1])
        starts, size = tail.split("{")[1].split("}:")
        seen[gi_id] = ([int(s) for s in starts.split(",")], int(size))
    board = next(b for b in data["boards"] if b["model"] == "A100-40GB")
    ours = {g["id"]: (g["starts"], g["size"]) for g in board["mig"]["gi_profiles"]}
    assert ours == seen


def test_the_wheel_carries_the_catalogue() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["vgpuctl"]
    assert "data/*.yaml" in patterns
    packaged = resources.files("vgpuctl").joinpath("data/vgpu-catalogue.yaml").read_bytes()
    assert hashlib.sha256(packaged).hexdigest() == hashlib.sha256(CATALOGUE.read_bytes()).hexdigest()


def test_gpusim_default_path_is_the_file_the_package_reads() -> None:
    """gpusim (Go) looks for ../../vgpuctl/data/vgpu-catalogue.yaml from tests/vcsim when -catalogue is absent,
    and vgpuctl reads its package data: both must be this one file."""
    gpusim_default = (ROOT / "tests" / "vcsim" / ".." / ".." / "vgpuctl" / "data" / "vgpu-catalogue.yaml").resolve()
    assert gpusim_default == CATALOGUE.resolve()
    assert catalogue_digest(gpusim_default) == catalogue_digest(catalogue_path())
    assert load_catalogue().path.read_bytes() == gpusim_default.read_bytes()


@pytest.mark.parametrize(("capture", "model"), [("a100-40gb.mig-lgip.txt", "A100-40GB"),
                                                 ("h100-80gb.mig-lgip.txt", "H100-SXM5-80GB")])
def test_gpu_instance_ids_match_real_lgip_captures(data: dict[str, Any], capture: str, model: str) -> None:
    """`nvidia-smi mig -lgip` captured on real GPUs (tests/fixtures/nvidia-smi/README.md): name -> id."""
    text = (ROOT / "tests" / "fixtures" / "nvidia-smi" / capture).read_text()
    seen, totals = {}, {}
    for line in text.splitlines():
        cells = line.strip("|").split()
        if len(cells) > 4 and cells[1] == "MIG":
            seen[cells[2]] = int(cells[3])
            totals[cells[2]] = int(cells[4].split("/")[1])
    board = next(b for b in data["boards"] if b["model"] == model)
    ours = {g["name"]: g["id"] for g in board["mig"]["gi_profiles"]}
    assert seen and seen == {name: ours[name] for name in seen}
    # a MIG-backed vGPU type's maximum per GPU is the instance count of its GPU instance profile
    for t in board["vgpu_types"]:
        if t["mig_gi"] in totals:
            assert t["max_equal"] == totals[t["mig_gi"]], t["name"]


def test_mmio_per_gpu_is_nvidias_table(data: dict[str, Any]) -> None:
    """NVIDIA AI Enterprise 6, Table 18 (MMIO space each GPU requires); GPUs it does not list carry none."""
    table = {"A100-40GB": 128, "A100-HGX-40GB": 128, "A100-80GB": 256, "A100-HGX-80GB": 256, "A30": 64, "A40": 128,
             "A10": 64, "L4": 64, "L40": 128, "H100-80GB": 256, "H100-SXM5-80GB": 256, "H100-NVL": 256,
             "H100-SXM5-94GB": 256, "H200-NVL": 512, "H200-SXM5": 512}
    got = {b["model"]: b["mmio"]["gb"] for b in data["boards"] if "mmio" in b}
    assert got == table
    assert all(b["mmio"]["source"] == "nvaie6-mmio" for b in data["boards"] if "mmio" in b)
    assert "Table 18" in data["sources"]["nvaie6-mmio"]["section"]


def test_uvm_turns_nvlink_p2p_off_only_on_a100_boards(data: dict[str, Any]) -> None:
    """NVIDIA AI Enterprise 8.1, Peer-To-Peer (P2P) CUDA Transfers: the restriction is specific to the Ampere A100
    and does not apply to Hopper or newer."""
    flagged = {b["model"] for b in data["boards"] if b.get("uvm", {}).get("disables_nvlink_p2p")}
    assert flagged == {"A100-40GB", "A100-80GB", "A100-HGX-40GB", "A100-HGX-80GB"}
    assert all(b["uvm"]["source"] == "nvaie8-p2p" for b in data["boards"] if "uvm" in b)


def test_nvlink_counts_match_a_real_listing() -> None:
    """Every board lists at least the links it wires, and the H100 PCIe's counts are a real bridged host's."""
    for b in BOARDS.values():
        assert (b.nvlink_links is None) == (b.nvlink_listed is None), b.model
        assert b.nvlink_links is None or b.nvlink_listed >= b.nvlink_links, b.model  # type: ignore[operator]
    capture = ROOT / "tests" / "fixtures" / "nvidia-smi" / "h100-pcie.nvlink-s.txt"
    gpus = parse_nvlink_status(capture.read_text(encoding="utf-8"))
    h100 = BOARDS["h100"]
    assert {(len(g.links), g.active_links) for g in gpus} == {(h100.nvlink_listed, h100.nvlink_links)}
