package farm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func nicFarm(t *testing.T) *Farm {
	t.Helper()
	f := New(nil)
	if err := f.AddHost(HostSpec{Name: "h1", Model: "A100-40GB", GPUs: 2}); err != nil {
		t.Fatal(err)
	}
	if err := f.AddNICs("h1", []NICSpec{{Model: "ConnectX-7", VFs: 2}, {Model: "ConnectX-6 Dx", Passthrough: true}}); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestNICsStartAsTheSpecSays(t *testing.T) {
	nics, err := nicFarm(t).NICs("h1")
	if err != nil || len(nics) != 2 {
		t.Fatalf("%v %v", nics, err)
	}
	cx7, dx := nics[0], nics[1]
	if cx7.PCIID != "0000:18:00.0" || cx7.Vmnic != "vmnic4" || cx7.DeviceID != 0x1021 || cx7.VFDeviceID != 0x101e ||
		!cx7.SRIOVActive || cx7.NumVF != 2 || cx7.MaxVF != 16 || cx7.NUMANode != 0 {
		t.Errorf("ConnectX-7: %+v", cx7)
	}
	if dx.PCIID != "0000:d8:00.0" || dx.DeviceID != 0x101d || !dx.PassthruActive || dx.SRIOVActive || dx.NUMANode != 1 {
		t.Errorf("ConnectX-6 Dx: %+v", dx)
	}
}

func TestVFsAreAdmittedUntilExhaustedAndReleased(t *testing.T) {
	f := nicFarm(t)
	vf := []NICNeed{{Kind: "sriov", PCIID: "0000:18:00.0"}}
	for _, vm := range []string{"vm-1", "vm-2"} {
		if got, err := f.AdmitNICs("h1", vm, vf); err != nil || got[0] != "0000:18:00.0" {
			t.Fatalf("%s: %v %v", vm, got, err)
		}
	}
	if _, err := f.AdmitNICs("h1", "vm-3", vf); !errors.Is(err, ErrNoNIC) ||
		!strings.Contains(err.Error(), "no free SR-IOV virtual function on 0000:18:00.0 of host h1") {
		t.Fatalf("third VF: %v", err)
	}
	f.Release("vm-1")
	if _, err := f.AdmitNICs("h1", "vm-3", vf); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}

func TestPassthroughIsAllOrNothingAndByAllowedIDs(t *testing.T) {
	f := nicFarm(t)
	both := []NICNeed{{Kind: "passthrough", Allowed: [][2]int{{NICVendorID, 0x101d}}}, {Kind: "sriov", PCIID: "0000:18:00.0"}}
	got, err := f.AdmitNICs("h1", "vm-1", both)
	if err != nil || got[0] != "0000:d8:00.0" {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := f.AdmitNICs("h1", "vm-2", both); !errors.Is(err, ErrNoNIC) {
		t.Fatalf("the NIC is taken: %v", err)
	}
	nics, _ := f.NICs("h1")
	if len(nics[0].VFHolders) != 1 { // vm-2 took no VF when its passthrough NIC was not free
		t.Errorf("VF holders %v", nics[0].VFHolders)
	}
}

func TestSRIOVConfigurationWaitsForAReboot(t *testing.T) {
	f := nicFarm(t)
	if err := f.ConfigureNIC("h1", "0000:d8:00.0", NICConfig{SRIOV: true, Enabled: true, VFs: 8}); err != nil {
		t.Fatal(err)
	}
	nics, _ := f.NICs("h1")
	if dx := nics[1]; !dx.SRIOVEnabled || dx.SRIOVActive || dx.NumVFRequested != 8 || dx.NumVF != 0 || !dx.RebootNeeded {
		t.Fatalf("before the reboot: %+v", dx)
	}
	if err := f.ConfigureNIC("h1", "0000:d8:00.0", NICConfig{SRIOV: true, Enabled: true, VFs: 17}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("more VFs than the NIC supports: %v", err)
	}
	if err := f.SetMaintenance("h1", true); err != nil {
		t.Fatal(err)
	}
	if err := f.BeginReboot("h1"); err != nil {
		t.Fatal(err)
	}
	if err := f.EndReboot("h1"); err != nil {
		t.Fatal(err)
	}
	nics, _ = f.NICs("h1")
	if dx := nics[1]; !dx.SRIOVActive || dx.NumVF != 8 || dx.RebootNeeded {
		t.Fatalf("after the reboot: %+v", dx)
	}
}

func TestBadNICSpecs(t *testing.T) {
	for _, spec := range []NICSpec{{Model: "ConnectX-9"}, {Model: "ConnectX-7", VFs: 20}, {Model: "ConnectX-7", VFs: 2, Passthrough: true}} {
		if err := CheckNICSpecs([]NICSpec{spec}); err == nil {
			t.Errorf("%+v accepted", spec)
		}
	}
}

// The NIC ids here are vgpuctl's (vgpuctl/data/network.yaml): one source, pci.ids.
func TestNICModelsMatchVgpuctlsNetworkRules(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "vgpuctl", "data", "network.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Nics struct {
			VendorID int `yaml:"vendor_id"`
			Models   []struct {
				Model      string `yaml:"model"`
				DeviceID   int    `yaml:"device_id"`
				VFDeviceID int    `yaml:"vf_device_id"`
				Name       string `yaml:"name"`
			} `yaml:"models"`
		} `yaml:"nics"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	if rules.Nics.VendorID != NICVendorID || len(rules.Nics.Models) != len(NICModels) {
		t.Fatalf("vendor %#x, %d models", rules.Nics.VendorID, len(rules.Nics.Models))
	}
	for i, m := range rules.Nics.Models {
		g := NICModels[i]
		if m.Model != g.Name || m.DeviceID != g.DeviceID || m.VFDeviceID != g.VFDeviceID || m.Name != g.DeviceName {
			t.Errorf("%+v != %+v", m, g)
		}
	}
}
