// Package farm is gpusim's GPU farm model: the pure, mutex-protected state shared by the vSphere
// (SOAP) side and the ESXi shell (SSH) side. It knows nothing about govmomi or SSH.
//
// Data:
//   - Catalog / Model: the vGPU type catalogue (vgpuctl/data/vgpu-catalogue.yaml, read at run time):
//     boards with device names and ids, framebuffer, MIG geometry (GIProfiles with start slots),
//     NVLink topology and vGPU types with NVIDIA's maxima and mixed-size placements.
//     Catalog.Profile explains a vSphere profile name (grid_ or nvidia_ spelling).
//   - Farm: hosts (HostInfo) with GPUs (GPUInfo). Every read returns a copy (snapshot).
//
// API for both sides (all methods are safe for concurrent use; errors name the unknown object):
//
//	f.Hosts() []HostInfo                         all hosts in creation order
//	f.Host(name) (HostInfo, error)               one host, with GPUs, module options, state
//	f.GPUs(host) ([]GPUInfo, error)              a host's GPUs in PCI id order (Index = nvidia-smi index)
//	f.GPU(host, pciID) (GPUInfo, error)
//	f.SetGPU(host, pciID, GPUSetting{Property, On}) (Outcome, error)
//	    the one write of a GPU mode; each property's state and rule is one entry of gpuprops.go's table
//	    (GPUInfo embeds GPUState). MIG mode: A100-class (Model.MIGApply "reboot") pending until RebootHost;
//	    H100-class ("immediate") at once when no vGPU runs on the GPU, else pending.
//	    Outcome Applied, PendingReboot or PendingBusy; ErrNotCapable for a board without the mode.
//	    f.SetMIGMode(host, pciID, enable) (MIGResult, error) is SetGPU for MIG mode.
//	f.Modules(host) []string                     kernel modules (nvidia first)
//	f.ModuleOptions(host, module) (ModuleOptions, error)   {Configured, Effective}
//	f.SetModuleOptions(host, module, opts) error  replaces the configured string; Effective follows
//	    at the next reboot. Effective NVreg_NvLinkDisable=1 puts the host's NVLink down;
//	    NVreg_RegistryDwords=RmPVMRL=<v> (and ...PerDevice=pci=<id>;RmPVMRL=<v>) sets GPUInfo.Scheduler.
//	f.UpdateGraphics(host, GraphicsConfig) error   host default type, policy, per-GPU type/vgpuMode;
//	    refused (ErrGPUBusy) while a vGPU runs on an affected GPU.
//	f.Admit(host, vmID, vmName, Request) ([]Assignment, error)   all-or-nothing vGPU admission
//	f.Release(vmID)                                frees a VM's vGPUs (power-off, suspend)
//	f.Assignments() []GPUAssignment                which VM's vGPU sits on which GPU / MIG slot
//	f.Candidates(host) ([]Candidate, policy, error) placement view of a host (for dry runs with Place)
//	f.SetAPIVersion(v); f.Rules()                  the API version's equal-size rule (8.0.1+: any types of
//	    one framebuffer size share a GPU; before: one type), used by Admit and for dry runs with Place
//	f.SetMaintenance(host, bool) error; f.BeginReboot(host) error; f.EndReboot(host) error
//	    EndReboot applies pending GPU modes and configured module options.
//	f.SetRebootFault(host, RebootFault) error; f.ClearRebootFault(host) error
//	    the next Count reboots leave pending GPU modes (by property name, e.g. "mig") and/or configured
//	    module options ("modules") unapplied, as if the GPU or driver refused them (a verification mismatch).
//	f.SetDown(host, bool) error; f.Reachable(host) bool  (false while down or rebooting)
//	f.Subscribe(func(Event))                       called after every change (outside the lock);
//	    the vSphere side uses it to refresh graphicsInfo, vgpuMode, sharedPassthruGpuTypes, etc.
//
// Placement (Place, Candidate.Fits) is a pure function following docs/gpu-rules.md and is tested
// against the shared vectors in tests/fixtures/placement.
package farm

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Graphics types (graphicsInfo.graphicsType, graphicsConfig.hostDefaultGraphicsType).
const (
	GraphicsShared       = "shared"
	GraphicsSharedDirect = "sharedDirect"
)

// Connection states as vSphere reports them.
const (
	StateConnected     = "connected"
	StateNotResponding = "notResponding"
)

// Errors callers may test with errors.Is.
var (
	ErrNotFound     = errors.New("not found")
	ErrGPUBusy      = errors.New("a powered-on VM holds a vGPU on the GPU")
	ErrNotCapable   = errors.New("not supported by the GPU model")
	ErrInsufficient = errors.New(InsufficientGraphics)
	ErrInvalid      = errors.New("invalid argument")
)

