"""VM classes with vGPUs and supervisor namespaces against gpusim's vAPI side, through `vgpuctl k8s`.

Results are read back with plain HTTP (urllib) from the REST API, not through vgpuctl's own client.
The tests run in order on one simulator: apply, re-plan to zero, change, remove, refuse, errors.
"""

from __future__ import annotations

import base64
import json
import ssl
import textwrap
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

FARM = {
    "datacenter": "DC0",
    "clusters": [
        {"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB",
         "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"},
        {"name": "Plain-Cluster", "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB",
         "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"},
    ],
    "templates": [],
    "supervisor": {
        "clusters": ["GPU-Cluster"],
        "vm_classes": [{"name": "best-effort-small", "cpus": 2, "memory_mb": 4096}],
        "namespaces": [
            {"name": "ml-team", "cluster": "GPU-Cluster", "vm_classes": ["best-effort-small"]},
            {"name": "data-team", "cluster": "GPU-Cluster"},
            {"name": "other-team", "cluster": "GPU-Cluster", "vm_classes": ["best-effort-small"]},
        ],
    },
}

INVENTORY = """\
apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
vm_classes:
  - name: gpu-a100-40c
    cpus: 16
    memory_gb: 128
    vgpus: {{profile: grid_a100-40c, count: 2}}
  - name: gpu-small
    cpus: 4
    memory_gb: 32
    vgpus: {small}
namespaces:
  - name: ml-team
    supervisor: GPU-Cluster
    vm_classes: [gpu-a100-40c, gpu-small]
  - name: data-team
    vm_classes: {data}
"""


@pytest.fixture(scope="module")
def sim(gpusim_session_factory: Any) -> Any:
    return gpusim_session_factory(FARM)


@pytest.fixture
def env(sim: Any, no_vgpuctl_env: None) -> dict[str, str]:
    return sim.vgpuctl_env(esxi=False)


def vgpuctl(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def write(tmp_path: Path, small: str = "{profile: grid_a100-10c}", data: str = "[gpu-small]") -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY.format(small=small, data=data))
    return path


class Rest:
    """Plain HTTP against the simulator's REST API (an independent reader)."""

    def __init__(self, sim: Any):
        parts = urlsplit(sim.url)
        self.base = f"https://{parts.netloc}"
        self.ctx = ssl._create_unverified_context()
        auth = base64.b64encode(f"{sim.username}:{sim.password}".encode()).decode()
        req = urllib.request.Request(self.base + "/rest/com/vmware/cis/session", method="POST",
                                     headers={"Authorization": f"Basic {auth}"})
        with urllib.request.urlopen(req, context=self.ctx) as resp:
            self.token = json.load(resp)["value"]

    def get(self, path: str) -> Any:
        req = urllib.request.Request(self.base + path, headers={"vmware-api-session-id": self.token})
        with urllib.request.urlopen(req, context=self.ctx) as resp:
            return json.load(resp)

    def classes(self) -> dict[str, dict[str, Any]]:
        return {c["id"]: c for c in self.get("/api/vcenter/namespace-management/virtual-machine-classes")}

    def namespace_classes(self, name: str) -> list[str]:
        return list(self.get(f"/api/vcenter/namespaces/instances/{name}")["vm_service_spec"]["vm_classes"])


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if not line.startswith("warning: TLS certificate verification")]


def _profiles(cls: dict[str, Any]) -> list[str]:
    return [d["profile_name"] for d in cls["devices"].get("vgpu_devices") or []]


def _extra(cls: dict[str, Any]) -> dict[str, str]:
    return {o["key"]: o["value"]["_value"] for o in (cls.get("config_spec") or {}).get("extraConfig", [])
            if o["value"]["_value"]}


