"""Kubernetes manifests for GPU VM classes: every custom resource validates against the upstream CRD schema
(tests/fixtures/crds), the TKG cluster also has the documented v1alpha3 shape, and the licence token never
appears."""

from __future__ import annotations

import copy
import json
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from vgpuctl.cli.main import app
from vgpuctl.domain import ClusterKind
from vgpuctl.errors import UsageError
from vgpuctl.inventory import Inventory, load_inventory_text
from vgpuctl.supervisor.render import OTHER_FILES, VMOP_VERSION, RenderOptions, kind_for_supervisor, render_manifests

TKC = RenderOptions(cluster_kind=ClusterKind.TKC)

pytestmark = pytest.mark.unit

CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "crds"

INVENTORY = """
apiVersion: vgpuctl/v1
vm_classes:
  - {name: gpu-a100-40c, cpus: 16, memory_gb: 128, vgpus: {profile: grid_a100-40c, count: 2}}
  - {name: gpu-small, cpus: 4, memory_gb: 32, vgpus: {profile: grid_a100-10c}}
  - {name: cpu-only, cpus: 4, memory_gb: 16}
namespaces:
  - {name: ml-team, vm_classes: [gpu-a100-40c, gpu-small, cpu-only, best-effort-small]}
  - {name: cpu-team, vm_classes: [cpu-only]}
"""


def _inv(text: str = INVENTORY) -> Inventory:
    return load_inventory_text(textwrap.dedent(text), "inv.yaml")


def _schema(crd_file: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / crd_file).read_text())
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    assert entry["served"] is True, f"{crd_file} {version} is not served"
    return _closed(copy.deepcopy(entry["schema"]["openAPIV3Schema"]))


def _closed(schema: Any) -> Any:
    """Objects that list their properties refuse others (the API server would prune them silently)."""
    if isinstance(schema, dict):
        for value in schema.values():
            _closed(value)
        listed = "properties" in schema and "additionalProperties" not in schema
        if listed and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        for item in schema:
            _closed(item)
    return schema


VM_SCHEMA = _schema("vmoperator.vmware.com_virtualmachines.yaml", VMOP_VERSION)
CLUSTER_SCHEMA = _schema("cluster.x-k8s.io_clusters.yaml", "v1beta1")
# The public TanzuKubernetesCluster CRD has v1alpha2 only; the manifest is v1alpha3 (the vSphere 8 API), whose
# fields that vgpuctl writes keep their v1alpha2 names and places, so the v1alpha2 schema checks them.
TKC_SCHEMA = _schema("run.tanzu.vmware.com_tanzukubernetesclusters.yaml", "v1alpha2")


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_vm_operator_version_is_the_crds_storage_version() -> None:
    crd = yaml.safe_load((CRDS / "vmoperator.vmware.com_virtualmachines.yaml").read_text())
    assert [v["name"] for v in crd["spec"]["versions"] if v.get("storage")] == [VMOP_VERSION]


def test_one_virtual_machine_per_gpu_class_validates_against_the_crd() -> None:
    out = render_manifests(_inv(), "ml-team")
    vms = sorted(k for k in out if k.startswith("virtualmachine-"))
    assert vms == ["virtualmachine-gpu-a100-40c.yaml", "virtualmachine-gpu-small.yaml"]  # cpu-only: no vGPU
    for name in vms:
        (doc,) = _docs(out[name])
        jsonschema.validate(doc, VM_SCHEMA)
        assert doc["apiVersion"] == f"vmoperator.vmware.com/{VMOP_VERSION}" and doc["kind"] == "VirtualMachine"
        assert doc["metadata"]["namespace"] == "ml-team"
    (doc,) = _docs(out["virtualmachine-gpu-small.yaml"])
    assert doc["spec"]["className"] == "gpu-small"


