"""ESXi shell output parsers against real and gpusim reference outputs (tests/fixtures/nvidia-smi)."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vgpuctl.esxi import commands, modopts, parsers, software
from vgpuctl.esxi.facts import FACTS, NVLINK_STATUS
from vgpuctl.esxi.parsers import OutputFormatError
from vgpuctl.esxi.ssh import DEFAULT_COMMAND_TIMEOUT_S, SshSettings

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
ALL_CASES = json.loads((FIXTURES / "cases.json").read_text())["cases"]
CASES = [c for c in ALL_CASES if "parser" in c]  # the others are GPU query cases (tests/unit/test_host_settings.py)
PARSER_MODULES = (parsers, software)  # the shell's parsers: GPUs and modules, then software (depots, vGPUs' guests)


def plain(value: Any) -> Any:
    """Dataclasses -> dicts, tuples -> lists, so results compare with JSON expectations."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.compare}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def assert_partial(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {got!r} is not a record"
        for key, w in want.items():
            assert key in got, f"{where}: no field {key}"
            assert_partial(got[key], w, f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_partial(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def topology_summary(topo: parsers.Topology) -> dict[str, Any]:
    return {
        "gpus": list(topo.gpus),
        "nvlink_sets": sorted(sorted(s) for s in topo.nvlink_sets()),
        "nvlinks_0_1": topo.nvlinks(0, 1),
        "cell_0_2": topo.matrix.get((0, 2)),
    }


def parser_of(case: dict[str, Any]) -> Callable[[str], Any]:
    """The fact's parser when the case names a fact (its command must be the case's), else the named parser."""
    if "fact" in case:
        fact = FACTS[case["fact"]]
        assert fact.command == case["command"], f"{case['fixture']}: {fact.name} runs {fact.command!r}"
        func = getattr(fact.parse, "func", fact.parse)
        assert func is getattr(parsers, case["parser"]), f"{case['fixture']}: {fact.name} parses with {func}"
        return fact.parse
    module = next(m for m in PARSER_MODULES if hasattr(m, case["parser"]))
    return functools.partial(getattr(module, case["parser"]), **case.get("args", {}))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['parser']}:{c['fixture']}")
def test_fixture(case: dict[str, Any]) -> None:
    assert case["command"].split()[0] in ("nvidia-smi", "esxcli"), case["fixture"]
    text = (FIXTURES / case["fixture"]).read_text()
    result = parser_of(case)(text)
    got = topology_summary(result) if isinstance(result, parsers.Topology) else plain(result)
    if "count" in case:
        assert len(got) == case["count"]
        want = case["expect"]
        assert_partial(got[: len(want)], want, case["fixture"])
    else:
        assert_partial(got, case["expect"], case["fixture"])


def test_every_fact_has_a_fixture_case() -> None:
    assert set(FACTS) <= {c.get("fact") for c in CASES}


def test_a_fact_gathers_through_its_command() -> None:
    ran: list[str] = []

    def run(command: str) -> str:
        ran.append(command)
        return (FIXTURES / "gpusim.nvlink-s.txt").read_text()

    links = NVLINK_STATUS.gather(run)
    assert ran == ["nvidia-smi nvlink -s"] and links and links[0].links


def test_every_fixture_has_a_case() -> None:
    covered = {c["fixture"] for c in ALL_CASES}
    files = {p.name for p in FIXTURES.iterdir() if p.suffix in (".txt", ".csv")}
    assert files <= covered, f"fixtures without parser cases: {sorted(files - covered)}"


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        ("parse_list", "GPU zero: something\n"),
        ("parse_query", "\n==============NVSMI LOG==============\n\nDriver Version : 1\n"),
        ("parse_query", "Attached GPUs : 1\nGPU 00000000:3B:00.0\n    Product Brand : NVIDIA\n"),
        ("parse_query_csv", ""),
        ("parse_query_csv", "index, name\n0\n"),
        ("parse_gpu_modes", "name\nA100\n"),
        ("parse_mig_set", "All done.\n"),
        ("parse_lgip", "+---+\n| nothing |\n"),
        ("parse_lgipp", "GPU 0 Profile ID x\n"),
        ("parse_lgi", "+----+\n| GPU instances: |\n"),
        ("parse_nvlink_status", "\t Link 0: 25 GB/s\n"),
        ("parse_nvlink_status", "garbage\n"),
        ("parse_topo_matrix", "nothing here\n"),
        ("parse_topo_matrix", "\tGPU0\tGPU1\nGPU0\t X \tNV2\n"),
        ("parse_module_parameters", "Name Type\nrow\n"),
    ],
)
def test_malformed_output_raises(parser: str, text: str) -> None:
    with pytest.raises(OutputFormatError):
        getattr(parsers, parser)(text)


@pytest.mark.parametrize("text", ["novalue", 'A="unterminated'])
def test_malformed_module_options_raise(text: str) -> None:
    with pytest.raises(OutputFormatError):
        modopts.parse_module_options(text)


def test_mig_set_results() -> None:
    text = (
        "Warning: MIG mode is in pending disable state for GPU 00000000:18:00.0:In use by another client\n"
        "00000000:18:00.0 is currently being used by one or more other processes.\n"
        "Enabled MIG Mode for GPU 00000000:2A:00.0\n"
        "Unable to enable MIG Mode for GPU 00000000:AF:00.0: Not Supported\n"
        "Treating as warning and moving on.\nAll done.\n"
    )
    got = parsers.parse_mig_set(text)
    assert got == [
        parsers.MigModeChange("00000000:18:00.0", False, True, "In use by another client"),
        parsers.MigModeChange("00000000:2A:00.0", True, False),
        parsers.MigModeChange("00000000:AF:00.0", True, False, "Not Supported", supported=False),
    ]


