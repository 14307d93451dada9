"""Parsers for the benchmarks' own output: nccl-tests (`all_reduce_perf`, `sendrecv_perf`, ...) and the CUDA
sample `p2pBandwidthLatencyTest`. Pure functions of the text; OutputFormatError when it is not that format.

nccl-tests prints one row per message size: size, count, type, [redop, root,] then time, algbw, busbw and
#wrong (older releases: error) for the out-of-place and the in-place run. Older releases have no redop/root
columns, so a row is read from its right end. p2pBandwidthLatencyTest prints titled matrices (GB/s or us)
with one row per GPU.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import Any

from vgpuctl.errors import OutputFormatError
from vgpuctl.lazyclass import dataclass

# --------------------------------------------------------------------------------------------- nccl-tests


@dataclass(frozen=True)
class NcclMeasure:
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    wrong: float | None  # #wrong (or error) column; None when the tool printed N/A

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: NcclMeasure
    in_place: NcclMeasure

    def to_dict(self) -> dict[str, Any]:
        return {
            "size_bytes": self.size_bytes,
            "count": self.count,
            "dtype": self.dtype,
            "redop": self.redop,
            "root": self.root,
            "out_of_place": self.out_of_place.to_dict(),
            "in_place": self.in_place.to_dict(),
        }


@dataclass(frozen=True)
class NcclRank:
    rank: int
    host: str
    device: int
    bus_id: str
    name: str


@dataclass(frozen=True)
class NcclResult:
    rows: tuple[NcclRow, ...]
    ranks: tuple[NcclRank, ...] = ()
    n_gpus: int | None = None  # -g: GPUs per process
    avg_busbw_gbs: float | None = None
    out_of_bounds: int | None = None
    wrong_total: float = 0.0
    header: dict[str, str] = field(default_factory=dict)

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.ranks})

    def points(self) -> list[dict[str, float]]:
        """Per message size: bus bandwidth (GB/s) and time (us) of the out-of-place run."""
        return [
            {"size_bytes": r.size_bytes, "busbw_gbs": r.out_of_place.busbw_gbs, "time_us": r.out_of_place.time_us}
            for r in self.rows
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [r.to_dict() for r in self.rows],
            "ranks": [dict(r.__dict__) for r in self.ranks],
            "n_gpus": self.n_gpus,
            "avg_busbw_gbs": self.avg_busbw_gbs,
            "out_of_bounds": self.out_of_bounds,
            "wrong_total": self.wrong_total,
            "header": dict(self.header),
        }


_NCCL_RANK = re.compile(
    r"^#?\s*Rank\s+(\d+)(?:\s+Group\s+\d+)?\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_NCCL_HEADER = re.compile(r"^#?\s*nThread\s")
_NCCL_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_NCCL_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_NCCL_FAILURE = re.compile(r"(Test NCCL failure|Test CUDA failure|NCCL failure|NCCL WARN)")


def _measure(tokens: list[str], where: str) -> NcclMeasure:
    time_us, algbw, busbw, wrong = tokens
    try:
        return NcclMeasure(float(time_us), float(algbw), float(busbw), None if wrong == "N/A" else float(wrong))
    except ValueError:
        raise OutputFormatError(f"nccl-tests: not a measurement {' '.join(tokens)!r} in {where!r}") from None


def _nccl_row(line: str) -> NcclRow | None:
    tokens = line.split()
    if len(tokens) < 11 or not (tokens[0].isdigit() and tokens[1].isdigit()):
        return None
    middle = tokens[3:-8]  # old releases: nothing; newer: redop, root
    if len(middle) > 2:
        raise OutputFormatError(f"nccl-tests: unexpected columns in {line.strip()!r}")
    redop = middle[0] if middle else None
    root = int(middle[1]) if len(middle) == 2 and re.fullmatch(r"-?\d+", middle[1]) else None
    return NcclRow(
        size_bytes=int(tokens[0]),
        count=int(tokens[1]),
        dtype=tokens[2],
        redop=redop,
        root=root,
        out_of_place=_measure(tokens[-8:-4], line.strip()),
        in_place=_measure(tokens[-4:], line.strip()),
    )


def _nccl_header(line: str) -> dict[str, str]:
    # "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 ..."
    words = line.lstrip("#").split()
    out: dict[str, str] = {}
    for i, w in enumerate(words[:-1]):
        if w in ("nThread", "nGpus", "minBytes", "maxBytes"):
            out[w] = words[i + 1]
    return out


def parse_nccl_tests(text: str) -> NcclResult:
    """Any nccl-tests binary's output (`all_reduce_perf`, `sendrecv_perf`, ...), with or without mpirun noise."""
    rows: list[NcclRow] = []
    ranks: list[NcclRank] = []
    header: dict[str, str] = {}
    avg = oob = None
    failure: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if m := _NCCL_RANK.match(line.strip()):
            ranks.append(NcclRank(int(m[1]), m[2], int(m[3]), m[4], m[5]))
        elif _NCCL_HEADER.match(line.strip()):
            header = header or _nccl_header(line)
        elif m := _NCCL_AVG.match(line.strip()):
            avg = float(m[1])
        elif m := _NCCL_OOB.match(line.strip()):
            oob = int(m[1])
        elif not line.lstrip().startswith("#") and (row := _nccl_row(line)) is not None:
            rows.append(row)
        elif failure is None and _NCCL_FAILURE.search(line):
            failure = line.strip()
    if not rows:
        reason = f": {failure}" if failure else ""
        raise OutputFormatError(f"nccl-tests: no result rows in the output{reason}")
    wrong = sum((r.out_of_place.wrong or 0.0) + (r.in_place.wrong or 0.0) for r in rows)
    n_gpus = int(header["nGpus"]) if header.get("nGpus", "").isdigit() else None
    return NcclResult(tuple(rows), tuple(ranks), n_gpus, avg, oob, wrong, header)


