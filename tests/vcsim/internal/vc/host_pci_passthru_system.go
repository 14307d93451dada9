package vc

import (
	"strings"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// PciPassthruSystem is a host's HostPciPassthruSystem listing the GPUs (vGPU needs no passthrough).
type PciPassthruSystem struct {
	mo.HostPciPassthruSystem

	sim  *Sim
	host string
}

func (p *PciPassthruSystem) info() []types.BaseHostPciPassthruInfo {
	gpus, _ := p.sim.Farm.GPUs(p.host)
	var out []types.BaseHostPciPassthruInfo
	for _, g := range gpus {
		out = append(out, &types.HostPciPassthruInfo{Id: g.PCIID, PassthruCapable: true})
	}
	return out
}

// Refresh re-reads the passthrough state.
func (p *PciPassthruSystem) Refresh(ctx *simulator.Context, req *types.Refresh) soap.HasFault {
	return &methods.RefreshBody{Res: &types.RefreshResponse{}}
}

// UpdatePassthruConfig enables or disables passthrough on listed devices; a NIC's SR-IOV (HostSriovConfig) and
// passthrough settings are configured now and in effect after the host's next reboot (network.go).
func (p *PciPassthruSystem) UpdatePassthruConfig(ctx *simulator.Context, req *types.UpdatePassthruConfig) soap.HasFault {
	for _, c := range req.Config {
		cfg := c.GetHostPciPassthruConfig()
		if p.sim.isNIC(p.host, cfg.Id) {
			p.sim.hold(p.host) // this handler holds the manager's lock: the refresh is done by release
			f := p.sim.configureNIC(p.host, c)
			p.sim.release(ctx, p.host)
			if f != nil {
				return &methods.UpdatePassthruConfigBody{Fault_: f}
			}
			continue
		}
		found := false
		for _, i := range p.PciPassthruInfo {
			if info := i.GetHostPciPassthruInfo(); info.Id == cfg.Id {
				info.PassthruEnabled, found = cfg.PassthruEnabled, true
			}
		}
		if !found {
			return &methods.UpdatePassthruConfigBody{Fault_: fault.InvalidArgument("config.id", "unknown PCI device "+cfg.Id)}
		}
	}
	return &methods.UpdatePassthruConfigBody{Res: &types.UpdatePassthruConfigResponse{}}
}

// configureNIC records a NIC's SR-IOV or passthrough configuration (UpdatePassthruConfig).
func (s *Sim) configureNIC(host string, c types.BaseHostPciPassthruConfig) *soap.Fault {
	cfg := c.GetHostPciPassthruConfig()
	req := farm.NICConfig{Enabled: cfg.PassthruEnabled}
	if sriov, ok := c.(*types.HostSriovConfig); ok {
		req = farm.NICConfig{SRIOV: true, Enabled: sriov.SriovEnabled, VFs: int(sriov.NumVirtualFunction)}
	}
	if err := s.Farm.ConfigureNIC(host, strings.ToLower(cfg.Id), req); err != nil {
		return fault.FromFarm(err)
	}
	return nil
}
