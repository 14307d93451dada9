"""Training across hosts against gpusim: two hosts with ConnectX-7 NICs (SR-IOV with virtual functions, and one
for passthrough), a distributed port group for RoCE, a two-VM training pair with 4 vGPUs, an SR-IOV VF and a
customized identity each. vgpuctl runs through its CLI with the environment a user would export; what vCenter
has is read with pyVmomi directly, by name.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from planout import refused
from pyVim.connect import Disconnect
from pyVmomi import vim
from typer.testing import CliRunner

from vgpuctl.cli.main import app
from vgpuctl.inventory import load_inventory
from vgpuctl.planner import make_plan
from vgpuctl.vms.apply import apply_plan
from vgpuctl.vsphere import observe as observe_mod
from vgpuctl.vsphere.observe import observe
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.sim

FARM = {
    "datacenter": "DC0",
    "clusters": [
        {
            "name": "GPU-Cluster",
            "hosts": 2,
            "gpus_per_host": 4,
            "model": "A100-40GB",
            "graphics_type": "sharedDirect",
            "nics": [{"model": "ConnectX-7", "sriov_vfs": 1}, {"model": "ConnectX-7", "passthrough": True}],
        }
    ],
    "networks": [{"name": "mgmt"}, {"name": "roce-fabric", "kind": "distributed", "switch": "dvs-roce"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi", "network": ["mgmt"]}],
}

PAIR = """\
  - name: train-{01..02}
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    memory_gb: 64
    vgpus: {profile: grid_a100-40c, count: 4}
    network:
      - {portgroup: mgmt}
      - {type: sriov, device: ConnectX-7, portgroup: roce-fabric, traffic_class: 106}
    guest:
      identity:
        METHOD
        addresses:
          roce-fabric: {pool: 10.0.40.10-10.0.40.19/24, gateway: 10.0.40.1}
"""


@pytest.fixture
def sim(gpusim_factory: Any) -> Any:
    return gpusim_factory(FARM)


@pytest.fixture
def env(sim: Any, no_vgpuctl_env: None) -> dict[str, str]:
    return sim.vgpuctl_env(esxi=False)


def vgpuctl(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def inventory(tmp_path: Path, vms: str, method: str = "method: customization") -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text("apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms:\n"
                    + textwrap.dedent(vms).replace("METHOD", method))
    return path


def vms(sim: Any) -> dict[str, dict[str, Any]]:
    """Each VM's host, power, guest hostname and addresses, and adapters (kind, port group, PF), by pyVmomi."""
    si = sim.connect()
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        out = {}
        for vm in view.view:
            if vm.config.template:
                continue
            cards = []
            for d in vm.config.hardware.device:
                if isinstance(d, vim.vm.device.VirtualEthernetCard):
                    pf = d.sriovBacking.physicalFunctionBacking.id if isinstance(
                        d, vim.vm.device.VirtualSriovEthernetCard) else None
                    net = d.backing.port.portgroupKey if hasattr(d.backing, "port") else d.backing.deviceName
                    cards.append((type(d).__name__.rsplit(".", 1)[-1], net, pf))
            out[vm.name] = {"host": vm.runtime.host.name, "power": vm.runtime.powerState,
                            "hostname": vm.guest.hostName, "ips": sorted(ip for n in vm.guest.net or []
                                                                        for ip in n.ipAddress or []),
                            "cards": cards, "locked": vm.config.memoryReservationLockedToMax}
        view.DestroyView()
        return out
    finally:
        Disconnect(si)