// ModuleOptions is a kernel module's option string: configured (persisted) and in effect.
type ModuleOptions struct {
	Configured string `json:"configured"`
	Effective  string `json:"effective"`
}

// Scheduler is a GPU's time-sliced scheduler as set by RmPVMRL.
type Scheduler struct {
	Policy          string `json:"policy"` // best-effort, equal-share, fixed-share or unknown
	Mode            string `json:"mode"`   // strict (round-robin by frequency), timeslice or none
	TimesliceMs     int    `json:"timesliceMs,omitempty"`
	FrequencyHz     int    `json:"frequencyHz,omitempty"`
	AveragingFactor int    `json:"averagingFactor,omitempty"`
	RmPVMRL         string `json:"rmPVMRL,omitempty"`
}

// GPUInfo is a snapshot of one physical GPU.
type GPUInfo struct {
	Index          int       `json:"index"`
	PCIID          string    `json:"pciId"` // 0000:3b:00.0
	UUID           string    `json:"uuid"`  // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, stable per host and PCI id
	Model          *Model    `json:"-"`
	ModelName      string    `json:"model"`
	GraphicsType   string    `json:"graphicsType"`   // effective: per-GPU override or host default
	VgpuMode       string    `json:"vgpuMode"`       // multiInstanceGpu when MIG is on, else TimeSlicedMode
	TimeSlicedMode string    `json:"timeSlicedMode"` // sameSize or mixedSize
	GPUState                 // the settable modes, current and pending (gpuprops.go)
	NVLinkSet      int       `json:"nvlinkSet"` // -1: not NVLink-connected
	NVLinkPeers    []string  `json:"nvlinkPeers,omitempty"`
	NVLinkUp       bool      `json:"nvlinkUp"`
	Scheduler      Scheduler `json:"scheduler"`
	VGPUs          []Slot    `json:"vgpus"`
	Profiles       []string  `json:"profiles"` // offered in the current mode
}

// HostInfo is a snapshot of one host.
type HostInfo struct {
	Name                string                   `json:"name"`
	Cluster             string                   `json:"cluster"`
	DefaultGraphicsType string                   `json:"defaultGraphicsType"`
	AssignmentPolicy    string                   `json:"assignmentPolicy"`
	InMaintenance       bool                     `json:"inMaintenance"`
	Rebooting           bool                     `json:"rebooting"`
	Down                bool                     `json:"down"`
	ConnectionState     string                   `json:"connectionState"`
	GPUs                []GPUInfo                `json:"gpus"`
	Modules             map[string]ModuleOptions `json:"modules"`
	RebootFault         *RebootFault             `json:"rebootFault,omitempty"`
	NVLinkTopology      string                   `json:"nvlinkTopology"` // none, pairs, quads or nvswitch
	ProfilePrefix       string                   `json:"profilePrefix"`  // grid_ or nvidia_
	UndeclaredParams    []string                 `json:"undeclaredParams,omitempty"`
	ExtraProfiles       []string                 `json:"extraProfiles,omitempty"` // offered, unknown to the catalogue
	// HeterogeneousTypes: the driver runs time-sliced vGPUs of different types on one GPU at once
	// (nvidia-smi -q, vGPU Device Capability, Heterogeneous Time-Slice Profiles).
	HeterogeneousTypes bool   `json:"heterogeneousTypes"`
	Access             Access `json:"access"` // vGPU Manager, SSH service, lockdown
}

// What a reboot fault leaves unapplied: a GPU property's name (GPUProperties) or the module options.
const (
	RebootIgnoreMIG     = string(GPUPropMIG)
	RebootIgnoreModules = "modules"
)

// RebootFault makes the next Count reboots of a host leave changes unapplied: a GPU property's name
// (GPUProperties, e.g. "mig") keeps each GPU's current mode of it and drops the pending one, "modules" keeps
// the module options in effect.
type RebootFault struct {
	Ignore []string `json:"ignore"`
	Count  int      `json:"count"`
}

func (r *RebootFault) ignores(what string) bool {
	return r != nil && slices.Contains(r.Ignore, what)
}

// MIGResult says what a MIG mode change did.
type MIGResult struct {
	Applied     bool `json:"applied"`
	Pending     bool `json:"pending"`
	Current     bool `json:"current"`
	PendingMode bool `json:"pendingMode"`
}

// GraphicsConfig is an UpdateGraphicsConfig request; empty fields keep their value.
type GraphicsConfig struct {
	DefaultGraphicsType string
	AssignmentPolicy    string
	Devices             []DeviceGraphics
}

// DeviceGraphics overrides graphicsType and/or vgpuMode of one GPU (by PCI id).
type DeviceGraphics struct {
	PCIID        string
	GraphicsType string
	VgpuMode     string // sameSize or mixedSize
}

