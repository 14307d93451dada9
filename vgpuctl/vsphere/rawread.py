"""A lean reader for the biggest bulk reads: VirtualMachine and HostSystem properties straight from the SOAP XML.

The RetrievePropertiesEx request is pyVmomi's (one counted round trip); the next page is asked for as soon as a
page's token is read; the devices vgpuctl never reads are cut out of the answer (`drop_unread_devices`), the rest
is parsed with ElementTree and only what vgpuctl reads is converted: PCI passthrough devices as real pyVmomi
objects (so `observe.split_devices` alone decides what a vGPU is), host graphics fields as plain namespaces.
"""

from __future__ import annotations

import gzip
import io
import re
import threading
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Callable, Generator
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from vgpuctl.vsphere.objects import Obj, view_filter_spec
from vgpuctl.vsphere.vimtypes import device_types

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

NS = "urn:vim25"
XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"
_Q = "{" + NS + "}"

_class_cache: dict[str, Any] = {}
_class_lock = threading.Lock()

CHUNK = 64 * 1024  # bytes read from the connection at a time
HEAD_LIMIT = 64 * 1024  # how far into a page its token is looked for before the page is parsed whole


class SentRequest:
    """One counted SOAP request on its own pooled connection, its answer not read yet: a page's answer can wait
    while the page before it is parsed."""

    def __init__(self, stub: Any, mo: Any, method: str, args: list[Any]):
        import http.client

        self.stub = stub
        self.info = mo._GetMethodInfo(method)
        request = stub.SerializeRequest(mo, self.info, args)
        sent_early = getattr(stub, "sent_early", None)
        self.early = sent_early(request) if sent_early is not None else None  # vsphere/earlyread.py
        if self.early is not None:
            stub.count_round_trip()
            return
        headers = {
            "Cookie": stub.cookie,
            "SOAPAction": stub.versionId,
            "Content-Type": "text/xml; charset=UTF-8",
            "Accept-Encoding": "gzip",
        }
        stub.count_round_trip()
        self.conn: Any = stub.GetConnection()
        try:
            self.conn.request("POST", stub.path, request, headers)
        except (OSError, http.client.HTTPException):
            self._drop()
            raise

    def chunks(self) -> Generator[bytes, None, None]:
        """The 200 answer's body as it arrives (gunzipped); a SOAP fault is raised as pyVmomi's fault."""
        import http.client

        if self.early is not None:
            answer = self.early.result()
            if answer.status != 200:
                self._raise_fault(answer.status, answer.reason, answer.body)
            yield answer.body
            return
        try:
            resp = self.conn.getresponse()
            gzipped = (resp.getheader("Content-Encoding") or "").lower() == "gzip"
            if resp.status != 200:
                body = resp.read()
                self.stub.ReturnConnection(self.conn)
                self._raise_fault(resp.status, resp.reason, gzip.decompress(body) if gzipped else body)
            inflate = zlib.decompressobj(wbits=31) if gzipped else None
            while chunk := resp.read(CHUNK):
                yield inflate.decompress(chunk) if inflate is not None else chunk
            if inflate is not None:
                yield inflate.flush()
        except (OSError, http.client.HTTPException, zlib.error):
            self._drop()
            raise
        except BaseException:
            self.abandon()
            raise
        self.stub.ReturnConnection(self.conn)

    def abandon(self) -> None:
        """The answer will not be read: its connection cannot serve another request."""
        if self.early is None:
            self.conn.close()

    def _drop(self) -> None:
        self.conn.close()
        self.stub.DropConnections()

    def _raise_fault(self, status: int, reason: str, body: bytes) -> None:
        import http.client

        from pyVmomi.SoapAdapter import SoapResponseDeserializer

        if status == 500:
            fault = SoapResponseDeserializer(self.stub).Deserialize(io.BytesIO(body), self.info.result)
            if isinstance(fault, BaseException):
                raise fault
        raise http.client.HTTPException(f"{status} {reason}")


