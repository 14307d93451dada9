package vc

import (
	"slices"
	"testing"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"
)

const host2 = "esx-02.gpu.sim"

func setHotMigrate(e *env, value string) {
	e.t.Helper()
	m := object.NewOptionManager(e.c.Client, *e.c.ServiceContent.Setting)
	e.must(m.Update(e.ctx, []types.BaseOptionValue{&types.OptionValue{Key: HotMigrateOption, Value: value}}))
}

func TestRelocateRespectsVGPUAdmission(t *testing.T) {
	cases := []struct {
		name      string
		hot       string // vgpu.hotmigrate.enabled ("" leaves it unset)
		fill      []string
		wantFault string // "" when the move succeeds
	}{
		{name: "moves and takes its vGPUs along", hot: "true"},
		{name: "hot migration not enabled", hot: "", wantFault: "MigrationDisabled"},
		{name: "hot migration set to false", hot: "false", wantFault: "MigrationDisabled"},
		{name: "destination full", hot: "true", fill: []string{"grid_a100-40c", "grid_a100-40c", "grid_a100-40c",
			"grid_a100-40c"}, wantFault: "InsufficientGraphicsResourcesFault"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := smallSpec()
			spec.VMs[1].Host = host2
			e := start(t, spec)
			if tc.hot != "" {
				setHotMigrate(e, tc.hot)
			}
			vm, other := e.vm("vm-a"), e.vm("vm-b")
			e.must(e.addVGPUs(vm, "grid_a100-40c"))
			e.must(e.wait(vm.PowerOn(e.ctx)))
			if len(tc.fill) > 0 {
				e.must(e.addVGPUs(other, tc.fill...))
				e.must(e.wait(other.PowerOn(e.ctx)))
			}
			dest := e.host(host2).Reference()
			err := e.wait(vm.Relocate(e.ctx, types.VirtualMachineRelocateSpec{Host: &dest}, types.VirtualMachineMovePriorityDefaultPriority))
			got := e.sim.Farm.VMGPUs(vm.Reference().Value)
			where := e.vmMO(vm, "runtime.host").Runtime.Host
			if tc.wantFault == "" {
				if err != nil {
					t.Fatalf("relocate: %v", err)
				}
				if len(got) != 1 || *where != dest {
					t.Fatalf("after the move: vGPUs %+v, host %v", got, where)
				}
				for name, want := range map[string]bool{host1: false, host2: true} {
					if has := slices.Contains(e.hostMO(name, "vm").Vm, vm.Reference()); has != want {
						t.Fatalf("%s lists the VM: %v, want %v", name, has, want)
					}
				}
				return
			}
			f, _ := faultOf(err)
			if f == nil || moveFault(f) != tc.wantFault {
				t.Fatalf("expected %s, got %v", tc.wantFault, err)
			}
			if len(got) != 1 || *where == dest {
				t.Fatalf("a refused move must leave the VM and its vGPUs where they were: %+v on %v", got, where)
			}
		})
	}
}

func moveFault(f types.BaseMethodFault) string {
	switch f.(type) {
	case *types.MigrationDisabled:
		return "MigrationDisabled"
	case *types.InsufficientGraphicsResourcesFault:
		return "InsufficientGraphicsResourcesFault"
	}
	return "other"
}
