package farm

import (
	_ "embed"
	"fmt"
	"regexp"
	"sort"
	"strconv"

	"gopkg.in/yaml.v3"
)

//go:embed models.yaml
var modelsYAML []byte

// GIProfile is a MIG GPU instance profile with its fixed placements.
type GIProfile struct {
	Name     string `yaml:"name" json:"name"`          // e.g. "3g.20gb"
	ID       int    `yaml:"id" json:"id"`              // nvidia-smi profile id
	Slices   int    `yaml:"slices" json:"slices"`      // compute slices
	MemoryGB int    `yaml:"memory_gb" json:"memoryGB"` // framebuffer of the instance
	Size     int    `yaml:"size" json:"size"`          // memory slots a placement occupies
	Starts   []int  `yaml:"starts" json:"starts"`      // allowed start slots, ascending
}

// Model is the static data of one GPU model.
type Model struct {
	Name          string      `yaml:"name" json:"name"`
	Board         string      `yaml:"board" json:"board"`
	DeviceName    string      `yaml:"device_name" json:"deviceName"`
	DeviceID      int         `yaml:"device_id" json:"deviceId"`
	SubsystemID   int         `yaml:"subsystem_id" json:"subsystemId"`
	FramebufferGB int         `yaml:"framebuffer_gb" json:"framebufferGB"`
	MIGCapable    bool        `yaml:"mig_capable" json:"migCapable"`
	MIGApply      string      `yaml:"mig_apply" json:"migApply"` // "reboot" (Ampere) or "immediate" (Hopper)
	MIGSlots      int         `yaml:"mig_slots" json:"migSlots"`
	NVLinkCapable bool        `yaml:"nvlink_capable" json:"nvlinkCapable"`
	NVLinkLinks   int         `yaml:"nvlink_links" json:"nvlinkLinks"`
	GIProfiles    []GIProfile `yaml:"gi_profiles" json:"giProfiles"`
	TimeSliced    []string    `yaml:"time_sliced" json:"timeSliced"` // profiles offered in time-sliced mode
	MIG           []string    `yaml:"mig" json:"mig"`                // profiles offered in MIG mode
}

// VendorID is NVIDIA's PCI vendor id.
const VendorID = 0x10de

// VendorName is the vendor name vSphere reports for NVIDIA devices.
const VendorName = "NVIDIA Corporation"

// Profile is a parsed vGPU profile name.
type Profile struct {
	Name    string `json:"name"`
	Board   string `json:"board"`
	Slices  int    `json:"slices"` // 0 for time-sliced profiles
	FbGB    int    `json:"fbGB"`
	Series  string `json:"series"` // a, b, c or q
	MIG     bool   `json:"mig"`
	GI      string `json:"gi,omitempty"` // GPU instance profile for MIG profiles
	Class   string `json:"class"`        // compute or quadro (vim.vm.VgpuProfileInfo.profileClass)
	Sharing string `json:"sharing"`      // timeSliced or mig
}

var profileRE = regexp.MustCompile(`^grid_([a-z0-9]+)-(?:(\d+)-)?(\d+)([abcq])$`)

// ParseProfile parses a vSphere vGPU profile name such as grid_a100-3-20c.
func ParseProfile(name string) (Profile, error) {
	m := profileRE.FindStringSubmatch(name)
	if m == nil {
		return Profile{}, fmt.Errorf("invalid vGPU profile name %q", name)
	}
	p := Profile{Name: name, Board: m[1], Series: m[4], Class: "quadro", Sharing: "timeSliced"}
	p.FbGB, _ = strconv.Atoi(m[3])
	if m[2] != "" {
		p.Slices, _ = strconv.Atoi(m[2])
		p.MIG = true
		p.Sharing = "mig"
		p.GI = fmt.Sprintf("%dg.%dgb", p.Slices, p.FbGB)
	}
	if p.Series == "c" {
		p.Class = "compute"
	}
	if p.FbGB <= 0 {
		return Profile{}, fmt.Errorf("invalid vGPU profile name %q: zero framebuffer", name)
	}
	return p, nil
}

// Catalog holds the GPU models by name.
type Catalog map[string]*Model

// LoadCatalog parses model data in the models.yaml format.
func LoadCatalog(data []byte) (Catalog, error) {
	var list []*Model
	if err := yaml.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("GPU model data: %w", err)
	}
	c := Catalog{}
	for _, m := range list {
		if m.Name == "" || m.Board == "" || m.FramebufferGB <= 0 || m.DeviceID == 0 {
			return nil, fmt.Errorf("GPU model %q: name, board, device_id and framebuffer_gb are required", m.Name)
		}
		for _, p := range append(append([]string{}, m.TimeSliced...), m.MIG...) {
			prof, err := ParseProfile(p)
			if err != nil {
				return nil, fmt.Errorf("GPU model %s: %w", m.Name, err)
			}
			if prof.Board != m.Board {
				return nil, fmt.Errorf("GPU model %s: profile %s has another board", m.Name, p)
			}
			if prof.MIG && m.GIProfile(prof.GI) == nil {
				return nil, fmt.Errorf("GPU model %s: profile %s needs GPU instance profile %s", m.Name, p, prof.GI)
			}
		}
		c[m.Name] = m
	}
	return c, nil
}

// DefaultCatalog returns the embedded model data (A100-40GB, A100-80GB, H100-80GB, L40S).
func DefaultCatalog() Catalog {
	c, err := LoadCatalog(modelsYAML)
	if err != nil {
		panic(err) // embedded data is checked by tests
	}
	return c
}

// Names lists the model names, sorted.
func (c Catalog) Names() []string {
	var names []string
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// GIProfile returns the GPU instance profile with the given name, or nil.
func (m *Model) GIProfile(name string) *GIProfile {
	for i := range m.GIProfiles {
		if m.GIProfiles[i].Name == name {
			return &m.GIProfiles[i]
		}
	}
	return nil
}

// Offers reports whether the model offers the profile in MIG mode (mig=true) or time-sliced mode.
func (m *Model) Offers(profile string, mig bool) bool {
	list := m.TimeSliced
	if mig {
		list = m.MIG
	}
	for _, p := range list {
		if p == profile {
			return true
		}
	}
	return false
}

// ProfilesFor lists the profiles the model offers in the given mode.
func (m *Model) ProfilesFor(mig bool) []string {
	if mig {
		return append([]string(nil), m.MIG...)
	}
	return append([]string(nil), m.TimeSliced...)
}

// MaxPerGPU is how many vGPUs of the profile fit on one empty GPU of this model.
func (m *Model) MaxPerGPU(p Profile) int {
	if p.MIG {
		gi := m.GIProfile(p.GI)
		if gi == nil {
			return 0
		}
		// count non-overlapping placements greedily from the lowest start
		used := make([]bool, m.MIGSlots)
		n := 0
		for _, s := range gi.Starts {
			if free(used, s, gi.Size) {
				occupy(used, s, gi.Size)
				n++
			}
		}
		if n > 7 {
			n = 7
		}
		return n
	}
	return m.FramebufferGB / p.FbGB
}

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
		used[i] = true
	}
}
