"""Composed inventories: `include:` of other inventory files, an `overlays:` section chosen with `--env NAME`, and
values files (`--values FILE`), merged into one inventory whose every value still knows its FILE:LINE:COL.

The rules (README, "Composed inventories"):

- `include: [PATH, ...]` merges other inventory files in, depth first, before the including file's own content.
  A relative PATH is read from the including file's folder; it must stay in the top inventory's folder tree (links
  resolved) unless the command is given --allow-include-outside. A cycle is an error naming its chain; a file
  included twice is merged once. At most MAX_INCLUDE_DEPTH files deep, MAX_INVENTORY_FILES files and
  filelimits.MAX_FILE_BYTES bytes in all (values files counted); included files must be regular files.
- Entries of the named lists (hosts by `cluster` or `name`; vms by `name`, and `folder` where names repeat;
  vm_classes and namespaces by `name`; a fleet's entries also by the `vcenter` they name) and guest groups
  (by their key) combine by name: one defined in two files is an error naming both places. Mappings merge key by
  key. A setting (a scalar, or a list that is not a named list) set by the including file replaces its includes'
  value; two files included side by side may not set one setting two ways.
- An overlay (`overlays.NAME`, or a values file) changes the merged inventory: each entry it lists names an entry
  that exists (an error at the overlay's FILE:LINE:COL when none matches; in a fleet, an entry of a name several
  vCenters use says which with `vcenter`) and its keys are merged into it
  (mappings key by key, everything else replaced whole: `vgpus` too, a list even where written as one mapping);
  `add:` holds new entries. The overlay of --env goes
  first, then the values files in the order given.

Everything here is plain data: names never become structure, no value is templated.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any

from vgpuctl import filelimits, yamlout
from vgpuctl.errors import InventoryError, InventoryErrors, UsageError
from vgpuctl.inventory.checks import error_order
from vgpuctl.inventory.ranges import expand_name
from vgpuctl.inventory.schema import API_VERSION, Inventory, entry_vcenter
from vgpuctl.inventory.yamlpos import KeyPath, PositionedYaml, Sources, read_yaml, read_yaml_text
from vgpuctl.lazyclass import dataclass

INCLUDE, OVERLAYS, ADD, API_KEY = "include", "overlays", "add", "apiVersion"
MAX_INCLUDE_DEPTH = 8  # the top inventory, the files it includes, theirs, ...: at most this many files deep
MAX_INVENTORY_FILES = 100  # files one inventory is read from: itself, its includes and the values files
TOO_LARGE = (f"the inventory's files together are larger than {filelimits.MAX_FILE_BYTES // (1024 * 1024)} MiB, "
             "the most vgpuctl reads for one inventory")
GROUPS: KeyPath = ("guests", "groups")  # guest groups: a mapping whose keys are the groups' names


@dataclass(frozen=True)
class Composition:
    """What the command line adds to an inventory file: values files, an overlay, and whether includes may leave
    the inventory's folder tree."""

    values: tuple[Path, ...] = ()
    env: str | None = None
    allow_include_outside: bool = False


@dataclass
class Composed:
    """An inventory's data as merged, where each part of it is written, and the files it was read from."""

    data: Any
    sources: Sources
    files: list[str]  # every file read: the inventory first, then its includes and the values files
    env: str | None = None

    @property
    def merged(self) -> bool:
        """Whether the data is more than the inventory file's own: files included, an overlay or values applied."""
        return len(self.files) > 1 or self.env is not None


# ------------------------------------------------------------------------------------------- named entries


def _named(entry: dict[str, Any]) -> Hashable | None:
    name = entry.get("name")
    return name if isinstance(name, str) else None


def _host(entry: dict[str, Any]) -> Hashable | None:
    cluster, name = entry.get("cluster"), entry.get("name")
    if isinstance(cluster, str) and name is None:
        return ("cluster", cluster)
    if isinstance(name, str) and cluster is None:
        return ("name", name)
    return None


def _folder_key(folder: Any) -> Any:
    """`/ml/train/` and `ml/train` name one folder (as the checks read them)."""
    return "/".join(p for p in folder.split("/") if p) if isinstance(folder, str) else folder


