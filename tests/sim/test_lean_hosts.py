"""The lean reader (vsphere/rawread.py) reads hosts exactly as pyVmomi does, on a farm whose settings differ
from every default (consolidation policy, shared graphics, mixed-size vGPU mode, MIG)."""

from __future__ import annotations

import pytest

from vgpuctl.vsphere import observe as observe_mod
from vgpuctl.vsphere.observe import observe
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.sim

FARM = {
    "datacenter": "DC0",
    "clusters": [
        {
            "name": "L40S",
            "hosts": 2,
            "gpus_per_host": 2,
            "model": "L40S",
            "graphics_type": "shared",
            "assignment_policy": "consolidation",
            "vgpu_mode": "mixedSize",
        },
        {"name": "H100-MIG", "hosts": 1, "gpus_per_host": 2, "model": "H100-80GB", "mig": True},
    ],
    "templates": [{"name": "tmpl", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vm_count": 5,
}


def read(sim) -> dict:
    settings = ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)
    with open_session(settings) as session:
        return observe(session).to_dict()


def test_lean_hosts_match_pyvmomi(gpusim_factory, monkeypatch) -> None:
    sim = gpusim_factory(FARM)
    lean = read(sim)
    monkeypatch.setattr(observe_mod, "RAW_VMS", False)
    full = read(sim)
    assert lean.pop("round_trips") == full.pop("round_trips") + 2  # hosts and VMs in their own requests
    assert lean == full
    truth = {h["name"]: h for h in sim.request("GET", "/hosts")["hosts"]}
    for name, host in lean["hosts"].items():
        assert host["assignment_policy"] == truth[name]["assignmentPolicy"]
        assert host["default_graphics_type"] == truth[name]["defaultGraphicsType"]
        assert {g["vgpu_mode"] for g in host["gpus"]} == {g["vgpuMode"] for g in truth[name]["gpus"]}
        assert all(g["vendor_id"] == 0x10DE and g["device_id"] for g in host["gpus"])
    assert {h["assignment_policy"] for h in lean["hosts"].values()} == {"consolidation", "performance"}
