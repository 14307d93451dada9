package vc

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

// gpuVM wraps a simulator VM for one call, adding the vGPU rules.
type gpuVM struct {
	*simulator.VirtualMachine

	sim *Sim
}

// vgpuProfile returns the profile of a vGPU device, or ok=false for other devices.
func vgpuProfile(d types.BaseVirtualDevice) (string, bool) {
	p, ok := d.(*types.VirtualPCIPassthrough)
	if !ok {
		return "", false
	}
	b, ok := p.Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo)
	if !ok {
		return "", false
	}
	return b.Vgpu, true
}

// vgpuProfiles lists the vGPU profiles in a device list, in device order.
func vgpuProfiles(devices []types.BaseVirtualDevice) []string {
	var out []string
	for _, d := range devices {
		if p, ok := vgpuProfile(d); ok {
			out = append(out, p)
		}
	}
	return out
}

// wantsNVLink reports whether a VM's vGPUs form an NVLink device group.
func wantsNVLink(cfg *types.VirtualMachineConfigInfo) bool {
	if cfg == nil {
		return false
	}
	if cfg.DeviceGroups != nil && len(cfg.DeviceGroups.DeviceGroup) > 0 {
		return true
	}
	for _, d := range cfg.Hardware.Device {
		if _, ok := vgpuProfile(d); ok && d.GetVirtualDevice().DeviceGroupInfo != nil {
			return true
		}
	}
	return false
}

// vgpuPlan is the vGPU list a device change produces.
type vgpuPlan struct {
	profiles []string
	changed  bool
	index    int // device change index of the first vGPU change
}

func planVGPUs(current []types.BaseVirtualDevice, changes []types.BaseVirtualDeviceConfigSpec) vgpuPlan {
	byKey := map[int32]string{}
	var order []int32
	for _, d := range current {
		if p, ok := vgpuProfile(d); ok {
			k := d.GetVirtualDevice().Key
			byKey[k] = p
			order = append(order, k)
		}
	}
	plan := vgpuPlan{index: -1}
	for i, c := range changes {
		spec := c.GetVirtualDeviceConfigSpec()
		if spec.Device == nil {
			continue
		}
		p, isVGPU := vgpuProfile(spec.Device)
		key := spec.Device.GetVirtualDevice().Key
		_, wasVGPU := byKey[key]
		if !isVGPU && !(wasVGPU && spec.Operation == types.VirtualDeviceConfigSpecOperationRemove) {
			continue
		}
		if plan.index < 0 {
			plan.index = i
		}
		plan.changed = true
		switch spec.Operation {
		case types.VirtualDeviceConfigSpecOperationAdd:
			byKey[key] = p
			order = append(order, key)
		case types.VirtualDeviceConfigSpecOperationRemove:
			delete(byKey, key)
		case types.VirtualDeviceConfigSpecOperationEdit:
			if wasVGPU {
				byKey[key] = p
			}
		}
	}
	for _, k := range order {
		if p, ok := byKey[k]; ok {
			plan.profiles = append(plan.profiles, p)
			delete(byKey, k)
		}
	}
	return plan
}

