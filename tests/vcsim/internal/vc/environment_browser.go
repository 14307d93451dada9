package vc

import (
	"fmt"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// gpuEnvBrowser adds the GPU parts of QueryConfigTarget.
type gpuEnvBrowser struct {
	*simulator.EnvironmentBrowser

	sim *Sim
}

// QueryConfigTarget returns vcsim's target plus sharedGpuPassthroughTypes, vgpuProfileInfo,
// vgpuDeviceInfo and, for NVLink-connected GPU sets with NVLink up, vendorDeviceGroupInfo.
func (b *gpuEnvBrowser) QueryConfigTarget(ctx *simulator.Context, req *types.QueryConfigTarget) soap.HasFault {
	if res, ok := redirected(ctx, b, "QueryConfigTarget", req); ok {
		return res
	}
	if req.Host != nil {
		if _, ok := ctx.Map.Get(*req.Host).(*simulator.HostSystem); !ok {
			return &methods.QueryConfigTargetBody{Fault_: fault.InvalidArgument("host", "host "+req.Host.Value+" not found")}
		}
	}
	body := b.EnvironmentBrowser.QueryConfigTarget(ctx, req)
	res, ok := body.(*methods.QueryConfigTargetBody)
	if !ok || res.Res == nil || res.Res.Returnval == nil {
		return body
	}
	target := *res.Res.Returnval
	res.Res.Returnval = &target
	var hosts []string
	if req.Host != nil {
		hosts = append(hosts, b.sim.hostOf(req.Host))
	} else {
		hosts = b.sim.hostsOfBrowser(ctx, b.Self)
	}
	seenType, seenDev, seenGroup := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, name := range hosts {
		info, err := b.sim.Farm.Host(name)
		if err != nil {
			continue
		}
		for _, p := range profileInfos(b.sim.Farm.Catalog(), info) {
			if !seenType[p.ProfileName] {
				seenType[p.ProfileName] = true
				target.SharedGpuPassthroughTypes = append(target.SharedGpuPassthroughTypes,
					types.VirtualMachinePciSharedGpuPassthroughInfo{
						VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: p.ProfileName}, Vgpu: p.ProfileName})
				target.VgpuProfileInfo = append(target.VgpuProfileInfo, p)
			}
		}
		if req.Host != nil {
			sriov, pt := b.sim.nicTargets(name)
			target.Sriov = append(target.Sriov, sriov...)
			target.PciPassthrough = append(target.PciPassthrough, pt...)
		}
		for _, d := range deviceInfos(info) {
			if !seenDev[d.DeviceName] {
				seenDev[d.DeviceName] = true
				target.VgpuDeviceInfo = append(target.VgpuDeviceInfo, d)
			}
		}
		for _, g := range deviceGroups(info) {
			if req.Host != nil {
				target.VendorDeviceGroupInfo = append(target.VendorDeviceGroupInfo, g)
				continue
			}
			if !seenGroup[g.DeviceGroupName] {
				seenGroup[g.DeviceGroupName] = true
				target.VendorDeviceGroupInfo = append(target.VendorDeviceGroupInfo, anyHost(g))
			}
		}
	}
	return res
}

// DeviceGroupName names an NVLink device group of n GPUs with a whole-GPU profile, spelled as vCenter does
// ("Nvidia:2@nvidia_h100l-94c%NVLink": the BOSH vSphere CPI's device group code and its tests; VMware's
// device-group blog posts show "Nvidia:2@grid_a100d-80c%NVLink").
func DeviceGroupName(n int, profile string) string {
	return fmt.Sprintf("Nvidia:%d@%s%%NVLink", n, profile)
}

// deviceGroups lists NVLink device groups: per NVLink set with NVLink up, in time-sliced mode, one
// group per whole-GPU C-series profile (NVLink P2P needs whole-GPU time-sliced vGPUs). Each
// component device names its physical GPU: deviceInfo.label is the GPU's PCI id. On an NVSwitch host
// any GPUs of a set are connected, so a set offers groups of 2, 4 and 8 GPUs (as far as it has them);
// the components of the n-GPU group name the set's first n GPUs. The sets and sizes are
// farm.NVLinkOffers', which admission at power-on enforces. A query for one host lists every set
// (sets of the same size share a name); a query for a whole compute resource lists each group name
// once, without PCI ids (see anyHost).
func deviceGroups(info farm.HostInfo) []types.VirtualMachineVendorDeviceGroupInfo {
	var out []types.VirtualMachineVendorDeviceGroupInfo
	for _, offer := range farm.NVLinkOffers(info) {
		m := offer.GPUs[0].Model
		profile := farm.VSphereName(info.ProfilePrefix, m.WholeGPUComputeType().Name)
		for _, n := range offer.Sizes {
			out = append(out, deviceGroup(m, profile, offer.Set, offer.GPUs[:n], info.NVLinkTopology))
		}
	}
	return out
}

func deviceGroup(m *farm.Model, profile string, set int, gpus []farm.GPUInfo, topology string) types.VirtualMachineVendorDeviceGroupInfo {
	via := "NVLink"
	if topology == farm.NVLinkNVSwitch {
		via = "NVLink through NVSwitch"
	}
	g := types.VirtualMachineVendorDeviceGroupInfo{
		VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: DeviceGroupName(len(gpus), profile)},
		DeviceGroupName:          DeviceGroupName(len(gpus), profile),
		DeviceGroupDescription:   fmt.Sprintf("%d x %s connected by %s", len(gpus), m.Name, via),
	}
	for _, gpu := range gpus {
		dev := newVGPU(0, profile)
		dev.DeviceInfo = &types.Description{Label: gpu.PCIID,
			Summary: fmt.Sprintf("%s at %s, NVLink set %d", m.Name, gpu.PCIID, set)}
		g.ComponentDeviceInfo = append(g.ComponentDeviceInfo, types.VirtualMachineVendorDeviceGroupInfoComponentDeviceInfo{
			Type: "pciPassthru", VendorName: "NVIDIA", DeviceName: profile, IsConfigurable: false,
			Device: dev,
		})
	}
	return g
}

// anyHost drops the physical GPUs from a group listed for a whole compute resource.
func anyHost(g types.VirtualMachineVendorDeviceGroupInfo) types.VirtualMachineVendorDeviceGroupInfo {
	comps := make([]types.VirtualMachineVendorDeviceGroupInfoComponentDeviceInfo, len(g.ComponentDeviceInfo))
	for i, c := range g.ComponentDeviceInfo {
		c.Device = newVGPU(0, c.DeviceName)
		comps[i] = c
	}
	g.ComponentDeviceInfo = comps
	return g
}

// hostsOfBrowser finds the hosts of the compute resource owning an environment browser.
func (s *Sim) hostsOfBrowser(ctx *simulator.Context, ref types.ManagedObjectReference) []string {
	var out []string
	if cr := browserComputeResource(ctx.Map, ref); cr != nil {
		for _, h := range cr.Host {
			if name := s.hostRefs[h]; name != "" {
				out = append(out, name)
			}
		}
	}
	if out == nil {
		out = s.HostNames()
	}
	return out
}
