package vc

import (
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

func TestReconfigureRules(t *testing.T) {
	tests := []struct {
		name      string
		api       string
		poweredOn bool
		profiles  []string
		fault     string
	}{
		{"eight vGPUs on 8.0", "8.0.3.0", false, repeat("grid_a100-4c", 8), ""},
		{"nine vGPUs on 8.0", "8.0.3.0", false, repeat("grid_a100-4c", 9), "TooManyDevices"},
		{"four vGPUs on 7.0", "7.0.3.0", false, repeat("grid_a100-4c", 4), ""},
		{"five vGPUs on 7.0", "7.0.3.0", false, repeat("grid_a100-4c", 5), "TooManyDevices"},
		{"hot add", "8.0.3.0", true, []string{"grid_a100-40c"}, "DeviceHotPlugNotSupported"},
		{"empty profile", "8.0.3.0", false, []string{""}, "InvalidDeviceSpec"},
		{"profile of another board", "8.0.3.0", false, []string{"grid_h100-80c"}, "InvalidDeviceSpec"},
		{"MIG profile on time-sliced GPUs", "8.0.3.0", false, []string{"grid_a100-3-20c"}, "InvalidDeviceSpec"},
		{"mixed series", "8.0.3.0", false, []string{"grid_l40s-48q", "grid_l40s-48c"}, "InvalidDeviceSpec"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := smallSpec()
			spec.APIVersion = tc.api
			if tc.name == "mixed series" {
				spec.Clusters[0].Model, spec.Clusters[0].NVLink = "L40S", "none"
			}
			e := start(t, spec)
			vm := e.vm("vm-a")
			if tc.poweredOn {
				e.must(e.wait(vm.PowerOn(e.ctx)))
			}
			err := e.addVGPUs(vm, tc.profiles...)
			f, msg := faultOf(err)
			got := ""
			if f != nil {
				got = typeName(f)
			} else if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if got != tc.fault {
				t.Fatalf("fault %q (%s), want %q", got, msg, tc.fault)
			}
			n := len(vgpuProfiles(deviceList(e, vm)))
			if tc.fault == "" && n != len(tc.profiles) || tc.fault != "" && n != 0 {
				t.Fatalf("VM has %d vGPUs", n)
			}
		})
	}
}

func TestRemoveVGPURequiresPowerOff(t *testing.T) {
	e := start(t, smallSpec())
	vm := e.vm("vm-a")
	e.must(e.addVGPUs(vm, "grid_a100-20c"))
	e.must(e.wait(vm.PowerOn(e.ctx)))
	devices := deviceList(e, vm)
	var remove types.VirtualMachineConfigSpec
	for _, d := range devices {
		if _, ok := vgpuProfile(d); ok {
			remove.DeviceChange = append(remove.DeviceChange, &types.VirtualDeviceConfigSpec{
				Operation: types.VirtualDeviceConfigSpecOperationRemove, Device: d})
		}
	}
	f, _ := faultOf(e.wait(vm.Reconfigure(e.ctx, remove)))
	if _, ok := f.(*types.DeviceHotPlugNotSupported); !ok {
		t.Fatalf("hot remove: %#v", f)
	}
	e.must(e.wait(vm.PowerOff(e.ctx)))
	e.must(e.wait(vm.Reconfigure(e.ctx, remove)))
	if n := len(vgpuProfiles(deviceList(e, vm))); n != 0 {
		t.Fatalf("%d vGPUs left", n)
	}
	// other changes of a powered-on VM still work
	e.must(e.wait(vm.PowerOn(e.ctx)))
	e.must(e.wait(vm.Reconfigure(e.ctx, types.VirtualMachineConfigSpec{Annotation: "ok"})))
}

