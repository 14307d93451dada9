"""The inventory file (apiVersion vgpuctl/v1): schema, YAML loading with FILE:LINE:COL errors, name ranges
and the semantic checks that need no vCenter (every field is documented in inventory.example.yaml).

`load_inventory(path)` reads, schema-checks and range-expands a file; on failure it raises InventoryErrors
with every schema and semantic problem at once. `validate(inv)` runs the semantic checks of a loaded one.
A VM entry without `vgpus` leaves the VM's vGPUs as they are (`VmSpec.manages_vgpus`); `vgpus: []` removes
them. Host entries are merged per host by vgpuctl.hostmerge.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import re
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, create_model, field_validator, model_validator

from vgpuctl.domain import (
    MAX_VGPUS_PER_VM,
    Evacuate,
    NvlinkRequirement,
    Power,
)
from vgpuctl.errors import InventoryError, InventoryErrors
from vgpuctl.hosts.settings import SETTINGS
from vgpuctl.profiles import BOARDS, PROFILE_GRAMMAR, ProfileError, is_host_spelling, mixing_problem, parse_profile
from vgpuctl.strictmodel import Lax
from vgpuctl.strictmodel import StrictModel as _Model
from vgpuctl.supervisor.vmclasses import NamespaceList, VmClassList
from vgpuctl.supervisor.vmclasses import iter_problems as class_problems

API_VERSION = "vgpuctl/v1"
MAX_RANGE_NAMES = 10_000  # names one `{FIRST..LAST}` entry may expand to (documented in the README)
MAX_INVENTORY_VMS = 100_000  # VMs one inventory file may name once ranges are expanded
_RANGE_DIGITS = 9

Pos = tuple[int, int]  # 1-based line, column
Path_ = tuple[str | int, ...]

_THUMB_PLAIN = re.compile(r"^[0-9a-fA-F]{64}$")
_THUMB_COLONS = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){31}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RANGE = re.compile(r"\{([^{}]*)\}")
_RANGE_BODY = re.compile(r"^(\d+)\.\.(\d+)$")


def _env_name(v: str | None) -> str | None:
    if v is not None and not _ENV_NAME.match(v):
        raise ValueError(f"must be the name of an environment variable, not a secret (got {v!r})")
    return v


_M = typing.TypeVar("_M", bound=_Model)


# --------------------------------------------------------------------------------------------- vcenter


class TlsSpec(_Model):
    verify: bool = True
    ca_file: str | None = None
    thumbprint: str | None = None  # sha256 of the server certificate, hex, with or without colons

    @field_validator("thumbprint")
    @classmethod
    def _thumbprint(cls, v: str | None) -> str | None:
        if v is not None and not (_THUMB_PLAIN.match(v) or _THUMB_COLONS.match(v)):
            raise ValueError(
                f"must be a sha256 fingerprint: 64 hex digits, optionally as 32 colon-separated pairs (got {v!r})"
            )
        return v

    @property
    def thumbprint_hex(self) -> str | None:
        """The pinned fingerprint as upper-case hex without colons."""
        return self.thumbprint.replace(":", "").upper() if self.thumbprint else None


class VcenterSpec(_Model):
    url: str | None = None  # --url / VGPUCTL_URL / GOVC_URL win over this
    datacenter: str | None = None
    tls: TlsSpec = Field(default_factory=TlsSpec)


# ----------------------------------------------------------------------------------------------- hosts


# graphics, gpus, nvlink, scheduler: each host setting's part of an entry is in its module (vgpuctl.hosts.settings)


class SshSpec(_Model):
    user: str = "root"
    port: int = Field(default=22, ge=1, le=65535)
    known_hosts: str | None = None
    key_file: str | None = None
    password_env: str | None = None  # NAME of an environment variable holding the password, never the password

    @field_validator("password_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        return _env_name(v)


class MaintenanceSpec(_Model):
    evacuate: Lax[Evacuate] = Evacuate.REFUSE
    max_unavailable: int = Field(default=1, ge=1)
    reboot_timeout_s: int = Field(default=900, ge=1)


class HostEntry(_Model):
    """What every hosts entry has: which hosts it is for. HostSpec adds the settings' parts, then ssh and
    maintenance."""

    cluster: str | None = None
    name: str | None = None
    _line: int | None = PrivateAttr(default=None)
    _index: int = PrivateAttr(default=0)
    _file: str | None = PrivateAttr(default=None)
    _pos: dict[Path_, Pos] = PrivateAttr(default_factory=dict)  # key path within the entry -> (line, col)

    @model_validator(mode="after")
    def _target(self) -> HostEntry:
        if (self.cluster is None) == (self.name is None):
            raise ValueError("set exactly one of 'cluster' or 'name'")
        return self

    @property
    def target(self) -> str:
        return f"cluster {self.cluster}" if self.cluster else f"host {self.name}"


def _host_spec() -> Any:
    """A hosts entry: cluster or name, each host setting's key with its schema (in registry order), then ssh and
    maintenance."""
    fields: dict[str, Any] = {s.key: (s.schema, s.default) for s in SETTINGS}
    fields["ssh"] = (SshSpec, Field(default_factory=SshSpec))
    fields["maintenance"] = (MaintenanceSpec, Field(default_factory=MaintenanceSpec))
    return create_model("HostSpec", __base__=HostEntry, __module__=__name__, **fields)


if typing.TYPE_CHECKING:

    class HostSpec(HostEntry):
        ssh: SshSpec = Field(default_factory=SshSpec)
        maintenance: MaintenanceSpec = Field(default_factory=MaintenanceSpec)

        def __getattr__(self, key: str) -> Any: ...  # a host setting's part: vgpuctl.hosts.settings

else:
    HostSpec = _host_spec()


# ------------------------------------------------------------------------------------------------- vms


class VgpuSpec(_Model):
    profile: str
    count: int = 1

    @field_validator("count")
    @classmethod
    def _count(cls, v: int) -> int:
        if not 1 <= v <= MAX_VGPUS_PER_VM:
            raise ValueError(f"must be between 1 and {MAX_VGPUS_PER_VM} (got {v})")
        return v


class GuestRef(_Model):
    group: str


class VmSpec(_Model):
    name: str
    template: str | None = None
    cluster: str | None = None
    host: str | None = None
    folder: str | None = None
    cpus: int | None = Field(default=None, ge=1, le=768)
    memory_gb: float | None = None
    vgpus: list[VgpuSpec] = Field(default_factory=list)
    nvlink: Lax[NvlinkRequirement] = NvlinkRequirement.NONE
    power: Lax[Power] = Power.RESTART
    guest: GuestRef | None = None
    _line: int | None = PrivateAttr(default=None)
    _index: int = PrivateAttr(default=0)  # position of the YAML entry this VM came from (before expansion)
    _vgpus_invalid: bool = PrivateAttr(default=False)  # its `vgpus` failed the schema (one-pass validation)

    @model_validator(mode="before")
    @classmethod
    def _null_vgpus_is_unset(cls, data: Any) -> Any:
        if isinstance(data, dict) and "vgpus" in data and data["vgpus"] is None:
            return {k: v for k, v in data.items() if k != "vgpus"}  # `vgpus:` alone leaves the vGPUs alone
        return data

    @field_validator("vgpus", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, dict) else v

    @property
    def manages_vgpus(self) -> bool:
        """False when the entry has no `vgpus` key: the VM's vGPUs are left as they are."""
        return "vgpus" in self.model_fields_set

    @field_validator("memory_gb")
    @classmethod
    def _memory(cls, v: float | None) -> float | None:
        if v is None:
            return v
        mb = v * 1024
        if v <= 0 or mb != int(mb) or int(mb) % 4:
            raise ValueError(f"must be a positive size in GB that is a whole multiple of 4 MB (got {v})")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @property
    def memory_mb(self) -> int | None:
        return int(self.memory_gb * 1024) if self.memory_gb is not None else None

    @property
    def vgpu_profiles(self) -> list[str]:
        """One profile name per vGPU, in declaration order."""
        return [v.profile for v in self.vgpus for _ in range(v.count)]

    @property
    def vgpu_count(self) -> int:
        return sum(v.count for v in self.vgpus)


