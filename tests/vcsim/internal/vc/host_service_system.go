package vc

import (
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// sshServiceKey is the SSH service's key in HostServiceInfo (the vSphere Client's "SSH").
const sshServiceKey = "TSM-SSH"

// ServiceSystem is a host's HostServiceSystem.
type ServiceSystem struct {
	mo.HostServiceSystem
	sim  *Sim
	host string
}

// serviceInfo is the host's service list (vcsim's captured ESXi list) with TSM-SSH as the farm says.
func serviceInfo(base *types.HostServiceInfo, a farm.Access) *types.HostServiceInfo {
	out := &types.HostServiceInfo{}
	found := false
	if base != nil {
		for _, svc := range base.Service {
			if svc.Key == sshServiceKey {
				svc.Running, svc.Policy, found = a.SSHRunning, a.SSHPolicy, true
			}
			out.Service = append(out.Service, svc)
		}
	}
	if !found {
		out.Service = append(out.Service, types.HostService{Key: sshServiceKey, Label: "SSH", Running: a.SSHRunning, Policy: a.SSHPolicy})
	}
	return out
}

func (m *ServiceSystem) serviceFault(id string) *soap.Fault {
	if id == sshServiceKey {
		return nil
	}
	if info, err := m.sim.Farm.Access(m.host); err == nil {
		for _, svc := range serviceInfo(m.sim.hosts[m.host].Config.Service, info).Service {
			if svc.Key == id {
				return fault.NotSupported("gpusim models only the SSH service (" + sshServiceKey + ")")
			}
		}
	}
	return fault.NotFound("no service " + id)
}

// StartService starts the SSH service (the ESXi shell then accepts connections).
func (m *ServiceSystem) StartService(ctx *simulator.Context, req *types.StartService) soap.HasFault {
	if f := m.serviceFault(req.Id); f != nil {
		return &methods.StartServiceBody{Fault_: f}
	}
	if err := m.sim.locked(ctx, m.host, func() error { return m.sim.Farm.SetSSHRunning(m.host, true) }); err != nil {
		return &methods.StartServiceBody{Fault_: fault.FromFarm(err)}
	}
	return &methods.StartServiceBody{Res: &types.StartServiceResponse{}}
}

// StopService stops the SSH service (the ESXi shell then refuses connections).
func (m *ServiceSystem) StopService(ctx *simulator.Context, req *types.StopService) soap.HasFault {
	if f := m.serviceFault(req.Id); f != nil {
		return &methods.StopServiceBody{Fault_: f}
	}
	if err := m.sim.locked(ctx, m.host, func() error { return m.sim.Farm.SetSSHRunning(m.host, false) }); err != nil {
		return &methods.StopServiceBody{Fault_: fault.FromFarm(err)}
	}
	return &methods.StopServiceBody{Res: &types.StopServiceResponse{}}
}

// UpdateServicePolicy sets the SSH service's startup policy.
func (m *ServiceSystem) UpdateServicePolicy(ctx *simulator.Context, req *types.UpdateServicePolicy) soap.HasFault {
	if f := m.serviceFault(req.Id); f != nil {
		return &methods.UpdateServicePolicyBody{Fault_: f}
	}
	if err := m.sim.locked(ctx, m.host, func() error { return m.sim.Farm.SetSSHPolicy(m.host, req.Policy) }); err != nil {
		return &methods.UpdateServicePolicyBody{Fault_: fault.FromFarm(err)}
	}
	return &methods.UpdateServicePolicyBody{Res: &types.UpdateServicePolicyResponse{}}
}

// RefreshServices re-reads the service list.
func (m *ServiceSystem) RefreshServices(ctx *simulator.Context, req *types.RefreshServices) soap.HasFault {
	if a, err := m.sim.Farm.Access(m.host); err == nil {
		m.sim.refreshAccess(ctx, m.host, a)
	}
	return &methods.RefreshServicesBody{Res: &types.RefreshServicesResponse{}}
}
