#!/usr/bin/python
"""Ansible module of the gpu_validate role: reads perftest results, the transport an NCCL run used, and the ATS
state of the NVIDIA (Mellanox) NICs from lspci, and fails in one line when a check does not hold.

Self-contained (it runs with the guest's Python); the parsers are plain functions, tested on the controller from
recorded outputs (tests/fixtures/rdma, tests/unit/test_rdma_gids.py). vgpuctl's experiment report reads NCCL's
transport with the same rules (vgpuctl.experiment.parsers.nccl_transport).
"""

from __future__ import annotations

import re

DOCUMENTATION = r"""
module: gpu_validate_rdma
short_description: Reads perftest, NCCL and lspci outputs for gpu_validate's RDMA checks
options:
  check: {description: What the output is., type: str, required: true, choices: [bandwidth, latency, nccl, ats]}
  output: {description: The tool's output., type: str, default: ""}
  peer: {description: The other VM (for messages)., type: str, default: ""}
  min_gbps: {description: "bandwidth: the least average bandwidth accepted (Gb/s, 0: any)", type: float, default: 0}
author: vgpuctl
"""

EXAMPLES = r"""
- name: Read ib_write_bw's result
  gpu_validate_rdma:
    check: bandwidth
    output: "{{ bw.stdout }}"
"""

RETURN = r"""
result: {description: The parsed values., type: dict, returned: always}
"""

# perftest src/perftest_parameters.h: RESULT_FMT (MB/sec before perftest 24.07, MiB/sec from it), RESULT_FMT_G
# (Gb/sec with --report_gbits), RESULT_FMT_LAT; warning lines may come between the header and the numbers.
_BW_HEAD = re.compile(r"#bytes\s+#iterations\s+BW peak\[(MB/sec|MiB/sec|Gb/sec)\]")
_LAT_HEAD = re.compile(r"#bytes\s+#iterations\s+t_min\[usec\]")
_NUM_ROW = re.compile(r"^\s*\d+\s+\d+(\s+[0-9.]+)+\s*$")
_TO_GBPS = {"MB/sec": 8 * 1e6 / 1e9, "MiB/sec": 8 * 1048576 / 1e9, "Gb/sec": 1.0}


class FormatError(ValueError):
    pass


def parse_bandwidth(text: str) -> dict:
    """ib_write_bw / ib_read_bw: the last result row; averages also in Gb/s."""
    head = _BW_HEAD.search(text)
    if head is None:
        raise FormatError("no perftest bandwidth header (#bytes #iterations BW peak[...])")
    rows = [line.split() for line in text[head.end():].splitlines() if _NUM_ROW.match(line)]
    if not rows:
        raise FormatError("no perftest bandwidth result row")
    size, iterations, peak, average, rate = rows[-1][:5]
    unit = head.group(1)
    return {"bytes": int(size), "iterations": int(iterations), "bw_peak": float(peak), "bw_average": float(average),
            "msg_rate_mpps": float(rate), "unit": unit, "average_gbps": round(float(average) * _TO_GBPS[unit], 3)}


def parse_latency(text: str) -> dict:
    """ib_read_lat / ib_write_lat: t_min, t_max, t_typical, t_avg of the last result row (microseconds)."""
    head = _LAT_HEAD.search(text)
    if head is None:
        raise FormatError("no perftest latency header (#bytes #iterations t_min[usec] ...)")
    rows = [line.split() for line in text[head.end():].splitlines() if _NUM_ROW.match(line)]
    if not rows:
        raise FormatError("no perftest latency result row")
    row = rows[-1]
    return {"bytes": int(row[0]), "iterations": int(row[1]), "t_min_us": float(row[2]), "t_max_us": float(row[3]),
            "t_typical_us": float(row[4]), "t_avg_us": float(row[5])}


# NCCL src/transport/net_ib.cc, net_socket.cc, net.cc (v2.21.5 to v2.30): "NET/IB : Using [0]dev:port/RoCE ...",
# "NET/IB : No device found.", "NET/Socket : Using [0]if:addr<port>", "Using network IB|Socket|<plugin>", and
# channel lines "via NET/<net>/<dev>[(proxy)][/GDRDMA][/Shared]" (older: "Channel 02 : ..." without /N).
_USING = re.compile(r"NCCL INFO Using network (\S+)")
_CHANNEL = re.compile(r"via NET/(?P<net>[A-Za-z_0-9]+)/(?P<dev>\d+)(\(\d+\))?(?P<gdr>/GDRDMA)?")
_IB_DEVICES = re.compile(r"NET/IB : Using((?: \[\d+\]\S+)+)")


