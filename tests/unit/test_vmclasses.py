"""VM classes and supervisor namespaces: inventory schema, cross-entry checks, the pure plan and its diff."""

from __future__ import annotations

import textwrap
from typing import Any

import kinds
import pytest

from vgpuctl.errors import InventoryErrors, RestError, UsageError
from vgpuctl.inventory import Inventory, load_inventory_text
from vgpuctl.inventory.classes import iter_problems
from vgpuctl.model import HostChange, Observed, ObservedGpu, ObservedHost, Op
from vgpuctl.records.classes import ClassState, NamespaceState, SupervisorState
from vgpuctl.reports.supervisor import supervisor_plan_report, supervisor_status_report
from vgpuctl.supervisor.stage import planning_base
from vgpuctl.supervisor.vmclasses import SupervisorPlan, desired_class, plan_supervisor
from vgpuctl.vsphere.rest import RestClient, _pinned_adapter, class_body, class_from_json
from vgpuctl.vsphere.session import ConnectionSettings

pytestmark = pytest.mark.unit


def render_text(plan: SupervisorPlan) -> str:
    """The plan's diff as `k8s plan` prints it (its report's text, uncolored)."""
    return supervisor_plan_report(plan).diff_text()

A100_TS = ["grid_a100-10c", "grid_a100-20c", "grid_a100-40c"]
A100_MIG = ["grid_a100-1-5c", "grid_a100-3-20c", "grid_a100-7-40c"]


def _inv(body: str) -> Inventory:
    return load_inventory_text("apiVersion: vgpuctl/v1\n" + textwrap.dedent(body), "inv.yaml")


def _errors(body: str) -> list[str]:
    with pytest.raises(InventoryErrors) as info:
        _inv(body)
    return [e.located() for e in info.value.errors]


def _observed(offered: list[str] | None = None, api: str = "8.0.3.0", limit: int = 8) -> Observed:
    hosts = {
        "esx-01": ObservedHost("esx-01", cluster="WL", offered_profiles=list(offered or A100_TS), api_version=api,
                               max_vgpus_per_vm=limit),
        "esx-09": ObservedHost("esx-09", cluster="Other", offered_profiles=["grid_l40s-48c"]),
    }
    return Observed(hosts=hosts, clusters={"WL": ["esx-01"], "Other": ["esx-09"]})


def _state(**namespaces: list[str]) -> SupervisorState:
    return SupervisorState(
        namespaces={n: NamespaceState(n, "domain-c1", list(c)) for n, c in namespaces.items()},
        supervisor_clusters={"domain-c1": "WL"},
    )


TWO_CLASSES = """
vm_classes:
  - name: gpu-a100-40c
    cpus: 16
    memory_gb: 128
    vgpus: {profile: grid_a100-40c, count: 2}
  - name: gpu-small
    cpus: 4
    memory_gb: 32
    vgpus: [{profile: grid_a100-10c}]
namespaces:
  - name: ml-team
    vm_classes: [gpu-a100-40c, gpu-small]
  - name: data-team
    supervisor: WL
    vm_classes: [gpu-small]
"""


# ---------------------------------------------------------------------------------------------- schema


def test_sections_load_with_both_vgpu_forms() -> None:
    inv = _inv(TWO_CLASSES)
    assert [c.name for c in inv.vm_classes] == ["gpu-a100-40c", "gpu-small"]
    assert inv.vm_classes[0].vgpu_profiles == ["grid_a100-40c", "grid_a100-40c"]
    assert inv.vm_classes[1].vgpu_profiles == ["grid_a100-10c"]
    assert inv.namespaces[1].supervisor == "WL"
    assert list(iter_problems(inv)) == []


