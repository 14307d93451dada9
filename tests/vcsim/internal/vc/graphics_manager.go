package vc

import (
	"errors"
	"sort"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

// GraphicsManager is a host's HostGraphicsManager, backed by the farm.
type GraphicsManager struct {
	mo.HostGraphicsManager

	sim  *Sim
	host string
}

// UpdateGraphicsConfig changes the host default graphics type, the assignment policy and per-GPU
// graphics type / vGPU mode. It is refused while a powered-on VM holds a vGPU on an affected GPU.
func (m *GraphicsManager) UpdateGraphicsConfig(ctx *simulator.Context, req *types.UpdateGraphicsConfig) soap.HasFault {
	body := &methods.UpdateGraphicsConfigBody{}
	cfg := farm.GraphicsConfig{
		DefaultGraphicsType: req.Config.HostDefaultGraphicsType,
		AssignmentPolicy:    req.Config.SharedPassthruAssignmentPolicy,
	}
	for _, d := range req.Config.DeviceType {
		cfg.Devices = append(cfg.Devices, farm.DeviceGraphics{PCIID: d.DeviceId, GraphicsType: d.GraphicsType, VgpuMode: d.VgpuMode})
	}
	m.sim.hold(m.host)
	err := m.sim.Farm.UpdateGraphics(m.host, cfg)
	m.sim.release(ctx, m.host)
	if err != nil {
		body.Fault_ = farmFault(err)
		return body
	}
	body.Res = &types.UpdateGraphicsConfigResponse{}
	return body
}

// RefreshGraphicsManager re-reads the GPU state.
func (m *GraphicsManager) RefreshGraphicsManager(ctx *simulator.Context, req *types.RefreshGraphicsManager) soap.HasFault {
	m.sim.refreshHost(ctx, m.host)
	return &methods.RefreshGraphicsManagerBody{Res: &types.RefreshGraphicsManagerResponse{}}
}

// IsSharedGraphicsActive reports whether any GPU of the host runs in a shared graphics type with a
// vGPU on it.
func (m *GraphicsManager) IsSharedGraphicsActive(ctx *simulator.Context, req *types.IsSharedGraphicsActive) soap.HasFault {
	info, err := m.sim.Farm.Host(m.host)
	if err != nil {
		return &methods.IsSharedGraphicsActiveBody{Fault_: farmFault(err)}
	}
	active := false
	for _, g := range info.GPUs {
		if len(g.VGPUs) > 0 {
			active = true
		}
	}
	return &methods.IsSharedGraphicsActiveBody{Res: &types.IsSharedGraphicsActiveResponse{Returnval: active}}
}

// RetrieveVgpuProfileInfo lists the profiles the host's GPUs offer in their current modes.
func (m *GraphicsManager) RetrieveVgpuProfileInfo(ctx *simulator.Context, req *types.RetrieveVgpuProfileInfo) soap.HasFault {
	info, err := m.sim.Farm.Host(m.host)
	if err != nil {
		return &methods.RetrieveVgpuProfileInfoBody{Fault_: farmFault(err)}
	}
	return &methods.RetrieveVgpuProfileInfoBody{Res: &types.RetrieveVgpuProfileInfoResponse{Returnval: profileInfos(m.sim.Farm.Catalog(), info)}}
}

// RetrieveVgpuDeviceInfo describes each GPU model of the host.
func (m *GraphicsManager) RetrieveVgpuDeviceInfo(ctx *simulator.Context, req *types.RetrieveVgpuDeviceInfo) soap.HasFault {
	info, err := m.sim.Farm.Host(m.host)
	if err != nil {
		return &methods.RetrieveVgpuDeviceInfoBody{Fault_: farmFault(err)}
	}
	return &methods.RetrieveVgpuDeviceInfoBody{Res: &types.RetrieveVgpuDeviceInfoResponse{Returnval: deviceInfos(info)}}
}

// profileInfos describes the profiles a host offers from the catalogue: framebuffer, sharing (mig for
// MIG-backed types) and class (compute for C-series, quadro otherwise).
func profileInfos(cat *farm.Catalog, info farm.HostInfo) []types.VirtualMachineVgpuProfileInfo {
	seen := map[string]bool{}
	var out []types.VirtualMachineVgpuProfileInfo
	for _, g := range info.GPUs {
		for _, name := range g.Profiles {
			if seen[name] {
				continue
			}
			seen[name] = true
			p, err := cat.Profile(name)
			if err != nil {
				continue
			}
			out = append(out, types.VirtualMachineVgpuProfileInfo{
				VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: name},
				ProfileName:              name, DeviceVendorId: farm.VendorID, FbSizeInGib: p.FbGiB(),
				ProfileSharing: p.Sharing, ProfileClass: p.Class,
			})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ProfileName < out[j].ProfileName })
	return out
}

