"""The lean reader's paging: the next page is asked for as soon as a page's token is read, and the collector pause."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest

from vgpuctl.vsphere import rawread
from vgpuctl.vsphere.netobserve import networks, pci_roots
from vgpuctl.vsphere.objects import Obj
from vgpuctl.vsphere.rawread import LeanRef

pytestmark = pytest.mark.unit

HEAD = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/'
    b'envelope/"><soapenv:Body><RetrievePropertiesExResponse xmlns="urn:vim25"><returnval>'
)
TAIL = b"</returnval></RetrievePropertiesExResponse></soapenv:Body></soapenv:Envelope>"


def vm(moid: str) -> bytes:
    return (
        f'<objects><obj type="VirtualMachine">{moid}</obj><propSet><name>name</name><val>{moid}-name</val>'
        "</propSet></objects>"
    ).encode()


def page(*parts: bytes) -> bytes:
    return HEAD + b"".join(parts) + TAIL


class FakeSent:
    """A sent request whose answer comes in pieces of `size` bytes; records how far it was read."""

    def __init__(self, body: bytes, size: int = 16, log: list[str] | None = None, name: str = "page"):
        self.body, self.size, self.log, self.name = body, size, log if log is not None else [], name
        self.abandoned = False

    def chunks(self) -> Iterator[bytes]:
        for offset in range(0, len(self.body), self.size):
            yield self.body[offset : offset + self.size]
        self.log.append(f"{self.name} read")

    def abandon(self) -> None:
        self.abandoned = True


def test_the_token_is_read_from_the_head() -> None:
    head = rawread.LeadingToken()
    body = page(b"<token>t-1</token>", vm("vm-1"))
    for offset in range(0, len(body), 7):
        head.feed(body[offset : offset + 7])
        if head.done:
            break
    assert head.token == "t-1"
    assert offset < body.index(b"<objects>")  # decided before the first object


def test_no_token_before_the_first_object_means_none_yet() -> None:
    head = rawread.LeadingToken()
    head.feed(page(vm("vm-1"), b"<token>late</token>"))
    assert head.done and head.token is None


def test_a_token_inside_an_object_is_not_the_page_token() -> None:
    head = rawread.LeadingToken()
    head.feed(HEAD + b"<objects><token>inner</token></objects>" + TAIL)
    assert head.done and head.token is None


def test_a_malformed_head_is_left_to_the_whole_parse() -> None:
    head = rawread.LeadingToken()
    head.feed(HEAD.replace(b"<returnval>", b"<returnval><<"))
    assert head.done and head.token is None


def test_the_head_is_not_read_past_its_limit(monkeypatch) -> None:
    monkeypatch.setattr(rawread, "HEAD_LIMIT", 2048)
    head = rawread.LeadingToken()
    head.feed(HEAD + b"<padding>" + b"x" * 4096)
    assert head.done and head.token is None


def test_the_next_page_is_asked_for_before_this_one_is_read_to_its_end() -> None:
    log: list[str] = []
    first = FakeSent(page(b"<token>t-1</token>", vm("vm-1"), vm("vm-2")), log=log, name="first")
    second = FakeSent(page(vm("vm-3")), log=log, name="second")

    def ask_next(token: str) -> FakeSent:
        log.append(f"asked {token}")
        return second

    ret, following = rawread._read_page(first, ask_next)  # type: ignore[arg-type]
    assert log == ["asked t-1", "first read"]
    assert following is second
    assert [o.moid for o in rawread.objects_of(ret, None)] == ["vm-1", "vm-2"]
    ret, following = rawread._read_page(second, ask_next)  # type: ignore[arg-type]
    assert following is None and [o.moid for o in rawread.objects_of(ret, None)] == ["vm-3"]


def test_a_token_after_the_objects_is_followed_once_the_page_is_read() -> None:
    log: list[str] = []
    first = FakeSent(page(vm("vm-1"), b"<token>late</token>"), log=log, name="first")
    second = FakeSent(page(vm("vm-2")), log=log, name="second")

    def ask_next(token: str) -> FakeSent:
        log.append(f"asked {token}")
        return second

    _, following = rawread._read_page(first, ask_next)  # type: ignore[arg-type]
    assert log == ["first read", "asked late"]
    assert following is second


def test_a_page_that_fails_to_parse_abandons_the_next_one() -> None:
    first = FakeSent(HEAD + b"<token>t-1</token>" + vm("vm-1") + b"<broken")
    second = FakeSent(page(vm("vm-2")))
    with pytest.raises(ET.ParseError):
        rawread._read_page(first, lambda token: second)  # type: ignore[arg-type, return-value]
    assert second.abandoned


def test_no_objects_no_returnval() -> None:
    ret, following = rawread._read_page(  # type: ignore[arg-type]
        FakeSent(HEAD.replace(b"<returnval>", b"") + TAIL.replace(b"</returnval>", b"")), lambda token: None
    )
    assert ret is None and following is None and rawread.objects_of(ret, None) == []


XSI = 'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'
DISK = (
    '<VirtualDevice xsi:type="VirtualDisk"><key>2000</key><deviceInfo><label>disk</label></deviceInfo>'
    "</VirtualDevice>"
)
NIC = (
    "<VirtualDevice xsi:type='VirtualE1000'><key>4000</key>"
    '<backing xsi:type="VirtualEthernetCardNetworkBackingInfo"><deviceName>VM Network</deviceName></backing>'
    "</VirtualDevice>"
)
VGPU = (
    '<VirtualDevice xsi:type="VirtualPCIPassthrough"><key>13000</key><backing '
    'xsi:type="VirtualPCIPassthroughVmiopBackingInfo"><vgpu>grid_a100-10c</vgpu></backing></VirtualDevice>'
)


def devices_answer(*devices: str, before: str = "") -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n{before}<Envelope {XSI}><returnval xmlns="urn:vim25"><objects>'
        '<obj type="VirtualMachine">vm-1</obj><propSet><name>config.hardware.device</name>'
        f'<val xsi:type="ArrayOfVirtualDevice">{"".join(devices)}</val></propSet></objects></returnval></Envelope>'
    ).encode()


def read_devices(body: bytes) -> list[tuple[str, int, str | None]]:
    objects = rawread.objects_of(rawread.returnval_of(ET.fromstring(body)), None)
    devices = objects[0].props["config.hardware.device"]
    return [(type(d).__name__, d.key, getattr(d.backing, "vgpu", None)) for d in devices]


def test_devices_the_reader_skips_are_not_parsed() -> None:
    body = devices_answer(DISK, VGPU, NIC, DISK.replace("2000", "2001"), VGPU.replace("13000", "13001"))
    dropped = rawread.drop_unread_devices(body)
    assert dropped.count(b"<VirtualDevice") == 3 and b"VirtualDisk" not in dropped and b"E1000" in dropped
    assert read_devices(dropped) == read_devices(body) == [
        ("vim.vm.device.VirtualPCIPassthrough", 13000, "grid_a100-10c"),
        ("vim.vm.device.VirtualE1000", 4000, None),  # a network adapter: read (vsphere.netobserve)
        ("vim.vm.device.VirtualPCIPassthrough", 13001, "grid_a100-10c"),
    ]


@pytest.mark.parametrize(
    "device",
    [
        '<VirtualDevice xsi:type="VirtualDisk"/>',  # empty
        "<VirtualDevice><key>1</key></VirtualDevice>",  # no type: the reader skips it too
        '<VirtualDevice xsi:type="NoSuchType"><key>1</key></VirtualDevice >',  # unknown type, space in end tag
        '<VirtualDevice\n  xsi:type = "vim25:VirtualDisk" ><key>1</key></VirtualDevice>',
    ],
)
def test_each_form_of_a_skipped_device_is_dropped(device: str) -> None:
    body = devices_answer(device, VGPU)
    dropped = rawread.drop_unread_devices(body)
    assert dropped.count(b"<VirtualDevice") == 1
    assert read_devices(dropped) == read_devices(body)


@pytest.mark.parametrize(
    "device",
    [
        '<VirtualDevice xsi:type="VirtualPCI&#80;assthrough"><key>1</key></VirtualDevice>',  # a reference
        '<VirtualDevice xmlns:o="urn:o" o:type="VirtualPCIPassthrough" xsi:type="VirtualDisk"><key>1</key>'
        "</VirtualDevice>",
        '<VirtualDevice xsi:type="VirtualDisk" note="a>b"><key>1</key></VirtualDevice>',  # ">" in a value
        '<VirtualDeviceList xsi:type="VirtualDisk"><key>1</key></VirtualDeviceList>',  # another element
    ],
)
def test_a_device_that_may_be_read_is_kept(device: str) -> None:
    body = devices_answer(device, DISK)
    dropped = rawread.drop_unread_devices(body)
    assert device.encode() in dropped and b"VirtualDisk\"><key>2000" not in dropped
    assert read_devices(dropped) == read_devices(body)


@pytest.mark.parametrize(
    "body",
    [
        devices_answer(DISK, before="<!-- a comment -->"),
        devices_answer(DISK.replace("<label>disk</label>", "<label><![CDATA[disk]]></label>")),
        devices_answer(DISK, before="<?pi here?>"),
        devices_answer(DISK.replace("</deviceInfo>", f"</deviceInfo>{NIC}")),  # a device inside a device
        devices_answer(DISK.replace("</VirtualDevice>", "")),  # never ends
        devices_answer(DISK.replace("</VirtualDevice>", "</VirtualDeviceX>")),
    ],
)
def test_an_answer_with_markup_the_scan_cannot_see_through_is_kept_whole(body: bytes) -> None:
    assert rawread.drop_unread_devices(body) is body


def pci(device_id: str, vendor: int = 4318, device: int = 8437, tag: str = "<HostPciDevice>") -> str:
    return f"{tag}<id>{device_id}</id><vendorId>{vendor}</vendorId><deviceId>{device}</deviceId></HostPciDevice>"


def gpu(pci_id: str, tag: str = "<pciId>") -> str:
    return f"<HostGraphicsInfo><deviceName>NVIDIA A100</deviceName>{tag}{pci_id}</pciId></HostGraphicsInfo>"


def host(moid: str, pci_devices: list[str], gpus: list[str], first: str = "pci") -> str:
    props = {
        "pci": '<propSet><name>hardware.pciDevice</name><val xsi:type="ArrayOfHostPciDevice">'
        f"{''.join(pci_devices)}</val></propSet>",
        "gpu": '<propSet><name>config.graphicsInfo</name><val xsi:type="ArrayOfHostGraphicsInfo">'
        f"{''.join(gpus)}</val></propSet>",
    }
    second = "gpu" if first == "pci" else "pci"
    return f'<objects><obj type="HostSystem">{moid}</obj>{props[first]}{props[second]}</objects>'


def hosts_answer(*hosts: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Envelope {XSI}><returnval xmlns="urn:vim25">{"".join(hosts)}'
        "</returnval></Envelope>"
    ).encode()


def gpus_joined(body: bytes) -> dict[str, list[tuple[str, int | None, int | None]]]:
    """What observe reads of each host's PCI devices: the one each GPU names, by its pciId."""
    out = {}
    for obj in rawread.objects_of(rawread.returnval_of(ET.fromstring(body)), None):
        by_id = {str(d.id): d for d in obj.props.get("hardware.pciDevice", [])}
        found = [by_id.get(str(g.pciId)) for g in obj.props.get("config.graphicsInfo", [])]
        out[obj.moid] = [(str(d.id), d.vendorId, d.deviceId) if d else ("none", None, None) for d in found]
    return out