// checkVGPUs applies the reconfigure rules: power state, per-VM limit, profile offered by the host.
func (s *Sim) checkVGPUs(host string, powerState types.VirtualMachinePowerState, plan vgpuPlan) types.BaseMethodFault {
	if !plan.changed {
		return nil
	}
	if powerState != types.VirtualMachinePowerStatePoweredOff {
		f := &types.DeviceHotPlugNotSupported{InvalidDeviceSpec: types.InvalidDeviceSpec{DeviceIndex: int32(plan.index)}}
		return s.faultWith(f, "vGPU devices can only be added or removed while the virtual machine is powered off.")
	}
	if limit := MaxVGPUsPerVM(s.Spec.APIVersion); len(plan.profiles) > limit {
		return s.faultWith(&types.TooManyDevices{},
			fmt.Sprintf("The virtual machine would have %d vGPU devices; vSphere %s supports at most %d per virtual machine.",
				len(plan.profiles), versionOf(s.Spec.APIVersion), limit))
	}
	var offered map[string]bool
	if host != "" {
		info, err := s.Farm.Host(host)
		if err == nil {
			offered = map[string]bool{}
			for _, g := range info.GPUs {
				for _, p := range g.Profiles {
					offered[p] = true
				}
			}
		}
	}
	var first farm.Profile
	for i, name := range plan.profiles {
		invalid := func(msg string) types.BaseMethodFault {
			f := &types.InvalidDeviceSpec{DeviceIndex: int32(plan.index)}
			return s.faultWith(f, msg)
		}
		if name == "" {
			return invalid("The vGPU profile of a PCI passthrough device is empty.")
		}
		p, err := s.Farm.Catalog().Profile(name)
		if offered != nil && !offered[name] {
			return invalid(fmt.Sprintf("The vGPU profile '%s' is not supported by any GPU of host %s in its current mode.", name, host))
		}
		if err != nil {
			if offered != nil {
				continue // the host offers a profile the catalogue does not explain: the host is the authority
			}
			return invalid(err.Error())
		}
		if i == 0 || first.Name == "" {
			first = p
		} else if p.Board != first.Board || p.Series != first.Series {
			return invalid(fmt.Sprintf("vGPU profiles of one virtual machine must share board and series: %s and %s.", first.Name, name))
		}
	}
	return nil
}

// waitBody waits for the task a simulator method body returned and returns its fault.
func (s *Sim) waitBody(body soap.HasFault) (types.ManagedObjectReference, types.BaseMethodFault) {
	var none types.ManagedObjectReference
	if f := body.Fault(); f != nil {
		if vf, ok := f.VimFault().(types.BaseMethodFault); ok {
			return none, vf
		}
		return none, &types.SystemError{Reason: f.String}
	}
	res := reflect.ValueOf(body).Elem().FieldByName("Res")
	if !res.IsValid() || res.IsNil() {
		return none, nil
	}
	rv := res.Elem().FieldByName("Returnval")
	ref, ok := rv.Interface().(types.ManagedObjectReference)
	if !ok {
		return none, nil
	}
	task, ok := s.ctx.Map.Get(ref).(*simulator.Task)
	if !ok {
		return none, nil
	}
	task.Wait()
	if task.Info.Error != nil {
		return none, task.Info.Error.Fault
	}
	if r, ok := task.Info.Result.(types.ManagedObjectReference); ok {
		return r, nil
	}
	return none, nil
}

func (vm *gpuVM) delay(method string) {
	if d := vm.sim.faults.delay(vm.Self.Value, method); d > 0 {
		sleep(d)
	}
}

// changeVersionFault refuses a reconfigure whose spec names a changeVersion other than the VM's, as vCenter does:
// "If specified, the changes are only applied if the current changeVersion matches the specified
// changeVersion" (vSphere Web Services API, VirtualMachineConfigSpec.changeVersion), with the fault
// ReconfigVM_Task lists for an operation that "fails because another operation has modified the
// datastructure" (vim.fault.ConcurrentAccess). vcsim's configure gives every successful reconfigure a new
// changeVersion.
func (s *Sim) changeVersionFault(vm *simulator.VirtualMachine, want string) types.BaseMethodFault {
	if want == "" || vm.Config == nil || want == vm.Config.ChangeVersion {
		return nil
	}
	return s.faultWith(&types.ConcurrentAccess{}, fmt.Sprintf(
		"The virtual machine %s was changed by another operation: its changeVersion is %s, the request expected %s.",
		vm.Name, vm.Config.ChangeVersion, want))
}