def nccl_transport(text: str) -> dict:
    """The network NCCL chose ("IB" also for plugins named IB*, "Socket"), the nets its channels went over,
    whether any channel used GPUDirect RDMA, and the IB devices it listed."""
    networks = _USING.findall(text)
    channels = sorted({m.group("net") for m in _CHANNEL.finditer(text)})
    gdr = any(m.group("gdr") for m in _CHANNEL.finditer(text))
    devices = [d.strip() for m in _IB_DEVICES.finditer(text) for d in m.group(1).split()]
    network = networks[-1] if networks else (channels[0] if len(channels) == 1 else None)
    rdma = network is not None and network.startswith("IB") and not any(c == "Socket" for c in channels)
    return {"network": network, "channels": channels, "gdr": gdr, "ib_devices": devices, "rdma": rdma}


# lspci -vvv: "Capabilities: [480 v1] Address Translation Service (ATS)" then "ATSCtl: Enable+ ..." (NVIDIA AI
# Enterprise, Optimizing VM configuration for AI inference, Appendix "ATS and ACS configuration").
_DEVICE = re.compile(r"^([0-9a-fA-F]{2,4}:[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2})?\.[0-7]) (.*)$")
_ATSCTL = re.compile(r"ATSCtl:\s*Enable([+-])")


def ats_state(text: str) -> list[dict]:
    """Per PCI device: its name and ATS `enabled` (True/False), or None when lspci shows no ATS capability."""
    out: list[dict] = []
    for line in text.splitlines():
        m = _DEVICE.match(line)
        if m:
            out.append({"pci": m.group(1), "name": m.group(2).strip(), "ats": None})
            continue
        a = _ATSCTL.search(line)
        if a and out:
            out[-1]["ats"] = a.group(1) == "+"
    return out


def check(kind: str, output: str, peer: str = "", min_gbps: float = 0.0) -> tuple[dict, str]:
    """The parsed result and, when the check fails, its one-line message."""
    with_peer = f" with {peer}" if peer else ""
    try:
        if kind == "bandwidth":
            result = parse_bandwidth(output)
            low = min_gbps and result["average_gbps"] < min_gbps
            return result, (f"RDMA write bandwidth{with_peer} is {result['average_gbps']} Gb/s, below {min_gbps}"
                            if low else "")
        if kind == "latency":
            return parse_latency(output), ""
    except FormatError as exc:
        last = (output.strip().splitlines() or ["no output"])[-1]
        return {}, f"perftest {kind}{with_peer} failed: {exc}: {last}"
    if kind == "nccl":
        result = nccl_transport(output)
        if result["network"] is None:
            return result, f"the NCCL run{with_peer} printed no transport (was NCCL_DEBUG=INFO set?)"
        if not result["rdma"]:
            return result, (f"NCCL used NET/{result['network']} (TCP sockets), not NET/IB, between the VMs{with_peer}: "
                            "check NCCL_IB_HCA, NCCL_IB_GID_INDEX and the RDMA device")
        return result, ""
    devices = ats_state(output)
    off = [d for d in devices if d["ats"] is False]
    msg = ("ATS is disabled on " + ", ".join(f"{d['pci']} {d['name']}" for d in off) +
           ": GPUDirect RDMA needs ATS_ENABLED=true in the NIC firmware (mlxconfig) and a host reboot") if off else ""
    return {"devices": devices}, msg


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "check": {"type": "str", "required": True, "choices": ["bandwidth", "latency", "nccl", "ats"]},
            "output": {"type": "str", "default": ""},
            "peer": {"type": "str", "default": ""},
            "min_gbps": {"type": "float", "default": 0.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    result, message = check(p["check"], p["output"], p["peer"], p["min_gbps"])
    if message:
        module.fail_json(msg=f"gpu_validate: {message}", result=result)
    module.exit_json(changed=False, result=result)


if __name__ == "__main__":
    main()
