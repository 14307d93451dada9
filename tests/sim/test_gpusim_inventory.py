"""pyVmomi sees what gpusim models: GPUs on hosts, profiles per mode, graphics manager, kernel modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from gpusim import Gpusim
from pyVim.connect import Disconnect
from pyVmomi import vim

pytestmark = pytest.mark.sim

NVIDIA = 0x10DE


@pytest.fixture(scope="module")
def si(gpusim: Gpusim) -> Iterator[Any]:
    si = gpusim.connect()
    yield si
    Disconnect(si)


def objects(si: Any, kind: Any) -> dict[str, Any]:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [kind], True)
    try:
        return {o.name: o for o in view.view}
    finally:
        view.DestroyView()


def test_default_farm_inventory(si: Any) -> None:
    assert si.RetrieveContent().about.apiVersion == "8.0.3.0"
    hosts = objects(si, vim.HostSystem)
    assert sorted(hosts) == [f"esx-0{i}.gpu.sim" for i in range(1, 5)]
    clusters = objects(si, vim.ClusterComputeResource)
    assert list(clusters) == ["GPU-Cluster"]
    vms = objects(si, vim.VirtualMachine)
    assert vms["ubuntu-22.04-ml"].config.template is True
    assert vms["ubuntu-22.04-ml"].config.firmware == "efi"


def test_hosts_list_gpus_as_pci_devices_and_graphics_info(si: Any) -> None:
    host = objects(si, vim.HostSystem)["esx-01.gpu.sim"]
    gpus = [d for d in host.hardware.pciDevice if d.vendorId & 0xFFFF == NVIDIA]
    assert [d.id for d in gpus] == ["0000:3b:00.0", "0000:3c:00.0", "0000:5e:00.0", "0000:5f:00.0"]
    assert {d.deviceId & 0xFFFF for d in gpus} == {0x20F1}
    info = host.config.graphicsInfo
    assert [g.pciId for g in info] == [d.id for d in gpus]
    assert {(g.graphicsType, g.vgpuMode, g.memorySizeInKB) for g in info} == {
        ("sharedDirect", "sameSize", 40 * 1024 * 1024)
    }
    assert host.config.graphicsConfig.hostDefaultGraphicsType == "sharedDirect"
    assert "grid_a100-40c" in host.config.sharedPassthruGpuTypes
    assert not [p for p in host.config.sharedPassthruGpuTypes if p.count("-") > 1]  # no MIG profiles


def test_graphics_manager_methods(si: Any) -> None:
    host = objects(si, vim.HostSystem)["esx-02.gpu.sim"]
    gm = host.configManager.graphicsManager
    assert len(gm.graphicsInfo) == 4
    profiles = {p.profileName: p for p in gm.RetrieveVgpuProfileInfo()}
    assert profiles["grid_a100-20c"].fbSizeInGib == 20
    assert profiles["grid_a100-20c"].profileSharing == "timeSliced"
    assert profiles["grid_a100-20c"].profileClass == "compute"
    devices = gm.RetrieveVgpuDeviceInfo()
    assert [d.deviceName for d in devices] == ["NVIDIA A100-PCIE-40GB"]
    assert devices[0].migCapable and devices[0].maxFbSizeInGib == 40
    assert gm.IsSharedGraphicsActive() is False
    gm.RefreshGraphicsManager()


def test_kernel_module_system(si: Any) -> None:
    host = objects(si, vim.HostSystem)["esx-03.gpu.sim"]
    kms = host.configManager.kernelModuleSystem
    assert kms.QueryModules()[0].name == "nvidia"
    assert kms.QueryConfiguredModuleOptionString("nvidia") == ""
    kms.UpdateModuleOptionString("nvidia", "NVreg_RegistryDwords=RmPVMRL=0x01")
    try:
        assert kms.QueryConfiguredModuleOptionString("nvidia") == "NVreg_RegistryDwords=RmPVMRL=0x01"
        assert kms.QueryModules()[0].optionString == ""  # in effect only after a reboot
    finally:
        kms.UpdateModuleOptionString("nvidia", "")
    with pytest.raises(vim.fault.NotFound):
        kms.QueryConfiguredModuleOptionString("no-such-module")


def test_config_target_offers_profiles_and_nvlink_groups(si: Any) -> None:
    cluster = objects(si, vim.ClusterComputeResource)["GPU-Cluster"]
    target = cluster.environmentBrowser.QueryConfigTarget()
    assert "grid_a100-40c" in {t.vgpu for t in target.sharedGpuPassthroughTypes}
    assert {p.profileName for p in target.vgpuProfileInfo} >= {"grid_a100-10c", "grid_a100-40c"}
    assert [d.deviceName for d in target.vgpuDeviceInfo] == ["NVIDIA A100-PCIE-40GB"]
    groups = target.vendorDeviceGroupInfo
    assert [g.deviceGroupName for g in groups] == ["Nvidia:2@grid_a100-40c%NVLink"]
    assert len(groups[0].componentDeviceInfo) == 2


def test_mig_farm_offers_mig_profiles(gpusim_factory: Any) -> None:
    farm = {
        "clusters": [
            {
                "name": "MIG",
                "hosts": 1,
                "gpus_per_host": 2,
                "model": "H100-80GB",
                "mig": True,
                "graphics_type": "sharedDirect",
            }
        ],
        "templates": [],
    }
    sim = gpusim_factory(farm, args=["-no-ssh"])
    si = sim.connect()
    try:
        host = objects(si, vim.HostSystem)["esx-01.gpu.sim"]
        assert {g.vgpuMode for g in host.config.graphicsInfo} == {"multiInstanceGpu"}
        assert "grid_h100-3-40c" in host.config.sharedPassthruGpuTypes
        assert "grid_h100-80c" not in host.config.sharedPassthruGpuTypes
    finally:
        Disconnect(si)