# a named list's entries: the name they are matched by, and the key a duplicate is told by (a VM is its folder
# and its name, as in one file)
NAMED_LISTS: dict[str, Callable[[dict[str, Any]], Hashable | None]] = {
    "hosts": _host, "vms": _named, "vm_classes": _named, "namespaces": _named,
}  # fmt: skip
_KINDS = {"hosts": "host entry", "vms": "VM", "vm_classes": "VM class", "namespaces": "namespace"}


def _label(section: str, name: Hashable) -> str:
    if section == "hosts" and isinstance(name, tuple):
        return f"{'cluster' if name[0] == 'cluster' else 'host'} {name[1]!r}"
    return f"{_KINDS.get(section, section)} {name!r}"


def _name_key(section: str, name: Hashable) -> str:
    """The key of an entry that holds its name."""
    return str(name[0]) if section == "hosts" and isinstance(name, tuple) else "name"


def _duplicate_key(section: str, entry: dict[str, Any], name: Hashable) -> Hashable:
    """In a fleet the vCenter an entry names is part of it: one name may be used in each vCenter."""
    vcenter = entry.get("vcenter") if section in _IN_A_VCENTER else None
    return (vcenter, _folder_key(entry.get("folder")), name) if section == "vms" else (vcenter, name)


_IN_A_VCENTER = frozenset({"hosts", "vms", "vm_classes", "namespaces"})  # entries name their fleet's `vcenter`


# ------------------------------------------------------------------------------------------------ parts


@dataclass(eq=False)
class _Part:
    """One file (or an overlay in it) as it takes part in the merge."""

    doc: PositionedYaml
    opened: Path | None = None  # the path it was opened by: its includes are read from its folder
    chain: tuple[Path, ...] = ()  # real paths from the top inventory down to this file
    names: tuple[str, ...] = ()  # the same, as shown

    def error(self, at: KeyPath, message: str, *, key: bool = False) -> InventoryError:
        return Sources(self.doc).error(at, message, key=key)

    def place(self, at: KeyPath) -> str:
        line, col = self.doc.where(at)
        return f"{self.doc.file}:{line}:{col}" if line is not None else self.doc.file

    def below(self, other: _Part) -> bool:
        """Whether this file was included, directly or not, by `other`."""
        return self is not other and len(other.chain) < len(self.chain) and self.chain[:len(other.chain)] == other.chain


@dataclass
class _Defined:
    index: int  # in the merged list
    part: _Part
    at: KeyPath  # the entry in its part


# ------------------------------------------------------------------------------------------------- entry


def compose_file(path: str | Path, composition: Composition) -> Composed:
    """The inventory at `path` with its includes, the overlay of `composition.env` and its values files merged;
    InventoryError(s) located at FILE:LINE:COL when they cannot be."""
    path = Path(path)
    return _compose(_Part(read_yaml(path), path), composition)


def compose_text(doc: PositionedYaml) -> Composed:
    """An inventory read from text (a saved plan, a test): it includes no files; its overlays are not applied."""
    return _compose(_Part(doc), Composition())


def _compose(top: _Part, composition: Composition) -> Composed:
    data = top.doc.data
    if not isinstance(data, dict):  # the loader says what is wrong with it
        return Composed(data, Sources(top.doc), [top.doc.file])
    composer = _Composer(top, composition)
    if INCLUDE not in data and composition.env is None and not composition.values:
        composer.errors += _mistyped_keys(top)
        composer.collect_overlays(top, data.get(OVERLAYS))  # checked, not applied
        composer.raise_errors()
        plain = {k: v for k, v in data.items() if k != OVERLAYS} if OVERLAYS in data else data
        return Composed(plain, Sources(top.doc), [top.doc.file])
    return composer.run()


