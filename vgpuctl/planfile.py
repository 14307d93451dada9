"""Saved plans: `vgpuctl plan -f FILE --out PLANFILE`, then `vgpuctl apply PLANFILE` applies exactly that plan.

A plan file (JSON) holds the inventory text the plan was made from (for an inventory composed of several files or
with an overlay: the inventory as merged, and the files it was merged from), the plan itself (its report), a digest
of what it was based on (the farm as observed: hosts, GPUs, VMs, their vGPUs and power states; the plan; the
VM-class plan when the inventory names VM classes or namespaces), and a digest over all of that. `apply
PLANFILE` refuses a file whose content does not match its digest ("the plan file was edited") before vCenter is
read; then it observes and plans again from the saved inventory and refuses, before touching anything, when
the farm, the VM classes or the plan differ from the saved ones, and unless the plan made again is, as a
document, the plan section the file holds (`check_same_plan`): the digests are plain hashes anyone can
recompute, so a file whose plan section was edited and its digests made to match (a destroy line taken out) is
refused by that comparison, and what apply shows and applies is the plan made again. Nothing here talks to
vCenter.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgpuctl import filelimits, jsontext
from vgpuctl.errors import UsageError, VgpuctlError
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed, Plan
from vgpuctl.outpaths import write_whole
from vgpuctl.settings import drift_fields

if TYPE_CHECKING:
    from vgpuctl.supervisor.vmclasses import SupervisorPlan

FORMAT = "vgpuctl-plan/v1"
VERSION = 3  # of what a plan file holds; a file of another version is refused (2: typed evacuations, 3: digest)
FLEET_VERSION = 4  # a fleet's plan: 3 with `parts`, the vCenter and basis of each (older versions refuse it)
OTHER_VERSION = (
    "{path}: the plan file was written by another version of vgpuctl: make it again with `vgpuctl plan --out`"
)
EDITED = (
    "{path}: the plan file was edited since `vgpuctl plan --out` wrote it (its digest does not match its content): "
    "nothing was changed; make a new plan with `vgpuctl plan -f FILE --out PLANFILE`"
)

# What the plan depends on, per object; churn that does not change a plan (round trips, guest IPs, tools
# status, warnings) is left out of the digest. A host: where it is and whether it can take changes and VMs
# (ORCHESTRATION_FIELDS), then what each host setting is planned from (vgpuctl.settings).
ORCHESTRATION_FIELDS = (
    "name", "moid", "cluster", "connection_state", "in_maintenance", "power_state", "gpus", "offered_profiles",
    "max_vgpus_per_vm",
)  # fmt: skip
HOST_FIELDS = tuple(dict.fromkeys((*ORCHESTRATION_FIELDS, *drift_fields())))
VM_FIELDS = (
    "name", "moid", "is_template", "host", "cluster", "folder", "power_state", "cpus", "memory_mb",
    "memory_reservation_locked", "memory_reservation_mb", "firmware", "hardware_version", "extra_config", "vgpus",
    "other_passthrough",
)  # fmt: skip


class PlanFileError(VgpuctlError):
    """A plan file that cannot be read, or that no longer matches the farm."""


@dataclass
class SavedPart:
    """One vCenter's part of a fleet's plan: the SDK URL it was made against and the basis it must still match."""

    vcenter: str
    basis: str


@dataclass
class SavedPlan:
    inventory_text: str
    inventory_path: str
    vcenter: str  # the SDK URL the plan was made against ("" for a fleet: each part names its own)
    basis: str  # digest of the farm as observed and of the plan ("" for a fleet)
    plan: dict[str, Any]  # the plan's report, for people and tools reading the file
    parts: dict[str, SavedPart] | None = None  # a fleet's plan: per vCenter name, in the plan's order
    # a composed inventory (includes, an overlay, values files): the files it was merged from, the inventory's
    # first, and the overlay (--env); `inventory_text` is then the inventory as merged
    composed_from: list[str] = field(default_factory=list)
    env: str | None = None

    def to_dict(self) -> dict[str, Any]:
        content: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION if self.parts is None else FLEET_VERSION,
            "vcenter": self.vcenter,
            "inventory_path": self.inventory_path,
            "basis": self.basis,
            "plan": self.plan,
            "inventory": self.inventory_text,
        }
        if self.parts is not None:
            content["parts"] = [{"name": n, "vcenter": p.vcenter, "basis": p.basis} for n, p in self.parts.items()]
        if self.composed_from:
            content |= {"inventory_merged_from": self.composed_from, "inventory_env": self.env}
        return {**content, "digest": content_digest(content)}

    def part(self, name: str) -> SavedPlan:
        """A fleet's plan as the saved plan of one of its vCenters: its URL, its basis and its section of the
        fleet's plan (what `check_still_valid` and `check_same_plan` compare)."""
        if self.parts is None or name not in self.parts:
            raise PlanFileError(f"the saved plan has no part for vCenter {name}")
        part = self.parts[name]
        sections = self.plan.get("vcenters") if isinstance(self.plan, dict) else None
        section = next((s.get("plan") for s in sections or [] if isinstance(s, dict) and s.get("vcenter") == name),
                       None)
        return SavedPlan(self.inventory_text, self.inventory_path, part.vcenter, part.basis,
                         section if isinstance(section, dict) else {}, None, self.composed_from, self.env)

    @property
    def inventory_label(self) -> str:
        """The inventory as `show` names it: the file, and for a composed one what it was merged from."""
        if not self.composed_from:
            return self.inventory_path
        overlay = f", overlay {self.env}" if self.env is not None else ""
        return f"{self.inventory_path} (merged from {len(self.composed_from)} file(s){overlay})"


