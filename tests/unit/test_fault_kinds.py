"""vCenter faults keep their type and message; a refusal for lack of resources is told by the fault's class."""

from __future__ import annotations

import pytest
from pyVmomi import vim

from vgpuctl.vsphere.faults import to_error

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("fault", [
    vim.fault.InsufficientResourcesFault(msg="no room"),
    vim.fault.InsufficientGraphicsResourcesFault(msg="Insufficient resources to satisfy configured min vGPU"),
    vim.fault.InsufficientHostCapacityFault(msg="no host"),
])
def test_a_fault_for_lack_of_resources_says_so(fault: object) -> None:
    err = to_error(fault, "vm-1")
    assert err.lacks_resources
    assert err.fault_type == f"vim.fault.{type(fault).__name__.rsplit('.', 1)[-1]}"


@pytest.mark.parametrize("fault", [
    vim.fault.InvalidState(msg="Insufficient words in this message do not make it one"),
    vim.fault.NoPermission(msg="denied", privilegeId="VirtualMachine.Interact.PowerOn"),
])
def test_other_faults_do_not(fault: object) -> None:
    err = to_error(fault)
    assert not err.lacks_resources
    assert err.fault_message


def test_a_fault_named_after_its_object_keeps_its_kind() -> None:
    err = to_error(vim.fault.InsufficientHostCapacityFault(msg="no host"))
    named = err.about("esx-01")
    assert named.obj == "esx-01" and str(named).startswith("esx-01: ")
    assert (named.fault_type, named.fault_message, named.lacks_resources) == (err.fault_type, err.fault_message, True)
    denied = to_error(vim.fault.NoPermission(msg="denied", privilegeId="Host.Config.Maintenance")).about("esx-01")
    assert denied.privilege == "Host.Config.Maintenance" and not denied.lacks_resources