class _Composer:
    def __init__(self, top: _Part, composition: Composition):
        self.top, self.composition = top, composition
        self.data: dict[str, Any] = {}
        self.sources = Sources(top.doc)
        self.files = [top.doc.file]
        self.used = top.doc.size
        self.root: Path | None = None
        self.done: set[Path] = set()  # real paths of the files merged: one included twice is merged once
        self.parts: dict[int, _Part] = {id(top.doc): top}  # by document
        self.first: dict[tuple[str, Hashable], _Defined] = {}  # named entries, where each was defined first
        self.by_name: dict[str, dict[Hashable, list[int]]] = {section: {} for section in NAMED_LISTS}
        self.overlays: dict[str, tuple[_Part, KeyPath, Any]] = {}
        self.errors: list[InventoryError] = []
        if top.opened is not None:  # its includes stay in the tree of the folder it was opened in
            real = top.opened.resolve()
            self.root = top.opened.parent.resolve()
            top.chain, top.names = (real,), (top.doc.file,)
            self.done.add(real)

    def run(self) -> Composed:
        self.merge_part(self.top)
        self.raise_errors()
        self.apply_env()
        for path in self.composition.values:
            part = self.read_values(path)
            if part.doc.data is not None:
                self.apply_overlay(part, (), part.doc.data)
        self.raise_errors()
        return Composed(self.data, self.sources, self.files, self.composition.env)

    def raise_errors(self) -> None:
        if self.errors:
            raise InventoryErrors(sorted(self.errors, key=error_order))

    # ------------------------------------------------------------------------------------------ includes

    def merge_part(self, part: _Part) -> None:
        data = part.doc.data
        if data is None:
            return  # an empty file adds nothing
        if not isinstance(data, dict):
            raise part.error((), f"an included inventory must be a mapping of inventory sections (got "
                             f"{type(data).__name__})")
        for child in self.includes(part):
            self.merge_part(child)
        self.merge_own(part)

    def includes(self, part: _Part) -> Iterator[_Part]:
        items = part.doc.data.get(INCLUDE)
        if items is None:
            return
        if part.opened is None:
            raise part.error((INCLUDE,), "an inventory read from text (a saved plan) includes no files", key=True)
        if not isinstance(items, list):
            raise part.error((INCLUDE,), f"must be a list of file paths, e.g. [hosts.yaml] (got "
                             f"{type(items).__name__})")
        for j, item in enumerate(items):
            child = self.open_include(part, (INCLUDE, j), item)
            if child is not None:
                yield child

    def open_include(self, part: _Part, at: KeyPath, item: Any) -> _Part | None:
        """The included file, read within the limits; None when it was merged already."""
        assert part.opened is not None and self.root is not None
        if not isinstance(item, str) or not item.strip() or not item.isprintable():
            raise part.error(at, f"must be the path of an inventory file (got {item!r})")  # no control characters
        opened = Path(item) if Path(item).is_absolute() else part.opened.parent / item
        shown = os.path.normpath(opened)
        try:
            real = opened.resolve(strict=True)
        except FileNotFoundError:
            raise part.error(at, f"included file {shown} not found") from None
        except (OSError, RuntimeError, ValueError) as exc:  # a loop of links (RuntimeError before Python 3.13), a NUL
            raise part.error(at, f"cannot include {shown}: {getattr(exc, 'strerror', None) or exc}") from None
        if real in part.chain:
            raise part.error(at, f"include cycle: {' -> '.join([*part.names, shown])}")
        if real in self.done:
            return None
        self.check_include(part, at, shown, real)
        doc = read_yaml_text(self.read_include(part, at, shown, real), shown)
        child = _Part(doc, opened, (*part.chain, real), (*part.names, shown))
        self.done.add(real)
        self.files.append(shown)
        self.parts[id(doc)] = child
        return child

    def check_include(self, part: _Part, at: KeyPath, shown: str, real: Path) -> None:
        assert self.root is not None
        if not self.composition.allow_include_outside and not real.is_relative_to(self.root):
            link = f" (it resolves to {real})" if os.path.normpath(os.path.abspath(shown)) != str(real) else ""
            raise part.error(at, f"{shown} is outside the inventory's folder {self.root}{link}: an inventory "
                             "includes files of its own folder tree unless --allow-include-outside is given")
        if len(part.chain) >= MAX_INCLUDE_DEPTH:
            raise part.error(at, f"includes nest more than {MAX_INCLUDE_DEPTH} files deep "
                             f"({' -> '.join([*part.names, shown])})")
        if len(self.files) >= MAX_INVENTORY_FILES:
            raise part.error(at, f"the inventory is read from more than {MAX_INVENTORY_FILES} files")

    def read_include(self, part: _Part, at: KeyPath, shown: str, real: Path) -> str:
        try:
            raw = filelimits.read_regular_bytes(real, max(filelimits.MAX_FILE_BYTES - self.used, 0))
            text = filelimits.universal_newlines(raw.decode("utf-8"))
        except filelimits.FileTooLarge:
            raise part.error(at, f"cannot include {shown}: {TOO_LARGE}") from None
        except filelimits.NotAFile as exc:
            raise part.error(at, f"cannot include {shown}: {exc}") from None
        except UnicodeDecodeError:
            raise part.error(at, f"cannot include {shown}: not UTF-8 text") from None
        except OSError as exc:
            raise part.error(at, f"cannot include {shown}: {exc.strerror or exc}") from None
        self.used += len(raw)
        return text

    # ------------------------------------------------------------------------------------------- merging

    def merge_own(self, part: _Part) -> None:
        self.errors += _mistyped_keys(part)
        for key, value in part.doc.data.items():
            if key == INCLUDE:
                continue
            if key == OVERLAYS:
                self.collect_overlays(part, value)
            elif key == API_KEY and part is not self.top:
                if value != API_VERSION:
                    self.errors.append(part.error((key,), f"must be {API_VERSION!r} (got {value!r})"))
            elif key in NAMED_LISTS:
                self.merge_entries(part, key, value, (key,))
            else:
                self.merge_value(self.data, (), key, value, part, (key,))

    def merge_value(self, container: dict[str, Any], path: KeyPath, key: str, value: Any, part: _Part,
                    at: KeyPath) -> None:
        """An included or including file's value at `path + (key,)`: mappings key by key, guest groups by name,
        a setting replacing its includes' value."""
        here = (*path, key)
        if key not in container:
            container[key] = value
            self.sources.graft(here, part.doc, at)
            return
        old = container[key]
        if here == GROUPS and isinstance(old, dict) and isinstance(value, dict):
            for name, group in value.items():
                if name in old:
                    first = self.part_at((*here, name))
                    self.errors.append(part.error((*at, name), f"guest group {name!r} is defined twice: also at "
                                                  f"{first.place(self.sources.local((*here, name))[1])}"
                                                  f"{_ONE_PLACE}", key=True))
                    continue
                old[name] = group
                self.sources.graft((*here, name), part.doc, (*at, name))
        elif isinstance(old, dict) and isinstance(value, dict):
            for k, v in value.items():
                self.merge_value(old, here, k, v, part, (*at, k))
        else:
            self.settle(container, key, value, part, at, here)

    def settle(self, container: dict[str, Any], key: str, value: Any, part: _Part, at: KeyPath,
               here: KeyPath) -> None:
        """A setting two files set: the including file's value wins; files side by side must agree."""
        before = self.part_at(here)
        if before.below(part):
            container[key] = value
            self.sources.graft(here, part.doc, at)
        elif container[key] != value:
            self.errors.append(part.error(at, f"also set at {before.place(self.sources.local(here)[1])} to another "
                                          "value: files included side by side may not set one setting two ways "
                                          "(set it in the file that includes them, or in an overlay)"))

    def part_at(self, path: KeyPath) -> _Part:
        graft = self.sources.local(path)[0]
        assert graft is not None
        return self.parts.get(id(graft.doc), self.top)

    def merge_entries(self, part: _Part, section: str, items: Any, at: KeyPath) -> None:
        """A named list's entries appended; a name defined in another file too is an error naming both."""
        if items is not None and not isinstance(items, list):
            self.errors.append(part.error(at, f"must be a list (got {type(items).__name__})"))
            return
        target = self.data.get(section)
        if target is None:
            target = self.data[section] = []
            self.sources.graft((section,), part.doc, at)
        for j, entry in enumerate(items or []):
            k = len(target)
            target.append(entry)
            self.sources.graft((section, k), part.doc, (*at, j))
            if isinstance(entry, dict):
                self.index_entry(section, k, entry, part, (*at, j))

    def index_entry(self, section: str, k: int, entry: dict[str, Any], part: _Part, at: KeyPath) -> None:
        name = NAMED_LISTS[section](entry)
        if name is None:
            return  # the schema says what is wrong with it
        self.by_name[section].setdefault(name, []).append(k)
        key = (section, _duplicate_key(section, entry, name))
        first = self.first.get(key)
        if first is None:
            self.first[key] = _Defined(k, part, at)
        elif first.part is not part:  # one file's own repeats: the checks report them, as for any inventory
            where = first.part.place((*first.at, _name_key(section, name)))
            self.errors.append(part.error((*at, _name_key(section, name)),
                                          f"{_label(section, name)} is defined twice: also at {where}{_ONE_PLACE}"))

    # ------------------------------------------------------------------------------------------- overlays

    def collect_overlays(self, part: _Part, overlays: Any) -> None:
        if overlays is None:
            return
        if not isinstance(overlays, dict):
            self.errors.append(part.error((OVERLAYS,), "must be a mapping of environment names to overlays (got "
                                          f"{type(overlays).__name__})"))
            return
        for env, overlay in overlays.items():
            at: KeyPath = (OVERLAYS, env)
            if env in self.overlays:
                first, first_at, _ = self.overlays[env]
                self.errors.append(part.error(at, f"overlay {env!r} is defined twice: also at "
                                              f"{first.place(first_at)}", key=True))
            elif not isinstance(overlay, dict):
                self.errors.append(part.error(at, f"an overlay is a mapping of inventory sections (got "
                                              f"{type(overlay).__name__})"))
            else:
                self.overlays[env] = (part, at, overlay)
                self.errors += _misplaced_keys(part, at, overlay)

    def apply_env(self) -> None:
        env = self.composition.env
        if env is None:
            return
        if env not in self.overlays:
            known = _listed(self.overlays) or "the inventory has none"
            message = f"no overlay named {env!r} for --env (overlays: {known})"
            if OVERLAYS in self.top.doc.data:
                raise self.top.error((OVERLAYS,), message, key=True)
            raise InventoryError(message, self.top.doc.file, 1, 1)
        part, at, overlay = self.overlays[env]
        self.apply_overlay(_Part(part.doc), at, overlay)

    def read_values(self, path: Path) -> _Part:
        """A values file (--values), read like an included file: a regular file, within the limits."""
        if len(self.files) >= MAX_INVENTORY_FILES:
            raise UsageError(f"--values {path}: the inventory is read from more than {MAX_INVENTORY_FILES} files")
        try:
            raw = filelimits.read_regular_bytes(path, max(filelimits.MAX_FILE_BYTES - self.used, 0))
            text = filelimits.universal_newlines(raw.decode("utf-8"))
        except FileNotFoundError:
            raise UsageError(f"--values {path}: no such file") from None
        except filelimits.FileTooLarge:
            raise UsageError(f"--values {path}: {TOO_LARGE}") from None
        except filelimits.NotAFile as exc:
            raise UsageError(f"--values {path}: {exc}") from None
        except UnicodeDecodeError:
            raise UsageError(f"--values {path}: not UTF-8 text") from None
        except OSError as exc:
            raise UsageError(f"--values {path}: {exc.strerror or exc}") from None
        self.used += len(raw)
        self.files.append(str(path))
        part = _Part(read_yaml_text(text, str(path)))
        if part.doc.data is not None and not isinstance(part.doc.data, dict):
            raise part.error((), "a values file is a mapping of inventory sections, like an overlay (got "
                             f"{type(part.doc.data).__name__})")
        errors = _misplaced_keys(part, (), part.doc.data or {})
        if errors:
            raise InventoryErrors(errors)
        return part

    def apply_overlay(self, part: _Part, at: KeyPath, overlay: dict[str, Any]) -> None:
        """An overlay's changes to the merged inventory: `add:` first, then each section."""
        if ADD in overlay:
            self.add(part, (*at, ADD), overlay[ADD])
        for key, value in overlay.items():
            if key in (ADD, API_KEY, INCLUDE, OVERLAYS):
                continue  # refused by _misplaced_keys
            if key in NAMED_LISTS:
                self.change_entries(part, key, value, (*at, key))
            else:
                self.overlay_value(self.data, (), key, value, part, (*at, key))

    def overlay_value(self, container: dict[str, Any], path: KeyPath, key: str, value: Any, part: _Part,
                      at: KeyPath) -> None:
        """An overlay's value at `path + (key,)`: mappings merged key by key, guest groups matched by name,
        everything else replaced whole."""
        here = (*path, key)
        old = container.get(key)
        if len(here) == 3 and key in _LISTS_WRITTEN_AS_ONE:
            container[key] = value  # a list, even where written as its one item's mapping: replaced whole
            self.sources.graft(here, part.doc, at)
        elif here == GROUPS:
            self.change_groups(container, value, part, at)
        elif isinstance(value, dict) and (isinstance(old, dict) or (old is None and GROUPS[:len(here)] == here)):
            if not isinstance(old, dict):
                old = container[key] = {}
                self.sources.graft(here, part.doc, at)
            for k, v in value.items():
                self.overlay_value(old, here, k, v, part, (*at, k))
        else:
            container[key] = value
            self.sources.graft(here, part.doc, at)

    def change_groups(self, guests: dict[str, Any], value: Any, part: _Part, at: KeyPath) -> None:
        groups = guests.get("groups")
        if not isinstance(value, dict):
            self.errors.append(part.error(at, "an overlay changes guest groups by name: a mapping of group names "
                                          "(new groups go under add:)"))
            return
        for name, change in value.items():
            if not isinstance(groups, dict) or name not in groups:
                known = _listed(groups) if isinstance(groups, dict) and groups else "none"
                self.errors.append(part.error((*at, name), f"guest group {name!r} matches no group of the inventory "
                                              f"(groups: {known}){_TO_ADD}", key=True))
                continue
            self.overlay_value(groups, GROUPS, name, change, part, (*at, name))

    def change_entries(self, part: _Part, section: str, items: Any, at: KeyPath) -> None:
        """Each entry of the overlay merged into the entry of its name."""
        target = self.data.get(section)
        if not isinstance(items, list):
            self.errors.append(part.error(at, "must be a list of entries, each named like the entry it changes "
                                          f"(got {type(items).__name__})"))
            return
        for j, entry in enumerate(items):
            here = (*at, j)
            if not isinstance(entry, dict):
                self.errors.append(part.error(here, f"must be a mapping (got {type(entry).__name__})"))
                continue
            for k in self.matches(part, section, entry, here):
                name_keys = {"name", "cluster"} if section == "hosts" else {"name"}
                for key, value in entry.items():
                    if key not in name_keys:
                        assert isinstance(target, list)
                        self.overlay_value(target[k], (section, k), key, value, part, (*here, key))

    def matches(self, part: _Part, section: str, entry: dict[str, Any], at: KeyPath) -> list[int]:
        """The merged entries an overlay's entry changes (an error when none)."""
        name = NAMED_LISTS[section](entry)
        if name is None:
            how = "its 'cluster' or its 'name' (one of them)" if section == "hosts" else "its 'name'"
            self.errors.append(part.error(at, f"an overlay names the entry it changes by {how}"))
            return []
        found = self.by_name[section].get(name, [])
        if section in _IN_A_VCENTER and found:
            mine = self.in_vcenter(part, section, name, entry, found, at)
            if mine is None:
                return []
            found = mine
        if section == "vms" and len(found) > 1 and "folder" in entry:
            target = self.data["vms"]
            found = [k for k in found if _folder_key(target[k].get("folder")) == _folder_key(entry["folder"])]
        if section == "vms" and len(found) > 1:
            self.errors.append(part.error((*at, "name"), f"{_label(section, name)} names {len(found)} entries (in "
                                          "different folders): give 'folder' to say which"))
            return []
        if not found:
            hint = self.range_hint(name) if section == "vms" else ""
            self.errors.append(part.error((*at, _name_key(section, name)), f"{_label(section, name)} matches no "
                                          f"entry of the inventory{hint}{_TO_ADD}"))
        return found

    def in_vcenter(self, part: _Part, section: str, name: Hashable, entry: dict[str, Any], found: list[int],
                   at: KeyPath) -> list[int] | None:
        """In a fleet, the entries of the vCenter the overlay's entry names (`vcenter`), or of the only vCenter
        that has entries of this name; None (an error) for an entry of a name several vCenters use that does not
        say which."""
        target = self.data[section]
        of = {k: self.vcenter_of(target[k]) for k in found}
        vcenters = {v for v in of.values() if v is not None}
        if "vcenter" in entry:
            mine = [k for k in found if of[k] == entry["vcenter"]]
            if not mine:
                self.errors.append(part.error((*at, "vcenter"), f"{_label(section, name)} has no entry in vCenter "
                                              f"{entry['vcenter']!r} (its entries: {_listed(vcenters) or 'none'})"))
                return None
            return mine
        if len(vcenters) > 1:
            self.errors.append(part.error((*at, _name_key(section, name)), f"{_label(section, name)} names entries "
                                          f"of {len(vcenters)} vCenters ({_listed(vcenters)}): give 'vcenter' to "
                                          "say which"))
            return None
        return found

    def vcenter_of(self, entry: dict[str, Any]) -> str | None:
        """The fleet's vCenter of a merged entry, by the inventory's rule (`entry_vcenter`) on the merged data
        (values of the wrong type count as absent: the schema reports them)."""
        listed = self.data.get("vcenters")
        names = [v.get("name") for v in listed if isinstance(v, dict)] if isinstance(listed, list) else []
        named, default = entry.get("vcenter"), self.data.get("default_vcenter")
        return entry_vcenter(named if isinstance(named, str) else None, [n for n in names if isinstance(n, str)],
                             default if isinstance(default, str) else None)

    def range_hint(self, name: Hashable) -> str:
        for raw, indices in self.by_name["vms"].items():
            if isinstance(raw, str) and "{" in raw and name in _names_of(raw):
                where = self.sources.where(("vms", indices[0], "name"))
                return (f" ({name!r} is one name of the range {raw!r} at {where[0]}:{where[2]}:{where[3]}: change "
                        f"the whole entry, name: {raw!r})")
        return ""

    def add(self, part: _Part, at: KeyPath, value: Any) -> None:
        """`add:`: new entries of the named lists and new guest groups."""
        if not isinstance(value, dict):
            self.errors.append(part.error(at, "must be a mapping of sections to the entries they add (got "
                                          f"{type(value).__name__})"))
            return
        for key, items in value.items():
            here = (*at, key)
            if key in NAMED_LISTS:
                self.merge_entries(part, key, items, here)
            elif key == GROUPS[0] and isinstance(items, dict) and set(items) <= {GROUPS[1]}:
                self.merge_value(self.data, (), key, items, part, here)
            else:
                self.errors.append(part.error(here, f"add: takes new entries of {', '.join(NAMED_LISTS)} and new "
                                              "guest groups (guests: {groups: ...}); settings are changed outside "
                                              "add:", key=True))


