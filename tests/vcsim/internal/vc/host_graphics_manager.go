package vc

import (
	"sort"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
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
		body.Fault_ = fault.FromFarm(err)
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
		return &methods.IsSharedGraphicsActiveBody{Fault_: fault.FromFarm(err)}
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
		return &methods.RetrieveVgpuProfileInfoBody{Fault_: fault.FromFarm(err)}
	}
	return &methods.RetrieveVgpuProfileInfoBody{Res: &types.RetrieveVgpuProfileInfoResponse{Returnval: profileInfos(m.sim.Farm.Catalog(), info)}}
}

// RetrieveVgpuDeviceInfo describes each GPU model of the host.
func (m *GraphicsManager) RetrieveVgpuDeviceInfo(ctx *simulator.Context, req *types.RetrieveVgpuDeviceInfo) soap.HasFault {
	info, err := m.sim.Farm.Host(m.host)
	if err != nil {
		return &methods.RetrieveVgpuDeviceInfoBody{Fault_: fault.FromFarm(err)}
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

var _ mo.Reference = (*GraphicsManager)(nil)

// hostView is what vSphere shows of a host's GPUs, derived from the farm.
type hostView struct {
	graphicsInfo []types.HostGraphicsInfo
	config       *types.HostGraphicsConfig
	gpuTypes     []string
	caps         []types.HostSharedGpuCapabilities
}

func (s *Sim) viewOf(info farm.HostInfo) hostView {
	var v hostView
	v.config = &types.HostGraphicsConfig{
		HostDefaultGraphicsType:        info.DefaultGraphicsType,
		SharedPassthruAssignmentPolicy: info.AssignmentPolicy,
	}
	seen := map[string]bool{}
	for _, g := range info.GPUs {
		gi := types.HostGraphicsInfo{
			DeviceName: g.Model.DeviceName, VendorName: farm.VendorName, PciId: g.PCIID,
			GraphicsType: g.GraphicsType, VgpuMode: g.VgpuMode,
			MemorySizeInKB: int64(g.Model.FramebufferGB) * 1024 * 1024,
		}
		vmSeen := map[string]bool{}
		for _, slot := range g.VGPUs {
			if !vmSeen[slot.VM] {
				vmSeen[slot.VM] = true
				gi.Vm = append(gi.Vm, types.ManagedObjectReference{Type: "VirtualMachine", Value: slot.VM})
			}
		}
		v.graphicsInfo = append(v.graphicsInfo, gi)
		v.config.DeviceType = append(v.config.DeviceType, types.HostGraphicsConfigDeviceType{
			DeviceId: g.PCIID, GraphicsType: g.GraphicsType, VgpuMode: g.TimeSlicedMode,
		})
		for _, p := range g.Profiles {
			if !seen[p] {
				seen[p] = true
				v.gpuTypes = append(v.gpuTypes, p)
			}
		}
	}
	sort.Strings(v.gpuTypes)
	for _, p := range v.gpuTypes {
		prof, err := s.Farm.Catalog().Profile(p)
		if err != nil { // offered beyond the catalogue: nothing is claimed for it
			v.caps = append(v.caps, types.HostSharedGpuCapabilities{Vgpu: p})
			continue
		}
		v.caps = append(v.caps, types.HostSharedGpuCapabilities{
			Vgpu: p, DiskSnapshotSupported: true, MemorySnapshotSupported: !prof.MIG,
			SuspendSupported: !prof.MIG, MigrateSupported: true,
		})
	}
	return v
}
