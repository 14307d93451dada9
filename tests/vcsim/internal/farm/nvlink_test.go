package farm

import (
	"reflect"
	"testing"
)

func TestNVLinkGroupSizes(t *testing.T) {
	tests := []struct {
		topology string
		n        int
		want     []int
	}{
		{NVLinkNVSwitch, 8, []int{2, 4, 8}},
		{NVLinkNVSwitch, 7, []int{2, 4}}, // one GPU of the fabric out (MIG mode)
		{NVLinkNVSwitch, 3, []int{2}},
		{NVLinkNVSwitch, 1, nil},
		{NVLinkQuads, 4, []int{4}}, // a bridge set is one group of all its GPUs
		{NVLinkPairs, 2, []int{2}},
		{NVLinkPairs, 1, nil},
		{NVLinkNone, 8, nil},
	}
	for _, tc := range tests {
		if got := NVLinkGroupSizes(tc.topology, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("NVLinkGroupSizes(%s, %d) = %v, want %v", tc.topology, tc.n, got, tc.want)
		}
	}
}

// offersOf builds a host of n GPUs of a model in one NVLink set and lists what it offers.
func offersOf(t *testing.T, model, topology string, n int, change func(*GPUInfo, int)) []NVLinkOffer {
	t.Helper()
	m, ok := MustDefaultCatalog().Model(model)
	if !ok {
		t.Fatalf("unknown model %s", model)
	}
	info := HostInfo{NVLinkTopology: topology}
	for i := 0; i < n; i++ {
		g := GPUInfo{PCIID: PCIBus(i), Model: m, NVLinkSet: 0, NVLinkUp: true}
		if change != nil {
			change(&g, i)
		}
		info.GPUs = append(info.GPUs, g)
	}
	return NVLinkOffers(info)
}

func TestNVLinkOffers(t *testing.T) {
	tests := []struct {
		name     string
		model    string
		topology string
		gpus     int
		change   func(*GPUInfo, int)
		want     []int // sizes offered by set 0; nil: no offer
		members  int
	}{
		{"nvswitch", "H100-SXM5-80GB", NVLinkNVSwitch, 8, nil, []int{2, 4, 8}, 8},
		{"a MIG GPU joins no group", "H100-SXM5-80GB", NVLinkNVSwitch, 8,
			func(g *GPUInfo, i int) { g.MIGCurrent = i == 0 }, []int{2, 4}, 7},
		{"links down", "H100-SXM5-80GB", NVLinkNVSwitch, 8, func(g *GPUInfo, _ int) { g.NVLinkUp = false }, nil, 0},
		{"quads on a PCIe board", "A100-40GB", NVLinkQuads, 4, nil, []int{4}, 4},
		{"nvswitch forced on a PCIe board", "A100-40GB", NVLinkNVSwitch, 8, nil, []int{2, 4, 8}, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			offers := offersOf(t, tc.model, tc.topology, tc.gpus, tc.change)
			if tc.want == nil {
				if len(offers) != 0 {
					t.Fatalf("offers %+v, want none", offers)
				}
				return
			}
			if len(offers) != 1 || !reflect.DeepEqual(offers[0].Sizes, tc.want) || len(offers[0].GPUs) != tc.members {
				t.Fatalf("offers %+v, want sizes %v over %d GPUs", offers, tc.want, tc.members)
			}
		})
	}
}

// Admission uses the offered groups: the farm refuses an NVLink VM whose vGPU count is no group size.
func TestAdmitNVLinkOnlyInOfferedGroupSizes(t *testing.T) {
	tests := []struct {
		model, topology string
		gpus            int
		profile         string
		count           int
		ok              bool
	}{
		{"H100-SXM5-80GB", NVLinkNVSwitch, 8, "grid_h100xm-80c", 4, true},
		{"H100-SXM5-80GB", NVLinkNVSwitch, 8, "grid_h100xm-80c", 3, false},
		{"A100-40GB", NVLinkQuads, 4, "grid_a100-40c", 4, true},
		{"A100-40GB", NVLinkQuads, 4, "grid_a100-40c", 2, false},
		{"A100-40GB", NVLinkPairs, 4, "grid_a100-40c", 2, true},
		{"A100-40GB", NVLinkPairs, 4, "grid_a100-40c", 4, false},
	}
	for _, tc := range tests {
		f := New(nil)
		if err := f.AddHost(HostSpec{Name: "h", GPUs: tc.gpus, Model: tc.model, NVLink: tc.topology,
			DefaultGraphicsType: GraphicsSharedDirect}); err != nil {
			t.Fatal(err)
		}
		profiles := make([]string, tc.count)
		for i := range profiles {
			profiles[i] = tc.profile
		}
		_, err := f.Admit("h", "vm-1", "vm", Request{Profiles: profiles, NVLink: true})
		if (err == nil) != tc.ok {
			t.Errorf("%s %s: %d-vGPU NVLink VM admitted=%v, want %v (%v)", tc.model, tc.topology, tc.count, err == nil, tc.ok, err)
		}
	}
}

func TestGroupProfile(t *testing.T) {
	cat := MustDefaultCatalog()
	a100, _ := cat.Model("A100-40GB")
	set := []Candidate{{ID: PCIBus(0), Model: a100}, {ID: PCIBus(1), Model: a100}}
	profile := func(name string) Profile {
		p, err := cat.Profile(name)
		if err != nil {
			return Profile{Name: name, Opaque: true}
		}
		return p
	}
	tests := []struct {
		name     string
		set      []Candidate
		profiles []string
		want     bool
	}{
		{"the whole-GPU C type", set, []string{"grid_a100-40c", "grid_a100-40c"}, true},
		{"its nvidia_ spelling", set, []string{"nvidia_a100-40c", "nvidia_a100-40c"}, true},
		{"half a GPU", set, []string{"grid_a100-20c", "grid_a100-20c"}, false},
		{"one of two is half a GPU", set, []string{"grid_a100-40c", "grid_a100-20c"}, false},
		{"a name no table explains", set, []string{"grid_a100-40cx", "grid_a100-40cx"}, false},
		{"a GPU without a model", []Candidate{{ID: PCIBus(0)}}, []string{"grid_a100-40c"}, false},
		{"no GPUs", nil, []string{"grid_a100-40c"}, false},
	}
	for _, tc := range tests {
		var ps []Profile
		for _, name := range tc.profiles {
			ps = append(ps, profile(name))
		}
		if got := groupProfile(tc.set, ps); got != tc.want {
			t.Errorf("%s: groupProfile = %v, want %v", tc.name, got, tc.want)
		}
	}
}
