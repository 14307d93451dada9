package farm

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Physical NICs of the hosts: ConnectX adapters with SR-IOV virtual functions or enabled for PCI passthrough.
//
//	f.AddNICs(host, []NICSpec) error             the host's NICs (after AddHost)
//	f.NICs(host) ([]NICInfo, error)              snapshot, in PCI id order
//	f.ConfigureNIC(host, pciID, NICConfig) error  SR-IOV on/off and the number of VFs, or passthrough on/off;
//	    configured now, in effect after the host's next reboot (EndReboot), as ESXi without device rebind does
//	f.AdmitNICs(host, vmID, []NICNeed) ([]string, error)   at power-on: a VF of the named physical function,
//	    the named NIC whole, or any free NIC of the allowed ids (Dynamic DirectPath); all or nothing (ErrNoNIC)
//	f.Release(vmID) also frees what a VM's adapters hold.
//
// Device ids and names are pci.ids' (version 2026.08.22, vendor 15b3 Mellanox Technologies): ConnectX-6 Dx
// 101d, ConnectX-7 1021; their virtual functions 101e "ConnectX Family mlx5Gen Virtual Function". They are
// the same as vgpuctl/data/network.yaml (nics_test.go compares the two).

// NIC vendor, as pci.ids names it.
const (
	NICVendorID   = 0x15b3
	NICVendorName = "Mellanox Technologies"
)

// ErrNoNIC: a VM's SR-IOV or passthrough adapter finds no free virtual function or NIC at power-on.
var ErrNoNIC = errors.New("no free SR-IOV virtual function or passthrough NIC")

// NICModel is a NIC model with its physical and virtual function device ids.
type NICModel struct {
	Name       string
	DeviceName string
	DeviceID   int
	VFDeviceID int
}

// NICModels are the models a farm file may name (pci.ids 2026.08.22).
var NICModels = []NICModel{
	{Name: "ConnectX-6", DeviceName: "MT28908 Family [ConnectX-6]", DeviceID: 0x101b, VFDeviceID: 0x101c},
	{Name: "ConnectX-6 Dx", DeviceName: "MT2892 Family [ConnectX-6 Dx]", DeviceID: 0x101d, VFDeviceID: 0x101e},
	{Name: "ConnectX-6 Lx", DeviceName: "MT2894 Family [ConnectX-6 Lx]", DeviceID: 0x101f, VFDeviceID: 0x101e},
	{Name: "ConnectX-7", DeviceName: "MT2910 Family [ConnectX-7]", DeviceID: 0x1021, VFDeviceID: 0x101e},
	{Name: "ConnectX-8", DeviceName: "CX8 Family [ConnectX-8]", DeviceID: 0x1023, VFDeviceID: 0x101e},
}

// NICSpec describes NICs of one model on each host of a cluster (farm file `nics`).
type NICSpec struct {
	Model       string `yaml:"model" json:"model"`
	Count       int    `yaml:"count" json:"count"`             // NICs of this model per host (default 1)
	VFs         int    `yaml:"sriov_vfs" json:"sriov_vfs"`     // SR-IOV enabled with this many VFs at start (0: off)
	MaxVFs      int    `yaml:"max_vfs" json:"max_vfs"`         // maxVirtualFunctionSupported (default 16)
	Passthrough bool   `yaml:"passthrough" json:"passthrough"` // enabled for DirectPath I/O at start
}

// NICConfig is a passthrough configuration request (HostSriovConfig / HostPciPassthruConfig).
type NICConfig struct {
	SRIOV       bool // a HostSriovConfig
	Enabled     bool // sriovEnabled, or passthruEnabled
	VFs         int  // numVirtualFunction (SR-IOV)
	Passthrough bool // passthruEnabled (also sent with an SR-IOV config)
}

// NICInfo is a snapshot of one physical NIC.
type NICInfo struct {
	PCIID              string         `json:"pciId"`
	Vmnic              string         `json:"vmnic"`
	Model              string         `json:"model"`
	DeviceName         string         `json:"deviceName"`
	DeviceID           int            `json:"deviceId"`
	VFDeviceID         int            `json:"vfDeviceId"`
	NUMANode           int            `json:"numaNode"`
	SRIOVCapable       bool           `json:"sriovCapable"`
	SRIOVEnabled       bool           `json:"sriovEnabled"` // configured
	SRIOVActive        bool           `json:"sriovActive"`  // in effect
	NumVF              int            `json:"numVirtualFunction"`
	NumVFRequested     int            `json:"numVirtualFunctionRequested"`
	MaxVF              int            `json:"maxVirtualFunctionSupported"`
	VFHolders          map[string]int `json:"vfHolders"` // VM id -> VFs it holds
	PassthruEnabled    bool           `json:"passthruEnabled"`
	PassthruActive     bool           `json:"passthruActive"`
	PassthruHolder     string         `json:"passthruHolder,omitempty"`
	RebootNeeded       bool           `json:"rebootNeeded"`
	PendingSRIOV       bool           `json:"-"`
	PendingPassthrough bool           `json:"-"`
}

