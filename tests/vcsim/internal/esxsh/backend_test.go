package esxsh

import (
	"fmt"
	"sync"
)

// memBackend is a small in-memory Backend for the package's tests. It follows the same rules gpusim's
// farm does: Ampere keeps a MIG change pending until reboot, Hopper applies it at once when idle.
type memBackend struct {
	mu      sync.Mutex
	hosts   map[string]*Host
	down    map[string]bool
	options map[string]string // host/module -> option string
}

func newMemBackend(hosts ...Host) *memBackend {
	b := &memBackend{hosts: map[string]*Host{}, down: map[string]bool{}, options: map[string]string{}}
	for i := range hosts {
		h := hosts[i]
		b.hosts[h.Name] = &h
		b.options[h.Name+"/nvidia"] = ""
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

func copyHost(h *Host) Host {
	out := *h
	out.GPUs = make([]GPU, len(h.GPUs))
	for i, g := range h.GPUs {
		g.NVLinks = append([]Link(nil), g.NVLinks...)
		g.MIGInstances = append([]MIGInstance(nil), g.MIGInstances...)
		out.GPUs[i] = g
	}
	return out
}

func (b *memBackend) Host(name string) (Host, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.hosts[name]
	if !ok {
		return Host{}, fmt.Errorf("no host %s", name)
	}
	return copyHost(h), nil
}

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

func (b *memBackend) SetMIGMode(host string, idx int, enable bool) (MIGChange, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := &b.hosts[host].GPUs[idx]
	g.MIGPending = enable
	switch {
	case g.MIGCurrent == enable:
		return MIGApplied, nil
	case g.Architecture == "Ampere":
		return MIGPendingReset, nil
	case g.ActiveVGPUs > 0:
		return MIGPendingBusy, nil
	}
	g.MIGCurrent = enable
	return MIGApplied, nil
}

func (b *memBackend) SetECCMode(host string, idx int, enable bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hosts[host].GPUs[idx].ECCPending = enable
	return nil
}

// reboot applies pending MIG and ECC modes.
func (b *memBackend) reboot(host string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.hosts[host].GPUs {
		g := &b.hosts[host].GPUs[i]
		g.MIGCurrent = g.MIGPending
		g.ECCCurrent = g.ECCPending
	}
}

func (b *memBackend) ModuleOptions(host, module string) (string, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.options[host+"/"+module]
	return v, ok, nil
}

func (b *memBackend) SetModuleOptions(host, module, options string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.options[host+"/"+module] = options
	return nil
}

func nvlinks(peer, n int, up bool) []Link {
	var out []Link
	for i := 0; i < n; i++ {
		out = append(out, Link{Index: i, Peer: peer, Up: up, SpeedGBs: 25})
	}
	return out
}

// sampleHost: two NVLink-bridged A100-40GB (GPU1 in MIG mode with one 3g.20gb instance) and an L40S.
func sampleHost(name string) Host {
	return Host{Name: name, DriverVersion: "550.90.05", GPUs: []GPU{
		{Index: 0, BusID: "00000000:3B:00.0", UUID: "GPU-8c7a3b1e-0d4f-4c3a-9b2e-1f6d5a4c3b2a", Name: "NVIDIA A100-PCIE-40GB",
			Board: "a100", Architecture: "Ampere", DeviceID: 0x20F1, MemoryMiB: 40960, NUMANode: 0, MIGCapable: true,
			ECCCurrent: true, ECCPending: true, MIGProfiles: catalogueMIG("A100-40GB", "Ampere"), NVLinks: nvlinks(1, 4, true)},
		{Index: 1, BusID: "00000000:86:00.0", UUID: "GPU-1d2e3f40-5a6b-4c7d-8e9f-a0b1c2d3e4f5", Name: "NVIDIA A100-PCIE-40GB",
			Board: "a100", Architecture: "Ampere", DeviceID: 0x20F1, MemoryMiB: 40960, NUMANode: 0, MIGCapable: true,
			MIGCurrent: true, MIGPending: true, ECCCurrent: true, ECCPending: false, ActiveVGPUs: 1,
			MIGProfiles:  catalogueMIG("A100-40GB", "Ampere"),
			MIGInstances: []MIGInstance{{ID: 1, Profile: "3g.20gb", Start: 0, Size: 4}}, NVLinks: nvlinks(0, 4, true)},
		{Index: 2, BusID: "00000000:AF:00.0", UUID: "GPU-77aa66bb-55cc-44dd-33ee-22ff11009988", Name: "NVIDIA L40S",
			Board: "l40s", Architecture: "Ada Lovelace", DeviceID: 0x26B9, MemoryMiB: 46068, NUMANode: 1},
	}}
}

// hopperHost: two idle H100 SXM5 GPUs, linked by 18 NVLinks.
func hopperHost(name string) Host {
	h := Host{Name: name, DriverVersion: "550.90.05"}
	for i, bus := range []string{"00000000:18:00.0", "00000000:2A:00.0"} {
		links := nvlinks(1-i, 18, true)
		for j := range links {
			links[j].SpeedGBs = 26.562
		}
		h.GPUs = append(h.GPUs, GPU{Index: i, BusID: bus, UUID: fmt.Sprintf("GPU-0000000%d-aaaa-bbbb-cccc-ddddeeeeffff", i),
			Name: "NVIDIA H100 80GB HBM3", Board: "h100", Architecture: "Hopper", DeviceID: 0x2330, MemoryMiB: 81559,
			MIGCapable: true, MIGProfiles: catalogueMIG("H100-80GB", "Hopper"), NVLinks: links})
	}
	return h
}
