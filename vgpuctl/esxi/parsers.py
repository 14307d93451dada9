"""Parsers for the ESXi shell output vgpuctl reads: nvidia-smi and esxcli.

Pure functions from text to frozen dataclasses; no I/O. Each parser accepts what the real tools print
(reference outputs in tests/fixtures/nvidia-smi/) and what gpusim prints. Text that does not have the
expected shape raises OutputFormatError with the offending line, never a bare IndexError/ValueError.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import field

from vgpuctl.errors import OutputFormatError
from vgpuctl.lazyclass import dataclass

__all__ = ["OutputFormatError"]


def enabled_state(value: str) -> bool | None:
    """Enabled/Disabled -> bool; N/A, [N/A], [Not Supported] -> None."""
    v = value.strip().strip("[]").lower()
    if v == "enabled":
        return True
    if v == "disabled":
        return False
    return None


def supported_state(value: str | None) -> bool | None:
    """Supported -> True, Not Supported -> False; absent, N/A or anything else -> None."""
    v = (value or "").strip().strip("[]").lower()
    return {"supported": True, "not supported": False}.get(v)


def text_lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").split("\n")


# --- nvidia-smi -L -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigDevice:
    profile: str  # e.g. 3g.20gb
    device: int
    uuid: str


@dataclass(frozen=True)
class ListedGpu:
    index: int
    name: str
    uuid: str
    mig_devices: tuple[MigDevice, ...] = ()


_LIST_GPU = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)\s*$")


def parse_list(text: str) -> list[ListedGpu]:
    """`nvidia-smi -L`: one line per GPU, then its MIG devices indented below it."""
    gpus: list[ListedGpu] = []
    for line in text_lines(text):
        if not line.strip():
            continue
        if m := _LIST_GPU.match(line):
            gpus.append(ListedGpu(int(m[1]), m[2], m[3]))
        elif (m := _LIST_MIG.match(line)) and gpus:
            last = gpus[-1]
            dev = MigDevice(m[1], int(m[2]), m[3])
            gpus[-1] = ListedGpu(last.index, last.name, last.uuid, (*last.mig_devices, dev))
        else:
            raise OutputFormatError(f"nvidia-smi -L: unexpected line {line!r}")
    return gpus


# --- nvidia-smi -q -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueriedGpu:
    bus_id: str  # 00000000:3B:00.0
    product_name: str
    uuid: str | None = None
    architecture: str | None = None
    device_id: int | None = None  # PCI device id, e.g. 0x20F1
    mig_current: bool | None = None  # None: not MIG capable (N/A)
    mig_pending: bool | None = None
    virtualization_mode: str | None = None  # Host VGPU, Pass-Through, None
    host_vgpu_mode: str | None = None  # SR-IOV, Non SR-IOV
    vgpu_heterogeneous: bool | None = None  # vGPU heterogeneous (mixed-size) mode
    # vGPU Device Capability: time-sliced vGPUs of different types, and of different sizes, at once (None: not said)
    heterogeneous_types: bool | None = None
    heterogeneous_sizes: bool | None = None
    fb_total_mib: int | None = None
    fabric_state: str | None = None
    active_vgpus: int | None = None
    sections: dict[str, str] = field(default_factory=dict, compare=False, repr=False)  # "A/B/Key" -> value


@dataclass(frozen=True)
class QueryReport:
    driver_version: str | None
    attached_gpus: int
    gpus: tuple[QueriedGpu, ...]


_Q_LINE = re.compile(r"^( *)(\S.*?)\s*:\s?(.*)$")
_Q_GPU = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$")


def _q_tree(lines: Iterable[str]) -> dict[str, str]:
    """Flatten an indented `-q` block into "Section/Sub/Key" -> value."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        m = _Q_LINE.match(line)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        prefix = "/".join(name for _, name in stack)
        if m:
            key = m[2].strip()
            out[f"{prefix}/{key}" if prefix else key] = m[3].strip()
        else:
            stack.append((indent, line.strip()))
    return out


def _int(value: str | None, base: int = 10) -> int | None:
    if value is None:
        return None
    m = re.match(r"^\s*(0x[0-9a-fA-F]+|\d+)", value)
    if not m:
        return None
    return int(m[1], 16 if m[1].lower().startswith("0x") else base)


def _na(value: str | None) -> str | None:
    return None if value is None or value.strip() in ("N/A", "") else value.strip()