// ReconfigVMTask enforces the vGPU rules and the spec's changeVersion, and records deviceGroups.
func (vm *gpuVM) ReconfigVMTask(ctx *simulator.Context, req *types.ReconfigVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, vm, "ReconfigVMTask", req); ok {
		return res
	}
	s := vm.sim
	task := simulator.CreateTask(vm, "ReconfigVMTask", safely(func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		vm.delay("ReconfigVM_Task")
		if f := s.changeVersionFault(vm.VirtualMachine, req.Spec.ChangeVersion); f != nil {
			return nil, f
		}
		plan := planVGPUs(vm.Config.Hardware.Device, req.Spec.DeviceChange)
		groups := req.Spec.DeviceGroups != nil
		if groups && !plan.changed && vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
			plan.changed, plan.profiles, plan.index = true, vgpuProfiles(vm.Config.Hardware.Device), 0
		}
		if !vm.Config.Template {
			if f := s.checkVGPUs(s.hostOf(vm.Runtime.Host), vm.Runtime.PowerState, plan); f != nil {
				return nil, f
			}
		}
		if f := s.checkAdapters(vm.Runtime.PowerState, req.Spec.DeviceChange); f != nil {
			return nil, f
		}
		spec := req.Spec
		spec.DeviceGroups, spec.ChangeVersion = nil, ""
		_, f := s.waitBody(vm.VirtualMachine.ReconfigVMTask(ctx, &types.ReconfigVM_Task{This: req.This, Spec: spec}))
		if f != nil {
			return nil, f
		}
		if groups {
			dg := *req.Spec.DeviceGroups
			ctx.Map.Update(ctx, vm.VirtualMachine, []types.PropertyChange{{Name: "config.deviceGroups", Val: &dg}})
		}
		return nil, nil
	}))
	return &methods.ReconfigVM_TaskBody{Res: &types.ReconfigVM_TaskResponse{Returnval: task.Run(ctx)}}
}

// memoryFault checks that a vGPU VM reserves all of its memory.
func (s *Sim) memoryFault(cfg *types.VirtualMachineConfigInfo) types.BaseMethodFault {
	if cfg.MemoryReservationLockedToMax != nil && *cfg.MemoryReservationLockedToMax {
		return nil
	}
	mem := int64(cfg.Hardware.MemoryMB)
	if a := cfg.MemoryAllocation; a != nil && a.Reservation != nil && *a.Reservation >= mem {
		return nil
	}
	msg := fmt.Sprintf("Invalid memory setting: memory reservation (sched.mem.min) should be equal to memsize(%d).", mem)
	return s.faultWith(&types.GenericVmConfigFault{Reason: msg}, msg)
}

// admit places a VM's vGPUs at power-on, then takes its SR-IOV VFs and passthrough NICs (network.go); all or
// nothing.
func (s *Sim) admit(vm *simulator.VirtualMachine) types.BaseMethodFault {
	if f := s.admitVGPUs(vm); f != nil {
		return f
	}
	if f := s.admitNICs(vm); f != nil {
		s.Farm.Release(vm.Self.Value)
		return f
	}
	return nil
}

// admitVGPUs places a VM's vGPUs at power-on.
func (s *Sim) admitVGPUs(vm *simulator.VirtualMachine) types.BaseMethodFault {
	profiles := vgpuProfiles(vm.Config.Hardware.Device)
	if len(profiles) == 0 {
		return nil
	}
	if f := s.memoryFault(vm.Config); f != nil {
		return f
	}
	host := s.hostOf(vm.Runtime.Host)
	_, err := s.Farm.Admit(host, vm.Self.Value, vm.Name, farm.Request{Profiles: profiles, NVLink: wantsNVLink(vm.Config)})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, farm.ErrInsufficient):
		return s.faultWith(&types.InsufficientGraphicsResourcesFault{}, farm.InsufficientGraphics)
	case errors.Is(err, farm.ErrGuestDriver):
		return s.guestDriverFault(err) // software.go
	default:
		return s.faultWith(&types.InvalidState{}, err.Error())
	}
}