func TestAdmissionCapacityAllOrNothing(t *testing.T) {
	spec := smallSpec()
	spec.VMs = append(spec.VMs, VMSpec{Name: "vm-c", Host: host1, MemoryMB: 8192, Locked: true})
	e := start(t, spec)
	a, b, c := e.vm("vm-a"), e.vm("vm-b"), e.vm("vm-c")
	e.must(e.addVGPUs(a, "grid_a100-40c", "grid_a100-40c", "grid_a100-40c"))
	e.must(e.addVGPUs(b, "grid_a100-40c", "grid_a100-40c"))
	e.must(e.addVGPUs(c, "grid_a100-40c"))
	e.must(e.wait(a.PowerOn(e.ctx)))
	f, msg := faultOf(e.wait(b.PowerOn(e.ctx)))
	if _, ok := f.(*types.InsufficientGraphicsResourcesFault); !ok || msg != farm.InsufficientGraphics {
		t.Fatalf("expected insufficient graphics, got %#v %q", f, msg)
	}
	if got := e.sim.Farm.VMGPUs(b.Reference().Value); len(got) != 0 {
		t.Fatalf("failed VM holds %+v", got)
	}
	if st := e.vmMO(b, "runtime.powerState").Runtime.PowerState; st != types.VirtualMachinePowerStatePoweredOff {
		t.Fatalf("failed VM is %s", st)
	}
	e.must(e.wait(c.PowerOn(e.ctx)))
	// suspend releases; the GPU can be taken by another VM
	e.must(e.wait(c.Suspend(e.ctx)))
	if got := e.sim.Farm.VMGPUs(c.Reference().Value); len(got) != 0 {
		t.Fatalf("suspended VM holds %+v", got)
	}
	e.must(e.wait(a.PowerOff(e.ctx)))
	e.must(e.wait(b.PowerOn(e.ctx)))
	got := e.sim.Farm.VMGPUs(b.Reference().Value)
	if len(got) != 2 || got[0].GPU == got[1].GPU {
		t.Fatalf("multi-vGPU VM not on distinct GPUs: %+v", got)
	}
}

func TestPlacementPolicyOnHost(t *testing.T) {
	for _, tc := range []struct {
		policy string
		same   bool
	}{{farm.PolicyPerformance, false}, {farm.PolicyConsolidation, true}} {
		t.Run(tc.policy, func(t *testing.T) {
			spec := smallSpec()
			spec.Clusters[0].AssignmentPolicy = tc.policy
			e := start(t, spec)
			a, b := e.vm("vm-a"), e.vm("vm-b")
			e.must(e.addVGPUs(a, "grid_a100-10c"))
			e.must(e.addVGPUs(b, "grid_a100-10c"))
			e.must(e.wait(a.PowerOn(e.ctx)))
			e.must(e.wait(b.PowerOn(e.ctx)))
			ga, gb := e.sim.Farm.VMGPUs(a.Reference().Value), e.sim.Farm.VMGPUs(b.Reference().Value)
			if (ga[0].GPU == gb[0].GPU) != tc.same {
				t.Fatalf("%s placed %s and %s", tc.policy, ga[0].GPU, gb[0].GPU)
			}
		})
	}
}

func TestCloneTemplateWithVGPUs(t *testing.T) {
	spec := smallSpec()
	spec.Templates = append(spec.Templates, VMSpec{Name: "tmpl-gpu", Host: host1, MemoryMB: 4096, Locked: true,
		VGPUs: []string{"grid_a100-20c", "grid_a100-20c"}})
	e := start(t, spec)
	tmpl := e.vm("tmpl-gpu")
	folders := e.folders()
	pool := e.pool()
	ref := e.host(host1).Reference()
	task, err := tmpl.Clone(e.ctx, folders.VmFolder, "clone-1", types.VirtualMachineCloneSpec{
		Location: types.VirtualMachineRelocateSpec{Pool: &pool, Host: &ref}, PowerOn: true})
	e.must(err)
	info, err := task.WaitForResult(e.ctx, nil)
	e.must(err)
	clone := object.NewVirtualMachine(e.c.Client, info.Result.(types.ManagedObjectReference))
	m := e.vmMO(clone, "config.hardware.device", "config.memoryReservationLockedToMax", "config.firmware", "runtime.powerState")
	if n := len(vgpuProfiles(m.Config.Hardware.Device)); n != 2 {
		t.Fatalf("clone has %d vGPUs", n)
	}
	if m.Config.MemoryReservationLockedToMax == nil || !*m.Config.MemoryReservationLockedToMax || m.Config.Firmware != "efi" {
		t.Fatalf("clone lost settings: locked=%v firmware=%q", m.Config.MemoryReservationLockedToMax, m.Config.Firmware)
	}
	if m.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn || len(e.sim.Farm.VMGPUs(clone.Reference().Value)) != 2 {
		t.Fatalf("clone not admitted: %s", m.Runtime.PowerState)
	}
	// the plain template clones too, and a clone spec may add vGPUs
	base := e.vm("ubuntu-22.04-ml")
	add := vgpuSpec(types.VirtualDeviceConfigSpecOperationAdd, "grid_a100-40c")
	add.MemoryReservationLockedToMax = types.NewBool(true)
	task, err = base.Clone(e.ctx, folders.VmFolder, "clone-2", types.VirtualMachineCloneSpec{
		Location: types.VirtualMachineRelocateSpec{Pool: &pool, Host: &ref}, Config: &add})
	e.must(err)
	info, err = task.WaitForResult(e.ctx, nil)
	e.must(err)
	clone2 := object.NewVirtualMachine(e.c.Client, info.Result.(types.ManagedObjectReference))
	if n := len(vgpuProfiles(deviceList(e, clone2))); n != 1 {
		t.Fatalf("clone-2 has %d vGPUs", n)
	}
	// a clone with a profile the host does not offer fails
	bad := vgpuSpec(types.VirtualDeviceConfigSpecOperationAdd, "grid_h100-80c")
	task, err = base.Clone(e.ctx, folders.VmFolder, "clone-3", types.VirtualMachineCloneSpec{
		Location: types.VirtualMachineRelocateSpec{Pool: &pool, Host: &ref}, Config: &bad})
	e.must(err)
	if f, _ := faultOf(task.Wait(e.ctx)); f == nil {
		t.Fatal("clone with an unsupported profile succeeded")
	}
}

