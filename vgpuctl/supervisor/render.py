"""Kubernetes manifests for the GPU VM classes a supervisor namespace may use, from templates/k8s/ (Jinja2).

`render_manifests(inventory, namespace, options)` returns {file name: text}:
- `virtualmachine-<class>.yaml`: a VM Operator VirtualMachine (vmoperator.vmware.com, VMOP_VERSION) per class;
- one cluster object, of the kind the supervisor takes (`RenderOptions.cluster_kind`, never both: two objects of
  one name would be two clusters): `cluster.yaml`, a Cluster API Cluster (cluster.x-k8s.io/v1beta1, ClusterClass
  topology), one worker machine deployment per GPU class (the class as the `vmClass` variable override); or
  `tanzukubernetescluster.yaml`, a TKG TanzuKubernetesCluster (run.tanzu.vmware.com/v1alpha3), one node pool
  per GPU class. `kind_for_supervisor` picks it from the Supervisor Services the supervisor runs;
- `gpu-operator-values.yaml`, `gridd.conf` and `licensing-secret.sh`: NVIDIA GPU Operator values for vGPU
  guests (driver image from a private registry, licensing through a Secret that the script creates from the
  NLS client token FILE: `driver.licensingConfig.secretName`, GPU Operator v25.10.0 and later); for an older
  operator (`operator_version` below v25.10.0) a config map and `licensing-configmap.sh` instead
  (`configMapName`, deprecated since v25.10.0). The token is never read here nor written into any manifest.
`kubernetes_objects` names the ones that are Kubernetes objects (what `kubectl apply -f` takes); the others are
files for people and scripts. Pure: no I/O. Every manifest is data written by the YAML emitter and every name is
checked first: a value holding a newline or a colon is refused, never written as structure.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from vgpuctl import yamlout
from vgpuctl.domain import ClusterKind
from vgpuctl.errors import UsageError
from vgpuctl.inventory.classes import InventorySections
from vgpuctl.lazyclass import dataclass
from vgpuctl.records.classes import ClassState
from vgpuctl.supervisor.vmclasses import desired_class

VMOP_VERSION = "v1alpha5"  # the storage (current served) version of vm-operator v1.10.0's VirtualMachine CRD
LICENSING_CONFIG_MAP = "licensing-config"  # the name of the licensing Secret (or config map)
SECRET_SINCE = (25, 10, 0)  # GPU Operator release that added driver.licensingConfig.secretName
DEFAULT_OPERATOR_VERSION = "v25.10.0"
# Helm values, config, and the licensing script (the Secret's or, for an older operator, the config map's)
OTHER_FILES = ("gpu-operator-values.yaml", "gridd.conf", "licensing-secret.sh", "licensing-configmap.sh")


OBJECT_FILES = tuple(k.file_name for k in ClusterKind)  # the cluster object's, besides one VirtualMachine per class

# The TKG Service runs as a Supervisor Service from vSphere 8.0 U3 (TKG Service 3.0; 3.1 the first release of its
# own), and from its 3.2 the TanzuKubernetesCluster API is deprecated for the Cluster v1beta1 API (vSphere 8.0
# documentation, TKG Service: "Introducing the TKG Service", "TKG Cluster Types"). The Cluster written here names
# the ClusterClass builtin-generic-v3.1.0, which its name ties to TKG Service 3.1: an older TKG Service, or TKG
# built into the Supervisor (no TKG Service listed), gets the TanzuKubernetesCluster, which they all serve.
TKG_SERVICE = "tkg.vsphere.vmware.com"
CLUSTER_CLASS_SINCE = (3, 1)


def kind_for_supervisor(services: Mapping[str, str]) -> tuple[ClusterKind, str]:
    """The cluster object a supervisor takes, from its Supervisor Services (id -> version), and why."""
    version = services.get(TKG_SERVICE)
    if version is None:
        return ClusterKind.TKC, "the supervisor runs TKG itself (no TKG Service, vSphere before 8.0 U3)"
    found = re.match(r"v?(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) < CLUSTER_CLASS_SINCE:
        return ClusterKind.TKC, f"the supervisor runs TKG Service {version}, before 3.1 (no builtin-generic class)"
    return ClusterKind.CLUSTER, f"the supervisor runs TKG Service {version} (its Cluster v1beta1 API)"


@dataclass
class RenderOptions:
    cluster_name: str = "gpu-cluster"
    image: str = "ubuntu-2204-efi"  # VirtualMachineImage name in the namespace
    storage_class: str = "vsan-default-storage-policy"
    k8s_version: str = "v1.30.1---vmware.1-fips-tkg.5"  # Cluster API topology version
    tkr: str = "v1.30.1---vmware.1-fips-tkg.5"  # TanzuKubernetesRelease name
    cluster_class: str = "builtin-generic-v3.1.0"
    worker_class: str = "node-pool"  # machine deployment class of the ClusterClass
    control_plane_class: str = "best-effort-small"
    control_plane_replicas: int = 1
    replicas: int = 1  # workers per GPU class
    registry: str = "registry.example.com/nvidia"
    driver_image: str = "vgpu-guest-driver"
    driver_version: str = "550.90.07"
    pull_secret: str | None = "registry-secret"
    operator_namespace: str = "gpu-operator"
    token_file: str = "client_configuration_token.tok"  # path of the NLS client configuration token file
    gridd_conf: str = "gridd.conf"
    operator_version: str = DEFAULT_OPERATOR_VERSION  # NVIDIA GPU Operator release the values are for
    cluster_kind: ClusterKind = ClusterKind.CLUSTER  # the one cluster object written (kind_for_supervisor)


def operator_release(version: str) -> tuple[int, int, int]:
    """`v25.10.0` or `25.10.0` -> (25, 10, 0); a UsageError for anything else."""
    text = version.strip().removeprefix("v")
    parts = text.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise UsageError(f"GPU Operator version {version!r} is not a release like v25.10.0")
    major, minor, patch = (int(p) for p in parts)
    return major, minor, patch


def licensing_with_secret(version: str) -> bool:
    """Whether the GPU Operator release takes the licence as a Secret (`secretName`, v25.10.0 and later: the
    NLS token belongs in a Secret); older ones only know the config map (`configMapName`)."""
    return operator_release(version) >= SECRET_SINCE


def gpu_classes(inv: InventorySections, namespace: str) -> list[ClassState]:
    """The classes with vGPUs that the inventory lets `namespace` use, in its order."""
    ns = next((n for n in inv.namespaces if n.name == namespace), None)
    if ns is None:
        known = ", ".join(n.name for n in inv.namespaces) or "none"
        raise UsageError(f"namespace {namespace!r} is not in the inventory's namespaces (known: {known})")
    specs = {c.name: c for c in inv.vm_classes if c.state == "present"}
    classes = [desired_class(specs[name]) for name in ns.vm_classes if name in specs]
    classes = [c for c in classes if c.vgpus]
    if not classes:
        raise UsageError(f"namespace {namespace!r} uses no VM class with vGPUs from the inventory's vm_classes")
    return classes


def render_manifests(inv: InventorySections, namespace: str, options: RenderOptions | None = None) -> dict[str, str]:
    """{file name: text} for the namespace's GPU VM classes; every manifest written by the YAML emitter
    (vgpuctl.yamlout) from data, every name checked first (check_options)."""
    opts = options or RenderOptions()
    check_options(opts)
    classes = gpu_classes(inv, namespace)
    out: dict[str, str] = {}
    for c in classes:
        header = f"VM Operator VirtualMachine on the GPU VM class {c.name} ({', '.join(c.vgpus)})."
        out[f"virtualmachine-{c.name}.yaml"] = _yaml([header], virtual_machine(c, namespace, opts))
    pools = f"one {{}} per GPU VM class of namespace {namespace}."
    if opts.cluster_kind == ClusterKind.CLUSTER:
        cluster_header = "Cluster API Cluster (ClusterClass topology): " + pools.format("worker pool")
        out[opts.cluster_kind.file_name] = _yaml([cluster_header], cluster(classes, namespace, opts))
    else:
        out[opts.cluster_kind.file_name] = _yaml(["TKG TanzuKubernetesCluster: " + pools.format("node pool")],
                                                 tanzu_cluster(classes, namespace, opts))  # fmt: skip
    secret = licensing_with_secret(opts.operator_version)
    out["gpu-operator-values.yaml"] = _yaml(values_header(opts, secret), operator_values(opts, secret))
    out["gridd.conf"] = GRIDD_CONF
    out["licensing-secret.sh" if secret else "licensing-configmap.sh"] = licensing_script(opts, secret)
    return out


def kubernetes_objects(manifests: dict[str, str]) -> dict[str, str]:
    """The manifests that are Kubernetes objects, in order: the VirtualMachines, then the cluster object."""
    return {name: text for name, text in manifests.items() if name not in OTHER_FILES}



def values_header(opts: RenderOptions, secret: bool) -> tuple[str, ...]:
    first = "NVIDIA GPU Operator values for vGPU guests: the vGPU guest driver image from the team's private registry,"
    if secret:
        return (first,
                f"licensed through the Secret {LICENSING_CONFIG_MAP} (created from the NLS client token file by",
                f"licensing-secret.sh; the token itself is never in this file). GPU Operator {opts.operator_version}:",
                "driver.licensingConfig.secretName (v25.10.0 and later; configMapName is deprecated there).")
    return (first,
            f"licensed through the config map {LICENSING_CONFIG_MAP} (created from the NLS client token file by",
            f"licensing-configmap.sh; the token itself is never in this file). GPU Operator {opts.operator_version}:",
            "driver.licensingConfig.configMapName (releases before v25.10.0 have no secretName).")  # fmt: skip
GRIDD_CONF = "# NVIDIA licensing client configuration for vGPU guests (FeatureType 1: NVIDIA vGPU).\nFeatureType=1\n"
MANAGED = {"app.kubernetes.io/managed-by": "vgpuctl"}


def _yaml(header: tuple[str, ...] | list[str], document: dict[str, Any]) -> str:
    return "".join(yamlout.comment(line) for line in header) + yamlout.dump(document, compact=False)


def _pool_name(c: ClassState) -> str:
    return f"{c.name}-workers"[:63]


def virtual_machine(c: ClassState, namespace: str, opts: RenderOptions) -> dict[str, Any]:
    return {
        "apiVersion": f"vmoperator.vmware.com/{VMOP_VERSION}",
        "kind": "VirtualMachine",
        "metadata": {"name": f"{c.name}-vm"[:63], "namespace": namespace, "labels": dict(MANAGED)},
        "spec": {"className": c.name, "imageName": opts.image, "storageClass": opts.storage_class,
                 "powerState": "PoweredOn"},
    }  # fmt: skip


def cluster(classes: list[ClassState], namespace: str, opts: RenderOptions) -> dict[str, Any]:
    workers = [
        {"class": opts.worker_class, "name": _pool_name(c), "replicas": opts.replicas,
         "variables": {"overrides": [{"name": "vmClass", "value": c.name}]}}
        for c in classes
    ]  # fmt: skip
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster",
        "metadata": {"name": opts.cluster_name, "namespace": namespace, "labels": dict(MANAGED)},
        "spec": {
            "clusterNetwork": {"services": {"cidrBlocks": ["10.96.0.0/12"]}, "pods": {"cidrBlocks": ["192.168.0.0/16"]},
                               "serviceDomain": "cluster.local"},
            "topology": {
                "class": opts.cluster_class,
                "version": opts.k8s_version,
                "controlPlane": {"replicas": opts.control_plane_replicas},
                "workers": {"machineDeployments": workers},
                "variables": [{"name": "vmClass", "value": opts.control_plane_class},
                              {"name": "storageClass", "value": opts.storage_class}],
            },
        },
    }  # fmt: skip


def tanzu_cluster(classes: list[ClassState], namespace: str, opts: RenderOptions) -> dict[str, Any]:
    tkr = {"reference": {"name": opts.tkr}}
    pools = [
        {"name": _pool_name(c), "replicas": opts.replicas, "vmClass": c.name, "storageClass": opts.storage_class,
         "tkr": tkr, "volumes": [{"name": "containerd", "mountPath": "/var/lib/containerd",
                                  "capacity": {"storage": "50Gi"}}]}
        for c in classes
    ]  # fmt: skip
    return {
        "apiVersion": "run.tanzu.vmware.com/v1alpha3",
        "kind": "TanzuKubernetesCluster",
        "metadata": {"name": opts.cluster_name, "namespace": namespace, "labels": dict(MANAGED)},
        "spec": {"topology": {
            "controlPlane": {"replicas": opts.control_plane_replicas, "vmClass": opts.control_plane_class,
                             "storageClass": opts.storage_class, "tkr": tkr},
            "nodePools": pools,
        }},
    }  # fmt: skip


def operator_values(opts: RenderOptions, secret: bool) -> dict[str, Any]:
    driver: dict[str, Any] = {"enabled": True, "repository": opts.registry, "image": opts.driver_image,
                              "version": opts.driver_version}  # fmt: skip
    if opts.pull_secret:
        driver["imagePullSecrets"] = [opts.pull_secret]
    key = "secretName" if secret else "configMapName"
    driver["licensingConfig"] = {key: LICENSING_CONFIG_MAP, "nlsEnabled": True}
    return {"driver": driver}


def licensing_script(opts: RenderOptions, secret: bool) -> str:
    """The script that makes the licensing Secret (or, for an older GPU Operator, config map) from gridd.conf and
    the token file; every value in it is shell-quoted."""
    q = shlex.quote
    ns, cm = q(opts.operator_namespace), q(LICENSING_CONFIG_MAP)
    what, create = ("Secret", "secret generic") if secret else ("config map", "configmap")
    return (
        "#!/bin/sh\n"
        f"# Creates the GPU Operator's licensing {what} from gridd.conf and the NLS client configuration token\n"
        "# file; the token is read from the file when this runs and never written into a manifest.\n"
        "set -eu\n"
        f"kubectl create namespace {ns} --dry-run=client -o yaml | kubectl apply -f -\n"
        f"kubectl create {create} {cm} -n {ns} \\\n"
        f"  --from-file=gridd.conf={q(opts.gridd_conf)} \\\n"
        f"  --from-file=client_configuration_token.tok={q(opts.token_file)} \\\n"
        "  --dry-run=client -o yaml | kubectl apply -f -\n"
    )


# Kubernetes object names (kubernetes.io/docs/concepts/overview/working-with-objects/names): an RFC 1123 label
# (namespaces, and names that become labels or host names) and a DNS subdomain (most other objects).
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}\Z)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# an OCI image repository (host[:port]/path, lower case) and tag (distribution/reference grammar)
REPOSITORY = re.compile(r"[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]|__|-+)?[a-z0-9]*)*")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")

LABEL_RULE = "a Kubernetes name (RFC 1123 label): lower-case letters, digits and '-', starting and ending with a " \
             "letter or digit, at most 63 characters"  # fmt: skip
SUBDOMAIN_RULE = "a Kubernetes name (DNS subdomain): lower-case letters, digits, '-' and '.', at most 253 characters"


def check_options(opts: RenderOptions) -> None:
    """Refuse (UsageError naming the option) a value that is not what its manifest field takes."""
    checks = [
        ("--cluster-name", opts.cluster_name, DNS_LABEL, LABEL_RULE),
        ("--image", opts.image, DNS_SUBDOMAIN, SUBDOMAIN_RULE),
        ("--storage-class", opts.storage_class, DNS_SUBDOMAIN, SUBDOMAIN_RULE),
        ("--k8s-version", opts.k8s_version, DNS_SUBDOMAIN, SUBDOMAIN_RULE + " (a TanzuKubernetesRelease name)"),
        ("--k8s-version", opts.tkr, DNS_SUBDOMAIN, SUBDOMAIN_RULE + " (a TanzuKubernetesRelease name)"),
        ("--registry", opts.registry, REPOSITORY, "an image repository such as registry.example.com/nvidia"),
        ("--driver-version", opts.driver_version, TAG, "an image tag: letters, digits, '_', '.' and '-'"),
    ]
    for option, value, pattern, rule in checks:
        if not pattern.fullmatch(value):
            raise UsageError(f"{option} {value!r}: must be {rule}")
