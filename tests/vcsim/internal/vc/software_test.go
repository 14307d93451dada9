package vc

import (
	"testing"
	"time"

	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

const r580Zip = "/vmfs/volumes/datastore1/nvidia/NVD-AIE-800_580.65.05.zip"

func softwareSpec() Spec {
	spec := smallSpec()
	spec.Software = &farm.SoftwareSpec{
		Depots: []farm.DepotSpec{{Location: r580Zip, Components: []farm.Component{
			{Name: "NVD-AIE-800", Version: "580.65.05-1OEM.800.1.0.20613240", Vendor: farm.NVIDIA}}}},
		GuestDrivers: map[string]string{"vm-a": "550.90.07"},
	}
	return spec
}

// A VM whose guest driver the host's vGPU Manager does not accept gets vCenter's GenericVmConfigFault at
// power-on and at vMotion, and gpusim records the incident.
func TestIncompatibleGuestDriverRefusesPowerOnAndVMotion(t *testing.T) {
	spec := softwareSpec()
	spec.VMs[1].Host = host2
	e := start(t, spec)
	setHotMigrate(e, "true")
	e.must(e.sim.Farm.SetManager(host2, "580.65.05"))
	vm := e.vm("vm-a")
	e.must(e.addVGPUs(vm, "grid_a100-40c"))
	e.must(e.wait(vm.PowerOn(e.ctx))) // R550 guest on the R550 manager
	dest := e.host(host2).Reference()
	err := e.wait(vm.Relocate(e.ctx, types.VirtualMachineRelocateSpec{Host: &dest}, types.VirtualMachineMovePriorityDefaultPriority))
	if f, msg := faultOf(err); f == nil || !isGenericVMConfig(f) || !contains(msg, "more than one branch older") {
		t.Fatalf("vMotion to the R580 host: %v", err)
	}
	e.must(e.wait(vm.PowerOff(e.ctx)))
	other := e.vm("vm-b")
	e.sim.Farm.SetGuestDriver("vm-b", "550.90.07")
	e.must(e.addVGPUs(other, "grid_a100-40c"))
	if f, _ := faultOf(e.wait(other.PowerOn(e.ctx))); f == nil || !isGenericVMConfig(f) {
		t.Fatalf("power-on under R580 with an R550 guest: %v", f)
	}
	if inc := e.sim.Farm.Incidents(); len(inc) != 2 || inc[0].What != "refused" || inc[1].VM != "vm-b" {
		t.Fatalf("incidents %+v", inc)
	}
}

func isGenericVMConfig(f types.BaseMethodFault) bool {
	_, ok := f.(*types.GenericVmConfigFault)
	return ok
}

// Remediation as vLCM does it: maintenance mode, the install, the reboot (the package list shows the new manager
// at once, it runs after the reboot), out of maintenance mode again; refused while VMs run.
func TestRemediateInstallsRebootsAndShowsTheNewPackage(t *testing.T) {
	e := start(t, softwareSpec())
	vm := e.vm("vm-a")
	e.must(e.wait(vm.PowerOn(e.ctx)))
	if err := e.sim.Remediate(host1, r580Zip, "NVD-AIE-800", 5*time.Second); err == nil || !contains(err.Error(), "could not be evacuated") {
		t.Fatalf("remediation with a running VM: %v", err)
	}
	e.must(e.wait(vm.PowerOff(e.ctx)))
	e.must(e.sim.Remediate(host1, r580Zip, "NVD-AIE-800", 5*time.Second))
	info, _ := e.sim.Farm.Host(host1)
	if info.Access.Manager != "580.65.05" || info.InMaintenance {
		t.Fatalf("after remediation: manager %s, maintenance %v", info.Access.Manager, info.InMaintenance)
	}
	img := e.hostMO(host1, "configManager.imageConfigManager").ConfigManager.ImageConfigManager
	res, err := methods.FetchSoftwarePackages(e.ctx, e.c.Client, &types.FetchSoftwarePackages{This: *img})
	e.must(err)
	found := false
	for _, p := range res.Returnval {
		found = found || (p.Name == managerVIB && p.Version == "580.65.05"+vibSuffix)
	}
	if !found {
		t.Fatalf("package list after remediation: %+v", res.Returnval)
	}
	e.must(e.sim.Farm.SetRemediationFault(host2, &farm.RemediationFault{Kind: farm.RemediationStayDown, Count: 1}))
	if err := e.sim.Remediate(host2, r580Zip, "NVD-AIE-800", time.Second); err == nil || !contains(err.Error(), "did not come back") {
		t.Fatalf("a host that stays down: %v", err)
	}
}
