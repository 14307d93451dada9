// Package esxsh is gpusim's ESXi shell: an SSH server (golang.org/x/crypto/ssh) per simulated host that
// answers `nvidia-smi` and `esxcli system module parameters` like a real ESXi host with the NVIDIA vGPU
// manager installed.
//
// The shell sees the farm's own snapshots (internal/farm's HostInfo and GPUInfo), read and changed through the
// Backend interface (implemented by gpusim's main package over the farm), so the shell and the vSphere API
// always show the same state. It does not map the snapshot field by field: its view of a GPU embeds the farm's
// GPUInfo and adds only what nvidia-smi derives from it (bus id spelling, product name, NVLinks, ...), computed
// in one place (View, in this file). One source per property: a mode the farm adds to its GPU snapshot is
// visible to the renderers as it is. Every write is one Backend.Apply of a typed Change. Output is produced
// by pure renderers over the view (render.go); they are table-tested against the reference outputs in
// tests/fixtures/nvidia-smi. nvidia-smi's options are tables (nvsmi.go), as are its --query-gpu fields
// (render.go).
//
// Endpoints: one port per host on 127.0.0.1 (free ports, or -ssh-port-base), each with its own ed25519
// host key (persisted in <state dir>/ssh-hostkeys/). Login: -ssh-user (root) with gpusim's password, or a
// key from -ssh-authorized-keys. gpusim writes ssh_known_hosts ("[127.0.0.1]:PORT,host-name key") and
// ssh_hosts.json (host -> host, port, address, host_key, fingerprint) next to its env file and exports
// GPUSIM_SSH_USER, GPUSIM_SSH_KNOWN_HOSTS and GPUSIM_SSH_HOSTS. A host that is down or rebooting closes
// connections (a real one would not answer).
//
// Commands: nvidia-smi -L | -q | --query-gpu=...  --format=csv[,noheader][,nounits] | [-i ID] -mig 0|1 |
// [-i ID] -e 0|1, nvidia-smi mig -lgip | -lgipp | -lgi, nvidia-smi nvlink -s, nvidia-smi topo -m (all with -i
// index, bus id or UUID where the real tool takes it), esxcli system module parameters list|set -m MODULE
// [-p ...] [-a], esxcli software vib list, hostname, echo, true. Anything else: "sh: X: not found", exit 127. Bad flags: the real tools' messages
// and exit codes (nvidia-smi 2 invalid argument, 3 not supported, 6 not found; esxcli 1).
//
// Control (under /gpusim/ssh, see ControlHandler): GET shows endpoints, file paths and faults; faults
// (POST /gpusim/ssh/faults) make a matching command hang or fail with an exit status and message, make
// a host refuse connections, or drop the connection when a matching command starts.
package esxsh

import (
	"fmt"
	"strings"

	"gpusim/internal/farm"
)

// Host is what the shell of one ESXi host sees: the farm's snapshot, with each GPU completed by the values
// nvidia-smi derives from it. Host.GPUs (the view) stands in for the snapshot's HostInfo.GPUs.
type Host struct {
	farm.HostInfo
	GPUs []GPU // in nvidia-smi index order (PCI bus order)
}

// DriverVersion is the vGPU Manager's driver version (550.90.05); "" when none is installed (no nvidia-smi).
func (h Host) DriverVersion() string { return h.Access.Manager }

// GPU is one physical GPU as nvidia-smi shows it: the farm's snapshot (its index, PCI id, UUID, modes current
// and pending, vGPUs, ...) and what the shell derives from it and its board (View).
type GPU struct {
	farm.GPUInfo
	BusID         string // nvidia-smi form: 00000000:3B:00.0
	Name          string // product name, e.g. NVIDIA A100-PCIE-40GB
	Architecture  string // Ampere, Hopper, Ada Lovelace
	DeviceID      uint16 // PCI device id, e.g. 0x20F1
	MemoryMiB     int
	NUMANode      int
	MIGCapable    bool
	MIGProfiles   []GIProfile // the board's GPU instance profiles (nil without MIG)
	MIGInstances  []MIGInstance
	Heterogeneous bool // vGPU heterogeneous (mixed-size) mode
	// HeterogeneousTypes: the driver runs time-sliced vGPUs of different types on the GPU at once
	HeterogeneousTypes bool
	ActiveVGPUs        int // vGPUs of powered-on VMs on this GPU
	NVLinks            []Link
	SwitchPeers        []int // GPUs (nvidia-smi indexes) reached over the NVLinks through an NVSwitch
}

