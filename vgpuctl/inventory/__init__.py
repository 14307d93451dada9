"""The inventory file (apiVersion vgpuctl/v1), in parts:

- `schema`: the pydantic models (every field is documented in inventory.example.yaml);
- `yamlpos`: YAML read into plain data with the position of every key, and located schema errors
  (FILE:LINE:COL), shared with the other file kinds (capacity demand, experiments);
- `ranges`: name ranges (`train-{01..04}`) and their caps;
- `compose`: an inventory's `include:`d files, its `overlays:` (--env) and values files (--values) merged into one
  document, each part still knowing its file (`yamlpos.Sources`); `merged_yaml_of` writes it out;
- `load`: `load_inventory(path, composition)` reads (composes), schema-checks and range-expands a file, raising
  InventoryErrors with every schema and semantic problem at once;
- `checks`: the semantic checks that need no vCenter (`validate(inv)`);
- `merge`: each host's settings from its cluster's entry and its own, with where each value came from.

This module only re-exports the names the rest of vgpuctl uses.
"""

from vgpuctl.inventory.checks import GROUP_AT, group_repeated, host_problems, iter_problems, validate
from vgpuctl.inventory.load import load_inventory, load_inventory_text
from vgpuctl.inventory.merge import MergedHost, Origin, merge_host, merge_hosts
from vgpuctl.inventory.ranges import MAX_INVENTORY_VMS, MAX_RANGE_NAMES, expand_name
from vgpuctl.inventory.schema import (
    API_VERSION,
    MAX_VM_NAME,
    GuestConnection,
    GuestGroup,
    GuestRef,
    GuestsSpec,
    HostEntry,
    HostSpec,
    Inventory,
    MaintenanceSpec,
    SshSpec,
    StrictModel,
    TlsSpec,
    VcenterSpec,
    VgpuSpec,
    VmSpec,
    vm_name_problem,
)
from vgpuctl.inventory.yamlpos import InventoryErrorLocation, KeyPath, Pos, format_path

__all__ = [
    "API_VERSION",
    "GROUP_AT",
    "MAX_INVENTORY_VMS",
    "MAX_RANGE_NAMES",
    "MAX_VM_NAME",
    "GuestConnection",
    "GuestGroup",
    "GuestRef",
    "GuestsSpec",
    "HostEntry",
    "HostSpec",
    "Inventory",
    "InventoryErrorLocation",
    "KeyPath",
    "MaintenanceSpec",
    "MergedHost",
    "Origin",
    "Pos",
    "SshSpec",
    "StrictModel",
    "TlsSpec",
    "VcenterSpec",
    "VgpuSpec",
    "VmSpec",
    "expand_name",
    "format_path",
    "group_repeated",
    "host_problems",
    "iter_problems",
    "load_inventory",
    "load_inventory_text",
    "merge_host",
    "merge_hosts",
    "validate",
    "vm_name_problem",
]