def _queried_gpu(bus_id: str, t: dict[str, str]) -> QueriedGpu:
    if "Product Name" not in t:
        raise OutputFormatError(f"nvidia-smi -q: GPU {bus_id} has no Product Name")
    device = _int(t.get("PCI/Device Id"))
    return QueriedGpu(
        bus_id=bus_id,
        product_name=t["Product Name"],
        uuid=_na(t.get("GPU UUID")),
        architecture=_na(t.get("Product Architecture")),
        device_id=device >> 16 if device is not None else None,
        mig_current=enabled_state(t.get("MIG Mode/Current", "N/A")),
        mig_pending=enabled_state(t.get("MIG Mode/Pending", "N/A")),
        virtualization_mode=_na(t.get("GPU Virtualization Mode/Virtualization Mode")),
        host_vgpu_mode=_na(t.get("GPU Virtualization Mode/Host VGPU Mode")),
        vgpu_heterogeneous=enabled_state(t.get("GPU Virtualization Mode/vGPU Heterogeneous Mode", "N/A")),
        heterogeneous_types=supported_state(t.get("vGPU Device Capability/Heterogeneous Time-Slice Profiles")),
        heterogeneous_sizes=supported_state(t.get("vGPU Device Capability/Heterogeneous Time-Slice Sizes")),
        fb_total_mib=_int(t.get("FB Memory Usage/Total")),
        fabric_state=_na(t.get("Fabric/State")),
        active_vgpus=_int(t.get("Active vGPUs")),
        sections=t,
    )