def content_digest(content: dict[str, Any]) -> str:
    """sha256 over everything a plan file holds but its digest (keys sorted, compact JSON): any edit of the
    inventory, the plan, the basis or the vCenter changes it."""
    return _sha256({k: v for k, v in content.items() if k != "digest"})


def farm_digest(observed: Observed) -> str:
    """sha256 of the observed farm's plan-relevant facts, in a stable order. What a host's ESXi shell adds to a GPU
    (NVLink sets where vCenter named none, whether the driver mixes vGPU types) is left out: a plan whose run
    starts the host's SSH service (`ssh.service: manage`) reads it only at apply; what it changes in the plan, the
    plan's own digest and section catch."""
    data = observed.to_dict()
    hosts = {n: {k: _from_vcenter(h, k) for k in HOST_FIELDS} for n, h in sorted(data["hosts"].items())}
    vms = {n: {k: v.get(k) for k in VM_FIELDS} for n, v in sorted(data["vms"].items())}
    basis = {"datacenter": data.get("datacenter"), "hosts": hosts, "vms": vms, "folders": sorted(data["folders"])}
    return _sha256(basis)


def _from_vcenter(host: dict[str, Any], key: str) -> Any:
    """A host field as vCenter reported it: its GPUs without what the shell gave."""
    value = host.get(key)
    if key != "gpus":
        return value
    unknown: dict[str, Any] = {"types_may_mix": None}  # as observed before the shell is read
    if host.get("nvlink_from_shell"):
        unknown |= {"nvlink_set": None, "nvlink_groups": [], "nvlink_profiles": []}
    return [{**gpu, **unknown} for gpu in value or []]


def plan_digest(plan: Plan) -> str:
    return _sha256(plan.to_dict())


def classes_digest(classes: SupervisorPlan) -> str:
    """sha256 of the VM-class plan. Planned again from the same inventory and hosts, it differs exactly when the
    VM classes or namespaces the inventory names (or those using its classes) changed in a way that matters."""
    return _sha256(classes.to_dict())


def basis_of(observed: Observed, plan: Plan, classes: SupervisorPlan | None = None) -> str:
    basis = f"farm:{farm_digest(observed)} plan:{plan_digest(plan)}"
    return basis + (f" classes:{classes_digest(classes)}" if classes is not None else "")


def _parts(basis: str) -> dict[str, str]:
    """The basis's parts: `farm:X plan:Y classes:Z` -> {"farm": "X", "plan": "Y", "classes": "Z"}."""
    pairs = (part.partition(":") for part in basis.split())
    return {key: value for key, _, value in pairs}


