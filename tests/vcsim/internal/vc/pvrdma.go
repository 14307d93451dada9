package vc

import (
	"fmt"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

// The host side of PVRDMA, as vgpuctl's pvrdma host setting reads and writes it: the advanced option
// Net.PVRDMAVmknic (a string, empty until a VMkernel adapter is tagged; ESXi 6.5 and later have it), the
// firewall ruleset pvrdma (disabled, as on a new host), the distributed switches a host is a member of
// (config.network.proxySwitch), a VMkernel adapter on a distributed port group whose farm entry names one
// (`networks[].vmknic`), and an RDMA device per ConnectX NIC (config.network.rdmaDevice, API 7.0).

// PVRDMAOption is the host advanced option that names the VMkernel adapter PVRDMA uses.
const PVRDMAOption = "Net.PVRDMAVmknic"

// setupPVRDMA gives a host its own firewall rulesets (vcsim's hosts share one list, so enabling a ruleset on
// one host would enable it on all) and the Net.PVRDMAVmknic option.
func (s *Sim) setupPVRDMA(h *simulator.HostSystem) {
	if ref := h.ConfigManager.FirewallSystem; ref != nil {
		if fw, ok := s.ctx.Map.Get(*ref).(*simulator.HostFirewallSystem); ok && fw.FirewallInfo != nil {
			info := *fw.FirewallInfo
			info.Ruleset = append([]types.HostFirewallRuleset(nil), info.Ruleset...)
			fw.FirewallInfo = &info
			if h.Config != nil {
				h.Config.Firewall = &info
			}
		}
	}
	if ref := h.ConfigManager.AdvancedOption; ref != nil && h.Config != nil {
		if om, ok := s.ctx.Map.Get(*ref).(*simulator.OptionManager); ok {
			h.Config.Option = append(h.Config.Option, &types.OptionValue{Key: PVRDMAOption, Value: ""})
			om.Setting = h.Config.Option
		}
	}
}

// joinSwitch records a host's membership of a distributed switch (config.network.proxySwitch).
func joinSwitch(h *simulator.HostSystem, dvs *mo.DistributedVirtualSwitch) {
	if h.Config == nil || h.Config.Network == nil {
		return
	}
	h.Config.Network.ProxySwitch = append(h.Config.Network.ProxySwitch, types.HostProxySwitch{
		DvsUuid: dvs.Uuid, DvsName: dvs.Name, Key: dvs.Uuid, NumPorts: 512, NumPortsAvailable: 512,
	})
}

// addVmknic puts a VMkernel adapter on a distributed port group of a host (config.network.vnic).
func addVmknic(h *simulator.HostSystem, device string, dvs *mo.DistributedVirtualSwitch, pgKey string) {
	if h.Config == nil || h.Config.Network == nil {
		return
	}
	n := len(h.Config.Network.Vnic)
	h.Config.Network.Vnic = append(h.Config.Network.Vnic, types.HostVirtualNic{
		Device: device, Key: "key-vim.host.VirtualNic-" + device,
		Spec: types.HostVirtualNicSpec{
			Ip:  &types.HostIpConfig{IpAddress: fmt.Sprintf("10.0.40.%d", 200+n), SubnetMask: "255.255.255.0"},
			Mac: fmt.Sprintf("00:50:56:6a:%02x:%02x", n, len(h.Config.Network.ProxySwitch)),
			Mtu: 9000,
			DistributedVirtualPort: &types.DistributedVirtualSwitchPortConnection{
				SwitchUuid: dvs.Uuid, PortgroupKey: pgKey,
			},
		},
	})
}

// rdmaDevice is the RDMA device ESXi pairs with a ConnectX uplink (vmrdmaN, driver nmlx5_rdma).
func rdmaDevice(i int, n farm.NICInfo) types.HostRdmaDevice {
	return types.HostRdmaDevice{
		Key: fmt.Sprintf("key-vim.host.RdmaDevice-vmrdma%d", i), Device: fmt.Sprintf("vmrdma%d", i),
		Driver: "nmlx5_rdma", Description: n.DeviceName,
		Backing:        &types.HostRdmaDevicePnicBacking{PairedUplink: "key-vim.host.PhysicalNic-" + n.Vmnic},
		ConnectionInfo: types.HostRdmaDeviceConnectionInfo{State: "active", Mtu: 4096, SpeedInMbps: 200000},
		Capability:     types.HostRdmaDeviceCapability{RoceV1Capable: true, RoceV2Capable: true},
	}
}
