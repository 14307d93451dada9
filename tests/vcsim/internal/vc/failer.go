package vc

import (
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/fault"
)

// failTask starts a task on obj that fails with fault.
func failTask(ctx *simulator.Context, obj mo.Reference, name string, fault types.BaseMethodFault) types.ManagedObjectReference {
	return simulator.CreateTask(obj, name, func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		return nil, fault
	}).Run(ctx)
}

// failerFor is the failer that answers method on obj with fault as a failed task; none when no failer of obj's
// type answers that method (the call then gets the fault itself).
func (s *Sim) failerFor(obj mo.Reference, method string, fault types.BaseMethodFault) (mo.Reference, bool) {
	switch o := obj.(type) {
	case *simulator.VirtualMachine:
		return &vmFailer{gpuVM: &gpuVM{VirtualMachine: o, sim: s}, fault: fault}, vmFailerMethods[method]
	case *simulator.HostSystem:
		return &hostFailer{HostSystem: o, fault: fault}, hostFailerMethods[method]
	case *simulator.Folder:
		return &folderFailer{Folder: o, fault: fault}, folderFailerMethods[method]
	}
	return nil, false
}

// vmFailer fails the next task method called on a VM with an armed fault; gpuVM answers its other methods
// (a call that reaches it while the session's slot holds another call's wrapper: calls.go).
type vmFailer struct {
	*gpuVM

	fault types.BaseMethodFault
}

func (f *vmFailer) fail(ctx *simulator.Context, name string) types.ManagedObjectReference {
	return failTask(ctx, f, name, f.fault)
}

func (f *vmFailer) PowerOnVMTask(ctx *simulator.Context, req *types.PowerOnVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "PowerOnVMTask", req); ok {
		return res
	}
	return &methods.PowerOnVM_TaskBody{Res: &types.PowerOnVM_TaskResponse{Returnval: f.fail(ctx, "PowerOnVMTask")}}
}

func (f *vmFailer) PowerOffVMTask(ctx *simulator.Context, req *types.PowerOffVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "PowerOffVMTask", req); ok {
		return res
	}
	return &methods.PowerOffVM_TaskBody{Res: &types.PowerOffVM_TaskResponse{Returnval: f.fail(ctx, "PowerOffVMTask")}}
}

func (f *vmFailer) SuspendVMTask(ctx *simulator.Context, req *types.SuspendVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "SuspendVMTask", req); ok {
		return res
	}
	return &methods.SuspendVM_TaskBody{Res: &types.SuspendVM_TaskResponse{Returnval: f.fail(ctx, "SuspendVMTask")}}
}

func (f *vmFailer) ResetVMTask(ctx *simulator.Context, req *types.ResetVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "ResetVMTask", req); ok {
		return res
	}
	return &methods.ResetVM_TaskBody{Res: &types.ResetVM_TaskResponse{Returnval: f.fail(ctx, "ResetVMTask")}}
}

func (f *vmFailer) ReconfigVMTask(ctx *simulator.Context, req *types.ReconfigVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "ReconfigVMTask", req); ok {
		return res
	}
	return &methods.ReconfigVM_TaskBody{Res: &types.ReconfigVM_TaskResponse{Returnval: f.fail(ctx, "ReconfigVMTask")}}
}

func (f *vmFailer) CloneVMTask(ctx *simulator.Context, req *types.CloneVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "CloneVMTask", req); ok {
		return res
	}
	return &methods.CloneVM_TaskBody{Res: &types.CloneVM_TaskResponse{Returnval: f.fail(ctx, "CloneVMTask")}}
}

func (f *vmFailer) DestroyTask(ctx *simulator.Context, req *types.Destroy_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "DestroyTask", req); ok {
		return res
	}
	return &methods.Destroy_TaskBody{Res: &types.Destroy_TaskResponse{Returnval: f.fail(ctx, "DestroyTask")}}
}

func (f *vmFailer) RelocateVMTask(ctx *simulator.Context, req *types.RelocateVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "RelocateVMTask", req); ok {
		return res
	}
	return &methods.RelocateVM_TaskBody{Res: &types.RelocateVM_TaskResponse{Returnval: f.fail(ctx, "RelocateVMTask")}}
}