def _sha256(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def save(path: Path, saved: SavedPlan) -> None:
    """Write the plan file whole or not at all (owner-only: it holds the inventory); OutputError when it cannot."""
    write_whole(path, jsontext.document(saved.to_dict()) + b"\n", "--out", mode=0o600)


def load(path: Path) -> SavedPlan:
    data = _read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PlanFileError(f"{path}: not a vgpuctl plan file (made by `vgpuctl plan -f FILE --out {path.name}`)")
    if data.get("version") not in (VERSION, FLEET_VERSION):
        raise PlanFileError(OTHER_VERSION.format(path=path))
    if data.get("digest") != content_digest(data):
        raise PlanFileError(EDITED.format(path=path))
    try:
        return SavedPlan(
            inventory_text=str(data["inventory"]),
            inventory_path=str(data["inventory_path"]),
            vcenter=str(data["vcenter"]),
            basis=str(data["basis"]),
            plan=dict(data["plan"]),
            parts=_parts_of(data["parts"]) if data["version"] == FLEET_VERSION else None,
            composed_from=[str(f) for f in data.get("inventory_merged_from") or []],
            env=None if data.get("inventory_env") is None else str(data["inventory_env"]),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise PlanFileError(f"{path}: plan file is incomplete ({err})") from None


def _parts_of(items: Any) -> dict[str, SavedPart]:
    if not isinstance(items, list) or not items:
        raise ValueError("a fleet's plan without its parts")
    return {str(i["name"]): SavedPart(str(i["vcenter"]), str(i["basis"])) for i in items}


def _looks_like_inventory(path: Path, text: str) -> bool:
    """A YAML file, or text that reads as a YAML mapping with an `apiVersion` (what every inventory starts with)."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return True
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and "apiVersion" in data


def _read_json(path: Path) -> Any:
    """The plan file's JSON, read within the limits every input file has (vgpuctl.filelimits)."""
    try:
        text = filelimits.read_text(path)
        data = json.loads(text, parse_constant=_refuse_constant)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such plan file") from None
    except filelimits.FileTooLarge as err:
        raise PlanFileError(f"{path}: {err}") from None
    except _NonFinite as err:
        line, col = _constant_at(text)
        raise PlanFileError(f"{path}:{line}:{col}: not a vgpuctl plan file ({err} is not a JSON number)") from None
    except RecursionError:  # Python's JSON decoder recurses: far deeper than the limit
        raise PlanFileError(f"{path}: not a vgpuctl plan file ({filelimits.TOO_DEEP})") from None
    except json.JSONDecodeError as err:
        if _looks_like_inventory(path, text):
            raise UsageError(f"{path} is an inventory, not a plan file: an inventory goes with -f (vgpuctl apply "
                             f"-f {path}; `plan -f {path} --out PLANFILE` saves a plan)") from None
        raise PlanFileError(f"{path}: not a vgpuctl plan file ({err})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PlanFileError(f"{path}: not a vgpuctl plan file ({err})") from None
    if filelimits.nesting(data) > filelimits.MAX_NESTING:
        raise PlanFileError(f"{path}: not a vgpuctl plan file ({filelimits.TOO_DEEP})")
    return data


class _NonFinite(Exception):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)  # NaN, Infinity, -Infinity: Python's JSON reader takes them, JSON has no such numbers


_STRING_OR_CONSTANT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?Infinity|NaN)')


def _constant_at(text: str) -> tuple[int, int]:
    """1-based line and column of the first NaN or Infinity outside a string."""
    at = next((m.start(1) for m in _STRING_OR_CONSTANT.finditer(text) if m.group(1)), 0)
    return filelimits.text_position(text, at)


def check_still_valid(
    path: Path, saved: SavedPlan, vcenter: str, observed: Observed, plan: Plan, classes: SupervisorPlan | None = None
) -> None:
    """Refuse (one line) when the plan file was made against another vCenter, or the farm, the VM classes or the
    plan changed. `classes`: the VM-class plan made now (None when the inventory names no VM classes)."""
    if saved.vcenter != vcenter:
        raise PlanFileError(f"{path} was made against {saved.vcenter}, not {vcenter}: nothing was changed")
    then = _parts(saved.basis)
    if then.get("farm") != farm_digest(observed):
        raise PlanFileError(
            f"the farm changed since {path} was made (hosts, GPUs or VMs differ): nothing was changed; "
            "make a new plan with `vgpuctl plan -f FILE --out PLANFILE`"
        )
    if then.get("classes") != (classes_digest(classes) if classes is not None else None):
        raise PlanFileError(
            f"the VM classes or namespaces changed since {path} was made (planning them again gives other "
            "changes): nothing was changed; make a new plan with `vgpuctl plan -f FILE --out PLANFILE`"
        )
    if then.get("plan") != plan_digest(plan):
        raise PlanFileError(
            f"planning again gives a different plan than {path} (host facts changed): nothing was changed; "
            "make a new plan"
        )


def check_same_plan(path: Path, saved: SavedPlan, section: dict[str, Any]) -> None:
    """Refuse (one line) unless the plan made again from the saved inventory, as a document (`plan_section`), is
    the plan section the file holds: what apply would show and do is what the file says."""
    if saved.plan != section:
        what = sorted(k for k in set(saved.plan) | set(section) if saved.plan.get(k) != section.get(k))
        raise PlanFileError(
            f"{path}: its plan section is not the plan its inventory gives ({', '.join(what)} differ): the file "
            "was changed after `vgpuctl plan --out` wrote it, digests and all; nothing was changed; make a new "
            "plan with `vgpuctl plan -f FILE --out PLANFILE`"
        )
