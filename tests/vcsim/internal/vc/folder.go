package vc

import (
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// Folder: CreateVM_Task with the vGPU rules (vgpu_rules.go).

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
