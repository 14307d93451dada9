package vc

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// Networks: port groups on standard switches and vSphere Distributed Switches, the hosts' ConnectX NICs
// (PCI devices, uplinks, SR-IOV and passthrough state, NUMA nodes), the rules for VM adapters (PVRDMA only on
// distributed port groups, no hot-plug of SR-IOV or passthrough adapters) and their admission at power-on.

// Port group kinds (farm file `networks[].kind`).
const (
	NetworkStandard    = "standard"
	NetworkDistributed = "distributed"
)

// NetworkSpec is a port group of the farm file.
type NetworkSpec struct {
	Name   string   `yaml:"name" json:"name"`
	Kind   string   `yaml:"kind" json:"kind"`     // standard (default) | distributed
	Switch string   `yaml:"switch" json:"switch"` // distributed: the switch's name (default dvs-<name>)
	Hosts  []string `yaml:"hosts" json:"hosts"`   // hosts that reach it (default all); one list per switch
	Vmknic string   `yaml:"vmknic" json:"vmknic"` // distributed: a VMkernel adapter on it on each host (vmk1)
}

func (n NetworkSpec) kind() string {
	if n.Kind == "" {
		return NetworkStandard
	}
	return n.Kind
}

func (n NetworkSpec) switchName() string {
	if n.Switch == "" {
		return "dvs-" + n.Name
	}
	return n.Switch
}

