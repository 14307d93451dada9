"""build_observed's parent walks, each answered once per object: datacenters, folder paths, a VM's host and cluster."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vgpuctl.vsphere.objects import Obj
from vgpuctl.vsphere.observe import _Tree

pytestmark = pytest.mark.unit


def _obj(moid: str, kind: str, name: str, parent: str | None = None) -> Obj:
    props: dict[str, object] = {"name": name}
    if parent is not None:
        props["parent"] = SimpleNamespace(_moId=parent)
    return Obj(ref=SimpleNamespace(_moId=moid), type=kind, props=props)


def _farm() -> dict[str, Obj]:
    objects = [
        _obj("group-d1", "Folder", "Datacenters"),
        _obj("dc-1", "Datacenter", "DC0", "group-d1"),
        _obj("group-v1", "Folder", "vm", "dc-1"),
        _obj("group-a", "Folder", "ml", "group-v1"),
        _obj("group-b", "Folder", "train", "group-a"),
        _obj("vm-1", "VirtualMachine", "a", "group-b"),
        _obj("vm-2", "VirtualMachine", "b", "group-b"),
        _obj("domain-c1", "ClusterComputeResource", "GPU", "group-h1"),
        _obj("group-h1", "Folder", "host", "dc-1"),
        _obj("host-1", "HostSystem", "esx-01", "domain-c1"),
        _obj("loop-1", "Folder", "x", "loop-2"),  # parents in a cycle reach no datacenter
        _obj("loop-2", "Folder", "y", "loop-1"),
        _obj("orphan", "VirtualMachine", "o", "group-missing"),
    ]
    return {o.moid: o for o in objects}


def test_datacenters_are_found_through_shared_parents_and_not_through_a_cycle() -> None:
    tree = _Tree(_farm())
    assert [tree.datacenter_of(m) for m in ("vm-1", "vm-2", "host-1", "dc-1", "group-b")] == ["dc-1"] * 5
    assert [tree.datacenter_of(m) for m in ("loop-1", "loop-2", "orphan", "group-d1", "nowhere")] == [None] * 5
    assert tree.datacenter_of("vm-1") == "dc-1"  # asked again: the same answer


def test_folder_paths_and_a_vms_host_and_cluster() -> None:
    tree = _Tree(_farm())
    assert tree.folder_path("group-b", "group-v1") == "ml/train"
    assert tree.folder_path("group-b", "group-a") == "train"  # another root, another path
    assert tree.host_and_cluster("host-1") == ("esx-01", "GPU")
    assert tree.host_and_cluster("host-404") == (None, None)

