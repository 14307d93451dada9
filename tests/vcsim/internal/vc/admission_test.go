package vc

import (
	"reflect"
	"strings"
	"testing"

	"github.com/vmware/govmomi/vim25/types"
)

func TestPowerOnAdmitsAndReleases(t *testing.T) {
	e := start(t, smallSpec())
	vm := e.vm("vm-a")
	e.must(e.addVGPUs(vm, "grid_a100-40c", "grid_a100-40c"))
	e.must(e.wait(vm.PowerOn(e.ctx)))
	got := e.sim.Farm.VMGPUs(vm.Reference().Value)
	if len(got) != 2 || got[0].GPU == got[1].GPU {
		t.Fatalf("expected two vGPUs on distinct GPUs, got %+v", got)
	}
	h := e.hostMO("esx-01.gpu.sim", "config.graphicsInfo")
	users := 0
	for _, gi := range h.Config.GraphicsInfo {
		for _, ref := range gi.Vm {
			if ref == vm.Reference() {
				users++
			}
		}
	}
	if users != 2 {
		t.Fatalf("graphicsInfo lists the VM on %d GPUs, want 2", users)
	}
	e.must(e.wait(vm.PowerOff(e.ctx)))
	if got := e.sim.Farm.VMGPUs(vm.Reference().Value); len(got) != 0 {
		t.Fatalf("power-off kept %+v", got)
	}
}

func TestPowerOnNeedsReservedMemory(t *testing.T) {
	spec := smallSpec()
	spec.VMs[0].Locked = false
	e := start(t, spec)
	vm := e.vm("vm-a")
	e.must(e.addVGPUs(vm, "grid_a100-20c"))
	err := e.wait(vm.PowerOn(e.ctx))
	f, msg := faultOf(err)
	if _, ok := f.(*types.GenericVmConfigFault); !ok || !contains(msg, "memory reservation") {
		t.Fatalf("expected a memory reservation fault, got %v (%q)", err, msg)
	}
	if m := e.vmMO(vm, "runtime.powerState"); m.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
		t.Fatalf("VM is %s", m.Runtime.PowerState)
	}
}

// Farm file VMs with power_on get their vGPUs placed by the power-on rules, in farm file order.
func TestFarmVMsPoweredOnAreAdmitted(t *testing.T) {
	spec := smallSpec()
	spec.VMs = []VMSpec{
		{Name: "busy-1", Host: host1, MemoryMB: 8192, Locked: true, VGPUs: []string{"grid_a100-20c", "grid_a100-20c"}, PowerOn: true},
		{Name: "busy-2", Host: host1, MemoryMB: 8192, Locked: true, VGPUs: []string{"grid_a100-40c"}, PowerOn: true},
		{Name: "idle", Host: host1, MemoryMB: 8192, Locked: true, VGPUs: []string{"grid_a100-40c"}},
	}
	e := start(t, spec)
	byVM := map[string][]string{}
	for _, a := range e.sim.Farm.Assignments() {
		byVM[a.VMName] = append(byVM[a.VMName], a.Host+"/"+a.GPU+"/"+a.Profile)
	}
	// performance: busy-1 spreads over the first two GPUs, busy-2 takes the next empty one
	want := map[string][]string{
		"busy-1": {host1 + "/0000:3b:00.0/grid_a100-20c", host1 + "/0000:3c:00.0/grid_a100-20c"},
		"busy-2": {host1 + "/0000:5e:00.0/grid_a100-40c"},
	}
	if !reflect.DeepEqual(byVM, want) {
		t.Fatalf("assignments %v, want %v", byVM, want)
	}
	if m := e.vmMO(e.vm("busy-2"), "runtime.powerState"); m.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
		t.Fatalf("busy-2 is %s", m.Runtime.PowerState)
	}
	h := e.hostMO(host1, "config.graphicsInfo")
	holders := map[string]int{}
	for _, gi := range h.Config.GraphicsInfo {
		holders[gi.PciId] = len(gi.Vm)
	}
	if holders["0000:3b:00.0"] != 1 || holders["0000:5e:00.0"] != 1 || holders["0000:86:00.0"] != 0 {
		t.Fatalf("graphicsInfo VMs per GPU %v", holders)
	}
}

func TestFarmVMsThatDoNotFitFailTheFarm(t *testing.T) {
	for _, tc := range []struct {
		name string
		vms  []VMSpec
		want string
	}{
		{"no room", []VMSpec{
			{Name: "big-1", Host: host1, Locked: true, VGPUs: []string{"grid_a100-40c", "grid_a100-40c", "grid_a100-40c"}, PowerOn: true},
			{Name: "big-2", Host: host1, Locked: true, VGPUs: []string{"grid_a100-40c", "grid_a100-40c"}, PowerOn: true},
		}, "VM big-2 (power_on: true) cannot start on esx-01.gpu.sim: " + "The amount of graphics resource"},
		{"memory not reserved", []VMSpec{
			{Name: "loose", Host: host1, VGPUs: []string{"grid_a100-20c"}, PowerOn: true},
		}, "VM loose (power_on: true) cannot start on esx-01.gpu.sim: Invalid memory setting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := smallSpec()
			spec.VMs = tc.vms
			sim, err := New(spec)
			if err == nil {
				sim.Close()
				t.Fatal("farm with VMs that cannot start was accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}
