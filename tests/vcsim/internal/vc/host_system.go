package vc

import (
	"context"
	"fmt"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/fault"
)

var sleep = time.Sleep

// gpuHost wraps a simulator host for one call: maintenance rules and RebootHost_Task.
type gpuHost struct {
	*simulator.HostSystem

	sim  *Sim
	name string
}

func (h *gpuHost) delay(method string) {
	if d := h.sim.faults.delay(h.Self.Value, method); d > 0 {
		sleep(d)
	}
}

// poweredOn counts powered-on (or suspended) VMs registered on the host.
func (h *gpuHost) poweredOn() int {
	n := 0
	for _, vm := range h.sim.vmsOnHost(h.name) {
		if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
			n++
		}
	}
	return n
}

// EnterMaintenanceModeTask fails while powered-on VMs run on the host: nothing migrates vGPU VMs.
func (h *gpuHost) EnterMaintenanceModeTask(ctx *simulator.Context, req *types.EnterMaintenanceMode_Task) soap.HasFault {
	if res, ok := redirected(ctx, h, "EnterMaintenanceModeTask", req); ok {
		return res
	}
	s := h.sim
	task := simulator.CreateTask(h, "EnterMaintenanceModeTask", safely(func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		h.delay("EnterMaintenanceMode_Task")
		if n := h.poweredOn(); n > 0 {
			return nil, s.messages.With(fault.InvalidState(),
				fmt.Sprintf("Host %s has %d powered-on or suspended virtual machines; vGPU virtual machines cannot be migrated.", h.name, n))
		}
		if _, f := s.waitBody(h.HostSystem.EnterMaintenanceModeTask(ctx, req)); f != nil {
			return nil, f
		}
		s.hold(h.name)
		err := s.Farm.SetMaintenance(h.name, true)
		s.release(ctx, h.name)
		if err != nil {
			return nil, fault.SystemError(err.Error())
		}
		return nil, nil
	}))
	return &methods.EnterMaintenanceMode_TaskBody{Res: &types.EnterMaintenanceMode_TaskResponse{Returnval: task.Run(ctx)}}
}

// ExitMaintenanceModeTask leaves maintenance mode.
func (h *gpuHost) ExitMaintenanceModeTask(ctx *simulator.Context, req *types.ExitMaintenanceMode_Task) soap.HasFault {
	if res, ok := redirected(ctx, h, "ExitMaintenanceModeTask", req); ok {
		return res
	}
	s := h.sim
	task := simulator.CreateTask(h, "ExitMaintenanceModeTask", safely(func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		h.delay("ExitMaintenanceMode_Task")
		if _, f := s.waitBody(h.HostSystem.ExitMaintenanceModeTask(ctx, req)); f != nil {
			return nil, f
		}
		s.hold(h.name)
		err := s.Farm.SetMaintenance(h.name, false)
		s.release(ctx, h.name)
		if err != nil {
			return nil, fault.SystemError(err.Error())
		}
		return nil, nil
	}))
	return &methods.ExitMaintenanceMode_TaskBody{Res: &types.ExitMaintenanceMode_TaskResponse{Returnval: task.Run(ctx)}}
}

// RebootHostTask reboots a host in maintenance mode: it is not responding for RebootSeconds and then
// comes back with pending MIG modes and configured module options in effect.
func (h *gpuHost) RebootHostTask(ctx *simulator.Context, req *types.RebootHost_Task) soap.HasFault {
	if res, ok := redirected(ctx, h, "RebootHostTask", req); ok {
		return res
	}
	s := h.sim
	task := simulator.CreateTask(h, "RebootHostTask", safely(func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		h.delay("RebootHost_Task")
		if !h.Runtime.InMaintenanceMode {
			return nil, s.messages.With(fault.InvalidState(),
				fmt.Sprintf("Host %s must be in maintenance mode to reboot.", h.name))
		}
		if n := h.poweredOn(); n > 0 {
			return nil, s.messages.With(fault.InvalidState(),
				fmt.Sprintf("Host %s has %d powered-on virtual machines.", h.name, n))
		}
		s.hold(h.name)
		err := s.Farm.BeginReboot(h.name)
		s.release(ctx, h.name)
		if err != nil {
			return nil, s.messages.With(fault.InvalidState(), err.Error())
		}
		name := h.name
		time.AfterFunc(s.rebootDur, func() {
			_ = s.Farm.EndReboot(name)
			now := time.Now()
			hs := s.hosts[name]
			c := &simulator.Context{Context: context.Background(), Map: s.ctx.Map}
			c.WithLock(hs, func() {
				c.Map.Update(c, hs, []types.PropertyChange{{Name: "runtime.bootTime", Val: &now}})
			})
		})
		return nil, nil
	}))
	return &methods.RebootHost_TaskBody{Res: &types.RebootHost_TaskResponse{Returnval: task.Run(ctx)}}
}

// hostMethods are the HostSystem methods gpuHost answers (route, hooks.go); vcsim answers the others.
var hostMethods = map[string]bool{
	"EnterMaintenanceMode_Task": true, "ExitMaintenanceMode_Task": true, "RebootHost_Task": true,
}