def test_empty_sections_are_empty_lists() -> None:
    inv = _inv("vm_classes:\nnamespaces:\n")
    assert inv.vm_classes == [] and inv.namespaces == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("vm_classes:\n  - name: a\n    cpus: 1\n    memory_gb: 4\n    vgpu: {profile: grid_a100-40c}\n",
         "inv.yaml:6:5: vm_classes[0]: unknown key 'vgpu' (did you mean 'vgpus'?)"),
        ("vm_classes:\n  - name: Big_Class\n    cpus: 1\n    memory_gb: 4\n",
         "inv.yaml:3:11: vm_classes[0].name: must be a DNS label"),
        ("vm_classes:\n  - name: a\n    cpus: 1\n    memory_gb: 4\n    vgpus: {profile: a100-40c}\n",
         "inv.yaml:6:5: vm_classes[0].vgpus[0].profile: not a vGPU profile name"),
        ("vm_classes:\n  - name: a\n    cpus: 1\n    memory_gb: 4\n    vgpus: {profile: grid_a100-40c, count: 9}\n",
         "vm_classes[0].vgpus[0].count: must be between 1 and 8"),
        ("vm_classes:\n  - name: a\n    cpus: 1\n    memory_gb: 4\n"
         "    vgpus: [{profile: grid_a100-40c, count: 5}, {profile: grid_a100-20c, count: 4}]\n",
         "inv.yaml:3:5: vm_classes[0]: 9 vGPUs in total; a VM holds at most 8"),
        ("vm_classes:\n  - name: a\n    cpus: 1\n    memory_gb: 4\n"
         "    vgpus: [{profile: grid_a100-40c}, {profile: grid_l40s-48c}]\n",
         "vm_classes[0]: vGPUs of one VM must share a board type (got a100, l40s)"),
        ("vm_classes:\n  - name: a\n    cpus: 1\n    memory_gb: 4\n    memory_reservation: 50\n"
         "    vgpus: {profile: grid_a100-40c}\n",
         "vm_classes[0]: vGPUs need all guest memory reserved"),
        ("vm_classes:\n  - name: a\n    memory_gb: 4\n", "vm_classes[0]: a VM class needs 'cpus' and 'memory_gb'"),
        ("namespaces:\n  - name: ns\n    vm_classes: gpu\n", "namespaces[0].vm_classes: must be a list"),
        ("vm_classes:\n  - name: a\n    cpus: 1\n    memory_gb: 4\n    state: gone\n",
         "vm_classes[0].state: must be 'present' or 'absent'"),
    ],
)
def test_schema_errors_are_located(body: str, expected: str) -> None:
    errors = _errors(body)
    assert any(expected in e for e in errors), errors


def test_absent_class_needs_no_size() -> None:
    inv = _inv("vm_classes:\n  - name: old\n    state: absent\n")
    assert inv.vm_classes[0].state == "absent"


def test_cross_entry_problems() -> None:
    inv = _inv("""
        vm_classes:
          - {name: a, cpus: 1, memory_gb: 4}
          - {name: a, cpus: 2, memory_gb: 4}
          - {name: old, state: absent}
        namespaces:
          - {name: ns, vm_classes: [a, old, a]}
          - {name: ns, vm_classes: []}
        """)
    problems = [e.located() for e in iter_problems(inv)]
    assert problems == [
        "inv.yaml:5:12: vm_classes[1].name: VM class 'a' is defined twice",
        "inv.yaml:8:32: namespaces[0].vm_classes[1]: VM class 'old' has state: absent",
        "inv.yaml:8:37: namespaces[0].vm_classes[2]: VM class 'a' is listed twice",
        "inv.yaml:9:12: namespaces[1].name: namespace 'ns' is listed twice",
    ]


# --------------------------------------------------------------------------------------- desired class


def test_desired_class_reserves_memory_and_leaves_mmio_to_vm_operator() -> None:
    """vm-operator sets 64-bit MMIO and 512 GB on VMs with PCI devices unless the class says otherwise: two
    A100-40C need 256 GB (NVIDIA's table: 128 GB per A100 40GB), so the class sets nothing."""
    inv = _inv(TWO_CLASSES)
    big = desired_class(inv.vm_classes[0])
    assert (big.cpus, big.memory_mb, big.memory_reservation) == (16, 131072, 100)
    assert big.vgpus == ["grid_a100-40c", "grid_a100-40c"]
    assert big.extra_config == {}