// GPUAssignment is one vGPU placed on a GPU, for the control endpoint.
type GPUAssignment struct {
	Host  string `json:"host"`
	GPU   string `json:"gpu"`
	Model string `json:"model"`
	Slot
}

// Event tells subscribers that a host's GPU state changed.
type Event struct {
	Host string
	What string // mig, modules, graphics, assignment, maintenance, reboot, rebootfault, down
}

// HostSpec describes one host to add.
type HostSpec struct {
	Name                string
	Cluster             string
	Model               string
	GPUs                int
	NVLink              string   // "" (the board's topology), none, pairs, quads or nvswitch
	DefaultGraphicsType string   // shared or sharedDirect
	AssignmentPolicy    string   // performance or consolidation
	VgpuMode            string   // sameSize or mixedSize
	MIG                 bool     // GPUs start in MIG mode
	ModuleOptions       string   // nvidia module options, configured and in effect at start
	ProfilePrefix       string   // grid_ (default) or nvidia_: how the host spells vGPU types
	UndeclaredParams    []string // nvidia module parameters the host's driver does not declare
	ExtraProfiles       []string // profiles the host offers that no catalogue entry explains
	// SingleTypeDriver: the host's driver reports "Heterogeneous Time-Slice Profiles: Not Supported"
	// (nvidia-smi -q): an equal-size GPU holds one vGPU type at a time, whatever the vSphere version.
	SingleTypeDriver bool
	Access           AccessSpec
}

type gpu struct {
	id             string
	uuid           string
	model          *Model
	graphicsType   string // "" = host default
	timeSlicedMode string
	state          GPUState // the settable modes (gpuprops.go)
	nvlinkSet      int
	slots          []Slot
}

type host struct {
	name, cluster       string
	defaultGraphicsType string
	policy              string
	gpus                []*gpu
	modules             map[string]*ModuleOptions
	moduleOrder         []string
	maintenance         bool
	rebooting           bool
	down                bool
	rebootFault         *RebootFault
	prefix              string
	undeclared          []string
	nvlink              string // none, pairs, quads or nvswitch
	extras              []string
	singleType          bool // the driver does not run different time-sliced types on one GPU
	access              Access
	nics                []*nic // physical NICs (nics.go)
}

// Farm is the GPU farm state.
type Farm struct {
	mu              sync.Mutex
	catalog         *Catalog
	sameSizeAnyType bool // vSphere API 8.0.1+: equal-size GPUs take any type of the same framebuffer
	hosts           []*host
	byName          map[string]*host
	vmHost          map[string]string // vm id -> host holding its vGPUs
	nicVM           map[string]string // vm id -> host whose VFs or passthrough NICs it holds (nics.go)
	software        *software         // depots, installs, guest drivers (software.go)
	listeners       []func(Event)
}

// New returns an empty farm using the given vGPU type catalogue (nil: MustDefaultCatalog, for tests).
func New(c *Catalog) *Farm {
	if c == nil {
		c = MustDefaultCatalog()
	}
	return &Farm{catalog: c, byName: map[string]*host{}, vmHost: map[string]string{}, sameSizeAnyType: true}
}

// Catalog returns the farm's vGPU type catalogue.
func (f *Farm) Catalog() *Catalog { return f.catalog }

// SetAPIVersion applies the vSphere API version's equal-size rule: from the catalogue's version
// (vsphere.same_size_any_type_since) vGPUs of different types with the same framebuffer may share a GPU;
// before, only the identical type.
func (f *Farm) SetAPIVersion(v string) {
	f.mu.Lock()
	f.sameSizeAnyType = APIAtLeast(v, f.catalog.SameSizeAnyTypeSince)
	f.mu.Unlock()
}

// Rules returns the placement rules the farm applies.
func (f *Farm) Rules() Rules {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Rules{SameSizeAnyType: f.sameSizeAnyType}
}

// PCIBus returns the deterministic PCI id of the i-th GPU of a host.
func PCIBus(i int) string {
	buses := []int{0x3b, 0x3c, 0x5e, 0x5f, 0x86, 0x87, 0xaf, 0xb0}
	bus := 0x10 + i
	if i < len(buses) {
		bus = buses[i]
	}
	return fmt.Sprintf("0000:%02x:00.0", bus)
}