def test_apply_two_gpu_classes_and_two_namespaces(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    result = vgpuctl(env, "k8s", "apply", "-f", str(write(tmp_path)), "--yes")
    assert result.exit_code == 0, result.output
    assert "+ vm class gpu-a100-40c  (create)" in result.output
    rest = Rest(sim)
    classes = rest.classes()
    big, small = classes["gpu-a100-40c"], classes["gpu-small"]
    assert (big["cpu_count"], big["memory_mb"], big["memory_reservation"]) == (16, 131072, 100)
    assert _profiles(big) == ["grid_a100-40c", "grid_a100-40c"]
    assert _extra(big) == {}  # 2 x 128 GB of MMIO: vm-operator's own 512 GB applies
    assert _profiles(small) == ["grid_a100-10c"]
    assert rest.namespace_classes("ml-team") == ["best-effort-small", "gpu-a100-40c", "gpu-small"]
    assert rest.namespace_classes("data-team") == ["gpu-small"]
    assert rest.namespace_classes("other-team") == ["best-effort-small"]  # not named: untouched
    assert _profiles(classes["best-effort-small"]) == []


def test_replan_is_empty(env: dict[str, str], tmp_path: Path) -> None:
    result = vgpuctl(env, "k8s", "plan", "-f", str(write(tmp_path)), "--detailed-exitcode")
    assert result.exit_code == 0, result.output
    assert "No changes" in result.output


def test_plan_json_is_one_document(env: dict[str, str], tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["-o", "json", "k8s", "plan", "-f", str(write(tmp_path))], env=env)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "supervisor_plan" and doc["summary"]["classes_create"] == 0 and doc["errors"] == []


def test_status_lists_gpu_classes_and_namespaces(env: dict[str, str]) -> None:
    result = vgpuctl(env, "k8s", "status")
    assert result.exit_code == 0, result.output
    assert "Supervisor clusters: GPU-Cluster" in result.output
    assert "  gpu-a100-40c: 2 x grid_a100-40c; 16 CPUs, 131072 MB; used by ml-team" in result.output
    assert "  gpu-small: 1 x grid_a100-10c; 4 CPUs, 32768 MB; used by data-team, ml-team" in result.output
    assert "best-effort-small" not in result.output  # no vGPUs


def test_change_profile_and_count(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path, small="{profile: grid_a100-20c, count: 2}")
    plan = vgpuctl(env, "k8s", "plan", "-f", str(path), "--detailed-exitcode")
    assert plan.exit_code == 2, plan.output
    assert "- vgpu grid_a100-10c" in plan.output and plan.output.count("+ vgpu grid_a100-20c") == 2
    assert vgpuctl(env, "k8s", "apply", "-f", str(path), "--yes").exit_code == 0
    small = Rest(sim).classes()["gpu-small"]
    assert _profiles(small) == ["grid_a100-20c", "grid_a100-20c"]
    assert _extra(small) == {}
    assert vgpuctl(env, "k8s", "plan", "-f", str(path), "--detailed-exitcode").exit_code == 0


def test_a_class_whose_vgpus_need_more_mmio_than_vm_operators_default_sets_it(
        sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    """Eight A100-40C need 8 x 128 GB of MMIO (NVIDIA's table), more than vm-operator's 512 GB: the class sets
    1024; back to two A100-20C, the keys go again and vm-operator's default applies."""
    wide = write(tmp_path, small="{profile: grid_a100-40c, count: 8}")
    assert vgpuctl(env, "k8s", "apply", "-f", str(wide), "--yes").exit_code == 0
    assert _extra(Rest(sim).classes()["gpu-small"]) == {"pciPassthru.use64bitMMIO": "TRUE",
                                                         "pciPassthru.64bitMMIOSizeGB": "1024"}
    assert vgpuctl(env, "k8s", "plan", "-f", str(wide), "--detailed-exitcode").exit_code == 0
    back = write(tmp_path, small="{profile: grid_a100-20c, count: 2}")
    assert vgpuctl(env, "k8s", "apply", "-f", str(back), "--yes").exit_code == 0
    assert _extra(Rest(sim).classes()["gpu-small"]) == {}
    assert vgpuctl(env, "k8s", "plan", "-f", str(back), "--detailed-exitcode").exit_code == 0


def test_remove_an_association(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path, small="{profile: grid_a100-20c, count: 2}", data="[]")
    result = vgpuctl(env, "k8s", "apply", "-f", str(path), "--yes")
    assert result.exit_code == 0, result.output
    assert "- vm class gpu-small" in result.output
    rest = Rest(sim)
    assert rest.namespace_classes("data-team") == []
    assert "gpu-small" in rest.classes()  # the class itself stays


def test_refuses_a_profile_no_supervisor_host_offers(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path, small="{profile: grid_a100-3-20c}")
    result = vgpuctl(env, "k8s", "apply", "-f", str(path), "--yes")
    assert result.exit_code == 1
    assert ("error: vm class gpu-small: no host of supervisor cluster GPU-Cluster offers grid_a100-3-20c in its "
            "current or planned GPU mode") in result.output
    assert _profiles(Rest(sim).classes()["gpu-small"]) == ["grid_a100-20c", "grid_a100-20c"]


def test_namespace_on_another_cluster_and_missing_namespace(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent("""\
        apiVersion: vgpuctl/v1
        namespaces:
          - {name: ml-team, supervisor: Plain-Cluster, vm_classes: []}
          - {name: no-such-team, vm_classes: []}
        """))
    result = vgpuctl(env, "k8s", "plan", "-f", str(path))
    assert result.exit_code == 1
    assert ("error: namespace ml-team: is on supervisor cluster GPU-Cluster, the inventory says Plain-Cluster "
            "(which is not a supervisor cluster)") in result.output
    assert "error: namespace no-such-team: does not exist (vgpuctl does not create namespaces)" in result.output


def test_wrong_password_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    result = vgpuctl({**env, "VGPUCTL_PASSWORD": "wrong"}, "k8s", "plan", "-f", str(write(tmp_path)))
    assert result.exit_code == 1
    assert _errors(result.output) == [
        "error: REST login to " + env["VGPUCTL_URL"].removesuffix("/sdk") + " as 'user' failed: wrong user name "
        "or password (401)"]


def test_server_error_stops_apply_without_half_changes(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path, small="{profile: grid_a100-20c, count: 2}", data="[gpu-small, gpu-a100-40c]")
    sim.request("POST", "/vapi/faults", {"method": "PATCH", "path": "/api/vcenter/namespaces/instances/data-team",
                                          "status": 503, "count": 1, "message": "namespace service restarting"})
    result = vgpuctl(env, "k8s", "apply", "-f", str(path), "--yes")
    assert result.exit_code == 1, result.output
    assert ("error: apply stopped at namespace data-team: vSphere REST PATCH "
            "/api/vcenter/namespaces/instances/data-team: 503 server error: namespace service restarting"
            ) in result.output
    assert Rest(sim).namespace_classes("data-team") == []  # the one request failed: nothing half-applied
    again = vgpuctl(env, "k8s", "apply", "-f", str(path), "--yes")
    assert again.exit_code == 0, again.output
    assert Rest(sim).namespace_classes("data-team") == ["gpu-a100-40c", "gpu-small"]


def test_not_found_is_one_line(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    sim.request("POST", "/vapi/faults", {"method": "GET", "path": "/api/vcenter/namespace-management/clusters",
                                          "status": 404, "count": 1})
    result = vgpuctl(env, "k8s", "plan", "-f", str(write(tmp_path)))
    assert result.exit_code == 1
    assert _errors(result.output) == [
        "error: vSphere REST GET /api/vcenter/namespace-management/clusters: 404 not found: gpusim: injected fault"]


def test_expired_session_is_renewed_once(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    sim.request("POST", "/vapi/faults", {"method": "GET", "path": "/api/vcenter/namespaces/instances",
                                          "status": 401, "count": 1})
    result = vgpuctl(env, "k8s", "plan", "-f", str(write(tmp_path, small="{profile: grid_a100-20c, count: 2}",
                                                          data="[gpu-small, gpu-a100-40c]")), "--detailed-exitcode")
    assert result.exit_code == 0, result.output


def test_render_for_the_namespace(env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    closed = {**env, "VGPUCTL_URL": "https://127.0.0.1:1/sdk"}  # with --cluster-kind, render needs no vCenter
    result = vgpuctl(closed, "k8s", "render", "-f", str(write(tmp_path)), "-n", "ml-team", "--out", str(out),
                     "--cluster-kind", "tkc")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu-operator-values.yaml", "gridd.conf", "licensing-secret.sh",
        "tanzukubernetescluster.yaml", "virtualmachine-gpu-a100-40c.yaml", "virtualmachine-gpu-small.yaml"]
    assert (out / "licensing-secret.sh").stat().st_mode & 0o111
    older = tmp_path / "older"
    result = vgpuctl(closed, "k8s", "render", "-f", str(write(tmp_path)), "-n", "ml-team", "--out", str(older),
                     "--gpu-operator-version", "v25.3.4", "--cluster-kind", "cluster")
    assert result.exit_code == 0, result.output
    assert (older / "licensing-configmap.sh").stat().st_mode & 0o111 and not (older / "licensing-secret.sh").exists()
    assert "configMapName: licensing-config" in (older / "gpu-operator-values.yaml").read_text()


TWO_SUPERVISORS = {
    "datacenter": "DC0",
    "clusters": [{"name": name, "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB", "graphics_type": "sharedDirect",
                  "vgpu_mode": "sameSize"} for name in ("New-Cluster", "Old-Cluster")],
    "templates": [],
    "supervisor": {
        "clusters": ["New-Cluster", "Old-Cluster"],
        "namespaces": [{"name": "ml-team", "cluster": "New-Cluster"}, {"name": "data-team", "cluster": "Old-Cluster"}],
        "services": {"New-Cluster": {"tkg.vsphere.vmware.com": "3.1.0"}},  # Old-Cluster: TKG built in
    },
}


def test_render_writes_the_cluster_object_the_namespaces_supervisor_takes(gpusim_factory: Any,
                                                                           tmp_path: Path) -> None:
    """Without --cluster-kind, the supervisor's Supervisor Services decide: TKG Service 3.1 takes the Cluster
    API Cluster, a supervisor without the TKG Service the TanzuKubernetesCluster; one object, never both."""
    import yaml

    two = gpusim_factory(TWO_SUPERVISORS)
    env = two.vgpuctl_env(esxi=False)
    path = write(tmp_path, data="[gpu-small]")
    kinds = {}
    for namespace in ("ml-team", "data-team"):
        result = vgpuctl(env, "k8s", "render", "-f", str(path), "-n", namespace)
        assert result.exit_code == 0, result.output
        docs = list(yaml.safe_load_all(result.stdout))
        kinds[namespace] = [d["kind"] for d in docs if d["kind"] != "VirtualMachine"]
        assert "cluster object:" in result.stderr and "--cluster-kind to choose" in result.stderr
    assert kinds == {"ml-team": ["Cluster"], "data-team": ["TanzuKubernetesCluster"]}
    chosen = vgpuctl(env, "k8s", "render", "-f", str(path), "-n", "data-team", "--cluster-kind", "cluster")
    assert [d["kind"] for d in yaml.safe_load_all(chosen.stdout)][-1] == "Cluster"  # the option wins
    assert "cluster object:" not in chosen.stderr


def test_thumbprint_pinning_covers_the_rest_api(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    import hashlib

    parts = urlsplit(sim.url)
    pem = ssl.get_server_certificate((parts.hostname, parts.port))
    digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()
    pinned = {k: v for k, v in env.items() if k != "VGPUCTL_INSECURE"}
    path = write(tmp_path, small="{profile: grid_a100-20c, count: 2}", data="[gpu-small, gpu-a100-40c]")
    ok = vgpuctl({**pinned, "VGPUCTL_THUMBPRINT": digest}, "k8s", "plan", "-f", str(path))
    assert ok.exit_code == 0, ok.output
    bad = vgpuctl({**pinned, "VGPUCTL_THUMBPRINT": "00" * 32}, "k8s", "plan", "-f", str(path))
    assert bad.exit_code == 1
    assert "error: TLS thumbprint mismatch for https://" in bad.output and bad.output.count("\n") == 1


def test_vgpuctl_plan_and_apply_carry_the_vm_classes(sim: Any, env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent("""\
        apiVersion: vgpuctl/v1
        vcenter: {datacenter: DC0}
        vm_classes:
          - {name: gpu-pipe, cpus: 8, memory_gb: 64, vgpus: {profile: grid_a100-20c}}
        namespaces:
          - {name: other-team, vm_classes: [best-effort-small, gpu-pipe]}
        """))
    plan = vgpuctl(env, "plan", "-f", str(path), "--detailed-exitcode")
    assert plan.exit_code == 2, plan.output
    assert "+ vm class gpu-pipe  (create)" in plan.output and "+ vm class gpu-pipe\n" in plan.output
    applied = CliRunner().invoke(app, ["-o", "json", "apply", "-f", str(path), "--yes"], env=env)
    assert applied.exit_code == 0, applied.output
    outcomes = json.loads(applied.stdout)["vm_class_outcomes"]  # the changes as applied, in the document
    assert [(o["target"], o["action"], o["status"]) for o in outcomes] == [
        ("vm class gpu-pipe", "create", "changed"), ("namespace other-team", "associate", "changed")]
    rest = Rest(sim)
    assert rest.namespace_classes("other-team") == ["best-effort-small", "gpu-pipe"]
    assert _profiles(rest.classes()["gpu-pipe"]) == ["grid_a100-20c"]
    assert vgpuctl(env, "plan", "-f", str(path), "--detailed-exitcode").exit_code == 0
    bad = path.read_text().replace("grid_a100-20c", "grid_a100-7-40c")
    path.write_text(bad)
    refused = vgpuctl(env, "plan", "-f", str(path))
    assert refused.exit_code == 1
    assert "vm class gpu-pipe: no host of supervisor cluster GPU-Cluster offers grid_a100-7-40c" in refused.output


# ------------------------------------------------------------- VM classes in plan's document, saved plans, status

SAVED = """\
apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
vm_classes:
  - {{name: gpu-saved, cpus: 8, memory_gb: 64, vgpus: {{profile: {profile}}}}}
namespaces:
  - {{name: other-team, vm_classes: [gpu-saved]}}
"""


def _saved_inventory(folder: Path, profile: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "saved.yaml"
    path.write_text(SAVED.format(profile=profile))
    return path


def test_plan_json_document_carries_the_class_diff(env: dict[str, str], tmp_path: Path) -> None:
    import jsonschema

    path = _saved_inventory(tmp_path, "grid_a100-10c")
    result = CliRunner().invoke(app, ["-o", "json", "plan", "-f", str(path), "--detailed-exitcode"], env=env)
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)  # the whole of stdout: one document, the class diff inside it
    assert [(c["vm_class"], c["op"]) for c in doc["vm_classes"]] == [("gpu-saved", "+")]
    assert doc["vm_classes"][0]["vgpus_added"] == [{"profile": "grid_a100-10c", "count": 1}]
    assert doc["namespaces"] == [{"namespace": "other-team", "add": ["gpu-saved"], "remove": []}]
    assert doc["summary"]["vm_classes"] == 1 and doc["vm_changes"] == []
    assert "vm class" not in result.stderr
    schema = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "plan.schema.json"
    jsonschema.validate(doc, json.loads(schema.read_text()))


def test_saved_plan_carries_the_classes_and_refuses_changed_ones(sim: Any, env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    path = _saved_inventory(tmp_path, "grid_a100-10c")
    out = tmp_path / "classes.plan"
    made = vgpuctl(env, "plan", "-f", str(path), "--out", str(out))
    assert made.exit_code == 0, made.output
    assert "+ vm class gpu-saved  (create)" in made.stdout
    saved = json.loads(out.read_text())
    assert [c["vm_class"] for c in saved["plan"]["vm_classes"]] == ["gpu-saved"] and " classes:" in saved["basis"]
    meanwhile = _saved_inventory(tmp_path / "someone-else", "grid_a100-20c")  # the class appears with 20c
    assert vgpuctl(env, "k8s", "apply", "-f", str(meanwhile), "--yes").exit_code == 0
    refused = vgpuctl(env, "apply", str(out), "--yes")
    assert refused.exit_code == 1
    assert f"error: the VM classes or namespaces changed since {out} was made" in refused.stderr
    assert _profiles(Rest(sim).classes()["gpu-saved"]) == ["grid_a100-20c"]  # nothing touched
    again = vgpuctl(env, "plan", "-f", str(path), "--out", str(out))
    assert again.exit_code == 0 and "- vgpu grid_a100-20c" in again.stdout
    applied = vgpuctl(env, "apply", str(out), "--yes")
    assert applied.exit_code == 0, applied.output
    assert _profiles(Rest(sim).classes()["gpu-saved"]) == ["grid_a100-10c"]
    assert Rest(sim).namespace_classes("other-team") == ["best-effort-small", "gpu-pipe", "gpu-saved"]


def test_status_lists_vm_classes_with_vgpus_and_their_namespaces(env: dict[str, str]) -> None:
    text = vgpuctl(env, "status")
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert ("vm class gpu-a100-40c  vgpus 2 x grid_a100-40c  cpus 16  memory MB 131072  namespaces data-team, "
            "ml-team") in lines
    assert "vm class gpu-saved  vgpus grid_a100-10c  cpus 8  memory MB 65536  namespaces other-team" in lines
    assert not any("best-effort-small" in line for line in lines)  # no vGPUs
    result = CliRunner().invoke(app, ["-o", "json", "status"], env=env)
    doc = json.loads(result.stdout)
    by_name = {c["vm_class"]: c for c in doc["vm_classes"]}
    assert sorted(by_name) == ["gpu-a100-40c", "gpu-pipe", "gpu-saved", "gpu-small"]
    assert by_name["gpu-pipe"] == {"vm_class": "gpu-pipe", "vgpus": [{"profile": "grid_a100-20c", "count": 1}],
                                   "cpus": 8, "memory_mb": 65536, "namespaces": ["other-team"]}
    assert doc["supervisor_clusters"] == ["GPU-Cluster"] and doc["warnings"] == []


def test_status_rest_failure_is_a_warning(sim: Any, env: dict[str, str]) -> None:
    sim.request("POST", "/vapi/faults", {"method": "GET", "path": "/api/vcenter/namespace-management/clusters",
                                          "status": 503, "count": 0, "message": "wcp restarting"})
    try:
        skipped = vgpuctl(env, "status", "--no-vm-classes")  # asked not to: no REST call meets the fault
        assert skipped.exit_code == 0 and "warning: VM classes" not in skipped.output
        result = vgpuctl(env, "status")
        assert result.exit_code == 0, result.output
        assert ("warning: VM classes not read: vSphere REST GET /api/vcenter/namespace-management/clusters: 503 "
                "server error: wcp restarting") in result.stdout.splitlines()
        assert "vm class" not in result.stdout and "host " in result.stdout  # the farm's part is all there
    finally:
        sim.request("DELETE", "/vapi/faults")


def test_status_without_a_supervisor_lists_no_classes(gpusim_factory: Any, no_vgpuctl_env: None) -> None:
    plain = gpusim_factory({**FARM, "supervisor": None, "clusters": FARM["clusters"][:1]})
    env = plain.vgpuctl_env(esxi=False)
    result = vgpuctl(env, "status")
    assert result.exit_code == 0, result.output
    assert "VM class" not in result.stdout and "vm class" not in result.stdout and "warning" not in result.stdout
    doc = json.loads(CliRunner().invoke(app, ["-o", "json", "status"], env=env).stdout)
    assert (doc["vm_classes"], doc["supervisor_clusters"], doc["warnings"]) == ([], [], [])


def test_a_class_with_a_dynamic_directpath_nic(gpusim_factory: Any, no_vgpuctl_env: None, tmp_path: Path) -> None:
    """A class whose VMs get a ConnectX-7 by Dynamic DirectPath I/O: created with direct_path_io_devices, read back
    to no change; no host has such a NIC enabled for passthrough here, which the plan says."""
    farm = {**FARM, "clusters": [{**FARM["clusters"][0], "nics": [{"model": "ConnectX-7", "passthrough": True}]},
                                 FARM["clusters"][1]]}
    sim = gpusim_factory(farm)
    env = sim.vgpuctl_env(esxi=False)
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent("""\
        apiVersion: vgpuctl/v1
        vcenter: {datacenter: DC0}
        vm_classes:
          - name: gpu-rdma
            cpus: 8
            memory_gb: 64
            vgpus: {profile: grid_a100-40c}
            network: [{type: passthrough, device: ConnectX-7}, {device: "15b3:101d", custom_label: fabric-b}]
        namespaces:
          - {name: data-team, vm_classes: [gpu-rdma]}
        """))
    plan = vgpuctl(env, "k8s", "plan", "-f", str(path))
    assert "    + nic passthrough 15b3:1021" in plan.output
    assert "    + nic passthrough 15b3:101d@fabric-b" in plan.output
    assert ("no host of supervisor cluster GPU-Cluster has a NIC 15b3:101d@fabric-b enabled for passthrough"
            in plan.output)
    assert "has a NIC 15b3:1021 enabled" not in plan.output  # the farm's ConnectX-7 NICs are
    result = vgpuctl(env, "k8s", "apply", "-f", str(path), "--yes")
    assert result.exit_code == 0, result.output
    cls = Rest(sim).classes()["gpu-rdma"]
    assert cls["devices"]["direct_path_io_devices"] == [
        {"vendor_id": 0x15B3, "device_id": 0x1021},
        {"vendor_id": 0x15B3, "device_id": 0x101D, "custom_label": "fabric-b"}]
    assert cls["memory_reservation"] == 100
    again = vgpuctl(env, "k8s", "plan", "-f", str(path), "--detailed-exitcode")
    assert again.exit_code == 0, again.output


@pytest.mark.parametrize("field", ["memory_mb", "memory_MB"])
def test_the_class_memory_lands_whichever_spelling_the_server_honours(
        gpusim_factory: Any, no_vgpuctl_env: None, tmp_path: Path, field: str) -> None:
    """gpusim set to honour one spelling of the class memory field (the other ignored, as an unknown key): vgpuctl
    creates the class, reads it back and, where the memory did not land, sends it again with the other spelling;
    the class has its memory either way and plans to no change."""
    sim = gpusim_factory({**FARM, "supervisor": {**FARM["supervisor"], "memory_field": field}})
    env = sim.vgpuctl_env(esxi=False)
    path = write(tmp_path)
    result = vgpuctl(env, "k8s", "apply", "-f", str(path), "--yes")
    assert result.exit_code == 0, result.output
    classes = Rest(sim).classes()
    assert (classes["gpu-a100-40c"]["memory_mb"], classes["gpu-small"]["memory_mb"]) == (131072, 32768)
    assert vgpuctl(env, "k8s", "plan", "-f", str(path), "--detailed-exitcode").exit_code == 0