// PowerOnVMTask admits the VM's vGPUs (all or nothing) before powering on.
func (vm *gpuVM) PowerOnVMTask(ctx *simulator.Context, req *types.PowerOnVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, vm, "PowerOnVMTask", req); ok {
		return res
	}
	if vm.Config.Template {
		return vm.VirtualMachine.PowerOnVMTask(ctx, req)
	}
	s := vm.sim
	task := simulator.CreateTask(vm, "PowerOnVMTask", safely(func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		vm.delay("PowerOnVM_Task")
		if vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn {
			return nil, &types.InvalidPowerState{RequestedState: types.VirtualMachinePowerStatePoweredOff,
				ExistingState: vm.Runtime.PowerState}
		}
		if f := s.admit(vm.VirtualMachine); f != nil {
			return nil, f
		}
		if _, f := s.waitBody(vm.VirtualMachine.PowerOnVMTask(ctx, req)); f != nil {
			s.Farm.Release(vm.Self.Value)
			return nil, f
		}
		s.firstBoot(ctx, vm.VirtualMachine)
		return nil, nil
	}))
	return &methods.PowerOnVM_TaskBody{Res: &types.PowerOnVM_TaskResponse{Returnval: task.Run(ctx)}}
}

// PowerOffVMTask powers off and releases the VM's vGPUs.
func (vm *gpuVM) PowerOffVMTask(ctx *simulator.Context, req *types.PowerOffVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, vm, "PowerOffVMTask", req); ok {
		return res
	}
	task := vm.releasingTask(ctx, "PowerOffVMTask", "PowerOffVM_Task", func() soap.HasFault {
		return vm.VirtualMachine.PowerOffVMTask(ctx, req)
	})
	return &methods.PowerOffVM_TaskBody{Res: &types.PowerOffVM_TaskResponse{Returnval: task}}
}

// SuspendVMTask suspends and releases the VM's vGPUs (they are admitted again at power-on).
func (vm *gpuVM) SuspendVMTask(ctx *simulator.Context, req *types.SuspendVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, vm, "SuspendVMTask", req); ok {
		return res
	}
	task := vm.releasingTask(ctx, "SuspendVMTask", "SuspendVM_Task", func() soap.HasFault {
		return vm.VirtualMachine.SuspendVMTask(ctx, req)
	})
	return &methods.SuspendVM_TaskBody{Res: &types.SuspendVM_TaskResponse{Returnval: task}}
}

// releasingTask runs vcsim's own task body (an armed delay first) and releases the VM's vGPUs when it
// succeeds.
func (vm *gpuVM) releasingTask(ctx *simulator.Context, name, method string, body func() soap.HasFault) types.ManagedObjectReference {
	task := simulator.CreateTask(vm, name, safely(func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		vm.delay(method)
		if _, f := vm.sim.waitBody(body()); f != nil {
			return nil, f
		}
		vm.sim.Farm.Release(vm.Self.Value)
		return nil, nil
	}))
	return task.Run(ctx)
}

// ResetVMTask is vcsim's; gpuVM answers it for a failer's call (calls.go).
func (vm *gpuVM) ResetVMTask(ctx *simulator.Context, req *types.ResetVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, vm, "ResetVMTask", req); ok {
		return res
	}
	return vm.VirtualMachine.ResetVMTask(ctx, req)
}

// ShutdownGuest releases the vGPUs of a VM whose guest shuts down.
func (vm *gpuVM) ShutdownGuest(ctx *simulator.Context, req *types.ShutdownGuest) soap.HasFault {
	if res, ok := redirected(ctx, vm, "ShutdownGuest", req); ok {
		return res
	}
	return vm.releaseIfOK(vm.VirtualMachine.ShutdownGuest(ctx, req))
}

// releaseIfOK releases the VM's vGPUs when vcsim's own method succeeded.
func (vm *gpuVM) releaseIfOK(body soap.HasFault) soap.HasFault {
	if body.Fault() == nil {
		vm.sim.Farm.Release(vm.Self.Value)
	}
	return body
}