# ---------------------------------------------------------------------------------------------- guests


class GuestConnection(_Model):
    user: str = "root"
    port: int = Field(default=22, ge=1, le=65535)
    key_file: str | None = None
    password_env: str | None = None

    @field_validator("password_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        return _env_name(v)


class GuestGroup(_Model):
    roles: list[str] = Field(default_factory=list)
    vars: dict[str, Any] = Field(default_factory=dict)


class GuestsSpec(_Model):
    connection: GuestConnection = Field(default_factory=GuestConnection)
    groups: dict[str, GuestGroup] = Field(default_factory=dict)


# ------------------------------------------------------------------------------------------- inventory


class Inventory(_Model):
    api_version: Literal["vgpuctl/v1"] = Field(alias="apiVersion")
    vcenter: VcenterSpec = Field(default_factory=VcenterSpec)
    hosts: list[HostSpec] = Field(default_factory=list)
    vms: list[VmSpec] = Field(default_factory=list)
    guests: GuestsSpec = Field(default_factory=GuestsSpec)
    vm_classes: VmClassList = Field(default_factory=list)  # VM classes with vGPUs (vgpuctl.supervisor.vmclasses)
    namespaces: NamespaceList = Field(default_factory=list)  # supervisor namespaces and their VM classes
    _source_path: str | None = PrivateAttr(default=None)
    _pos: dict[Path_, Pos] = PrivateAttr(default_factory=dict)
    _wrapped: set[Path_] = PrivateAttr(default_factory=set)

    @field_validator("hosts", "vms", mode="before")
    @classmethod
    def _empty_list(cls, v: Any) -> Any:
        return [] if v is None else v  # `vms:` with nothing under it

    @property
    def source_path(self) -> str | None:
        return self._source_path

    def vm(self, name: str) -> VmSpec | None:
        return next((v for v in self.vms if v.name == name), None)

    def locate(self, path: Path_) -> InventoryErrorLocation:
        return InventoryErrorLocation(self._source_path, self._pos, self._wrapped, path)

    def error(self, path: Path_, message: str) -> InventoryError:
        return self.locate(path).error(message)


class InventoryErrorLocation:
    """Turns a key path into `FILE:LINE:COL: path: message` using the positions recorded at load time."""

    def __init__(self, file: str | None, pos: dict[Path_, Pos], wrapped: set[Path_], path: Path_):
        self.file, self.pos, self.wrapped, self.path = file, pos, wrapped, path

    def error(self, message: str) -> InventoryError:
        line, col = _lookup(self.pos, self.path)
        shown = format_path(self.path, self.wrapped)
        text = f"{shown}: {message}" if shown else message
        return InventoryError(text, self.file or "<inventory>", line, col)


def format_path(path: Path_, wrapped: set[Path_] = frozenset()) -> str:  # type: ignore[assignment]
    out = ""
    for i, part in enumerate(path):
        if isinstance(part, int):
            if tuple(path[:i]) in wrapped:
                continue  # `vgpus: {profile, count}` was written as a mapping: no [0] in messages
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _lookup(pos: dict[Path_, Pos], path: Path_) -> tuple[int | None, int | None]:
    p = tuple(path)
    while p:
        if p in pos:
            return pos[p]
        p = p[:-1]
    return pos.get((), (None, None))  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------- YAML loading


def _plain(node: Any, path: Path_, pos: dict[Path_, Pos], keypos: dict[Path_, Pos], file: str = "<inventory>") -> Any:
    """ruamel's round-trip objects -> plain Python, recording 1-based positions by key path."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(node, CommentedMap):
        out: dict[str, Any] = {}
        for k in node:
            kp = (*path, str(k))
            kl, kc = node.lc.key(k)
            vl, vc = node.lc.value(k)
            keypos[kp] = (kl + 1, kc + 1)
            value = node[k]
            _refuse_anchor(value, (vl + 1, vc + 1), file)
            # A nested block mapping/sequence is best pointed at by its key; scalars by their value.
            pos[kp] = (kl + 1, kc + 1) if isinstance(value, CommentedMap | CommentedSeq) else (vl + 1, vc + 1)
            out[str(k)] = _plain(value, kp, pos, keypos, file)
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for i, item in enumerate(node):
            il, ic = node.lc.item(i)
            pos[(*path, i)] = (il + 1, ic + 1)
            _refuse_anchor(item, (il + 1, ic + 1), file)
            items.append(_plain(item, (*path, i), pos, keypos, file))
        return items
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def _refuse_anchor(node: Any, at: Pos, file: str) -> None:
    """ruamel keeps an anchored node once; its first visit is the anchor, so an alias bomb is never expanded."""
    anchor = getattr(getattr(node, "anchor", None), "value", None)
    if anchor is not None:
        raise InventoryError(_anchor_message("&", anchor), file, *at)


def _anchor_message(sigil: str, name: str) -> str:
    return (f"YAML anchor or alias {sigil}{name}: anchors and aliases are not allowed in an inventory "
            "(write the values out, or use a name range for similar VMs)")


def _read_yaml(path: Path) -> tuple[Any, dict[Path_, Pos], dict[Path_, Pos]]:
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InventoryError("inventory file not found", file) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(f"cannot read the inventory: {exc}", file) from None
    try:
        return _fast_yaml(text, file)
    except _NotFast:
        return _ruamel_yaml(text, file)


def _ruamel_yaml(text: str, file: str) -> tuple[Any, dict[Path_, Pos], dict[Path_, Pos]]:
    """The reference reader: ruamel.yaml's round-trip loader (YAML 1.2), the source of every YAML error."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    yaml = YAML(typ="rt")
    try:
        data = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(s for s in (exc.problem, exc.context) if s) or "invalid YAML"
        if mark is None:
            raise InventoryError(f"invalid YAML: {message}", file) from None
        raise InventoryError(f"invalid YAML: {message}", file, mark.line + 1, mark.column + 1) from None
    except YAMLError as exc:
        raise InventoryError(f"invalid YAML: {exc}", file) from None
    pos: dict[Path_, Pos] = {(): (1, 1)}
    keypos: dict[Path_, Pos] = {}
    _refuse_anchor(data, (1, 1), file)
    plain = _plain(data, (), pos, keypos, file)
    return plain, pos, keypos


# ----------------------------------------------------------------------------- fast path (libyaml events)
#
# ruamel's pure-Python round-trip loader takes about a second for an inventory of 1,000 VMs. When PyYAML's
# libyaml binding is present, the same file is first read from libyaml's event stream (C), recording the same
# positions. Scalars whose meaning depends on ruamel's YAML 1.2 rules (numbers, dates, block scalars) are
# resolved by ruamel itself one at a time; a parse error, duplicate key, tag, directive, tab or other form
# where libyaml and ruamel could disagree sends the whole file to ruamel, so errors and values stay ruamel's.
# Anchors and aliases are refused by both readers (an alias bomb is never expanded).


class _NotFast(Exception):
    """The fast reader is unsure about this file; ruamel reads it."""


_NULLS = frozenset({"~", "null", "Null", "NULL"})
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_DEC_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_DEC_FLOAT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)\.[0-9]+")
_SPECIAL = frozenset({"<<", "=", ".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN"})
_NEVER_PLAIN = frozenset("!&*|>%@`")  # the parser never lets a plain scalar start so
# Tabs (libyaml accepts some that ruamel refuses), YAML 1.1-only line breaks, a BOM, a carriage return.
_UNSURE_CHARS = ("\t", "\x85", "\u2028", "\u2029", "\ufeff", "\r")