// gpuUUID derives a stable GPU UUID (nvidia-smi's GPU-xxxxxxxx-... form) from host name and PCI id.
func gpuUUID(host, pciID string) string {
	h := fmt.Sprintf("%x", sha256.Sum256([]byte(host+"/"+pciID)))
	return fmt.Sprintf("GPU-%s-%s-%s-%s-%s", h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
}

// AddHost adds a host with its GPUs.
func (f *Farm) AddHost(s HostSpec) error {
	m, ok := f.catalog.Model(s.Model)
	if !ok {
		return f.catalog.UnknownModel(s.Model)
	}
	if s.GPUs < 0 || s.GPUs > 32 {
		return fmt.Errorf("host %s: gpus must be 0..32, got %d", s.Name, s.GPUs)
	}
	group, err := nvlinkGroup(s.NVLink, m)
	if err != nil {
		return fmt.Errorf("host %s: %w", s.Name, err)
	}
	switch s.ProfilePrefix {
	case "":
		s.ProfilePrefix = PrefixGrid
	case PrefixGrid, PrefixNvidia:
	default:
		return fmt.Errorf("host %s: profile prefix must be %s or %s, got %q", s.Name, PrefixGrid, PrefixNvidia, s.ProfilePrefix)
	}
	if s.DefaultGraphicsType == "" {
		s.DefaultGraphicsType = GraphicsShared
	}
	if s.DefaultGraphicsType != GraphicsShared && s.DefaultGraphicsType != GraphicsSharedDirect {
		return fmt.Errorf("host %s: graphics type must be shared or sharedDirect, got %q", s.Name, s.DefaultGraphicsType)
	}
	if s.AssignmentPolicy == "" {
		s.AssignmentPolicy = PolicyPerformance
	}
	if s.AssignmentPolicy != PolicyPerformance && s.AssignmentPolicy != PolicyConsolidation {
		return fmt.Errorf("host %s: policy must be performance or consolidation, got %q", s.Name, s.AssignmentPolicy)
	}
	if s.VgpuMode == "" {
		s.VgpuMode = ModeSameSize
	}
	if s.VgpuMode != ModeSameSize && s.VgpuMode != ModeMixedSize {
		return fmt.Errorf("host %s: vgpu mode must be sameSize or mixedSize, got %q", s.Name, s.VgpuMode)
	}
	if s.MIG && !m.MIGCapable {
		return fmt.Errorf("host %s: GPU model %s is not MIG capable", s.Name, m.Name)
	}
	h := &host{
		name: s.Name, cluster: s.Cluster, defaultGraphicsType: s.DefaultGraphicsType, policy: s.AssignmentPolicy,
		modules: map[string]*ModuleOptions{}, moduleOrder: []string{"nvidia", "nvme_pcie", "vmw_ahci"},
		prefix: s.ProfilePrefix, undeclared: slices.Clone(s.UndeclaredParams), nvlink: s.NVLink,
		extras: slices.Clone(s.ExtraProfiles), singleType: s.SingleTypeDriver,
	}
	if h.access, err = s.Access.access(s.Name); err != nil {
		return err
	}
	for _, p := range s.ExtraProfiles {
		if strings.TrimSpace(p) == "" || strings.ContainsAny(p, " \t") {
			return fmt.Errorf("host %s: extra profile %q is not a profile name", s.Name, p)
		}
	}
	if h.nvlink == "" {
		h.nvlink = NVLinkTopology(m)
	}
	if group == 0 {
		h.nvlink = NVLinkNone
	}
	for _, name := range h.moduleOrder {
		h.modules[name] = &ModuleOptions{}
	}
	h.modules["nvidia"] = &ModuleOptions{Configured: s.ModuleOptions, Effective: s.ModuleOptions}
	for i := 0; i < s.GPUs; i++ {
		g := &gpu{id: PCIBus(i), uuid: gpuUUID(s.Name, PCIBus(i)), model: m, timeSlicedMode: s.VgpuMode,
			state: newGPUState(s), nvlinkSet: -1}
		if group == nvswitchGroup && h.nvlink == NVLinkNVSwitch || group > 0 && (i/group+1)*group <= s.GPUs {
			g.nvlinkSet = i / group
		}
		h.gpus = append(h.gpus, g)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, dup := f.byName[s.Name]; dup {
		return fmt.Errorf("duplicate host name %q", s.Name)
	}
	f.hosts = append(f.hosts, h)
	f.byName[s.Name] = h
	return nil
}

// NVLink topologies a host spec may name (the board's catalogue topology when empty).
const (
	NVLinkNone     = "none"
	NVLinkPairs    = "pairs"
	NVLinkQuads    = "quads"
	NVLinkNVSwitch = "nvswitch"
)

// nvswitchGroup is how many GPUs one NVSwitch fabric connects (HGX 8-GPU baseboard).
const nvswitchGroup = 8

// nvlinkGroup is the size of the host's NVLink-connected GPU sets (0: none).
func nvlinkGroup(topology string, m *Model) (int, error) {
	if topology == "" {
		topology = NVLinkTopology(m)
	}
	group := 0
	switch topology {
	case NVLinkNone:
		return 0, nil
	case NVLinkPairs:
		group = 2
	case NVLinkQuads:
		group = 4
	case NVLinkNVSwitch:
		group = nvswitchGroup
	default:
		return 0, fmt.Errorf("nvlink must be none, pairs, quads or nvswitch, got %q", topology)
	}
	if !m.NVLinkCapable {
		return 0, fmt.Errorf("GPU model %s has no NVLink", m.Name)
	}
	return group, nil
}

// NVLinkTopology is the host topology a board gets when none is given: nvswitch, pairs, quads or none.
func NVLinkTopology(m *Model) string {
	switch m.NVLinkTopology {
	case TopologyBridgePairs:
		return NVLinkPairs
	case TopologyBridgeQuads:
		return NVLinkQuads
	case TopologyNVSwitch:
		return NVLinkNVSwitch
	}
	return NVLinkNone
}

// Subscribe registers fn to be called after every state change.
func (f *Farm) Subscribe(fn func(Event)) {
	f.mu.Lock()
	f.listeners = append(f.listeners, fn)
	f.mu.Unlock()
}

func (f *Farm) notify(events ...Event) {
	f.mu.Lock()
	ls := append([]func(Event){}, f.listeners...)
	f.mu.Unlock()
	for _, e := range events {
		for _, fn := range ls {
			fn(e)
		}
	}
}

func (f *Farm) host(name string) (*host, error) {
	h, ok := f.byName[name]
	if !ok {
		return nil, fmt.Errorf("host %q: %w", name, ErrNotFound)
	}
	return h, nil
}

func (h *host) gpu(id string) (*gpu, error) {
	for _, g := range h.gpus {
		if g.id == id {
			return g, nil
		}
	}
	return nil, fmt.Errorf("GPU %q on host %s: %w", id, h.name, ErrNotFound)
}

// Hosts returns snapshots of all hosts.
func (f *Farm) Hosts() []HostInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]HostInfo, 0, len(f.hosts))
	for _, h := range f.hosts {
		out = append(out, h.info())
	}
	return out
}