// NICNeed is one adapter of a VM at power-on.
type NICNeed struct {
	Kind    string   // sriov | passthrough
	PCIID   string   // the physical function (sriov) or the NIC (passthrough); "" with Allowed
	Allowed [][2]int // Dynamic DirectPath: vendor and device ids
}

type nic struct {
	id, vmnic         string
	model             NICModel
	numa              int
	maxVF             int
	sriovOn, sriovCfg bool // in effect, configured
	numVF, numVFCfg   int
	ptOn, ptCfg       bool
	vfHolders         map[string]int
	ptHolder          string
	sriovCapable      bool
}

// NICBus returns the PCI id of a host's i-th NIC: buses apart from the GPUs' (PCIBus).
func NICBus(i int) string {
	buses := []int{0x18, 0xd8, 0x19, 0xd9, 0x1a, 0xda, 0x1b, 0xdb}
	bus := 0xe0 + i
	if i < len(buses) {
		bus = buses[i]
	}
	return fmt.Sprintf("0000:%02x:00.0", bus)
}

// NICModelNamed finds a model by name.
func NICModelNamed(name string) (NICModel, bool) {
	i := slices.IndexFunc(NICModels, func(m NICModel) bool { return m.Name == name })
	if i < 0 {
		return NICModel{}, false
	}
	return NICModels[i], true
}

// CheckNICSpecs validates a cluster's NIC specs.
func CheckNICSpecs(specs []NICSpec) error {
	for i, s := range specs {
		if _, ok := NICModelNamed(s.Model); !ok {
			var names []string
			for _, m := range NICModels {
				names = append(names, m.Name)
			}
			return fmt.Errorf("nics[%d]: unknown NIC model %q (known: %v)", i, s.Model, names)
		}
		maxVF := s.MaxVFs
		if maxVF == 0 {
			maxVF = 16
		}
		if s.Count < 0 || s.Count > 8 || s.VFs < 0 || maxVF < 0 || s.VFs > maxVF {
			return fmt.Errorf("nics[%d]: count must be 0..8 and sriov_vfs 0..max_vfs", i)
		}
		if s.VFs > 0 && s.Passthrough {
			return fmt.Errorf("nics[%d]: a NIC is either SR-IOV or passthrough", i)
		}
	}
	return nil
}

// AddNICs adds a host's NICs in spec order, alternating NUMA nodes.
func (f *Farm) AddNICs(hostName string, specs []NICSpec) error {
	if err := CheckNICSpecs(specs); err != nil {
		return fmt.Errorf("host %s: %w", hostName, err)
	}
	return f.change(hostName, "nics", func(h *host) error {
		for _, s := range specs {
			model, _ := NICModelNamed(s.Model)
			count, maxVF := s.Count, s.MaxVFs
			if count == 0 {
				count = 1
			}
			if maxVF == 0 {
				maxVF = 16
			}
			for range count {
				i := len(h.nics)
				n := &nic{id: NICBus(i), vmnic: fmt.Sprintf("vmnic%d", i+4), model: model, numa: i % 2, maxVF: maxVF,
					sriovOn: s.VFs > 0, sriovCfg: s.VFs > 0, numVF: s.VFs, numVFCfg: s.VFs, ptOn: s.Passthrough,
					ptCfg: s.Passthrough, vfHolders: map[string]int{}, sriovCapable: true}
				h.nics = append(h.nics, n)
			}
		}
		return nil
	})
}

func (n *nic) info() NICInfo {
	holders := map[string]int{}
	for vm, c := range n.vfHolders {
		holders[vm] = c
	}
	return NICInfo{
		PCIID: n.id, Vmnic: n.vmnic, Model: n.model.Name, DeviceName: n.model.DeviceName, DeviceID: n.model.DeviceID,
		VFDeviceID: n.model.VFDeviceID, NUMANode: n.numa, SRIOVCapable: n.sriovCapable, SRIOVEnabled: n.sriovCfg,
		SRIOVActive: n.sriovOn && n.numVF > 0, NumVF: n.numVF, NumVFRequested: n.numVFCfg, MaxVF: n.maxVF,
		VFHolders: holders, PassthruEnabled: n.ptCfg, PassthruActive: n.ptOn, PassthruHolder: n.ptHolder,
		RebootNeeded: n.sriovOn != n.sriovCfg || n.numVF != n.numVFCfg || n.ptOn != n.ptCfg,
	}
}

// NICs returns a host's NICs in PCI id order.
func (f *Farm) NICs(hostName string) ([]NICInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, err := f.host(hostName)
	if err != nil {
		return nil, err
	}
	out := make([]NICInfo, 0, len(h.nics))
	for _, n := range h.nics {
		out = append(out, n.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PCIID < out[j].PCIID })
	return out, nil
}

