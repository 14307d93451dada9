"""The ESXi shell over real SSH (vgpuctl.esxi.ssh, paramiko) against gpusim, host keys verified with the
known_hosts gpusim wrote: nvidia-smi / esxcli output parsed by vgpuctl.esxi.parsers, MIG switching and its
effect on the vSphere side (pyVmomi), host-key and password checks, and SSH faults armed through the
control endpoint."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
from gpusim import (
    Gpusim,
    arm_ssh_fault,
    clear_ssh_faults,
    ssh_host_map_path,
    ssh_hosts,
    ssh_info,
    ssh_known_hosts,
)
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim

from vgpuctl.errors import SshError, SshHostKeyError
from vgpuctl.esxi import commands, modopts, parsers
from vgpuctl.esxi.ssh import EsxiShell, SshSettings, SshTarget
from vgpuctl.hosts.facts import load_host_map

pytestmark = pytest.mark.sim

A100, H100 = "esx-01.gpu.sim", "esx-02.gpu.sim"

FARM = {
    "reboot_seconds": 0.2,
    "clusters": [
        {
            "name": "GPU-Cluster",
            "hosts": 1,
            "gpus_per_host": 2,
            "model": "A100-40GB",
            "nvlink": "pairs",
            "graphics_type": "sharedDirect",
        },
        {"name": "H100-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "H100-80GB", "graphics_type": "sharedDirect"},
    ],
    "vms": [{"name": "mig-vm", "host": A100, "memory_mb": 4096, "memory_locked": True, "firmware": "efi"}],
}


@pytest.fixture(scope="module")
def sim(gpusim_session_factory: Any) -> Gpusim:
    return gpusim_session_factory(FARM)


@pytest.fixture
def si(sim: Gpusim) -> Iterator[Any]:
    si = sim.connect()
    yield si
    Disconnect(si)


@pytest.fixture(autouse=True)
def _no_faults_left(sim: Gpusim) -> Iterator[None]:
    yield
    clear_ssh_faults(sim)


def settings(sim: Gpusim, **kw: Any) -> SshSettings:
    base = SshSettings(known_hosts=ssh_known_hosts(sim), password=sim.password, use_agent=False)
    return dataclasses.replace(base, **kw)


def target(sim: Gpusim, host: str) -> SshTarget:
    return load_host_map(str(ssh_host_map_path(sim)))[host]


def shell(sim: Gpusim, host: str, **kw: Any) -> EsxiShell:
    return EsxiShell(target(sim, host), settings(sim, **kw))


def host_obj(si: Any, name: str) -> Any:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem], True)
    try:
        return next(h for h in view.view if h.name == name)
    finally:
        view.Destroy()


def wait_connected(host: Any) -> None:
    for _ in range(500):  # the simulated reboot ends on its own clock
        if host.runtime.connectionState == "connected":
            return
        time.sleep(0.02)
    raise AssertionError(f"{host.name} did not come back")


def reboot(host: Any) -> None:
    WaitForTask(host.EnterMaintenanceMode_Task(timeout=0))
    WaitForTask(host.RebootHost_Task(force=False))
    wait_connected(host)
    WaitForTask(host.ExitMaintenanceMode_Task(timeout=0))


def vsphere_pci(bus_id: str) -> str:
    """00000000:3B:00.0 -> 0000:3b:00.0"""
    domain, rest = bus_id.split(":", 1)
    return f"{domain[-4:]}:{rest}".lower()


def test_control_endpoint_shows_the_files(sim: Gpusim) -> None:
    info = ssh_info(sim)
    assert info["user"] == "root"
    assert Path(info["known_hosts"]) == ssh_known_hosts(sim)
    assert Path(info["host_map"]) == ssh_host_map_path(sim)
    assert set(info["hosts"]) == {A100, H100} == set(ssh_hosts(sim))
    known = ssh_known_hosts(sim).read_text()
    for name, ep in ssh_hosts(sim).items():
        assert f"[127.0.0.1]:{ep['port']},{name} {ep['host_key']}" in known


def test_shell_and_vsphere_show_the_same_gpus(sim: Gpusim, si: Any) -> None:
    host = host_obj(si, A100)
    graphics = {g.pciId: g for g in host.configManager.graphicsManager.graphicsInfo}
    with shell(sim, A100) as sh:
        modes = parsers.parse_gpu_modes(sh.run(commands.query_gpu()).stdout)
        report = parsers.parse_query(sh.run(commands.query()).stdout)
        listed = parsers.parse_list(sh.run(commands.list_gpus()).stdout)
        links = parsers.parse_nvlink_status(sh.run(commands.nvlink_status()).stdout)
        topo = parsers.parse_topo_matrix(sh.run(commands.topology()).stdout)
        params = parsers.parse_module_parameters(sh.run(commands.module_parameters_list()).stdout)
    assert sorted(vsphere_pci(m.bus_id) for m in modes) == sorted(graphics)
    assert [m.mig_current for m in modes] == [False, False]
    assert report.attached_gpus == 2 and [g.product_name for g in report.gpus] == [
        graphics[vsphere_pci(g.bus_id)].deviceName for g in report.gpus
    ]
    assert [g.index for g in listed] == [0, 1]
    assert [g.active_links for g in links] == [12, 12]
    assert topo.nvlink_sets() == [frozenset({0, 1})]
    assert {p.name for p in params} >= {"NVreg_NvLinkDisable", "NVreg_RegistryDwords"}


def offered(host: Any) -> list[str]:
    return list(host.config.sharedPassthruGpuTypes)


def test_mig_switch_on_ampere_takes_effect_after_reboot(sim: Gpusim, si: Any) -> None:
    host = host_obj(si, A100)
    vm = next(v for v in host.vm if v.name == "mig-vm")
    assert "grid_a100-3-20c" not in offered(host)
    with shell(sim, A100) as sh:
        changes = [parsers.parse_mig_set(sh.run(commands.set_mig_mode(i, True)).stdout)[0] for i in (0, 1)]
        assert all(c.enable and c.pending and c.reason == "Not Supported" for c in changes)
        modes = parsers.parse_gpu_modes(sh.run(commands.query_gpu()).stdout)
        assert [(m.mig_current, m.mig_pending) for m in modes] == [(False, True), (False, True)]
        with pytest.raises(SshError) as err:
            sh.run(commands.list_gpu_instance_profiles())
        assert err.value.exit_status == 6
    # Nothing changes on the vSphere side until the host reboots.
    assert {g.vgpuMode for g in host.config.graphicsInfo} == {"sameSize"}
    assert "grid_a100-40c" in offered(host)

    reboot(host)

    assert {g.vgpuMode for g in host.config.graphicsInfo} == {"multiInstanceGpu"}
    assert "grid_a100-3-20c" in offered(host) and "grid_a100-40c" not in offered(host)
    infos = host.configManager.graphicsManager.RetrieveVgpuProfileInfo()
    assert {p.profileName for p in infos if p.profileSharing == "mig"} >= {"grid_a100-3-20c", "grid_a100-7-40c"}
    # Admission follows: a MIG-backed vGPU VM powers on and takes a GPU instance the shell then shows.
    change = vim.vm.device.VirtualDeviceSpec(
        operation="add",
        device=vim.vm.device.VirtualPCIPassthrough(
            key=-100, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu="grid_a100-3-20c")
        ),
    )
    WaitForTask(vm.ReconfigVM_Task(vim.vm.ConfigSpec(deviceChange=[change])))
    WaitForTask(vm.PowerOnVM_Task())
    try:
        with shell(sim, A100) as sh:
            modes = parsers.parse_gpu_modes(sh.run(commands.query_gpu()).stdout)
            assert [(m.mig_current, m.mig_pending) for m in modes] == [(True, True), (True, True)]
            profiles = parsers.parse_lgip(sh.run(commands.list_gpu_instance_profiles(0)).stdout)
            placements = parsers.parse_lgipp(sh.run(commands.list_gpu_instance_placements(0)).stdout)
            listed = parsers.parse_list(sh.run(commands.list_gpus()).stdout)
        by_name = {p.name: p for p in profiles}
        assert (by_name["3g.20gb"].free, by_name["3g.20gb"].total) == (1, 2)
        assert by_name["7g.40gb"].free == 0
        assert {p.profile_id: (p.starts, p.size) for p in placements}[9] == ((0, 4), 4)
        assert [d.profile for d in listed[0].mig_devices] == ["3g.20gb"] and listed[1].mig_devices == ()
    finally:
        WaitForTask(vm.PowerOffVM_Task())


def test_mig_switch_on_hopper_applies_at_once(sim: Gpusim, si: Any) -> None:
    host = host_obj(si, H100)
    with shell(sim, H100) as sh:
        (change,) = parsers.parse_mig_set(sh.run(commands.set_mig_mode(1, True)).stdout)
        assert change.enable and not change.pending
        modes = parsers.parse_gpu_modes(sh.run(commands.query_gpu()).stdout)
    assert [(m.mig_current, m.mig_pending) for m in modes] == [(False, False), (True, True)]
    vgpu_modes = {g.pciId: g.vgpuMode for g in host.config.graphicsInfo}
    assert vgpu_modes == {"0000:3b:00.0": "sameSize", "0000:3c:00.0": "multiInstanceGpu"}
    assert "grid_h100-3-40c" in offered(host) and "grid_h100-80c" in offered(host)
    with shell(sim, H100) as sh:
        (change,) = parsers.parse_mig_set(sh.run(commands.set_mig_mode("00000000:3C:00.0", False)).stdout)
    assert not change.enable and not change.pending
    assert {g.vgpuMode for g in host.config.graphicsInfo} == {"sameSize"}


def test_module_options_set_with_esxcli_are_the_apis(sim: Gpusim, si: Any) -> None:
    kms = host_obj(si, H100).configManager.kernelModuleSystem
    before = kms.QueryConfiguredModuleOptionString("nvidia")
    options = modopts.format_module_options({"NVreg_RegistryDwords": "RmPVMRL=0x01"})
    with shell(sim, H100) as sh:
        sh.run(commands.module_parameters_set(options))
        params = {
            p.name: p.value for p in parsers.parse_module_parameters(sh.run(commands.module_parameters_list()).stdout)
        }
        assert kms.QueryConfiguredModuleOptionString("nvidia") == options
        assert params["NVreg_RegistryDwords"] == "RmPVMRL=0x01"
        with pytest.raises(SshError) as err:
            sh.run(commands.module_parameters_set("not-a-pair"))
        assert err.value.exit_status == 1 and "not key=value" in err.value.stderr
        sh.run(commands.module_parameters_set(before))
    assert kms.QueryConfiguredModuleOptionString("nvidia") == before


def test_errors_carry_exit_status_and_stderr(sim: Gpusim) -> None:
    with shell(sim, A100) as sh:
        with pytest.raises(SshError) as err:
            sh.run("nvidia-smi --no-such-flag")
        assert err.value.exit_status == 2 and "is not recognized" in err.value.stderr
        assert err.value.host == A100
        with pytest.raises(SshError) as err:
            sh.run("vmware -vl")
        assert err.value.exit_status == 127 and "not found" in err.value.stderr
        result = sh.run("nvidia-smi -i 9 -L", check=False)
        assert result.exit_status == 6 and "No devices were found" in result.stdout


def test_unknown_host_key_is_rejected(sim: Gpusim, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(SshHostKeyError, match="not in known_hosts"):
        shell(sim, A100, known_hosts=empty).connect()
    missing = tmp_path / "nope" / "known_hosts"
    with pytest.raises(SshHostKeyError):
        shell(sim, A100, known_hosts=missing).connect()


def test_changed_host_key_is_rejected_even_with_trust_on_first_use(sim: Gpusim, tmp_path: Path) -> None:
    hosts = ssh_hosts(sim)
    wrong = tmp_path / "known_hosts"  # A100's address with H100's key
    wrong.write_text(f"[127.0.0.1]:{hosts[A100]['port']} {hosts[H100]['host_key']}\n")
    for tofu in (False, True):
        with pytest.raises(SshHostKeyError, match="does not match"):
            shell(sim, A100, known_hosts=wrong, trust_on_first_use=tofu).connect()


def test_trust_on_first_use_records_and_reports(sim: Gpusim, tmp_path: Path, caplog: Any) -> None:
    path = tmp_path / "ssh" / "known_hosts"
    seen: list[tuple[str, str]] = []
    sh = EsxiShell(
        target(sim, A100),
        settings(sim, known_hosts=path, trust_on_first_use=True),
        on_new_host_key=lambda h, fp: seen.append((h, fp)),
    )
    with sh:
        assert sh.run("hostname").stdout == f"{A100}\n"
    assert seen == [(A100, ssh_hosts(sim)[A100]["fingerprint"])]
    assert "trusted new SSH host key" in caplog.text
    assert ssh_hosts(sim)[A100]["host_key"] in path.read_text()
    with shell(sim, A100, known_hosts=path) as again:  # now known: no trust on first use needed
        again.run("hostname")
    assert len(seen) == 1


def test_wrong_password_is_refused(sim: Gpusim) -> None:
    with pytest.raises(SshError, match="authentication failed") as err:
        shell(sim, A100, password="wrong").connect()
    assert not isinstance(err.value, SshHostKeyError)


def test_public_key_authentication(gpusim_factory: Any, tmp_path: Path) -> None:
    key = paramiko.ECDSAKey.generate()
    key_file = tmp_path / "id_ecdsa"
    key.write_private_key_file(str(key_file))
    (tmp_path / "authorized_keys").write_text(f"{key.get_name()} {key.get_base64()} test\n")
    other = tmp_path / "other"
    paramiko.ECDSAKey.generate().write_private_key_file(str(other))
    sim = gpusim_factory(
        {"clusters": [{"name": "C", "hosts": 1, "gpus_per_host": 1, "model": "L40S"}]},
        args=["-ssh-authorized-keys", str(tmp_path / "authorized_keys")],
    )
    with shell(sim, "esx-01.gpu.sim", password=None, key_file=key_file) as sh:
        assert parsers.parse_list(sh.run(commands.list_gpus()).stdout)[0].name == "NVIDIA L40S"
    with pytest.raises(SshError, match="authentication failed"):
        shell(sim, "esx-01.gpu.sim", password=None, key_file=other).connect()


def test_fault_fail(sim: Gpusim) -> None:
    arm_ssh_fault(
        sim, "fail", host=A100, match="-mig", exit=15, stderr="Unable to set MIG mode: GPU is lost\n", times=1
    )
    with shell(sim, A100) as sh:
        with pytest.raises(SshError, match="GPU is lost") as err:
            sh.run(commands.set_mig_mode(0, False))
        assert err.value.exit_status == 15
        sh.run(commands.list_gpus())  # other commands are not affected
    assert ssh_info(sim)["faults"] == []  # times=1: disarmed after firing


def test_fault_hang_hits_the_command_timeout(sim: Gpusim) -> None:
    arm_ssh_fault(sim, "hang", host=A100, match="nvidia-smi -q")
    with shell(sim, A100) as sh:
        with pytest.raises(SshError, match=r"`nvidia-smi -q.*` did not finish within 0\.5 s \(--timeout or VGPUCTL_"):
            sh.run(commands.query(), timeout=0.5)
        assert sh.run("hostname").stdout == f"{A100}\n"  # the connection stays usable


def test_fault_drop(sim: Gpusim) -> None:
    arm_ssh_fault(sim, "drop", host=A100, match="topo", times=1)
    with shell(sim, A100) as sh, pytest.raises(SshError, match=r"dropped|lost|cannot start"):
        sh.run(commands.topology())
    with shell(sim, A100) as sh:
        sh.run(commands.topology())


def test_fault_refuse_and_host_down(sim: Gpusim) -> None:
    arm_ssh_fault(sim, "refuse", host=A100)
    with pytest.raises(SshError, match="cannot connect"):
        shell(sim, A100).connect()
    with shell(sim, H100) as sh:
        sh.run("hostname")
    clear_ssh_faults(sim, A100)
    with shell(sim, A100) as sh:
        sh.run("hostname")
    sim.host_down(H100)
    try:
        with pytest.raises(SshError):
            shell(sim, H100).connect()
    finally:
        sim.host_up(H100)
    with shell(sim, H100) as sh:
        sh.run("hostname")
