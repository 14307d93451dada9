package vc

import (
	"testing"
	"time"

	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

const host1 = "esx-01.gpu.sim"

func TestHostsShowGPUs(t *testing.T) {
	e := start(t, smallSpec())
	h := e.hostMO(host1, "hardware.pciDevice", "config.graphicsInfo", "config.graphicsConfig",
		"config.sharedPassthruGpuTypes", "config.sharedGpuCapabilities", "configManager")
	var gpus []types.HostPciDevice
	for _, d := range h.Hardware.PciDevice {
		if uint16(d.VendorId) == farm.VendorID {
			gpus = append(gpus, d)
		}
	}
	if len(gpus) != 4 || uint16(gpus[0].DeviceId) != 0x20f1 || gpus[0].Id != "0000:3b:00.0" {
		t.Fatalf("unexpected GPU PCI devices %+v", gpus)
	}
	if len(h.Config.GraphicsInfo) != 4 {
		t.Fatalf("graphicsInfo has %d entries", len(h.Config.GraphicsInfo))
	}
	gi := h.Config.GraphicsInfo[0]
	if gi.GraphicsType != "sharedDirect" || gi.VgpuMode != "sameSize" || gi.MemorySizeInKB != 40*1024*1024 || gi.VendorName != farm.VendorName {
		t.Fatalf("unexpected graphicsInfo %+v", gi)
	}
	if h.Config.GraphicsConfig.HostDefaultGraphicsType != "sharedDirect" || h.Config.GraphicsConfig.SharedPassthruAssignmentPolicy != "performance" {
		t.Fatalf("unexpected graphicsConfig %+v", h.Config.GraphicsConfig)
	}
	want := []string{"grid_a100-10c", "grid_a100-20c", "grid_a100-40c", "grid_a100-4c", "grid_a100-5c", "grid_a100-8c"}
	if len(h.Config.SharedPassthruGpuTypes) != len(want) {
		t.Fatalf("sharedPassthruGpuTypes %v", h.Config.SharedPassthruGpuTypes)
	}
	for i := range want {
		if h.Config.SharedPassthruGpuTypes[i] != want[i] {
			t.Fatalf("sharedPassthruGpuTypes %v", h.Config.SharedPassthruGpuTypes)
		}
	}
	if len(h.Config.SharedGpuCapabilities) != len(want) {
		t.Fatalf("sharedGpuCapabilities %+v", h.Config.SharedGpuCapabilities)
	}
	if h.ConfigManager.GraphicsManager == nil || h.ConfigManager.KernelModuleSystem == nil || h.ConfigManager.PciPassthruSystem == nil {
		t.Fatalf("missing managers %+v", h.ConfigManager)
	}
}

func TestMIGHostOffersMIGProfiles(t *testing.T) {
	spec := smallSpec()
	spec.Clusters[0].MIG = true
	e := start(t, spec)
	h := e.hostMO(host1, "config.graphicsInfo", "config.sharedPassthruGpuTypes")
	if h.Config.GraphicsInfo[0].VgpuMode != "multiInstanceGpu" {
		t.Fatalf("vgpuMode %q", h.Config.GraphicsInfo[0].VgpuMode)
	}
	for _, p := range h.Config.SharedPassthruGpuTypes {
		if prof, err := e.sim.Farm.Catalog().Profile(p); err != nil || !prof.MIG {
			t.Fatalf("MIG host offers %s", p)
		}
	}
	vm := e.vm("vm-a")
	f, _ := faultOf(e.addVGPUs(vm, "grid_a100-40c"))
	if _, ok := f.(*types.InvalidDeviceSpec); !ok {
		t.Fatalf("time-sliced profile on a MIG host: %#v", f)
	}
	e.must(e.addVGPUs(vm, "grid_a100-3-20c"))
	e.must(e.wait(vm.PowerOn(e.ctx)))
	got := e.sim.Farm.VMGPUs(vm.Reference().Value)
	if len(got) != 1 || got[0].GI != "3g.20gb" || got[0].Start != 0 {
		t.Fatalf("unexpected MIG assignment %+v", got)
	}
}

func TestGraphicsManager(t *testing.T) {
	spec := smallSpec()
	spec.Clusters[0].GraphicsType = farm.GraphicsShared
	e := start(t, spec)
	gm := e.graphics(host1)
	ref := gm.ref
	m := gm.props()
	if len(m.GraphicsInfo) != 4 || m.GraphicsConfig.HostDefaultGraphicsType != "shared" || len(m.SharedPassthruGpuTypes) == 0 {
		t.Fatalf("unexpected graphics manager %+v", m)
	}
	profiles, err := methods.RetrieveVgpuProfileInfo(e.ctx, e.c.Client, &types.RetrieveVgpuProfileInfo{This: ref})
	e.must(err)
	found := false
	for _, p := range profiles.Returnval {
		if p.ProfileName == "grid_a100-20c" && p.FbSizeInGib == 20 && p.ProfileSharing == "timeSliced" && p.ProfileClass == "compute" {
			found = true
		}
	}
	if !found {
		t.Fatalf("grid_a100-20c missing from %+v", profiles.Returnval)
	}
	devices, err := methods.RetrieveVgpuDeviceInfo(e.ctx, e.c.Client, &types.RetrieveVgpuDeviceInfo{This: ref})
	e.must(err)
	if len(devices.Returnval) != 1 || !devices.Returnval[0].MigCapable || devices.Returnval[0].MaxFbSizeInGib != 40 {
		t.Fatalf("unexpected device info %+v", devices.Returnval)
	}

	// shared (the vSphere default) admits no vGPU
	vm := e.vm("vm-a")
	e.must(e.addVGPUs(vm, "grid_a100-20c"))
	f, msg := faultOf(e.wait(vm.PowerOn(e.ctx)))
	if _, ok := f.(*types.InsufficientGraphicsResourcesFault); !ok || msg != farm.InsufficientGraphics {
		t.Fatalf("expected insufficient graphics, got %#v %q", f, msg)
	}
	e.must(gm.update(types.HostGraphicsConfig{HostDefaultGraphicsType: "sharedDirect", SharedPassthruAssignmentPolicy: "consolidation"}))
	e.must(e.wait(vm.PowerOn(e.ctx)))
	if !gm.active() {
		t.Fatal("IsSharedGraphicsActive is false with a vGPU running")
	}
	// refused while a powered-on VM holds a vGPU on an affected GPU
	err = gm.update(types.HostGraphicsConfig{HostDefaultGraphicsType: "shared", SharedPassthruAssignmentPolicy: "performance"})
	if err == nil {
		t.Fatal("UpdateGraphicsConfig accepted with a vGPU running")
	}
	if _, ok := soapFault(err).(types.ResourceInUse); !ok {
		t.Fatalf("expected ResourceInUse, got %v", err)
	}
	// an invalid type is a vim fault, not a crash
	err = gm.update(types.HostGraphicsConfig{HostDefaultGraphicsType: "bogus"})
	if _, ok := soapFault(err).(types.InvalidArgument); !ok {
		t.Fatalf("expected InvalidArgument, got %v", err)
	}
	e.must(gm.refresh())
}

// soapFault returns the vim fault of a SOAP fault (decoded as a value type), or nil.
func soapFault(err error) any {
	if err != nil && soap.IsSoapFault(err) {
		return soap.ToSoapFault(err).VimFault()
	}
	return nil
}

func TestKernelModulesRebootAndNVLink(t *testing.T) {
	e := start(t, smallSpec())
	km := e.kernel(host1)
	mods, err := km.modules()
	e.must(err)
	if len(mods) == 0 || mods[0].Name != "nvidia" {
		t.Fatalf("unexpected modules %+v", mods)
	}
	e.must(km.update("nvidia", "NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x01"))
	opts, err := km.configured("nvidia")
	e.must(err)
	if opts != "NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x01" {
		t.Fatalf("configured options %q", opts)
	}
	if _, err := km.configured("nope"); soapFault(err) == nil {
		t.Fatalf("unknown module: %v", err)
	}
	if len(e.configTarget(host1).VendorDeviceGroupInfo) == 0 {
		t.Fatal("NVLink down before the reboot")
	}
	h := e.host(host1)
	// reboot only in maintenance mode
	f, _ := faultOf(e.reboot(host1))
	if _, ok := f.(*types.InvalidState); !ok {
		t.Fatalf("reboot outside maintenance mode: %#v", f)
	}
	e.must(e.wait(h.EnterMaintenanceMode(e.ctx, 0, false, nil)))
	e.must(e.reboot(host1))
	if st := e.hostMO(host1, "runtime.connectionState").Runtime.ConnectionState; st != types.HostSystemConnectionStateNotResponding {
		t.Fatalf("rebooting host is %s", st)
	}
	e.waitConnected(host1)
	mods, err = km.modules()
	e.must(err)
	if mods[0].OptionString != "NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x01" {
		t.Fatalf("options not in effect after reboot: %q", mods[0].OptionString)
	}
	if n := len(e.configTarget(host1).VendorDeviceGroupInfo); n != 0 {
		t.Fatalf("NVLink device groups offered with NVLink disabled: %d", n)
	}
	g, _ := e.sim.Farm.GPU(host1, "0000:3b:00.0")
	if g.NVLinkUp || g.Scheduler.Policy != "equal-share" {
		t.Fatalf("farm state after reboot %+v", g)
	}
	e.must(e.wait(h.ExitMaintenanceMode(e.ctx, 0)))
}

func (e *env) waitConnected(name string) {
	e.t.Helper()
	for i := 0; i < 500; i++ {
		if e.hostMO(name, "runtime.connectionState").Runtime.ConnectionState == types.HostSystemConnectionStateConnected {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatal("host did not come back")
}

func TestRebootAppliesPendingMIG(t *testing.T) {
	e := start(t, smallSpec())
	r, err := e.sim.Farm.SetMIGMode(host1, "0000:3b:00.0", true)
	e.must(err)
	if !r.Pending {
		t.Fatal("A100 MIG change not pending")
	}
	if m := e.hostMO(host1, "config.graphicsInfo").Config.GraphicsInfo[0].VgpuMode; m != "sameSize" {
		t.Fatalf("vgpuMode changed before reboot: %s", m)
	}
	h := e.host(host1)
	e.must(e.wait(h.EnterMaintenanceMode(e.ctx, 0, false, nil)))
	e.must(e.reboot(host1))
	e.waitConnected(host1)
	hm := e.hostMO(host1, "config.graphicsInfo", "config.sharedPassthruGpuTypes")
	if hm.Config.GraphicsInfo[0].VgpuMode != "multiInstanceGpu" || hm.Config.GraphicsInfo[1].VgpuMode != "sameSize" {
		t.Fatalf("MIG not applied after reboot: %+v", hm.Config.GraphicsInfo[:2])
	}
	hasMIG := false
	for _, p := range hm.Config.SharedPassthruGpuTypes {
		hasMIG = hasMIG || p == "grid_a100-3-20c"
	}
	if !hasMIG {
		t.Fatalf("MIG profiles not offered: %v", hm.Config.SharedPassthruGpuTypes)
	}
}

func TestMaintenanceModeRules(t *testing.T) {
	e := start(t, smallSpec())
	vm := e.vm("vm-a")
	e.must(e.wait(vm.PowerOn(e.ctx)))
	h := e.host(host1)
	f, msg := faultOf(e.wait(h.EnterMaintenanceMode(e.ctx, 0, false, nil)))
	if _, ok := f.(*types.InvalidState); !ok || !contains(msg, "powered-on") {
		t.Fatalf("maintenance with a powered-on VM: %#v %q", f, msg)
	}
	e.must(e.wait(vm.PowerOff(e.ctx)))
	e.must(e.wait(h.EnterMaintenanceMode(e.ctx, 0, false, nil)))
	if !e.hostMO(host1, "runtime.inMaintenanceMode").Runtime.InMaintenanceMode {
		t.Fatal("not in maintenance mode")
	}
	if f, _ := faultOf(e.wait(vm.PowerOn(e.ctx))); f == nil {
		t.Fatal("VM powered on in maintenance mode")
	}
	e.must(e.wait(h.ExitMaintenanceMode(e.ctx, 0)))
	info, _ := e.sim.Farm.Host(host1)
	if info.InMaintenance {
		t.Fatal("farm still in maintenance")
	}
}