// hostFailer fails the next task method called on a host with an armed fault.
type hostFailer struct {
	*simulator.HostSystem

	fault types.BaseMethodFault
}

func (f *hostFailer) fail(ctx *simulator.Context, name string) types.ManagedObjectReference {
	return failTask(ctx, f, name, f.fault)
}

func (f *hostFailer) EnterMaintenanceModeTask(ctx *simulator.Context, req *types.EnterMaintenanceMode_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "EnterMaintenanceModeTask", req); ok {
		return res
	}
	return &methods.EnterMaintenanceMode_TaskBody{Res: &types.EnterMaintenanceMode_TaskResponse{Returnval: f.fail(ctx, "EnterMaintenanceModeTask")}}
}

func (f *hostFailer) ExitMaintenanceModeTask(ctx *simulator.Context, req *types.ExitMaintenanceMode_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "ExitMaintenanceModeTask", req); ok {
		return res
	}
	return &methods.ExitMaintenanceMode_TaskBody{Res: &types.ExitMaintenanceMode_TaskResponse{Returnval: f.fail(ctx, "ExitMaintenanceModeTask")}}
}

func (f *hostFailer) RebootHostTask(ctx *simulator.Context, req *types.RebootHost_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "RebootHostTask", req); ok {
		return res
	}
	return &methods.RebootHost_TaskBody{Res: &types.RebootHost_TaskResponse{Returnval: f.fail(ctx, "RebootHostTask")}}
}

// folderFailer fails the next CreateVM_Task or Destroy_Task of a folder with an armed fault.
type folderFailer struct {
	*simulator.Folder

	fault types.BaseMethodFault
}

func (f *folderFailer) CreateVMTask(ctx *simulator.Context, req *types.CreateVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "CreateVMTask", req); ok {
		return res
	}
	return &methods.CreateVM_TaskBody{Res: &types.CreateVM_TaskResponse{Returnval: failTask(ctx, f, "CreateVMTask", f.fault)}}
}

func (f *folderFailer) DestroyTask(ctx *simulator.Context, req *types.Destroy_Task) soap.HasFault {
	if res, ok := redirected(ctx, f, "DestroyTask", req); ok {
		return res
	}
	return &methods.Destroy_TaskBody{Res: &types.Destroy_TaskResponse{Returnval: failTask(ctx, f, "DestroyTask", f.fault)}}
}

// The task methods each failer answers.
var (
	vmFailerMethods = map[string]bool{
		"PowerOnVM_Task": true, "PowerOffVM_Task": true, "SuspendVM_Task": true, "ResetVM_Task": true,
		"ReconfigVM_Task": true, "CloneVM_Task": true, "Destroy_Task": true, "RelocateVM_Task": true,
	}
	hostFailerMethods   = map[string]bool{"EnterMaintenanceMode_Task": true, "ExitMaintenanceMode_Task": true, "RebootHost_Task": true}
	folderFailerMethods = map[string]bool{"CreateVM_Task": true, "Destroy_Task": true}
)

// armedFault builds the armed fault `a` for a call of method on obj; the message (if any) is
// registered for task errors and carried in faultMessage for SOAP faults (fault.WithFaultString).
func (s *Sim) armedFault(a *armed, obj mo.Reference, method string) types.BaseMethodFault {
	t := fault.Target{Ref: obj.Reference(), Name: s.objectName(obj), Method: method, Msg: a.Msg}
	if vm, ok := obj.(*simulator.VirtualMachine); ok {
		t.PowerState = vm.Runtime.PowerState
	}
	if e, ok := obj.(mo.Entity); ok {
		if tasks := e.Entity().RecentTask; len(tasks) > 0 {
			last := tasks[len(tasks)-1]
			t.Task = &last
		}
	}
	f, msg := fault.Armed(a.Fault, t)
	if msg != "" {
		s.messages.With(f, msg)
	}
	return f
}

// objectName is an object's inventory name, or for a host's managers the host's name.
func (s *Sim) objectName(obj mo.Reference) string {
	if e, ok := obj.(mo.Entity); ok && e.Entity().Name != "" {
		return e.Entity().Name
	}
	if host, ok := managerHost(obj); ok {
		return host
	}
	return obj.Reference().Value
}