// validateNetworks checks the farm file's port groups and NICs.
func (s *Spec) validateNetworks(hosts []string) error {
	names := map[string]bool{"VM Network": true}
	vmknics := map[string]bool{}
	switchHosts := map[string]string{}
	known := map[string]bool{}
	for _, h := range hosts {
		known[h] = true
	}
	for i, n := range s.Networks {
		if n.Name == "" || names[n.Name] {
			return fmt.Errorf("networks[%d]: name %q is empty or used twice", i, n.Name)
		}
		names[n.Name] = true
		if n.kind() != NetworkStandard && n.kind() != NetworkDistributed {
			return fmt.Errorf("networks[%d]: kind must be standard or distributed, got %q", i, n.Kind)
		}
		for _, h := range n.Hosts {
			if !known[h] {
				return fmt.Errorf("networks[%d]: unknown host %q", i, h)
			}
		}
		if n.Vmknic != "" && (n.kind() != NetworkDistributed || !strings.HasPrefix(n.Vmknic, "vmk") ||
			n.Vmknic == "vmk0" || vmknics[n.Vmknic]) {
			return fmt.Errorf("networks[%d]: vmknic %q must be a new vmkN on a distributed port group", i, n.Vmknic)
		}
		vmknics[n.Vmknic] = n.Vmknic != ""
		if n.kind() == NetworkDistributed {
			list := strings.Join(n.Hosts, ",")
			if prev, ok := switchHosts[n.switchName()]; ok && prev != list {
				return fmt.Errorf("networks[%d]: port groups of switch %s must list the same hosts", i, n.switchName())
			}
			switchHosts[n.switchName()] = list
		}
	}
	for _, c := range s.Clusters {
		if err := farm.CheckNICSpecs(c.NICs); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	return nil
}

// hostNames lists the farm's host names as build will create them.
func (s *Spec) hostNames() []string {
	var out []string
	n := 0
	for _, c := range s.Clusters {
		for i := 0; i < c.Hosts; i++ {
			n++
			out = append(out, fmt.Sprintf("esx-%02d.%s", n, s.HostDomain))
		}
	}
	return out
}

// createNetworks creates the farm file's port groups: distributed ones on their switches (one per switch
// name, its hosts as members), standard ones on every listed host's vSwitch0.
func (s *Sim) createNetworks(ctx context.Context, folders *object.DatacenterFolders, hosts []*object.HostSystem) error {
	byName := map[string]*object.HostSystem{}
	for i, name := range s.HostNames() {
		byName[name] = hosts[i]
	}
	members := func(list []string) []*object.HostSystem {
		if len(list) == 0 {
			return hosts
		}
		var out []*object.HostSystem
		for _, h := range list {
			out = append(out, byName[h])
		}
		return out
	}
	switches := map[string]*object.DistributedVirtualSwitch{}
	for _, n := range s.Spec.Networks {
		var err error
		if n.kind() == NetworkDistributed {
			err = s.addDistributed(ctx, folders, switches, n, members(n.Hosts))
		} else {
			err = s.addStandard(ctx, n, members(n.Hosts))
		}
		if err != nil {
			return fmt.Errorf("network %s: %w", n.Name, err)
		}
	}
	s.listNetworkHosts(hosts)
	return nil
}

// listNetworkHosts makes every port group list the hosts that list it, as vCenter keeps `Network.host` and
// `HostSystem.network` in step (govmomi's simulator lists its "VM Network" on the hosts' side only).
func (s *Sim) listNetworkHosts(hosts []*object.HostSystem) {
	for _, h := range hosts {
		hs := s.ctx.Map.Get(h.Reference()).(*simulator.HostSystem)
		for _, ref := range hs.Network {
			var net *mo.Network
			switch obj := s.ctx.Map.Get(ref).(type) {
			case *mo.Network:
				net = obj
			case *simulator.DistributedVirtualPortgroup:
				net = &obj.Network
			}
			if net != nil && !slices.Contains(net.Host, hs.Self) {
				s.ctx.Map.AppendReference(s.ctx, s.ctx.Map.Get(ref), &net.Host, hs.Self)
			}
		}
	}
}

func (s *Sim) addDistributed(ctx context.Context, folders *object.DatacenterFolders,
	switches map[string]*object.DistributedVirtualSwitch, n NetworkSpec, hosts []*object.HostSystem) error {
	dvs, ok := switches[n.switchName()]
	if !ok {
		spec := types.DVSCreateSpec{ConfigSpec: &types.VMwareDVSConfigSpec{DVSConfigSpec: types.DVSConfigSpec{Name: n.switchName()}}}
		task, err := folders.NetworkFolder.CreateDVS(ctx, spec)
		if err != nil {
			return err
		}
		info, err := task.WaitForResult(ctx, nil)
		if err != nil {
			return err
		}
		dvs = object.NewDistributedVirtualSwitch(s.client, info.Result.(types.ManagedObjectReference))
		switches[n.switchName()] = dvs
		join := &types.DVSConfigSpec{}
		for _, h := range hosts {
			join.Host = append(join.Host, types.DistributedVirtualSwitchHostMemberConfigSpec{
				Operation: string(types.ConfigSpecOperationAdd), Host: h.Reference()})
		}
		if task, err = dvs.Reconfigure(ctx, join); err == nil {
			err = task.Wait(ctx)
		}
		if err != nil {
			return err
		}
		for _, h := range hosts {
			joinSwitch(s.ctx.Map.Get(h.Reference()).(*simulator.HostSystem), s.dvs(dvs))
		}
	}
	task, err := dvs.AddPortgroup(ctx, []types.DVPortgroupConfigSpec{{
		Name: n.Name, NumPorts: 128, Type: string(types.DistributedVirtualPortgroupPortgroupTypeEarlyBinding),
	}})
	if err != nil {
		return err
	}
	if err := task.Wait(ctx); err != nil || n.Vmknic == "" {
		return err
	}
	for _, obj := range s.ctx.Map.All("DistributedVirtualPortgroup") {
		if pg, ok := obj.(*simulator.DistributedVirtualPortgroup); ok && pg.Name == n.Name {
			for _, h := range hosts {
				addVmknic(s.ctx.Map.Get(h.Reference()).(*simulator.HostSystem), n.Vmknic, s.dvs(dvs), pg.Key)
			}
		}
	}
	return nil
}

func (s *Sim) dvs(d *object.DistributedVirtualSwitch) *mo.DistributedVirtualSwitch {
	return &s.ctx.Map.Get(d.Reference()).(*simulator.DistributedVirtualSwitch).DistributedVirtualSwitch
}

func (s *Sim) addStandard(ctx context.Context, n NetworkSpec, hosts []*object.HostSystem) error {
	ns, err := hosts[0].ConfigManager().NetworkSystem(ctx)
	if err != nil {
		return err
	}
	if err := ns.AddPortGroup(ctx, types.HostPortGroupSpec{Name: n.Name, VswitchName: "vSwitch0"}); err != nil {
		return err
	}
	var net *mo.Network
	for _, obj := range s.ctx.Map.All("Network") {
		if nw, ok := obj.(*mo.Network); ok && nw.Name == n.Name {
			net = nw
		}
	}
	if net == nil {
		return fmt.Errorf("port group not created")
	}
	for _, h := range hosts {
		hs := s.ctx.Map.Get(h.Reference()).(*simulator.HostSystem)
		s.ctx.Map.AppendReference(s.ctx, hs, &hs.Network, net.Self)
		net.Host = append(net.Host, h.Reference())
	}
	return nil
}

// setupNICs puts a host's NICs into its PCI devices, uplinks (config.network.pnic) and NUMA nodes; their
// SR-IOV and passthrough state follows the farm (refreshNICs).
func (s *Sim) setupNICs(h *simulator.HostSystem, name string) {
	nics, _ := s.Farm.NICs(name)
	gpus, _ := s.Farm.GPUs(name)
	hw := h.Hardware
	nodes := []types.HostNumaNode{{TypeId: 0}, {TypeId: 1}}
	for i, g := range gpus {
		node := 0
		if i >= (len(gpus)+1)/2 {
			node = 1
		}
		nodes[node].PciId = append(nodes[node].PciId, g.PCIID)
	}
	for _, n := range nics {
		hw.PciDevice = append(hw.PciDevice, nicPCIDevice(n))
		nodes[n.NUMANode].PciId = append(nodes[n.NUMANode].PciId, n.PCIID)
		if h.Config != nil && h.Config.Network != nil {
			h.Config.Network.Pnic = append(h.Config.Network.Pnic, types.PhysicalNic{
				Key: "key-vim.host.PhysicalNic-" + n.Vmnic, Device: n.Vmnic, Pci: n.PCIID, Driver: "nmlx5_core",
				LinkSpeed: &types.PhysicalNicLinkInfo{SpeedMb: 200000, Duplex: true},
			})
			h.Config.Network.RdmaDevice = append(h.Config.Network.RdmaDevice, rdmaDevice(len(h.Config.Network.RdmaDevice), n))
		}
	}
	hw.PciDevice = append(hw.PciDevice, bridges(hw.PciDevice)...)
	hw.NumaInfo = &types.HostNumaInfo{Type: "NUMA", NumNodes: 2, NumaNode: nodes}
	if h.Capability != nil {
		h.Capability.DeviceRebindWithoutRebootSupported = types.NewBool(false)
	}
}

// intelVendor is 0x8086 as vSphere's signed 16-bit vendorId holds it.
var intelVendor = int16(-0x7f7a)

// bridges are the root ports the GPUs and NICs sit under, as hardware.pciDevice lists them on a real host (class
// 0x0604, PCI-to-PCI bridge), each the top of its chain: the lean reader must keep them for the PCI roots.
func bridges(devices []types.HostPciDevice) []types.HostPciDevice {
	listed := map[string]bool{}
	for _, d := range devices {
		listed[d.Id] = true
	}
	var out []types.HostPciDevice
	for _, d := range devices {
		if d.ParentBridge == "" || listed[d.ParentBridge] {
			continue
		}
		listed[d.ParentBridge] = true
		var bus, slot, fn int
		_, _ = fmt.Sscanf(d.ParentBridge, "0000:%x:%x.%x", &bus, &slot, &fn)
		out = append(out, types.HostPciDevice{
			Id: d.ParentBridge, ClassId: 0x0604, Bus: byte(bus), Slot: byte(slot), Function: byte(fn),
			VendorId: intelVendor, SubVendorId: intelVendor, VendorName: "Intel Corporation",
			DeviceId: int16(0x347a), DeviceName: "PCI Express Root Port",
		})
	}
	return out
}

// nicPCIDevice is a NIC as hardware.pciDevice lists it, under the root bridge of the GPUs of its NUMA node
// (node 0: the GPUs' first root, node 1: the second; see pciDevice).
func nicPCIDevice(n farm.NICInfo) types.HostPciDevice {
	var bus int
	_, _ = fmt.Sscanf(n.PCIID, "0000:%x:", &bus)
	parent := []string{"0000:3a:00.0", "0000:5d:00.0"}[n.NUMANode%2]
	return types.HostPciDevice{
		Id: n.PCIID, ClassId: 0x0200, Bus: byte(bus), VendorId: int16(farm.NICVendorID),
		SubVendorId: int16(farm.NICVendorID), VendorName: farm.NICVendorName, DeviceId: int16(n.DeviceID),
		DeviceName: n.DeviceName, ParentBridge: parent,
	}
}

// passthruInfo is the host's config.pciPassthruInfo: GPUs, then NICs (HostSriovInfo).
func (s *Sim) passthruInfo(name string) []types.BaseHostPciPassthruInfo {
	gpus, _ := s.Farm.GPUs(name)
	nics, _ := s.Farm.NICs(name)
	var out []types.BaseHostPciPassthruInfo
	for _, g := range gpus {
		out = append(out, &types.HostPciPassthruInfo{Id: g.PCIID, PassthruCapable: true})
	}
	for _, n := range nics {
		out = append(out, &types.HostSriovInfo{
			HostPciPassthruInfo: types.HostPciPassthruInfo{Id: n.PCIID, PassthruCapable: true,
				PassthruEnabled: n.PassthruEnabled, PassthruActive: n.PassthruActive},
			SriovEnabled: n.SRIOVEnabled, SriovCapable: n.SRIOVCapable, SriovActive: n.SRIOVActive,
			NumVirtualFunctionRequested: int32(n.NumVFRequested), NumVirtualFunction: int32(n.NumVF),
			MaxVirtualFunctionSupported: int32(n.MaxVF),
		})
	}
	return out
}

// systemID is what a DirectPath or SR-IOV backing names the host by (QueryConfigTarget).
func systemID(host string) string { return "gpusim-" + host }

// nicTargets are QueryConfigTarget's sriov (every SR-IOV NIC) and pciPassthrough (NICs enabled for it) lists.
func (s *Sim) nicTargets(host string) ([]types.VirtualMachineSriovInfo, []types.BaseVirtualMachinePciPassthroughInfo) {
	nics, _ := s.Farm.NICs(host)
	var sriov []types.VirtualMachineSriovInfo
	var pt []types.BaseVirtualMachinePciPassthroughInfo
	for _, n := range nics {
		info := types.VirtualMachinePciPassthroughInfo{
			VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: n.PCIID}, PciDevice: nicPCIDevice(n),
			SystemId: systemID(host),
		}
		if n.SRIOVActive {
			sriov = append(sriov, types.VirtualMachineSriovInfo{VirtualMachinePciPassthroughInfo: info, Pnic: n.Vmnic})
		}
		if n.PassthruActive {
			pt = append(pt, &info)
		}
	}
	return sriov, pt
}

