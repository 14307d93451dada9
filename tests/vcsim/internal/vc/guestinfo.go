package vc

import (
	"fmt"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"
)

// GuestReport is what VMware Tools in a VM's guest tells vSphere: the guest's state, its primary IP address
// and its host name. An empty IP clears the addresses; an empty host name keeps the last one reported.
type GuestReport struct {
	IP       string
	State    string // running | notRunning | shuttingDown | resetting | standby | unknown
	Hostname string
}

var guestStates = map[string]bool{"running": true, "notRunning": true, "shuttingDown": true, "resetting": true, "standby": true, "unknown": true}

// primaryNIC is the guest's view of the VM's first network adapter (its MAC address, device key and network),
// connected; a VM without one gets a NIC on "VM Network" with the first adapter's key.
func primaryNIC(vm *simulator.VirtualMachine) types.GuestNicInfo {
	nic := types.GuestNicInfo{Network: "VM Network", Connected: true, DeviceConfigId: 4000}
	for _, d := range vm.Config.Hardware.Device {
		card, ok := d.(types.BaseVirtualEthernetCard)
		if !ok {
			continue
		}
		eth := card.GetVirtualEthernetCard()
		nic.MacAddress, nic.DeviceConfigId = eth.MacAddress, eth.Key
		if b, ok := eth.Backing.(*types.VirtualEthernetCardNetworkBackingInfo); ok && b.DeviceName != "" {
			nic.Network = b.DeviceName
		}
		break
	}
	return nic
}

// ReportGuest sets a VM's guest properties as VMware Tools reports them: guest.guestState, guest.ipAddress,
// guest.net (one connected NIC with the address), guest.hostName, guest.toolsRunningStatus and
// guest.toolsStatus (running while the guest runs), guest.guestOperationsReady, and summary.guest.
func (s *Sim) ReportGuest(ref types.ManagedObjectReference, r GuestReport) error {
	if !guestStates[r.State] {
		return fmt.Errorf("unknown guest state %q", r.State)
	}
	vm, ok := s.vmObject(ref)
	if !ok {
		return fmt.Errorf("unknown VM %s", ref.Value)
	}
	ctx := &simulator.Context{Map: s.ctx.Map}
	s.ctx.Map.WithLock(ctx, vm, func() {
		guest := types.GuestInfo{}
		if vm.Guest != nil {
			guest = *vm.Guest
		}
		running := r.State == "running"
		guest.GuestState = r.State
		guest.IpAddress = r.IP
		if r.Hostname != "" {
			guest.HostName = r.Hostname
		}
		guest.ToolsRunningStatus = string(types.VirtualMachineToolsRunningStatusGuestToolsNotRunning)
		guest.ToolsStatus = types.VirtualMachineToolsStatusToolsNotRunning
		if running {
			guest.ToolsRunningStatus = string(types.VirtualMachineToolsRunningStatusGuestToolsRunning)
			guest.ToolsStatus = types.VirtualMachineToolsStatusToolsOk
		}
		guest.GuestOperationsReady = types.NewBool(running)
		guest.Net = nil // what a guest without VMware Tools running reports
		if r.IP != "" {
			nic := primaryNIC(vm)
			nic.IpAddress = []string{r.IP}
			guest.Net = []types.GuestNicInfo{nic}
		}
		summary := vm.Summary.Guest
		sg := types.VirtualMachineGuestSummary{}
		if summary != nil {
			sg = *summary
		}
		sg.IpAddress, sg.HostName, sg.ToolsRunningStatus = guest.IpAddress, guest.HostName, guest.ToolsRunningStatus
		sg.ToolsStatus = guest.ToolsStatus
		ctx.Map.Update(ctx, vm, []types.PropertyChange{
			{Name: "guest", Val: &guest},
			{Name: "summary.guest", Val: &sg},
		})
	})
	return nil
}
