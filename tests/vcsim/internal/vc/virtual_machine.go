package vc

import (
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// VirtualMachine: the methods gpusim answers itself. The vGPU rules they apply are in vgpu_rules.go, the
// migration checks in migrate.go, the NIC rules in network.go.

// gpuVM wraps a simulator VM for one call, adding the vGPU rules.
type gpuVM struct {
	*simulator.VirtualMachine

	sim *Sim
}

func (vm *gpuVM) delay(method string) {
	if d := vm.sim.faults.delay(vm.Self.Value, method); d > 0 {
		sleep(d)
	}
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
		return nil, vm.followup(ctx, "ReconfigVM_Task")
	}))
	return &methods.ReconfigVM_TaskBody{Res: &types.ReconfigVM_TaskResponse{Returnval: task.Run(ctx)}}
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
			return nil, fault.InvalidPowerState(types.VirtualMachinePowerStatePoweredOff, vm.Runtime.PowerState)
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
		return nil, vm.followup(ctx, method)
	}))
	return task.Run(ctx)
}

// followup makes the change armed for the VM's method (control.go, armFollowup) once the task's own work is
// done, before it reports.
func (vm *gpuVM) followup(ctx *simulator.Context, method string) types.BaseMethodFault {
	return vm.changeAsAnother(ctx, vm.sim.faults.followup(vm.Self.Value, method))
}

// changeAsAnother sets the VM's vCPUs as a followup `a` says (nothing when nil), as another client's
// reconfigure would.
func (vm *gpuVM) changeAsAnother(ctx *simulator.Context, a *armed) types.BaseMethodFault {
	if a == nil {
		return nil
	}
	other := &types.ReconfigVM_Task{This: vm.Self, Spec: types.VirtualMachineConfigSpec{NumCPUs: a.CPUs}}
	_, f := vm.sim.waitBody(vm.VirtualMachine.ReconfigVMTask(ctx, other))
	return f
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
			return nil, fault.InvalidPowerState(types.VirtualMachinePowerStatePoweredOff, vm.Runtime.PowerState)
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
			return &methods.CloneVM_TaskBody{Fault_: fault.InvalidArgument("spec.location.host", "host "+ref.Value+" not found")}
		}
	}
	if ref := req.Spec.Location.Pool; ref != nil && ctx.Map.Get(*ref) == nil {
		return &methods.CloneVM_TaskBody{Fault_: fault.InvalidArgument("spec.location.pool", "resource pool "+ref.Value+" not found")}
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
			return nil, fault.SystemError("gpusim: the clone " + ref.Value + " was not found after CloneVM_Task")
		}
		if f := s.copySettings(ctx, vm.VirtualMachine, clone, req.Spec.Config); f != nil {
			return nil, f
		}
		if f := s.pendCustomization(clone, req.Spec.Customization); f != nil {
			return nil, f
		}
		if f := (&gpuVM{VirtualMachine: clone, sim: s}).changeAsAnother(ctx, s.faults.followup(vm.Self.Value, "CloneVM_Task")); f != nil {
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

// RelocateVMTask moves a VM to another host. A running VM's vGPUs must be admitted on the destination
// (its GPUs offer the profiles and have room) and vGPU hot migration must be enabled in vCenter; the
// vGPUs leave the source only once the destination took them, and a refused move leaves the VM as it was.
func (vm *gpuVM) RelocateVMTask(ctx *simulator.Context, req *types.RelocateVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, vm, "RelocateVMTask", req); ok {
		return res
	}
	s := vm.sim
	task := simulator.CreateTask(vm, "RelocateVMTask", safely(func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		vm.delay("RelocateVM_Task")
		var source *types.ManagedObjectReference
		if vm.Runtime.Host != nil {
			ref := *vm.Runtime.Host
			source = &ref
		}
		if f := s.staysOnItsHost(vm.VirtualMachine, req.Spec.Host); f != nil {
			return nil, f
		}
		moved, f := s.moveVGPUs(ctx, vm.VirtualMachine, req.Spec.Host)
		if f != nil {
			return nil, f
		}
		if _, f := s.waitBody(vm.VirtualMachine.RelocateVMTask(ctx, req)); f != nil {
			if moved {
				s.moveBack(vm.VirtualMachine)
			}
			return nil, f
		}
		s.moveHostVMList(ctx, vm.Self, source, req.Spec.Host)
		return nil, nil
	}))
	return &methods.RelocateVM_TaskBody{Res: &types.RelocateVM_TaskResponse{Returnval: task.Run(ctx)}}
}

// MigrateVMTask is RelocateVMTask with the older call's arguments (host and pool).
func (vm *gpuVM) MigrateVMTask(ctx *simulator.Context, req *types.MigrateVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, vm, "MigrateVMTask", req); ok {
		return res
	}
	spec := types.VirtualMachineRelocateSpec{Host: req.Host, Pool: req.Pool}
	body := vm.RelocateVMTask(ctx, &types.RelocateVM_Task{This: req.This, Spec: spec}).(*methods.RelocateVM_TaskBody)
	if body.Res == nil {
		return &methods.MigrateVM_TaskBody{Fault_: body.Fault_}
	}
	return &methods.MigrateVM_TaskBody{Res: &types.MigrateVM_TaskResponse{Returnval: body.Res.Returnval}}
}

// vmMethods are the VirtualMachine methods gpuVM answers (route, hooks.go); vcsim answers the others.
var vmMethods = map[string]bool{
	"PowerOnVM_Task": true, "PowerOffVM_Task": true, "SuspendVM_Task": true, "ReconfigVM_Task": true,
	"CloneVM_Task": true, "ShutdownGuest": true, "Destroy_Task": true, "UnregisterVM": true,
	"RelocateVM_Task": true, "MigrateVM_Task": true,
}
