package esxsh

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpusim/internal/farm"
)

// softBackend adds depots and installs to memBackend: one depot with NVIDIA's R580 component.
type softBackend struct {
	*memBackend
	installed []string
	inMM      bool
	vgpus     []VGPU
}

func (b *softBackend) RunningVGPUs(string) []VGPU { return b.vgpus }

const bundle = "/vmfs/volumes/datastore1/nvidia/NVD-AIE-800_580.65.05.zip"

func (b *softBackend) DepotComponents(depot string) ([]DepotComponent, error) {
	if depot != bundle {
		return nil, errors.New("[MetadataDownloadError] Could not download from depot at " + depot)
	}
	return []DepotComponent{{"NVD-AIE-800", "580.65.05-1OEM.800.1.0.20613240", "NVIDIA", "VMwareAccepted", "2025-08-12"}}, nil
}

// Apply installs from the depot; every other change is memBackend's.
func (b *softBackend) Apply(host string, c Change) (Applied, error) {
	install, ok := c.(InstallChange)
	if !ok {
		return b.memBackend.Apply(host, c)
	}
	if !b.inMM {
		return Applied{}, errors.New("[MaintenanceMode] maintenance mode required")
	}
	b.installed = append(b.installed, install.Depot+" "+strings.Join(install.Names, ","))
	return Applied{Outcome: farm.PendingReboot, Install: InstallResult{
		Installed: []string{"NVD-AIE-800_580.65.05-1OEM.800.1.0.20613240"}, RebootRequired: true}}, nil
}

func TestDepotComponentsAndInstalls(t *testing.T) {
	const host = "esx01.example.com"
	b := &softBackend{memBackend: newMemBackend(sampleHost(host))}
	sh := &Shell{Backend: b}
	list := sh.Run(host, "esxcli software sources component list -d "+bundle)
	if list.Exit != 0 || !strings.Contains(list.Stdout, "NVD-AIE-800  580.65.05-1OEM.800.1.0.20613240  NVIDIA") ||
		!strings.HasPrefix(list.Stdout, "Name ") {
		t.Fatalf("component list: %+v", list)
	}
	if r := sh.Run(host, "esxcli software sources component list -d https://nowhere/index.xml"); r.Exit != 1 ||
		!strings.Contains(r.Stderr, "Could not download") {
		t.Fatalf("unreachable depot: %+v", r)
	}
	if r := sh.Run(host, "esxcli software component apply"); r.Exit != 1 || !strings.Contains(r.Stderr, "--depot") {
		t.Fatalf("no depot: %+v", r)
	}
	if r := sh.Run(host, "esxcli software component apply -d "+bundle); r.Exit != 1 || !strings.Contains(r.Stderr, "MaintenanceMode") {
		t.Fatalf("outside maintenance mode: %+v", r)
	}
	b.inMM = true
	r := sh.Run(host, "esxcli software component apply -d "+bundle+" -n NVD-AIE-800")
	if r.Exit != 0 || !strings.Contains(r.Stdout, "Components Installed: NVD-AIE-800_580.65.05") ||
		!strings.Contains(r.Stdout, "Reboot Required: true") {
		t.Fatalf("apply: %+v", r)
	}
	if v := sh.Run(host, "esxcli software vib install -d "+bundle); v.Exit != 0 || !strings.Contains(v.Stdout, "VIBs Installed:") {
		t.Fatalf("vib install: %+v", v)
	}
	if len(b.installed) != 2 || b.installed[0] != bundle+" NVD-AIE-800" {
		t.Fatalf("installs %v", b.installed)
	}
}

func TestVGPUQueryListsTheGuestDrivers(t *testing.T) {
	const host = "esx01.example.com"
	h := sampleHost(host)
	b := &softBackend{memBackend: newMemBackend(h), vgpus: []VGPU{
		{PCIID: h.GPUs[0].PCIID, VMName: "train-01", Type: "NVIDIA A100-40C", GuestDriver: "550.90.07"},
		{PCIID: h.GPUs[1].PCIID, VMName: "fresh-01", Type: "NVIDIA A100-20C"}}}
	out := (&Shell{Backend: b}).Run(host, "nvidia-smi vgpu -q")
	if out.Exit != 0 {
		t.Fatalf("%+v", out)
	}
	for _, want := range []string{"GPU " + nvidiaBusID(h.GPUs[0].PCIID), "Active vGPUs                      : 1", "VM Name                       : train-01",
		"Guest Driver Version          : 550.90.07", "Guest Driver Version          : Not Available", "Active vGPUs                      : 0"} {
		if !strings.Contains(out.Stdout, want) {
			t.Errorf("missing %q in\n%s", want, out.Stdout)
		}
	}
	if r := (&Shell{Backend: b}).Run(host, "nvidia-smi vgpu -x"); r.Exit == 0 {
		t.Fatalf("bad flag accepted: %+v", r)
	}
}

// gpusim's software outputs are golden files too (tests/fixtures/nvidia-smi): vgpuctl's parsers read them.
func TestSoftwareGoldenOutputs(t *testing.T) {
	h := sampleHost("esx01.example.com")
	b := &softBackend{memBackend: newMemBackend(h), inMM: true, vgpus: []VGPU{
		{PCIID: h.GPUs[0].PCIID, VMName: "train-01", Type: "NVIDIA A100-40C", GuestDriver: "550.90.07"},
		{PCIID: h.GPUs[1].PCIID, VMName: "infer-01", Type: "NVIDIA A100-3-20C"}}}
	sh := &Shell{Backend: b}
	cases := map[string]string{
		"gpusim.vgpu-q.txt":          sh.Run(h.Name, "nvidia-smi vgpu -q").Stdout,
		"gpusim.component-list.txt":  sh.Run(h.Name, "esxcli software sources component list -d "+bundle).Stdout,
		"gpusim.component-apply.txt": sh.Run(h.Name, "esxcli software component apply -d "+bundle+" -n NVD-AIE-800").Stdout,
	}
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
				t.Errorf("%s changed (run go test -run TestSoftwareGoldenOutputs -update)\n--- got ---\n%s--- want ---\n%s", name, got, want)
			}
		})
	}
}
