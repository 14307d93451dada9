package farm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func miniCatalog(t *testing.T) *Catalog {
	t.Helper()
	c, err := LoadCatalogFile(filepath.Join("testdata", "mini-catalogue.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLoadCatalogue(t *testing.T) {
	c := miniCatalog(t)
	m, ok := c.Model("TEST-PCIE-16GB")
	if !ok || m.Name != "TEST-16GB" || m.DeviceID != 0x1234 || m.DeviceName != "Test GPU 16GB" || !m.MIGCapable ||
		m.MIGApply != "immediate" || m.NVLinkTopology != TopologyBridgePairs || m.NVLinkLinks != 4 {
		t.Fatalf("model by alias: %+v", m)
	}
	if got := strings.Join(m.ProfilesFor(true, PrefixNvidia), ","); got != "nvidia_tst-2-8c" {
		t.Errorf("MIG profiles %s", got)
	}
	if got := len(m.ProfilesFor(false, PrefixGrid)); got != 5 {
		t.Errorf("%d time-sliced profiles", got)
	}
	p, err := c.Profile("grid_tst-0.5b")
	if err != nil || p.FbGB != 0.5 || p.FbGiB() != 1 || p.Class != "quadro" {
		t.Errorf("fractional type: %+v %v", p, err)
	}
	if m.MaxEqual(p.Spec()) != 32 {
		t.Errorf("unpublished max_equal: %d, want framebuffer/size 32", m.MaxEqual(p.Spec()))
	}
	if c.Digest == "" || len(c.Digest) != 64 {
		t.Errorf("digest %q", c.Digest)
	}
	if err := c.UnknownModel("V100"); !strings.Contains(err.Error(), `"V100" (known: TEST-16GB)`) {
		t.Errorf("unknown model: %v", err)
	}
}

// NVLink facts of the repository's catalogue: H100 PCIe and H100 NVL have 12 links (600 GB/s at 50 GB/s per
// fourth-generation link), H100 SXM5 18; H200 NVL bridges connect 2 or 4 GPUs (H200 datasheet). H200 boards carry
// their MIG-backed types (NVIDIA AI Enterprise 7, Tables 170 and 172) with each row's source naming its release.
func TestRepositoryCatalogueNVLinkAndH200(t *testing.T) {
	c := testCatalog(t)
	for name, links := range map[string][2]int{"H100-80GB": {12, 18}, "H100-NVL": {12, 18}, "H100-SXM5-80GB": {18, 18},
		"A100-40GB": {12, 12}, "H200-NVL": {18, 18}} {
		if m, _ := c.Model(name); m == nil || m.NVLinkLinks != links[0] || m.NVLinkListed != links[1] {
			t.Errorf("%s: NVLink links %+v, want %d wired of %d listed", name, m, links[0], links[1])
		}
	}
	// A published maximum the framebuffer cannot hold is capped: 6 x H100-16C listed, 5 fit in 80 GB; MIG-backed
	// types keep theirs (the geometry holds them).
	h100, _ := c.Model("H100-80GB")
	if got := h100.MaxEqual(h100.Type("H100-16C")); got != 5 {
		t.Errorf("H100-16C per GPU: %d, want 5", got)
	}
	if got := h100.MaxMixed(h100.Type("H100-16C")); got != 4 {
		t.Errorf("H100-16C mixed-size: %d, want 4", got)
	}
	nvl, _ := c.Model("H200-NVL")
	if nvl == nil || !slices.Equal(nvl.NVLinkBridgeGPUs, []int{2, 4}) || NVLinkTopology(nvl) != NVLinkQuads {
		t.Fatalf("H200 NVL bridges: %+v", nvl)
	}
	for _, name := range []string{"grid_h200-3-71c", "grid_h200x-1-18cme", "nvidia_h200-1-35c"} {
		p, err := c.Profile(name)
		if err != nil || !p.MIG {
			t.Errorf("%s: %+v %v", name, p, err)
		}
	}
	m, _ := c.Model("H200-SXM5")
	if gi := m.GIProfile("3g.71gb"); gi == nil || gi.Size != 4 || !slices.Equal(gi.Starts, []int{0, 4}) || !m.MIGCapable {
		t.Errorf("H200 SXM5 3g.71gb: %+v", gi)
	}
	if !strings.Contains(c.Sources["nvaie7-hopper"].Release, "NVIDIA AI Enterprise 7") {
		t.Errorf("release of nvaie7-hopper: %q", c.Sources["nvaie7-hopper"].Release)
	}
}

// The repository's catalogue loads, keeps today's model names and has the new boards.
func TestRepositoryCatalogue(t *testing.T) {
	c := testCatalog(t)
	for _, name := range []string{"A100-40GB", "A100-80GB", "H100-80GB", "L40S", "H100-SXM5-80GB", "A100-HGX-40GB", "A16"} {
		if _, ok := c.Model(name); !ok {
			t.Errorf("model %s missing", name)
		}
	}
	for name, topology := range map[string]string{"H100-SXM5-80GB": NVLinkNVSwitch, "A100-HGX-40GB": NVLinkNVSwitch,
		"A100-40GB": NVLinkPairs, "A16": NVLinkNone} {
		m, _ := c.Model(name)
		if got := NVLinkTopology(m); got != topology {
			t.Errorf("%s: topology %s, want %s", name, got, topology)
		}
	}
	if m, _ := c.Model("A16"); m.MIGCapable {
		t.Error("A16 has MIG")
	}
}

func TestCatalogueRejectsBadData(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "mini-catalogue.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, old, new, want string
	}{
		{"version", "version: 1", "version: 2", "version 2"},
		{"board source", "    source: doc\n    mig:", "    source: nope\n    mig:", `source "nope"`},
		{"type source", "placement_ids: [0], source: doc", "placement_ids: [0], source: nope", `source "nope"`},
		{"series", "fb_gb: 4, series: Q", "fb_gb: 4, series: X", `series "X"`},
		{"missing GPU instance profile", "mig_gi: 2g.8gb", "mig_gi: 3g.12gb", "3g.12gb"},
		{"placement beyond the slots", "starts: [0, 2]}", "starts: [0, 3]}", "leaves the 4 memory slots"},
		{"topology", "topology: bridge-pairs", "topology: ring", `topology "ring"`},
		{"mig apply", "apply: immediate", "apply: later", `"later"`},
		{"duplicate type", "name: TST-4Q,", "name: TST-4C,", "listed twice"},
		{"max below 1", "max_equal: 3,", "max_equal: 0,", "at least 1"},
		{"no framebuffer", "framebuffer_gb: 16", "framebuffer_gb: 0", "framebuffer_gb"},
		{"no equal-size rule", `same_size_any_type_since: "8.0.2", `, "", "same_size_any_type_since is required"},
		{"equal-size rule source", "source: doc, driver_source: doc}", "source: nope, driver_source: doc}", `source "nope"`},
		{"driver source", "driver_source: doc}", "driver_source: nope}", `source "nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := strings.Replace(string(good), tc.old, tc.new, 1)
			if data == string(good) {
				t.Fatalf("test edit %q not applied", tc.old)
			}
			_, err := LoadCatalog([]byte(data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	dup := string(good) + strings.Replace(strings.SplitN(string(good), "boards:\n", 2)[1], "model: TEST-16GB", "model: OTHER", 1)
	if _, err := LoadCatalog([]byte(dup)); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Errorf("duplicate alias: %v", err)
	}
}

func TestFindCatalogue(t *testing.T) {
	if _, err := FindCatalogue(filepath.Join(t.TempDir(), "none.yaml")); err == nil || !strings.Contains(err.Error(), "-catalogue") {
		t.Errorf("missing explicit file: %v", err)
	}
	path, err := FindCatalogue("")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Abs(repoCatalogue)
	if got, _ := filepath.Abs(path); got != want {
		t.Errorf("default catalogue %s, want %s", got, want)
	}
}

// Placement on the small catalogue: mixed-size placement ids and maxima, MIG maxima.
func TestMixedSizePlacementIDs(t *testing.T) {
	c := miniCatalog(t)
	m, _ := c.Model("TEST-16GB")
	gpu := Candidate{ID: "g", Model: m, VgpuMode: ModeMixedSize, SharedDirect: true, NVLinkSet: -1}
	place := func(name string) (Slot, bool) {
		p, err := c.Profile(name)
		if err != nil {
			t.Fatal(err)
		}
		slot, ok := gpu.Fits(c, p, Rules{SameSizeAnyType: true})
		if ok {
			gpu.Slots = append(gpu.Slots, slot)
		}
		return slot, ok
	}
	// TST-4C may only start at 8 or 12: two of them take 8..16, then TST-8C takes 0, TST-4Q is refused
	for _, want := range []float64{8, 12} {
		if s, ok := place("grid_tst-4c"); !ok || *s.Placement != want || s.PlacementSize != 4 {
			t.Fatalf("TST-4C at %+v ok=%v, want placement %v", s, ok, want)
		}
	}
	if _, ok := place("grid_tst-4c"); ok {
		t.Fatal("a third TST-4C beyond its mixed-size maximum 2 fits")
	}
	if s, ok := place("grid_tst-8c"); !ok || *s.Placement != 0 {
		t.Fatalf("TST-8C %+v ok=%v, want placement 0", s, ok)
	}
	if _, ok := place("grid_tst-8c"); ok {
		t.Fatal("TST-8C fits where its ids 0 and 8 overlap placed vGPUs")
	}
	gpu.Slots = nil
	if _, ok := place("grid_tst-4q"); ok {
		t.Fatal("a type without a mixed-size maximum fits a mixed-size GPU")
	}
	// MIG: the published maximum caps a type below what placements allow
	gpu = Candidate{ID: "g", Model: m, MIG: true, SharedDirect: true, NVLinkSet: -1}
	for i := 0; i < 2; i++ {
		if _, ok := place("grid_tst-2-8c"); !ok {
			t.Fatalf("MIG vGPU %d refused", i+1)
		}
	}
	if _, ok := place("grid_tst-2-8c"); ok {
		t.Fatal("a third 2g.8gb fits on 4 memory slots")
	}
}
