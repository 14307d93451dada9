"""JSON Schemas of the printed documents, generated from the report dataclasses' type hints.

`schema_for(Report)` gives one document's schema (every object `additionalProperties: false`); `event_schema()`
the schema of one line of the event stream (one of the event types); `write_all(folder)` writes
docs/schemas/<kind>.schema.json and event.schema.json. Run `python -m vgpuctl.reports.schemas docs/schemas`
after changing a report; a unit test checks the committed files are current.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, Union

from vgpuctl.reports.apply import ApplyReport, HostChangeReport
from vgpuctl.reports.base import ErrorReport, Report
from vgpuctl.reports.capacity import CapacityDemandReport, CapacityDrainReport, CapacityReport
from vgpuctl.reports.events import EVENTS
from vgpuctl.reports.experiment import (
    ExperimentReport,
    ExperimentRestoreReport,
    ExperimentRunReport,
    ExperimentValidateReport,
)
from vgpuctl.reports.explain import ExplainReport
from vgpuctl.reports.export import ExportReport
from vgpuctl.reports.fleet import (
    FleetApplyReport,
    FleetCapacityReport,
    FleetExportReport,
    FleetPlanReport,
    FleetPreflightReport,
    FleetStatusReport,
)
from vgpuctl.reports.guests import GuestRunReport, ProvisionReport
from vgpuctl.reports.host import HostReport
from vgpuctl.reports.plan import PlanReport, ValidateReport
from vgpuctl.reports.preflight import PreflightReport
from vgpuctl.reports.profiles import ProfilesReport
from vgpuctl.reports.runs import RunRecord, RunsReport
from vgpuctl.reports.sim import SimDownReport, SimEnvReport
from vgpuctl.reports.status import StatusReport
from vgpuctl.reports.supervisor import (
    ManifestsReport,
    SupervisorApplyReport,
    SupervisorPlanReport,
    SupervisorStatusReport,
)
from vgpuctl.reports.usage import IdleReport
from vgpuctl.reports.vmvgpus import VmVgpusReport
from vgpuctl.reports.work import ForgetWorkReport

# Every document a command prints; the architecture page lists each kind with its command.
REPORTS: tuple[type[Any], ...] = (
    GuestRunReport,
    ProvisionReport,
    ValidateReport,
    PlanReport,
    ExplainReport,
    ApplyReport,
    HostChangeReport,
    HostReport,
    StatusReport,
    ProfilesReport,
    VmVgpusReport,
    CapacityReport,
    CapacityDemandReport,
    IdleReport,
    CapacityDrainReport,
    ExportReport,
    SupervisorPlanReport,
    SupervisorApplyReport,
    SupervisorStatusReport,
    ManifestsReport,
    ExperimentValidateReport,
    ExperimentRunReport,
    ExperimentRestoreReport,
    ExperimentReport,
    SimEnvReport,
    SimDownReport,
    PreflightReport,
    ForgetWorkReport,
    RunsReport,
    RunRecord,
    FleetPlanReport,
    FleetApplyReport,
    FleetStatusReport,
    FleetExportReport,
    FleetPreflightReport,
    FleetCapacityReport,
    ErrorReport,
)

DRAFT = "https://json-schema.org/draft/2020-12/schema"
_PRIMITIVES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def kind_of(report: type[Any]) -> str:
    return "error" if report is ErrorReport else str(report.kind)


def schema_for(report: type[Any]) -> dict[str, Any]:
    """The JSON Schema of one report's to_dict() document."""
    defs: dict[str, Any] = {}
    body = _object(report, defs, with_kind=issubclass(report, Report))
    doc = {"$schema": DRAFT, "$id": f"{kind_of(report)}.schema.json", "title": kind_of(report), **body}
    if defs:
        doc["$defs"] = dict(sorted(defs.items()))
    return doc


def _object(cls: type[Any], defs: dict[str, Any], *, with_kind: bool = False) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    if with_kind:
        props["kind"] = {"const": cls.kind}
        required.append("kind")
    for f in dataclasses.fields(cls):
        props[f.name] = _type(hints[f.name], defs)
        if not f.metadata.get("omit_none"):
            required.append(f.name)
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def _type(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if hint in _PRIMITIVES:
        return dict(_PRIMITIVES[hint])
    if isinstance(hint, type) and issubclass(hint, Enum):
        return {"enum": [m.value for m in hint]}
    if isinstance(hint, type) and issubclass(hint, str):  # a string kind the registry extends (ChangeKind)
        return {"type": "string"}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if hint.__name__ not in defs:
            defs[hint.__name__] = {}  # placeholder against recursion
            defs[hint.__name__] = _event(hint, defs) if _is_event(hint) else _object(
                hint, defs, with_kind=issubclass(hint, Report))
        return {"$ref": f"#/$defs/{hint.__name__}"}
    if origin in (types.UnionType, Union):
        return {"anyOf": [_type(arg, defs) for arg in typing.get_args(hint)]}
    if origin is list:
        (item,) = typing.get_args(hint)
        return {"type": "array", "items": _type(item, defs)}
    if origin is dict:
        key, value = typing.get_args(hint)
        if key is not str:
            raise TypeError(f"JSON object keys must be strings, not {key}")
        return {"type": "object", "additionalProperties": _type(value, defs)}
    raise TypeError(f"no JSON Schema for {hint!r}")


EVENT_KIND = "event"


def _is_event(cls: type[Any]) -> bool:
    """One of the event stream's types (reports.events): its `event` type name is a ClassVar."""
    return isinstance(getattr(cls, "event", None), str)


def _event(event: type[Any], defs: dict[str, Any]) -> dict[str, Any]:
    """An event's object: `event` (its type) first, then its fields."""
    body = _object(event, defs)
    body["properties"] = {"event": {"const": event.event}, **body["properties"]}
    body["required"] = ["event", *body["required"]]
    return body


def event_schema() -> dict[str, Any]:
    """One line of `--events`: exactly one of the event types, told apart by `event`."""
    defs: dict[str, Any] = {}
    refs = []
    for event in EVENTS:
        defs[event.__name__] = _event(event, defs)
        refs.append({"$ref": f"#/$defs/{event.__name__}"})
    doc = {"$schema": DRAFT, "$id": f"{EVENT_KIND}.schema.json", "title": EVENT_KIND, "oneOf": refs}
    return {**doc, "$defs": dict(sorted(defs.items()))}


def render(report: type[Any]) -> str:
    return json.dumps(schema_for(report), indent=2) + "\n"


def render_events() -> str:
    return json.dumps(event_schema(), indent=2) + "\n"


def write_all(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for report in REPORTS:
        path = folder / f"{kind_of(report)}.schema.json"
        path.write_text(render(report), encoding="utf-8")
        written.append(path)
    path = folder / f"{EVENT_KIND}.schema.json"
    path.write_text(render_events(), encoding="utf-8")
    return [*written, path]


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m vgpuctl.reports.schemas",
                                     description="Write the JSON Schemas of vgpuctl's documents.")
    parser.add_argument("folder", nargs="?", default="docs/schemas", help="where to write them (default: %(default)s)")
    for written in write_all(Path(parser.parse_args(argv).folder)):
        print(written)


if __name__ == "__main__":
    main(sys.argv[1:])