def invoke_raw(stub: Any, mo: Any, method: str, args: list[Any]) -> bytes:
    """One counted SOAP call whose 200 body is returned as bytes; a SOAP fault is raised as pyVmomi's fault."""
    return b"".join(SentRequest(stub, mo, method, args).chunks())


def retrieve_vms(session: Session, view: Any, paths: list[str], page_size: int) -> list[Any]:
    """VirtualMachine objects of a ContainerView as Obj, paged, under Session.invoke."""
    return retrieve(session, view, [("VirtualMachine", paths)], page_size)


def retrieve(session: Session, view: Any, type_props: list[tuple[str, list[str]]], page_size: int) -> list[Any]:
    """Objects of these types (VirtualMachine, HostSystem) in a ContainerView as Obj, paged, in one
    RetrievePropertiesEx (plus one ContinueRetrievePropertiesEx per further page), under Session.invoke."""
    return retrieve_each(session, view, [type_props], page_size)


def retrieve_each(
    session: Session, view: Any, reads: list[list[tuple[str, list[str]]]], page_size: int
) -> list[Any]:
    """Objects of a ContainerView as Obj, in one paged read per entry of `reads` (a RetrievePropertiesEx each,
    plus one ContinueRetrievePropertiesEx per further page), under Session.invoke.

    The reads' first requests are sent together, in their order, and their pages read one read after the other:
    while vCenter answers a later read, the earlier one's pages are parsed (a small first read, the hosts, is
    parsed while the VMs are still being gathered). Within a read, the next page is asked for as soon as this
    page's token has been read (RetrieveResult lists it before the objects), so the server prepares it while
    this one is read, cut (`drop_unread_devices`) and parsed.
    """
    from pyVmomi import vmodl

    stub = session.stub
    pc = session.content.propertyCollector
    options = vmodl.query.PropertyCollector.RetrieveOptions(maxObjects=page_size)

    def ask_next(token: str) -> SentRequest:
        return SentRequest(stub, pc, "ContinueRetrievePropertiesEx", [token])

    def run() -> list[Any]:
        out: list[Any] = []
        waiting: list[SentRequest] = []
        try:
            for type_props in reads:
                waiting.append(SentRequest(stub, pc, "RetrievePropertiesEx", [[view_filter_spec(view, type_props)],
                                                                              options]))
            while waiting:
                sent: SentRequest | None = waiting.pop(0)
                while sent is not None:
                    ret, sent = _read_page(sent, ask_next)
                    out.extend(objects_of(ret, stub))
        except BaseException:
            for unread in waiting:  # their answers will not be read: their connections cannot serve another
                unread.abandon()
            raise
        return out

    return session.invoke(run)


def _read_page(
    sent: SentRequest, ask_next: Callable[[str], SentRequest]
) -> tuple[ET.Element | None, SentRequest | None]:
    """One page's returnval and the request for the page after it (or None), sent as soon as the token is read."""
    head = LeadingToken()
    following: SentRequest | None = None
    chunks = sent.chunks()
    try:
        body = []
        for chunk in chunks:
            if not head.done:
                head.feed(chunk)
                if head.token:
                    following = ask_next(head.token)
            body.append(chunk)
        ret = returnval_of(ET.fromstring(drop_unread_devices(b"".join(body))))
        token = ret.findtext(f"{_Q}token") if ret is not None else None
        if token != head.token:
            if head.token:
                raise ValueError("the page's token is not the one read at its start")
            following = ask_next(token) if token else None  # a token after the objects: asked for only now
    except BaseException:
        chunks.close()  # a page not read to its end leaves its connection unusable: it is closed
        if following is not None:
            following.abandon()
        raise
    return ret, following


