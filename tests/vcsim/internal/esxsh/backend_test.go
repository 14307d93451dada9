package esxsh

import (
	"fmt"
	"slices"
	"sync"

	"gpusim/internal/farm"
)

// memBackend is a small in-memory Backend for the package's tests over farm snapshots of hosts gpusim's farm
// would not build (mixed boards, chosen bus ids and UUIDs). A GPU change goes through the farm's own rules
// (farm.GPUState.Set), a reboot through farm.GPUState.Reboot: the backend knows no GPU property.
type memBackend struct {
	mu    sync.Mutex
	hosts map[string]*farm.HostInfo
	down  map[string]bool
}

func newMemBackend(hosts ...farm.HostInfo) *memBackend {
	b := &memBackend{hosts: map[string]*farm.HostInfo{}, down: map[string]bool{}}
	for i := range hosts {
		h := hosts[i]
		b.hosts[h.Name] = &h
	}
	return b
}

func (b *memBackend) HostNames() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for n := range b.hosts {
		out = append(out, n)
	}
	return out
}

// copyHost is a snapshot of a snapshot: nothing the caller changes reaches the backend.
func copyHost(h *farm.HostInfo) farm.HostInfo {
	out := *h
	out.GPUs = slices.Clone(h.GPUs)
	for i := range out.GPUs {
		out.GPUs[i].VGPUs = slices.Clone(h.GPUs[i].VGPUs)
		out.GPUs[i].NVLinkPeers = slices.Clone(h.GPUs[i].NVLinkPeers)
	}
	out.Modules = map[string]farm.ModuleOptions{}
	for k, v := range h.Modules {
		out.Modules[k] = v
	}
	return out
}

func (b *memBackend) Host(name string) (farm.HostInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.hosts[name]
	if !ok {
		return farm.HostInfo{}, fmt.Errorf("no host %s", name)
	}
	return copyHost(h), nil
}

func (b *memBackend) VIBs(name string) ([][]string, error) { return testVIBs, nil }

func (b *memBackend) Reachable(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.down[name]
}

func (b *memBackend) setDown(name string, down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down[name] = down
}

func (b *memBackend) Apply(host string, c Change) (Applied, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.hosts[host]
	switch c := c.(type) {
	case GPUChange:
		i := slices.IndexFunc(h.GPUs, func(g farm.GPUInfo) bool { return g.PCIID == c.PCIID })
		if i < 0 {
			return Applied{}, fmt.Errorf("GPU %s: %w", c.PCIID, farm.ErrNotFound)
		}
		g := &h.GPUs[i]
		outcome, err := g.GPUState.Set(g.Model, len(g.VGPUs) > 0, c.Setting)
		return Applied{Outcome: outcome}, err
	case ModuleChange:
		m, ok := h.Modules[c.Module]
		if !ok {
			return Applied{}, fmt.Errorf("module %s: %w", c.Module, farm.ErrNotFound)
		}
		m.Configured = c.Options
		h.Modules[c.Module] = m
		return Applied{Outcome: farm.PendingReboot}, nil
	}
	return Applied{}, fmt.Errorf("change %T: %w", c, farm.ErrInvalid)
}

// configured is a module's configured option string.
func (b *memBackend) configured(host, module string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hosts[host].Modules[module].Configured
}

// reboot applies pending GPU modes and configured module options, as the farm's reboot does.
func (b *memBackend) reboot(host string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.hosts[host]
	for i := range h.GPUs {
		h.GPUs[i].Reboot(nil)
	}
	for k, m := range h.Modules {
		m.Effective = m.Configured
		h.Modules[k] = m
	}
}

// testVIBs is what gpusim's farm lists for a host with the default vGPU Manager.
var testVIBs = [][]string{
	{"esx-base", "8.0.3-0.0.24022510", "VMware", "VMwareCertified", "2024-06-25", "host"},
	{"NVD-AIE_ESXi_8.0.0_Driver", "550.90.05-1OEM.800.1.0.20613240", "NVD", "VMwareAccepted", "2024-06-25", "host"},
	{"nvdgpumgmtdaemon", "550.90.05-1OEM.700.1.0.15843807", "NVD", "VMwareAccepted", "2024-06-25", "host"},
}

