"""Kubernetes manifests for the GPU VM classes a supervisor namespace may use, from templates/k8s/ (Jinja2).

`render_manifests(inventory, namespace, options)` returns {file name: text}:
- `virtualmachine-<class>.yaml`: a VM Operator VirtualMachine (vmoperator.vmware.com, VMOP_VERSION) per class;
- `cluster.yaml`: a Cluster API Cluster (cluster.x-k8s.io/v1beta1, ClusterClass topology), one worker
  machine deployment per GPU class (the class as the `vmClass` variable override);
- `tanzukubernetescluster.yaml`: a TKG TanzuKubernetesCluster (run.tanzu.vmware.com/v1alpha3), one node pool
  per GPU class;
- `gpu-operator-values.yaml`, `gridd.conf` and `licensing-secret.sh`: NVIDIA GPU Operator values for vGPU
  guests (driver image from a private registry, licensing through a Secret that the script creates from the
  NLS client token FILE: `driver.licensingConfig.secretName`, GPU Operator v25.10.0 and later); for an older
  operator (`operator_version` below v25.10.0) a config map and `licensing-configmap.sh` instead
  (`configMapName`, deprecated since v25.10.0). The token is never read here nor written into any manifest.
`kubernetes_objects` names the ones that are Kubernetes objects (what `kubectl apply -f` takes); the others are
files for people and scripts. Pure: no I/O besides reading the templates.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from vgpuctl.errors import UsageError
from vgpuctl.supervisor.vmclasses import ClassState, InventorySections, desired_class

VMOP_VERSION = "v1alpha5"  # the storage (current served) version of vm-operator v1.10.0's VirtualMachine CRD
LICENSING_CONFIG_MAP = "licensing-config"  # the name of the licensing Secret (or config map)
SECRET_SINCE = (25, 10, 0)  # GPU Operator release that added driver.licensingConfig.secretName
DEFAULT_OPERATOR_VERSION = "v25.10.0"
OBJECT_FILES = ("cluster.yaml", "tanzukubernetescluster.yaml")  # besides one VirtualMachine per class
# Helm values, config, and the licensing script (the Secret's or, for an older operator, the config map's)
OTHER_FILES = ("gpu-operator-values.yaml", "gridd.conf", "licensing-secret.sh", "licensing-configmap.sh")


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
    opts = options or RenderOptions()
    classes = gpu_classes(inv, namespace)
    env = _environment()
    secret = licensing_with_secret(opts.operator_version)
    context: dict[str, Any] = {
        **vars(opts), "namespace": namespace, "gpu_classes": classes, "vmop_version": VMOP_VERSION,
        "licensing_config_map": LICENSING_CONFIG_MAP, "licensing_secret": secret,
        "pool_name": lambda c: f"{c.name}-workers"[:63],
    }
    out: dict[str, str] = {}
    for c in classes:
        out[f"virtualmachine-{c.name}.yaml"] = env.get_template("virtualmachine.yaml.j2").render(
            **context, vm_class=c, name=f"{c.name}-vm"[:63])
    script = "licensing-secret.sh" if secret else "licensing-configmap.sh"
    for name in (*OBJECT_FILES, "gpu-operator-values.yaml", "gridd.conf", script):
        out[name] = env.get_template(f"{name}.j2").render(**context)
    return out


def kubernetes_objects(manifests: dict[str, str]) -> dict[str, str]:
    """The manifests that are Kubernetes objects, in order: the VirtualMachines, the Cluster, the TKG cluster."""
    return {name: text for name, text in manifests.items() if name not in OTHER_FILES}


def _environment() -> Any:
    import jinja2

    from vgpuctl.guest.targets import templates_dir

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir() / "k8s")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["shell_quote"] = shlex.quote
    return env
