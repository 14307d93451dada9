package farm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// CatalogueRelPath is where the vGPU type catalogue lives, relative to the repository root.
const CatalogueRelPath = "vgpuctl/data/vgpu-catalogue.yaml"

// Profile name prefixes: vSphere spells a vGPU type grid_<lower(name)> (default) or nvidia_<lower(name)>.
const (
	PrefixGrid   = "grid_"
	PrefixNvidia = "nvidia_"
)

// Source is one cited document of the catalogue.
type Source struct {
	Document string `yaml:"document" json:"document"`
	Release  string `yaml:"release" json:"release,omitempty"` // the release whose tables the citing rows come from
	Section  string `yaml:"section" json:"section,omitempty"`
	URL      string `yaml:"url" json:"url,omitempty"`
}

// GIProfile is a MIG GPU instance profile with its fixed placements.
type GIProfile struct {
	Name     string  `yaml:"name" json:"name"`          // e.g. "3g.20gb", "1g.5gb+me"
	ID       int     `yaml:"id" json:"id"`              // nvidia-smi profile id
	Slices   int     `yaml:"slices" json:"slices"`      // compute slices
	MemoryGB float64 `yaml:"memory_gb" json:"memoryGB"` // framebuffer of the instance
	Size     int     `yaml:"size" json:"size"`          // memory slots a placement occupies
	Starts   []int   `yaml:"starts" json:"starts"`      // allowed start slots, ascending
}

// MIGGeometry is a board's MIG data; a board without it has no MIG.
type MIGGeometry struct {
	Apply         string      `yaml:"apply" json:"apply"` // reboot (Ampere) or immediate (Hopper and later)
	MemorySlots   int         `yaml:"memory_slots" json:"memorySlots"`
	ComputeSlices int         `yaml:"compute_slices" json:"computeSlices"`
	GIProfiles    []GIProfile `yaml:"gi_profiles" json:"giProfiles"`
}

// NVLinkInfo is a board's NVLink topology.
type NVLinkInfo struct {
	Topology   string `yaml:"topology" json:"topology"`                // bridge-pairs | bridge-quads | nvswitch | none
	BridgeGPUs []int  `yaml:"bridge_gpus" json:"bridgeGPUs,omitempty"` // GPUs one bridge set connects (2, or 2 or 4)
	Links      int    `yaml:"links" json:"links,omitempty"`            // links the bridge or baseboard wires per GPU
	Listed     int    `yaml:"listed" json:"listed,omitempty"`          // links `nvidia-smi nvlink -s` lists per GPU, wired or not
	Source     string `yaml:"source" json:"source,omitempty"`
}

// NVLink topologies of the catalogue.
const (
	TopologyBridgePairs = "bridge-pairs"
	TopologyBridgeQuads = "bridge-quads"
	TopologyNVSwitch    = "nvswitch"
	TopologyNone        = "none"
)

// VGPUType is one NVIDIA vGPU type of a board, as NVIDIA's tables list it.
type VGPUType struct {
	Name          string    `yaml:"name" json:"name"` // NVIDIA's name, e.g. A100-3-20C
	FbGB          float64   `yaml:"fb_gb" json:"fbGB"`
	Series        string    `yaml:"series" json:"series"` // A, B, C or Q
	MigGI         *string   `yaml:"mig_gi" json:"migGI,omitempty"`
	Media         bool      `yaml:"media" json:"media,omitempty"`
	MaxEqual      *int      `yaml:"max_equal" json:"maxEqual,omitempty"`
	MaxMixed      *int      `yaml:"max_mixed" json:"maxMixed,omitempty"`
	PlacementSize *float64  `yaml:"placement_size" json:"placementSize,omitempty"`
	PlacementIDs  []float64 `yaml:"placement_ids" json:"placementIds,omitempty"`
	Source        string    `yaml:"source" json:"source,omitempty"`
}

// MIGBacked reports whether the type runs on a MIG GPU instance.
func (t *VGPUType) MIGBacked() bool { return t.MigGI != nil && *t.MigGI != "" }

// Mixable reports whether NVIDIA publishes a mixed-size maximum for the type; without one the type is
// refused on a mixed-size GPU.
func (t *VGPUType) Mixable() bool { return t.MaxMixed != nil }

// board is one catalogue entry as the file spells it.
type board struct {
	Model         string       `yaml:"model"`
	Aliases       []string     `yaml:"aliases"`
	VGPUBoard     string       `yaml:"vgpu_board"`
	DeviceNames   []string     `yaml:"device_names"`
	PCIDeviceIDs  []int        `yaml:"pci_device_ids"`
	FramebufferGB float64      `yaml:"framebuffer_gb"`
	Source        string       `yaml:"source"`
	Table         string       `yaml:"table"`
	MIG           *MIGGeometry `yaml:"mig"`
	NVLink        *NVLinkInfo  `yaml:"nvlink"`
	VGPUTypes     []VGPUType   `yaml:"vgpu_types"`
}