def _plain_scalar(value: str) -> Any:
    if not value:
        raise _NotFast  # an empty value: ruamel places it at the next token
    if value in _NULLS:
        return None
    if value in _BOOLS:
        return _BOOLS[value]
    if _DEC_INT.fullmatch(value):
        return int(value)
    if _DEC_FLOAT.fullmatch(value):
        return float(value)
    if _maybe_typed(value):
        return _typed_scalar(value)
    return value


@functools.lru_cache(maxsize=4096)
def _typed_scalar(value: str) -> Any:
    """A plain scalar that may be a number, date or other typed value, resolved by ruamel itself (YAML 1.2)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="rt").load(f"v: {value}\n")
    except (YAMLError, ValueError):  # ValueError: ruamel's float constructor on forms like `._`
        raise _NotFast from None
    if not isinstance(data, dict) or list(data) != ["v"]:
        raise _NotFast
    return _plain(data["v"], (), {}, {})


def _maybe_typed(value: str) -> bool:
    """Could a YAML 1.2 resolver of ruamel's (number, date, merge key, value key) claim this plain scalar?"""
    first = value[0]
    if first in "0123456789":
        return True
    if first in "+-.":
        return value[1:2] in ("", *"0123456789._") or value in _SPECIAL
    if first in "<=":
        return value in _SPECIAL
    return first in _NEVER_PLAIN


