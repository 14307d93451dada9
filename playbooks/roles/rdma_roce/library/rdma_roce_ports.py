#!/usr/bin/python
"""Ansible module of the rdma_roce role: the guest's RDMA ports and the RoCE v2 GID index NCCL must use.

Self-contained (it runs with the guest's Python); the parsers are plain functions, tested on the controller from
recorded outputs (tests/unit/test_rdma_gids.py). Sources of each format are named beside its parser.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re

DOCUMENTATION = r"""
module: rdma_roce_ports
short_description: RDMA ports of the guest and the RoCE v2 GID index of the configured interface
description:
  - Reads the RDMA ports from sysfs (/sys/class/infiniband), or from C(show_gids) output when given, and picks
    the RoCE v2 GID of the configured interface for NCCL_IB_GID_INDEX. C(rdma link) and C(ibv_devinfo) outputs,
    when given, are parsed and returned, and a device they list that sysfs lacks is reported.
options:
  sysfs_root: {description: Where sysfs is mounted., type: str, default: /sys}
  interface: {description: The network interface of the RDMA adapter (empty for any)., type: str, default: ""}
  address: {description: The IPv4 address the adapter was given (empty for any)., type: str, default: ""}
  roce_version: {description: The RoCE version whose GID is picked., type: int, default: 2}
  show_gids: {description: Output of show_gids (used when sysfs lists no GID)., type: str, default: ""}
  rdma_link: {description: Output of C(rdma link show) or C(rdma -j link show)., type: str, default: ""}
  ibv_devinfo: {description: Output of C(ibv_devinfo)., type: str, default: ""}
  require: {description: Fail when no port has a usable GID., type: bool, default: false}
author: vgpuctl
"""

EXAMPLES = r"""
- name: Find the RoCE port and its GID index
  rdma_roce_ports:
    interface: ens224
  register: ports
"""

RETURN = r"""
ports: {description: Every RDMA port with its link layer, state and GIDs., type: list, returned: always}
selected:
  description: "The port picked: hca (dev:port), gid_index, netdev, gid, ipv4 (empty when none)."
  type: dict
  returned: always