def test_desired_class_sets_mmio_where_its_vgpus_need_more_than_vm_operators_default() -> None:
    inv = _inv("""
        vm_classes:
          - {name: h100x4, cpus: 32, memory_gb: 256, vgpus: {profile: grid_h100-80c, count: 4}}
        """)
    assert desired_class(inv.vm_classes[0]).extra_config == {
        "pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "1024"}  # 4 x 256 GB (H100)


def test_an_inventory_mmio_below_the_vgpus_need_is_kept_with_a_warning() -> None:
    inv = _inv("""
        vm_classes:
          - name: tight
            cpus: 4
            memory_gb: 32
            vgpus: {profile: grid_a100-40c, count: 2}
            extra_config: {pciPassthru.64bitMMIOSizeGB: "128"}
        """)
    plan = plan_supervisor(inv, _state(), _observed())
    assert plan.class_changes[0].extra_config == {"pciPassthru.64bitMMIOSizeGB": "128"}
    assert any("below the 256 GB" in w for w in plan.warnings)


def test_desired_class_without_vgpus_and_extra_config_override() -> None:
    inv = _inv("""
        vm_classes:
          - {name: cpu-only, cpus: 2, memory_gb: 8}
          - name: q
            cpus: 2
            memory_gb: 8
            vgpus: {profile: grid_a40-48c}
            extra_config: {pciPassthru.64bitMMIOSizeGB: "512"}
        """)
    plain, q = (desired_class(c) for c in inv.vm_classes)
    assert (plain.memory_reservation, plain.vgpus, plain.extra_config) == (0, [], {})
    assert q.extra_config["pciPassthru.64bitMMIOSizeGB"] == "512"


# ------------------------------------------------------------------------------------------------ plan


def _have(name: str, **over: Any) -> ClassState:
    base: dict[str, Any] = {"cpus": 4, "memory_mb": 32768, "memory_reservation": 100,
                            "vgpus": ["grid_a100-10c"], "extra_config": {}}
    return ClassState(name, **{**base, **over})


def test_mmio_keys_an_earlier_vgpuctl_set_go_so_vm_operators_default_applies() -> None:
    inv = _inv("""
        vm_classes:
          - {name: gpu-small, cpus: 4, memory_gb: 32, vgpus: {profile: grid_a100-10c}}
        """)
    state = _state()
    state.classes = {"gpu-small": _have("gpu-small", extra_config={"pciPassthru.use64bitMMIO": "TRUE",
                                                                   "pciPassthru.64bitMMIOSizeGB": "64"})}
    plan = plan_supervisor(inv, state, _observed())
    assert [c.extra_config for c in plan.class_changes] == [
        {"pciPassthru.use64bitMMIO": None, "pciPassthru.64bitMMIOSizeGB": None}]


def test_plan_creates_classes_and_associations() -> None:
    plan = plan_supervisor(_inv(TWO_CLASSES), _state(**{"ml-team": [], "data-team": ["best-effort-small"]}),
                           _observed())
    assert plan.errors == []
    assert [(c.op, c.name) for c in plan.class_changes] == [(Op.ADD, "gpu-a100-40c"), (Op.ADD, "gpu-small")]
    assert [(n.namespace, n.add, n.remove) for n in plan.namespace_changes] == [
        ("ml-team", ["gpu-a100-40c", "gpu-small"], []),
        ("data-team", ["gpu-small"], []),
    ]
    assert render_text(plan) == textwrap.dedent("""\
        + vm class gpu-a100-40c  (create)
            + cpus 16, memoryMB 131072, cpu reservation 0%, memory reservation 100%
            + vgpu grid_a100-40c
            + vgpu grid_a100-40c
        + vm class gpu-small  (create)
            + cpus 4, memoryMB 32768, cpu reservation 0%, memory reservation 100%
            + vgpu grid_a100-10c
        ~ namespace ml-team
            + vm class gpu-a100-40c
            + vm class gpu-small
        ~ namespace data-team
            + vm class gpu-small
        Plan: 2 VM class(es) to create, 0 to update, 0 to delete, 2 namespace(s) to change.
        """)


def test_plan_is_empty_when_vcenter_matches() -> None:
    inv = _inv(TWO_CLASSES)
    state = _state(**{"ml-team": ["gpu-a100-40c", "gpu-small"], "data-team": ["gpu-small", "best-effort-small"]})
    state.classes = {c.name: desired_class(c) for c in inv.vm_classes}
    plan = plan_supervisor(inv, state, _observed())
    assert plan.is_empty and plan.errors == []
    assert render_text(plan).endswith("No changes: the VM classes and namespaces match the inventory.\n")


def test_plan_updates_profile_count_and_size() -> None:
    inv = _inv("""
        vm_classes:
          - name: gpu-small
            cpus: 8
            memory_gb: 32
            vgpus: {profile: grid_a100-20c, count: 2}
        namespaces:
          - {name: ml-team, vm_classes: [gpu-small]}
        """)
    state = _state(**{"ml-team": ["gpu-small"]})
    state.classes = {"gpu-small": _have("gpu-small")}
    plan = plan_supervisor(inv, state, _observed())
    assert plan.errors == [] and plan.namespace_changes == []
    assert render_text(plan) == textwrap.dedent("""\
        ~ vm class gpu-small  (update)
            ~ cpus: 4 -> 8
            - vgpu grid_a100-10c
            + vgpu grid_a100-20c
            + vgpu grid_a100-20c
        Plan: 0 VM class(es) to create, 1 to update, 0 to delete, 0 namespace(s) to change.
        """)
    assert plan.class_changes[0].desired is not None
    assert plan.class_changes[0].desired.vgpus == ["grid_a100-20c", "grid_a100-20c"]


def test_plan_removes_only_managed_associations() -> None:
    inv = _inv("""
        vm_classes:
          - {name: gpu-small, cpus: 4, memory_gb: 32, vgpus: {profile: grid_a100-10c}}
        namespaces:
          - {name: ml-team, vm_classes: []}
        """)
    state = _state(**{"ml-team": ["gpu-small", "best-effort-small"], "other": ["gpu-small"]})
    state.classes = {"gpu-small": _have("gpu-small"), "best-effort-small": _have("best-effort-small", vgpus=[])}
    plan = plan_supervisor(inv, state, _observed())
    assert [(n.namespace, n.add, n.remove) for n in plan.namespace_changes] == [("ml-team", [], ["gpu-small"])]
    assert plan.class_changes == [] and plan.errors == []


def test_plan_deletes_absent_class_after_namespaces() -> None:
    inv = _inv("""
        vm_classes:
          - {name: old, state: absent}
          - {name: gone-already, state: absent}
          - {name: new, cpus: 2, memory_gb: 8}
        namespaces:
          - {name: ml-team, vm_classes: [new]}
        """)
    state = _state(**{"ml-team": ["old"]})
    state.classes = {"old": _have("old")}
    plan = plan_supervisor(inv, state, _observed())
    assert plan.errors == []
    order = [(type(c).__name__, getattr(c, "name", getattr(c, "namespace", ""))) for c in plan.ordered()]
    assert order == [("ClassChange", "new"), ("NamespaceChange", "ml-team"), ("ClassChange", "old")]
    assert "- vm class old  (delete)" in render_text(plan)


@pytest.mark.parametrize(
    ("inventory", "state", "observed", "expected"),
    [
        pytest.param(
            "vm_classes:\n  - {name: c, cpus: 1, memory_gb: 4, vgpus: {profile: grid_a100-3-20c}}\n"
            "namespaces:\n  - {name: ml-team, vm_classes: [c]}\n",
            _state(**{"ml-team": []}), _observed(),
            ["vm class c: no host of supervisor cluster WL offers grid_a100-3-20c in its current or planned GPU "
             "mode (offered: grid_a100-10c, grid_a100-20c, grid_a100-40c) (namespace ml-team)"],
            id="profile-not-offered"),
        pytest.param(
            "vm_classes:\n  - {name: c, cpus: 1, memory_gb: 4, vgpus: {profile: grid_a100-3-20c}}\n"
            "namespaces:\n  - {name: ml-team, vm_classes: [c]}\n",
            _state(**{"ml-team": []}), _observed(A100_MIG), [], id="offered-in-planned-mig-mode"),
        pytest.param(
            "vm_classes:\n  - {name: c, cpus: 1, memory_gb: 4, vgpus: {profile: grid_a100-10c, count: 5}}\n"
            "namespaces:\n  - {name: ml-team, vm_classes: [c]}\n",
            _state(**{"ml-team": []}), _observed(api="7.0.3.0"),
            ["vm class c: 5 vGPUs exceed vSphere's limit of 4 per VM on supervisor cluster WL (namespace ml-team)"],
            id="over-limit"),
        pytest.param(
            "namespaces:\n  - {name: nope, vm_classes: []}\n", _state(), _observed(),
            ["namespace nope: does not exist (vgpuctl does not create namespaces)"], id="missing-namespace"),
        pytest.param(
            "namespaces:\n  - {name: ml-team, supervisor: Other, vm_classes: []}\n", _state(**{"ml-team": []}),
            _observed(),
            ["namespace ml-team: is on supervisor cluster WL, the inventory says Other (which is not a supervisor "
             "cluster)"], id="not-a-supervisor-cluster"),
        pytest.param(
            "namespaces:\n  - {name: ml-team, vm_classes: []}\n",
            SupervisorState(namespaces={"ml-team": NamespaceState("ml-team", "domain-c9")},
                            supervisor_clusters={"domain-c1": "WL"}),
            _observed(), ["namespace ml-team: its cluster domain-c9 is not a supervisor cluster"],
            id="namespace-off-supervisor"),
        pytest.param(
            "namespaces:\n  - {name: ml-team, vm_classes: [ghost]}\n", _state(**{"ml-team": []}), _observed(),
            ["namespace ml-team: VM class ghost is neither in vm_classes nor in vCenter"], id="unknown-class"),
        pytest.param(
            "vm_classes:\n  - {name: old, state: absent}\n", _state(**{"keep": ["old"]}), _observed(),
            ["vm class old: state is absent but namespace keep, which the inventory does not name, still uses it"],
            id="absent-still-used"),
        pytest.param(
            "vm_classes:\n  - {name: c, cpus: 1, memory_gb: 4, vgpus: {profile: grid_a100-40c}}\n",
            _state(**{"unnamed": ["c"]}), _observed(["grid_a100-10c"]),
            ["vm class c: no host of supervisor cluster WL offers grid_a100-40c in its current or planned GPU mode "
             "(offered: grid_a100-10c) (namespace unnamed)"], id="checked-for-unnamed-users"),
        pytest.param(
            "vm_classes:\n  - {name: c, cpus: 1, memory_gb: 4, vgpus: {profile: grid_a100-40c}}\n"
            "namespaces:\n  - {name: ml-team, vm_classes: [c]}\n",
            _state(**{"ml-team": []}), _observed(["nvidia_a100-40c"]),
            ["vm class c: no host of supervisor cluster WL offers grid_a100-40c in its current or planned GPU mode "
             "(offered: nvidia_a100-40c); the hosts spell it nvidia_a100-40c: use that name (namespace ml-team)"],
            id="other-spelling"),
    ],
)
def test_plan_errors(inventory: str, state: SupervisorState, observed: Observed, expected: list[str]) -> None:
    plan = plan_supervisor(_inv(inventory), state, observed)
    assert plan.errors == expected
    if expected:
        assert render_text(plan).endswith("nothing can be applied.\n")


def test_unused_gpu_class_is_a_warning() -> None:
    inv = _inv("vm_classes:\n  - {name: c, cpus: 1, memory_gb: 4, vgpus: {profile: grid_a100-40c}}\n")
    plan = plan_supervisor(inv, _state(), _observed())
    assert plan.errors == [] and plan.warnings == [
        "vm class c: no namespace uses it, so no host was checked for its vGPUs"]


def test_plan_json_document() -> None:
    plan = plan_supervisor(_inv(TWO_CLASSES), _state(**{"ml-team": [], "data-team": []}), _observed())
    doc = supervisor_plan_report(plan).to_dict()
    assert doc["kind"] == "supervisor_plan"
    assert doc["class_changes"][0]["op"] == "+" and doc["class_changes"][0]["desired"]["memory_reservation"] == 100
    assert doc["summary"] == {"classes_create": 2, "classes_update": 0, "classes_delete": 0, "namespaces_change": 2,
                              "errors": 0, "warnings": 0}


def test_state_round_trips_through_dict() -> None:
    state = _state(**{"ml-team": ["a"]})
    state.classes = {"a": _have("a")}
    assert SupervisorState.from_dict(state.to_dict()) == state


# ------------------------------------------------------------------------------ REST client (fake transport)


class FakeVcenter:
    """A requests transport adapter answering from a table: (method, path) -> list of (status, body)."""

    def __init__(self, routes: dict[tuple[str, str], list[tuple[int, Any]]]):
        import requests.adapters

        self.routes = routes
        self.seen: list[tuple[str, str, dict[str, str], Any]] = []
        outer = self

        class Adapter(requests.adapters.BaseAdapter):
            def send(self, request: Any, **kwargs: Any) -> Any:
                return outer.answer(request)

            def close(self) -> None:
                pass

        self.adapter = Adapter()

    def answer(self, request: Any) -> Any:
        import json
        from urllib.parse import urlsplit

        import requests

        path = urlsplit(request.url).path
        body = json.loads(request.body) if request.body else None
        self.seen.append((request.method, path, dict(request.headers), body))
        queue = self.routes.get((request.method, path)) or [(404, {"error_type": "NOT_FOUND", "messages": []})]
        status, payload = queue.pop(0) if len(queue) > 1 else queue[0]
        response = requests.Response()
        response.status_code = status
        response._content = (payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                             if payload is not None else b"")
        response.url = request.url
        return response

    def client(self, **settings: Any) -> Any:
        import requests

        http = requests.Session()
        http.mount("https://", self.adapter)
        return RestClient(ConnectionSettings(url="vc.example.com", username="u", password="p", **settings), http)


LEGACY_LOGIN = {("POST", "/api/session"): [(404, None)],
                ("POST", "/rest/com/vmware/cis/session"): [(200, {"value": "tok"})]}


def test_rest_login_falls_back_and_sends_the_token() -> None:
    fake = FakeVcenter({**LEGACY_LOGIN, ("GET", "/api/vcenter/namespace-management/virtual-machine-classes"): [
        (200, [{"id": "c", "cpu_count": 2, "memory_mb": 4096, "memory_reservation": 100,
                "devices": {"vgpu_devices": [{"profile_name": "grid_a100-10c"}]},
                "config_spec": {"extraConfig": [{"key": "k", "value": {"_typeName": "string", "_value": "v"}}]}}])]})
    with fake.client() as rest:
        classes = rest.list_vm_classes()
        assert rest.session_path == "/rest/com/vmware/cis/session"
    assert classes == {"c": ClassState("c", 2, 4096, 0, 100, ["grid_a100-10c"], {"k": "v"})}
    method, path, headers, _ = fake.seen[2]
    assert (method, path, headers["vmware-api-session-id"]) == ("GET", "/api/vcenter/namespace-management/"
                                                                "virtual-machine-classes", "tok")
    assert fake.seen[-1][:2] == ("DELETE", "/rest/com/vmware/cis/session")  # logged out on exit


CLASSES = "/api/vcenter/namespace-management/virtual-machine-classes"


def _class_json(memory: int, field: str = "memory_mb") -> dict[str, Any]:
    return {"id": "g", "cpu_count": 8, field: memory, "memory_reservation": 100,
            "devices": {"vgpu_devices": [{"profile_name": "grid_a100-40c"}]}}


def test_rest_api_session_and_class_body() -> None:
    fake = FakeVcenter({("POST", "/api/session"): [(201, "tok2")], ("POST", CLASSES): [(204, None)],
                        ("GET", CLASSES + "/g"): [(200, _class_json(65536))]})
    want = ClassState("g", 8, 65536, 0, 100, ["grid_a100-40c"], {"pciPassthru.use64bitMMIO": "TRUE"})
    with fake.client() as rest:
        rest.create_vm_class(want)
    body = fake.seen[1][3]
    assert body["id"] == "g" and body["memory_MB"] == 65536 and body["memory_reservation"] == 100
    assert "memory_mb" not in body  # the API reference's spelling, read back and found taken
    assert [(m, p) for m, p, _, _ in fake.seen[1:3]] == [("POST", CLASSES), ("GET", CLASSES + "/g")]
    assert body["devices"] == {"vgpu_devices": [{"profile_name": "grid_a100-40c"}]}
    assert body["config_spec"]["extraConfig"] == [{"_typeName": "OptionValue", "key": "pciPassthru.use64bitMMIO",
                                                   "value": {"_typeName": "string", "_value": "TRUE"}}]


def test_a_memory_the_server_did_not_take_is_sent_again_with_the_other_spelling() -> None:
    """A server that ignores `memory_MB` (it knows `memory_mb`): the class reads back without its memory, so it
    is sent again as `memory_mb`, read back right, and the session keeps that spelling for the next class."""
    fake = FakeVcenter({**LEGACY_LOGIN, ("POST", CLASSES): [(200, None)],
                        ("GET", CLASSES + "/g"): [(200, _class_json(0)), (200, _class_json(65536))],
                        ("PATCH", CLASSES + "/g"): [(200, None)]})
    want = ClassState("g", 8, 65536, 0, 100, ["grid_a100-40c"])
    with fake.client() as rest:
        rest.create_vm_class(want)
        assert rest.memory_field == "memory_mb"
    calls = [(m, p, b) for m, p, _, b in fake.seen if p.startswith(CLASSES)]
    assert [(m, p) for m, p, _ in calls] == [("POST", CLASSES), ("GET", CLASSES + "/g"), ("PATCH", CLASSES + "/g"),
                                             ("GET", CLASSES + "/g")]
    assert "memory_MB" in calls[0][2] and calls[2][2]["memory_mb"] == 65536 and "memory_MB" not in calls[2][2]
    assert calls[2][2]["devices"] == {"vgpu_devices": [{"profile_name": "grid_a100-40c"}]}  # the whole class again


def test_a_memory_no_spelling_sets_is_an_error() -> None:
    fake = FakeVcenter({**LEGACY_LOGIN, ("PATCH", CLASSES + "/g"): [(200, None)],
                        ("GET", CLASSES + "/g"): [(200, _class_json(1024, "memory_MB"))]})
    with fake.client() as rest, pytest.raises(RestError, match="reads back as 1024 MB with either spelling"):
        rest.update_vm_class(ClassState("g", 8, 65536, 0, 100, ["grid_a100-40c"]))


@pytest.mark.parametrize("field", ["memory_mb", "memory_MB"])
def test_a_class_is_read_with_either_spelling_of_its_memory(field: str) -> None:
    assert class_from_json(_class_json(4096, field)).memory_mb == 4096


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ((404, {"error_type": "NOT_FOUND", "messages": [{"default_message": "Namespace x not found."}]}),
         "vSphere REST GET /api/vcenter/namespaces/instances/x: 404 not found: Namespace x not found."),
        ((503, b"<html>busy</html>"), "vSphere REST GET /api/vcenter/namespaces/instances/x: 503 server error"),
        ((500, {"type": "com.vmware.vapi.std.errors.internal_server_error",
                "value": {"messages": [{"default_message": "boom"}]}}),
         "vSphere REST GET /api/vcenter/namespaces/instances/x: 500 server error: boom"),
        ((401, None), "vSphere REST GET /api/vcenter/namespaces/instances/x: 401 unauthorized (the session was "
                      "refused)"),
    ],
)
def test_rest_errors_are_one_line(answer: tuple[int, Any], expected: str) -> None:
    fake = FakeVcenter({**LEGACY_LOGIN, ("GET", "/api/vcenter/namespaces/instances/x"): [answer]})
    with fake.client() as rest, pytest.raises(RestError) as info:
        rest.get_namespace("x")
    assert str(info.value) == expected and info.value.status == answer[0]


