package farm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// repoCatalogue is the catalogue file the Python package ships, by relative path.
var repoCatalogue = filepath.Join("..", "..", "..", "..", filepath.FromSlash(CatalogueRelPath))

func testCatalog(t *testing.T) *Catalog {
	t.Helper()
	c, err := LoadCatalogFile(repoCatalogue)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type caseGPU struct {
	ID           string   `yaml:"id"`
	Model        string   `yaml:"model"`
	Mode         string   `yaml:"mode"`
	VgpuMode     string   `yaml:"vgpu_mode"`
	NVLinkSet    *int     `yaml:"nvlink_set"`
	NVLinkUp     *bool    `yaml:"nvlink_up"`
	GraphicsType string   `yaml:"graphics_type"`
	Used         []string `yaml:"used"`
	// TypesMayMix: the host driver's word on time-sliced vGPUs of different types at once (absent: not read)
	TypesMayMix *bool `yaml:"types_may_mix"`
}

type placementCase struct {
	Name       string    `yaml:"name"`
	Policy     string    `yaml:"policy"`
	APIVersion string    `yaml:"api_version"`
	GPUs       []caseGPU `yaml:"gpus"`
	// NVLinkGroups: NVLink set -> the device group sizes the host reports for it (absent: none reported,
	// the board's catalogue topology decides)
	NVLinkGroups map[int][]int `yaml:"nvlink_groups"`
	Request      struct {
		Profiles []string `yaml:"profiles"`
		NVLink   bool     `yaml:"nvlink"`
	} `yaml:"request"`
	Expect struct {
		Fits       bool      `yaml:"fits"`
		Assign     []string  `yaml:"assign"`
		Starts     []int     `yaml:"starts"`
		Placements []float64 `yaml:"placements"`
	} `yaml:"expect"`
}

func (tc placementCase) rules(cat *Catalog) Rules {
	if tc.APIVersion == "" {
		return Rules{SameSizeAnyType: true}
	}
	return Rules{SameSizeAnyType: APIAtLeast(tc.APIVersion, cat.SameSizeAnyTypeSince)}
}

// candidate builds a GPU of a vector; its used vGPUs are placed one by one by the same rules as a new
// one (a name no catalogue entry explains is kept as it is, and blocks the GPU).
func (g caseGPU) candidate(t *testing.T, cat *Catalog, rules Rules) Candidate {
	t.Helper()
	m, ok := cat.Model(g.Model)
	if !ok {
		t.Fatalf("unknown model %q", g.Model)
	}
	c := Candidate{ID: g.ID, Model: m, MIG: g.Mode == "mig", VgpuMode: g.VgpuMode, NVLinkSet: -1, NVLinkUp: true,
		SharedDirect: g.GraphicsType == "" || g.GraphicsType == GraphicsSharedDirect,
		SingleType:   g.TypesMayMix != nil && !*g.TypesMayMix}
	if c.VgpuMode == "" {
		c.VgpuMode = ModeSameSize
	}
	if g.NVLinkSet != nil {
		c.NVLinkSet = *g.NVLinkSet
	}
	if g.NVLinkUp != nil {
		c.NVLinkUp = *g.NVLinkUp
	}
	for _, name := range g.Used {
		p, err := cat.Profile(name)
		if err != nil {
			c.Slots = append(c.Slots, Slot{Profile: name, Start: -1})
			continue
		}
		// a history that does not fit the rules is kept without a MIG start or placement id: it blocks
		// the GPU, as it would on the planner's side
		shared := c.SharedDirect
		c.SharedDirect = true
		slot, _ := c.Fits(cat, p, rules)
		c.SharedDirect = shared
		c.Slots = append(c.Slots, slot)
	}
	return c
}

// withNVLinkGroups gives each GPU of an NVLink set the group sizes the vector's host reports for the set,
// or, where it reports none, what the board's catalogue topology gives for the set's time-sliced GPUs.
func withNVLinkGroups(gpus []Candidate, reported map[int][]int) {
	members := map[int]int{}
	for _, c := range gpus {
		if c.NVLinkSet >= 0 && !c.MIG {
			members[c.NVLinkSet]++
		}
	}
	for i, c := range gpus {
		if c.NVLinkSet < 0 {
			continue
		}
		if sizes, ok := reported[c.NVLinkSet]; ok {
			gpus[i].NVLinkGroups = sizes
		} else {
			gpus[i].NVLinkGroups = NVLinkGroupSizes(NVLinkTopology(c.Model), members[c.NVLinkSet])
		}
	}
}

// loadCases reads every shared vector file in tests/fixtures/placement: both implementations must
// agree on all of them.
func loadCases(t *testing.T) []placementCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "fixtures", "placement", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no placement vectors: %v", err)
	}
	var all []placementCase
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var cases []placementCase
		if err := yaml.Unmarshal(data, &cases); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for i := range cases {
			cases[i].Name = filepath.Base(file) + ": " + cases[i].Name
		}
		all = append(all, cases...)
	}
	if len(all) < 15 {
		t.Fatalf("expected at least 15 shared cases, got %d", len(all))
	}
	return all
}