_DEVICE = b"<VirtualDevice"
_DEVICE_END = b"</VirtualDevice"
_DEVICE_TAG = re.compile(rb"""<VirtualDevice((?:\s+[^\s=/>]+\s*=\s*(?:"[^"]*"|'[^']*'))*)\s*(/?)>""")
_ATTRIBUTE = re.compile(rb"""\s+([^\s=/>]+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_tags: dict[bytes, tuple[bool, bool]] = {}  # a device start tag's rest -> (may the reader need it, is it empty)


def drop_unread_devices(body: bytes) -> bytes:
    """The answer without the devices the reader would not look at, never parsed: the VirtualDevice elements
    that `_devices` skips (no type attribute names a PCI passthrough type or a network adapter), most of a VM's
    devices and half of the elements of a bulk VM read, and each host's HostPciDevice elements that none of its
    GPUs names and that are no network controller or bridge (`_drop_unread_pci_devices`). Only where nothing can
    hide markup: an answer with a comment, CDATA, a DOCTYPE or a processing instruction is returned whole, and so
    is one with a device inside a device."""
    if not elements_only(body):
        return body
    return _drop_unread_pci_devices(_drop_unread_vm_devices(body))


def _drop_unread_vm_devices(body: bytes) -> bytes:
    """The answer is cut at each "<VirtualDevice": a piece starts with the rest of a device's start tag and, the
    devices not nesting, holds that device's end tag."""
    pieces = body.split(_DEVICE)
    kept = [pieces[0]]
    for piece in pieces[1:]:
        gt = piece.find(b">")
        known = _tags.get(piece[: gt + 1]) or _device_tag(piece, gt)
        if known is None or known[0]:  # no device start tag, or a device the reader may need
            kept += (_DEVICE, piece)
            continue
        if known[1]:  # <VirtualDevice .../>
            kept.append(piece[gt + 1 :])
            continue
        close = piece.find(_DEVICE_END, gt)
        end = piece.find(b">", close)
        if close < 0 or end < 0 or piece[close + len(_DEVICE_END) : end].strip():
            return body  # the device holds another one, or does not end here
        kept.append(piece[end + 1 :])
    return b"".join(kept)


_OBJECT = b"<objects>"
_OBJECT_END = b"</objects>"
_PCI = b"<HostPciDevice>"
_PCI_END = b"</HostPciDevice>"
_GPU_PCI_ID = re.compile(rb"<pciId>([^<&]*)</pciId>")
_PCI_DEVICE_ID = re.compile(rb"\s*<id>([^<&]*)</id>")
_PCI_CLASS_ID = re.compile(rb"<classId>\s*(-?[0-9]+)\s*</classId>")
NETWORK_CLASS = 0x02  # PCI base class "Network controller": classId's upper byte (netobserve reads these)
_PCI_PARENT = re.compile(rb"<parentBridge>([^<&]*)</parentBridge>")
_DEFAULT_NAMESPACE = re.compile(rb"xmlns\s*=")


def _drop_unread_pci_devices(body: bytes) -> bytes:
    """In each host object, the HostPciDevice elements whose id (their first child) no pciId of the object names,
    whose classId is no network controller's and that are no bridge above one of those (their parentBridge
    chain): observe joins a GPU of config.graphicsInfo to its PCI device by that id, netobserve reads the NICs
    and the GPUs and the bridges above them (a host's other bridges, below its other devices, are most of its
    PCI devices). A device whose id, class or parent the scan cannot read keeps them all. An object is
    taken from the "<objects>" before its first device to the "</objects>" after it (an odd tag only widens
    that, keeping more devices); only the plain form vCenter writes is cut (no attributes on these tags, ids
    without references)."""
    kept: list[bytes] = []
    done = 0
    device = body.find(_PCI)
    while device >= 0:
        start = body.rfind(_OBJECT, done, device)
        end = body.find(_OBJECT_END, device)
        if start < 0 or end < 0:
            break
        kept += (body[done:start], _pci_devices_read(body[start:end]))
        done = end
        device = body.find(_PCI, end)
    return b"".join([*kept, body[done:]]) if kept else body


def _pci_devices_read(host: bytes) -> bytes:
    if _DEFAULT_NAMESPACE.search(host) or host.count(b"<HostPciDevice") != host.count(_PCI):
        return host
    named = _GPU_PCI_ID.findall(host)
    if len(named) != host.count(b"<pciId"):  # a pciId this scan does not read: every device kept
        return host
    pieces = host.split(_PCI)
    devices: list[tuple[bytes | None, bytes, int]] = []  # (id, the piece, where its end tag closes)
    wanted = set(named)
    parents: dict[bytes, bytes] = {}
    for device in pieces[1:]:
        close = device.find(_PCI_END)
        if close < 0:
            return host  # the device holds another one, or does not end here
        found = _PCI_DEVICE_ID.match(device)
        device_id = found.group(1) if found is not None else None
        devices.append((device_id, device, close))
        body = device[:close]
        parent = _PCI_PARENT.search(body)
        if device_id is None or (parent is None and b"<parentBridge" in body):
            return host  # an id or parent this scan does not read: the parse decides
        if parent is not None:
            parents[device_id] = parent.group(1)
        if _read_class(body):
            wanted.add(device_id)
    kept_ids: set[bytes | None] = set(wanted)
    for start in wanted:  # and the bridges above them, to the root (netobserve.pci_roots)
        above = parents.get(start)
        while above is not None and above not in kept_ids:
            kept_ids.add(above)
            above = parents.get(above)
    kept = [pieces[0]]
    for device_id, device, close in devices:
        if device_id in kept_ids:
            kept += (_PCI, device)
        else:
            kept.append(device[close + len(_PCI_END) :])
    return b"".join(kept)


def _read_class(device: bytes) -> bool:
    """A network controller, or a classId this scan cannot read (kept: the parser decides)."""
    found = _PCI_CLASS_ID.search(device)
    if found is None:
        return b"<classId" in device
    return (int(found.group(1)) & 0xFFFF) >> 8 == NETWORK_CLASS


def elements_only(body: bytes) -> bool:
    """No comment, CDATA section, DOCTYPE or processing instruction after the XML declaration (looked for by
    their rare second character first: a search for "<" and one more is slow, "<" being everywhere)."""
    start = body.find(b"?>") + 2 if body.startswith(b"<?xml") else 0
    return not any(body.find(mark[1:], start) >= 0 and body.find(mark, start) >= 0 for mark in (b"<!", b"<?"))


def _device_tag(piece: bytes, gt: int) -> tuple[bool, bool] | None:
    """Whether the reader may need the device whose start tag's rest begins `piece`, and whether it is empty;
    None when "<VirtualDevice" + piece starts no VirtualDevice start tag this scan takes apart."""
    tag = _DEVICE_TAG.match(_DEVICE + piece[: gt + 1])
    if tag is None or tag.end() != len(_DEVICE) + gt + 1:  # not a tag, or a ">" inside a quoted value
        return None
    known = (any(_read_type(value) for value in _type_values(tag.group(1))), bool(tag.group(2)))
    if len(_tags) < 1024:
        _tags[piece[: gt + 1]] = known
    return known


def _type_values(attributes: bytes) -> list[bytes]:
    """The values of the attributes named `type` in any namespace (xsi:type is one), taken apart one attribute
    after the other as _DEVICE_TAG matched them."""
    values, offset = [], 0
    while (attribute := _ATTRIBUTE.match(attributes, offset)) is not None:
        name, double, single = attribute.groups()
        if name == b"type" or name.endswith(b":type"):
            values.append(double if double is not None else single)
        offset = attribute.end()
    return values


def _read_type(value: bytes) -> bool:
    """A PCI passthrough device or a network adapter: the devices `_devices` reads."""
    if b"&" in value:  # a character reference could spell any type: parsed
        return True
    cls = _vim_class(value.decode("utf-8", "replace"))
    t = device_types()
    return isinstance(cls, type) and issubclass(cls, (t.passthrough, t.ethernet))


def returnval_of(root: ET.Element) -> ET.Element | None:
    """The RetrieveResult in a parsed RetrievePropertiesEx or ContinueRetrievePropertiesEx answer (None: no objects)."""
    return root.find(f".//{_Q}returnval")


def objects_of(ret: ET.Element | None, stub: Any) -> list[Obj]:
    """A page's objects, converted (managed objects are bound to `stub`)."""
    return [] if ret is None else [_object(elem, stub) for elem in ret.iterfind(f"{_Q}objects")]


class LeadingToken:
    """Reads the head of a RetrievePropertiesEx answer until its token (RetrieveResult's first element), its first
    object or HEAD_LIMIT bytes: the page after it can be asked for before this one is parsed."""

    def __init__(self) -> None:
        self._parser: Any = ET.XMLPullParser(events=("start", "end"))
        self._path: list[str] = []
        self._read = 0
        self.done = False
        self.token: str | None = None

    def feed(self, data: bytes) -> None:
        step = 1024
        for offset in range(0, len(data), step):
            if self.done:
                return
            self._read += min(step, len(data) - offset)
            try:
                self._parser.feed(data[offset : offset + step])
                self._events()
            except ET.ParseError:
                self.done = True  # the whole parse reports it
            if self._read >= HEAD_LIMIT:
                self.done = True

    def _events(self) -> None:
        for event, elem in self._parser.read_events():
            if event == "start":
                self._path.append(elem.tag)
                if elem.tag == f"{_Q}objects":
                    self.done = True
            else:
                self._path.pop()
                if elem.tag == f"{_Q}token" and self._path[-1:] == [f"{_Q}returnval"]:
                    self.token, self.done = elem.text or "", True
            if self.done:
                return


# ------------------------------------------------------------------------------------------ conversion


_OBJ, _MISSING, _PROPSET, _NAME, _VAL = (_Q + tag for tag in ("obj", "missingSet", "propSet", "name", "val"))


def _object(elem: ET.Element, stub: Any) -> Any:
    ref_elem = elem.find(_OBJ)
    assert ref_elem is not None
    obj = Obj(ref=_ref(ref_elem), type=ref_elem.get("type", "VirtualMachine"))
    for missing in elem.findall(_MISSING):
        fault = missing.find(f"{_Q}fault/{_Q}fault")
        if fault is not None and _local(fault.get(XSI_TYPE, "")) == "NotAuthenticated":
            from pyVmomi import vim

            raise vim.fault.NotAuthenticated()
    convert = _CONVERT_BY_TYPE.get(obj.type, _CONVERT)
    props = obj.props
    for prop in elem.findall(_PROPSET):  # about 20 a VM, 1,000 VMs a page: the tags are built once
        val = prop.find(_VAL)
        if val is not None:
            name = prop.findtext(_NAME) or ""
            props[name] = convert.get(name, _text)(val, stub)
    return obj


_blanks: dict[type, tuple[dict[str, Any], tuple[str, ...]]] = {}


def _new(cls: Any, **fields: Any) -> Any:
    """`cls(**fields)` for a pyVmomi data object, the same object: its defaults are taken once per class (pyVmomi
    walks the class hierarchy for them on every object), each list default a new list. The fields are set
    without pyVmomi's type check: the conversion gives each the type its property declares (a sim test compares
    what this reader reads with what pyVmomi reads)."""
    blank = _blanks.get(cls)
    if blank is None:
        defaults = dict(vars(cls()))
        blank = _blanks[cls] = (defaults, tuple(k for k, v in defaults.items() if isinstance(v, list)))
    obj = object.__new__(cls)
    state = obj.__dict__
    state.update(blank[0])
    for name in blank[1]:
        state[name] = []
    state.update(fields)
    return obj


def _local(type_name: str) -> str:
    return type_name.rsplit(":", 1)[-1]


def _vim_class(type_name: str) -> Any:
    name = _local(type_name)
    with _class_lock:
        cls = _class_cache.get(name)
        if cls is None:
            from pyVmomi import VmomiSupport

            try:
                cls = VmomiSupport.GetWsdlType(NS, name)
            except KeyError:
                cls = type(None)  # unknown to this pyVmomi: never a vGPU
            _class_cache[name] = cls
    return cls


class LeanRef:
    """A managed object reference as the lean reader reads it: its moid and type under pyVmomi's names (`_moId`,
    `_wsdlName`), nothing to call methods on. Three a VM: a plain slotted class, built several times faster than
    a SimpleNamespace."""

    __slots__ = ("_moId", "_wsdlName")

    def __init__(self, moid: str, wsdl_name: str):
        self._moId = moid
        self._wsdlName = wsdl_name

    def __repr__(self) -> str:
        return f"LeanRef({self._wsdlName}:{self._moId})"


def _ref(elem: ET.Element) -> LeanRef:
    return LeanRef(elem.text or "", elem.get("type", ""))


def _text(elem: ET.Element, stub: Any) -> str:
    return elem.text or ""


def _int(elem: ET.Element, stub: Any) -> int:
    return int(elem.text or 0)


def _bool(elem: ET.Element, stub: Any) -> bool:
    return (elem.text or "").strip().lower() in ("true", "1")


def _ref_val(elem: ET.Element, stub: Any) -> Any:
    return _ref(elem)


def _refs(elem: ET.Element, stub: Any) -> list[Any]:
    """An ArrayOfManagedObjectReference (HostSystem.network)."""
    return [_ref(e) for e in elem]


def _options(elem: ET.Element, stub: Any) -> list[Any]:
    return [
        SimpleNamespace(key=o.findtext(f"{_Q}key") or "", value=o.findtext(f"{_Q}value") or "")
        for o in elem.findall(f"{_Q}OptionValue")
    ]


def _nics(elem: ET.Element, stub: Any) -> list[Any]:
    return [
        SimpleNamespace(ipAddress=[ip.text or "" for ip in nic.findall(f"{_Q}ipAddress")])
        for nic in elem.findall(f"{_Q}GuestNicInfo")
    ]


def _devices(elem: ET.Element, stub: Any) -> list[Any]:
    """PCI passthrough devices and network adapters, as pyVmomi objects: the rest is never read by vgpuctl."""
    t = device_types()
    out = []
    for dev in elem.findall(f"{_Q}VirtualDevice"):
        cls = _vim_class(dev.get(XSI_TYPE, ""))
        if isinstance(cls, type) and issubclass(cls, t.ethernet):
            out.append(_ethernet_card(dev, cls, stub))
        elif isinstance(cls, type) and issubclass(cls, t.passthrough):
            out.append(_passthrough_device(dev, cls))
    return out


def _passthrough_device(dev: ET.Element, cls: Any) -> Any:
    """A VirtualPCIPassthrough: key, backing (a vGPU's profile, a DirectPath device) and NVLink device group. Each
    object is built with its fields (`_new`): pyVmomi's setattr would check each field's type again."""
    t = device_types()
    fields: dict[str, Any] = {"key": int(dev.findtext(f"{_Q}key") or 0)}
    backing = dev.find(f"{_Q}backing")
    if backing is not None:
        bcls = _vim_class(backing.get(XSI_TYPE, ""))
        if isinstance(bcls, type) and issubclass(bcls, t.backing_info):
            if issubclass(bcls, t.vmiop):
                fields["backing"] = _new(bcls, vgpu=backing.findtext(f"{_Q}vgpu"))
            else:
                fields["backing"] = _new(bcls, **_passthrough_backing(bcls, backing))
    group = dev.find(f"{_Q}deviceGroupInfo")
    if group is not None:
        fields["deviceGroupInfo"] = _new(t.group_info,
            groupInstanceKey=int(group.findtext(f"{_Q}groupInstanceKey") or 0),
            sequenceId=int(group.findtext(f"{_Q}sequenceId") or 0),
        )
    return _new(cls, **fields)


def _passthrough_backing(bcls: type, elem: ET.Element) -> dict[str, Any]:
    """DirectPath (id, deviceId, vendorId, systemId) and Dynamic DirectPath (allowedDevice, assignedId) fields."""
    t = device_types()
    if issubclass(bcls, t.device_backing):
        return {"id": elem.findtext(f"{_Q}id") or "", "deviceId": elem.findtext(f"{_Q}deviceId") or "",
                "systemId": elem.findtext(f"{_Q}systemId") or "", "vendorId": int(elem.findtext(f"{_Q}vendorId") or 0)}
    if issubclass(bcls, t.dynamic_backing):
        return {"assignedId": elem.findtext(f"{_Q}assignedId"), "allowedDevice": [
            _new(t.allowed_device, vendorId=int(a.findtext(f"{_Q}vendorId") or 0),
                 deviceId=int(a.findtext(f"{_Q}deviceId") or 0))
            for a in elem.findall(f"{_Q}allowedDevice")
        ]}
    return {}


def _ethernet_card(dev: ET.Element, cls: Any, stub: Any) -> Any:
    """A VirtualEthernetCard with what vgpuctl reads: key, MAC, slot, port group backing, PVRDMA protocol and
    the SR-IOV physical function."""
    t = device_types()
    fields: dict[str, Any] = {}  # given to _new, as _passthrough_device does
    slot = dev.findtext(f"{_Q}slotInfo/{_Q}pciSlotNumber")
    if slot:
        fields["slotInfo"] = _new(t.slot_info, pciSlotNumber=int(slot))
    backing = dev.find(f"{_Q}backing")
    kind = _local(backing.get(XSI_TYPE, "")) if backing is not None else ""
    if backing is not None and kind == "VirtualEthernetCardNetworkBackingInfo":
        net = backing.find(f"{_Q}network")
        fields["backing"] = _new(t.network_backing, deviceName=backing.findtext(f"{_Q}deviceName"),
                                 network=t.network(net.text or "", stub) if net is not None else None)
    elif backing is not None and kind == "VirtualEthernetCardDistributedVirtualPortBackingInfo":
        fields["backing"] = _new(t.port_backing, port=_new(t.port_connection,
            switchUuid=backing.findtext(f"{_Q}port/{_Q}switchUuid") or "",
            portgroupKey=backing.findtext(f"{_Q}port/{_Q}portgroupKey")))
    if issubclass(cls, t.vrdma):
        fields["deviceProtocol"] = dev.findtext(f"{_Q}deviceProtocol")
    if issubclass(cls, t.sriov):
        pf = dev.findtext(f"{_Q}sriovBacking/{_Q}physicalFunctionBacking/{_Q}id")
        if pf:
            fields["sriovBacking"] = _new(t.sriov_backing, physicalFunctionBacking=_new(t.device_backing, id=pf))
    return _new(cls, key=int(dev.findtext(f"{_Q}key") or 0), macAddress=dev.findtext(f"{_Q}macAddress"),
                addressType=dev.findtext(f"{_Q}addressType"), **fields)


def _opt_int(text: str | None) -> int | None:
    return int(text) if text else None


def _strings(elem: ET.Element, stub: Any) -> list[str]:
    return [child.text or "" for child in elem]


def _mo(elem: ET.Element, stub: Any) -> Any:
    """A real pyVmomi managed object on the session's stub: vgpuctl calls methods on this one."""
    return _vim_class(elem.get("type", ""))(elem.text or "", stub)


def _graphics_info(elem: ET.Element, stub: Any) -> list[Any]:
    """HostGraphicsInfo: the fields observe reads, absent ones None as in pyVmomi."""
    return [
        SimpleNamespace(
            deviceName=info.findtext(f"{_Q}deviceName"),
            vendorName=info.findtext(f"{_Q}vendorName"),
            pciId=info.findtext(f"{_Q}pciId"),
            graphicsType=info.findtext(f"{_Q}graphicsType"),
            memorySizeInKB=_opt_int(info.findtext(f"{_Q}memorySizeInKB")),
            vgpuMode=info.findtext(f"{_Q}vgpuMode"),
            vm=[_ref(v) for v in info.findall(f"{_Q}vm")],
        )
        for info in elem
    ]


def _graphics_config(elem: ET.Element, stub: Any) -> Any:
    return SimpleNamespace(
        hostDefaultGraphicsType=elem.findtext(f"{_Q}hostDefaultGraphicsType"),
        sharedPassthruAssignmentPolicy=elem.findtext(f"{_Q}sharedPassthruAssignmentPolicy"),
    )


def _pci_devices(elem: ET.Element, stub: Any) -> list[Any]:
    """HostPciDevice: id, class, vendor and device ids (xsd:short, negative above 0x7FFF as in pyVmomi), names
    and the parent bridge."""
    return [
        SimpleNamespace(
            id=dev.findtext(f"{_Q}id"),
            classId=_opt_int(dev.findtext(f"{_Q}classId")),
            vendorId=_opt_int(dev.findtext(f"{_Q}vendorId")),
            deviceId=_opt_int(dev.findtext(f"{_Q}deviceId")),
            vendorName=dev.findtext(f"{_Q}vendorName"),
            deviceName=dev.findtext(f"{_Q}deviceName"),
            parentBridge=dev.findtext(f"{_Q}parentBridge"),
        )
        for dev in elem
    ]


def _pnics(elem: ET.Element, stub: Any) -> list[Any]:
    """PhysicalNic: device (vmnicN), its PCI id and driver."""
    return [SimpleNamespace(device=n.findtext(f"{_Q}device"), pci=n.findtext(f"{_Q}pci"),
                            driver=n.findtext(f"{_Q}driver")) for n in elem]


_PASSTHRU_BOOLS = ("passthruEnabled", "passthruCapable", "passthruActive", "sriovEnabled", "sriovCapable",
                   "sriovActive")
_PASSTHRU_INTS = ("numVirtualFunctionRequested", "numVirtualFunction", "maxVirtualFunctionSupported")


def _passthru_info(elem: ET.Element, stub: Any) -> list[Any]:
    """HostPciPassthruInfo (HostSriovInfo for SR-IOV capable devices): absent fields None as in pyVmomi."""
    out = []
    for info in elem:
        fields: dict[str, Any] = {"id": info.findtext(f"{_Q}id")}
        for name in _PASSTHRU_BOOLS:
            text = info.findtext(f"{_Q}{name}")
            fields[name] = None if text is None else text.strip().lower() in ("true", "1")
        for name in _PASSTHRU_INTS:
            fields[name] = _opt_int(info.findtext(f"{_Q}{name}"))
        out.append(SimpleNamespace(**fields))
    return out


def _numa_info(elem: ET.Element, stub: Any) -> Any:
    """HostNumaInfo: each node's typeId and the PCI devices attached to it (API 6.7)."""
    return SimpleNamespace(numaNode=[
        SimpleNamespace(typeId=int(n.findtext(f"{_Q}typeId") or 0),
                        pciId=[p.text or "" for p in n.findall(f"{_Q}pciId")])
        for n in elem.findall(f"{_Q}numaNode")
    ])


def _custom_values(elem: ET.Element, stub: Any) -> dict[int, str]:
    """ManagedEntity.customValue: field key -> string value."""
    return {int(v.findtext(f"{_Q}key") or 0): v.findtext(f"{_Q}value") or "" for v in elem}


def _field_names(elem: ET.Element, stub: Any) -> dict[int, str]:
    """ManagedEntity.availableField: field key -> name."""
    return {int(f.findtext(f"{_Q}key") or 0): f.findtext(f"{_Q}name") or "" for f in elem}


_HOST_CONVERT = {
    "parent": _ref_val,
    "runtime.inMaintenanceMode": _bool,
    "config.graphicsInfo": _graphics_info,
    "config.graphicsConfig": _graphics_config,
    "config.sharedPassthruGpuTypes": _strings,
    "hardware.pciDevice": _pci_devices,
    "config.network.pnic": _pnics,
    "config.pciPassthruInfo": _passthru_info,
    "hardware.numaInfo": _numa_info,
    "configManager.graphicsManager": _mo,
    "configManager.imageConfigManager": _mo,
    "customValue": _custom_values,
    "availableField": _field_names,
    "network": _refs,
}

_CONVERT = {
    "parent": _ref_val,
    "runtime.host": _ref_val,
    "config.template": _bool,
    "config.memoryReservationLockedToMax": _bool,
    "config.hardware.numCPU": _int,
    "config.hardware.memoryMB": _int,
    "config.memoryAllocation.reservation": _int,
    "config.extraConfig": _options,
    "config.hardware.device": _devices,
    "guest.net": _nics,
}

_CONVERT_BY_TYPE = {"VirtualMachine": _CONVERT, "HostSystem": _HOST_CONVERT}