def _fast_yaml(text: str, file: str = "<inventory>") -> tuple[Any, dict[Path_, Pos], dict[Path_, Pos]]:
    try:
        import yaml
        from yaml import CSafeLoader  # libyaml; without it the pure-Python PyYAML would be no faster
    except ImportError:
        raise _NotFast from None
    if any(c in text for c in _UNSURE_CHARS):
        raise _NotFast
    loader = CSafeLoader(text)
    try:
        events = []
        while (event := loader.get_event()) is not None:
            events.append(event)
    except yaml.YAMLError:
        raise _NotFast from None
    finally:
        loader.dispose()
    kinds = [type(e).__name__ for e in events[:2]] + [type(e).__name__ for e in events[-2:]]
    if len(events) < 5 or kinds != ["StreamStartEvent", "DocumentStartEvent", "DocumentEndEvent", "StreamEndEvent"]:
        raise _NotFast  # empty stream, several documents: ruamel words those
    _refuse_anchors(events, file)
    doc = events[1]
    if doc.version is not None or doc.tags:
        raise _NotFast
    pos: dict[Path_, Pos] = {(): (1, 1)}
    keypos: dict[Path_, Pos] = {}
    reader = _EventReader(events, pos, keypos, text)
    reader.i = 2
    data = reader.node(())
    if reader.i != len(events) - 2:
        raise _NotFast
    return data, pos, keypos


def _refuse_anchors(events: list[Any], file: str) -> None:
    """The first anchor or alias of a parsed stream is an error at its own position."""
    import yaml

    for event in events:
        if isinstance(event, yaml.AliasEvent):
            sigil = "*"
        elif getattr(event, "anchor", None) is not None:
            sigil = "&"
        else:
            continue
        mark = event.start_mark
        raise InventoryError(_anchor_message(sigil, event.anchor), file, mark.line + 1, mark.column + 1)


def _is_empty(event: Any) -> bool:
    import yaml

    return (isinstance(event, yaml.ScalarEvent) and not event.style and event.value == ""
            and event.anchor is None and event.tag is None)


def _at(mark: Any) -> Pos:
    return (mark.line, mark.column)


class _EventReader:
    def __init__(self, events: list[Any], pos: dict[Path_, Pos], keypos: dict[Path_, Pos], text: str = ""):
        self.events, self.pos, self.keypos, self.i = events, pos, keypos, 0
        self.lines = text.split("\n")

    def _block_scalar(self, event: Any) -> Any:
        """A literal or folded scalar, folded by ruamel itself from its own lines of the file."""
        start, end = event.start_mark, event.end_mark
        header = self.lines[start.line][start.column:]
        if any(c.isdigit() for c in header.split("#", 1)[0]):
            raise _NotFast  # an indentation indicator counts from the parent's indentation
        raw = "\n".join([header, *self.lines[start.line + 1:end.line]])
        return _typed_scalar(raw)

    def _nothing_after(self, mark: Any) -> bool:
        return mark.line < len(self.lines) and not self.lines[mark.line][mark.column:].strip()

    def node(self, path: Path_) -> Any:
        import yaml

        event = self.events[self.i]
        self.i += 1
        if getattr(event, "anchor", None) is not None or getattr(event, "tag", None) is not None:
            raise _NotFast
        if isinstance(event, yaml.ScalarEvent):
            if not event.style:  # plain: '' from libyaml, None from PyYAML's own parser
                return _plain_scalar(event.value)
            if event.style in ("'", '"'):
                return event.value
            return self._block_scalar(event)
        if isinstance(event, yaml.MappingStartEvent):
            first = self.events[self.i]
            if event.flow_style and _at(first.start_mark) == _at(event.start_mark):
                raise _NotFast  # a single-pair mapping inside a flow sequence (`[a: b]`): not always ruamel's
            return self.mapping(path)
        if isinstance(event, yaml.SequenceStartEvent):
            return self.sequence(path)
        raise _NotFast  # aliases

    def mapping(self, path: Path_) -> dict[str, Any]:
        import yaml

        out: dict[str, Any] = {}
        events = self.events
        while not isinstance(events[self.i], yaml.MappingEndEvent):
            key_event = events[self.i]
            if not isinstance(key_event, yaml.ScalarEvent) or key_event.anchor is not None or key_event.tag:
                raise _NotFast
            key = _plain_scalar(key_event.value) if not key_event.style else key_event.value
            if not isinstance(key, str) or key in out or key == "<<" or key_event.style not in (None, "", "'", '"'):
                raise _NotFast  # duplicate keys are ruamel's error; non-string keys its str()
            self.i += 1
            kp = (*path, key)
            kmark = key_event.start_mark
            kpos = (kmark.line + 1, kmark.column + 1)
            self.keypos[kp] = kpos
            value_event = events[self.i]
            if _is_empty(value_event):  # `key:` alone is null, placed (as ruamel does) at the next token
                if not self._nothing_after(value_event.start_mark):
                    raise _NotFast  # a comment or flow punctuation on the line: ruamel's placement differs
                vmark = events[self.i + 1].start_mark
                self.pos[kp] = (vmark.line + 1, vmark.column + 1)
                self.i += 1
                out[key] = None
                continue
            if isinstance(value_event, yaml.ScalarEvent):
                vmark = value_event.start_mark
                self.pos[kp] = (vmark.line + 1, vmark.column + 1)
            else:
                self.pos[kp] = kpos  # a nested mapping/sequence is pointed at by its key
            out[key] = self.node(kp)
        self.i += 1
        return out

    def sequence(self, path: Path_) -> list[Any]:
        import yaml

        items: list[Any] = []
        events = self.events
        while not isinstance(events[self.i], yaml.SequenceEndEvent):
            mark = events[self.i].start_mark
            ip = (*path, len(items))
            self.pos[ip] = (mark.line + 1, mark.column + 1)
            items.append(self.node(ip))
        self.i += 1
        return items