def test_cluster_api_cluster_validates_with_gpu_workers() -> None:
    opts = RenderOptions(cluster_name="train", replicas=3, k8s_version="v1.31.4---vmware.1-fips-vkr.3")
    (doc,) = _docs(render_manifests(_inv(), "ml-team", opts)["cluster.yaml"])
    jsonschema.validate(doc, CLUSTER_SCHEMA)
    topology = doc["spec"]["topology"]
    assert topology["version"] == "v1.31.4---vmware.1-fips-vkr.3"
    workers = topology["workers"]["machineDeployments"]
    assert [(w["name"], w["replicas"], w["variables"]["overrides"]) for w in workers] == [
        ("gpu-a100-40c-workers", 3, [{"name": "vmClass", "value": "gpu-a100-40c"}]),
        ("gpu-small-workers", 3, [{"name": "vmClass", "value": "gpu-small"}]),
    ]


def test_the_schema_check_catches_a_misspelt_field() -> None:
    (doc,) = _docs(render_manifests(_inv(), "ml-team")["cluster.yaml"])
    doc["spec"]["topology"]["workers"]["machineDeployments"][0]["vmClass"] = "gpu-small"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, CLUSTER_SCHEMA)
    (vm,) = _docs(render_manifests(_inv(), "ml-team")["virtualmachine-gpu-small.yaml"])
    vm["spec"]["powerState"] = "On"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(vm, VM_SCHEMA)
    (tkc,) = _docs(render_manifests(_inv(), "ml-team", TKC)["tanzukubernetescluster.yaml"])
    tkc["spec"]["topology"]["nodePools"][0]["class"] = "gpu-small"  # the v1alpha1 name of vmClass
    with pytest.raises(jsonschema.ValidationError, match="'class' was unexpected"):
        jsonschema.validate(tkc, TKC_SCHEMA)


def test_the_tkc_schema_refuses_a_pool_without_its_storage_class() -> None:
    (tkc,) = _docs(render_manifests(_inv(), "ml-team", TKC)["tanzukubernetescluster.yaml"])
    del tkc["spec"]["topology"]["nodePools"][1]["storageClass"]
    with pytest.raises(jsonschema.ValidationError, match="'storageClass' is a required property"):
        jsonschema.validate(tkc, TKC_SCHEMA)


def test_tanzu_kubernetes_cluster_node_pools_validate_against_the_crd() -> None:
    opts = RenderOptions(tkr="v1.30.1---vmware.1-fips-tkg.5", cluster_kind=ClusterKind.TKC)
    (doc,) = _docs(render_manifests(_inv(), "ml-team", opts)["tanzukubernetescluster.yaml"])
    jsonschema.validate(doc, TKC_SCHEMA)
    assert (doc["apiVersion"], doc["kind"]) == ("run.tanzu.vmware.com/v1alpha3", "TanzuKubernetesCluster")
    topology = doc["spec"]["topology"]
    assert set(topology) == {"controlPlane", "nodePools"}
    assert topology["controlPlane"]["vmClass"] == "best-effort-small"
    pools = topology["nodePools"]
    assert [p["vmClass"] for p in pools] == ["gpu-a100-40c", "gpu-small"]
    for pool in pools:
        assert set(pool) == {"name", "replicas", "vmClass", "storageClass", "tkr", "volumes"}
        assert pool["tkr"] == {"reference": {"name": "v1.30.1---vmware.1-fips-tkg.5"}}


def test_gpu_operator_values_and_licensing_never_inline_the_token(tmp_path: Path) -> None:
    token = tmp_path / "my token.tok"
    token.write_text("SECRET-TOKEN-CONTENT")
    opts = RenderOptions(registry="harbor.corp/ai", driver_version="550.90.07", token_file=str(token))
    out = render_manifests(_inv(), "ml-team", opts)
    values = yaml.safe_load(out["gpu-operator-values.yaml"])
    assert values["driver"]["repository"] == "harbor.corp/ai"
    assert values["driver"]["version"] == "550.90.07"
    # GPU Operator v25.10.0 (the default): the licence is a Secret, driver.licensingConfig.secretName
    assert values["driver"]["licensingConfig"] == {"secretName": "licensing-config", "nlsEnabled": True}
    script = out["licensing-secret.sh"]
    assert "kubectl create secret generic licensing-config -n gpu-operator" in script
    assert f"client_configuration_token.tok='{token}'" in script  # the path, shell-quoted
    assert "licensing-configmap.sh" not in out and "configmap" not in script
    assert all("SECRET-TOKEN-CONTENT" not in text for text in out.values())
    assert "FeatureType=1" in out["gridd.conf"]


