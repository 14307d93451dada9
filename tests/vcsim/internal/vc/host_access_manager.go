package vc

import (
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/fault"
)

// AccessManager is a host's HostAccessManager.
type AccessManager struct {
	mo.HostAccessManager
	sim  *Sim
	host string
}

// QueryLockdownExceptions lists the users that keep their access in lockdown mode.
func (m *AccessManager) QueryLockdownExceptions(ctx *simulator.Context, req *types.QueryLockdownExceptions) soap.HasFault {
	a, err := m.sim.Farm.Access(m.host)
	if err != nil {
		return &methods.QueryLockdownExceptionsBody{Fault_: fault.FromFarm(err)}
	}
	return &methods.QueryLockdownExceptionsBody{Res: &types.QueryLockdownExceptionsResponse{Returnval: a.LockdownExceptions}}
}

// UpdateLockdownExceptions replaces the exception users.
func (m *AccessManager) UpdateLockdownExceptions(ctx *simulator.Context, req *types.UpdateLockdownExceptions) soap.HasFault {
	a, err := m.sim.Farm.Access(m.host)
	if err == nil {
		err = m.sim.locked(ctx, m.host, func() error {
			return m.sim.Farm.SetLockdown(m.host, a.Lockdown, append([]string{}, req.Users...))
		})
	}
	if err != nil {
		return &methods.UpdateLockdownExceptionsBody{Fault_: fault.FromFarm(err)}
	}
	return &methods.UpdateLockdownExceptionsBody{Res: &types.UpdateLockdownExceptionsResponse{}}
}

// ChangeLockdownMode sets the lockdown mode.
func (m *AccessManager) ChangeLockdownMode(ctx *simulator.Context, req *types.ChangeLockdownMode) soap.HasFault {
	if err := m.sim.locked(ctx, m.host, func() error { return m.sim.Farm.SetLockdown(m.host, string(req.Mode), nil) }); err != nil {
		return &methods.ChangeLockdownModeBody{Fault_: fault.FromFarm(err)}
	}
	return &methods.ChangeLockdownModeBody{Res: &types.ChangeLockdownModeResponse{}}
}