def _wrap_vgpus(data: dict[str, Any], pos: dict[Path_, Pos], keypos: dict[Path_, Pos]) -> set[Path_]:
    """`vgpus: {profile, count}` -> a one-item list, with positions copied so messages still point at it."""
    wrapped: set[Path_] = set()
    vms = data.get("vms")
    if not isinstance(vms, list):
        return wrapped
    for i, vm in enumerate(vms):
        if isinstance(vm, dict) and isinstance(vm.get("vgpus"), dict):
            base: Path_ = ("vms", i, "vgpus")
            vm["vgpus"] = [vm["vgpus"]]
            wrapped.add(base)
    if not wrapped:
        return wrapped
    for table in (pos, keypos):  # one pass over each table: paths under a wrapped base gain the [0]
        moved = [(p, v) for p, v in table.items() if len(p) > 3 and p[:3] in wrapped]
        for p, v in moved:
            table[(*p[:3], 0, *p[3:])] = v
    for base in wrapped:
        pos[(*base, 0)] = pos.get(base, (1, 1))
    return wrapped


# --------------------------------------------------------------------------------------- schema errors


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class whose fields live at `loc` (for 'did you mean')."""
    model: Any = Inventory
    for part in loc:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return None
        model = _unwrap(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    while True:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        origin = typing.get_origin(tp)
        if origin in (list, typing.Union, types.UnionType):
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            if models:
                tp = models[0]
                continue
            generic = [a for a in args if typing.get_origin(a) is list]
            if generic:
                tp = generic[0]
                continue
            return tp
        if origin is dict:
            return args[-1] if args else tp
        return tp


def _keys_of(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _schema_message(err: Mapping[str, Any]) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    loc = err["loc"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        model = _model_at(loc[:-1])
        hint = ""
        if key in ("password", "secret", "token"):
            return f"unknown key '{key}': secrets never live in the inventory (use password_env or a file path)"
        if model is not None:
            close = difflib.get_close_matches(key, _keys_of(model), n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(_keys_of(model))})"
        return f"unknown key '{key}'{hint}"
    if kind == "missing":
        return f"missing required key '{loc[-1]}'"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx.get('expected')} (got {value!r})"
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", err["msg"]))
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer (got {value!r})"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number (got {value!r})"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (got {value!r})"
    if kind in ("string_type",):
        return f"must be a string (got {value!r})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping (got {type(value).__name__})"
    if kind in ("list_type",):
        return f"must be a list (got {type(value).__name__})"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        bounds = {"greater_than_equal": "at least {ge}", "less_than_equal": "at most {le}",
                  "greater_than": "greater than {gt}", "less_than": "less than {lt}"}
        return f"must be {bounds[kind].format(**ctx)} (got {value!r})"
    msg = err["msg"]
    return msg[:1].lower() + msg[1:]


def _clean_loc(loc: tuple[Any, ...]) -> Path_:
    # Union members and `function-before` validators can add type tags to loc; keep the key path only.
    model_names = {"str", "int", "float", "bool", "list", "dict", "none"}
    out: list[str | int] = []
    for part in loc:
        if isinstance(part, str) and (part in model_names or part.startswith(("function-", "list[", "dict["))):
            continue
        out.append(part)
    return tuple(out)


def _schema_errors(exc: ValidationError, file: str, pos: dict[Path_, Pos], keypos: dict[Path_, Pos],
                   wrapped: set[Path_]) -> list[InventoryError]:
    out: list[InventoryError] = []
    for err in exc.errors(include_url=False):
        raw = tuple(err["loc"])
        # An unknown key is the user's own text: never mistake it for a type tag.
        loc = (*_clean_loc(raw[:-1]), raw[-1]) if err["type"] == "extra_forbidden" else _clean_loc(raw)
        err = {**err, "loc": loc}
        message = _schema_message(err)
        if err["type"] == "missing":
            where, shown = loc[:-1], loc[:-1]
        elif err["type"] == "extra_forbidden":
            where, shown = loc, loc[:-1]
        else:
            where, shown = loc, loc
        table = keypos if err["type"] == "extra_forbidden" and tuple(where) in keypos else pos
        line, col = _lookup(table, where)
        text_path = format_path(shown, wrapped)
        out.append(InventoryError(f"{text_path}: {message}" if text_path else message, file, line, col))
    return out


# ---------------------------------------------------------------------------------------- name ranges


def expand_name(name: str) -> list[str]:
    """`train-{01..04}` -> train-01 .. train-04; several ranges multiply; zero padding is kept.

    Raises ValueError for a malformed or reversed range, or one that expands to more than MAX_RANGE_NAMES
    names (checked before any name is made)."""
    if "{" not in name and "}" not in name:
        return [name]
    parts: list[str | _Range] = []
    last = 0
    for m in _RANGE.finditer(name):
        literal = name[last:m.start()]
        if "{" in literal or "}" in literal:
            raise ValueError(f"unbalanced braces in {name!r}")
        parts += [literal, _parse_range(m.group(1), name)]
        last = m.end()
    tail = name[last:]
    if "{" in tail or "}" in tail:
        raise ValueError(f"unbalanced braces in {name!r}")
    parts.append(tail)
    total = 1
    for p in parts:
        if isinstance(p, _Range):
            total *= p.size
    if total > MAX_RANGE_NAMES:
        raise ValueError(f"{name!r} expands to {total} names (at most {MAX_RANGE_NAMES} per entry)")
    choices = [[p] if isinstance(p, str) else p.values() for p in parts]
    return ["".join(combo) for combo in itertools.product(*choices)]


class _Range(typing.NamedTuple):
    lo: int
    hi: int
    width: int

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1

    def values(self) -> list[str]:
        return [str(i).zfill(self.width) for i in range(self.lo, self.hi + 1)]


def _parse_range(body: str, name: str) -> _Range:
    m = _RANGE_BODY.match(body)
    if m is None:
        raise ValueError(
            f"bad name range {{{body}}} in {name!r}: expected {{FIRST..LAST}} with numbers, e.g. {{01..04}}"
        )
    a, b = m.group(1), m.group(2)
    if max(len(a), len(b)) > _RANGE_DIGITS:
        raise ValueError(f"bad name range {{{body}}} in {name!r}: at most {_RANGE_DIGITS} digits per bound")
    lo, hi = int(a), int(b)
    if lo > hi:
        raise ValueError(f"bad name range {{{body}}} in {name!r}: {a} is greater than {b}")
    padded = (len(a) > 1 and a.startswith("0")) or (len(b) > 1 and b.startswith("0"))
    return _Range(lo, hi, max(len(a), len(b)) if padded else 0)


def _expand_vms(inv: Inventory, indices: list[int] | None = None) -> None:
    """Range names -> one VmSpec per name; `indices`: each entry's position in the file (default: in order)."""
    expanded: list[VmSpec] = []
    for i, vm in zip(indices or range(len(inv.vms)), inv.vms, strict=True):
        line = inv._pos.get(("vms", i), (None, None))[0]
        names = expand_name(vm.name)  # already checked by _raw_range_errors
        if names == [vm.name]:
            vm._index, vm._line = i, line
            expanded.append(vm)
            continue
        for n in names:
            copy = vm.model_copy(update={"name": n}, deep=True)
            copy._index, copy._line = i, line
            expanded.append(copy)
    inv.vms = expanded