@pytest.mark.parametrize(("version", "secret"), [("v25.10.0", True), ("25.10.1", True), ("v26.1.0", True),
                                                  ("v25.3.4", False), ("v24.9.2", False)])
def test_operators_before_v25_10_take_the_licence_as_a_config_map(tmp_path: Path, version: str, secret: bool) -> None:
    """GPU Operator release notes, 25.10.0, New Features: the vGPU licensing token may be passed as a Secret
    (`driver.licensingConfig.secretName`; `configMapName` is deprecated there). Older releases know only the
    config map."""
    out = render_manifests(_inv(), "ml-team", RenderOptions(operator_version=version))
    licensing = yaml.safe_load(out["gpu-operator-values.yaml"])["driver"]["licensingConfig"]
    if secret:
        assert licensing == {"secretName": "licensing-config", "nlsEnabled": True}
        assert "licensing-secret.sh" in out and "licensing-configmap.sh" not in out
    else:
        assert licensing == {"configMapName": "licensing-config", "nlsEnabled": True}
        assert "kubectl create configmap licensing-config" in out["licensing-configmap.sh"]
        assert "licensing-secret.sh" not in out


def test_a_gpu_operator_version_that_is_no_release_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"not a release like v25\.10\.0"):
        render_manifests(_inv(), "ml-team", RenderOptions(operator_version="latest"))


def test_namespace_must_be_named_and_use_a_gpu_class() -> None:
    with pytest.raises(UsageError, match="'nope' is not in the inventory's namespaces"):
        render_manifests(_inv(), "nope")
    with pytest.raises(UsageError, match="'cpu-team' uses no VM class with vGPUs"):
        render_manifests(_inv(), "cpu-team")


@pytest.mark.parametrize(
    ("field", "value", "option"),
    [
        ("cluster_name", "gpu\nkind: Secret", "--cluster-name"),
        ("cluster_name", "GPU-Cluster", "--cluster-name"),
        ("cluster_name", "x" * 64, "--cluster-name"),
        ("image", "ubuntu: evil", "--image"),
        ("storage_class", "a b", "--storage-class"),
        ("k8s_version", "v1.30\n  extra: 1", "--k8s-version"),
        ("registry", "harbor.corp/ai\nkind: x", "--registry"),
        ("driver_version", "550.90.07\nversion: 1", "--driver-version"),
    ],
)
def test_a_value_that_is_no_kubernetes_name_is_refused_naming_its_option(field: str, value: str, option: str) -> None:
    opts = RenderOptions(**{field: value})
    if field == "k8s_version":
        opts.tkr = value
    with pytest.raises(UsageError, match=rf"^{option} .*: must be "):
        render_manifests(_inv(), "ml-team", opts)


def test_every_manifest_is_data_whatever_the_names() -> None:
    """Names with dots, digits and dashes at their longest still read back as exactly the fields given."""
    opts = RenderOptions(cluster_name="c" * 63, image="img.v1-2", storage_class="gold.tier-1", registry="h:5000/a/b",
                         driver_version="550.90.07-1_x")  # fmt: skip
    out = render_manifests(_inv(), "ml-team", opts)
    (cluster,) = _docs(out["cluster.yaml"])
    assert cluster["metadata"]["name"] == "c" * 63
    (vm,) = _docs(out["virtualmachine-gpu-small.yaml"])
    assert (vm["spec"]["imageName"], vm["spec"]["storageClass"]) == ("img.v1-2", "gold.tier-1")
    values = yaml.safe_load(out["gpu-operator-values.yaml"])
    assert (values["driver"]["repository"], values["driver"]["version"]) == ("h:5000/a/b", "550.90.07-1_x")
    assert all("&" not in text and "*" not in text for text in out.values())  # no anchors: each value written out