def test_rest_expired_session_logs_in_again_once() -> None:
    fake = FakeVcenter({**LEGACY_LOGIN, ("GET", "/api/vcenter/namespaces/instances"): [(401, None), (200, [])]})
    with fake.client() as rest:
        assert rest.list_namespaces() == []
    logins = [s for s in fake.seen if s[1] == "/rest/com/vmware/cis/session" and s[0] == "POST"]
    assert len(logins) == 2


def test_rest_wrong_password_and_tls_settings() -> None:
    fake = FakeVcenter({("POST", "/api/session"): [(401, None)]})
    with pytest.raises(RestError, match=r"REST login to https://vc.example.com as 'u' failed: wrong user name"):
        fake.client()
    ok = FakeVcenter({("POST", "/api/session"): [(201, "t")]})
    assert ok.client().verify is True
    assert ok.client(ca_file="/etc/ca.pem").verify == "/etc/ca.pem"
    assert ok.client(insecure=True).verify is False
    pinned = _pinned_adapter("ab" * 32)  # pinning replaces CA verification: urllib3 checks the digest
    assert pinned.poolmanager.connection_pool_kw["assert_fingerprint"] == "ab" * 32
    with pytest.raises(UsageError, match="plain http"):
        RestClient(ConnectionSettings(url="http://vc.example.com", username="u", password="p"))