def parse_query(text: str) -> QueryReport:
    """`nvidia-smi -q [-i N]`: the header and one block per GPU ("GPU 00000000:3B:00.0")."""
    header: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    for line in text_lines(text):
        if _Q_GPU.match(line):
            blocks.append((line[4:].strip(), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            header.append(line)
    head = _q_tree(line for line in header if not line.startswith("="))
    if "Attached GPUs" not in head:
        raise OutputFormatError("nvidia-smi -q: no 'Attached GPUs' line")
    attached = _int(head["Attached GPUs"])
    if attached is None:
        raise OutputFormatError(f"nvidia-smi -q: bad Attached GPUs {head['Attached GPUs']!r}")
    gpus = tuple(_queried_gpu(bus, _q_tree(lines)) for bus, lines in blocks)
    return QueryReport(driver_version=_na(head.get("Driver Version")), attached_gpus=attached, gpus=gpus)


@dataclass(frozen=True)
class VgpuCapability:
    """What the host's driver says it runs on one GPU (`nvidia-smi -q`, vGPU Device Capability): time-sliced
    vGPUs of different types at once (`types`), of different framebuffer sizes (`sizes`); None: not said."""

    bus_id: str  # nvidia-smi form: 00000000:3B:00.0
    types: bool | None
    sizes: bool | None


def parse_vgpu_capabilities(text: str) -> tuple[VgpuCapability, ...]:
    """The vGPU Device Capability of each GPU of `nvidia-smi -q`."""
    return tuple(VgpuCapability(g.bus_id, g.heterogeneous_types, g.heterogeneous_sizes) for g in parse_query(text).gpus)


# --- nvidia-smi --query-gpu=... --format=csv ----------------------------------------------------------

DEFAULT_QUERY_FIELDS = ("index", "pci.bus_id", "name", "memory.total", "mig.mode.current", "mig.mode.pending")


def parse_query_csv(text: str, fields: Sequence[str] | None = None) -> list[dict[str, str | None]]:
    """`--query-gpu ... --format=csv[,noheader][,nounits]` -> one dict per GPU, field -> value.

    With a header line, pass fields=None (names come from the header, units like " [MiB]" dropped);
    with noheader, pass the queried fields. Values keep their units unless nounits was used;
    "[N/A]"-style values become None.
    """
    rows = [line for line in text_lines(text) if line.strip()]
    if fields is None:
        if not rows:
            raise OutputFormatError("nvidia-smi --query-gpu: empty output, expected a header")
        fields = [re.sub(r"\s*\[.*\]$", "", f.strip()) for f in rows[0].split(",")]
        rows = rows[1:]
    out: list[dict[str, str | None]] = []
    for row in rows:
        values = [v.strip() for v in row.split(", ")]
        if len(values) != len(fields):
            raise OutputFormatError(f"nvidia-smi --query-gpu: {len(values)} values for {len(fields)} fields: {row!r}")
        cells = zip(fields, values, strict=True)
        out.append({f: (None if v.startswith("[") and v.endswith("]") else v) for f, v in cells})
    return out


@dataclass(frozen=True)
class GpuModes:
    """A row of the MIG mode query (DEFAULT_QUERY_FIELDS)."""

    index: int
    bus_id: str
    name: str | None = None
    memory_total_mib: int | None = None
    mig_current: bool | None = None  # None: not MIG capable
    mig_pending: bool | None = None

    @property
    def mig_change_pending(self) -> bool:
        return self.mig_current is not None and self.mig_current != self.mig_pending


def parse_gpu_modes(text: str, fields: Sequence[str] | None = None) -> list[GpuModes]:
    """Typed rows of a --query-gpu csv that includes at least index and pci.bus_id."""
    out = []
    for row in parse_query_csv(text, fields):
        if row.get("index") is None or row.get("pci.bus_id") is None:
            raise OutputFormatError(f"nvidia-smi --query-gpu: index and pci.bus_id are required, got {row}")
        out.append(
            GpuModes(
                index=int(row["index"] or 0),
                bus_id=row["pci.bus_id"] or "",
                name=row.get("name"),
                memory_total_mib=_int(row.get("memory.total")),
                mig_current=enabled_state(row.get("mig.mode.current") or "N/A"),
                mig_pending=enabled_state(row.get("mig.mode.pending") or "N/A"),
            )
        )
    return out


# --- nvidia-smi -i N -mig 0|1 --------------------------------------------------------------------------


@dataclass(frozen=True)
class MigModeChange:
    bus_id: str
    enable: bool
    pending: bool  # True: takes effect after a reboot / when the GPU is idle
    reason: str | None = None  # why it is pending ("Not Supported", "In use by another client")
    supported: bool = True


_MIG_DONE = re.compile(r"^(Enabled|Disabled) MIG Mode for GPU (\S+)$")
_MIG_PENDING = re.compile(r"^Warning: MIG mode is in pending (enable|disable) state for GPU ([0-9A-Fa-f:.]+):(.*)$")
_MIG_UNSUPPORTED = re.compile(r"^Unable to (enable|disable) MIG Mode for GPU (\S+): (.*)$")


def parse_mig_set(text: str) -> list[MigModeChange]:
    """Output of `nvidia-smi [-i N] -mig 0|1`: what happened to each GPU."""
    out = []
    for line in text_lines(text):
        s = line.strip()
        if m := _MIG_DONE.match(s):
            out.append(MigModeChange(m[2], m[1] == "Enabled", pending=False))
        elif m := _MIG_PENDING.match(s):
            out.append(MigModeChange(m[2], m[1] == "enable", pending=True, reason=m[3].strip() or None))
        elif m := _MIG_UNSUPPORTED.match(s):
            out.append(MigModeChange(m[2], m[1] == "enable", pending=False, reason=m[3].strip(), supported=False))
    if not out:
        raise OutputFormatError(f"nvidia-smi -mig: no per-GPU result in {text.strip()[:200]!r}")
    return out


# --- nvidia-smi mig -lgip / -lgipp ---------------------------------------------------------------------


@dataclass(frozen=True)
class GpuInstanceProfile:
    gpu: int
    name: str  # without "MIG ", e.g. 3g.20gb or 1g.5gb+me
    profile_id: int
    free: int
    total: int
    memory_gib: float
    p2p: bool
    sm: int
    dec: int
    enc: int
    ce: int
    jpeg: int
    ofa: int

    @property
    def slices(self) -> int:
        return int(self.name.split("g.", 1)[0])

    @property
    def memory_gb(self) -> int:
        return int(re.match(r"^\d+g\.(\d+)gb", self.name)[1])  # type: ignore[index]


_LGIP_ROW1 = re.compile(
    r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|$"
)
_LGIP_ROW2 = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s*\|$")


def parse_lgip(text: str) -> list[GpuInstanceProfile]:
    """`nvidia-smi mig -lgip`: a two-line table row per GPU instance profile."""
    out: list[GpuInstanceProfile] = []
    first: re.Match[str] | None = None
    for line in text_lines(text):
        s = line.strip()
        if m := _LGIP_ROW1.match(s):
            first = m
        elif first and (m := _LGIP_ROW2.match(s)):
            f = first
            out.append(
                GpuInstanceProfile(
                    gpu=int(f[1]),
                    name=f[2],
                    profile_id=int(f[3]),
                    free=int(f[4]),
                    total=int(f[5]),
                    memory_gib=float(f[6]),
                    p2p=f[7].lower() == "yes",
                    sm=int(f[8]),
                    dec=int(f[9]),
                    enc=int(f[10]),
                    ce=int(m[1]),
                    jpeg=int(m[2]),
                    ofa=int(m[3]),
                )
            )
            first = None
    if not out and "No MIG-enabled devices found" not in text:
        raise OutputFormatError("nvidia-smi mig -lgip: no profile rows")
    return out


@dataclass(frozen=True)
class GpuInstancePlacements:
    gpu: int
    profile_id: int
    starts: tuple[int, ...]
    size: int


_LGIPP = re.compile(r"^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,\s]*)\}:(\d+)\s*$")


def parse_lgipp(text: str) -> list[GpuInstancePlacements]:
    """`nvidia-smi mig -lgipp`: "GPU  0 Profile ID  9 Placements: {0,4}:4"."""
    out = []
    for line in text_lines(text):
        if not line.strip():
            continue
        m = _LGIPP.match(line.strip())
        if not m:
            raise OutputFormatError(f"nvidia-smi mig -lgipp: unexpected line {line!r}")
        starts = tuple(int(s) for s in m[3].replace(" ", "").split(",") if s)
        out.append(GpuInstancePlacements(int(m[1]), int(m[2]), starts, int(m[4])))
    return out


# --- nvidia-smi mig -lgi -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuInstance:
    """A GPU instance in use: its profile and where it sits (memory slots start:size)."""

    gpu: int
    name: str  # without "MIG ", e.g. 3g.20gb
    profile_id: int
    instance_id: int
    start: int
    size: int


_LGI_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|$")
_LGI_NONE = ("No GPU instances found", "No MIG-enabled devices found")


def parse_lgi(text: str) -> list[GpuInstance]:
    """`nvidia-smi mig -lgi`: one table row per GPU instance; NVML's "No GPU instances found: Not Found" (or no
    MIG GPU at all) is none."""
    out = [GpuInstance(int(m[1]), m[2], int(m[3]), int(m[4]), int(m[5]), int(m[6]))
           for line in text_lines(text) if (m := _LGI_ROW.match(line.strip()))]
    if not out and not any(marker in text for marker in _LGI_NONE):
        raise OutputFormatError("nvidia-smi mig -lgi: no GPU instance rows")
    return out


# --- nvidia-smi nvlink -s ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NvLink:
    index: int
    active: bool
    speed_gbps: float | None  # GB/s per link when active


@dataclass(frozen=True)
class GpuNvLinks:
    index: int
    name: str
    uuid: str | None
    links: tuple[NvLink, ...] = ()
    all_inactive: bool = False  # NVML printed that every link is down instead of listing them

    @property
    def active_links(self) -> int:
        return sum(1 for link in self.links if link.active)


_NVL_GPU = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: ([^)]+)\))?\s*$")
_NVL_LINK = re.compile(r"^\s*Link (\d+): (?:([\d.]+) GB/s|<inactive>)\s*$")
# What nvidia-smi prints under a GPU whose links are all down (no bridge fitted, or NVLink off), in place of the
# link lines (tests/fixtures/nvidia-smi/rtx-a6000.nvlink-s-inactive.txt).
_NVL_ALL_INACTIVE = re.compile(r"^\s*NVML: Unable to retrieve NVLink information as all links are inActive\s*$",
                               re.IGNORECASE)