func TestPlacementVectors(t *testing.T) {
	cat := testCatalog(t)
	for _, tc := range loadCases(t) {
		t.Run(tc.Name, func(t *testing.T) {
			var gpus []Candidate
			for _, g := range tc.GPUs {
				gpus = append(gpus, g.candidate(t, cat, tc.rules(cat)))
			}
			withNVLinkGroups(gpus, tc.NVLinkGroups)
			got, err := Place(cat, gpus, Request{Profiles: tc.Request.Profiles, NVLink: tc.Request.NVLink}, tc.Policy, tc.rules(cat))
			if !tc.Expect.Fits {
				if err == nil {
					t.Fatalf("expected no fit, got %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("expected a fit: %v", err)
			}
			if len(got) != len(tc.Expect.Assign) {
				t.Fatalf("got %d assignments, want %d", len(got), len(tc.Expect.Assign))
			}
			for i, a := range got {
				if a.GPU != tc.Expect.Assign[i] {
					t.Errorf("vGPU %d on %s, want %s", i, a.GPU, tc.Expect.Assign[i])
				}
				if tc.Expect.Starts != nil && a.Slot.Start != tc.Expect.Starts[i] {
					t.Errorf("vGPU %d at start %d, want %d", i, a.Slot.Start, tc.Expect.Starts[i])
				}
				if tc.Expect.Placements != nil {
					got := -1.0
					if a.Slot.Placement != nil {
						got = *a.Slot.Placement
					}
					if got != tc.Expect.Placements[i] {
						t.Errorf("vGPU %d at placement id %v, want %v", i, got, tc.Expect.Placements[i])
					}
				}
			}
		})
	}
}

func TestCatalogueProfiles(t *testing.T) {
	cat := testCatalog(t)
	tests := []struct {
		name    string
		board   string
		typ     string
		fb      float64
		gi      string
		class   string
		wantErr string
	}{
		{"grid_a100-40c", "a100", "A100-40C", 40, "", "compute", ""},
		{"nvidia_a100-40c", "a100", "A100-40C", 40, "", "compute", ""},
		{"grid_a100-3-20c", "a100", "A100-3-20C", 20, "3g.20gb", "compute", ""},
		{"grid_a100-1-5cme", "a100", "A100-1-5CME", 5, "1g.5gb+me", "compute", ""},
		{"grid_a100x-40c", "a100x", "A100X-40C", 40, "", "compute", ""},
		{"nvidia_h100xm-1-10c", "h100xm", "H100XM-1-10C", 10, "1g.10gb", "compute", ""},
		{"grid_l40s-48q", "l40s", "L40S-48Q", 48, "", "quadro", ""},
		{"grid_a100-99c", "", "", 0, "", "", "unknown vGPU profile"},
		{"a100-40c", "", "", 0, "", "", "invalid vGPU profile name"},
		{"", "", "", 0, "", "", "invalid vGPU profile name"},
	}
	for _, tc := range tests {
		p, err := cat.Profile(tc.name)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.name, err)
		}
		if p.Board != tc.board || p.Type != tc.typ || p.FbGB != tc.fb || p.GI != tc.gi || p.Class != tc.class || p.MIG != (tc.gi != "") {
			t.Errorf("%q: got %+v", tc.name, p)
		}
	}
}