def test_pci_devices_no_gpu_of_their_host_names_are_not_parsed() -> None:
    body = hosts_answer(
        host("host-1", [pci("00:01.0", 32902), pci("3b:00.0"), pci("5e:00.0", 4318, 8438), pci("af:00.0")],
             [gpu("3b:00.0"), gpu("5e:00.0")]),
        host("host-2", [pci("af:00.0", 4318, 8439), pci("3b:00.0")], [gpu("af:00.0")], first="gpu"),
    )
    dropped = rawread.drop_unread_devices(body)
    assert dropped.count(b"<HostPciDevice>") == 3  # 3b and 5e on host-1 (not its af), af on host-2
    assert gpus_joined(dropped) == gpus_joined(body) == {
        "host-1": [("3b:00.0", 4318, 8437), ("5e:00.0", 4318, 8438)],
        "host-2": [("af:00.0", 4318, 8439)],
    }


def _device(device_id: str, class_id: int, parent: str | None = None) -> str:
    under = f"<parentBridge>{parent}</parentBridge>" if parent else ""
    return pci(device_id, 5555, 4129).replace("<vendorId>", f"<classId>{class_id}</classId><vendorId>").replace(
        "</HostPciDevice>", f"{under}</HostPciDevice>")


def roots_of(body: bytes) -> dict[str, str | None]:
    """Each kept device's topmost bridge, as netobserve finds it."""
    (obj,) = rawread.objects_of(rawread.returnval_of(ET.fromstring(body)), None)
    by_id = {str(d.id): d for d in obj.props.get("hardware.pciDevice", [])}
    root = pci_roots(by_id)
    return {device_id: root(device_id) for device_id in ("3b:00.0", "5e:00.0", "5e:00.1")}


