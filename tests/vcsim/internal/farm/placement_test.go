package farm

import (
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
)

type caseGPU struct {
	ID           string   `yaml:"id"`
	Model        string   `yaml:"model"`
	Mode         string   `yaml:"mode"`
	VgpuMode     string   `yaml:"vgpu_mode"`
	NVLinkSet    *int     `yaml:"nvlink_set"`
	NVLinkUp     *bool    `yaml:"nvlink_up"`
	GraphicsType string   `yaml:"graphics_type"`
	Used         []string `yaml:"used"`
}

type placementCase struct {
	Name    string    `yaml:"name"`
	Policy  string    `yaml:"policy"`
	GPUs    []caseGPU `yaml:"gpus"`
	Request struct {
		Profiles []string `yaml:"profiles"`
		NVLink   bool     `yaml:"nvlink"`
	} `yaml:"request"`
	Expect struct {
		Fits   bool     `yaml:"fits"`
		Assign []string `yaml:"assign"`
		Starts []int    `yaml:"starts"`
	} `yaml:"expect"`
}

func (g caseGPU) candidate(t *testing.T, cat Catalog) Candidate {
	t.Helper()
	m, ok := cat[g.Model]
	if !ok {
		t.Fatalf("unknown model %q", g.Model)
	}
	c := Candidate{ID: g.ID, Model: m, MIG: g.Mode == "mig", VgpuMode: g.VgpuMode, NVLinkSet: -1, NVLinkUp: true,
		SharedDirect: g.GraphicsType == "" || g.GraphicsType == GraphicsSharedDirect}
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
		p, err := ParseProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		slot, ok := c.Fits(p)
		if !ok && c.MIG {
			t.Fatalf("used profile %s does not fit on %s", name, g.ID)
		}
		c.Slots = append(c.Slots, slot)
	}
	return c
}

// loadCases reads the shared vectors (cases.yaml) and, when present, the planner's extra vectors
// (python_cases.yaml, same format): both implementations must agree on all of them.
func loadCases(t *testing.T) []placementCase {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "fixtures", "placement")
	var all []placementCase
	for _, name := range []string{"cases.yaml", "python_cases.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if os.IsNotExist(err) && name != "cases.yaml" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var cases []placementCase
		if err := yaml.Unmarshal(data, &cases); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "cases.yaml" && len(cases) < 15 {
			t.Fatalf("expected at least 15 shared cases, got %d", len(cases))
		}
		all = append(all, cases...)
	}
	return all
}

func TestPlacementVectors(t *testing.T) {
	cat := DefaultCatalog()
	for _, tc := range loadCases(t) {
		t.Run(tc.Name, func(t *testing.T) {
			var gpus []Candidate
			for _, g := range tc.GPUs {
				gpus = append(gpus, g.candidate(t, cat))
			}
			got, err := Place(gpus, Request{Profiles: tc.Request.Profiles, NVLink: tc.Request.NVLink}, tc.Policy)
			if !tc.Expect.Fits {
				if err == nil {
					t.Fatalf("expected no fit, got %+v", got)
				}
				if err.Error() != InsufficientGraphics {
					t.Fatalf("unexpected error %v", err)
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
			}
		})
	}
}

func TestParseProfile(t *testing.T) {
	tests := []struct {
		name    string
		board   string
		slices  int
		fb      int
		gi      string
		class   string
		wantErr bool
	}{
		{"grid_a100-40c", "a100", 0, 40, "", "compute", false},
		{"grid_a100-3-20c", "a100", 3, 20, "3g.20gb", "compute", false},
		{"grid_a100-1-10c", "a100", 1, 10, "1g.10gb", "compute", false},
		{"grid_a100d-7-80c", "a100d", 7, 80, "7g.80gb", "compute", false},
		{"grid_l40s-48q", "l40s", 0, 48, "", "quadro", false},
		{"a100-40c", "", 0, 0, "", "", true},
		{"grid_a100-0c", "", 0, 0, "", "", true},
		{"", "", 0, 0, "", "", true},
	}
	for _, tc := range tests {
		p, err := ParseProfile(tc.name)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%q: err %v", tc.name, err)
		}
		if err == nil && (p.Board != tc.board || p.Slices != tc.slices || p.FbGB != tc.fb || p.GI != tc.gi || p.Class != tc.class) {
			t.Errorf("%q: got %+v", tc.name, p)
		}
	}
}

func TestCatalog(t *testing.T) {
	cat := DefaultCatalog()
	for _, name := range []string{"A100-40GB", "A100-80GB", "H100-80GB", "L40S"} {
		if cat[name] == nil {
			t.Fatalf("model %s missing", name)
		}
	}
	if got := cat["A100-40GB"].MaxPerGPU(mustProfile(t, "grid_a100-1-5c")); got != 7 {
		t.Errorf("1g.5gb per A100-40GB = %d, want 7", got)
	}
	if got := cat["A100-40GB"].MaxPerGPU(mustProfile(t, "grid_a100-3-20c")); got != 2 {
		t.Errorf("3g.20gb per A100-40GB = %d, want 2", got)
	}
	if got := cat["A100-40GB"].MaxPerGPU(mustProfile(t, "grid_a100-10c")); got != 4 {
		t.Errorf("10c per A100-40GB = %d, want 4", got)
	}
	if _, err := LoadCatalog([]byte("- {name: X, board: x, device_id: 1, framebuffer_gb: 8, time_sliced: [grid_y-4c]}")); err == nil {
		t.Error("profile of another board accepted")
	}
	if _, err := LoadCatalog([]byte("- {name: X, board: x, device_id: 1, framebuffer_gb: 8, mig: [grid_x-1-4c]}")); err == nil {
		t.Error("MIG profile without GPU instance profile accepted")
	}
}

func mustProfile(t *testing.T, name string) Profile {
	t.Helper()
	p, err := ParseProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
