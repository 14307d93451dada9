package vc

import (
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