def test_network_controllers_and_the_bridges_above_them_are_kept_beside_the_gpus() -> None:
    """A ConnectX NIC (class 0x0200, Ethernet; 0x0207 InfiniBand) and the root port and switch above it and the
    GPU (0x0604, their parentBridge chain) are read by netobserve; a USB controller and the bridges above nothing
    read are not."""
    body = hosts_answer(host("host-1", [
        _device("3b:00.0", 0x0302, "3a:00.0"), _device("3a:00.0", 0x0604, "00:01.0"), _device("00:01.0", 0x0604),
        _device("5e:00.0", 0x0200, "5d:00.0"), _device("5e:00.1", 0x0207, "5d:00.0"), _device("5d:00.0", 0x0604),
        _device("00:14.0", 0x0C03, "00:1c.0"), _device("00:1c.0", 0x0604), _device("80:02.0", 0x0604),
    ], [gpu("3b:00.0")]))
    dropped = rawread.drop_unread_devices(body)
    assert dropped.count(b"<HostPciDevice>") == 6
    assert not any(d in dropped for d in (b"00:14.0", b"00:1c.0", b"80:02.0"))
    assert gpus_joined(dropped) == gpus_joined(body)
    assert roots_of(dropped) == roots_of(body) == {"3b:00.0": "00:01.0", "5e:00.0": "5d:00.0", "5e:00.1": "5d:00.0"}


