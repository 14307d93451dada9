package esxsh

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gpusim/internal/farm"
)

var update = flag.Bool("update", false, "rewrite the gpusim.* golden files in tests/fixtures/nvidia-smi")

const fixtureDir = "../../../fixtures/nvidia-smi"

func readFixture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// snap is a GPU's part of the farm's snapshot, for views built by hand: real captures of boards gpusim does not
// model (V100, RTX A6000) or with values the view would derive otherwise.
func snap(index int, uuid string, s farm.GPUState) farm.GPUInfo {
	return farm.GPUInfo{Index: index, UUID: uuid, GPUState: s}
}

var migOn = farm.GPUState{MIGCurrent: true, MIGPending: true}

// The renderers reproduce real captured outputs byte for byte (sources in the fixtures' README).
func TestRenderersMatchRealOutputs(t *testing.T) {
	a100 := GPU{GPUInfo: snap(0, "", migOn), BusID: "00000000:0F:00.0", MIGCapable: true, MIGProfiles: catalogueMIG("A100-40GB")}
	h100 := GPU{GPUInfo: snap(0, "", migOn), BusID: "00000000:06:00.0", MIGCapable: true, MIGProfiles: catalogueMIG("H100-80GB")}
	a16 := Host{GPUs: []GPU{
		{GPUInfo: snap(0, "GPU-2039ae9a-7b32-009f-d7dc-b5acf0e7aaba", farm.GPUState{}), Name: "NVIDIA A16"},
		{GPUInfo: snap(1, "GPU-4c81fa10-f611-4d5d-4f95-cf57270afbfa", farm.GPUState{}), Name: "NVIDIA A16"},
		{GPUInfo: snap(2, "GPU-6d96ca7e-db97-dd7b-d18b-821c40747583", farm.GPUState{}), Name: "NVIDIA A16"},
		{GPUInfo: snap(3, "GPU-b952c9a5-0ac8-26fb-a02d-60bcf9d0fe83", farm.GPUState{}), Name: "NVIDIA A16"},
	}}
	v100 := func(i int, uuid string) GPU {
		g := GPU{GPUInfo: snap(i, uuid, farm.GPUState{}), Name: "Tesla V100-SXM2-16GB"}
		for l := 0; l < 6; l++ {
			g.NVLinks = append(g.NVLinks, Link{Index: l, Peer: 1 - i, Up: true, SpeedGBs: 25.781})
		}
		return g
	}
	a6000 := func(i int, uuid string, links int) GPU {
		g := GPU{GPUInfo: snap(i, uuid, farm.GPUState{}), Name: "NVIDIA RTX A6000"}
		for l := 0; l < 4; l++ {
			g.NVLinks = append(g.NVLinks, Link{Index: l, Peer: 1 - i, Up: l < links, SpeedGBs: 14.062})
		}
		return g
	}
	cases := []struct {
		fixture string
		got     string
	}{
		{"rtx-a6000.nvlink-s-inactive.txt", RenderNVLinkStatus([]GPU{
			a6000(0, "GPU-5baec991-de63-c196-1766-04c38407e133", 4), a6000(1, "GPU-39fc2446-cb50-2067-2867-d95efd470a2c", 4),
			a6000(2, "GPU-02c05ee3-bdb5-aac7-f9e8-a4c8f3f725b3", 0)})},
		{"a100-40gb.mig-lgip.txt", RenderLGIP([]GPU{a100})},
		{"h100-80gb.mig-lgip.txt", RenderLGIP([]GPU{h100})},
		{"a100-40gb.mig-lgipp.txt", RenderLGIPP([]GPU{a100})},
		{"a100-40gb.mig-lgi.txt", RenderLGI([]GPU{withInstances(a100, MIGInstance{ID: 2, Profile: "3g.20gb", Start: 0, Size: 4},
			MIGInstance{ID: 1, Profile: "3g.20gb", Start: 4, Size: 4})})},
		{"esxi-a100.mig-enable-pending.txt", RenderMIGSet(a100, true, farm.PendingReboot) + "All done.\n"},
		{"h100.mig-enable.txt", RenderMIGSet(h100, true, farm.Applied) + "All done.\n"},
		{"esxi-a100.query-gpu-bus-mig.csv", RenderQueryCSV(Host{}, []GPU{a100}, []string{"pci.bus_id", "mig.mode.current"}, CSVOptions{})},
		{"a16-host.list.txt", RenderList(a16.GPUs)},
		{"v100-sxm2.nvlink-s.txt", RenderNVLinkStatus([]GPU{
			v100(0, "GPU-09101d09-2345-0823-9f93-c9f49b9aebac"), v100(1, "GPU-2f472f47-2093-5eb6-6eb1-a2cce2e0c5ee")})},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			if want := readFixture(t, c.fixture); c.got != want {
				t.Errorf("render differs from %s\n--- got ---\n%s--- want ---\n%s", c.fixture, c.got, want)
			}
		})
	}
}