# ------------------------------------------------------------------------------- p2pBandwidthLatencyTest

BW_UNI_OFF = "unidirectional_bw_p2p_disabled"
BW_UNI_ON = "unidirectional_bw_p2p_enabled"
BW_BI_OFF = "bidirectional_bw_p2p_disabled"
BW_BI_ON = "bidirectional_bw_p2p_enabled"
LAT_GPU_OFF = "latency_gpu_p2p_disabled"
LAT_CPU_OFF = "latency_cpu_p2p_disabled"
LAT_GPU_ON = "latency_gpu_p2p_enabled"
LAT_CPU_ON = "latency_cpu_p2p_enabled"

Matrix = dict[tuple[int, int], float]


@dataclass(frozen=True)
class P2PDevice:
    index: int
    name: str
    bus: str  # pciBusID as printed (hex)


@dataclass(frozen=True)
class P2PResult:
    devices: tuple[P2PDevice, ...]
    peer_access: dict[tuple[int, int], bool]  # (a, b) -> "Device=a CAN Access Peer Device=b"
    matrices: dict[str, Matrix]

    def pairs(self) -> list[tuple[int, int]]:
        idx = [d.index for d in self.devices] or sorted({a for a, _ in self.peer_access})
        return [(a, b) for a in idx for b in idx if a < b]

    def pair_table(self) -> list[dict[str, Any]]:
        """Per GPU pair: P2P access and the P2P=Enabled numbers (bandwidth a->b, both ways, latency a->b)."""
        out = []
        for a, b in self.pairs():
            out.append({
                "pair": f"{a}-{b}",
                "peer_access": self.peer_access.get((a, b)),
                "unidirectional_gbs": self.matrices.get(BW_UNI_ON, {}).get((a, b)),
                "bidirectional_gbs": self.matrices.get(BW_BI_ON, {}).get((a, b)),
                "latency_us": self.matrices.get(LAT_GPU_ON, {}).get((a, b)),
            })
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "devices": [dict(d.__dict__) for d in self.devices],
            "peer_access": {f"{a}-{b}": v for (a, b), v in sorted(self.peer_access.items())},
            "matrices": {k: {f"{a}-{b}": v for (a, b), v in sorted(m.items())} for k, m in self.matrices.items()},
            "pairs": self.pair_table(),
        }


_P2P_DEVICE = re.compile(r"^Device: (\d+), (.+?), pciBusID: ([0-9a-fA-F]+),")
_P2P_ACCESS = re.compile(r"^Device=(\d+) (CAN|CANNOT) Access Peer Device=(\d+)")
_P2P_TITLE = re.compile(
    r"^(Unidirectional |Bidirectional )?P2P=(Enabled|Disabled) (Bandwidth|Latency)\b.*Matrix \((GB/s|us)\)\s*$"
)
_P2P_SUBHEADER = re.compile(r"^\s*(D\\D|GPU|CPU)((?:\s+\d+)+)\s*$")
_P2P_ROW = re.compile(r"^\s*(\d+)((?:\s+-?[0-9.]+)+)\s*$")