def test_planned_mig_mode_counts_for_the_offer_check() -> None:
    observed = _observed(A100_TS)
    observed.hosts["esx-01"].gpus = [ObservedGpu("0000:3b:00.0", "NVIDIA A100-PCIE-40GB", memory_kb=40 << 20,
                                                 graphics_type="sharedDirect", vgpu_mode="sameSize")]
    inv = _inv("vm_classes:\n  - {name: c, cpus: 1, memory_gb: 4, vgpus: {profile: grid_a100-3-20c}}\n"
               "namespaces:\n  - {name: ml-team, vm_classes: [c]}\n")
    state = _state(**{"ml-team": []})
    assert plan_supervisor(inv, state, planning_base(observed)).errors != []
    to_mig = [HostChange("esx-01", kinds.MIG, "0000:3b:00.0", "time-sliced", "mig")]
    assert plan_supervisor(inv, state, planning_base(observed, to_mig)).errors == []


def test_status_lists_gpu_classes_and_their_namespaces() -> None:
    state = _state(**{"ml-team": ["big", "cpu"], "data-team": ["big"], "idle": []})
    state.classes = {"big": _have("big", vgpus=["grid_a100-40c", "grid_a100-40c"]), "cpu": _have("cpu", vgpus=[]),
                     "spare": _have("spare")}
    status = supervisor_status_report(state)
    assert status.to_dict()["vm_classes"] == [
        {"vm_class": "big", "vgpus": [{"profile": "grid_a100-40c", "count": 2}], "cpus": 4, "memory_mb": 32768,
         "namespaces": ["data-team", "ml-team"]},
        {"vm_class": "spare", "vgpus": [{"profile": "grid_a100-10c", "count": 1}], "cpus": 4, "memory_mb": 32768,
         "namespaces": []},
    ]
    assert status.render_text().splitlines() == [
        "Supervisor clusters: WL",
        "VM classes with vGPUs:",
        "  big: 2 x grid_a100-40c; 4 CPUs, 32768 MB; used by data-team, ml-team",
        "  spare: 1 x grid_a100-10c; 4 CPUs, 32768 MB; used by no namespace",
    ]