// gpusim's own outputs for the sample host are kept as golden files: the Python parsers are tested on
// them, so a change here that the parsers do not follow shows up on both sides.
func TestGoldenOutputs(t *testing.T) {
	h := View(sampleHost("esx01.example.com"))
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	cases := map[string]string{
		"gpusim.list.txt":                       RenderList(h.GPUs),
		"gpusim.q.txt":                          RenderQuery(h, h.GPUs, now),
		"gpusim.query-gpu.csv":                  RenderQueryCSV(h, h.GPUs, []string{"index", "pci.bus_id", "name", "memory.total", "mig.mode.current", "mig.mode.pending"}, CSVOptions{}),
		"gpusim.query-gpu.noheader-nounits.csv": RenderQueryCSV(h, h.GPUs, []string{"index", "pci.bus_id", "name", "memory.total", "mig.mode.current", "mig.mode.pending"}, CSVOptions{NoHeader: true, NoUnits: true}),
		"gpusim.query-gpu-facts.noheader-nounits.csv": RenderQueryCSV(h, h.GPUs, []string{"index", "pci.bus_id", "name",
			"mig.mode.current", "mig.mode.pending", "ecc.mode.current", "ecc.mode.pending", "driver_version"}, CSVOptions{NoHeader: true, NoUnits: true}),
		"gpusim.mig-lgip.txt":  RenderLGIP(h.GPUs[1:2]),
		"gpusim.mig-lgipp.txt": RenderLGIPP(h.GPUs[1:2]),
		"gpusim.mig-lgi.txt":   RenderLGI(h.GPUs[1:2]),
		"gpusim.nvlink-s.txt":  RenderNVLinkStatus(h.GPUs),
		"gpusim.topo-m.txt":    RenderTopo(h.GPUs),
		"gpusim.module-params.txt": RenderModuleParams([]ModuleParam{
			{"NVreg_EnableMSI", "int", "", "Enable message signaled interrupts (1 = enabled)"},
			{"NVreg_NvLinkDisable", "int", "1", "Disable NVLink training (1 = disabled)"},
			{"NVreg_RegistryDwords", "string", "RmPVMRL=0x01", "Semicolon-separated RM registry keys: key=value;..."},
		}),
	}
	cases["gpusim.vib-list.txt"] = esxcliVIBList(testVIBs).Stdout
	for name, got := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(fixtureDir, name)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if want := readFixture(t, name); got != want {
				t.Errorf("%s changed (run go test -run TestGoldenOutputs -update)\n--- got ---\n%s--- want ---\n%s", name, got, want)
			}
		})
	}
}

func TestFreeInstances(t *testing.T) {
	p := func(name string) GIProfile {
		for _, p := range catalogueMIG("A100-40GB") {
			if p.Name == name {
				return p
			}
		}
		t.Fatalf("no profile %s", name)
		return GIProfile{}
	}
	cases := []struct {
		profile string
		used    []MIGInstance
		want    int
	}{
		{"1g.5gb", nil, 7},
		{"3g.20gb", nil, 2},
		{"3g.20gb", []MIGInstance{{Profile: "3g.20gb", Start: 0, Size: 4}}, 1},
		{"1g.5gb", []MIGInstance{{Profile: "3g.20gb", Start: 0, Size: 4}}, 3},
		{"7g.40gb", []MIGInstance{{Profile: "1g.5gb", Start: 6, Size: 1}}, 0},
		{"4g.20gb", []MIGInstance{{Profile: "1g.5gb", Start: 6, Size: 1}}, 1},
		{"1g.5gb+me", []MIGInstance{{Profile: "1g.5gb+me", Start: 0, Size: 1}}, 0},
		{"2g.10gb", []MIGInstance{{Profile: "1g.10gb", Start: 0, Size: 2}, {Profile: "1g.10gb", Start: 4, Size: 2}}, 1},
	}
	for _, c := range cases {
		if got := freeInstances(p(c.profile), c.used); got != c.want {
			t.Errorf("free %s with %v = %d, want %d", c.profile, c.used, got, c.want)
		}
	}
}

func TestSplitBusID(t *testing.T) {
	bus, dev, dom := splitBusID("00000000:3B:00.0")
	if bus != "3B" || dev != "00" || dom != "0000" {
		t.Errorf("splitBusID = %s %s %s", bus, dev, dom)
	}
}

func withInstances(g GPU, in ...MIGInstance) GPU {
	g.MIGInstances = in
	return g
}

// A MIG GPU without GPU instances answers `mig -lgi` as NVML does: "Not Found", exit 6.
func TestLGIWithoutInstances(t *testing.T) {
	res := renderLGIResult([]GPU{{GPUInfo: snap(0, "", migOn), MIGCapable: true, MIGProfiles: catalogueMIG("A100-40GB")}})
	if res.Stdout != "No GPU instances found: Not Found\n" || res.Exit != exitNotFound {
		t.Errorf("%+v", res)
	}
}
