"""gpusim's boards and rules from the shared vGPU type catalogue, seen through pyVmomi: an HGX NVSwitch farm
with NVLink groups of 2, 4 and 8 GPUs, a host spelling profiles nvidia_, NVIDIA's mixed-size maxima at
power-on, and the proof that gpusim reads the catalogue file the vgpuctl package ships."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from gpusim import Gpusim
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim

from vgpuctl.profiles import catalogue_digest, catalogue_path

pytestmark = pytest.mark.sim

INSUFFICIENT = (
    "The amount of graphics resource available in the parent resource pool is insufficient for the operation."
)
HOST = "esx-01.gpu.sim"
HGX_PROFILE = "grid_h100xm-80c"


def locked_vms(names: list[str], host: str = HOST) -> list[dict[str, Any]]:
    return [{"name": n, "host": host, "memory_mb": 4096, "memory_locked": True} for n in names]


def cluster(name: str, model: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "hosts": 1, "gpus_per_host": 1, "model": model, "graphics_type": "sharedDirect", **extra}


@pytest.fixture
def connect() -> Iterator[Any]:
    sessions: list[Any] = []

    def _connect(sim: Gpusim) -> Any:
        sessions.append(sim.connect())
        return sessions[-1]

    yield _connect
    for si in sessions:
        Disconnect(si)


def objects(si: Any, kind: Any) -> dict[str, Any]:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [kind], True)
    try:
        return {o.name: o for o in view.view}
    finally:
        view.DestroyView()


def vgpu_spec(*profiles: str, group: str | None = None) -> vim.vm.ConfigSpec:
    """Add vGPUs; with `group`, as one NVLink vendor device group of that name."""
    changes = []
    for i, profile in enumerate(profiles):
        backing = vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile)
        device = vim.vm.device.VirtualPCIPassthrough(key=-100 - i, backing=backing)
        if group is not None:
            device.deviceGroupInfo = vim.vm.device.VirtualDevice.DeviceGroupInfo(groupInstanceKey=-1, sequenceId=i)
        changes.append(vim.vm.device.VirtualDeviceSpec(operation="add", device=device))
    spec = vim.vm.ConfigSpec(deviceChange=changes)
    if group is not None:
        vendor = vim.vm.VirtualDeviceGroups.VendorDeviceGroup(groupInstanceKey=-1, deviceGroupName=group)
        spec.deviceGroups = vim.vm.VirtualDeviceGroups(deviceGroup=[vendor])
    return spec


def power_on_error(vm: Any) -> str | None:
    try:
        WaitForTask(vm.PowerOnVM_Task())
    except vim.fault.InsufficientGraphicsResourcesFault as err:
        return str(err.msg)
    return None


def test_gpusim_reads_the_catalogue_the_package_ships(gpusim_factory: Any) -> None:
    sim = gpusim_factory({"clusters": [cluster("C", "L40S")], "templates": []}, args=["-no-ssh"])
    seen = sim.catalogue()
    assert seen["path"] == str(catalogue_path())
    assert seen["sha256"] == catalogue_digest()
    assert {"A100-40GB", "A100-80GB", "H100-80GB", "L40S", "H100-SXM5-80GB", "A100-HGX-40GB", "A16"} <= set(
        seen["models"]
    )


def test_hgx_nvswitch_farm_offers_groups_of_2_4_8_and_admits_into_them(gpusim_factory: Any, connect: Any) -> None:
    farm = {
        "clusters": [cluster("HGX", "H100-SXM5-80GB", gpus_per_host=8, assignment_policy="consolidation")],
        "templates": [],
        "vms": locked_vms(["pair", "quad", "pair-2", "all-8"]),
    }
    sim = gpusim_factory(farm, args=["-no-ssh"])
    si = connect(sim)
    host = objects(si, vim.HostSystem)[HOST]
    target = objects(si, vim.ClusterComputeResource)["HGX"].environmentBrowser.QueryConfigTarget(host=host)
    groups = {g.deviceGroupName: len(g.componentDeviceInfo) for g in target.vendorDeviceGroupInfo}
    assert groups == {f"Nvidia:{n}@{HGX_PROFILE}%NVLink": n for n in (2, 4, 8)}
    assert sim.host(HOST)["nvlinkTopology"] == "nvswitch"

    vms = objects(si, vim.VirtualMachine)
    for name, n in (("pair", 2), ("quad", 4), ("pair-2", 2), ("all-8", 8)):
        WaitForTask(vms[name].ReconfigVM_Task(vgpu_spec(*[HGX_PROFILE] * n, group=f"Nvidia:{n}@{HGX_PROFILE}%NVLink")))
    for name in ("pair", "quad", "pair-2"):
        assert power_on_error(vms[name]) is None, name
    gpus = {a["vmName"]: [] for a in sim.assignments()}
    for a in sim.assignments():
        gpus[a["vmName"]].append(a["gpu"])
    assert {name: len(ids) for name, ids in gpus.items()} == {"pair": 2, "quad": 4, "pair-2": 2}
    assert len({gpu for ids in gpus.values() for gpu in ids}) == 8  # one GPU per vGPU, all eight used
    assert power_on_error(vms["all-8"]) == INSUFFICIENT

    for name in ("pair", "quad", "pair-2"):
        WaitForTask(vms[name].PowerOffVM_Task())
    assert power_on_error(vms["all-8"]) is None
    assert sorted(a["gpu"] for a in sim.assignments()) == sorted(g["pciId"] for g in sim.host(HOST)["gpus"])


def test_host_with_nvidia_prefix_reports_nvidia_names(gpusim_factory: Any, connect: Any) -> None:
    farm = {
        "clusters": [cluster("C", "A100-40GB", profile_prefix="nvidia_")],
        "templates": [],
        "vms": locked_vms(["vm-1"]),
    }
    si = connect(gpusim_factory(farm, args=["-no-ssh"]))
    host = objects(si, vim.HostSystem)[HOST]
    offered = list(host.config.sharedPassthruGpuTypes)
    assert "nvidia_a100-40c" in offered and all(p.startswith("nvidia_a100") for p in offered)
    infos = {p.profileName: p for p in host.configManager.graphicsManager.RetrieveVgpuProfileInfo()}
    assert (infos["nvidia_a100-40c"].fbSizeInGib, infos["nvidia_a100-40c"].profileClass) == (40, "compute")
    assert infos["nvidia_a100-40c"].profileSharing == "timeSliced"
    vm = objects(si, vim.VirtualMachine)["vm-1"]
    with pytest.raises(vim.fault.InvalidDeviceSpec):
        WaitForTask(vm.ReconfigVM_Task(vgpu_spec("grid_a100-40c")))
    WaitForTask(vm.ReconfigVM_Task(vgpu_spec("nvidia_a100-40c")))
    assert power_on_error(vm) is None


def test_mixed_size_a100_admits_nvidias_maximum_and_refuses_one_more(gpusim_factory: Any, connect: Any) -> None:
    """A100-8C: at most 4 per GPU in mixed-size mode (5 in equal-size mode), though 5 x 8 GB fit 40 GB."""
    mixed, equal = "esx-01.gpu.sim", "esx-02.gpu.sim"
    farm = {
        "clusters": [
            cluster("Mixed", "A100-40GB", vgpu_mode="mixedSize"),
            cluster("Equal", "A100-40GB", vgpu_mode="sameSize"),
        ],
        "templates": [],
        "vms": locked_vms([f"m-{i}" for i in range(1, 6)], mixed) + locked_vms([f"e-{i}" for i in range(1, 6)], equal),
    }
    sim = gpusim_factory(farm, args=["-no-ssh"])
    vms = objects(connect(sim), vim.VirtualMachine)
    for name in [f"{side}-{i}" for side in "me" for i in range(1, 6)]:
        WaitForTask(vms[name].ReconfigVM_Task(vgpu_spec("grid_a100-8c")))
    for i in range(1, 5):
        assert power_on_error(vms[f"m-{i}"]) is None, f"m-{i}"
    assert power_on_error(vms["m-5"]) == INSUFFICIENT
    for i in range(1, 6):
        assert power_on_error(vms[f"e-{i}"]) is None, f"e-{i}"
    placed = [a["host"] for a in sim.assignments()]
    assert (placed.count(mixed), placed.count(equal)) == (4, 5)


def test_host_running_a_vgpu_no_table_knows(gpusim_factory: Any, connect: Any) -> None:
    """extra_profiles: the host offers a name outside the catalogue; a VM running it holds a GPU of its own."""
    unknown = "nvidia_a100-1-5cme2"
    odd = {"name": "odd", "host": HOST, "memory_mb": 4096, "memory_locked": True, "vgpus": [unknown], "power_on": True}
    farm = {
        "clusters": [cluster("C", "A100-40GB", gpus_per_host=2, extra_profiles=[unknown])],
        "templates": [],
        "vms": [odd, *locked_vms(["whole-1", "whole-2"])],
    }
    sim = gpusim_factory(farm, args=["-no-ssh"])
    si = connect(sim)
    host = objects(si, vim.HostSystem)[HOST]
    assert unknown in host.config.sharedPassthruGpuTypes
    assert unknown not in {p.profileName for p in host.configManager.graphicsManager.RetrieveVgpuProfileInfo()}
    vms = objects(si, vim.VirtualMachine)
    assert vms["odd"].runtime.powerState == "poweredOn"
    for name in ("whole-1", "whole-2"):
        WaitForTask(vms[name].ReconfigVM_Task(vgpu_spec("grid_a100-40c")))
    assert power_on_error(vms["whole-1"]) is None
    assert power_on_error(vms["whole-2"]) == INSUFFICIENT  # the other GPU holds the unknown vGPU
    by_gpu = {a["gpu"]: a["vmName"] for a in sim.assignments()}
    assert sorted(by_gpu.values()) == ["odd", "whole-1"] and len(by_gpu) == 2