// Host returns a snapshot of one host.
func (f *Farm) Host(name string) (HostInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, err := f.host(name)
	if err != nil {
		return HostInfo{}, err
	}
	return h.info(), nil
}

// GPUs returns snapshots of a host's GPUs.
func (f *Farm) GPUs(hostName string) ([]GPUInfo, error) {
	info, err := f.Host(hostName)
	return info.GPUs, err
}

// GPU returns a snapshot of one GPU.
func (f *Farm) GPU(hostName, pciID string) (GPUInfo, error) {
	gpus, err := f.GPUs(hostName)
	if err != nil {
		return GPUInfo{}, err
	}
	for _, g := range gpus {
		if g.PCIID == pciID {
			return g, nil
		}
	}
	return GPUInfo{}, fmt.Errorf("GPU %q on host %s: %w", pciID, hostName, ErrNotFound)
}

func (h *host) info() HostInfo {
	state := StateConnected
	if h.down || h.rebooting {
		state = StateNotResponding
	}
	info := HostInfo{
		Name: h.name, Cluster: h.cluster, DefaultGraphicsType: h.defaultGraphicsType, AssignmentPolicy: h.policy,
		InMaintenance: h.maintenance, Rebooting: h.rebooting, Down: h.down, ConnectionState: state,
		Modules: map[string]ModuleOptions{}, NVLinkTopology: h.nvlink, ProfilePrefix: h.prefix,
		UndeclaredParams: slices.Clone(h.undeclared), ExtraProfiles: slices.Clone(h.extras), Access: h.access,
		HeterogeneousTypes: !h.singleType,
	}
	info.Access.LockdownExceptions = slices.Clone(h.access.LockdownExceptions)
	if h.rebootFault != nil {
		rf := RebootFault{Ignore: slices.Clone(h.rebootFault.Ignore), Count: h.rebootFault.Count}
		info.RebootFault = &rf
	}
	for k, v := range h.modules {
		info.Modules[k] = *v
	}
	opts := ParseOptions(h.modules["nvidia"].Effective)
	nvlinkOff := opts["NVreg_NvLinkDisable"] == "1"
	for i, g := range h.gpus {
		gi := GPUInfo{
			Index: i, PCIID: g.id, UUID: g.uuid, Model: g.model, ModelName: g.model.Name, GraphicsType: h.graphicsType(g),
			VgpuMode: g.timeSlicedMode, TimeSlicedMode: g.timeSlicedMode, GPUState: g.state, NVLinkSet: g.nvlinkSet,
			Scheduler: schedulerFor(opts, g.id), VGPUs: append([]Slot{}, g.slots...),
			Profiles: append(g.model.ProfilesFor(g.state.MIGCurrent, h.prefix), h.extras...),
		}
		if h.access.Manager == "" { // without NVIDIA's vGPU Manager the host offers no vGPU types
			gi.Profiles = nil
		}
		if g.state.MIGCurrent {
			gi.VgpuMode = ModeMIG
		}
		if g.nvlinkSet >= 0 {
			gi.NVLinkUp = !nvlinkOff
			for _, p := range h.gpus {
				if p != g && p.nvlinkSet == g.nvlinkSet {
					gi.NVLinkPeers = append(gi.NVLinkPeers, p.id)
				}
			}
		}
		info.GPUs = append(info.GPUs, gi)
	}
	return info
}