// ------------------------------------------------------------------------------------------ VM rules

// isDistributed reports whether an ethernet card is backed by a distributed port group.
func isDistributed(card types.BaseVirtualEthernetCard) bool {
	_, ok := card.GetVirtualEthernetCard().Backing.(*types.VirtualEthernetCardDistributedVirtualPortBackingInfo)
	return ok
}

// physicalNIC reports whether a device holds a physical NIC at power-on (an SR-IOV VF or a passthrough NIC).
func physicalNIC(d types.BaseVirtualDevice) bool {
	switch dev := d.(type) {
	case *types.VirtualSriovEthernetCard:
		return true
	case *types.VirtualPCIPassthrough:
		switch dev.Backing.(type) {
		case *types.VirtualPCIPassthroughDeviceBackingInfo, *types.VirtualPCIPassthroughDynamicBackingInfo:
			return true
		}
	}
	return false
}

// checkAdapters applies the adapter rules to a device change: PVRDMA needs a distributed port group (vSphere
// Networking, "PVRDMA Support"), SR-IOV and passthrough adapters are added or removed only while powered off.
func (s *Sim) checkAdapters(power types.VirtualMachinePowerState, changes []types.BaseVirtualDeviceConfigSpec) types.BaseMethodFault {
	for i, c := range changes {
		spec := c.GetVirtualDeviceConfigSpec()
		if spec.Device == nil || spec.Operation == types.VirtualDeviceConfigSpecOperationRemove && !physicalNIC(spec.Device) {
			continue
		}
		if rdma, ok := spec.Device.(*types.VirtualVmxnet3Vrdma); ok && spec.Operation != types.VirtualDeviceConfigSpecOperationRemove {
			if !isDistributed(rdma) {
				return s.messages.With(fault.InvalidDeviceSpec(i),
					"A PVRDMA network adapter must be connected to a distributed port group.")
			}
		}
		if physicalNIC(spec.Device) && power != types.VirtualMachinePowerStatePoweredOff &&
			spec.Operation != types.VirtualDeviceConfigSpecOperationEdit {
			return s.messages.With(fault.DeviceHotPlugNotSupported(i),
				"SR-IOV and PCI passthrough devices can only be added or removed while the virtual machine is powered off.")
		}
	}
	return nil
}