// catalogueFile is the catalogue file; keys the Go side does not use are ignored (the file may grow).
type catalogueFile struct {
	Version int               `yaml:"version"`
	Sources map[string]Source `yaml:"sources"`
	VSphere vsphereRules      `yaml:"vsphere"`
	Boards  []board           `yaml:"boards"`
}

// vsphereRules are vSphere's rules for time-sliced GPUs, whatever the board.
type vsphereRules struct {
	SameSizeAnyTypeSince string `yaml:"same_size_any_type_since"`
	Source               string `yaml:"source"`        // where the version comes from
	DriverSource         string `yaml:"driver_source"` // where the driver's word comes from
}

// Catalog is the vGPU type catalogue: GPU models (boards) by name and alias, and every vGPU type.
type Catalog struct {
	Path    string            // file it was read from ("" for in-memory data)
	Digest  string            // sha256 of the file's bytes (the planner prints the same digest)
	Sources map[string]Source // citations by id
	// SameSizeAnyTypeSince is the vSphere API version from which an equal-size GPU takes vGPUs of different
	// types with one framebuffer size (before it, only the identical type).
	SameSizeAnyTypeSince string

	models  []*Model
	byName  map[string]*Model // model names and aliases
	byType  map[string]typeRef
	vgpuTok map[string]bool
}

type typeRef struct {
	model *Model
	typ   *VGPUType
}

// LoadCatalogFile reads and checks the catalogue file at path.
func LoadCatalogFile(path string) (*Catalog, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("vGPU type catalogue: %w", err)
	}
	c, err := LoadCatalog(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Path = path
	return c, nil
}

// LoadCatalog parses and checks catalogue data.
func LoadCatalog(data []byte) (*Catalog, error) {
	var f catalogueFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("vGPU type catalogue: %w", err)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("vGPU type catalogue: version %d, expected 1", f.Version)
	}
	if len(f.Boards) == 0 {
		return nil, errors.New("vGPU type catalogue: no boards")
	}
	if f.VSphere.SameSizeAnyTypeSince == "" {
		return nil, errors.New("vGPU type catalogue: vsphere.same_size_any_type_since is required")
	}
	for _, src := range []string{f.VSphere.Source, f.VSphere.DriverSource} {
		if _, ok := f.Sources[src]; !ok {
			return nil, fmt.Errorf("vGPU type catalogue: vsphere: source %q is not a key of sources", src)
		}
	}
	c := &Catalog{Sources: f.Sources, SameSizeAnyTypeSince: f.VSphere.SameSizeAnyTypeSince, byName: map[string]*Model{},
		byType: map[string]typeRef{}, vgpuTok: map[string]bool{}}
	for i := range f.Boards {
		m, err := newModel(&f.Boards[i], f.Sources)
		if err != nil {
			return nil, err
		}
		for _, name := range append([]string{m.Name}, m.Aliases...) {
			if _, dup := c.byName[name]; dup {
				return nil, fmt.Errorf("board %s: model name or alias %q is used twice", m.Name, name)
			}
			c.byName[name] = m
		}
		for j := range m.Types {
			t := &m.Types[j]
			key := strings.ToLower(t.Name)
			if _, dup := c.byType[key]; !dup {
				c.byType[key] = typeRef{model: m, typ: t}
			}
		}
		c.vgpuTok[m.Board] = true
		c.models = append(c.models, m)
	}
	sum := sha256.Sum256(data)
	c.Digest = hex.EncodeToString(sum[:])
	return c, nil
}

