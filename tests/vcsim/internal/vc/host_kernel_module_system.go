package vc

import (
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/fault"
)

// KernelModuleSystem is a host's HostKernelModuleSystem, backed by the farm.
type KernelModuleSystem struct {
	mo.HostKernelModuleSystem

	sim  *Sim
	host string
}

// QueryModules lists the kernel modules with their effective option strings.
func (k *KernelModuleSystem) QueryModules(ctx *simulator.Context, req *types.QueryModules) soap.HasFault {
	names, err := k.sim.Farm.Modules(k.host)
	if err != nil {
		return &methods.QueryModulesBody{Fault_: fault.FromFarm(err)}
	}
	var out []types.KernelModuleInfo
	for i, name := range names {
		opts, _ := k.sim.Farm.ModuleOptions(k.host, name)
		version := "8.0.3"
		if name == "nvidia" {
			version = "550.90.05-1OEM.800.1.0.20613240"
		}
		out = append(out, types.KernelModuleInfo{
			Id: int32(40 + i), Name: name, Version: version, Filename: "/usr/lib/vmware/vmkmod/" + name,
			OptionString: opts.Effective, Loaded: true, Enabled: true, UseCount: 1,
		})
	}
	return &methods.QueryModulesBody{Res: &types.QueryModulesResponse{Returnval: out}}
}

// QueryConfiguredModuleOptionString returns the configured (next boot) option string.
func (k *KernelModuleSystem) QueryConfiguredModuleOptionString(ctx *simulator.Context, req *types.QueryConfiguredModuleOptionString) soap.HasFault {
	opts, err := k.sim.Farm.ModuleOptions(k.host, req.Name)
	if err != nil {
		return &methods.QueryConfiguredModuleOptionStringBody{Fault_: fault.FromFarm(err)}
	}
	return &methods.QueryConfiguredModuleOptionStringBody{
		Res: &types.QueryConfiguredModuleOptionStringResponse{Returnval: opts.Configured},
	}
}

// UpdateModuleOptionString replaces the configured option string; it takes effect at the next reboot.
func (k *KernelModuleSystem) UpdateModuleOptionString(ctx *simulator.Context, req *types.UpdateModuleOptionString) soap.HasFault {
	if err := k.sim.Farm.SetModuleOptions(k.host, req.Name, req.Options); err != nil {
		return &methods.UpdateModuleOptionStringBody{Fault_: fault.FromFarm(err)}
	}
	return &methods.UpdateModuleOptionStringBody{Res: &types.UpdateModuleOptionStringResponse{}}
}