// catalogueModel is a board of the catalogue gpusim reads (the shell's tests read the same file as the rest of
// gpusim), copied so that a test may adjust it.
func catalogueModel(name string) farm.Model {
	m, ok := testCatalogue().Model(name)
	if !ok {
		panic("no model " + name)
	}
	return *m
}

// migSlot is a running MIG-backed vGPU in its GPU instance.
func migSlot(gi string, start, size int) farm.Slot {
	return farm.Slot{VM: "vm-" + gi, Profile: "grid_a100-" + gi, GI: gi, Start: start, Size: size}
}

// sampleHost: two A100-40GB joined by a 4-link bridge (GPU1 in MIG mode with one 3g.20gb instance, ECC off at
// the next reboot) and an L40S.
func sampleHost(name string) farm.HostInfo {
	a100 := catalogueModel("A100-40GB")
	a100.NVLinkLinks, a100.NVLinkListed = 4, 4 // a bridge of 4 links (the catalogue's wires 12)
	l40s := catalogueModel("L40S")
	l40s.MemoryMiB = 46068 // what a real L40S reports
	on := farm.GPUState{ECCCurrent: true, ECCPending: true}
	gpus := []farm.GPUInfo{
		{Index: 0, PCIID: "0000:3b:00.0", UUID: "GPU-8c7a3b1e-0d4f-4c3a-9b2e-1f6d5a4c3b2a", Model: &a100, GPUState: on,
			NVLinkSet: 0, NVLinkPeers: []string{"0000:86:00.0"}, NVLinkUp: true},
		{Index: 1, PCIID: "0000:86:00.0", UUID: "GPU-1d2e3f40-5a6b-4c7d-8e9f-a0b1c2d3e4f5", Model: &a100,
			GPUState:  farm.GPUState{MIGCurrent: true, MIGPending: true, ECCCurrent: true, ECCPending: false},
			NVLinkSet: 0, NVLinkPeers: []string{"0000:3b:00.0"}, NVLinkUp: true, VGPUs: []farm.Slot{migSlot("3g.20gb", 0, 4)}},
		{Index: 2, PCIID: "0000:af:00.0", UUID: "GPU-77aa66bb-55cc-44dd-33ee-22ff11009988", Model: &l40s, NVLinkSet: -1},
	}
	return testHost(name, farm.NVLinkPairs, gpus)
}

// hopperHost: two idle H100 SXM5 GPUs on an NVSwitch, 18 links each.
func hopperHost(name string) farm.HostInfo {
	h100 := catalogueModel("H100-SXM5-80GB")
	var gpus []farm.GPUInfo
	for i, pci := range []string{"0000:18:00.0", "0000:2a:00.0"} {
		gpus = append(gpus, farm.GPUInfo{Index: i, PCIID: pci, UUID: fmt.Sprintf("GPU-0000000%d-aaaa-bbbb-cccc-ddddeeeeffff", i),
			Model: &h100, GPUState: farm.GPUState{ECCCurrent: true, ECCPending: true}, NVLinkSet: 0,
			NVLinkPeers: []string{[]string{"0000:2a:00.0", "0000:18:00.0"}[i]}, NVLinkUp: true})
	}
	return testHost(name, farm.NVLinkNVSwitch, gpus)
}

func testHost(name, nvlink string, gpus []farm.GPUInfo) farm.HostInfo {
	for i := range gpus {
		gpus[i].ModelName = gpus[i].Model.Name
		gpus[i].TimeSlicedMode = farm.ModeSameSize
	}
	return farm.HostInfo{Name: name, GPUs: gpus, NVLinkTopology: nvlink, HeterogeneousTypes: true, Access: farm.Access{Manager: "550.90.05"},
		Modules: map[string]farm.ModuleOptions{"nvidia": {}}}
}