def test_a_parent_in_a_form_the_scan_does_not_read_keeps_every_device() -> None:
    body = hosts_answer(host("host-1", [
        _device("3b:00.0", 0x0302, "3a:00.0").replace("<parentBridge>3a", "<parentBridge>&#51;a"),
        _device("3a:00.0", 0x0604), _device("80:02.0", 0x0604)], [gpu("3b:00.0")]))
    assert rawread.drop_unread_devices(body).count(b"<HostPciDevice>") == 3


@pytest.mark.parametrize(
    ("devices", "gpus"),
    [
        ([pci("3b:00.0"), pci("af:00.0")], [gpu("3b:00.0", tag='<pciId xmlns:o="urn:o">')]),  # an odd pciId tag
        ([pci("3b:00.0"), pci("af:00.0", tag='<HostPciDevice xmlns:o="urn:o">')], [gpu("3b:00.0")]),
        ([pci("3b:00.0"), pci("af:00.0").replace("<id>af", "<id>&#97;f")], [gpu("3b:00.0")]),
        ([pci("3b:00.0"), pci("af:00.0").replace("<id>", "<dynamicType>x</dynamicType><id>")], [gpu("3b:00.0")]),
        ([pci("3b:00.0"), pci("af:00.0").replace("<HostPciDevice>", '<HostPciDevice xmlns="urn:o">')],
         [gpu("3b:00.0")]),
    ],
)
def test_pci_devices_in_a_form_the_scan_does_not_read_are_kept(devices: list[str], gpus: list[str]) -> None:
    body = hosts_answer(host("host-1", devices, gpus))
    dropped = rawread.drop_unread_devices(body)
    assert b"af:00.0" in dropped or b"&#97;f" in dropped
    assert gpus_joined(dropped) == gpus_joined(body)


def test_a_host_that_declares_a_default_namespace_keeps_its_pci_devices() -> None:
    body = hosts_answer(host("host-1", [pci("3b:00.0"), pci("af:00.0")], [gpu("3b:00.0")])).replace(
        b'<val xsi:type="ArrayOfHostPciDevice">', b'<val xmlns="urn:vim25" xsi:type="ArrayOfHostPciDevice">'
    )
    dropped = rawread.drop_unread_devices(body)
    assert dropped.count(b"<HostPciDevice>") == 2
    assert gpus_joined(dropped) == gpus_joined(body)


def test_a_port_group_reaches_the_hosts_that_list_it() -> None:
    """Port groups are read from both sides: govmomi's simulator lists "VM Network" only in each HostSystem.network,
    vCenter also in Network.host; a host either side names reaches it (and a host's network list is read by the
    lean reader as references)."""
    def ref(moid: str, kind: str) -> LeanRef:
        return LeanRef(moid, kind)

    vm_network, mgmt = ref("network-7", "Network"), ref("network-8", "Network")
    objects = {
        "network-7": Obj(vm_network, "Network", {"name": "VM Network", "host": []}),
        "network-8": Obj(mgmt, "Network", {"name": "mgmt", "host": [ref("host-2", "HostSystem")]}),
        "host-1": Obj(ref("host-1", "HostSystem"), "HostSystem", {"name": "esx-01", "network": [vm_network]}),
        "host-2": Obj(ref("host-2", "HostSystem"), "HostSystem", {"name": "esx-02", "network": [vm_network]}),
    }
    found = {n.name: n.hosts for n in networks(objects, set(objects), {"host-1": "esx-01", "host-2": "esx-02"})}
    assert found == {"VM Network": ["esx-01", "esx-02"], "mgmt": ["esx-02"]}