// DestroyTask refuses powered-on VMs, as vSphere does, and releases vGPUs.
func (vm *gpuVM) DestroyTask(ctx *simulator.Context, req *types.Destroy_Task) soap.HasFault {
	if res, ok := redirected(ctx, vm, "DestroyTask", req); ok {
		return res
	}
	if vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn {
		task := simulator.CreateTask(vm, "DestroyTask", func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
			return nil, &types.InvalidPowerState{RequestedState: types.VirtualMachinePowerStatePoweredOff,
				ExistingState: vm.Runtime.PowerState}
		})
		return &methods.Destroy_TaskBody{Res: &types.Destroy_TaskResponse{Returnval: task.Run(ctx)}}
	}
	vm.sim.Farm.Release(vm.Self.Value)
	return vm.VirtualMachine.DestroyTask(ctx, req)
}

// UnregisterVM releases vGPUs.
func (vm *gpuVM) UnregisterVM(ctx *simulator.Context, req *types.UnregisterVM) soap.HasFault {
	if res, ok := redirected(ctx, vm, "UnregisterVM", req); ok {
		return res
	}
	return vm.releaseIfOK(vm.VirtualMachine.UnregisterVM(ctx, req))
}

// CloneVMTask clones (also templates with vGPUs), keeping firmware, memory reservation, extraConfig
// and deviceGroups, checking the vGPU rules on the target host, and admitting at power-on.
func (vm *gpuVM) CloneVMTask(ctx *simulator.Context, req *types.CloneVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, vm, "CloneVMTask", req); ok {
		return res
	}
	s := vm.sim
	if ref := req.Spec.Location.Host; ref != nil {
		if _, ok := ctx.Map.Get(*ref).(*simulator.HostSystem); !ok {
			return &methods.CloneVM_TaskBody{Fault_: simulator.Fault("host "+ref.Value+" not found",
				&types.InvalidArgument{InvalidProperty: "spec.location.host"})}
		}
	}
	if ref := req.Spec.Location.Pool; ref != nil && ctx.Map.Get(*ref) == nil {
		return &methods.CloneVM_TaskBody{Fault_: simulator.Fault("resource pool "+ref.Value+" not found",
			&types.InvalidArgument{InvalidProperty: "spec.location.pool"})}
	}
	task := simulator.CreateTask(vm, "CloneVMTask", safely(func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		vm.delay("CloneVM_Task")
		var changes []types.BaseVirtualDeviceConfigSpec
		if req.Spec.Config != nil {
			changes = req.Spec.Config.DeviceChange
		}
		plan := planVGPUs(vm.Config.Hardware.Device, changes)
		plan.changed = len(plan.profiles) > 0
		inner := *req
		inner.Spec.PowerOn = false
		if inner.Spec.Location.Host == nil && inner.Spec.Location.Pool != nil {
			nvlink := wantsNVLink(vm.Config) || (req.Spec.Config != nil && req.Spec.Config.DeviceGroups != nil)
			inner.Spec.Location.Host = s.pickHost(ctx, *inner.Spec.Location.Pool, farm.Request{Profiles: plan.profiles, NVLink: nvlink})
		}
		host := s.hostOf(vm.Runtime.Host)
		if inner.Spec.Location.Host != nil {
			host = s.hostOf(inner.Spec.Location.Host)
		}
		if f := s.checkVGPUs(host, types.VirtualMachinePowerStatePoweredOff, plan); f != nil {
			return nil, f
		}
		if f := s.checkAdapters(types.VirtualMachinePowerStatePoweredOff, changes); f != nil {
			return nil, f
		}
		inner.Spec.Customization = nil // gpusim customizes at power-on (customize.go)
		ref, f := s.waitBody(vm.VirtualMachine.CloneVMTask(ctx, &inner))
		if f != nil {
			return nil, f
		}
		clone, ok := s.vmObject(ref)
		if !ok { // never skip the settings silently: a clone without them is not what vCenter makes
			return nil, &types.SystemError{Reason: "gpusim: the clone " + ref.Value + " was not found after CloneVM_Task"}
		}
		if f := s.copySettings(ctx, vm.VirtualMachine, clone, req.Spec.Config); f != nil {
			return nil, f
		}
		if f := s.pendCustomization(clone, req.Spec.Customization); f != nil {
			return nil, f
		}
		if req.Spec.PowerOn {
			cv := &gpuVM{VirtualMachine: clone, sim: s}
			if _, f := s.waitBody(cv.PowerOnVMTask(ctx, &types.PowerOnVM_Task{This: clone.Self})); f != nil {
				return nil, f
			}
		}
		return ref, nil
	}))
	return &methods.CloneVM_TaskBody{Res: &types.CloneVM_TaskResponse{Returnval: task.Run(ctx)}}
}