// nicNeeds lists the physical NICs a VM's devices take at power-on.
func (s *Sim) nicNeeds(devices []types.BaseVirtualDevice, host string) ([]farm.NICNeed, types.BaseMethodFault) {
	var out []farm.NICNeed
	for _, d := range devices {
		switch dev := d.(type) {
		case *types.VirtualSriovEthernetCard:
			if dev.SriovBacking == nil || dev.SriovBacking.PhysicalFunctionBacking == nil {
				return nil, fault.InvalidDeviceSpec(0)
			}
			pf := dev.SriovBacking.PhysicalFunctionBacking
			if pf.SystemId != "" && pf.SystemId != systemID(host) {
				return nil, fault.InvalidDeviceSpec(0)
			}
			out = append(out, farm.NICNeed{Kind: "sriov", PCIID: strings.ToLower(pf.Id)})
		case *types.VirtualPCIPassthrough:
			switch b := dev.Backing.(type) {
			case *types.VirtualPCIPassthroughDeviceBackingInfo:
				if s.isNIC(host, b.Id) {
					out = append(out, farm.NICNeed{Kind: "passthrough", PCIID: strings.ToLower(b.Id)})
				}
			case *types.VirtualPCIPassthroughDynamicBackingInfo:
				need := farm.NICNeed{Kind: "passthrough"}
				for _, a := range b.AllowedDevice {
					need.Allowed = append(need.Allowed, [2]int{int(a.VendorId), int(a.DeviceId)})
				}
				out = append(out, need)
			}
		}
	}
	return out, nil
}