def parse_nvlink_status(text: str) -> list[GpuNvLinks]:
    """`nvidia-smi nvlink -s`: a GPU line, then "Link N: 25 GB/s" or "Link N: <inactive>" lines, or NVML's line
    saying that all of the GPU's links are inactive (no link up: `all_inactive`, no links listed)."""
    gpus: list[GpuNvLinks] = []
    for line in text_lines(text):
        if not line.strip():
            continue
        if m := _NVL_LINK.match(line):
            g = _last_gpu(gpus, line)
            link = NvLink(int(m[1]), m[2] is not None, float(m[2]) if m[2] else None)
            gpus[-1] = GpuNvLinks(g.index, g.name, g.uuid, (*g.links, link))
        elif _NVL_ALL_INACTIVE.match(line):
            g = _last_gpu(gpus, line)
            if g.links:
                raise OutputFormatError(f"nvidia-smi nvlink -s: GPU {g.index} lists links and says none is active")
            gpus[-1] = GpuNvLinks(g.index, g.name, g.uuid, (), all_inactive=True)
        elif m := _NVL_GPU.match(line):
            gpus.append(GpuNvLinks(int(m[1]), m[2], m[3]))
        else:
            raise OutputFormatError(f"nvidia-smi nvlink -s: unexpected line {line!r}")
    return gpus


def _last_gpu(gpus: list[GpuNvLinks], line: str) -> GpuNvLinks:
    if not gpus:
        raise OutputFormatError(f"nvidia-smi nvlink -s: link before any GPU: {line!r}")
    return gpus[-1]


