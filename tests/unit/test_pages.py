"""The HTML pages (`status --html`, `show PLANFILE --html`, `runs show --html`) from report fixtures: names from
vCenter and the inventory are escaped, vGPUs and MIG instances are drawn to scale, NVLink sets, held hosts and
unfinished work are marked, and the plan page shows the window's order, every disruption and each VM's before and
after in the text's own words."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import kinds
import pytest

from vgpuctl.domain import ChangeKind, EvacuationKind, Phase, WindowStage
from vgpuctl.hosts.targets import host_waves, planned_waves
from vgpuctl.inventory import HostSpec
from vgpuctl.model import (
    CloneSpec,
    DeviceChange,
    EvacuationAction,
    FieldChange,
    GuestDriverMove,
    HostChange,
    Observed,
    ObservedGpu,
    ObservedHost,
    ObservedProfile,
    ObservedVgpu,
    ObservedVm,
    Op,
    Plan,
    Problem,
    UpgradeWindow,
    VmChange,
)
from vgpuctl.records.perf import StatsInterval, UsageWindow
from vgpuctl.records.work import WORK_FIELD
from vgpuctl.reports.fleet import FleetStatusPart, fleet_status_report
from vgpuctl.reports.html import fleet_status_page, percent, plan_page, status_page
from vgpuctl.reports.plan import disruption_line, plan_lines, plan_report, steps_text
from vgpuctl.reports.status import host_lease, host_state, status_report, with_leases
from vgpuctl.reports.usage import UsageRow, window_row

pytestmark = pytest.mark.unit

HOSTILE_VM = "<script>alert('vm')</script>"
HOSTILE_HOST = 'esx-"><img src=x onerror=alert(1)>'
WORK = '{"run": "r-old", "phase": "reboot", "entered_maintenance": true}'
A100 = {"device_name": "NVIDIA A100-PCIE-40GB", "memory_kb": 40 * 1024 * 1024, "graphics_type": "sharedDirect"}


def farm() -> Observed:
    host = ObservedHost(
        name="esx-01.gpu.example", cluster="GPU-Cluster", default_graphics_type="sharedDirect",
        offered_profiles=["grid_a100-10c", "grid_a100-20c", "grid_a100-3-20c", "grid_a100-1-5c"],
        gpus=[
            ObservedGpu(pci_id="0000:3b:00.0", vgpu_mode="mixedSize", vms=["small", "mid"], nvlink_set=0, **A100),
            ObservedGpu(pci_id="0000:3c:00.0", vgpu_mode="sameSize", nvlink_set=0, **A100),
            ObservedGpu(pci_id="0000:86:00.0", vgpu_mode="multiInstanceGpu", vms=["mig-a", "mig-b"], **A100),
        ],
        profiles={"grid_a100-3-20c": ObservedProfile("grid_a100-3-20c", 20, "mig")},
    )  # fmt: skip
    hostile = ObservedHost(name=HOSTILE_HOST, cluster="GPU-Cluster", offered_profiles=["grid_a100-40c"],
                           gpus=[ObservedGpu(pci_id="0000:af:00.0", vgpu_mode="sameSize", vms=[HOSTILE_VM], **A100)],
                           custom_values={WORK_FIELD: WORK})
    vms = {
        "small": ObservedVm("small", host=host.name, power_state="poweredOn", vgpus=[ObservedVgpu(1, "grid_a100-10c")]),
        "mid": ObservedVm("mid", host=host.name, power_state="poweredOn", vgpus=[ObservedVgpu(1, "grid_a100-20c")]),
        "mig-a": ObservedVm("mig-a", host=host.name, power_state="poweredOn",
                            vgpus=[ObservedVgpu(1, "grid_a100-3-20c")]),
        "mig-b": ObservedVm("mig-b", host=host.name, power_state="poweredOn",
                            vgpus=[ObservedVgpu(1, "grid_a100-1-5c")]),
        HOSTILE_VM: ObservedVm(HOSTILE_VM, host=HOSTILE_HOST, power_state="poweredOn",
                               vgpus=[ObservedVgpu(1, "grid_a100-40c")]),
    }  # fmt: skip
    return Observed(datacenter="DC<0>", hosts={h.name: h for h in (host, hostile)}, vms=vms)


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text, of a page."""

    def __init__(self, page: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def status_html() -> str:
    leases = {"esx-01.gpu.example": host_lease("run-7", "ann@ws pid 4", 1.7e9, 1.7e9 + 30, 60)}
    return status_page(with_leases(status_report(farm()), leases))


def test_names_from_vcenter_are_escaped_never_markup() -> None:
    page = status_html()
    found = Elements(page)
    assert not [t for t, _ in found.tags if t in ("script", "img")]  # the page itself has neither
    assert "&lt;script&gt;alert(&#39;vm&#39;)&lt;/script&gt;" in page
    assert HOSTILE_VM in "".join(found.text) and HOSTILE_HOST in "".join(found.text)  # shown as text
    assert found.having("article", **{"data-host": HOSTILE_HOST})  # an attribute value, quoted
    assert "DC&lt;0&gt;" in page


def test_the_page_loads_nothing_and_runs_nothing() -> None:
    page = status_html()
    csp = Elements(page).having("meta", **{"http-equiv": "Content-Security-Policy"})
    assert csp and "default-src 'none'" in (csp[0]["content"] or "")
    assert not [a for _, a in Elements(page).tags if {"src", "href", "srcset"} & set(a)]  # nothing loaded, no link
    assert "<script" not in page


def segments(page: str, gpu: str) -> list[dict[str, str | None]]:
    """The drawn parts (class seg) of one GPU's bar, in order."""
    found = Elements(page)
    start = next(i for i, (t, a) in enumerate(found.tags) if a.get("data-gpu") == gpu)
    out = []
    for tag, attrs in found.tags[start + 1:]:
        if attrs.get("data-gpu") is not None or tag in ("ul", "article"):
            break
        if "seg" in (attrs.get("class") or "").split():
            out.append(attrs)
    return out


def test_time_sliced_vgpus_are_drawn_to_scale_of_the_framebuffer() -> None:
    parts = segments(status_html(), "0000:3b:00.0")
    widths = [p["style"] for p in parts]
    assert widths == ["width: 25%", "width: 50%", "width: 25%"]  # 10 GB, 20 GB, then 10 GB free of 40
    assert [p["title"] for p in parts[:2]] == ["small: grid_a100-10c, 10 GB", "mid: grid_a100-20c, 20 GB"]
    assert percent(10, 40) == "25%" and percent(1, 3) == "33.33%" and percent(5, 0) == "0%"


def test_mig_instances_are_drawn_to_scale_of_the_memory_slices() -> None:
    page = status_html()
    grid = [a for _, a in Elements(page).tags if "mig" in (a.get("class") or "").split()]
    assert grid and grid[0]["style"] == "grid-template-columns: repeat(8, 1fr)"  # an A100-40GB has 8 slices
    parts = segments(page, "0000:86:00.0")
    assert [p["style"] for p in parts if "free" not in (p["class"] or "")] == ["grid-column: span 4",
                                                                                "grid-column: span 1"]
    assert len([p for p in parts if "free" in (p["class"] or "")]) == 3  # 8 - 4 (3g.20gb) - 1 (1g.5gb)


def test_nvlink_sets_held_hosts_and_unfinished_work_are_marked() -> None:
    found = Elements(status_html())
    nvset = found.having("div", **{"data-nvlink": "0"})
    assert len(nvset) == 1
    held = [a for _, a in found.tags if a.get("data-held") == "run-7"]
    assert held and "held" in (found.having("article", **{"data-host": "esx-01.gpu.example"})[0]["class"] or "")
    report = status_report(farm())
    hostile = next(h for h in report.hosts if h.host == HOSTILE_HOST)
    assert hostile.work is not None and hostile.work.run == "r-old"
    assert [a for _, a in found.tags if a.get("data-work") == "r-old"]
    assert hostile.work.left in host_state(hostile)  # the text says it too
    assert "exit maintenance" in "".join(found.text)


def test_the_vgpu_manager_and_guest_drivers_the_text_shows_are_on_the_page() -> None:
    report = status_report(farm())
    host = next(h for h in report.hosts if h.host == "esx-01.gpu.example")
    host.vgpu_manager, host.vgpu_manager_after_reboot = "550.90.05", "570.124.03"
    next(v for v in report.vms if v.vm == "small").guest_driver = "550.90.07"
    found = Elements(status_page(report))
    text = " ".join(found.text)
    assert [a["data-manager"] for _, a in found.tags if a.get("data-manager")] == ["550.90.05"]
    assert "vGPU Manager 550.90.05 (570.124.03 next boot)" in text  # manager_cell, the text's words
    cells = [a for t, a in found.tags if t == "td" and a.get("data-label") == "guest driver"]
    assert len(cells) == len([v for v in report.vms if v.vgpus]) and "550.90.07" in text
    assert 'data-label="guest driver"' not in status_html()  # no column where no guest driver is known


def test_usage_colours_each_gpu_by_its_average_utilization_and_stranded_framebuffer_is_said() -> None:
    report = status_report(farm())
    gpus = {g.gpu: g for h in report.hosts for g in h.gpus}
    rows = {"0000:3b:00.0": 2.0, "0000:3c:00.0": 12.5, "0000:86:00.0": 95.0}
    for gpu, util in rows.items():
        gpus[gpu].usage = UsageRow(samples=180, covered=True, util_avg=util, util_max=util + 3, peak_from="none",
                                   mem_used_gb=7.5)
    gpus["0000:af:00.0"].usage = UsageRow(samples=0, covered=False, util_avg=None, util_max=None, peak_from="none",
                                          mem_used_gb=None)
    gpus["0000:3b:00.0"].stranded_gb, gpus["0000:3b:00.0"].stranded_why = 10.0, "no offered profile fits 10 GB"

    report.usage_window = window_row(UsageWindow(3600.0, StatsInterval("realtime", 20, 3600, None)))
    found = Elements(status_page(report))
    classes = {a["data-gpu"]: a["class"] for t, a in found.tags if t == "div" and a.get("data-gpu")}
    assert classes == {"0000:3b:00.0": "gpu heat0", "0000:3c:00.0": "gpu heat1", "0000:86:00.0": "gpu heat3",
                       "0000:af:00.0": "gpu"}
    text = " ".join(found.text)
    assert "utilization 95.0% average, 98.0% peak · 7.5 GB memory used" in text
    assert "no usage samples in the window" in text
    assert "10.0 GB free that no offered profile can use" in text
    assert "a GPU's colour is its average utilization" in text
    assert "heat" not in " ".join(a.get("class") or "" for _, a in Elements(status_html()).tags)  # not read: no colour


def test_a_fleets_status_page_has_a_section_per_vcenter_and_says_why_one_is_missing() -> None:
    one = with_leases(status_report(farm()), {})
    report = fleet_status_report([FleetStatusPart("east", "https://vc-east/sdk", one),
                                  FleetStatusPart("west", "https://vc-west/sdk", None,
                                                  "cannot connect: <refused> & gone")], ["north"])
    page = fleet_status_page(report)
    found = Elements(page)
    assert [a["data-vcenter"] for _, a in found.tags if a.get("data-vcenter")] == ["east", "west"]
    text = " ".join(found.text)
    assert "vCenter east" in text and "https://vc-west/sdk" in text
    assert "could not be read: vCenters west" in text and "out of scope (--vcenter): vCenters north" in text
    assert "cannot connect: &lt;refused&gt; &amp; gone" in page  # vCenter's words are text, never markup
    assert len(found.having("article", **{"data-host": HOSTILE_HOST})) == 1  # east's hosts, drawn as on one page
    assert len([a for _, a in found.tags if a.get("data-gpu")]) == 4
    tiles = re.findall(r"<li><b>(\d+)</b>(\w+)</li>", page)
    assert tiles[:3] == [("2", "vCenters"), ("2", "hosts"), ("4", "GPUs")]  # then east's own
    assert "<script" not in page and not [a for _, a in found.tags if {"src", "href"} & set(a)]
    single = Elements(status_page(one))  # one vCenter's page is drawn by the same parts
    assert [t for t in single.tags if t[0] == "article"] == [t for t in found.tags if t[0] == "article"]


def a_plan() -> Plan:
    return Plan(
        vm_changes=[
            VmChange("train-01", fields=[FieldChange("numCPUs", 4, 8)],
                     devices=[DeviceChange(Op.ADD, "grid_a100-40c", group=0),
                              DeviceChange(Op.REMOVE, "grid_a100-20c", 9)],
                     power_off=True, power_on=True, depends_on_hosts=["esx-01"], power_on_rank=1),
            VmChange(HOSTILE_VM, clone=CloneSpec("tmpl", cluster="GPU-Cluster", memory_mb=4096), power_on=True,
                     power_on_rank=0),
            VmChange("old", destroy=True, power_off=True),
        ],
        host_changes=[
            HostChange("esx-01", kinds.MIG, "0000:3b:00.0", "time-sliced", "mig", Phase.REBOOT),
            HostChange("esx-01", ChangeKind.EVACUATE, "train-01", "poweredOn",
                       EvacuationAction(EvacuationKind.HAND_OVER)),
            HostChange("esx-02", kinds.NVLINK, "host", "enabled", "disabled", Phase.REBOOT),
        ],
        host_waves=[["esx-01"], ["esx-02"]],
        warnings=["vm b: something to know"],
    )  # fmt: skip


def test_the_plan_page_shows_the_window_in_order() -> None:
    report = plan_report(a_plan())
    page = plan_page(report, [("plan file", "t.plan")])
    found = Elements(page)
    waves = [a["data-wave"] for _, a in found.tags if a.get("data-wave")]
    assert waves == ["1", "2"]
    text = "".join(found.text)
    assert text.index("Host wave 1: esx-01") < text.index("Host wave 2: esx-02") < text.index("The VMs, in the order")
    vms = [a["data-vm"] for t, a in found.tags if t == "article" and a.get("data-vm")]
    assert vms == ["old", HOSTILE_VM, "train-01"] == report.order.vms  # no rank first, then by power-on rank


def upgrade_window() -> UpgradeWindow:
    def move(vm: str, stage: WindowStage, old: str, new: str) -> GuestDriverMove:
        return GuestDriverMove(vm, "gpu-<guests>", stage, old, new, "files/driver.run", "0" * 64,
                               f"{old} is refused by the new vGPU Manager")

    return UpgradeWindow(batches=[["esx-01"], ["esx-02"]],
                         managers={"esx-01": ["535.154", "550.90"], "esx-02": ["535.154", "550.90"]},
                         before=[move(HOSTILE_VM, WindowStage.BEFORE, "525.60", "535.154")],
                         after=[move("train-01", WindowStage.AFTER, "535.154", "550.90")])


def test_a_driver_upgrade_window_shows_its_guest_drivers_around_the_hosts() -> None:
    plan = a_plan()
    plan.window = upgrade_window()
    report = plan_report(plan)
    found = Elements(plan_page(report, []))
    text = "".join(found.text)
    stages = [a["data-window-stage"] for _, a in found.tags if a.get("data-window-stage")]
    assert stages == ["before", "after"]
    first = f"~ vm {HOSTILE_VM} guest driver: 525.60 -> 535.154  (525.60 is refused by the new vGPU Manager)"
    then = "~ vm train-01 guest driver: 535.154 -> 550.90"
    assert text.index(first) < text.index("Host wave 1") < text.index("Host wave 2") < text.index(then) < text.index(
        "The VMs, in the order")
    assert [line.strip() for line in plan_lines(report) if "guest driver:" in line] == [first, then]  # the text's
    alone = Plan(vm_changes=plan.vm_changes, window=upgrade_window())  # no host changes: the VMs, then the guests
    text = "".join(Elements(plan_page(plan_report(alone), [])).text)
    assert text.index(first) < text.index("The VMs, in the order") < text.index(then)
    broken = Plan(vm_changes=plan.vm_changes, window=upgrade_window(), problems=[Problem("no room for new-01")])
    assert "data-window-stage" not in plan_page(plan_report(broken), [])  # as the text: no window with errors


def test_every_disruption_and_each_vm_before_and_after_in_the_texts_words() -> None:
    report = plan_report(a_plan())
    page = plan_page(report, [])
    found = Elements(page)
    text = " ".join(found.text)
    rows = found.having("tr")
    assert sorted(a["data-disruption"] for a in rows if a.get("data-disruption")) == sorted(
        d.action for d in report.disruptions)
    for d in report.disruptions:
        assert disruption_line(d) in text
    for v in report.vm_changes:
        assert steps_text(v) in text
    assert "grid_a100-20c removed (key 9)" in re.sub(r"\s+", " ", text)
    assert "grid_a100-40c added (NVLink group 0)" in re.sub(r"\s+", " ", text)
    assert "(does not exist)" in text and "destroyed with its disks" in text
    assert "Warning: vm b: something to know" in text
    assert "<script>alert" not in page


def test_a_plan_without_changes_says_so() -> None:
    page = plan_page(plan_report(Plan()), [])
    assert "No changes: the farm matches the inventory." in page
    assert "data-wave" not in page


def test_host_waves_follow_the_smallest_max_unavailable_and_the_text_names_them() -> None:
    assert host_waves([("a", 2), ("b", 3), ("c", 2)]) == [["a", "b"], ["c"]]
    assert host_waves([("a", 1), ("b", 5)]) == [["a"], ["b"]] and host_waves([]) == []
    changes = [HostChange(h, kinds.NVLINK, "host", "enabled", "disabled", Phase.REBOOT) for h in ("c", "a", "b")]
    wide = HostSpec.model_validate({"name": "a", "maintenance": {"max_unavailable": 2}})
    assert planned_waves(changes, {"a": wide, "b": wide, "c": wide}) == [["a", "b"], ["c"]]
    assert planned_waves(changes, {"a": wide}) == [["a"], ["b"], ["c"]]  # a host without an entry: one at a time
    report = plan_report(a_plan())
    assert "Host waves (maintenance.max_unavailable at a time): 1. esx-01; 2. esx-02" in plan_lines(report)
    one = plan_report(Plan(host_changes=a_plan().host_changes[:1], host_waves=[["esx-01"]]))
    assert not [line for line in plan_lines(one) if line.startswith("Host waves")]


def test_without_chromium_the_browser_tests_skip_and_say_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import browser

    monkeypatch.setattr(browser, "find_chromium", lambda: None)
    with pytest.raises(pytest.skip.Exception, match=r"none is installed: apt-get install chromium \(Debian"):
        browser.chromium_or_skip()