// MIGInstance is a GPU instance in use (created by vSphere for a running MIG-backed vGPU).
type MIGInstance struct {
	Profile string // e.g. 3g.20gb
	Start   int    // first memory slice
	Size    int    // memory slices
	ID      int    // GPU instance id (`nvidia-smi mig -lgi`)
}

// Link is one NVLink of a GPU.
type Link struct {
	Index    int
	Peer     int     // nvidia-smi index of the GPU at the other end; -1 when not connected or to an NVSwitch
	Up       bool    // trained and active
	SpeedGBs float64 // per-link bandwidth when up
}

// View is the shell's view of a farm host snapshot: the one place where nvidia-smi's values are derived from it.
func View(info farm.HostInfo) Host {
	h := Host{HostInfo: info}
	index := map[string]int{}
	for _, g := range info.GPUs {
		index[g.PCIID] = g.Index
	}
	for _, g := range info.GPUs {
		m := g.Model
		v := GPU{
			GPUInfo: g, BusID: nvidiaBusID(g.PCIID), Name: m.DeviceName, Architecture: architecture(m.Board),
			DeviceID: uint16(m.DeviceID), MemoryMiB: m.MemoryMiB, NUMANode: g.Index * 2 / max(len(info.GPUs), 1),
			MIGCapable: m.MIGCapable, MIGProfiles: migProfiles(m),
			Heterogeneous: g.TimeSlicedMode == farm.ModeMixedSize, ActiveVGPUs: len(g.VGPUs),
			HeterogeneousTypes: info.HeterogeneousTypes,
		}
		for _, s := range g.VGPUs {
			if s.Start >= 0 && s.Size > 0 { // instance ids in the order vSphere created them (a driver picks its own)
				v.MIGInstances = append(v.MIGInstances, MIGInstance{ID: len(v.MIGInstances) + 1, Profile: s.GI, Start: s.Start, Size: s.Size})
			}
		}
		v.NVLinks, v.SwitchPeers = gpuNVLinks(m, g, info.NVLinkTopology, index, linkSpeed[v.Architecture])
		h.GPUs = append(h.GPUs, v)
	}
	return h
}

// architecture names a board's GPU architecture from its vGPU board token (h100* Hopper, l* Ada
// Lovelace, a* Ampere).
func architecture(board string) string {
	switch {
	case strings.HasPrefix(board, "h"):
		return "Hopper"
	case strings.HasPrefix(board, "l"):
		return "Ada Lovelace"
	}
	return "Ampere"
}

// gpuNVLinks lists a GPU's NVLinks as `nvidia-smi nvlink -s` does: every link the board lists (catalogue
// `listed`), of which the ones its bridge or baseboard wires (`links`) go to its peers and are up while NVLink is
// on; the rest stay <inactive>. A board the catalogue gives no link counts for lists none. Which link numbers a
// bridge wires varies between hosts; gpusim lays them out as the H100 PCIe capture in tests/fixtures/nvidia-smi
// shows them (18 listed in three blocks of six, the first four of each block wired), whatever the board.
func gpuNVLinks(m *farm.Model, g farm.GPUInfo, topology string, index map[string]int, speed float64) ([]Link, []int) {
	if m.NVLinkLinks == 0 {
		return nil, nil
	}
	wired := wiredLinks(m.NVLinkListed, m.NVLinkLinks)
	peers := len(g.NVLinkPeers)
	var links []Link
	var switchPeers []int
	k := 0 // wired links handed out so far
	for i, w := range wired {
		l := Link{Index: i, Peer: -1, SpeedGBs: speed}
		if w && peers > 0 {
			l.Up = g.NVLinkUp
			if topology != farm.NVLinkNVSwitch { // a bridge: the wired links are split evenly among the peers
				l.Peer = index[g.NVLinkPeers[min(k/max(m.NVLinkLinks/peers, 1), peers-1)]]
			}
			k++
		}
		links = append(links, l)
	}
	if topology == farm.NVLinkNVSwitch { // every link goes to the NVSwitch fabric, which reaches every GPU of the set
		for _, peer := range g.NVLinkPeers {
			switchPeers = append(switchPeers, index[peer])
		}
	}
	return links, switchPeers
}