# --- nvidia-smi topo -m --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Topology:
    gpus: tuple[int, ...]  # GPU indices in matrix order
    matrix: dict[tuple[int, int], str]  # (a, b) -> X, NV12, PIX, NODE, SYS, ...

    def nvlinks(self, a: int, b: int) -> int:
        """Number of bonded NVLinks between two GPUs (0 when they talk over PCIe)."""
        m = re.match(r"^NV(\d+)$", self.matrix.get((a, b), ""))
        return int(m[1]) if m else 0

    def nvlink_sets(self) -> list[frozenset[int]]:
        """Groups of GPUs connected through NVLink (connected components), each with at least 2 GPUs."""
        seen: set[int] = set()
        sets = []
        for g in self.gpus:
            if g in seen:
                continue
            group, todo = {g}, [g]
            while todo:
                a = todo.pop()
                for b in self.gpus:
                    if b not in group and self.nvlinks(a, b) > 0:
                        group.add(b)
                        todo.append(b)
            seen |= group
            if len(group) > 1:
                sets.append(frozenset(group))
        return sets


def parse_topo_matrix(text: str) -> Topology:
    """`nvidia-smi topo -m`: the GPU x GPU block of the matrix (tab or space separated); legend ignored."""
    lines = [line for line in text_lines(text) if line.strip()]
    header = next((line for line in lines if re.match(r"^\s+GPU\d+", line)), None)
    if header is None:
        raise OutputFormatError("nvidia-smi topo -m: no header line with GPU columns")
    columns = [int(c[3:]) for c in header.split() if re.fullmatch(r"GPU\d+", c)]
    matrix: dict[tuple[int, int], str] = {}
    rows = 0
    for line in lines:
        m = re.match(r"^GPU(\d+)\s", line)
        if not m:
            continue
        cells = line.split()[1 : 1 + len(columns)]
        if len(cells) != len(columns):
            raise OutputFormatError(f"nvidia-smi topo -m: short row {line!r}")
        for col, cell in zip(columns, cells, strict=True):
            matrix[(int(m[1]), col)] = cell
        rows += 1
    if rows != len(columns):
        raise OutputFormatError(f"nvidia-smi topo -m: {rows} rows for {len(columns)} GPU columns")
    return Topology(tuple(columns), matrix)


# --- esxcli system module parameters -------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleParameter:
    name: str
    type: str
    value: str  # "" when unset
    description: str


def esxcli_table(text: str) -> list[dict[str, str]]:
    """An esxcli table: header, a rule of dashes per column, rows aligned to the rule's columns."""
    lines = [line for line in text_lines(text) if line.strip()]
    if len(lines) < 2 or not re.fullmatch(r"[- ]+", lines[1]):
        raise OutputFormatError("esxcli: expected a header and a dashed rule")
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[1])]
    cut = [start for start, _ in spans] + [None]

    def cells(line: str) -> list[str]:
        return [line[cut[i] : cut[i + 1]].strip() for i in range(len(spans))]

    names = cells(lines[0])
    return [dict(zip(names, cells(line), strict=True)) for line in lines[2:]]


def parse_module_parameter_names(text: str) -> list[str]:
    """`esxcli system module parameters list -m MODULE`: the names of the parameters the module declares."""
    return sorted(p.name for p in parse_module_parameters(text))


def nvlinked_pairs(topology: Topology) -> list[tuple[int, int, int]]:
    """(GPU, GPU, bonded NVLinks) of every pair of GPUs connected over NVLink, by nvidia-smi index."""
    return [(a, b, n) for a in topology.gpus for b in topology.gpus if a != b and (n := topology.nvlinks(a, b))]


def parse_topo_nvlinks(text: str) -> list[tuple[int, int, int]]:
    """`nvidia-smi topo -m` -> the NVLink-connected pairs of GPUs (nvlinked_pairs)."""
    return nvlinked_pairs(parse_topo_matrix(text))


def parse_module_parameters(text: str) -> list[ModuleParameter]:
    """`esxcli system module parameters list -m MODULE`."""
    rows = esxcli_table(text)
    try:
        return [ModuleParameter(r["Name"], r["Type"], r["Value"], r["Description"]) for r in rows]
    except KeyError as e:
        raise OutputFormatError(f"esxcli module parameters: missing column {e}") from None


@dataclass(frozen=True)
class Vib:
    """One row of `esxcli software vib list` (ESXi 7 has no Platforms column)."""

    name: str
    version: str
    vendor: str
    acceptance_level: str
    install_date: str


def parse_vib_list(text: str) -> list[Vib]:
    """`esxcli software vib list`."""
    rows = esxcli_table(text)
    try:
        return [Vib(r["Name"], r["Version"], r["Vendor"], r["Acceptance Level"], r["Install Date"]) for r in rows]
    except KeyError as e:
        raise OutputFormatError(f"esxcli software vib list: missing column {e}") from None
