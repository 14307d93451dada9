package farm

import (
	"fmt"
	"math"
)

// Model is one GPU board of the vGPU type catalogue, as gpusim uses it.
type Model struct {
	Name          string   `json:"name"`
	Aliases       []string `json:"aliases,omitempty"`
	Board         string   `json:"board"` // token in vGPU type names: a100, a100x, h100xm, ...
	DeviceName    string   `json:"deviceName"`
	DeviceNames   []string `json:"deviceNames"`
	DeviceID      int      `json:"deviceId"`
	DeviceIDs     []int    `json:"deviceIds"`
	FramebufferGB int      `json:"framebufferGB"`
	// MemoryMiB is the framebuffer as nvidia-smi reports it (memory.total): the catalogue's framebuffer_gb x 1024
	// (real boards report a little less, e.g. an L40S 46068 MiB).
	MemoryMiB      int         `json:"memoryMiB"`
	Source         string      `json:"source"`
	Table          string      `json:"table,omitempty"`
	MIGCapable     bool        `json:"migCapable"`
	MIGApply       string      `json:"migApply,omitempty"` // "reboot" (Ampere) or "immediate" (Hopper and later)
	MIGSlots       int         `json:"migSlots,omitempty"`
	GIProfiles     []GIProfile `json:"giProfiles,omitempty"`
	NVLinkCapable  bool        `json:"nvlinkCapable"`
	NVLinkTopology string      `json:"nvlinkTopology"`
	NVLinkLinks    int         `json:"nvlinkLinks,omitempty"`  // links the bridge or baseboard wires per GPU
	NVLinkListed   int         `json:"nvlinkListed,omitempty"` // links nvidia-smi lists per GPU (wired or not)
	// GPUs one NVLink bridge set connects (catalogue bridge_gpus: [2], or [2, 4] for the H200 NVL)
	NVLinkBridgeGPUs []int      `json:"nvlinkBridgeGPUs,omitempty"`
	Types            []VGPUType `json:"types"`
}

// VendorID is NVIDIA's PCI vendor id.
const VendorID = 0x10de

// VendorName is the vendor name vSphere reports for NVIDIA devices.
const VendorName = "NVIDIA Corporation"

// Profile is a vSphere vGPU profile name explained by the catalogue.
type Profile struct {
	Name    string  `json:"name"`   // as spelled: grid_a100-3-20c or nvidia_a100-3-20c
	Prefix  string  `json:"prefix"` // grid_ or nvidia_
	Type    string  `json:"type"`   // NVIDIA's type name, e.g. A100-3-20C
	Board   string  `json:"board"`
	FbGB    float64 `json:"fbGB"`
	Series  string  `json:"series"` // a, b, c or q
	MIG     bool    `json:"mig"`
	GI      string  `json:"gi,omitempty"` // GPU instance profile for MIG-backed types
	Media   bool    `json:"media,omitempty"`
	Class   string  `json:"class"`            // compute or quadro (vim.vm.VgpuProfileInfo.profileClass)
	Sharing string  `json:"sharing"`          // timeSliced or mig
	Opaque  bool    `json:"opaque,omitempty"` // offered by the host, unknown to the catalogue

	spec *VGPUType
}

// Spec is the catalogue row of the profile's type.
func (p Profile) Spec() *VGPUType { return p.spec }

// SameType reports whether two profiles name the same vGPU type, whatever their prefix.
func (p Profile) SameType(q Profile) bool { return p.Board == q.Board && p.Type == q.Type }

// FbGiB is the framebuffer as vgpuProfileInfo.fbSizeInGib reports it: whole GiB, at least 1.
func (p Profile) FbGiB() int64 { return max(int64(math.Floor(p.FbGB)), 1) }

// GIProfile returns the GPU instance profile with the given name, or nil.
func (m *Model) GIProfile(name string) *GIProfile {
	for i := range m.GIProfiles {
		if m.GIProfiles[i].Name == name {
			return &m.GIProfiles[i]
		}
	}
	return nil
}

// Offers reports whether the model offers the profile's type in MIG mode (mig=true) or time-sliced mode.
func (m *Model) Offers(p Profile, mig bool) bool {
	if p.Board != m.Board {
		return false
	}
	t := m.Type(p.Type)
	return t != nil && t.MIGBacked() == mig && (!mig || m.MIGCapable)
}

// ProfilesFor lists the profiles the model offers in the given mode, spelled with the prefix.
func (m *Model) ProfilesFor(mig bool, prefix string) []string {
	if mig && !m.MIGCapable {
		return nil
	}
	var out []string
	for i := range m.Types {
		if m.Types[i].MIGBacked() == mig {
			out = append(out, VSphereName(prefix, m.Types[i].Name))
		}
	}
	return out
}

// WholeGPUComputeType is the time-sliced C-series type that takes a whole GPU (the NVLink P2P type).
func (m *Model) WholeGPUComputeType() *VGPUType {
	var best *VGPUType
	for i := range m.Types {
		t := &m.Types[i]
		if t.MIGBacked() || t.Series != "C" {
			continue
		}
		if best == nil || t.FbGB > best.FbGB {
			best = t
		}
	}
	if best == nil || best.FbGB+0.5 < float64(m.FramebufferGB) {
		return nil
	}
	return best
}

// MaxEqual is how many vGPUs of a time-sliced type one GPU holds in equal-size mode: NVIDIA's published maximum
// capped at what the framebuffer holds (NVIDIA AI Enterprise 7 lists 6 x H100-16C on an 80 GB GPU: 5 fit;
// docs/vgpu-catalogue.md), else framebuffer divided by the type's framebuffer. MIG-backed types are held by the
// MIG geometry instead (their names round the instance memory up: 2 x 3g.71gb on a 141 GB GPU).
func (m *Model) MaxEqual(t *VGPUType) int {
	if t.MaxEqual != nil {
		return min(*t.MaxEqual, m.fits(t))
	}
	return m.fits(t)
}

// MaxMixed is the type's published mixed-size maximum capped at what the framebuffer holds (0: not published).
func (m *Model) MaxMixed(t *VGPUType) int {
	if t.MaxMixed == nil {
		return 0
	}
	return min(*t.MaxMixed, m.fits(t))
}

// fits is how many vGPUs of the type the GPU's framebuffer holds.
func (m *Model) fits(t *VGPUType) int {
	return int(math.Floor(float64(m.FramebufferGB)/t.FbGB + 1e-9))
}

func (m *Model) String() string { return fmt.Sprintf("%s (%s)", m.Name, m.Board) }

func free(used []bool, start, size int) bool {
	if start+size > len(used) {
		return false
	}
	for i := start; i < start+size; i++ {
		if used[i] {
			return false
		}
	}
	return true
}

func occupy(used []bool, start, size int) {
	for i := start; i < start+size; i++ {
		if i < len(used) {
			used[i] = true
		}
	}
}