func newModel(b *board, sources map[string]Source) (*Model, error) {
	if b.Model == "" || b.VGPUBoard == "" || b.FramebufferGB <= 0 || len(b.DeviceNames) == 0 || len(b.PCIDeviceIDs) == 0 {
		return nil, fmt.Errorf("board %q: model, vgpu_board, device_names, pci_device_ids and framebuffer_gb are required", b.Model)
	}
	if _, ok := sources[b.Source]; !ok {
		return nil, fmt.Errorf("board %s: source %q is not a key of sources", b.Model, b.Source)
	}
	m := &Model{
		Name: b.Model, Aliases: b.Aliases, Board: b.VGPUBoard, DeviceNames: b.DeviceNames, DeviceName: b.DeviceNames[0],
		DeviceIDs: b.PCIDeviceIDs, DeviceID: b.PCIDeviceIDs[0], FramebufferGB: int(math.Round(b.FramebufferGB)),
		Source: b.Source, Table: b.Table, NVLinkTopology: TopologyNone, Types: b.VGPUTypes,
	}
	if b.NVLink != nil && b.NVLink.Topology != "" {
		switch b.NVLink.Topology {
		case TopologyBridgePairs, TopologyBridgeQuads, TopologyNVSwitch, TopologyNone:
		default:
			return nil, fmt.Errorf("board %s: nvlink topology %q is not one of bridge-pairs, bridge-quads, nvswitch, none", m.Name, b.NVLink.Topology)
		}
		if _, ok := sources[b.NVLink.Source]; b.NVLink.Source != "" && !ok {
			return nil, fmt.Errorf("board %s: nvlink source %q is not a key of sources", m.Name, b.NVLink.Source)
		}
		if b.NVLink.Listed != 0 && b.NVLink.Listed < b.NVLink.Links {
			return nil, fmt.Errorf("board %s: nvlink lists %d links, fewer than the %d it wires", m.Name, b.NVLink.Listed, b.NVLink.Links)
		}
		m.NVLinkTopology, m.NVLinkLinks, m.NVLinkBridgeGPUs = b.NVLink.Topology, b.NVLink.Links, b.NVLink.BridgeGPUs
		m.NVLinkListed = max(b.NVLink.Listed, b.NVLink.Links)
	}
	m.MemoryMiB = m.FramebufferGB * 1024
	m.NVLinkCapable = m.NVLinkTopology != TopologyNone
	if b.MIG != nil {
		if err := checkMIG(m.Name, b.MIG); err != nil {
			return nil, err
		}
		m.MIGCapable, m.MIGApply, m.MIGSlots, m.GIProfiles = true, b.MIG.Apply, b.MIG.MemorySlots, b.MIG.GIProfiles
	}
	seen := map[string]bool{}
	for i := range m.Types {
		t := &m.Types[i]
		if err := checkType(m, t, sources); err != nil {
			return nil, err
		}
		if seen[strings.ToLower(t.Name)] {
			return nil, fmt.Errorf("board %s: vGPU type %s is listed twice", m.Name, t.Name)
		}
		seen[strings.ToLower(t.Name)] = true
	}
	return m, nil
}

func checkMIG(model string, g *MIGGeometry) error {
	if g.Apply != "reboot" && g.Apply != "immediate" {
		return fmt.Errorf("board %s: mig.apply %q is not reboot or immediate", model, g.Apply)
	}
	if g.MemorySlots <= 0 || len(g.GIProfiles) == 0 {
		return fmt.Errorf("board %s: mig needs memory_slots and gi_profiles", model)
	}
	for _, p := range g.GIProfiles {
		if p.Name == "" || p.Size <= 0 || len(p.Starts) == 0 {
			return fmt.Errorf("board %s: GPU instance profile %q needs name, size and starts", model, p.Name)
		}
		for _, s := range p.Starts {
			if s < 0 || s+p.Size > g.MemorySlots {
				return fmt.Errorf("board %s: GPU instance profile %s: start %d size %d leaves the %d memory slots", model, p.Name, s, p.Size, g.MemorySlots)
			}
		}
	}
	return nil
}

func checkType(m *Model, t *VGPUType, sources map[string]Source) error {
	if t.Name == "" || t.FbGB <= 0 {
		return fmt.Errorf("board %s: vGPU type %q needs name and fb_gb", m.Name, t.Name)
	}
	switch t.Series {
	case "A", "B", "C", "Q":
	default:
		return fmt.Errorf("board %s: vGPU type %s: series %q is not A, B, C or Q", m.Name, t.Name, t.Series)
	}
	if _, ok := sources[t.Source]; t.Source != "" && !ok {
		return fmt.Errorf("board %s: vGPU type %s: source %q is not a key of sources", m.Name, t.Name, t.Source)
	}
	if t.MIGBacked() && m.GIProfile(*t.MigGI) == nil {
		return fmt.Errorf("board %s: vGPU type %s needs GPU instance profile %s, which the board does not list", m.Name, t.Name, *t.MigGI)
	}
	if t.MaxEqual != nil && *t.MaxEqual < 1 || t.MaxMixed != nil && *t.MaxMixed < 1 {
		return fmt.Errorf("board %s: vGPU type %s: max_equal and max_mixed must be at least 1", m.Name, t.Name)
	}
	return nil
}

// Names lists the model names (not aliases) in catalogue order.
func (c *Catalog) Names() []string {
	names := make([]string, 0, len(c.models))
	for _, m := range c.models {
		names = append(names, m.Name)
	}
	return names
}

// Models lists the models in catalogue order.
func (c *Catalog) Models() []*Model { return append([]*Model(nil), c.models...) }

// Model returns the model with the given name or alias.
func (c *Catalog) Model(name string) (*Model, bool) {
	m, ok := c.byName[name]
	return m, ok
}

