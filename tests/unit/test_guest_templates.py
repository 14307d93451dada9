"""templates/*.j2 and the Ansible inventory vgpuctl renders for the guests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from vgpuctl.errors import InventoryErrors
from vgpuctl.guest import targets as tg
from vgpuctl.inventory import load_inventory

pytestmark = pytest.mark.unit

INVENTORY = """\
apiVersion: vgpuctl/v1
vcenter: {url: https://vc.example.com/sdk, datacenter: DC0}
vms:
  - name: train-{01..03}
    template: ubuntu-22.04-ml
    vgpus: {profile: grid_a100-40c, count: 2}
    nvlink: required
    guest: {group: trainers}
  - name: infer-01
    template: ubuntu-22.04-ml
    vgpus: [{profile: grid_a100-3-20c, count: 1}]
    guest: {group: inference}
  - name: plain-01
    template: ubuntu-22.04-ml
guests:
  connection: {user: ubuntu, port: 2222, key_file: ~/.ssh/id_ed25519, password_env: GUEST_PW}
  groups:
    trainers:
      roles: [vgpu_guest_driver, vgpu_licensing, nccl, mpi_ssh_trust, horovod, gpu_validate]
      vars:
        vgpu_driver_src: files/NVIDIA-Linux-x86_64-550.90.07-grid.run
        vgpu_license_token_src: /abs/token.tok
        nccl_socket_ifname: ens192
        note: "quotes ' and \\" and: colons"
    inference:
      roles: [vgpu_guest_driver]
    empty-group:
      roles: [gpu_validate]
"""


@pytest.fixture
def inv(tmp_path: Path):
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return load_inventory(path)


def render(inv, addresses, password_file=None):
    targets = tg.build_targets(inv, addresses)
    conn = tg.connection_vars(inv, known_hosts=Path("/state/known_hosts"), password_file=password_file)
    return targets, yaml.safe_load(tg.render_inventory(targets, conn, source="inv.yaml"))


def test_inventory_groups_hosts_and_vars(inv, tmp_path):
    addresses = {"train-01": "10.0.0.1", "train-02": "10.0.0.2", "train-03": "10.0.0.3", "infer-01": "10.0.1.1"}
    targets, data = render(inv, addresses)
    children = data["all"]["children"]
    assert set(children) == {"trainers", "inference", "empty_group"}
    trainers = children["trainers"]
    assert list(trainers["hosts"]) == ["train-01", "train-02", "train-03"]
    host = trainers["hosts"]["train-02"]
    assert host == {
        "ansible_host": "10.0.0.2",
        "vgpuctl_vgpu_count": 2,
        "vgpuctl_vgpu_profile": "grid_a100-40c",
        "vgpuctl_vgpu_profiles": ["grid_a100-40c", "grid_a100-40c"],
        "vgpuctl_nvlink_required": True,
    }
    assert trainers["vars"]["vgpuctl_group"] == "trainers"
    assert trainers["vars"]["vgpuctl_roles"][0] == "vgpu_guest_driver"
    # odd characters survive the YAML round trip
    assert trainers["vars"]["note"] == "quotes ' and \" and: colons"
    assert children["inference"]["hosts"]["infer-01"]["vgpuctl_nvlink_required"] is False
    assert children["empty_group"]["hosts"] in ({}, None)
    # the VM without a guest group is nobody's business here
    assert "plain-01" not in str(data)
    assert targets.problems[-1].subject == "group empty-group"
    assert "has no VMs" in targets.problems[-1].message


def test_relative_controller_paths_resolve_against_the_inventory_folder(inv, tmp_path):
    _, data = render(inv, {"train-01": "10.0.0.1"})
    tvars = data["all"]["children"]["trainers"]["vars"]
    assert tvars["vgpu_driver_src"] == str(tmp_path / "files" / "NVIDIA-Linux-x86_64-550.90.07-grid.run")
    assert tvars["vgpu_license_token_src"] == "/abs/token.tok"
    assert tvars["nccl_socket_ifname"] == "ens192"  # not a path var: untouched


def test_connection_vars_reference_the_password_file_never_the_password(inv, tmp_path, monkeypatch):
    monkeypatch.setenv("GUEST_PW", "hunter2-not-here")
    pw = tmp_path / "pw"
    text = tg.render_inventory(
        tg.build_targets(inv, {"train-01": "10.0.0.1"}),
        tg.connection_vars(inv, known_hosts=Path("/state/kh"), password_file=pw),
    )
    assert "hunter2" not in text
    top = yaml.safe_load(text)["all"]["vars"]
    assert top["ansible_user"] == "ubuntu"
    assert top["ansible_port"] == 2222
    assert top["ansible_ssh_private_key_file"].endswith("/.ssh/id_ed25519")
    assert not top["ansible_ssh_private_key_file"].startswith("~")
    assert str(pw) in top["ansible_password"] and "lookup(" in top["ansible_password"]
    assert "UserKnownHostsFile=/state/kh" in top["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=accept-new" in top["ansible_ssh_common_args"]


def test_vms_without_address_are_left_out_and_reported(inv):
    targets, data = render(inv, {"train-01": "10.0.0.1", "train-02": None})
    assert list(data["all"]["children"]["trainers"]["hosts"]) == ["train-01"]
    unreachable = {p.subject: p for p in targets.problems if p.status == "unreachable"}
    assert set(unreachable) == {"train-02", "train-03", "infer-01"}
    assert "no guest IP" in unreachable["train-02"].message


def test_unknown_role_is_an_inventory_error_with_location(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY.replace("roles: [vgpu_guest_driver]", "roles: [vgpu_guest_driver, cuda]"))
    with pytest.raises(InventoryErrors) as err:
        tg.build_targets(load_inventory(path), {})
    text = str(err.value)
    assert "unknown role 'cuda'" in text
    assert f"{path}:" in text


@pytest.mark.parametrize(
    ("name", "expected"), [("trainers", "trainers"), ("empty-group", "empty_group"), ("1st", "g_1st")]
)
def test_ansible_group_name(name, expected):
    assert tg.ansible_group_name(name) == expected


def test_gridd_conf():
    text = tg.render_template(
        "gridd.conf.j2", vgpu_license_feature_type="4", vgpu_license_gridd_extra={"EnableUI": "FALSE"}
    )
    lines = [x for x in text.splitlines() if x and not x.startswith("#")]
    assert lines == ["FeatureType=4", "EnableUI=FALSE"]


def test_nccl_conf_leaves_out_empty_values():
    text = tg.render_template(
        "nccl.conf.j2",
        nccl_socket_ifname="ens192",
        nccl_ib_hca="mlx5_0:1,mlx5_1:1",
        nccl_ib_traffic_class=106,
        nccl_ib_gid_index="",
        nccl_extra={"NCCL_NET_GDR_LEVEL": "PHB"},
    )
    lines = [x for x in text.splitlines() if x and not x.startswith("#")]
    assert lines == [
        "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1",
        "NCCL_IB_TC=106",
        "NCCL_SOCKET_IFNAME=ens192",
        "NCCL_NET_GDR_LEVEL=PHB",
    ]
    assert "GID_INDEX" not in text


def test_hostfile():
    text = tg.render_template(
        "hostfile.j2", hostfile_hosts=[{"name": "train-01", "slots": 4}, {"name": "b", "slots": "2"}]
    )
    # every line, no comments or blank lines: horovodrun's --hostfile parser takes each line as "host slots=N"
    assert text.splitlines() == ["train-01 slots=4", "b slots=2"]


def test_role_templates_are_the_shared_ones():
    roles = Path(__file__).resolve().parents[2] / "playbooks" / "roles"
    shared = [("vgpu_licensing", "gridd.conf.j2"), ("nccl", "nccl.conf.j2"), ("train_launcher", "hostfile.j2")]
    for role, name in shared:
        link = roles / role / "templates" / name
        assert link.resolve() == (tg.templates_dir() / name).resolve(), link


def test_names_in_the_ansible_inventory_stay_keys_and_values(tmp_path):
    """A VM name with a colon and a hash, a variable name and value with line breaks and YAML words: each reads back
    as exactly itself, and no group, host or variable appears that the inventory does not have."""
    odd = '        "odd: key\\nall:": "yes"\n        other: "x\\n  children: {}"\n'
    text = INVENTORY.replace("name: infer-01", "name: 'web: 01 #x'").replace('        note: "quotes',
                                                                           odd + '        note: "quotes')
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    targets, data = render(load_inventory(path), {"web: 01 #x": "10.0.1.1", "train-01": "10.0.0.1"})
    assert list(data) == ["all"] and set(data["all"]) == {"vars", "children"}
    assert list(data["all"]["children"]["inference"]["hosts"]) == ["web: 01 #x"]
    trainer_vars = data["all"]["children"]["trainers"]["vars"]
    assert trainer_vars["odd: key\nall:"] == "yes" and trainer_vars["other"] == "x\n  children: {}"
    rendered = tg.render_inventory(targets, {}, source="a\nall: {}")
    assert rendered.splitlines()[0] == "# Rendered by vgpuctl from a\\nall: {}; one group per guest group, guest " \
                                       "addresses read from vSphere."  # fmt: skip


def test_a_setting_the_playbooks_write_as_a_line_must_be_one_line(tmp_path):
    """nccl.conf and gridd.conf are KEY=VALUE lines: a value with a line break, or a key that is no setting name,
    would add settings of its own; refused when the targets are built, located."""
    odd = '        nccl_extra: {"A=1\\nB": x, NCCL_DEBUG_SUBSYS: "INIT\\nNCCL_IB_DISABLE=1"}\n'
    text = INVENTORY.replace("nccl_socket_ifname: ens192", 'nccl_socket_ifname: "ens192\\nNCCL_P2P_DISABLE=1"')
    path = tmp_path / "inv.yaml"
    path.write_text(text.replace('        note: "quotes', odd + '        note: "quotes'))
    with pytest.raises(InventoryErrors) as err:
        tg.build_targets(load_inventory(path), {})
    text = str(err.value)
    assert "guests.groups.trainers.vars.nccl_socket_ifname: must be one line" in text
    assert "is no setting name" in text and "nccl_extra.NCCL_DEBUG_SUBSYS: must be one line" in text
    assert f"{path}:" in text
def test_rdma_adapters_and_gpudirect_reach_the_guest_vars(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent("""\
        apiVersion: vgpuctl/v1
        vms:
          - name: train-{01..02}
            vgpus: {profile: grid_a100-40c}
            gpudirect_rdma: true
            network:
              - {portgroup: mgmt}
              - {type: sriov, device: ConnectX-7, portgroup: roce, traffic_class: 106}
            guest:
              group: trainers
              identity: {addresses: {roce: {pool: 10.0.40.10-10.0.40.19/24}}}
        guests: {groups: {trainers: {roles: [rdma_roce, nccl]}}}
        """))
    _, data = render(load_inventory(path), {"train-01": "10.0.0.1", "train-02": "10.0.0.2"})
    host = data["all"]["children"]["trainers"]["hosts"]["train-02"]
    assert host["vgpuctl_rdma_adapters"] == [
        {"type": "sriov", "portgroup": "roce", "address": "10.0.40.11", "prefix": 24, "traffic_class": 106}]
    assert host["vgpuctl_gpudirect_rdma"] is True