func (h *host) nic(id string) (*nic, error) {
	for _, n := range h.nics {
		if n.id == id {
			return n, nil
		}
	}
	return nil, fmt.Errorf("host %s has no NIC %s: %w", h.name, id, ErrNotFound)
}

// ConfigureNIC records an SR-IOV or passthrough configuration; it takes effect at the next reboot.
func (f *Farm) ConfigureNIC(hostName, pciID string, cfg NICConfig) error {
	return f.change(hostName, "nics", func(h *host) error {
		n, err := h.nic(pciID)
		if err != nil {
			return err
		}
		if cfg.SRIOV {
			if cfg.Enabled && (cfg.VFs < 1 || cfg.VFs > n.maxVF) {
				return fmt.Errorf("NIC %s supports 1 to %d virtual functions, not %d: %w", pciID, n.maxVF, cfg.VFs, ErrInvalid)
			}
			n.sriovCfg, n.numVFCfg = cfg.Enabled, cfg.VFs
			if !cfg.Enabled {
				n.numVFCfg = 0
			}
			return nil
		}
		n.ptCfg = cfg.Enabled
		return nil
	})
}

// applyNICReboot puts the configured NIC settings in effect (EndReboot); VFs and passthrough NICs are not
// held across a reboot (the host is in maintenance mode with no running VM).
func (h *host) applyNICReboot() {
	for _, n := range h.nics {
		n.sriovOn, n.numVF, n.ptOn = n.sriovCfg, n.numVFCfg, n.ptCfg
		n.vfHolders, n.ptHolder = map[string]int{}, ""
	}
}

// AdmitNICs takes the NICs a VM's adapters need on the host, all or none; it returns the PCI id each need got.
func (f *Farm) AdmitNICs(hostName, vmID string, needs []NICNeed) ([]string, error) {
	if len(needs) == 0 {
		return nil, nil
	}
	f.mu.Lock()
	h, err := f.host(hostName)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	got, err := h.takeNICs(vmID, needs)
	if err == nil {
		if f.nicVM == nil {
			f.nicVM = map[string]string{}
		}
		f.nicVM[vmID] = hostName
	}
	f.mu.Unlock()
	if err == nil {
		f.notify(Event{Host: hostName, What: "nics"})
	}
	return got, err
}

func (h *host) takeNICs(vmID string, needs []NICNeed) ([]string, error) {
	free := map[string]int{}
	ptFree := map[string]bool{}
	for _, n := range h.nics {
		used := 0
		for _, c := range n.vfHolders {
			used += c
		}
		if n.sriovOn {
			free[n.id] = n.numVF - used
		}
		ptFree[n.id] = n.ptOn && n.ptHolder == ""
	}
	var got []string
	for _, need := range needs {
		id, err := h.pick(need, free, ptFree)
		if err != nil {
			return nil, err
		}
		got = append(got, id)
	}
	for i, need := range needs {
		n, _ := h.nic(got[i])
		if need.Kind == "sriov" {
			n.vfHolders[vmID]++
		} else {
			n.ptHolder = vmID
		}
	}
	return got, nil
}

func (h *host) pick(need NICNeed, free map[string]int, ptFree map[string]bool) (string, error) {
	if need.Kind == "sriov" {
		n, err := h.nic(need.PCIID)
		if err != nil {
			return "", fmt.Errorf("SR-IOV adapter: %w", err)
		}
		if free[n.id] <= 0 {
			return "", fmt.Errorf("no free SR-IOV virtual function on %s of host %s (%d in use): %w", n.id, h.name,
				n.numVF, ErrNoNIC)
		}
		free[n.id]--
		return n.id, nil
	}
	for _, n := range h.nics {
		named := need.PCIID != "" && n.id == need.PCIID
		allowed := need.PCIID == "" && slices.Contains(need.Allowed, [2]int{NICVendorID, n.model.DeviceID})
		if (named || allowed) && ptFree[n.id] {
			ptFree[n.id] = false
			return n.id, nil
		}
	}
	what := need.PCIID
	if what == "" {
		what = fmt.Sprintf("of the allowed ids %v", need.Allowed)
	}
	return "", fmt.Errorf("no free passthrough NIC %s on host %s: %w", what, h.name, ErrNoNIC)
}

// releaseNICs frees what a VM's adapters hold (called under the lock); it reports the host ("" if none).
func (f *Farm) releaseNICs(vmID string) string {
	hostName, ok := f.nicVM[vmID]
	if !ok {
		return ""
	}
	delete(f.nicVM, vmID)
	for _, n := range f.byName[hostName].nics {
		delete(n.vfHolders, vmID)
		if n.ptHolder == vmID {
			n.ptHolder = ""
		}
	}
	return hostName
}