# ----------------------------------------------------------------------------------------------- load


def load_inventory(path: str | Path) -> Inventory:
    """Read, parse and schema-check an inventory; VM names come back range-expanded."""
    p = Path(path)
    file = str(path)
    data, pos, keypos = _read_yaml(p)
    if data is None:
        raise InventoryError("the inventory is empty (expected a mapping with apiVersion: vgpuctl/v1)", file, 1, 1)
    if not isinstance(data, dict):
        raise InventoryError(f"the inventory must be a mapping (got {type(data).__name__})", file, 1, 1)
    wrapped = _wrap_vgpus(data, pos, keypos)
    range_errors = _raw_range_errors(data, file, pos)
    try:
        inv = Inventory.model_validate(data)
    except ValidationError as exc:
        errors = _schema_errors(exc, file, pos, keypos, wrapped) + range_errors
        errors += _problems_of_valid_parts(data, file, pos, wrapped)  # one pass: the semantic problems too
        raise InventoryErrors(group_repeated(sorted(errors, key=_order))) from None
    if range_errors:
        errors = range_errors + _problems_of_valid_parts(data, file, pos, wrapped)
        raise InventoryErrors(group_repeated(sorted(errors, key=_order)))
    inv._source_path, inv._pos, inv._wrapped = file, pos, wrapped
    _place_hosts(inv, file, pos)
    _expand_vms(inv)
    return inv


# ---------------------------------------------------------------------- one pass: the valid parts of a file
#
# When the schema check fails, the semantic checks still run on what passed it, so that `validate` lists
# every problem of a file at once. An entry that fails on some keys is checked without them (a VM whose
# `vgpus` failed skips the vGPU checks); an entry that cannot stand without them is left out.