link: {description: Ports C(rdma link) lists., type: list, returned: always}
devinfo: {description: Devices C(ibv_devinfo) lists., type: list, returned: always}
"""

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


# ------------------------------------------------------------------------------------------------ sysfs
# Kernel ABI Documentation/ABI/stable/sysfs-class-infiniband: ports/<n>/link_layer, state, gids/<i>,
# gid_attrs/types/<i> ("IB/RoCE v1" or "RoCE v2"), gid_attrs/ndevs/<i> (the net device). Reading an unpopulated
# GID's type fails (EINVAL): such a GID is skipped, as NCCL and show_gids do.


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def roce_version(type_text: str | None) -> int | None:
    """`IB/RoCE v1` -> 1, `RoCE v2` -> 2 (NCCL net_ib.cc ncclIbRoceGetVersionNum); None when unknown."""
    if not type_text:
        return None
    m = re.search(r"[vV](\d)", type_text)
    return int(m.group(1)) if m else None


def read_sysfs(root: str) -> list[dict]:
    base = os.path.join(root, "class", "infiniband")
    ports = []
    for dev in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        pdir = os.path.join(base, dev, "ports")
        for port in sorted(os.listdir(pdir), key=lambda p: int(p) if p.isdigit() else 0) if os.path.isdir(pdir) else []:
            ports.append(_port(os.path.join(pdir, port), dev, int(port)))
    return ports


def _port(path: str, dev: str, port: int) -> dict:
    gids = []
    gdir = os.path.join(path, "gids")
    for name in sorted(os.listdir(gdir), key=int) if os.path.isdir(gdir) else []:
        gid = _read(os.path.join(gdir, name))
        version = roce_version(_read(os.path.join(path, "gid_attrs", "types", name)))
        ndev = _read(os.path.join(path, "gid_attrs", "ndevs", name)) or ""
        if gid and gid != ZERO_GID and version is not None:
            gids.append({"index": int(name), "gid": gid, "version": version, "ndev": ndev, "ipv4": ipv4_of(gid)})
    ndev0 = _read(os.path.join(path, "gid_attrs", "ndevs", "0")) or ""
    return {"device": dev, "port": port, "link_layer": _read(os.path.join(path, "link_layer")) or "",
            "state": (_read(os.path.join(path, "state")) or "").split(":")[-1].strip(), "netdev": ndev0, "gids": gids}


def ipv4_of(gid: str) -> str:
    """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), else ""."""
    try:
        mapped = ipaddress.IPv6Address(gid).ipv4_mapped
    except ValueError:
        return ""
    return str(mapped) if mapped is not None else ""


# --------------------------------------------------------------------------------------------- show_gids
# Mellanox/mlnx-tools sbin/show_gids: a header, a dashes line, then DEV PORT INDEX GID IPv4 VER DEV (tab
# separated; IPv4 empty for non-mapped GIDs), then n_gids_found=N.

_SHOW_GIDS_ROW = re.compile(
    r"^(\S+)\s+(\d+)\s+(\d+)\s+([0-9a-fA-F:]{39})\s+(?:(\d+\.\d+\.\d+\.\d+)\s+)?v(\d)\s*(\S*)\s*$")


def parse_show_gids(text: str) -> list[dict]:
    """show_gids rows as ports with their GIDs (link layer unknown: show_gids lists only RoCE GIDs)."""
    ports: dict[tuple[str, int], dict] = {}
    for line in text.splitlines():
        m = _SHOW_GIDS_ROW.match(line.strip())
        if not m:
            continue
        dev, port, index, gid, ipv4, version, ndev = m.groups()
        entry = ports.setdefault((dev, int(port)), {"device": dev, "port": int(port), "link_layer": "Ethernet",
                                                     "state": "", "netdev": ndev, "gids": []})
        entry["gids"].append({"index": int(index), "gid": gid.lower(), "version": int(version), "ndev": ndev,
                              "ipv4": ipv4 or ipv4_of(gid)})
    return list(ports.values())


# --------------------------------------------------------------------------------------------- rdma link
# iproute2 rdma/link.c: `link DEV/PORT ... state S physical_state P netdev N` (v5.5 on), the older
# `IDX/PORT: DEV/PORT: state S ...`, or JSON from `rdma -j link` (ifname, port, state, physical_state, netdev).

_LINK = re.compile(r"^(?:link\s+|\d+/\d+:\s+)(\S+?)/(\d+):?\s+(.*)$")


def parse_rdma_link(text: str) -> list[dict]:
    text = text.strip()
    if text.startswith("["):
        return [{"device": d.get("ifname", ""), "port": int(d.get("port", 0)), "state": d.get("state", ""),
                 "physical_state": d.get("physical_state", ""), "netdev": d.get("netdev", "")}
                for d in json.loads(text)]
    out = []
    for line in text.splitlines():
        m = _LINK.match(line.strip())
        if not m:
            continue
        words = m.group(3).split()
        fields = dict(zip(words[::2], words[1::2], strict=False))
        out.append({"device": m.group(1), "port": int(m.group(2)), "state": fields.get("state", ""),
                    "physical_state": fields.get("physical_state", ""), "netdev": fields.get("netdev", "")})
    return out


# ------------------------------------------------------------------------------------------- ibv_devinfo
# rdma-core ibv_devinfo: `hca_id: DEV`, its `vendor_id`, `vendor_part_id` (the PCI device id in decimal), and
# per `port: N` its `state: PORT_ACTIVE (4)` and `link_layer`.


def parse_ibv_devinfo(text: str) -> list[dict]:
    devices: list[dict] = []
    port: dict | None = None
    for raw in text.splitlines():
        line = raw.strip()
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "hca_id":
            devices.append({"device": value, "vendor_id": "", "vendor_part_id": "", "ports": []})
            port = None
        elif not devices:
            continue
        elif key in ("vendor_id", "vendor_part_id"):
            devices[-1][key] = value
        elif key == "port":
            port = {"port": int(value), "state": "", "link_layer": ""}
            devices[-1]["ports"].append(port)
        elif port is not None and key == "state":
            port["state"] = value.split()[0]
        elif port is not None and key == "link_layer":
            port["link_layer"] = value
    return devices


# ---------------------------------------------------------------------------------------------- choosing


def choose(ports: list[dict], interface: str = "", address: str = "", version: int = 2) -> tuple[dict, str]:
    """The GID NCCL_IB_GID_INDEX must name: of the given RoCE version, IPv4-mapped (NCCL's default address
    family), on the interface when one is given, holding the address when one is given; the lowest index of
    the first port that has one. ({}, why) when there is none."""
    candidates = []
    for p in ports:
        if p["link_layer"] and p["link_layer"] != "Ethernet":
            continue
        for g in p["gids"]:
            if g["version"] != version or not g["ipv4"]:
                continue
            if interface and g["ndev"] != interface:
                continue
            if address and g["ipv4"] != address:
                continue
            candidates.append((p, g))
    if not candidates:
        return {}, _why_none(ports, interface, address, version)
    p, g = candidates[0]
    return {"hca": f"{p['device']}:{p['port']}", "device": p["device"], "port": p["port"], "gid_index": g["index"],
            "netdev": g["ndev"], "gid": g["gid"], "ipv4": g["ipv4"], "state": p["state"]}, ""


def _why_none(ports: list[dict], interface: str, address: str, version: int) -> str:
    roce = [p for p in ports if p["link_layer"] in ("", "Ethernet")]
    if not roce:
        return "no RoCE port (no RDMA device on Ethernet in /sys/class/infiniband)"
    shown = "; ".join(
        f"{p['device']}:{p['port']} " + (", ".join(f"{g['index']} v{g['version']} {g['ipv4'] or g['gid']} {g['ndev']}"
                                                  for g in p["gids"]) or "no GIDs") for p in roce)
    want = f"RoCE v{version} GID with an IPv4 address" + (f" on {interface}" if interface else "") + (
        f" holding {address}" if address else "")
    return f"no {want} ({shown}); is the interface up with its address?"


def run(params: dict) -> dict:
    ports = read_sysfs(params["sysfs_root"])
    if not any(p["gids"] for p in ports) and params.get("show_gids"):
        ports = parse_show_gids(params["show_gids"])
    selected, why = choose(ports, params.get("interface") or "", params.get("address") or "",
                           int(params.get("roce_version") or 2))
    link = parse_rdma_link(params.get("rdma_link") or "")
    devinfo = parse_ibv_devinfo(params.get("ibv_devinfo") or "")
    known = {p["device"] for p in ports}
    missing = sorted(({d["device"] for d in link} | {d["device"] for d in devinfo}) - known)
    return {"ports": ports, "selected": selected, "why": why, "link": link, "devinfo": devinfo,
            "not_in_sysfs": missing}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "str", "default": "/sys"},
            "interface": {"type": "str", "default": ""},
            "address": {"type": "str", "default": ""},
            "roce_version": {"type": "int", "default": 2},
            "show_gids": {"type": "str", "default": ""},
            "rdma_link": {"type": "str", "default": ""},
            "ibv_devinfo": {"type": "str", "default": ""},
            "require": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    result = run(module.params)
    if module.params["require"] and not result["selected"]:
        module.fail_json(msg=f"rdma_roce: {result['why']}", **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
