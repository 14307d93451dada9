// Package esxsh is gpusim's ESXi shell: an SSH server (golang.org/x/crypto/ssh) per simulated host that
// answers `nvidia-smi` and `esxcli system module parameters` like a real ESXi host with the NVIDIA vGPU
// manager installed.
//
// The package does not know the farm model. It reads and changes host state through the Backend
// interface (implemented by gpusim's main package over internal/farm), so the shell and the vSphere API
// always show the same state. Output is produced by pure renderers over the small view structs in this
// file (render.go); they are table-tested against the reference outputs in tests/fixtures/nvidia-smi.
//
// Endpoints: one port per host on 127.0.0.1 (free ports, or -ssh-port-base), each with its own ed25519
// host key (persisted in <state dir>/ssh-hostkeys/). Login: -ssh-user (root) with gpusim's password, or a
// key from -ssh-authorized-keys. gpusim writes ssh_known_hosts ("[127.0.0.1]:PORT,host-name key") and
// ssh_hosts.json (host -> host, port, address, host_key, fingerprint) next to its env file and exports
// GPUSIM_SSH_USER, GPUSIM_SSH_KNOWN_HOSTS and GPUSIM_SSH_HOSTS. A host that is down or rebooting closes
// connections (a real one would not answer).
//
// Commands: nvidia-smi -L | -q | --query-gpu=...  --format=csv[,noheader][,nounits] | [-i ID] -mig 0|1,
// nvidia-smi mig -lgip | -lgipp, nvidia-smi nvlink -s, nvidia-smi topo -m (all with -i index, bus id or
// UUID where the real tool takes it), esxcli system module parameters list|set -m MODULE [-p ...] [-a],
// hostname, echo, true. Anything else: "sh: X: not found", exit 127. Bad flags: the real tools' messages
// and exit codes (nvidia-smi 2 invalid argument, 3 not supported, 6 not found; esxcli 1).
//
// Control (under /gpusim/ssh, see ControlHandler): GET shows endpoints, file paths and faults; faults
// (POST /gpusim/ssh/faults) make a matching command hang or fail with an exit status and message, make
// a host refuse connections, or drop the connection when a matching command starts.
package esxsh

// Host is a snapshot of what the shell of one ESXi host can see.
type Host struct {
	Name          string // inventory name, e.g. esx01.example.com
	DriverVersion string // vGPU manager driver, e.g. 550.90.05
	GPUs          []GPU  // in nvidia-smi index order (PCI bus order)
	// UndeclaredNvidiaParams are parameters this host's nvidia module does not declare (an older
	// driver): `esxcli system module parameters list -m nvidia` leaves them out.
	UndeclaredNvidiaParams []string
	// VIBs are the rows of `esxcli software vib list`: name, version, vendor, acceptance level, install date,
	// platforms. An empty DriverVersion means no vGPU Manager: nvidia-smi is not found.
	VIBs [][]string
	// VGPUs are the running vGPUs with the guest driver each VM reports (`nvidia-smi vgpu -q`, software.go).
	VGPUs []VGPU
}

// GPU is one physical NVIDIA GPU of a host.
type GPU struct {
	Index        int
	BusID        string // nvidia-smi form: 00000000:3B:00.0
	UUID         string // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
	Name         string // product name, e.g. NVIDIA A100-PCIE-40GB
	Board        string // vGPU board token: a100, a100x, h100xm, l40s, ...
	Architecture string // Ampere, Hopper, Ada Lovelace
	DeviceID     uint16 // PCI device id, e.g. 0x20F1
	MemoryMiB    int
	NUMANode     int

	MIGCapable  bool
	MIGProfiles []GIProfile // the board's GPU instance profiles (nil without MIG)
	MIGCurrent  bool        // MIG mode in effect
	MIGPending  bool        // MIG mode after the next reset/reboot (equals MIGCurrent when nothing is pending)
	ECCCurrent  bool        // ECC memory in effect
	ECCPending  bool        // ECC memory after the next reboot

	Heterogeneous bool // vGPU heterogeneous (mixed-size) mode
	ActiveVGPUs   int  // vGPUs of powered-on VMs on this GPU
	MIGInstances  []MIGInstance
	NVLinks       []Link
	SwitchPeers   []int // GPUs (nvidia-smi indexes) reached over the NVLinks through an NVSwitch
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

// MIGChange is what a request to switch a GPU's MIG mode did.
type MIGChange int

const (
	// MIGApplied: the mode is in effect now (Hopper and later, GPU idle).
	MIGApplied MIGChange = iota
	// MIGPendingReset: the GPU needs a reset the host cannot do at runtime (Ampere on ESXi): pending until reboot.
	MIGPendingReset
	// MIGPendingBusy: the GPU is in use (vGPUs running): pending until the GPU is idle and the host reboots.
	MIGPendingBusy
)

// Backend is the state behind the shell. Every method is safe for concurrent use.
type Backend interface {
	// HostNames lists the hosts that get an SSH endpoint.
	HostNames() []string
	// Host returns a snapshot of one host.
	Host(name string) (Host, error)
	// Reachable reports whether the host is up (not powered off, not rebooting); SSH refuses otherwise.
	Reachable(name string) bool
	// SetMIGMode requests MIG mode on or off for one GPU (by nvidia-smi index).
	SetMIGMode(host string, gpuIndex int, enable bool) (MIGChange, error)
	// SetECCMode sets ECC memory on or off for one GPU (by nvidia-smi index) from the next reboot.
	SetECCMode(host string, gpuIndex int, enable bool) error
	// ModuleOptions returns a kernel module's configured option string (HostKernelModuleSystem).
	// ok is false when the host has no such module.
	ModuleOptions(host, module string) (options string, ok bool, err error)
	// SetModuleOptions replaces a module's option string; it takes effect at the next reboot.
	SetModuleOptions(host, module, options string) error
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