func (h *host) graphicsType(g *gpu) string {
	if g.graphicsType != "" {
		return g.graphicsType
	}
	return h.defaultGraphicsType
}

// Modules lists a host's kernel modules.
func (f *Farm) Modules(hostName string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, err := f.host(hostName)
	if err != nil {
		return nil, err
	}
	return append([]string{}, h.moduleOrder...), nil
}

// ModuleOptions returns a module's configured and effective option strings.
func (f *Farm) ModuleOptions(hostName, module string) (ModuleOptions, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, err := f.host(hostName)
	if err != nil {
		return ModuleOptions{}, err
	}
	m, ok := h.modules[module]
	if !ok {
		return ModuleOptions{}, fmt.Errorf("module %q on host %s: %w", module, hostName, ErrNotFound)
	}
	return *m, nil
}

// SetModuleOptions replaces a module's configured option string (in effect after the next reboot).
func (f *Farm) SetModuleOptions(hostName, module, options string) error {
	if _, err := parseOptionsStrict(options); err != nil {
		return err
	}
	f.mu.Lock()
	h, err := f.host(hostName)
	if err == nil {
		m, ok := h.modules[module]
		if !ok {
			err = fmt.Errorf("module %q on host %s: %w", module, hostName, ErrNotFound)
		} else {
			m.Configured = options
		}
	}
	f.mu.Unlock()
	if err == nil {
		f.notify(Event{Host: hostName, What: "modules"})
	}
	return err
}

// UpdateGraphics applies a graphics configuration to a host at once; it is refused when a vGPU runs
// on a GPU whose graphics type or vGPU mode would change.
func (f *Farm) UpdateGraphics(hostName string, cfg GraphicsConfig) error {
	f.mu.Lock()
	err := f.updateGraphics(hostName, cfg)
	f.mu.Unlock()
	if err == nil {
		f.notify(Event{Host: hostName, What: "graphics"})
	}
	return err
}

