"""The results directory of an experiment: one record per variant and repetition, written as it finishes.

A repetition whose result.json says `ok` is done and a rerun skips it; records are written to a temporary name and
renamed. The directory layout: docs/experiments.md.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, field
from pathlib import Path
from typing import Any

from vgpuctl import filelimits
from vgpuctl.errors import OutputError, UsageError
from vgpuctl.lazyclass import dataclass
from vgpuctl.outpaths import inside, write_whole

BASE = "base"
STATUS_OK = "ok"
STATUS_FAILED = "failed"


@dataclass
class RunRecord:
    variant: str
    repetition: int
    workload: dict[str, Any]  # the workload spec, plus its `key` and `label`
    status: str  # ok | failed
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # VM -> {rc, file}
    parsed: dict[str, Any] = field(default_factory=dict)  # VM -> parsed numbers (see vgpuctl.experiment.parsers)
    errors: list[str] = field(default_factory=list)
    started: str = ""
    finished: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_atomic(path: Path, content: str | bytes) -> None:
    """A file of the results directory, written whole or not at all (vgpuctl.outpaths.write_whole); a failure
    (a full disk, a read-only folder) is one OutputError line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"results folder {path.parent}: {err.strerror or err}") from None
    write_whole(path, content, "results file")


def _read_text(path: Path) -> str:
    """A file of the results directory, read within vgpuctl's file limits (a FIFO or a device in its place is
    refused at once); a problem is one line naming the file."""
    try:
        return filelimits.read_regular_text(path)
    except (filelimits.NotAFile, filelimits.FileTooLarge) as err:
        raise UsageError(f"{path}: {err}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    except OSError as err:
        raise UsageError(f"{path}: {err.strerror or err}") from None


def _read_json(path: Path) -> Any:
    try:
        return filelimits.parse_json(_read_text(path))
    except (filelimits.FileTooLarge, filelimits.TooDeep, ValueError) as err:
        raise UsageError(f"{path}: not a record vgpuctl wrote ({err})") from None


def _json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


class ResultsDir:
    def __init__(self, root: Path):
        self.root = Path(root)

    # ----------------------------------------------------------------------------------------- paths

    def variant_dir(self, variant: str) -> Path:
        return inside(self.root, "variants", variant)

    def rep_dir(self, variant: str, repetition: int) -> Path:
        return inside(self.variant_dir(variant), f"rep-{repetition:03d}")

    def inventory_path(self, variant: str) -> Path:
        return self.variant_dir(variant) / "inventory.yaml"

    # --------------------------------------------------------------------------------------- writing

    def write_experiment(self, summary: dict[str, Any]) -> None:
        write_atomic(self.root / "experiment.json", _json(summary))

    def write_inventory(self, variant: str, text: str) -> Path:
        path = self.inventory_path(variant)
        write_atomic(path, text)
        return path

    def write_expectations(self, variant: str, expect: dict[str, Any]) -> None:
        write_atomic(self.variant_dir(variant) / "expect.json", _json(expect))

    def record(self, rec: RunRecord, outputs: dict[str, str], facts: dict[str, Any]) -> None:
        """Raw outputs and facts first, result.json last: result.json existing means the record is whole."""
        rep = self.rep_dir(rec.variant, rec.repetition)
        for vm, text in outputs.items():
            name = f"output/{_safe(vm)}.txt"
            write_atomic(inside(rep, name), text)
            rec.outputs.setdefault(vm, {})["file"] = name
        write_atomic(rep / "facts.json", _json(facts))
        write_atomic(rep / "result.json", _json(rec.to_dict()))

    def set_applied(self, configuration: str | None, note: str = "") -> None:
        """The farm is now wholly in `configuration` (a variant, or BASE)."""
        state = self.state()
        state["applied"], state["partial"] = configuration, None
        state.setdefault("history", []).append({"applied": configuration, "at": now(), "note": note})
        write_atomic(self.root / "state.json", _json(state))

    def set_applying(self, configuration: str, note: str = "") -> None:
        """The apply of `configuration` begins: until set_applied, or not_applied, the farm may be anywhere between
        `applied` and it (a run killed meanwhile leaves that said); `applied` still names the last whole one."""
        self._set_partial(configuration, {"applying": configuration, "at": now(), "note": note})

    def set_partial(self, configuration: str, note: str) -> None:
        """The apply of `configuration` stopped part-way (`note` says why): the farm is between `applied` and it."""
        self._set_partial(configuration, {"partial": configuration, "at": now(), "note": note})

    def not_applied(self, configuration: str, note: str) -> None:
        """The apply of `configuration` was refused before it changed anything: the farm is still in `applied`."""
        state = self.state()
        state["partial"] = None
        state.setdefault("history", []).append({"not_applied": configuration, "at": now(), "note": note})
        write_atomic(self.root / "state.json", _json(state))

    def _set_partial(self, configuration: str, entry: dict[str, Any]) -> None:
        state = self.state()
        state.setdefault("applied", None)
        state["partial"] = configuration
        state.setdefault("history", []).append(entry)
        write_atomic(self.root / "state.json", _json(state))

    # --------------------------------------------------------------------------------------- reading

    def state(self) -> dict[str, Any]:
        path = self.root / "state.json"
        return _read_json(path) if path.is_file() else {"applied": None, "partial": None, "history": []}

    def experiment(self) -> dict[str, Any]:
        return _read_json(self.root / "experiment.json")

    def expectations(self, variant: str) -> dict[str, Any]:
        path = self.variant_dir(variant) / "expect.json"
        return _read_json(path) if path.is_file() else {}

    def load(self, variant: str, repetition: int) -> RunRecord | None:
        path = self.rep_dir(variant, repetition) / "result.json"
        if not path.is_file():
            return None
        return RunRecord.from_dict(_read_json(path))

    def facts(self, variant: str, repetition: int) -> dict[str, Any]:
        path = self.rep_dir(variant, repetition) / "facts.json"
        return _read_json(path) if path.is_file() else {}

    def output(self, variant: str, repetition: int, vm: str) -> str:
        rec = self.load(variant, repetition)
        name = (rec.outputs.get(vm) or {}).get("file") if rec else None
        return _read_text(inside(self.rep_dir(variant, repetition), str(name))) if name else ""

    def is_done(self, variant: str, repetition: int) -> bool:
        rec = self.load(variant, repetition)
        return rec is not None and rec.status == STATUS_OK

    def records(self, variant: str) -> list[RunRecord]:
        base = self.variant_dir(variant)
        if not base.is_dir():
            return []
        out = []
        for rep in sorted(p for p in base.iterdir() if p.is_dir() and p.name.startswith("rep-")):
            rec = self.load(variant, int(rep.name[4:]))
            if rec is not None:
                out.append(rec)
        return out


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


@dataclass
class RunSummary:
    variants: dict[str, dict[str, int]] = field(default_factory=dict)  # variant -> {ran, skipped, failed}
    restored: bool = False
    results: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"variants": self.variants, "restored": self.restored, "results": self.results}