def _problems_of_valid_parts(data: dict[str, Any], file: str, pos: dict[Path_, Pos],
                             wrapped: set[Path_]) -> list[InventoryError]:
    sections: dict[str, Any] = {}
    for key in Inventory.model_fields:
        if key in ("api_version", "hosts", "vms"):
            continue
        alias = Inventory.model_fields[key].alias or key
        if alias in data:
            sections[key] = _valid_section(key, alias, data[alias])
    hosts, host_index = _valid_items(HostSpec, data.get("hosts"))
    vms, vm_index = _valid_items(VmSpec, data.get("vms"))
    named = [(vm, i) for vm, i in zip(vms, vm_index, strict=True) if _expands(vm.name)]
    inv = Inventory.model_construct(api_version=API_VERSION, hosts=hosts, vms=[vm for vm, _ in named], **sections)
    if isinstance(sections.get("guests"), _UnknownGroups):
        inv.guests = GuestsSpec(groups={vm.guest.group: GuestGroup() for vm, _ in named if vm.guest})
    inv._source_path, inv._pos, inv._wrapped = file, pos, wrapped
    _place_hosts(inv, file, pos, host_index)
    _expand_vms(inv, [i for _, i in named])
    return list(iter_problems(inv))


class _UnknownGroups(GuestsSpec):
    """`guests` failed so badly that its group names are unknown: no VM's group is judged."""


def _valid_section(key: str, alias: str, value: Any) -> Any:
    try:
        return getattr(Inventory.model_validate({"apiVersion": API_VERSION, alias: value}), key)
    except ValidationError:
        if key != "guests":
            return Inventory.model_fields[key].get_default(call_default_factory=True)
        groups = value.get("groups") if isinstance(value, dict) else None
        if isinstance(groups, dict):  # the groups exist even where their contents are wrong
            return GuestsSpec(groups={str(name): GuestGroup() for name in groups})
        return _UnknownGroups()


def _valid_items(model: type[_M], items: Any) -> tuple[list[_M], list[int]]:
    out: list[_M] = []
    indices: list[int] = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        entry = _valid_item(model, item)
        if entry is not None:
            out.append(entry)
            indices.append(i)
    return out, indices


def _valid_item(model: type[_M], item: Any) -> _M | None:
    if not isinstance(item, dict):
        return None
    try:
        return model.model_validate(item)
    except ValidationError as exc:
        bad = {str(e["loc"][0]) for e in exc.errors(include_url=False) if e["loc"]}
    rest = {k: v for k, v in item.items() if k not in bad}
    if not bad or len(rest) == len(item):
        return None
    try:
        entry = model.model_validate(rest)
    except ValidationError:
        return None
    if isinstance(entry, VmSpec) and "vgpus" in bad:
        entry._vgpus_invalid = True
    return entry


def _expands(name: str) -> bool:
    try:
        expand_name(name)
    except ValueError:
        return False
    return True


# ----------------------------------------------------------------------------- repeated errors, grouped

_INDEX = re.compile(r"\[\d+\]")
GROUP_AT = 3  # this many errors of one cause are shown as one


def group_repeated(errors: list[InventoryError]) -> list[InventoryError]:
    """Errors of one cause, once. The same error at one place (every VM of a name range) is kept once with
    the count; the same problem in GROUP_AT or more entries is its first occurrence plus the others' lines."""
    counted: dict[tuple[Any, ...], tuple[InventoryError, int]] = {}
    for e in errors:
        key = (e.file, e.line, e.col, e.message)
        first, n = counted.get(key, (e, 0))
        counted[key] = (first, n + 1)
    causes: dict[tuple[Any, ...], list[InventoryError]] = {}
    for e, n in counted.values():
        message = f"{e.message} (all {n} VMs of this entry's name range)" if n > 1 else e.message
        one = InventoryError(message, e.file, e.line, e.col)
        causes.setdefault((e.file, _INDEX.sub("[*]", e.message)), []).append(one)
    out: list[InventoryError] = []
    for same in causes.values():
        if len(same) < GROUP_AT:
            out += same
            continue
        first, rest = same[0], same[1:]
        lines = ", ".join(str(e.line) for e in rest[:8] if e.line) + (", ..." if len(rest) > 8 else "")
        hint = f" (the same in {len(rest)} more entries, at lines {lines}: one cause, fix them alike)"
        out.append(InventoryError(first.message + hint, first.file, first.line, first.col))
    return sorted(out, key=_order)


def _place_hosts(inv: Inventory, file: str, pos: dict[Path_, Pos], indices: list[int] | None = None) -> None:
    """Each host entry learns its file and the positions of its own keys (host merging names them)."""
    by_entry: dict[int, dict[Path_, Pos]] = {}
    for path, at in pos.items():
        if len(path) > 2 and path[0] == "hosts" and isinstance(path[1], int):
            by_entry.setdefault(path[1], {})[path[2:]] = at
    for i, h in zip(indices or range(len(inv.hosts)), inv.hosts, strict=True):
        h._index, h._line = i, pos.get(("hosts", i), (None, None))[0]
        h._file, h._pos = file, by_entry.get(i, {})


def _order(err: InventoryError) -> tuple[int, int]:
    return (err.line or 0, err.col or 0)


def _raw_range_errors(data: dict[str, Any], file: str, pos: dict[Path_, Pos]) -> list[InventoryError]:
    """Name-range mistakes, found before the schema check so that one pass reports them with the rest."""
    errors = []
    total = 0
    vms = data.get("vms")
    for i, vm in enumerate(vms if isinstance(vms, list) else []):
        name = vm.get("name") if isinstance(vm, dict) else None
        if not isinstance(name, str):
            total += 1
            continue
        line, col = _lookup(pos, ("vms", i, "name"))
        try:
            total += len(expand_name(name))
        except ValueError as exc:
            errors.append(InventoryError(f"vms[{i}].name: {exc}", file, line, col))
            continue
        if total > MAX_INVENTORY_VMS:
            errors.append(InventoryError(f"vms[{i}].name: the inventory names more than {MAX_INVENTORY_VMS} VMs "
                                         "(split it into several files)", file, line, col))
            break
    return errors