// copySettings carries the settings vcsim's clone drops from the source and the clone spec.
func (s *Sim) copySettings(ctx *simulator.Context, src, clone *simulator.VirtualMachine, cfg *types.VirtualMachineConfigSpec) types.BaseMethodFault {
	spec := types.VirtualMachineConfigSpec{
		Firmware:                     src.Config.Firmware,
		MemoryReservationLockedToMax: src.Config.MemoryReservationLockedToMax,
		MemoryAllocation:             src.Config.MemoryAllocation,
	}
	for _, o := range src.Config.ExtraConfig {
		if v := o.GetOptionValue(); !strings.HasPrefix(v.Key, "govcsim") && !strings.HasPrefix(v.Key, "RUN.") {
			spec.ExtraConfig = append(spec.ExtraConfig, &types.OptionValue{Key: v.Key, Value: v.Value})
		}
	}
	groups := src.Config.DeviceGroups
	if cfg != nil {
		if cfg.Firmware != "" {
			spec.Firmware = cfg.Firmware
		}
		if cfg.MemoryReservationLockedToMax != nil {
			spec.MemoryReservationLockedToMax = cfg.MemoryReservationLockedToMax
		}
		if cfg.MemoryAllocation != nil {
			spec.MemoryAllocation = cfg.MemoryAllocation
		}
		spec.ExtraConfig = append(spec.ExtraConfig, cfg.ExtraConfig...)
		if cfg.DeviceGroups != nil {
			groups = cfg.DeviceGroups
		}
	}
	if _, f := s.waitBody(clone.ReconfigVMTask(ctx, &types.ReconfigVM_Task{This: clone.Self, Spec: spec})); f != nil {
		return f
	}
	if groups != nil {
		g := *groups
		ctx.Map.Update(ctx, clone, []types.PropertyChange{{Name: "config.deviceGroups", Val: &g}})
	}
	return nil
}

// gpuFolder checks vGPUs in CreateVM specs.
type gpuFolder struct {
	*simulator.Folder

	sim *Sim
}

// DestroyTask is vcsim's; gpuFolder answers it for a failer's call (calls.go).
func (f *gpuFolder) DestroyTask(ctx *simulator.Context, req *types.Destroy_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "DestroyTask", req); ok {
		return res
	}
	return f.Folder.DestroyTask(ctx, req)
}

// CreateVMTask applies the vGPU rules to the new VM's devices.
func (f *gpuFolder) CreateVMTask(ctx *simulator.Context, req *types.CreateVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "CreateVMTask", req); ok {
		return res
	}
	plan := planVGPUs(nil, req.Config.DeviceChange)
	plan.changed = len(plan.profiles) > 0
	host := f.sim.hostOf(req.Host)
	fault := f.sim.checkVGPUs(host, types.VirtualMachinePowerStatePoweredOff, plan)
	if fault == nil {
		fault = f.sim.checkAdapters(types.VirtualMachinePowerStatePoweredOff, req.Config.DeviceChange)
	}
	if fault != nil {
		task := simulator.CreateTask(f, "CreateVMTask", func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
			return nil, fault
		})
		return &methods.CreateVM_TaskBody{Res: &types.CreateVM_TaskResponse{Returnval: task.Run(ctx)}}
	}
	return f.Folder.CreateVMTask(ctx, req)
}