// wiredLinks says which of the listed links are wired: blocks of listed/3 links with the first wired/3 of each
// wired when both divide by three (the H100 PCIe capture: 0-3, 6-9, 12-15 of 18), else the first `wired`.
func wiredLinks(listed, wired int) []bool {
	out := make([]bool, listed)
	block, per := listed, wired
	if wired < listed && listed%3 == 0 && wired%3 == 0 {
		block, per = listed/3, wired/3
	}
	for i := range out {
		out[i] = i%block < per
	}
	return out
}

// linkSpeed is the per-link NVLink bandwidth nvidia-smi prints by architecture (NVLink 3 / NVLink 4).
var linkSpeed = map[string]float64{"Ampere": 25, "Hopper": 26.562}

// migProfiles are a board's GPU instance profiles from the catalogue, with nvidia-smi's columns.
func migProfiles(m *farm.Model) []GIProfile {
	var out []GIProfile
	for _, p := range m.GIProfiles {
		out = append(out, NewGIProfile(architecture(m.Board), m.FramebufferGB, p.Name, p.ID, p.MemoryGB, p.Starts, p.Size))
	}
	return out
}

// nvidiaBusID turns a vSphere PCI id (0000:3b:00.0) into nvidia-smi's form (00000000:3B:00.0).
func nvidiaBusID(pciID string) string {
	parts := strings.SplitN(pciID, ":", 2)
	if len(parts) != 2 {
		return strings.ToUpper(pciID)
	}
	return fmt.Sprintf("%08s", strings.ToUpper(parts[0])) + ":" + strings.ToUpper(parts[1])
}

// Change is one write of the shell, applied by Backend.Apply: a GPU's mode (GPUChange), a kernel module's
// option string (ModuleChange) or components installed from a depot (InstallChange).
type Change interface{ change() }

// GPUChange sets one mode of one GPU (nvidia-smi -mig, -e): which GPU, which property, which value.
type GPUChange struct {
	PCIID   string // the GPU as the farm names it (0000:3b:00.0)
	Setting farm.GPUSetting
}

// ModuleChange replaces a kernel module's configured option string (esxcli system module parameters set); it
// takes effect at the next reboot.
type ModuleChange struct {
	Module, Options string
}

// InstallChange installs components of a depot (esxcli software component apply, vib install); the host must be
// in maintenance mode. No Names: every component the depot holds.
type InstallChange struct {
	Depot string
	Names []string
}

func (GPUChange) change()     {}
func (ModuleChange) change()  {}
func (InstallChange) change() {}

// Applied is what one change did: when a GPU change takes effect (a module change and an install: at the next
// reboot), and what an install put on the host and took off it.
type Applied struct {
	Outcome farm.Outcome
	Install InstallResult
}

// Backend is the state behind the shell. Every method is safe for concurrent use.
type Backend interface {
	// HostNames lists the hosts that get an SSH endpoint.
	HostNames() []string
	// Host returns the farm's snapshot of one host.
	Host(name string) (farm.HostInfo, error)
	// VIBs are the rows of the host's `esxcli software vib list`: name, version, vendor, acceptance level,
	// install date, platforms (the packages vSphere's side lists for it).
	VIBs(name string) ([][]string, error)
	// Reachable reports whether the host is up (not powered off, not rebooting); SSH refuses otherwise.
	Reachable(name string) bool
	// Apply makes one change, every write of the shell; what it did (Applied).
	Apply(host string, c Change) (Applied, error)
}

// AccessBackend is an optional part of a Backend that models the host's SSH service and lockdown mode:
// while the service is stopped the host's port refuses connections (Server.Refresh re-reads it), and a user
// Login refuses is denied at authentication (lockdown mode without an exception for the user).
type AccessBackend interface {
	// Listening reports whether the host's SSH service runs.
	Listening(host string) bool
	// Login reports whether user may log in to the host now, and why not.
	Login(host, user string) (bool, string)
}