def load_inventory_text(text: str, name: str = "<inventory>") -> Inventory:
    """Like load_inventory, from a string (tests, stdin)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "inventory.yaml"
        f.write_text(text, encoding="utf-8")
        try:
            inv = load_inventory(f)
        except InventoryErrors as exc:
            raise InventoryErrors([_rename(e, name) for e in exc.errors]) from None
        except InventoryError as exc:
            raise _rename(exc, name) from None
    inv._source_path = name
    for h in inv.hosts:
        h._file = name
    return inv


def _rename(err: InventoryError, name: str) -> InventoryError:
    return InventoryError(err.message, name, err.line, err.col)


# ------------------------------------------------------------------------------------ semantic checks


def validate(inv: Inventory) -> None:
    """Semantic checks that need no vCenter; raises InventoryErrors listing every problem."""
    errors = list(iter_problems(inv))
    if errors:
        raise InventoryErrors(group_repeated(errors))


def iter_problems(inv: Inventory) -> Iterator[InventoryError]:
    yield from _check_vms(inv)
    yield from _check_hosts(inv)
    yield from class_problems(inv)  # VM classes and namespaces: duplicates, unknown references


def _folder_key(folder: str | None) -> str | None:
    """`/ml/train/` and `ml/train` name one folder; no folder stays None (not the root)."""
    return None if folder is None else "/".join(part for part in folder.split("/") if part)


def _check_vms(inv: Inventory) -> Iterator[InventoryError]:
    seen: dict[tuple[str | None, str], VmSpec] = {}  # a VM is its folder and its name
    groups = set(inv.guests.groups)
    for vm in inv.vms:
        base: Path_ = ("vms", vm._index)
        key = (_folder_key(vm.folder), vm.name)
        if key in seen:
            first = seen[key]
            where = f" (first defined at line {first._line})" if first._line else ""
            in_folder = f" in folder {vm.folder!r}" if vm.folder is not None else ""
            yield inv.error((*base, "name"), f"duplicate VM name {vm.name!r}{in_folder}{where}")
            continue
        seen[key] = vm
        if not vm._vgpus_invalid:
            yield from _check_vgpus(inv, vm, base)
        if vm.guest is not None and vm.guest.group not in groups:
            known = ", ".join(sorted(groups)) or "none defined"
            yield inv.error((*base, "guest", "group"),
                            f"unknown guest group {vm.guest.group!r} (guests.groups: {known})")
        if vm.cluster is not None and vm.host is not None:
            yield inv.error(base, "set 'cluster' or 'host', not both")


def _check_vgpus(inv: Inventory, vm: VmSpec, base: Path_) -> Iterator[InventoryError]:
    parsed = []
    for j, spec in enumerate(vm.vgpus):
        try:
            parsed.append(parse_profile(spec.profile))
        except ProfileError:
            if not is_host_spelling(spec.profile):  # else the plan asks the host (and names what it offers)
                yield inv.error((*base, "vgpus", j, "profile"),
                                f"not a vGPU profile name {spec.profile!r} (expected {PROFILE_GRAMMAR})")
    if len(parsed) != len(vm.vgpus):
        return
    total = vm.vgpu_count
    if total > MAX_VGPUS_PER_VM:
        yield inv.error((*base, "vgpus"), f"{total} vGPUs in total; a VM holds at most {MAX_VGPUS_PER_VM}")
    problem = mixing_problem(parsed)
    if problem:
        yield inv.error((*base, "vgpus"), problem)
    if vm.nvlink == "required" and not vm.manages_vgpus:
        yield inv.error((*base, "nvlink"), "NVLink needs the VM's 'vgpus' listed (its device group is made of them)")
    elif vm.nvlink == "required":
        if total < 2:
            yield inv.error((*base, "nvlink"), "NVLink needs at least 2 vGPUs in the VM")
        for p in parsed:
            board = BOARDS.get(p.board)
            if p.is_mig or p.series != "c":
                yield inv.error((*base, "nvlink"),
                                f"NVLink P2P works only with time-sliced C-series vGPUs ({p.name} is not one)")
                break
            if board is not None and p.fb_gb != board.fb_gb:
                yield inv.error((*base, "nvlink"), f"NVLink P2P needs vGPUs that take a whole GPU "
                                f"({p.name} has {p.fb_gb} GB of a {board.fb_gb} GB {board.model})")
                break
            if board is not None and not board.nvlink_capable:
                yield inv.error((*base, "nvlink"), f"{board.model} GPUs have no NVLink")
                break


def _check_hosts(inv: Inventory) -> Iterator[InventoryError]:
    seen: set[str] = set()
    for i, h in enumerate(inv.hosts):
        base: Path_ = ("hosts", i)
        key = h.target
        if key in seen:
            yield inv.error(base, f"{key} is configured twice")
        seen.add(key)
        for path, message in host_problems(h):
            yield inv.error((*base, *path), message)


def host_problems(h: HostSpec) -> list[tuple[Path_, str]]:
    """The rules one host entry, or a host's merged settings, must meet beyond the schema (each setting's own,
    vgpuctl.hosts.settings); key paths relative to the entry."""
    return [problem for setting in SETTINGS for problem in setting.problems(h)]