func deviceInfos(info farm.HostInfo) []types.VirtualMachineVgpuDeviceInfo {
	seen := map[string]bool{}
	var out []types.VirtualMachineVgpuDeviceInfo
	for _, g := range info.GPUs {
		if seen[g.ModelName] {
			continue
		}
		seen[g.ModelName] = true
		compute, quadro := false, false
		for _, t := range g.Model.Types {
			compute = compute || t.Series == "C"
			quadro = quadro || t.Series != "C"
		}
		out = append(out, types.VirtualMachineVgpuDeviceInfo{
			VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: g.Model.DeviceName},
			DeviceName:               g.Model.DeviceName, DeviceVendorId: farm.VendorID,
			MaxFbSizeInGib: int64(g.Model.FramebufferGB), TimeSlicedCapable: true, MigCapable: g.Model.MIGCapable,
			ComputeProfileCapable: compute, QuadroProfileCapable: quadro,
		})
	}
	return out
}

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
		return &methods.QueryModulesBody{Fault_: farmFault(err)}
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
		return &methods.QueryConfiguredModuleOptionStringBody{Fault_: farmFault(err)}
	}
	return &methods.QueryConfiguredModuleOptionStringBody{
		Res: &types.QueryConfiguredModuleOptionStringResponse{Returnval: opts.Configured},
	}
}

// UpdateModuleOptionString replaces the configured option string; it takes effect at the next reboot.
func (k *KernelModuleSystem) UpdateModuleOptionString(ctx *simulator.Context, req *types.UpdateModuleOptionString) soap.HasFault {
	if err := k.sim.Farm.SetModuleOptions(k.host, req.Name, req.Options); err != nil {
		return &methods.UpdateModuleOptionStringBody{Fault_: farmFault(err)}
	}
	return &methods.UpdateModuleOptionStringBody{Res: &types.UpdateModuleOptionStringResponse{}}
}

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
			return &methods.UpdatePassthruConfigBody{Fault_: simulator.Fault("unknown PCI device "+cfg.Id,
				&types.InvalidArgument{InvalidProperty: "config.id"})}
		}
	}
	return &methods.UpdatePassthruConfigBody{Res: &types.UpdatePassthruConfigResponse{}}
}

// farmFault maps farm errors onto vim faults.
func farmFault(err error) *soap.Fault {
	msg := err.Error()
	switch {
	case errors.Is(err, farm.ErrGPUBusy):
		return simulator.Fault(msg, &types.ResourceInUse{Name: msg})
	case errors.Is(err, farm.ErrNotFound):
		return simulator.Fault(msg, &types.NotFound{})
	case errors.Is(err, farm.ErrNotCapable):
		return simulator.Fault(msg, &types.NotSupported{})
	case errors.Is(err, farm.ErrInsufficient):
		return simulator.Fault(farm.InsufficientGraphics, &types.InsufficientGraphicsResourcesFault{})
	default:
		return simulator.Fault(msg, &types.InvalidArgument{InvalidProperty: msg})
	}
}

// managerHost is the host name of one of a host's GPU managers (graphics, kernel modules, PCI
// passthrough); ok is false for any other object.
func managerHost(obj mo.Reference) (host string, ok bool) {
	switch o := obj.(type) {
	case *GraphicsManager:
		return o.host, true
	case *KernelModuleSystem:
		return o.host, true
	case *PciPassthruSystem:
		return o.host, true
	}
	return accessHost(obj)
}