// UnknownModel is the one-line error for a model name the catalogue does not know.
func (c *Catalog) UnknownModel(name string) error {
	return fmt.Errorf("unknown GPU model %q (known: %s)", name, strings.Join(c.Names(), ", "))
}

// SplitPrefix splits a vSphere profile name into its prefix (grid_ or nvidia_) and NVIDIA's type name
// in lower case; ok is false for names with neither prefix.
func SplitPrefix(name string) (prefix, typ string, ok bool) {
	lower := strings.ToLower(name)
	for _, p := range []string{PrefixGrid, PrefixNvidia} {
		if rest, found := strings.CutPrefix(lower, p); found && rest != "" {
			return p, rest, true
		}
	}
	return "", "", false
}

// VSphereName spells a vGPU type the way a host with the given prefix reports it.
func VSphereName(prefix, typeName string) string {
	return prefix + strings.ToLower(typeName)
}

// Profile explains a vSphere profile name (grid_ or nvidia_ spelling) from the catalogue.
func (c *Catalog) Profile(name string) (Profile, error) {
	prefix, typ, ok := SplitPrefix(name)
	if !ok {
		return Profile{}, fmt.Errorf("invalid vGPU profile name %q: expected grid_<type> or nvidia_<type>", name)
	}
	ref, ok := c.byType[typ]
	if !ok {
		return Profile{}, fmt.Errorf("unknown vGPU profile %q: no board of the vGPU type catalogue has type %s", name, strings.ToUpper(typ))
	}
	return newProfile(name, prefix, ref.model.Board, ref.typ), nil
}

func newProfile(name, prefix, boardToken string, t *VGPUType) Profile {
	p := Profile{
		Name: name, Prefix: prefix, Type: t.Name, Board: boardToken, FbGB: t.FbGB, Series: strings.ToLower(t.Series),
		Class: "quadro", Sharing: "timeSliced", Media: t.Media, spec: t,
	}
	if t.MIGBacked() {
		p.MIG, p.GI, p.Sharing = true, *t.MigGI, "mig"
	}
	if p.Series == "c" {
		p.Class = "compute"
	}
	return p
}

// Type returns the model's vGPU type with the given NVIDIA name (any case), or nil.
func (m *Model) Type(name string) *VGPUType {
	for i := range m.Types {
		if strings.EqualFold(m.Types[i].Name, name) {
			return &m.Types[i]
		}
	}
	return nil
}

// FindCatalogue returns the catalogue path: explicit when given, else the first
// vgpuctl/data/vgpu-catalogue.yaml found two levels above the binary's directory, two levels above
// this source file's package root, or in the current directory or one of its ancestors.
func FindCatalogue(explicit string) (string, error) {
	if explicit != "" {
		if _, err := os.Stat(explicit); err != nil {
			return "", fmt.Errorf("-catalogue: %w", err)
		}
		return explicit, nil
	}
	var tried []string
	try := func(root string) (string, bool) {
		p := filepath.Join(root, filepath.FromSlash(CatalogueRelPath))
		tried = append(tried, p)
		_, err := os.Stat(p)
		return p, err == nil
	}
	if exe, err := os.Executable(); err == nil {
		// tests/vcsim/bin/gpusim -> tests/vcsim -> repository root
		if p, ok := try(filepath.Join(filepath.Dir(exe), "..", "..", "..")); ok {
			return filepath.Clean(p), nil
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		// tests/vcsim/internal/farm/catalogue.go -> repository root
		if p, ok := try(filepath.Join(filepath.Dir(file), "..", "..", "..", "..")); ok {
			return filepath.Clean(p), nil
		}
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if p, ok := try(dir); ok {
				return p, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	return "", fmt.Errorf("vGPU type catalogue not found (pass -catalogue PATH); looked for %s", strings.Join(dedupe(tried), ", "))
}

func dedupe(paths []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range paths {
		p = filepath.Clean(p)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

var defaultCatalog struct {
	once sync.Once
	cat  *Catalog
	err  error
}

// DefaultCatalog loads the catalogue found by FindCatalogue("") once.
func DefaultCatalog() (*Catalog, error) {
	defaultCatalog.once.Do(func() {
		path, err := FindCatalogue("")
		if err != nil {
			defaultCatalog.err = err
			return
		}
		defaultCatalog.cat, defaultCatalog.err = LoadCatalogFile(path)
	})
	return defaultCatalog.cat, defaultCatalog.err
}

// MustDefaultCatalog is DefaultCatalog for tests and package defaults; it panics when the catalogue is
// missing or invalid.
func MustDefaultCatalog() *Catalog {
	c, err := DefaultCatalog()
	if err != nil {
		panic(err)
	}
	return c
}
