package farm

import (
	"errors"
	"testing"
)

const depotZip = "/vmfs/volumes/datastore1/nvidia/NVD-AIE-800_580.65.05-1OEM.800.1.0.20613240.zip"

func softwareFarm(t *testing.T) *Farm {
	t.Helper()
	f := newFarm(t, a100Host("h1"), a100Host("h2"))
	rel, err := LoadReleasesBeside(f.Catalog())
	if err != nil {
		t.Fatal(err)
	}
	spec := SoftwareSpec{
		Depots: []DepotSpec{{Location: depotZip, Components: []Component{
			{Name: "NVD-AIE-800", Version: "580.65.05-1OEM.800.1.0.20613240", Vendor: NVIDIA, DisplayName: "NVIDIA AI Enterprise vGPU driver"},
		}}},
		GuestDrivers: map[string]string{"vm-a": "550.90.07"},
	}
	if err := f.SetSoftware(spec, rel); err != nil {
		t.Fatal(err)
	}
	return f
}

// NVIDIA's table (vGPU 19.0 release notes, 1.1 and 1.2): the same release, the previous branch, the previous
// LTS branch; nothing else, and nothing the table cannot place.
func TestReleaseRuleFollowsNVIDIAsTable(t *testing.T) {
	rel, err := LoadReleasesBeside(MustDefaultCatalog())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		manager, guest string
		ok             bool
	}{
		{"580.65.05", "580.65.06", true},  // the same release (19.0)
		{"580.65.05", "580.88", true},     // its Windows driver
		{"580.65.05", "570.124.06", true}, // the previous branch
		{"580.65.05", "535.161.07", true}, // the previous LTS branch
		{"550.90.05", "535.161.07", true}, // the previous branch
		{"580.65.05", "550.90.07", false}, // two branches apart, R550 no LTS
		{"550.90.05", "580.65.06", false}, // a guest newer than the manager
		{"580.65.05", "580.82.07", true},  // an R580 release the table does not list: gpusim lets it run
		{"999.1.1", "580.65.06", true},    // a branch the table does not list
		{"525.85.07", "525.60.13", true},  // R525's notes allow releases within the branch
	} {
		if ok, why := rel.Compatible(tc.manager, tc.guest); ok != tc.ok {
			t.Errorf("%s with %s: got %v (%s)", tc.manager, tc.guest, ok, why)
		}
	}
}

func TestInstallNeedsMaintenanceAndRunsFromTheNextReboot(t *testing.T) {
	f := softwareFarm(t)
	if _, err := f.InstallComponents("h1", depotZip, nil); !errors.Is(err, ErrMaintenance) {
		t.Fatalf("install outside maintenance mode: %v", err)
	}
	_ = f.SetMaintenance("h1", true)
	res, err := f.InstallComponents("h1", depotZip, []string{"NVD-AIE-800"})
	if err != nil || !res.RebootRequired || len(res.Installed) != 1 {
		t.Fatalf("install: %+v %v", res, err)
	}
	a, _ := f.Access("h1")
	if a.Installed != "580.65.05" || a.Manager != DefaultManager {
		t.Fatalf("after the install, before the reboot: %+v", a)
	}
	_ = f.BeginReboot("h1")
	_ = f.EndReboot("h1")
	a, _ = f.Access("h1")
	if a.Manager != "580.65.05" {
		t.Fatalf("after the reboot: %+v", a)
	}
	if name, v, _ := f.InstalledComponent("h1"); name != "NVD-AIE-800" || v != "580.65.05-1OEM.800.1.0.20613240" {
		t.Fatalf("installed component %s %s", name, v)
	}
}

func TestDepotsUnreachableOrUnknown(t *testing.T) {
	f := softwareFarm(t)
	if _, err := f.Depot("/vmfs/volumes/datastore1/none.zip"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown depot: %v", err)
	}
	_ = f.SetDepotReachable(depotZip, false)
	_ = f.SetMaintenance("h1", true)
	if _, err := f.InstallComponents("h1", depotZip, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("unreachable depot: %v", err)
	}
}

func TestRemediationFaults(t *testing.T) {
	f := softwareFarm(t)
	_ = f.SetMaintenance("h1", true)
	if err := f.SetRemediationFault("h1", &RemediationFault{Kind: RemediationFail, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.InstallComponents("h1", depotZip, nil); err == nil {
		t.Fatal("an armed failure did not fail the install")
	}
	if _, err := f.InstallComponents("h1", depotZip, nil); err != nil {
		t.Fatalf("the fault was used up: %v", err)
	}
	_ = f.SetRemediationFault("h1", &RemediationFault{Kind: RemediationStayDown, Count: 1})
	_ = f.BeginReboot("h1")
	_ = f.EndReboot("h1")
	if f.Reachable("h1") {
		t.Fatal("a stay-down host came back")
	}
	if err := f.SetRemediationFault("h1", &RemediationFault{Kind: "explode", Count: 1}); err == nil {
		t.Fatal("an unknown fault kind was accepted")
	}
}

func TestIncompatibleGuestDriverIsRefusedAndRecorded(t *testing.T) {
	f := softwareFarm(t)
	if _, err := f.Admit("h1", "vm-1", "vm-a", Request{Profiles: []string{"grid_a100-40c"}}); err != nil {
		t.Fatalf("550.90.07 under 550.90.05: %v", err) // the same branch; 17.3 is not in the table, so gpusim lets it run
	}
	f.Release("vm-1")
	_ = f.SetManager("h2", "580.65.05")
	_, err := f.Admit("h2", "vm-1", "vm-a", Request{Profiles: []string{"grid_a100-40c"}})
	if !errors.Is(err, ErrGuestDriver) {
		t.Fatalf("R550 guest on an R580 manager: %v", err)
	}
	if inc := f.Incidents(); len(inc) != 1 || inc[0].What != "refused" || inc[0].VM != "vm-a" {
		t.Fatalf("incidents %+v", inc)
	}
	f.SetGuestDriver("vm-a", "535.161.07") // the previous LTS branch: R580 accepts it
	if _, err := f.Admit("h2", "vm-1", "vm-a", Request{Profiles: []string{"grid_a100-40c"}}); err != nil {
		t.Fatal(err)
	}
	f.SetGuestDriver("vm-a", "550.90.07") // a driver install the running VM's manager refuses
	if inc := f.Incidents(); len(inc) != 2 || inc[1].What != "running" || inc[1].Host != "h2" {
		t.Fatalf("incidents %+v", inc)
	}
	guests, _ := f.VGPUGuests("h2")
	if len(guests) != 1 || guests[0].Driver != "550.90.07" || guests[0].VMName != "vm-a" {
		t.Fatalf("vgpu guests %+v", guests)
	}
}
