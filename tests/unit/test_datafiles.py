"""The data files' JSON twins: read in the YAML's place only while made from its current bytes, and kept up to
date in the repository."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from vgpuctl import datafiles
from vgpuctl.netrules import network_rules
from vgpuctl.profiles import load_catalogue
from vgpuctl.releases import branches
from vgpuctl.reports import schemas
from vgpuctl.vmlimits import vm_limits

pytestmark = pytest.mark.unit


def test_every_data_file_has_its_twin_up_to_date() -> None:
    stale = [p.name for p in datafiles.stale_twins()]
    assert not stale, f"data files whose JSON twin is out of date: {stale}; run `python -m vgpuctl.datafiles`"


def test_each_twin_holds_what_its_yaml_parses_to() -> None:
    files = datafiles.yaml_files()
    assert {p.name for p in files} >= {"vgpu-catalogue.yaml", "network.yaml", "vm-limits.yaml", "vgpu-releases.yaml"}
    for path in files:
        twin = json.loads(datafiles.twin_path(path).read_text(encoding="utf-8"))
        assert twin["data"] == datafiles.parse_yaml(path.read_bytes()), path.name
        assert twin["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def _folder(tmp_path: Path, yaml_text: str, twin: object | None) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    if twin is not None:
        (tmp_path / "parsed").mkdir()
        datafiles.twin_path(path).write_text(twin if isinstance(twin, str) else json.dumps(twin), encoding="utf-8")
    return path


def test_a_twin_made_from_the_yamls_bytes_is_read_in_its_place(tmp_path: Path) -> None:
    text = "limit: 4\n"
    digest = hashlib.sha256(text.encode()).hexdigest()
    path = _folder(tmp_path, text, {"source": "rules.yaml", "sha256": digest, "data": {"limit": "from the twin"}})
    assert datafiles.load_yaml_data(path) == {"limit": "from the twin"}


@pytest.mark.parametrize("twin", [
    None,
    "{not json",
    ["a list"],
    {"source": "rules.yaml", "sha256": "0" * 64, "data": {"limit": "stale"}},
    {"source": "rules.yaml", "sha256": hashlib.sha256(b"limit: 4\n").hexdigest()},
], ids=["missing", "not-json", "not-an-object", "made-from-other-bytes", "no-data"])
def test_a_twin_missing_broken_or_made_from_other_bytes_is_passed_by(tmp_path: Path, twin: object) -> None:
    path = _folder(tmp_path, "limit: 4\n", twin)
    assert datafiles.load_yaml_data(path) == {"limit": 4}


def test_an_edited_yaml_is_read_not_its_old_twin(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("limit: 4\n", encoding="utf-8")
    datafiles.write_twins(tmp_path)
    assert datafiles.load_yaml_data(path) == {"limit": 4}
    path.write_text("limit: 5\n", encoding="utf-8")
    assert datafiles.load_yaml_data(path) == {"limit": 5}
    assert datafiles.stale_twins(tmp_path) == [path]


@pytest.mark.parametrize("text", ["1: one\n", "when: 2026-12-03\n"], ids=["int-key", "date"])
def test_data_json_cannot_hold_as_the_yaml_gives_it_gets_no_twin(tmp_path: Path, text: str) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError):
        datafiles.twin_text(path)


def test_the_rules_read_through_their_twins_are_the_rules_of_the_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each loader gives the same rules from the twin as from the YAML parsed."""
    read = {
        "catalogue": lambda: sorted(load_catalogue().boards),
        "network": lambda: network_rules(),
        "limits": lambda: vm_limits(),
        "releases": lambda: branches(),
    }
    caches = [load_catalogue, network_rules, vm_limits, branches]
    for fn in caches:
        fn.cache_clear()
    from_twins = {k: f() for k, f in read.items()}
    for fn in caches:
        fn.cache_clear()
    monkeypatch.setattr(datafiles, "_twin_data", lambda twin, digest: (False, None))
    try:
        from_yaml = {k: f() for k, f in read.items()}
    finally:
        for fn in caches:
            fn.cache_clear()
    assert from_twins == from_yaml


def test_the_generators_help_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m vgpuctl.reports.schemas --help` once wrote the schemas into a folder named `--help`."""
    monkeypatch.chdir(tmp_path)
    written: list[object] = []
    monkeypatch.setattr(datafiles, "write_twins", lambda *a: written.append(a) or [])
    for main in (schemas.main, datafiles.main):
        with pytest.raises(SystemExit) as done:
            main(["--help"])
        assert done.value.code == 0
    assert "usage: python -m vgpuctl.reports.schemas" in capsys.readouterr().out
    assert not list(tmp_path.iterdir()) and written == []