def test_stdout_is_a_kubernetes_object_stream_and_out_writes_every_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    inv = tmp_path / "inv.yaml"
    inv.write_text(textwrap.dedent(INVENTORY))
    result = CliRunner().invoke(app, ["k8s", "render", "-f", str(inv), "-n", "ml-team", "--cluster-kind", "cluster"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("---\n")
    docs = list(yaml.safe_load_all(result.stdout))
    assert all(isinstance(d, dict) and d.get("apiVersion") and d.get("kind") for d in docs), docs
    assert [d["kind"] for d in docs] == ["VirtualMachine", "VirtualMachine", "Cluster"]
    assert "FeatureType" not in result.stdout and "kubectl create configmap" not in result.stdout
    others = ["gpu-operator-values.yaml", "gridd.conf", "licensing-secret.sh"]  # the current operator: a Secret
    assert set(others) <= set(OTHER_FILES)
    assert all(name in result.stderr for name in others) and "--out" in result.stderr
    as_json = CliRunner().invoke(app, ["k8s", "render", "-f", str(inv), "-n", "ml-team", "-o", "json",
                                       "--cluster-kind", "tkc"])
    doc = json.loads(as_json.stdout)
    assert sorted(doc["not_printed"]) == sorted(others) and not set(OTHER_FILES) & set(doc["files"])
    assert doc["cluster_kind"] == "TanzuKubernetesCluster" and "tanzukubernetescluster.yaml" in doc["files"]
    folder = tmp_path / "manifests"
    written = CliRunner().invoke(app, ["k8s", "render", "-f", str(inv), "-n", "ml-team", "--out", str(folder),
                                       "--cluster-kind", "cluster"])
    assert written.exit_code == 0, written.output
    assert all((folder / name).is_file() for name in others)


# ------------------------------------------------------------------------------- one cluster object


@pytest.mark.parametrize("kind", list(ClusterKind))
def test_one_cluster_object_of_the_kind_asked_never_both_with_one_name(kind: ClusterKind) -> None:
    out = render_manifests(_inv(), "ml-team", RenderOptions(cluster_name="train", cluster_kind=kind))
    clusters = [d for name, text in out.items() if name.endswith(".yaml") for d in _docs(text)
                if d.get("kind") in ("Cluster", "TanzuKubernetesCluster")]
    assert [(d["kind"], d["metadata"]["name"]) for d in clusters] == [(kind.object_kind, "train")]
    assert kind.file_name in out and not ({"cluster.yaml", "tanzukubernetescluster.yaml"} - {kind.file_name}) & set(out)


@pytest.mark.parametrize(
    ("services", "kind"),
    [({}, ClusterKind.TKC),  # TKG built into the supervisor (no TKG Service listed)
     ({"tkg.vsphere.vmware.com": "3.0.0"}, ClusterKind.TKC),  # vSphere 8.0 U3's own, before the ClusterClass
     ({"tkg.vsphere.vmware.com": "3.1.0"}, ClusterKind.CLUSTER),
     ({"tkg.vsphere.vmware.com": "v3.3.1+vmware.1"}, ClusterKind.CLUSTER),
     ({"tkg.vsphere.vmware.com": "10.0.0"}, ClusterKind.CLUSTER),
     ({"tkg.vsphere.vmware.com": "unknown"}, ClusterKind.TKC),  # a version it cannot read: the older kind
     ({"velero.vsphere.vmware.com": "1.5.0"}, ClusterKind.TKC)],
)
def test_the_kind_is_what_the_supervisors_tkg_service_takes(services: dict[str, str], kind: ClusterKind) -> None:
    chosen, why = kind_for_supervisor(services)
    assert chosen == kind and "supervisor" in why


def test_without_cluster_kind_or_a_vcenter_render_asks_which(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    for name in ("VGPUCTL_URL", "GOVC_URL"):
        monkeypatch.delenv(name, raising=False)
    inv = tmp_path / "inv.yaml"
    inv.write_text(textwrap.dedent(INVENTORY))
    result = CliRunner().invoke(app, ["k8s", "render", "-f", str(inv), "-n", "ml-team"])
    assert result.exit_code == 1 and result.stdout == ""
    assert "--cluster-kind cluster" in result.stderr and "--cluster-kind tkc" in result.stderr
    bad = CliRunner().invoke(app, ["k8s", "render", "-f", str(inv), "-n", "ml-team", "--cluster-kind", "both"])
    assert bad.exit_code == 1 and "'both' is not one of" in bad.stderr