func (f *Farm) updateGraphics(hostName string, cfg GraphicsConfig) error {
	h, err := f.host(hostName)
	if err != nil {
		return err
	}
	check := func(v string, allowed ...string) error {
		for _, a := range allowed {
			if v == "" || v == a {
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %s: %w", v, strings.Join(allowed, ", "), ErrInvalid)
	}
	if err := check(cfg.DefaultGraphicsType, GraphicsShared, GraphicsSharedDirect); err != nil {
		return fmt.Errorf("hostDefaultGraphicsType %w", err)
	}
	if err := check(cfg.AssignmentPolicy, PolicyPerformance, PolicyConsolidation); err != nil {
		return fmt.Errorf("sharedPassthruAssignmentPolicy %w", err)
	}
	newType := map[*gpu]string{}
	newMode := map[*gpu]string{}
	for _, g := range h.gpus {
		newType[g] = g.graphicsType
		newMode[g] = g.timeSlicedMode
	}
	for _, d := range cfg.Devices {
		g, err := h.gpu(d.PCIID)
		if err != nil {
			return err
		}
		if err := check(d.GraphicsType, GraphicsShared, GraphicsSharedDirect); err != nil {
			return fmt.Errorf("deviceType %s graphicsType %w", d.PCIID, err)
		}
		if err := check(d.VgpuMode, ModeSameSize, ModeMixedSize); err != nil {
			return fmt.Errorf("deviceType %s vgpuMode %w", d.PCIID, err)
		}
		if d.GraphicsType != "" {
			newType[g] = d.GraphicsType
		}
		if d.VgpuMode != "" {
			newMode[g] = d.VgpuMode
		}
	}
	def := h.defaultGraphicsType
	if cfg.DefaultGraphicsType != "" {
		def = cfg.DefaultGraphicsType
	}
	for _, g := range h.gpus {
		effOld, effNew := h.graphicsType(g), newType[g]
		if effNew == "" {
			effNew = def
		}
		if len(g.slots) > 0 && (effOld != effNew || g.timeSlicedMode != newMode[g]) {
			return fmt.Errorf("GPU %s on host %s: %w", g.id, h.name, ErrGPUBusy)
		}
	}
	h.defaultGraphicsType = def
	if cfg.AssignmentPolicy != "" {
		h.policy = cfg.AssignmentPolicy
	}
	for _, g := range h.gpus {
		g.graphicsType, g.timeSlicedMode = newType[g], newMode[g]
	}
	return nil
}

// Candidates returns the placement view of a host's GPUs.
func (f *Farm) Candidates(hostName string) ([]Candidate, string, error) {
	info, err := f.Host(hostName)
	if err != nil {
		return nil, "", err
	}
	return candidates(info), info.AssignmentPolicy, nil
}

func candidates(info HostInfo) []Candidate {
	groups := map[int][]int{} // NVLink set -> the device group sizes the host offers for it
	for _, o := range NVLinkOffers(info) {
		groups[o.Set] = o.Sizes
	}
	out := make([]Candidate, 0, len(info.GPUs))
	for _, g := range info.GPUs {
		out = append(out, Candidate{
			ID: g.PCIID, Model: g.Model, MIG: g.MIGCurrent, VgpuMode: g.TimeSlicedMode,
			SharedDirect: g.GraphicsType == GraphicsSharedDirect, NVLinkSet: g.NVLinkSet, NVLinkUp: g.NVLinkUp,
			NVLinkGroups: groups[g.NVLinkSet], Slots: g.VGPUs, HostOnly: info.ExtraProfiles,
			SingleType: !info.HeterogeneousTypes,
		})
	}
	return out
}

// Admit places all vGPUs of a VM on the host's GPUs or none (ErrInsufficient).
func (f *Farm) Admit(hostName, vmID, vmName string, req Request) ([]Assignment, error) {
	f.mu.Lock()
	h, err := f.host(hostName)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	if _, held := f.vmHost[vmID]; held {
		f.mu.Unlock()
		return nil, fmt.Errorf("VM %s already holds vGPUs: %w", vmID, ErrInvalid)
	}
	if err := f.guestRefusal(h, vmName); err != nil { // software.go
		f.mu.Unlock()
		return nil, err
	}
	info := h.info()
	assign, err := Place(f.catalog, candidates(info), req, h.policy, Rules{SameSizeAnyType: f.sameSizeAnyType})
	if err != nil {
		f.mu.Unlock()
		if errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), InsufficientGraphics) {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		return nil, ErrInsufficient
	}
	for i := range assign {
		assign[i].Slot.VM, assign[i].Slot.VMName = vmID, vmName
		g, _ := h.gpu(assign[i].GPU)
		g.slots = append(g.slots, assign[i].Slot)
	}
	if len(assign) > 0 {
		f.vmHost[vmID] = hostName
	}
	f.mu.Unlock()
	if len(assign) > 0 {
		f.notify(Event{Host: hostName, What: "assignment"})
	}
	return assign, nil
}

// Release frees all vGPUs a VM holds; it reports the host they were on ("" if none).
func (f *Farm) Release(vmID string) string {
	f.mu.Lock()
	if nicHost := f.releaseNICs(vmID); nicHost != "" {
		defer f.notify(Event{Host: nicHost, What: "nics"})
	}
	hostName, ok := f.vmHost[vmID]
	if ok {
		delete(f.vmHost, vmID)
		h := f.byName[hostName]
		for _, g := range h.gpus {
			kept := g.slots[:0]
			for _, s := range g.slots {
				if s.VM != vmID {
					kept = append(kept, s)
				}
			}
			g.slots = kept
			if len(g.slots) == 0 {
				g.state.idle(g.model) // a pending Hopper MIG change applies once the GPU is idle
			}
		}
	}
	f.mu.Unlock()
	if ok {
		f.notify(Event{Host: hostName, What: "assignment"})
	}
	return hostName
}

// VMGPUs lists the slots a VM holds.
func (f *Farm) VMGPUs(vmID string) []GPUAssignment {
	var out []GPUAssignment
	for _, a := range f.Assignments() {
		if a.VM == vmID {
			out = append(out, a)
		}
	}
	return out
}

// Assignments lists every placed vGPU, by host, GPU and start slot.
func (f *Farm) Assignments() []GPUAssignment {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []GPUAssignment{}
	for _, h := range f.hosts {
		for _, g := range h.gpus {
			for _, s := range g.slots {
				out = append(out, GPUAssignment{Host: h.name, GPU: g.id, Model: g.model.Name, Slot: s})
			}
		}
	}
	return out
}

// SetMaintenance records maintenance mode (the vSphere side checks powered-on VMs first).
func (f *Farm) SetMaintenance(hostName string, on bool) error {
	return f.change(hostName, "maintenance", func(h *host) error { h.maintenance = on; return nil })
}

// BeginReboot marks a host rebooting (not responding); it must be in maintenance mode.
func (f *Farm) BeginReboot(hostName string) error {
	return f.change(hostName, "reboot", func(h *host) error {
		if !h.maintenance {
			return fmt.Errorf("host %s is not in maintenance mode: %w", h.name, ErrInvalid)
		}
		for _, g := range h.gpus {
			if len(g.slots) > 0 {
				return fmt.Errorf("GPU %s on host %s: %w", g.id, h.name, ErrGPUBusy)
			}
		}
		h.rebooting = true
		return nil
	})
}

// EndReboot brings a rebooting host back with pending GPU modes and configured module options applied,
// except what an armed reboot fault ignores.
func (f *Farm) EndReboot(hostName string) error {
	return f.change(hostName, "reboot", func(h *host) error {
		h.rebooting = false
		fault := h.rebootFault
		if fault != nil {
			if fault.Count--; fault.Count <= 0 {
				h.rebootFault = nil
			}
		}
		for _, g := range h.gpus {
			g.state.Reboot(fault)
		}
		if !fault.ignores(RebootIgnoreModules) {
			for _, m := range h.modules {
				m.Effective = m.Configured
			}
		}
		h.applyNICReboot()
		h.applySoftwareReboot(f.sw())
		return nil
	})
}

// SetRebootFault arms a reboot fault on a host, replacing any armed one.
func (f *Farm) SetRebootFault(hostName string, fault RebootFault) error {
	if fault.Count < 1 {
		return fmt.Errorf("reboot fault count %d: must be at least 1: %w", fault.Count, ErrInvalid)
	}
	known := []string{RebootIgnoreModules}
	for _, p := range GPUProperties() {
		known = append(known, string(p))
	}
	if len(fault.Ignore) == 0 {
		return fmt.Errorf("reboot fault: ignore must name one or more of %s: %w", strings.Join(known, ", "), ErrInvalid)
	}
	for _, what := range fault.Ignore {
		if !slices.Contains(known, what) {
			return fmt.Errorf("reboot fault: unknown ignore %q (known: %s): %w", what, strings.Join(known, ", "), ErrInvalid)
		}
	}
	fault.Ignore = slices.Clone(fault.Ignore)
	return f.change(hostName, "rebootfault", func(h *host) error { h.rebootFault = &fault; return nil })
}

// ClearRebootFault disarms a host's reboot fault.
func (f *Farm) ClearRebootFault(hostName string) error {
	return f.change(hostName, "rebootfault", func(h *host) error { h.rebootFault = nil; return nil })
}

// SetDown takes a host off the network (not responding) or brings it back.
func (f *Farm) SetDown(hostName string, down bool) error {
	return f.change(hostName, "down", func(h *host) error { h.down = down; return nil })
}

// Reachable reports whether the host answers (not down, not rebooting).
func (f *Farm) Reachable(hostName string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.byName[hostName]
	return ok && !h.down && !h.rebooting
}

func (f *Farm) change(hostName, what string, fn func(*host) error) error {
	f.mu.Lock()
	h, err := f.host(hostName)
	if err == nil {
		err = fn(h)
	}
	f.mu.Unlock()
	if err == nil {
		f.notify(Event{Host: hostName, What: what})
	}
	return err
}

// ParseOptions splits a module option string "A=1 B=x=y" into a map (the first '=' separates).
func ParseOptions(s string) map[string]string {
	m, _ := parseOptionsStrict(s)
	return m
}

func parseOptionsStrict(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, field := range strings.Fields(s) {
		k, v, ok := strings.Cut(field, "=")
		if !ok || k == "" {
			return m, fmt.Errorf("module option %q is not key=value: %w", field, ErrInvalid)
		}
		m[k] = strings.Trim(v, `"`)
	}
	return m, nil
}

// schedulerFor derives a GPU's scheduler from the nvidia module's effective options.
func schedulerFor(opts map[string]string, pciID string) Scheduler {
	value := ""
	for _, kv := range strings.Split(opts["NVreg_RegistryDwords"], ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "RmPVMRL" {
			value = v
		}
	}
	dev := ""
	for _, kv := range strings.Split(opts["NVreg_RegistryDwordsPerDevice"], ";") {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
		case k == "pci":
			dev = strings.ToLower(v)
		case k == "RmPVMRL" && (dev == strings.ToLower(pciID) || "0000:"+dev == strings.ToLower(pciID)):
			value = v
		}
	}
	return DecodeRmPVMRL(value)
}

// SortedGPUIDs returns the PCI ids of GPUInfos, sorted.
func SortedGPUIDs(gpus []GPUInfo) []string {
	ids := make([]string, 0, len(gpus))
	for _, g := range gpus {
		ids = append(ids, g.PCIID)
	}
	sort.Strings(ids)
	return ids
}