def _title_key(m: re.Match[str], sub: str) -> str:
    direction, state, kind = (m[1] or "").strip().lower(), m[2].lower(), m[3].lower()
    p2p = "p2p_enabled" if state == "enabled" else "p2p_disabled"
    if kind == "bandwidth":
        return f"{direction or 'unidirectional'}_bw_{p2p}"
    return f"latency_{'cpu' if sub == 'CPU' else 'gpu'}_{p2p}"


def parse_p2p_bandwidth_latency(text: str) -> P2PResult:
    """`p2pBandwidthLatencyTest` (CUDA samples): devices, peer access and every matrix it printed."""
    devices: list[P2PDevice] = []
    access: dict[tuple[int, int], bool] = {}
    matrices: dict[str, Matrix] = {}
    title: re.Match[str] | None = None
    columns: list[int] = []
    key: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if m := _P2P_DEVICE.match(line):
            devices.append(P2PDevice(int(m[1]), m[2], m[3]))
        elif m := _P2P_ACCESS.match(line):
            access[(int(m[1]), int(m[3]))] = m[2] == "CAN"
        elif m := _P2P_TITLE.match(line):
            title, key = m, None
        elif (m := _P2P_SUBHEADER.match(line)) and title is not None:
            columns = [int(c) for c in m[2].split()]
            key = _title_key(title, m[1])
            matrices[key] = {}
        elif key is not None and (m := _P2P_ROW.match(line)):
            values = m[2].split()
            if len(values) != len(columns):
                raise OutputFormatError(f"p2pBandwidthLatencyTest: row {line.strip()!r} has {len(values)} values "
                                        f"for {len(columns)} columns")
            for col, value in zip(columns, values, strict=True):
                matrices[key][(int(m[1]), col)] = float(value)
        elif line.startswith(("P2P Connectivity Matrix", "***NOTE", "NOTE:")):
            key = None  # the connectivity matrix (0/1) repeats the peer-access lines
    if not matrices:
        raise OutputFormatError("p2pBandwidthLatencyTest: no bandwidth or latency matrix in the output")
    return P2PResult(tuple(devices), access, matrices)


# ------------------------------------------------------------------------------------------ NCCL transport
# NCCL src/transport/net_ib.cc, net_socket.cc, net.cc (v2.21.5 to v2.30): "NET/IB : Using [0]dev:port/RoCE ...",
# "NET/IB : No device found.", "Using network IB|Socket|<plugin>", and channel lines "via NET/<net>/<dev>
# [(proxy)][/GDRDMA][/Shared]". The gpu_validate role reads a two-VM run with the same rules (its
# gpu_validate_rdma module; tests/unit/test_rdma_gids.py checks that both agree).

_NCCL_USING = re.compile(r"NCCL INFO Using network (\S+)")
_NCCL_CHANNEL = re.compile(r"via NET/(?P<net>[A-Za-z_0-9]+)/(?P<dev>\d+)(\(\d+\))?(?P<gdr>/GDRDMA)?")
_NCCL_IB_DEVICES = re.compile(r"NET/IB : Using((?: \[\d+\]\S+)+)")


@dataclass(frozen=True)
class NcclTransport:
    """The network NCCL chose (IB, also for plugins named IB*, or Socket), the nets its channels used, whether
    a channel used GPUDirect RDMA, and the IB devices it listed; `rdma` when the run went over RDMA only."""

    network: str | None
    channels: tuple[str, ...]
    gdr: bool
    ib_devices: tuple[str, ...]

    @property
    def rdma(self) -> bool:
        return self.network is not None and self.network.startswith("IB") and "Socket" not in self.channels

    def to_dict(self) -> dict[str, Any]:
        return {"network": self.network, "channels": list(self.channels), "gdr": self.gdr,
                "ib_devices": list(self.ib_devices), "rdma": self.rdma}


def nccl_transport(text: str) -> NcclTransport:
    """What an NCCL_DEBUG=INFO log says about the transport (network None when it says nothing)."""
    networks = _NCCL_USING.findall(text)
    channels = tuple(sorted({m.group("net") for m in _NCCL_CHANNEL.finditer(text)}))
    gdr = any(m.group("gdr") for m in _NCCL_CHANNEL.finditer(text))
    devices = tuple(d.strip() for m in _NCCL_IB_DEVICES.finditer(text) for d in m.group(1).split())
    network = networks[-1] if networks else (channels[0] if len(channels) == 1 else None)
    return NcclTransport(network, channels, gdr, devices)
