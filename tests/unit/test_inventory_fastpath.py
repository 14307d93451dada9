"""The libyaml fast path of inventory loading reads exactly what ruamel's round-trip loader reads.

`_fast_yaml` either returns the same (data, positions, key positions) as `_ruamel_yaml` or declines
(`_NotFast`), and then ruamel reads the file; these cases compare the two on every fixture and on snippets
chosen at the edges where libyaml (YAML 1.1) and ruamel (YAML 1.2) differ.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpuctl.errors import InventoryError, InventoryErrors
from vgpuctl.inventory import load_inventory, yamlpos

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FILES = [*sorted((ROOT / "tests" / "fixtures" / "inventory").rglob("*.yaml")), ROOT / "inventory.example.yaml"]

# Read fast, and must agree with ruamel.
SAME = [
    "apiVersion: vgpuctl/v1\nvms: [{name: a, power: off}]\n",
    "a: 1\nb: -2\nc: 1.5\nd: yes\ne: ~\nf: null\ng: True\nh: 'x'\ni: \"y\\tz\"\n",
    "j:\n  - 1\n  - k: v\n    l: [1, {m: n}]\n",
    "a:\n  b:\n    c: d\n  e: [ ]\n  f: {}\n",
    "a: x y z\n  continued\nb: 'multi\n  line'\n",
    "vms:\n  - {name: a,\n     cpus: 2}\n  -   name: b\n      cpus: 3\n",
    "a: b # comment\n# c\nd:   e\n",
    "a: 日本\nbb: [日本, c, 😀]\n",
    "'a': 1\n\"b\": 2\n",
    "a:\n- 1\n- 2\nb:\n  - x\n",
    "a: http://x:1/y\nc: {u: http://x}\n",
    "a:\n  - name: a\n    vgpus:\n      - profile: x\n        count: 9\n      - {profile: y}\n",
    "a: [\n  1,\n  2\n]\n",
    "a: ~/.ssh/known_hosts\nb: ./ca.pem\nc: .ssh\nd: -x\ne: +x\nf: <x>\ng: =x\nh: ~\ni: -0\nj: +1\n",
    # typed plain scalars: resolved by ruamel's own resolver, one scalar at a time
    "a: 0x10\nb: 010\nc: 1_000\nd: 1e3\ne: 2024-01-01\nf: .inf\ng: -.inf\nh: .5\ni: +_1\nj: 10.\n",
    "a: 0o17\nb: 1.5e-3\nc: 12:30:00\nd: 2024-01-01T10:00:00Z\ne: 6.4e1\n",
    # empty values in block mappings: null, placed at the next token as ruamel places them
    "a:\nb: x\n",
    "a:\n  b:\n  c: 1\n",
    "a:\n  - b:\n  - c\n",
    "a:\nb:\n",
    "x:\n  y:\nz: 1\n",
    "a:\n\n\n  # c\nb: 1\n",
    "vms:\n  - name: a\n    cpus:\n  - name: b\n",
    "a:   \nb: 1\n",
    # block scalars: ruamel folds each from its own lines
    "a: |\n  x\n",
    "a:\n  b: |\n    line1\n     line2\n\n  c: >-\n    x\n    y\n\n\nd: 1\n",
    "a: |+\n  x\n\n\nb: 1\n",
    "a: >\n  folded\n  text\n\n  para\nb: [1]\n",
    "a:\n  - |\n    in a list\n  - x\n",
    "a: | # c\n  x\nb: 1\n",
]

# Declined: ruamel decides (an error, or a value or position libyaml would give differently).
DECLINED = [
    "a:\tb\n",  # ruamel refuses the tab, libyaml does not
    'a: ["b":c]\n',  # ruamel refuses, libyaml reads {b: c}
    "a: [b: c]\n",
    "a:\n  b: 1\n  b: 2\n",  # duplicate key: ruamel's error
    "a: !!str 1\n",
    "a: |2\n   x\n",  # an indentation indicator
    "a: b\n---\nc: d\n",
    "",
    "a: {b: [c, d}\n",
    "1: a\n",
    "a: b\r\nc: d\r\n",
    "a: ._\n",  # ruamel's own float constructor fails on it
    "a: # comment\nb: 1\n",  # an empty value with a comment, or in a flow mapping: ruamel places it elsewhere
    "a: {b: , c: 1}\n",
    "<<: {b: c}\n",
]


def _ruamel(text: str):
    try:
        return yamlpos._ruamel_yaml(text, "f")
    except InventoryError as exc:
        return exc.located()


def _same_types(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return all(_same_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return all(_same_types(x, y) for x, y in zip(a, b, strict=True))
    return True


def _check(text: str) -> bool:
    """True when the fast path read `text`; then it must equal ruamel's reading, value types included."""
    try:
        fast = yamlpos._fast_yaml(text, "f")
    except yamlpos._NotFast:
        return False
    except InventoryError as exc:  # refused (anchors): ruamel must refuse it the same way
        assert _ruamel(text) == exc.located()
        return True
    ref = _ruamel(text)
    assert fast == ref
    assert _same_types(fast[0], ref[0])
    return True


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_fixture_reads_agree(path: Path) -> None:
    _check(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("text", SAME)
def test_fast_and_equal(text: str) -> None:
    assert _check(text)


@pytest.mark.parametrize("text", DECLINED)
def test_declined(text: str) -> None:
    assert not _check(text)


def test_big_inventory_takes_the_fast_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = ["apiVersion: vgpuctl/v1", "vcenter: {datacenter: DC0}", "vms:"]
    entry = "  - {{name: vm-{:04d}, vgpus: {{profile: grid_a100-10c, count: 1}}, power: 'off'}}"
    lines += [entry.format(i) for i in range(300)]
    lines += ["  - name: last", "    vgpus: {profile: grid_a100-10c, count: 9}"]
    path = tmp_path / "big.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert _check(path.read_text())

    def no_ruamel(*args):
        raise AssertionError("ruamel was used")

    monkeypatch.setattr(yamlpos, "_ruamel_yaml", no_ruamel)
    with pytest.raises(InventoryErrors) as info:
        load_inventory(path)
    # the wrapped `vgpus: {profile, count}` still points at its count, on the last line
    expected = f"{path}:305:44: vms[300].vgpus.count: must be between 1 and 8 (got 9)"
    assert [str(e) for e in info.value.errors] == [expected]


ANCHORED = [
    ("a: &x 1\nb: *x\n", "f:1:4: YAML anchor or alias &x"),
    ("a:\n  - &x {k: v}\n  - *x\n", "f:2:5: YAML anchor or alias &x"),
    ("a:\n  b: &m\n    c: 1\n", "f:2:6: YAML anchor or alias &m"),
    ("&r {a: 1}\n", "f:1:1: YAML anchor or alias &r"),
    ("a:\n  b:\n    - 1\n    - &z\n      c: d\n", "f:4:7: YAML anchor or alias &z"),
    ("a: {b: &s str}\n", "f:1:8: YAML anchor or alias &s"),
]


@pytest.mark.parametrize(("text", "start"), ANCHORED)
def test_anchors_are_refused_at_their_position_by_both_readers(text: str, start: str) -> None:
    for reader in (yamlpos._fast_yaml, yamlpos._ruamel_yaml):
        with pytest.raises(InventoryError) as info:
            reader(text, "f")
        assert info.value.located().startswith(start), reader.__name__


def _alias_bomb(levels: int) -> str:
    lines = ["apiVersion: vgpuctl/v1", "l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    lines.append(f"vms: [{{name: a, vgpus: *l{levels - 1}}}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("line_end", ["\n", "\r\n"], ids=["fast", "ruamel"])
def test_alias_bomb_fails_fast_at_the_first_anchor(tmp_path: Path, line_end: str) -> None:
    # 10**12 leaves once expanded: finishing at all proves nothing was expanded
    path = tmp_path / "bomb.yaml"
    path.write_bytes(_alias_bomb(12).replace("\n", line_end).encode())
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.located().startswith(f"{path}:2:5: YAML anchor or alias &l0: anchors and aliases")


def test_inventory_with_typed_scalars_and_empty_values_takes_the_fast_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = ["apiVersion: vgpuctl/v1", "vms:"]
    lines += [f"  - name: vm-{i:04d}\n    memory_gb: 6.4e1\n    folder:\n    cpus: 0x10" for i in range(200)]
    path = tmp_path / "typed.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert _check(path.read_text())

    def no_ruamel(*args):
        raise AssertionError("ruamel read the whole file")

    monkeypatch.setattr(yamlpos, "_ruamel_yaml", no_ruamel)
    inv = load_inventory(path)
    assert len(inv.vms) == 200 and {(vm.memory_gb, vm.cpus, vm.folder) for vm in inv.vms} == {(64.0, 16, None)}


TAGGED = [
    ("a: !x [1]\n", "f:1:4: YAML tag !x: tags are not allowed"),
    ("a: !x {b: 1}\n", "f:1:4: YAML tag !x: tags are not allowed"),
    ("a:\n  - !x 4\n", "f:2:5: YAML tag !x: tags are not allowed"),
    ("a: [1, !x 2]\n", "f:1:8: YAML tag !x: tags are not allowed"),
    ('a: !!python/object/apply:os.system ["true"]\n', "f:1:4: YAML tag tag:yaml.org,2002:python/object/apply"),
    ("? [a, b]\n: 1\n", "f:1:3: a key must be a plain name, not a list or a mapping"),
    ("a:\n  ? {b: 1}\n  : 1\n", "f:2:5: a key must be a plain name, not a list or a mapping"),
]


@pytest.mark.parametrize(("text", "start"), TAGGED)
def test_tags_and_complex_keys_are_refused_at_their_position(text: str, start: str) -> None:
    """A tagged list once failed as a bug (ruamel keeps no item positions for it), a list as a key was named by its
    Python tuple; neither is plain data."""
    with pytest.raises(InventoryError) as info:
        yamlpos.read_yaml_text(text, "f")
    assert info.value.located().startswith(start)


@pytest.mark.parametrize(("content", "start"), [
    (b"apiVersion: vgpuctl/v1\nvms:\n  - name: caf\xe9\n", ":3:14: not UTF-8 text (byte 0xe9)"),  # Latin-1
    (b"apiVersion: vgpuctl/v1\r\nvms:\r\n  - name: \xc3\xa9\xe9\r\n", ":3:12: not UTF-8 text (byte 0xe9)"),
    (b"apiVersion: vgpuctl/v1\nvms:\n  - name: a\x00b\n", ":3:12: invalid YAML: the character U+0000 is not allowed"),
    (b"apiVersion: vgpuctl/v1\nvms:\n  - name: a\x07b\n", ":3:12: invalid YAML: the character U+0007 is not allowed"),
])
def test_text_yaml_cannot_hold_is_one_located_line(tmp_path: Path, content: bytes, start: str) -> None:
    path = tmp_path / "inv.yaml"
    path.write_bytes(content)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    located = info.value.located()
    assert located.startswith(f"{path}{start}") and "\n" not in located, located