# ------------------------------------------------------------------------------------- Dynamic DirectPath NICs

NIC_CLASS = """
vm_classes:
  - name: gpu-rdma
    cpus: 16
    memory_gb: 128
    vgpus: {profile: grid_a100-40c, count: 2}
    network: [{type: passthrough, device: ConnectX-7}, {device: "15b3:101d", custom_label: fabric-b}]
namespaces:
  - name: ml-team
    vm_classes: [gpu-rdma]
"""


def test_a_class_takes_dynamic_directpath_nics() -> None:
    inv = _inv(NIC_CLASS)
    want = desired_class(inv.vm_classes[0])
    assert want.direct_path == ["15b3:1021", "15b3:101d@fabric-b"] and want.memory_reservation == 100
    plan = plan_supervisor(inv, _state(**{"ml-team": []}), _observed())
    (create,) = plan.class_changes
    assert create.nics_added == ["15b3:1021", "15b3:101d@fabric-b"]
    assert "    + nic passthrough 15b3:1021" in render_text(plan)
    # no host of the supervisor cluster has such a NIC enabled for passthrough: the class's VMs could not start
    assert plan.warnings == [
        "vm class gpu-rdma: no host of supervisor cluster WL has a NIC 15b3:101d@fabric-b enabled for passthrough "
        "(namespace ml-team)",
        "vm class gpu-rdma: no host of supervisor cluster WL has a NIC 15b3:1021 enabled for passthrough "
        "(namespace ml-team)"]
    have = ClassState("gpu-rdma", 16, 131072, 0, 100, ["grid_a100-40c"] * 2,
                      {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "128"}, ["15b3:1021"])
    state = _state(**{"ml-team": ["gpu-rdma"]})
    state.classes["gpu-rdma"] = have
    (update,) = plan_supervisor(inv, state, _observed()).class_changes
    assert (update.op, update.nics_added, update.nics_removed) == (Op.CHANGE, ["15b3:101d@fabric-b"], [])


def test_a_class_refuses_other_adapters_and_unknown_nics() -> None:
    errors = _errors("vm_classes:\n  - name: a\n    cpus: 1\n    memory_gb: 4\n"
                     "    network: [{type: sriov, device: ConnectX-7}, {device: ConnectX-9}]\n")
    assert any("a VM class takes passthrough NICs only (Dynamic DirectPath I/O); 'sriov' adapters" in e
               for e in errors), errors
    assert any("must be a NIC model (ConnectX-6, ConnectX-6 Dx" in e for e in errors), errors


def test_rest_body_and_state_carry_the_direct_path_devices() -> None:
    want = desired_class(_inv(NIC_CLASS).vm_classes[0])
    body = class_body(want, create=True)
    assert body["devices"]["direct_path_io_devices"] == [
        {"vendor_id": 0x15B3, "device_id": 0x1021}, {"vendor_id": 0x15B3, "device_id": 0x101D,
                                                      "custom_label": "fabric-b"}]
    assert class_from_json(body).direct_path == want.direct_path