def test_lgip_when_no_mig_gpu() -> None:
    assert parsers.parse_lgip("No MIG-enabled devices found.\n") == []
    assert parsers.parse_lgi("No GPU instances found: Not Found\n") == []


def test_gpu_instance_profile_properties() -> None:
    rows = parsers.parse_lgip((FIXTURES / "a100-40gb.mig-lgip.txt").read_text())
    assert [(r.slices, r.memory_gb) for r in rows][:5] == [(1, 5), (1, 5), (1, 10), (2, 10), (3, 20)]


def test_gpu_modes_pending_flag() -> None:
    rows = parsers.parse_gpu_modes(
        "index, pci.bus_id, mig.mode.current, mig.mode.pending\n0, 0:3B:00.0, Disabled, Enabled\n"
    )
    assert rows[0].mig_change_pending and rows[0].name is None


@pytest.mark.parametrize(
    ("options", "parsed"),
    [
        ("", {}),
        ("NVreg_NvLinkDisable=1", {"NVreg_NvLinkDisable": "1"}),
        (
            "NVreg_RegistryDwords=RmPVMRL=0x01 NVreg_NvLinkDisable=0",
            {"NVreg_RegistryDwords": "RmPVMRL=0x01", "NVreg_NvLinkDisable": "0"},
        ),
        (
            'NVreg_RegistryDwordsPerDevice="pci=0000:15:00.0;RmPVMRL=0x11"',
            {"NVreg_RegistryDwordsPerDevice": "pci=0000:15:00.0;RmPVMRL=0x11"},
        ),
        ('A="x y" B=', {"A": "x y", "B": ""}),
    ],
)
def test_module_options_round_trip(options: str, parsed: dict[str, str]) -> None:
    assert modopts.parse_module_options(options) == parsed
    assert modopts.parse_module_options(modopts.format_module_options(parsed)) == parsed


@pytest.mark.parametrize(
    ("built", "expected"),
    [
        (commands.list_gpus(), "nvidia-smi -L"),
        (commands.query(), "nvidia-smi -q"),
        (commands.query(gpu="00000000:3B:00.0"), "nvidia-smi -q -i 00000000:3B:00.0"),
        (
            commands.query_gpu(),
            "nvidia-smi --query-gpu=index,pci.bus_id,name,memory.total,mig.mode.current,mig.mode.pending --format=csv",
        ),
        (
            commands.query_gpu(("index",), gpu=[0, 2], header=False, units=False),
            "nvidia-smi --query-gpu=index --format=csv,noheader,nounits -i 0,2",
        ),
        (commands.set_mig_mode(1, True), "nvidia-smi -i 1 -mig 1"),
        (commands.set_mig_mode("00000000:3B:00.0", False), "nvidia-smi -i 00000000:3B:00.0 -mig 0"),
        (commands.list_gpu_instance_profiles(0), "nvidia-smi mig -lgip -i 0"),
        (commands.list_gpu_instance_placements(), "nvidia-smi mig -lgipp"),
        (commands.list_gpu_instances(), "nvidia-smi mig -lgi"),
        (commands.nvlink_status(), "nvidia-smi nvlink -s"),
        (commands.topology(), "nvidia-smi topo -m"),
        (commands.module_parameters_list(), "esxcli system module parameters list -m nvidia"),
        (
            commands.module_parameters_set("NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x01"),
            "esxcli system module parameters set -m nvidia"
            " -p 'NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x01'",
        ),
        (commands.module_parameters_set(""), "esxcli system module parameters set -m nvidia -p ''"),
    ],
)
def test_command_builders(built: str, expected: str) -> None:
    assert built == expected


def test_command_builder_rejects_empty_selection() -> None:
    with pytest.raises(ValueError):
        commands.query(gpu=[])


def test_a_run_bound_limits_each_command_and_the_connection() -> None:
    settings = SshSettings()
    assert settings.limited_to(None) == settings and settings.command_timeout == DEFAULT_COMMAND_TIMEOUT_S
    short = settings.limited_to(5)
    assert (short.command_timeout, short.connect_timeout) == (5, 5)
    long = settings.limited_to(600)
    assert (long.command_timeout, long.connect_timeout) == (600, settings.connect_timeout)


# Parsers no published capture was found for (searched: public GitHub code and pages, see the fixtures' README):
# the simulator's text and the hand-written cases above are all they are tested on.
NO_REAL_CAPTURE = {"parse_module_parameters", "parse_module_parameter_names", "parse_component_list"}


def test_every_parser_reads_a_real_capture() -> None:
    """Each parser of vgpuctl/esxi/parsers.py has a case on a real, published output (every fixture not written by
    gpusim, with its source in the README), beside gpusim's; the README names a source for each."""
    import inspect

    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    real = {c["parser"] for c in CASES if not c["fixture"].startswith("gpusim.")}
    names = {n for m in PARSER_MODULES for n, f in inspect.getmembers(m, inspect.isfunction)
             if n.startswith("parse_") and f.__module__ == m.__name__}
    assert names - real == NO_REAL_CAPTURE
    for case in CASES:
        if not case["fixture"].startswith("gpusim."):
            assert f"`{case['fixture']}`" in readme, f"{case['fixture']}: no source line in the README"