func TestNVLinkDeviceGroups(t *testing.T) {
	e := start(t, smallSpec())
	ct := e.configTarget(host1)
	if len(ct.SharedGpuPassthroughTypes) != 6 || len(ct.VgpuProfileInfo) != 6 || len(ct.VgpuDeviceInfo) != 1 {
		t.Fatalf("config target: %d types, %d profiles, %d devices", len(ct.SharedGpuPassthroughTypes),
			len(ct.VgpuProfileInfo), len(ct.VgpuDeviceInfo))
	}
	// one group per NVLink pair of the host, each component naming its GPU's PCI id
	if got := groupGPUs(ct.VendorDeviceGroupInfo); !reflect.DeepEqual(got, [][]string{
		{"0000:3b:00.0", "0000:3c:00.0"}, {"0000:5e:00.0", "0000:5f:00.0"}}) {
		t.Fatalf("device groups by GPU %v", got)
	}
	for _, g := range ct.VendorDeviceGroupInfo {
		if g.DeviceGroupName != DeviceGroupName(2, "grid_a100-40c") {
			t.Fatalf("device group %q", g.DeviceGroupName)
		}
	}
	// the whole cluster: each group name once, no physical GPU
	res, err := methods.QueryConfigTarget(e.ctx, e.c.Client, &types.QueryConfigTarget{This: *e.browser()})
	e.must(err)
	all := res.Returnval.VendorDeviceGroupInfo
	if len(all) != 1 || all[0].DeviceGroupName != DeviceGroupName(2, "grid_a100-40c") || len(all[0].ComponentDeviceInfo) != 2 ||
		!reflect.DeepEqual(groupGPUs(all), [][]string{{"", ""}}) {
		t.Fatalf("cluster-wide device groups %+v", all)
	}
	// take the first GPU so only the second pair is a free NVLink set
	other := e.vm("vm-b")
	e.must(e.addVGPUs(other, "grid_a100-40c"))
	e.must(e.wait(other.PowerOn(e.ctx)))
	vm := e.vm("vm-a")
	spec := vgpuSpec(types.VirtualDeviceConfigSpecOperationAdd, "grid_a100-40c", "grid_a100-40c")
	for i, c := range spec.DeviceChange {
		c.GetVirtualDeviceConfigSpec().Device.GetVirtualDevice().DeviceGroupInfo = &types.VirtualDeviceDeviceGroupInfo{
			GroupInstanceKey: -1, SequenceId: int32(i)}
	}
	spec.DeviceGroups = &types.VirtualMachineVirtualDeviceGroups{DeviceGroup: []types.BaseVirtualMachineVirtualDeviceGroupsDeviceGroup{
		&types.VirtualMachineVirtualDeviceGroupsVendorDeviceGroup{
			VirtualMachineVirtualDeviceGroupsDeviceGroup: types.VirtualMachineVirtualDeviceGroupsDeviceGroup{GroupInstanceKey: -1},
			DeviceGroupName: DeviceGroupName(2, "grid_a100-40c"),
		}}}
	e.must(e.wait(vm.Reconfigure(e.ctx, spec)))
	m := e.vmMO(vm, "config.deviceGroups")
	if m.Config.DeviceGroups == nil || len(m.Config.DeviceGroups.DeviceGroup) != 1 {
		t.Fatalf("deviceGroups not kept: %+v", m.Config.DeviceGroups)
	}
	e.must(e.wait(vm.PowerOn(e.ctx)))
	got := e.sim.Farm.VMGPUs(vm.Reference().Value)
	if len(got) != 2 || got[0].GPU != "0000:5e:00.0" || got[1].GPU != "0000:5f:00.0" {
		t.Fatalf("NVLink VM not on the free pair: %+v", got)
	}
}