_LISTS_WRITTEN_AS_ONE = frozenset({"vgpus"})  # an entry's key whose list may be written as its one item
_ONE_PLACE = " (an entry is defined in one file; an overlay or values file changes it)"
_TO_ADD = ": an overlay changes the entries it names; to add one, list it under add:"


def _listed(names: Iterable[Any]) -> str:
    """Names from a file, quoted (a name holding a line break stays on the error's one line)."""
    return ", ".join(repr(name) for name in sorted(names, key=str))


def _names_of(raw: str) -> list[str]:
    try:
        return expand_name(raw)
    except ValueError:
        return []


def _mistyped_keys(part: _Part) -> list[InventoryError]:
    """`includes:` or `overlay:`: a key the schema does not know that is close to one of the composing keys (the
    schema's own message would not name them)."""
    known = {info.alias or name for name, info in Inventory.model_fields.items()}
    out = []
    for key in part.doc.data:
        close = difflib.get_close_matches(key, (INCLUDE, OVERLAYS), n=1, cutoff=0.75) if key not in known else []
        if close and key not in (INCLUDE, OVERLAYS):
            out.append(Sources(part.doc).error((key,), f"unknown key {key!r} (did you mean {close[0]!r}?)", key=True,
                                               drop=1))
    return out


def _misplaced_keys(part: _Part, at: KeyPath, overlay: dict[str, Any]) -> list[InventoryError]:
    return [part.error((*at, key), f"an overlay or values file cannot set {key!r}", key=True)
            for key in overlay if key in (API_KEY, INCLUDE, OVERLAYS)]


# ------------------------------------------------------------------------------------------------ output


def merged_yaml_of(inventory: Inventory) -> str:
    """The inventory as merged (merged_yaml), for an inventory read by the loader."""
    composed = inventory._composed
    if not isinstance(composed, Composed):
        raise ValueError("an inventory made in code has no merged text")
    return merged_yaml(composed)


def merged_yaml(composed: Composed) -> str:
    """The merged inventory as YAML (through the emitter): `vgpuctl validate -f` reads it, and it plans the same
    as the files it was merged from (relative paths in it are read from the top inventory's folder, as theirs)."""
    order = [info.alias or name for name, info in Inventory.model_fields.items()]
    data = composed.data if isinstance(composed.data, dict) else {}
    ordered = {key: data[key] for key in order if key in data} | {k: v for k, v in data.items() if k not in order}
    head = [f"The inventory {composed.files[0]} as vgpuctl merged it"]
    if len(composed.files) > 1:
        head.append(f"from: {', '.join(composed.files)}")
    if composed.env is not None:
        head.append(f"with the overlay {composed.env} (--env)")
    return "".join(yamlout.comment(line) for line in head) + yamlout.dump(ordered)