func (s *Sim) isNIC(host, pciID string) bool {
	nics, _ := s.Farm.NICs(host)
	for _, n := range nics {
		if strings.EqualFold(n.PCIID, pciID) {
			return true
		}
	}
	return false
}

// admitNICs takes the VM's VFs and passthrough NICs at power-on, all or none.
func (s *Sim) admitNICs(vm *simulator.VirtualMachine) types.BaseMethodFault {
	host := s.hostOf(vm.Runtime.Host)
	needs, f := s.nicNeeds(vm.Config.Hardware.Device, host)
	if f != nil {
		return s.messages.With(f, fmt.Sprintf("An SR-IOV adapter of %s names no physical function of host %s.", vm.Name, host))
	}
	if _, err := s.Farm.AdmitNICs(host, vm.Self.Value, needs); err != nil {
		return s.messages.With(fault.InsufficientResources(), err.Error())
	}
	return nil
}

// NICState is the control endpoint's view of a host's NICs.
func (s *Sim) NICState(host string) ([]farm.NICInfo, error) {
	nics, err := s.Farm.NICs(host)
	sort.Slice(nics, func(i, j int) bool { return nics[i].PCIID < nics[j].PCIID })
	return nics, err
}

// vmxnet3Cards are a farm file VM's adapters on standard port groups.
func (s *Sim) vmxnet3Cards(portgroups []string) ([]types.BaseVirtualDevice, error) {
	var out []types.BaseVirtualDevice
	for i, name := range portgroups {
		var ref *types.ManagedObjectReference
		for _, obj := range s.ctx.Map.All("Network") {
			if nw, ok := obj.(*mo.Network); ok && nw.Name == name {
				r := nw.Self
				ref = &r
			}
		}
		if ref == nil {
			return nil, fmt.Errorf("no standard port group %q", name)
		}
		out = append(out, &types.VirtualVmxnet3{VirtualVmxnet: types.VirtualVmxnet{VirtualEthernetCard: types.VirtualEthernetCard{
			VirtualDevice: types.VirtualDevice{
				Key: int32(-10 - i),
				Backing: &types.VirtualEthernetCardNetworkBackingInfo{
					VirtualDeviceDeviceBackingInfo: types.VirtualDeviceDeviceBackingInfo{DeviceName: name}, Network: ref},
				Connectable: &types.VirtualDeviceConnectInfo{StartConnected: true, AllowGuestControl: true},
			},
			AddressType: string(types.VirtualEthernetCardMacTypeGenerated),
		}}})
	}
	return out, nil
}