def test_a_training_pair_is_applied_and_plans_to_zero(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    inv = inventory(tmp_path, PAIR)
    result = vgpuctl(env, "apply", "-f", str(inv), "--yes")
    assert result.exit_code == 0, result.output
    state = vms(sim)
    assert sorted(state) == ["train-01", "train-02"]
    one, two = state["train-01"], state["train-02"]
    assert {one["host"], two["host"]} == {"esx-01.gpu.sim", "esx-02.gpu.sim"}  # 4 whole GPUs each: one host each
    for name, vm, ip in (("train-01", one, "10.0.40.10"), ("train-02", two, "10.0.40.11")):
        assert vm["power"] == "poweredOn" and vm["locked"] and vm["hostname"] == name and vm["ips"] == [ip]
        kinds = [(kind, pf) for kind, _, pf in vm["cards"]]
        assert kinds == [("VirtualVmxnet3", None), ("VirtualSriovEthernetCard", "0000:18:00.0")]
    for host in ("esx-01.gpu.sim", "esx-02.gpu.sim"):  # one VF taken on each host's SR-IOV NIC
        cx7 = sim.nics(host)[0]
        assert cx7["pciId"] == "0000:18:00.0" and sum(cx7["vfHolders"].values()) == 1
    again = vgpuctl(env, "plan", "-f", str(inv), "--detailed-exitcode")
    assert again.exit_code == 0, again.output
    assert "No changes: the farm matches the inventory." in again.output


def test_export_writes_a_training_pairs_adapters_and_plans_no_change(sim: Any, env: dict[str, str],
                                                                      tmp_path: Path) -> None:
    """A VM with an RDMA device exports with its adapters as the plan matches them (kind, port group, the NIC
    its virtual function comes from): the exported inventory plans no change, and dropping the SR-IOV item
    from an exclusive list plans its removal."""
    inv = inventory(tmp_path, PAIR)
    assert vgpuctl(env, "apply", "-f", str(inv), "--yes").exit_code == 0
    farm = tmp_path / "farm.yaml"
    exported = vgpuctl(env, "export", "--out", str(farm))
    assert exported.exit_code == 0, exported.output
    text = farm.read_text()
    assert text.count("- {type: vmxnet3, portgroup: mgmt}") == 1, text  # both VMs in one name range
    assert "- {type: sriov, device: '0000:18:00.0', portgroup: roce-fabric}" in text, text
    again = vgpuctl(env, "plan", "-f", str(farm), "--detailed-exitcode")
    assert again.exit_code == 0, again.output
    exclusive = text.replace("    network:\n", "    network_exclusive: true\n    network:\n").replace(
        "      - {type: sriov, device: '0000:18:00.0', portgroup: roce-fabric}\n", "")
    farm.write_text(exclusive)
    kept = vgpuctl(env, "plan", "-f", str(farm))  # running, power: keep: refused, naming the change
    assert kept.exit_code == 1 and "needs a change (remove adapter sriov on roce-fabric)" in kept.output, kept.output
    farm.write_text(exclusive.replace("power: keep", "power: restart"))
    dropped = vgpuctl(env, "plan", "-f", str(farm), "--detailed-exitcode")
    assert dropped.exit_code == 2, dropped.output
    assert "sriov" in dropped.output, dropped.output


def test_vf_exhaustion_is_refused_at_plan_time(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    inv = inventory(tmp_path, PAIR.replace("train-{01..02}", "train-{01..03}").replace("count: 4", "count: 1"))
    result = vgpuctl(env, "-o", "json", "plan", "-f", str(inv))
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    messages = [d["message"] if isinstance(d, dict) else d for d in doc["error"]["details"]]
    assert len(messages) == 1, messages
    assert "vm train-03: cannot power on" in messages[0]
    assert "has no free SR-IOV virtual function on ConnectX-7 (0000:18:00.0: 1 of 1 in use)" in messages[0]
    assert vms(sim) == {}  # nothing changed


def test_a_customization_failure_fails_that_vm_with_the_events_text(sim: Any, env: dict[str, str],
                                                                    tmp_path: Path) -> None:
    sim.customization_fault("train-02", "the guest has no /etc/hostname writer")
    result = vgpuctl(env, "-o", "json", "apply", "-f", str(inventory(tmp_path, PAIR)), "--yes")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    outcomes = {o["vm"]: o for o in doc["vms"]}
    assert outcomes["train-01"]["status"] == "changed"
    failed = outcomes["train-02"]
    assert failed["status"] == "failed" and failed["fault_type"] == "CustomizationError"
    assert "guest customization failed: CustomizationLinuxIdentityFailed" in failed["message"]
    assert "reason the guest has no /etc/hostname writer" in failed["message"]
    state = vms(sim)
    assert state["train-01"]["hostname"] == "train-01" and state["train-02"]["hostname"] != "train-02"


def test_cloud_init_identity_through_guestinfo(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    inv = inventory(tmp_path, PAIR.replace("train-{01..02}", "ci-01"), method="method: cloud-init")
    plan = vgpuctl(env, "plan", "-f", str(inv))
    assert "+ identity cloud-init: hostname ci-01, mgmt DHCP, roce-fabric 10.0.40.10/24 via 10.0.40.1" in plan.output
    result = vgpuctl(env, "apply", "-f", str(inv), "--yes")
    assert result.exit_code == 0, result.output
    vm = vms(sim)["ci-01"]
    assert vm["hostname"] == "ci-01" and vm["ips"] == ["10.0.40.10"]
    si = sim.connect()
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        found = next(v for v in view.view if v.name == "ci-01")
        keys = {o.key: o.value for o in found.config.extraConfig}
        assert keys["guestinfo.metadata.encoding"] == "base64" and keys["guestinfo.metadata"]
    finally:
        Disconnect(si)
    again = vgpuctl(env, "plan", "-f", str(inv), "--detailed-exitcode")
    assert again.exit_code == 0, again.output


def test_an_existing_vm_gets_pvrdma_in_its_one_reconfigure(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    base = """\
      - name: solo
        template: ubuntu-22.04-ml
        host: esx-01.gpu.sim
        vgpus: {profile: grid_a100-40c, count: 1}
    """
    assert vgpuctl(env, "apply", "-f", str(inventory(tmp_path, base)), "--yes").exit_code == 0
    more = base + "    network: [{type: pvrdma, portgroup: roce-fabric, protocol: rocev2}]\n"
    plan = vgpuctl(env, "plan", "-f", str(inventory(tmp_path, more)))
    assert "~ vm solo  (power off -> reconfigure -> power on)" in plan.output
    assert "+ nic pvrdma on roce-fabric (rocev2)" in plan.output
    result = vgpuctl(env, "apply", "-f", str(inventory(tmp_path, more)), "--yes")
    assert result.exit_code == 0, result.output
    cards = vms(sim)["solo"]["cards"]
    assert [kind for kind, _, _ in cards] == ["VirtualVmxnet3", "VirtualVmxnet3Vrdma"]
    assert vgpuctl(env, "plan", "-f", str(inventory(tmp_path, more)), "--detailed-exitcode").exit_code == 0


def test_pvrdma_on_a_standard_port_group_is_a_located_plan_error(sim: Any, env: dict[str, str],
                                                                tmp_path: Path) -> None:
    inv = inventory(tmp_path, """\
      - name: solo
        template: ubuntu-22.04-ml
        host: esx-01.gpu.sim
        network: [{type: pvrdma, portgroup: mgmt}]
    """)
    result = vgpuctl(env, "plan", "-f", str(inv))
    (problem,) = refused(result)
    assert f"{inv}:7:20: " in problem and "PVRDMA needs a port group of a vSphere Distributed Switch" in problem


def test_the_lean_reader_sees_networks_nics_and_adapters_as_pyvmomi_does(sim: Any, env: dict[str, str],
                                                                          tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """After the pair and a PVRDMA VM are applied: port groups, host NICs (SR-IOV, passthrough, NUMA, root
    bridges), GPU placement and VM adapters read through the lean XML reader equal pyVmomi's own reading."""
    more = PAIR + "    gpudirect_rdma: false\n  - name: rdma-01\n    template: ubuntu-22.04-ml\n" \
        "    host: esx-01.gpu.sim\n    network: [{type: pvrdma, portgroup: roce-fabric, protocol: rocev1}, " \
        "{type: passthrough, device: vmnic5}]\n"
    assert vgpuctl(env, "apply", "-f", str(inventory(tmp_path, more)), "--yes").exit_code == 0
    settings = ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)
    with open_session(settings) as session:
        lean = observe(session).to_dict()
    monkeypatch.setattr(observe_mod, "RAW_VMS", False)
    with open_session(settings) as session:
        full = observe(session).to_dict()
    assert lean.pop("round_trips") == full.pop("round_trips") + 2  # hosts and VMs in their own requests
    assert lean == full
    host = lean["hosts"]["esx-01.gpu.sim"]
    cx7 = [n for n in host["nics"] if n["device_name"] == "MT2910 Family [ConnectX-7]"]
    assert [(n["pci_id"], n["vmnic"], n["numa_node"], n["num_vf"], n["passthru_enabled"]) for n in cx7] == [
        ("0000:18:00.0", "vmnic4", 0, 1, False), ("0000:d8:00.0", "vmnic5", 1, 0, True)]
    assert [g["numa_node"] for g in host["gpus"]] == [0, 0, 1, 1]
    assert all(g["pci_root"] for g in host["gpus"]) and [n["pci_root"] for n in cx7] == ["0000:3a:00.0",
                                                                                         "0000:5d:00.0"]
    kinds = [(n["kind"], n["network"], n["protocol"], n["device"]) for n in lean["vms"]["rdma-01"]["nics"]]
    assert kinds == [("vmxnet3", "mgmt", None, None), ("pvrdma", "roce-fabric", "rocev1", None),
                     ("passthrough", "", None, "0000:d8:00.0")]
    roce = next(n for n in lean["networks"] if n["name"] == "roce-fabric")
    assert roce["kind"] == "distributed" and roce["switch"] == "dvs-roce" and roce["hosts"] == ["esx-01.gpu.sim",
                                                                                                "esx-02.gpu.sim"]


def test_an_adapter_added_behind_the_plans_back_is_drift(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    from pyVim.task import WaitForTask

    base = "  - name: solo\n    template: ubuntu-22.04-ml\n    host: esx-01.gpu.sim\n    power: off\n"
    assert vgpuctl(env, "apply", "-f", str(inventory(tmp_path, base)), "--yes").exit_code == 0
    inv = load_inventory(inventory(tmp_path, base + "    network: [{type: pvrdma, portgroup: roce-fabric}]\n"))
    settings = ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)
    with open_session(settings) as session:
        observed = observe(session)
        plan = make_plan(inv, observed)
        assert plan.errors == [] and len(plan.changes[0].nics) == 1
        si = sim.connect()  # someone else adds an adapter meanwhile
        try:
            content = si.RetrieveContent()
            view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
            vm = next(v for v in view.view if v.name == "solo")
            card = vim.vm.device.VirtualVmxnet3(key=-1, backing=vim.vm.device.VirtualEthernetCard.NetworkBackingInfo(
                deviceName="mgmt"))
            WaitForTask(vm.ReconfigVM_Task(vim.vm.ConfigSpec(deviceChange=[
                vim.vm.device.VirtualDeviceSpec(operation="add", device=card)])))
        finally:
            Disconnect(si)
        result = apply_plan(session, plan, observed)
    (outcome,) = result.vms
    assert outcome.status == "failed" and outcome.fault_type == "DriftError"
    assert "network adapters are" in outcome.message and "not touched, plan again" in outcome.message