func TestNVLinkVMNeedsLinkUp(t *testing.T) {
	spec := smallSpec()
	spec.Clusters[0].NvidiaOptions = "NVreg_NvLinkDisable=1"
	e := start(t, spec)
	if n := len(e.configTarget(host1).VendorDeviceGroupInfo); n != 0 {
		t.Fatalf("%d device groups with NVLink down", n)
	}
	vm := e.vm("vm-a")
	spec2 := vgpuSpec(types.VirtualDeviceConfigSpecOperationAdd, "grid_a100-40c", "grid_a100-40c")
	spec2.DeviceGroups = &types.VirtualMachineVirtualDeviceGroups{DeviceGroup: []types.BaseVirtualMachineVirtualDeviceGroupsDeviceGroup{
		&types.VirtualMachineVirtualDeviceGroupsVendorDeviceGroup{DeviceGroupName: DeviceGroupName(2, "grid_a100-40c")}}}
	e.must(e.wait(vm.Reconfigure(e.ctx, spec2)))
	f, msg := faultOf(e.wait(vm.PowerOn(e.ctx)))
	if _, ok := f.(*types.InsufficientGraphicsResourcesFault); !ok || msg != farm.InsufficientGraphics {
		t.Fatalf("NVLink VM admitted with NVLink down: %#v %q", f, msg)
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func typeName(f types.BaseMethodFault) string {
	name := ""
	switch f.(type) {
	case *types.TooManyDevices:
		name = "TooManyDevices"
	case *types.DeviceHotPlugNotSupported:
		name = "DeviceHotPlugNotSupported"
	case *types.InvalidDeviceSpec:
		name = "InvalidDeviceSpec"
	default:
		name = "other"
	}
	return name
}

func deviceList(e *env, vm *object.VirtualMachine) []types.BaseVirtualDevice {
	return e.vmMO(vm, "config.hardware.device").Config.Hardware.Device
}

func (e *env) folders() *object.DatacenterFolders {
	dc, err := e.finder.Datacenter(e.ctx, e.sim.Spec.Datacenter)
	e.must(err)
	f, err := dc.Folders(e.ctx)
	e.must(err)
	return f
}

func (e *env) pool() types.ManagedObjectReference {
	p, err := e.host(host1).ResourcePool(e.ctx)
	e.must(err)
	return p.Reference()
}

func TestDestroyAndGuestShutdownRelease(t *testing.T) {
	e := start(t, smallSpec())
	a, b := e.vm("vm-a"), e.vm("vm-b")
	e.must(e.addVGPUs(a, "grid_a100-40c"))
	e.must(e.addVGPUs(b, "grid_a100-40c"))
	e.must(e.wait(a.PowerOn(e.ctx)))
	e.must(e.wait(b.PowerOn(e.ctx)))
	f, _ := faultOf(e.wait(a.Destroy(e.ctx)))
	if _, ok := f.(*types.InvalidPowerState); !ok {
		t.Fatalf("destroy of a powered-on VM: %#v", f)
	}
	e.must(e.wait(a.PowerOff(e.ctx)))
	e.must(e.wait(a.Destroy(e.ctx)))
	e.must(b.ShutdownGuest(e.ctx))
	if n := len(e.sim.Farm.Assignments()); n != 0 {
		t.Fatalf("%d vGPUs still assigned", n)
	}
}

func TestCloneIntoClusterPicksAHostWhereTheVGPUsFit(t *testing.T) {
	spec := smallSpec()
	spec.Templates = append(spec.Templates, VMSpec{Name: "tmpl-4", Host: host1, MemoryMB: 4096, Locked: true,
		VGPUs: repeat("grid_a100-40c", 4)})
	e := start(t, spec)
	tmpl := e.vm("tmpl-4")
	cluster, err := e.finder.ClusterComputeResource(e.ctx, "GPU-Cluster")
	e.must(err)
	pool, err := cluster.ResourcePool(e.ctx)
	e.must(err)
	ref := pool.Reference()
	hosts := map[types.ManagedObjectReference]bool{}
	for _, name := range []string{"t-1", "t-2"} {
		task, err := tmpl.Clone(e.ctx, e.folders().VmFolder, name, types.VirtualMachineCloneSpec{
			Location: types.VirtualMachineRelocateSpec{Pool: &ref}, PowerOn: true})
		e.must(err)
		info, err := task.WaitForResult(e.ctx, nil)
		e.must(err)
		clone := object.NewVirtualMachine(e.c.Client, info.Result.(types.ManagedObjectReference))
		m := e.vmMO(clone, "runtime.host", "runtime.powerState")
		if m.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
			t.Fatalf("%s is %s", name, m.Runtime.PowerState)
		}
		hosts[*m.Runtime.Host] = true
	}
	if len(hosts) != 2 {
		t.Fatalf("two full-host clones share a host: %v", hosts)
	}
}

// groupGPUs lists the PCI ids (deviceInfo.label) of each device group's component devices.
func groupGPUs(groups []types.VirtualMachineVendorDeviceGroupInfo) [][]string {
	var out [][]string
	for _, g := range groups {
		var ids []string
		for _, c := range g.ComponentDeviceInfo {
			id := ""
			if d := c.Device.GetVirtualDevice().DeviceInfo; d != nil {
				id = d.GetDescription().Label
			}
			ids = append(ids, id)
		}
		out = append(out, ids)
	}
	return out
}

func TestReconfigureHonoursChangeVersion(t *testing.T) {
	e := start(t, smallSpec())
	vm := e.vm("vm-a")
	version := func() string { return e.vmMO(vm, "config.changeVersion").Config.ChangeVersion }
	first := version()
	if first == "" {
		t.Fatal("a new VM has no changeVersion")
	}
	add := vgpuSpec(types.VirtualDeviceConfigSpecOperationAdd, "grid_a100-10c")
	add.ChangeVersion = first
	e.must(e.wait(vm.Reconfigure(e.ctx, add)))
	second := version()
	if second == first {
		t.Fatal("a reconfigure did not change the changeVersion")
	}
	stale := vgpuSpec(types.VirtualDeviceConfigSpecOperationAdd, "grid_a100-20c")
	stale.ChangeVersion = first // what a second writer read before the first reconfigure
	f, msg := faultOf(e.wait(vm.Reconfigure(e.ctx, stale)))
	if _, ok := f.(*types.ConcurrentAccess); !ok {
		t.Fatalf("stale changeVersion: %#v", f)
	}
	if !contains(msg, "changed by another operation") {
		t.Fatalf("message %q", msg)
	}
	if got := vgpuProfiles(deviceList(e, vm)); !reflect.DeepEqual(got, []string{"grid_a100-10c"}) || version() != second {
		t.Fatalf("a refused reconfigure changed the VM: %v", got)
	}
	e.must(e.wait(vm.PowerOn(e.ctx)))
	e.must(e.wait(vm.PowerOff(e.ctx)))
	if version() != second {
		t.Fatal("power operations changed the changeVersion")
	}
	unconditional := vgpuSpec(types.VirtualDeviceConfigSpecOperationAdd, "grid_a100-10c")
	e.must(e.wait(vm.Reconfigure(e.ctx, unconditional))) // no changeVersion: applied whatever the version
}

// Clones of one template started together on one session, with the collector read meanwhile (as vgpuctl
// applies and observes): each clone has the template's firmware as soon as its task succeeds.
func TestParallelClonesHaveTheirSettingsWhenTheTaskSucceeds(t *testing.T) {
	e := start(t, smallSpec())
	base := e.vm("ubuntu-22.04-ml")
	folders := e.folders()
	pool := e.pool()
	stop := make(chan struct{})
	reads := make(chan error, 1)
	go func() { // reads every VM's firmware while the clones run
		defer close(reads)
		m := view.NewManager(e.c.Client)
		for {
			select {
			case <-stop:
				return
			default:
			}
			v, err := m.CreateContainerView(e.ctx, e.c.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
			if err == nil {
				var vms []mo.VirtualMachine
				err = v.Retrieve(e.ctx, []string{"VirtualMachine"}, []string{"config.firmware"}, &vms)
				_ = v.Destroy(e.ctx)
			}
			if err != nil {
				reads <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("clone-%d", i)
			task, err := base.Clone(e.ctx, folders.VmFolder, name, types.VirtualMachineCloneSpec{
				Location: types.VirtualMachineRelocateSpec{Pool: &pool}})
			if err != nil {
				errs <- err
				return
			}
			info, err := task.WaitForResult(e.ctx, nil)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				return
			}
			var m mo.VirtualMachine
			clone := object.NewVirtualMachine(e.c.Client, info.Result.(types.ManagedObjectReference))
			if err := clone.Properties(e.ctx, clone.Reference(), []string{"config.firmware"}, &m); err != nil {
				errs <- err
			} else if m.Config == nil || m.Config.Firmware != "efi" {
				errs <- fmt.Errorf("%s: firmware read right after its clone task: %+v", name, m.Config)
			}
		}()
	}
	wg.Wait()
	close(stop)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := <-reads; err != nil {
		t.Errorf("collector read during the clones: %v", err)
	}
}
